"""Compiles the schemas of messages.py into fast encoder/decoder functions (SPEC §11).

For one (api, version, request|response) the compiler writes straight-line Python source with
the field layout baked in: runs of fixed-width fields (and the length prefixes that follow
them) are read and written by one precompiled struct.Struct, arrays become plain loops, and
the decoded dict is built by one dict literal. The source is compiled once and cached by
codec.py, so nothing looks at the schema while a message is being read or written.

Generated decoders have the signature ``decode(buf, mv, pos) -> (dict, pos)`` where ``buf``
is the bytes-like input and ``mv`` a memoryview of it (``records`` fields come back as slices
of ``mv``, without a copy). Generated encoders have the signature ``encode(obj, out)`` and
append bytes-like pieces to the list ``out`` (``records``/``bytes`` values are appended as
given, so a caller can hand the list to ``writelines`` without joining).
"""

from __future__ import annotations

import struct
import uuid
from types import MappingProxyType

from .schema import Field

__all__ = ["Malformed", "compile_decoder", "compile_encoder", "read_uvarint", "uvarint"]


class Malformed(Exception):
    """Internal: raised by generated decoders; codec.py turns it into CorruptRequest/Response."""


# ---------------------------------------------------------------------------------------------
# Runtime helpers shared by all generated functions.

_UVT = [bytes((i,)) for i in range(128)]
_TWO = struct.Struct("BB").pack


def uvarint(n: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if n < 0x80:
        return _UVT[n]
    if n < 0x4000:
        return _TWO(0x80 | (n & 0x7F), n >> 7)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes, 32 bits) at pos; return (value, new_pos)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > 0xFFFFFFFF:
                raise Malformed("unsigned varint exceeds 32 bits")
            return result, pos
        shift += 7
        if shift > 28:
            raise Malformed("unsigned varint longer than 5 bytes")


def skip_tagged_fields(buf, pos: int, end: int) -> int:
    """Skip a whole tagged-field section starting at pos (its count); return the new pos."""
    n, pos = read_uvarint(buf, pos)
    if n > (end - pos) // 2:
        raise Malformed("tagged field count exceeds the remaining bytes")
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise Malformed("tagged field overruns the buffer")
    return pos


def _nbytes(value) -> int:
    return memoryview(value).nbytes


def _uuid_bytes(value) -> bytes:
    if value.__class__ is uuid.UUID:
        return value.bytes
    if isinstance(value, (bytes, bytearray, memoryview)) and len(value) == 16:
        return bytes(value)
    if isinstance(value, str):
        return uuid.UUID(value).bytes
    raise TypeError(f"cannot encode {value!r} as a uuid")


_BASE_NS = {
    "_UVT": _UVT,
    "_uv": uvarint,
    "_ruv": read_uvarint,
    "_skip": skip_tagged_fields,
    "_Bad": Malformed,
    "_UUID": uuid.UUID,
    "_uuidb": _uuid_bytes,
    "_nbytes": _nbytes,
    "_pack": struct.pack,
    "_unpack_from": struct.unpack_from,
}

# type -> (struct format, size)
_FIXED = {
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
    "int32": ("i", 4), "int64": ("q", 8), "float64": ("d", 8), "uuid": ("16s", 16),
}


def frozen_default(f: Field) -> MappingProxyType:
    """The default value of a struct field as a shared read-only mapping.

    Decoders hand it out for absent struct fields instead of building a dict per message.
    """
    return MappingProxyType({sf.name: frozen_default(sf) if sf.is_struct and not sf.is_array
                             else sf.default() for sf in f.fields})


def _is_fixed(f: Field) -> bool:
    return not f.is_array and f.type in _FIXED


class _Source:
    """Accumulates generated source and the constants it refers to."""

    def __init__(self):
        self.ns = dict(_BASE_NS)
        self.funcs: list[list[str]] = []
        self._n = 0
        self._consts: dict = {}
        self._structs: dict[str, str] = {}
        self._frozen: dict[int, str] = {}

    def var(self, prefix: str = "v") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value) -> str:
        """A name in the namespace bound to value (immutable values are shared)."""
        key = (type(value), value) if isinstance(value, (int, float, str, bytes, bool, uuid.UUID,
                                                         type(None))) else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = self.var("_k")
        self.ns[name] = value
        if key is not None:
            self._consts[key] = name
        return name

    def frozen(self, f: Field) -> str:
        """Name bound to the shared read-only default of struct field f (one per field)."""
        name = self._frozen.get(id(f))
        if name is None:
            name = self._frozen[id(f)] = self.var("_fd")
            self.ns[name] = frozen_default(f)
        return name

    def struct(self, fmt: str) -> str:
        name = self._structs.get(fmt)
        if name is None:
            name = self.var("_S")
            self.ns[name] = struct.Struct(fmt)
            self._structs[fmt] = name
        return name

    def compile(self, main: str, label: str):
        src = "\n".join("\n".join(lines) for lines in self.funcs)
        code = compile(src, f"<{label} {main}>", "exec")
        exec(code, self.ns)  # noqa: S102 - source generated above from static schemas
        return self.ns[main], src


def _active(fields: list[Field], version: int, flexible: bool):
    untagged = []
    tagged = []
    for f in fields:
        if not f.present(version):
            continue
        if flexible and f.tagged_in(version):
            tagged.append(f)
        else:
            untagged.append(f)
    tagged.sort(key=lambda f: f.tag)
    return untagged, tagged


def _min_size(fields: list[Field], version: int, flexible: bool) -> int:
    """Smallest number of bytes a struct of these fields occupies on the wire."""
    untagged, _ = _active(fields, version, flexible)
    size = 1 if flexible else 0
    for f in untagged:
        if _is_fixed(f):
            size += _FIXED[f.type][1]
        elif f.is_array or f.type in ("bytes", "records"):
            size += 1 if flexible else 4
        elif f.type == "string":
            size += 1 if flexible else 2
        elif f.is_struct:
            size += 1 if f.nullable_in(version) else _min_size(f.fields, version, flexible)
    return size


# ---------------------------------------------------------------------------------------------
# Decoder generation.

class _Decoder:
    def __init__(self, src: _Source, version: int, flexible: bool):
        self.src = src
        self.v = version
        self.flex = flexible

    # The code of one function body is collected in self.lines (a list shared by the helpers).
    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def flush(self, ind: int, pending: list) -> None:
        if not pending:
            return
        fmt = ">" + "".join(p[0] for p in pending)
        names = [p[1] for p in pending if p[1] is not None]
        s = self.src.struct(fmt)
        size = struct.calcsize(fmt)
        self.emit(ind, f"{', '.join(names)}, = {s}.unpack_from(buf, pos)")
        self.emit(ind, f"pos += {size}")
        pending.clear()

    def read_uvarint(self, ind: int, var: str, two_bytes: bool = False) -> None:
        """Read an unsigned varint into var; one-byte values (and, where lengths of big
        values are common, two-byte values) are handled inline without a call."""
        self.emit(ind, f"{var} = buf[pos]")
        self.emit(ind, f"if {var} < 128:")
        self.emit(ind + 1, "pos += 1")
        if two_bytes:
            self.emit(ind, "elif buf[pos + 1] < 128:")
            self.emit(ind + 1, f"{var} = ({var} & 127) | (buf[pos + 1] << 7)")
            self.emit(ind + 1, "pos += 2")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{var}, pos = _ruv(buf, pos)")

    def default_expr(self, f: Field) -> str:
        value = f.default()
        if isinstance(value, list):
            return "[]"
        if isinstance(value, dict):
            return self.src.frozen(f)
        return self.src.const(value)

    def struct_body(self, fields: list[Field], ind: int) -> str:
        """Emit code decoding one struct; return the name of the variable holding the dict."""
        untagged, tagged = _active(fields, self.v, self.flex)
        values: dict[str, str] = {}
        pending: list = []
        for f in untagged:
            values[f.name] = self.value(f, ind, pending)
        if self.flex:
            if tagged:
                self.flush(ind, pending)
                self.tag_section(tagged, ind, values)
            elif pending:
                tc = self.src.var("tc")
                pending.append(("B", tc))
                self.flush(ind, pending)
                self.emit(ind, f"if {tc}:")
                self.emit(ind + 1, "pos = _skip(buf, pos - 1, end)")
            else:
                self.emit(ind, "if buf[pos]:")
                self.emit(ind + 1, "pos = _skip(buf, pos, end)")
                self.emit(ind, "else:")
                self.emit(ind + 1, "pos += 1")
        self.flush(ind, pending)
        res = self.src.var("r")
        parts = ", ".join(f"{f.name!r}: {values.get(f.name) or self.default_expr(f)}"
                          for f in fields)
        self.emit(ind, f"{res} = {{{parts}}}")
        return res

    def tag_section(self, tagged: list[Field], ind: int, values: dict) -> None:
        for f in tagged:
            var = self.src.var("tv")
            self.emit(ind, f"{var} = {self.default_expr(f)}")
            values[f.name] = var
        n, tag, size, te = (self.src.var(p) for p in ("tn", "tg", "tz", "te"))
        self.read_uvarint(ind, n)
        self.emit(ind, f"if {n} > (end - pos) // 2:")
        self.emit(ind + 1, "raise _Bad('tagged field count exceeds the remaining bytes')")
        self.emit(ind, f"for _ in range({n}):")
        self.read_uvarint(ind + 1, tag)
        self.read_uvarint(ind + 1, size)
        self.emit(ind + 1, f"{te} = pos + {size}")
        self.emit(ind + 1, f"if {te} > end:")
        self.emit(ind + 2, "raise _Bad('tagged field overruns the buffer')")
        kw = "if"
        for f in tagged:
            fn = self.tagged_field_function(f)
            self.emit(ind + 1, f"{kw} {tag} == {f.tag}:")
            self.emit(ind + 2, f"{values[f.name]} = {fn}(buf, mv, pos, {te})")
            kw = "elif"
        self.emit(ind + 1, f"pos = {te}")

    def tagged_field_function(self, f: Field) -> str:
        """A separate function decoding one tagged field from buf[pos:end]."""
        name = self.src.var("_tf")
        saved = self.lines
        self.lines = [f"def {name}(buf, mv, pos, end):"]
        pending: list = []
        expr = self.value(f, 1, pending)
        self.flush(1, pending)
        self.emit(1, f"return {expr}")
        self.src.funcs.append(self.lines)
        self.lines = saved
        return name

    def value(self, f: Field, ind: int, pending: list) -> str:
        """Emit code for one untagged field; return an expression for its value.

        Fixed-width fields only join `pending` (read later by one Struct); variable-length
        fields add their length prefix to `pending`, flush it, then read their content.
        """
        v = self.v
        if _is_fixed(f):
            var = self.src.var()
            fmt = _FIXED[f.type][0]
            pending.append((fmt, var))
            return f"_UUID(bytes={var})" if f.type == "uuid" else var
        nullable = f.nullable_in(v)
        if f.is_array:
            return self.array(f, ind, pending, nullable)
        if f.is_struct:
            self.flush(ind, pending)
            if nullable:
                mark = self.src.var("m")
                res = self.src.var()
                pending.append(("b", mark))
                self.flush(ind, pending)
                self.emit(ind, f"if {mark} < 0:")
                self.emit(ind + 1, f"{res} = None")
                self.emit(ind, "else:")
                inner = self.struct_body(f.fields, ind + 1)
                self.emit(ind + 1, f"{res} = {inner}")
                return res
            return self.struct_body(f.fields, ind)
        n = self.length(ind, pending, "h" if f.type == "string" else "i",
                        big=f.type != "string")
        res = self.src.var()
        self.emit(ind, f"if {n} < 0:")
        if nullable:
            self.emit(ind + 1, f"if {n} != -1:")
            self.emit(ind + 2, f"raise _Bad('negative length for {f.name}')")
            self.emit(ind + 1, f"{res} = None")
        else:
            self.emit(ind + 1, f"raise _Bad('null or negative length for non-nullable {f.name}')")
        self.emit(ind, "else:")
        e = self.src.var("e")
        self.emit(ind + 1, f"{e} = pos + {n}")
        self.emit(ind + 1, f"if {e} > end:")
        self.emit(ind + 2, f"raise _Bad('{f.name} overruns the buffer')")
        if f.type == "string":
            if self.flex:
                self.emit(ind + 1, f"if {n} > 32767:")
                self.emit(ind + 2, f"raise _Bad('{f.name} longer than 32767 bytes')")
            self.emit(ind + 1, f"{res} = str(buf[pos:{e}], 'utf-8')")
        elif f.type == "records":
            self.emit(ind + 1, f"{res} = mv[pos:{e}]")
        else:
            self.emit(ind + 1, f"{res} = bytes(buf[pos:{e}])")
        self.emit(ind + 1, f"pos = {e}")
        return res

    def length(self, ind: int, pending: list, fmt: str, big: bool = False) -> str:
        """Emit code leaving a length/count in a variable (-1 meaning null)."""
        n = self.src.var("n")
        if self.flex:
            self.flush(ind, pending)
            self.read_uvarint(ind, n, two_bytes=big)
            self.emit(ind, f"{n} -= 1")
        else:
            pending.append((fmt, n))
            self.flush(ind, pending)
        return n

    def array(self, f: Field, ind: int, pending: list, nullable: bool) -> str:
        n = self.length(ind, pending, "i")
        res = self.src.var("a")
        self.emit(ind, f"if {n} < 0:")
        if nullable:
            self.emit(ind + 1, f"if {n} != -1:")
            self.emit(ind + 2, f"raise _Bad('negative count for {f.name}')")
            self.emit(ind + 1, f"{res} = None")
        else:
            self.emit(ind + 1, f"raise _Bad('null or negative count for non-nullable {f.name}')")
        self.emit(ind, "else:")
        ind += 1
        if f.is_struct:
            minsz = max(1, _min_size(f.fields, self.v, self.flex))
        elif f.elem in _FIXED:
            minsz = _FIXED[f.elem][1]
        else:
            minsz = 1 if self.flex else (2 if f.elem == "string" else 4)
        limit = "end - pos" if minsz == 1 else f"(end - pos) // {minsz}"
        self.emit(ind, f"if {n} > {limit}:")
        self.emit(ind + 1, f"raise _Bad('count of {f.name} exceeds the remaining bytes')")
        if f.elem in _FIXED and f.elem != "uuid":
            fmt = _FIXED[f.elem][0]
            self.emit(ind, f"{res} = list(_unpack_from('>%d{fmt}' % {n}, buf, pos))")
            self.emit(ind, f"pos += {n} * {minsz}")
            return res
        app = self.src.var("ap")
        self.emit(ind, f"{res} = []")
        self.emit(ind, f"{app} = {res}.append")
        self.emit(ind, f"for _ in range({n}):")
        if f.is_struct:
            item = self.struct_body(f.fields, ind + 1)
        else:
            elem = Field(f.name, f.elem, "0+")
            inner: list = []
            item = self.value(elem, ind + 1, inner)
            self.flush(ind + 1, inner)
        self.emit(ind + 1, f"{app}({item})")
        return res


def compile_decoder(fields: list[Field], version: int, flexible: bool, label: str):
    """Return (decode(buf, mv, pos) -> (dict, pos), generated_source)."""
    src = _Source()
    gen = _Decoder(src, version, flexible)
    gen.lines = ["def decode(buf, mv, pos):", "    end = len(buf)"]
    res = gen.struct_body(fields, 1)
    gen.emit(1, f"return {res}, pos")
    src.funcs.append(gen.lines)
    return src.compile("decode", label)


# ---------------------------------------------------------------------------------------------
# Encoder generation.

class _Encoder:
    def __init__(self, src: _Source, version: int, flexible: bool):
        self.src = src
        self.v = version
        self.flex = flexible

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def flush(self, ind: int, pending: list) -> None:
        if not pending:
            return
        fmt = ">" + "".join(p[0] for p in pending)
        args = ", ".join(p[1] for p in pending if p[1] is not None)
        if args:
            self.emit(ind, f"ap({self.src.struct(fmt)}.pack({args}))")
        else:
            self.emit(ind, f"ap({self.src.const(struct.pack(fmt))})")
        pending.clear()

    def write_uvarint(self, ind: int, expr: str) -> None:
        t = self.src.var("u")
        self.emit(ind, f"{t} = {expr}")
        self.emit(ind, f"ap(_UVT[{t}] if {t} < 128 else _uv({t}))")

    def default_const(self, f: Field) -> str:
        value = f.default()
        if isinstance(value, list):
            return self.src.const(())
        if isinstance(value, dict):
            return self.src.frozen(f)
        return self.src.const(value)

    def struct_body(self, fields: list[Field], ind: int, d: str) -> None:
        untagged, tagged = _active(fields, self.v, self.flex)
        pending: list = []
        for f in untagged:
            get = f"{d}.get({f.name!r}, {self.default_const(f)})"
            if _is_fixed(f):
                fmt = _FIXED[f.type][0]
                pending.append((fmt, f"_uuidb({get})" if f.type == "uuid" else get))
                continue
            x = self.src.var("x")
            self.emit(ind, f"{x} = {get}")
            self.value(f, ind, pending, x)
        if self.flex:
            if tagged:
                self.flush(ind, pending)
                self.tag_section(tagged, ind, d)
            else:
                pending.append(("x", None))
        self.flush(ind, pending)

    def tag_section(self, tagged: list[Field], ind: int, d: str) -> None:
        """Write the tagged fields whose value differs from their default (ascending tags)."""
        # fast path: none of the tagged keys is in the dict at all
        self.emit(ind, "if " + " or ".join(f"{f.name!r} in {d}" for f in tagged) + ":")
        self.tagged_parts(tagged, ind + 1, d)
        self.emit(ind, "else:")
        self.emit(ind + 1, "ap(b'\\x00')")

    def tagged_parts(self, tagged: list[Field], ind: int, d: str) -> None:
        parts = self.src.var("tp")
        self.emit(ind, f"{parts} = None")
        for f in tagged:
            x = self.src.var("x")
            dflt = f.default()
            k = self.default_const(f)
            self.emit(ind, f"{x} = {d}.get({f.name!r}, {k})")
            if isinstance(dflt, list):
                cond = x
            elif dflt is None:
                cond = f"{x} is not None"
            else:
                cond = f"{x} is not {k} and {x} != {k}"
            fn = self.tagged_field_function(f)
            b = self.src.var("b")
            self.emit(ind, f"if {cond}:")
            self.emit(ind + 1, f"{b} = {fn}({x})")
            self.emit(ind + 1, f"{b} = {self.src.const(uvarint(f.tag))} + _uv(len({b})) + {b}")
            self.emit(ind + 1, f"if {parts} is None:")
            self.emit(ind + 2, f"{parts} = [{b}]")
            self.emit(ind + 1, "else:")
            self.emit(ind + 2, f"{parts}.append({b})")
        self.emit(ind, f"if {parts} is None:")
        self.emit(ind + 1, "ap(b'\\x00')")
        self.emit(ind, "else:")
        self.write_uvarint(ind + 1, f"len({parts})")
        self.emit(ind + 1, f"out.extend({parts})")

    def tagged_field_function(self, f: Field) -> str:
        name = self.src.var("_te")
        saved = self.lines
        self.lines = [f"def {name}(x):", "    out = []", "    ap = out.append"]
        pending: list = []
        if _is_fixed(f):
            fmt = _FIXED[f.type][0]
            pending.append((fmt, "_uuidb(x)" if f.type == "uuid" else "x"))
        else:
            self.value(f, 1, pending, "x")
        self.flush(1, pending)
        self.emit(1, "return b''.join(out)")
        self.src.funcs.append(self.lines)
        self.lines = saved
        return name

    def length(self, ind: int, pending: list, fmt: str, expr: str) -> None:
        """Write a length/count (expr may be -1 for null) in the classic or compact form."""
        if self.flex:
            self.flush(ind, pending)
            self.write_uvarint(ind, f"{expr} + 1")
        else:
            pending.append((fmt, expr))
            self.flush(ind, pending)

    def value(self, f: Field, ind: int, pending: list, x: str) -> None:
        """Emit code writing the value held by variable x (not for fixed-width scalars)."""
        nullable = f.nullable_in(self.v)
        if f.is_array:
            self.array(f, ind, pending, x, nullable)
            return
        if f.is_struct:
            if nullable:
                self.flush(ind, pending)
                self.emit(ind, f"if {x} is None:")
                self.emit(ind + 1, "ap(b'\\xff')")
                self.emit(ind, "else:")
                self.emit(ind + 1, "ap(b'\\x01')")
                self.struct_body(f.fields, ind + 1, x)
            else:
                self.struct_body(f.fields, ind, x)
            return
        if f.type == "string":
            xb = self.src.var("s")
            ln = self.src.var("l")
            if nullable:
                self.emit(ind, f"if {x} is None:")
                self.emit(ind + 1, f"{xb} = b''")
                self.emit(ind + 1, f"{ln} = -1")
                self.emit(ind, "else:")
                self.emit(ind + 1, f"{xb} = {x}.encode('utf-8')")
                self.emit(ind + 1, f"{ln} = len({xb})")
            else:
                self.emit(ind, f"{xb} = {x}.encode('utf-8')")
                self.emit(ind, f"{ln} = len({xb})")
            if self.flex:
                self.flush(ind, pending)
                u = self.src.var("u")
                self.emit(ind, f"{u} = {ln} + 1")
                self.emit(ind, f"ap((_UVT[{u}] if {u} < 128 else _uv({u})) + {xb})")
            else:
                pending.append(("h", ln))
                self.flush(ind, pending)
                self.emit(ind, f"ap({xb})")
            return
        # bytes / records: appended as given (no copy); anything but bytes is measured in
        # bytes through a memoryview, which also refuses str and other non-buffers
        ln = self.src.var("l")
        if nullable:
            self.emit(ind, f"if {x} is None:")
            self.emit(ind + 1, f"{ln} = -1")
            self.emit(ind, f"elif {x}.__class__ is bytes:")
            self.emit(ind + 1, f"{ln} = len({x})")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{ln} = _nbytes({x})")
        else:
            self.emit(ind, f"{ln} = len({x}) if {x}.__class__ is bytes else _nbytes({x})")
        self.length(ind, pending, "i", ln)
        if nullable:
            self.emit(ind, f"if {x} is not None:")
            self.emit(ind + 1, f"ap({x})")
        else:
            self.emit(ind, f"ap({x})")

    def array(self, f: Field, ind: int, pending: list, x: str, nullable: bool) -> None:
        ln = self.src.var("l")
        if nullable:
            self.emit(ind, f"{ln} = -1 if {x} is None else len({x})")
        else:
            self.emit(ind, f"{ln} = len({x})")
        self.length(ind, pending, "i", ln)
        body = ind
        if nullable:
            self.emit(ind, f"if {x} is not None:")
            body = ind + 1
        if f.elem in _FIXED and f.elem != "uuid":
            fmt = _FIXED[f.elem][0]
            self.emit(body, f"ap(_pack('>%d{fmt}' % {ln}, *{x}))")
            return
        e = self.src.var("it")
        self.emit(body, f"for {e} in {x}:")
        if f.is_struct:
            self.struct_body(f.fields, body + 1, e)
        else:
            elem = Field(f.name, f.elem, "0+")
            inner: list = []
            if _is_fixed(elem):
                inner.append(("16s", f"_uuidb({e})"))
            else:
                self.value(elem, body + 1, inner, e)
            self.flush(body + 1, inner)


def compile_encoder(fields: list[Field], version: int, flexible: bool, label: str):
    """Return (encode(obj, out) -> None, generated_source)."""
    src = _Source()
    gen = _Encoder(src, version, flexible)
    gen.lines = ["def encode(d, out):", "    ap = out.append"]
    gen.struct_body(fields, 1, "d")
    gen.emit(1, "return out")
    src.funcs.append(gen.lines)
    return src.compile("encode", label)
