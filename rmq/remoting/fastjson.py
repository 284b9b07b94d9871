"""fastjson-compatible JSON for RocketMQ bodies: writes integer map keys unquoted and reads
both that form and standard JSON.

Java's RemotingSerializable uses fastjson, which writes ``Map<Long, String>`` as
``{0:"127.0.0.1:10911"}`` (not valid JSON).  RocketMQ's Java side and the C++ client (jsoncpp
with ``allowNumericKeys``) accept it, so the NameServer sends it; ``quote_int_keys=True``
writes standard JSON instead.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import BodyDecodeError

_encode_str = json.JSONEncoder(ensure_ascii=False).encode

# A JSON string literal (an unterminated one runs to the end), or an unquoted integer object
# key following "{" or ",".  Possessive quantifiers keep the scan linear on hostile input.
_STRING_OR_NUMKEY = re.compile(
    r'"(?:[^"\\]++|\\.)*+"?|(?<=[{,])(\s*+)(-?[0-9]++)(?=\s*+:)', re.S)


def dumps(obj: Any, *, quote_int_keys: bool = False) -> str:
    """Serialise ``obj`` compactly, as fastjson does (no spaces, UTF-8 text, not ASCII-escaped).

    ``dict`` keys may be ``str`` or ``int``; integer keys are written bare unless
    ``quote_int_keys``.  Sets are written as arrays.  ``None`` values are written as ``null``
    (callers leave out fields fastjson would omit).
    """
    parts: list[str] = []
    _write(obj, parts, quote_int_keys)
    return "".join(parts)


def dumpb(obj: Any, *, quote_int_keys: bool = False) -> bytes:
    """``dumps`` encoded as UTF-8."""
    return dumps(obj, quote_int_keys=quote_int_keys).encode("utf-8")


def _write(obj: Any, out: list[str], qk: bool) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_encode_str(obj))
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"cannot write non-finite float {obj!r} as JSON")
        out.append(repr(obj))
    elif isinstance(obj, dict):
        out.append("{")
        first = True
        for key, value in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(key, str):
                out.append(_encode_str(key))
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(f'"{int(key)}"' if qk else str(int(key)))
            else:
                raise TypeError(f"JSON object key must be str or int, not {type(key).__name__}")
            out.append(":")
            _write(value, out, qk)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        first = True
        for item in obj:
            if not first:
                out.append(",")
            first = False
            _write(item, out, qk)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _quote_numeric_keys(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        if m.group(2) is None:
            return m.group(0)
        return f'{m.group(1)}"{m.group(2)}"'
    return _STRING_OR_NUMKEY.sub(repl, text)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _no_lone_surrogates(obj: Any, text: str, what: str) -> Any:
    """A \\uD800-\\uDFFF escape that is not half of a pair decodes to a str no UTF-8 encoder
    takes: refuse it here, not later when a response or the store tries to write it (fuzzing)."""
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BodyDecodeError(f"{what}: a \\u escape is a lone UTF-16 surrogate, not text") from None
    return obj


# json.loads(text, parse_constant=...) would build a new JSONDecoder on every call
_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


def loads(data: bytes | bytearray | memoryview | str, *, what: str = "body") -> Any:
    """Parse standard JSON or fastjson output with bare integer keys (which come back as
    ``str`` keys, e.g. ``"0"``).  Trailing whitespace and NUL bytes are ignored (the C++
    client's jsoncpp writer appends a newline).  Raises BodyDecodeError naming ``what``.
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyDecodeError(f"{what}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    text = text.rstrip(" \t\r\n\x00")
    if not text:
        raise BodyDecodeError(f"{what}: empty, expected a JSON document")
    try:
        return _no_lone_surrogates(_decode(text), text, what)
    except (ValueError, RecursionError):
        pass
    try:
        return _no_lone_surrogates(_decode(_quote_numeric_keys(text)), text, what)
    except BodyDecodeError:
        raise
    except RecursionError:
        raise BodyDecodeError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:
        raise BodyDecodeError(f"{what}: not valid JSON ({exc})") from None
