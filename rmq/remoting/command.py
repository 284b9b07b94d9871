"""RemotingCommand: one RocketMQ request or response, with its JSON (fastjson layout) and
ROCKETMQ binary header serializations and frame encode/decode (sans-IO).
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from typing import Any, Mapping

from . import fastjson
from .errors import BodyDecodeError, CommandDecodeError, CommandEncodeError, FramingError
from .frame import (DEFAULT_MAX_FRAME_SIZE, FRAME_PREFIX, LENGTH_PREFIX, MAX_HEADER_LENGTH,
                    check_payload_length, split_header_word)


class SerializeType:
    """High byte of the header-length word (SerializeType.java)."""
    JSON = 0
    ROCKETMQ = 1

    NAMES = {0: "JSON", 1: "ROCKETMQ"}
    BY_NAME = {"JSON": 0, "ROCKETMQ": 1}


class LanguageCode:
    """LanguageCode.java: the JSON header carries the name, the ROCKETMQ header the byte."""
    JAVA = "JAVA"
    CPP = "CPP"
    DOTNET = "DOTNET"
    PYTHON = "PYTHON"
    DELPHI = "DELPHI"
    ERLANG = "ERLANG"
    RUBY = "RUBY"
    OTHER = "OTHER"
    HTTP = "HTTP"
    GO = "GO"
    PHP = "PHP"
    OMS = "OMS"

    CODES = {"JAVA": 0, "CPP": 1, "DOTNET": 2, "PYTHON": 3, "DELPHI": 4, "ERLANG": 5,
             "RUBY": 6, "OTHER": 7, "HTTP": 8, "GO": 9, "PHP": 10, "OMS": 11}
    NAMES = {v: k for k, v in CODES.items()}


#: Flag bit 0 (RPC_TYPE): set on responses.  Flag bit 1 (RPC_ONEWAY): request wants no reply.
FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1

#: MQVersion.Version.V4_9_4.ordinal(): the "version" a RocketMQ 4.9.4 broker puts in its
#: commands (BrokerStartup sets rocketmq.remoting.version to CURRENT_VERSION).
MQ_VERSION_V4_9_4 = 401

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")

_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    """A fresh request id (wraps inside the positive int32 range)."""
    return next(_opaque_counter) & 0x7FFFFFFF


_encode_json_str = json.JSONEncoder(ensure_ascii=False).encode

# ROCKETMQ binary header: code int16, language byte, version int16, opaque int32, flag int32.
_RMQ_FIXED = struct.Struct(">hbhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


class RemotingCommand:
    """A RocketMQ remoting command (request or response).

    ``ext_fields`` is the ``extFields`` map (str -> str) that carries the custom header;
    ``serialize_type`` is the header format it arrived in or will be sent in
    (SerializeType.JSON or SerializeType.ROCKETMQ).
    """

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields",
                 "body", "serialize_type")

    def __init__(self, code: int = 0, *, language: str = LanguageCode.JAVA, version: int = 0,
                 opaque: int | None = None, flag: int = 0, remark: str | None = None,
                 ext_fields: Mapping[str, str] | None = None, body: bytes = b"",
                 serialize_type: int = SerializeType.JSON) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = next_opaque() if opaque is None else opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, str] = dict(ext_fields) if ext_fields else {}
        self.body = body
        self.serialize_type = serialize_type

    # ------------------------------------------------------------------ construction
    @classmethod
    def request(cls, code: int, ext_fields: Mapping[str, str] | None = None, body: bytes = b"",
                *, oneway: bool = False, **kwargs: Any) -> "RemotingCommand":
        """A request with a fresh opaque (unless ``opaque=`` is given)."""
        cmd = cls(code, ext_fields=ext_fields, body=body, **kwargs)
        if oneway:
            cmd.flag |= FLAG_ONEWAY
        return cmd

    @classmethod
    def response_to(cls, request: "RemotingCommand", code: int = 0, remark: str | None = None,
                    ext_fields: Mapping[str, str] | None = None, body: bytes = b"",
                    *, language: str = LanguageCode.JAVA,
                    version: int = MQ_VERSION_V4_9_4) -> "RemotingCommand":
        """The response to ``request``: same opaque, same serialize type, response flag set."""
        return cls(code, language=language, version=version, opaque=request.opaque,
                   flag=FLAG_RESPONSE, remark=remark, ext_fields=ext_fields, body=body,
                   serialize_type=request.serialize_type)

    # ------------------------------------------------------------------ flags
    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def mark_response_type(self) -> None:
        self.flag |= FLAG_RESPONSE

    def mark_oneway_rpc(self) -> None:
        self.flag |= FLAG_ONEWAY

    # ------------------------------------------------------------------ encoding
    def encode_header_json(self) -> bytes:
        """The JSON header as fastjson writes RemotingCommand: properties in alphabetical
        order, null ``remark``/``extFields`` left out, ``serializeTypeCurrentRPC`` = "JSON"."""
        parts = ['{"code":', str(int(self.code))]
        if self.ext_fields:
            parts.append(',"extFields":')
            parts.append(_encode_ext_fields_json(self.ext_fields))
        parts += [',"flag":', str(int(self.flag)), ',"language":', _encode_json_str(str(self.language)),
                  ',"opaque":', str(int(self.opaque))]
        if self.remark is not None:
            parts.append(',"remark":')
            parts.append(_encode_json_str(self.remark))
        parts += [',"serializeTypeCurrentRPC":"JSON","version":', str(int(self.version)), "}"]
        return "".join(parts).encode("utf-8")

    def encode_header_rocketmq(self) -> bytes:
        """The ROCKETMQ binary header (RocketMQSerializable layout)."""
        try:
            lang = LanguageCode.CODES.get(self.language, LanguageCode.CODES["OTHER"])
            fixed = _RMQ_FIXED.pack(_to_int16(self.code, "code"), lang,
                                    _to_int16(self.version, "version"),
                                    self.opaque, self.flag)
        except struct.error as exc:
            raise CommandEncodeError(f"header value out of range: {exc}") from None
        remark = self.remark.encode("utf-8") if self.remark else b""
        ext = encode_ext_fields_binary(self.ext_fields)
        return b"".join((fixed, _I32.pack(len(remark)), remark, _I32.pack(len(ext)), ext))

    def encode_header(self) -> bytes:
        """The header bytes in this command's ``serialize_type``."""
        if self.serialize_type == SerializeType.ROCKETMQ:
            return self.encode_header_rocketmq()
        if self.serialize_type == SerializeType.JSON:
            return self.encode_header_json()
        raise CommandEncodeError(f"unknown serialize type {self.serialize_type}")

    def encode_prefix(self, body_length: int | None = None) -> bytes:
        """Length field, header-length word and header: everything before the body.
        Send ``encode_prefix() + body`` (or write both without joining them)."""
        header = self.encode_header()
        if len(header) > MAX_HEADER_LENGTH:
            raise CommandEncodeError(f"header of {len(header)} bytes exceeds {MAX_HEADER_LENGTH}")
        blen = len(self.body) if body_length is None else body_length
        total = 4 + len(header) + blen
        if total > _INT32_MAX:
            raise CommandEncodeError(f"frame of {total} bytes does not fit the int32 length field")
        return FRAME_PREFIX.pack(total, (self.serialize_type << 24) | len(header)) + header

    def encode(self) -> bytes:
        """The complete frame, length field included."""
        prefix = self.encode_prefix()
        return prefix + bytes(self.body) if self.body else prefix

    # ------------------------------------------------------------------ decoding
    @classmethod
    def decode(cls, payload: bytes | bytearray | memoryview) -> "RemotingCommand":
        """Decode one frame payload (the bytes after the length field, as FrameDecoder
        returns them).  Raises CommandDecodeError."""
        mv = memoryview(payload)
        if len(mv) < 4:
            raise CommandDecodeError(f"frame payload of {len(mv)} bytes has no header-length word")
        (word,) = _I32.unpack_from(mv, 0)
        stype, hlen = split_header_word(word)
        if hlen > len(mv) - 4:
            raise CommandDecodeError(f"header length {hlen} exceeds the {len(mv) - 4} bytes "
                                     f"left in the frame")
        header = mv[4:4 + hlen]
        if stype == SerializeType.JSON:
            cmd = cls._decode_header_json(header)
        elif stype == SerializeType.ROCKETMQ:
            cmd = cls._decode_header_rocketmq(header)
        else:
            raise CommandDecodeError(f"unknown serialize type {stype} in header-length word")
        cmd.serialize_type = stype
        cmd.body = bytes(mv[4 + hlen:])
        return cmd

    @classmethod
    def decode_frame(cls, frame: bytes | bytearray | memoryview,
                     max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> "RemotingCommand":
        """Decode one complete frame including its 4-byte length field.
        Raises FramingError if the length field disagrees with the data."""
        mv = memoryview(frame)
        if len(mv) < 4:
            raise FramingError(f"frame of {len(mv)} bytes has no length field")
        (length,) = LENGTH_PREFIX.unpack_from(mv, 0)
        check_payload_length(length, max_frame_size)
        if length != len(mv) - 4:
            raise FramingError(f"frame length field says {length} bytes but {len(mv) - 4} follow")
        return cls.decode(mv[4:])

    @classmethod
    def _decode_header_json(cls, header: memoryview) -> "RemotingCommand":
        try:
            obj = fastjson.loads(header, what="JSON command header")
        except BodyDecodeError as exc:
            raise CommandDecodeError(str(exc)) from None
        if not isinstance(obj, dict):
            raise CommandDecodeError(f"JSON command header is a {type(obj).__name__}, not an object")
        cmd = cls.__new__(cls)
        cmd.code = _json_int(obj, "code")
        cmd.language = _json_language(obj.get("language"))
        cmd.version = _json_int(obj, "version")
        cmd.opaque = _json_int(obj, "opaque")
        cmd.flag = _json_int(obj, "flag")
        remark = obj.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise CommandDecodeError(f"JSON command header: remark is a {type(remark).__name__}")
        cmd.remark = remark
        cmd.ext_fields = _json_ext_fields(obj.get("extFields"))
        cmd.body = b""
        return cmd

    @classmethod
    def _decode_header_rocketmq(cls, header: memoryview) -> "RemotingCommand":
        n = len(header)
        if n < _RMQ_FIXED.size + 8:
            raise CommandDecodeError(f"ROCKETMQ header of {n} bytes is shorter than the "
                                     f"{_RMQ_FIXED.size + 8}-byte minimum")
        code, lang, version, opaque, flag = _RMQ_FIXED.unpack_from(header, 0)
        pos = _RMQ_FIXED.size
        (rlen,) = _I32.unpack_from(header, pos)
        pos += 4
        if rlen < 0 or rlen > n - pos - 4:
            raise CommandDecodeError(f"ROCKETMQ header: remark length {rlen} does not fit "
                                     f"the {n}-byte header")
        remark = _utf8(header[pos:pos + rlen], "remark") if rlen > 0 else None
        pos += rlen
        (elen,) = _I32.unpack_from(header, pos)
        pos += 4
        if elen < 0 or elen > n - pos:
            raise CommandDecodeError(f"ROCKETMQ header: extFields length {elen} does not fit "
                                     f"the {n}-byte header")
        ext = decode_ext_fields_binary(header[pos:pos + elen]) if elen > 0 else {}
        cmd = cls.__new__(cls)
        cmd.code = code
        cmd.language = LanguageCode.NAMES.get(lang & 0xFF, LanguageCode.OTHER)
        cmd.version = version
        cmd.opaque = opaque
        cmd.flag = flag
        cmd.remark = remark
        cmd.ext_fields = ext
        cmd.body = b""
        return cmd

    # ------------------------------------------------------------------ misc
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        from .request_code import request_code_name
        from .response_code import response_code_name
        kind = "response" if self.is_response else "request"
        name = response_code_name(self.code) if self.is_response else request_code_name(self.code)
        return (f"RemotingCommand({kind} {name}={self.code}, opaque={self.opaque}, "
                f"flag={self.flag:#b}, lang={self.language}, version={self.version}, "
                f"remark={self.remark!r}, extFields={self.ext_fields!r}, "
                f"body={len(self.body)}B, serialize={SerializeType.NAMES.get(self.serialize_type)})")


# ---------------------------------------------------------------------- helpers
def _to_int16(value: int, name: str) -> int:
    """Java casts code and version to short; values above 32767 wrap the same way."""
    value = int(value)
    if not -0x8000 <= value <= 0xFFFF:
        raise CommandEncodeError(f"{name} {value} does not fit the ROCKETMQ header's int16")
    return value - 0x10000 if value > 0x7FFF else value


def _utf8(data: memoryview, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise CommandDecodeError(f"ROCKETMQ header: {what} is not UTF-8") from None


def encode_ext_fields_binary(fields: Mapping[str, str]) -> bytes:
    """extFields as ``int16 keyLen, key, int32 valLen, value`` repeated (None values skipped)."""
    out = bytearray()
    for key, value in fields.items():
        if key is None or value is None:
            continue
        k = key.encode("utf-8")
        v = str(value).encode("utf-8")
        if len(k) > 0x7FFF:
            raise CommandEncodeError(f"extFields key of {len(k)} bytes exceeds 32767")
        out += _I16.pack(len(k))
        out += k
        out += _I32.pack(len(v))
        out += v
    return bytes(out)


def decode_ext_fields_binary(data: bytes | memoryview) -> dict[str, str]:
    """Inverse of encode_ext_fields_binary; raises CommandDecodeError on bad lengths."""
    mv = memoryview(data)
    n = len(mv)
    pos = 0
    out: dict[str, str] = {}
    while pos < n:
        if n - pos < 2:
            raise CommandDecodeError("ROCKETMQ header: extFields truncated inside a key length")
        (klen,) = _I16.unpack_from(mv, pos)
        pos += 2
        if klen < 0 or klen > n - pos - 4:
            raise CommandDecodeError(f"ROCKETMQ header: extFields key length {klen} overruns the map")
        key = _utf8(mv[pos:pos + klen], "extFields key")
        pos += klen
        (vlen,) = _I32.unpack_from(mv, pos)
        pos += 4
        if vlen < 0 or vlen > n - pos:
            raise CommandDecodeError(f"ROCKETMQ header: extFields value length {vlen} for "
                                     f"<{key}> overruns the map")
        out[key] = _utf8(mv[pos:pos + vlen], f"extFields value of <{key}>")
        pos += vlen
    return out


def _encode_ext_fields_json(fields: Mapping[str, str]) -> str:
    parts = []
    for key, value in fields.items():
        if value is None:
            continue
        parts.append(_encode_json_str(str(key)) + ":" + _encode_json_str(str(value)))
    return "{" + ",".join(parts) + "}"


def _json_int(obj: dict, key: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if isinstance(value, bool):
        raise CommandDecodeError(f"JSON command header: {key} is a boolean, expected an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value):
        result = int(value)
    else:
        raise CommandDecodeError(f"JSON command header: {key} = {value!r} is not an integer")
    if not _INT32_MIN <= result <= _INT32_MAX:
        raise CommandDecodeError(f"JSON command header: {key} = {result} is out of int32 range")
    return result


def _json_language(value: Any) -> str:
    if value is None:
        return LanguageCode.JAVA
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return LanguageCode.NAMES.get(value, LanguageCode.OTHER)
    raise CommandDecodeError(f"JSON command header: language = {value!r} is not a name")


def _json_ext_fields(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CommandDecodeError(f"JSON command header: extFields is a {type(value).__name__}, "
                                 f"not an object")
    out: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            continue
        if isinstance(item, str):
            out[key] = item
        elif isinstance(item, bool):
            # jsoncpp writes C++ bools as true/false; Java reads them with parseBoolean.
            out[key] = "true" if item else "false"
        elif isinstance(item, (int, float)):
            # The C++ client writes some int fields as JSON numbers.
            out[key] = str(item)
        else:
            out[key] = fastjson.dumps(item)
    return out
