"""Public encode/decode entry points for Kafka request and response bodies (SPEC §11).

Each (api_key, api_version, request|response) is compiled on first use by compiler.py and
cached; precompile() compiles everything up front (a server may call it at start-up).
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from .compiler import Malformed, compile_decoder, compile_encoder
from .exceptions import (CorruptRequest, CorruptResponse, EncodeError, UnknownApiKey,
                         UnsupportedVersion)
from .header import (RequestHeader, decode_response_header, encode_request_header,
                     encode_response_header, parse_request_header, response_header_version)
from .error_codes import UNSUPPORTED_VERSION
from .messages import API_VERSIONS, BY_KEY, SUPPORTED
from .schema import Api

__all__ = [
    "Request", "api_versions_response_body", "decode_body", "decode_request",
    "decode_request_body", "decode_response", "decode_response_body", "encode_body",
    "encode_request", "encode_request_body", "encode_response", "encode_response_body",
    "encode_response_parts", "encode_unsupported_api_versions", "generated_source",
    "precompile",
]

_DECODE_ERRORS = (Malformed, struct.error, IndexError, UnicodeDecodeError, ValueError,
                  OverflowError)
_ENCODE_ERRORS = (struct.error, AttributeError, TypeError, ValueError, UnicodeEncodeError,
                  OverflowError)
_SIZE = struct.Struct(">i")

# (api_key, api_version, is_request) -> compiled function
_decoders: dict[tuple[int, int, bool], Callable] = {}
_encoders: dict[tuple[int, int, bool], Callable] = {}
_sources: dict[tuple[int, int, bool, str], str] = {}


class Request(NamedTuple):
    """A decoded request: its header and its body dict."""

    header: RequestHeader
    body: dict


def _api(api_key: int, api_version: int) -> Api:
    api = BY_KEY.get(api_key)
    if api is None:
        raise UnknownApiKey(api_key, api_version)
    if not api.supports(api_version):
        raise UnsupportedVersion(api_key, api_version)
    return api


def _build(api_key: int, api_version: int, is_request: bool, kind: str):
    api = _api(api_key, api_version)
    fields = api.request if is_request else api.response
    label = f"{api.name}{'Request' if is_request else 'Response'} v{api_version}"
    compile_fn = compile_decoder if kind == "decode" else compile_encoder
    fn, src = compile_fn(fields, api_version, api.is_flexible(api_version), label)
    _sources[(api_key, api_version, is_request, kind)] = src
    (_decoders if kind == "decode" else _encoders)[(api_key, api_version, is_request)] = fn
    return fn


def _decoder(api_key: int, api_version: int, is_request: bool):
    fn = _decoders.get((api_key, api_version, is_request))
    return fn if fn is not None else _build(api_key, api_version, is_request, "decode")


def _encoder(api_key: int, api_version: int, is_request: bool):
    fn = _encoders.get((api_key, api_version, is_request))
    return fn if fn is not None else _build(api_key, api_version, is_request, "encode")


def precompile() -> int:
    """Compile every supported codec now; return how many functions were built."""
    n = 0
    for key, (lo, hi) in SUPPORTED.items():
        for v in range(lo, hi + 1):
            for is_request in (True, False):
                _decoder(key, v, is_request)
                _encoder(key, v, is_request)
                n += 2
    return n


def generated_source(api_key: int, api_version: int, request: bool, kind: str = "decode") -> str:
    """The Python source generated for one codec (for reading and debugging)."""
    (_decoder if kind == "decode" else _encoder)(api_key, api_version, request)
    return _sources[(api_key, api_version, request, kind)]


# ---------------------------------------------------------------------------------------------
# Bodies.

def decode_body(api_key: int, api_version: int, data, *, request: bool, offset: int = 0,
                strict: bool = False) -> dict:
    """Decode a request or response body starting at data[offset].

    With strict=True, bytes left over after the body are an error.
    """
    fn = _decoder(api_key, api_version, request)
    mv = data if isinstance(data, memoryview) else memoryview(data)
    try:
        body, pos = fn(data, mv, offset)
    except _DECODE_ERRORS as e:
        exc = CorruptRequest if request else CorruptResponse
        name = BY_KEY[api_key].name
        raise exc(f"{name} v{api_version} {'request' if request else 'response'}: {e}") from e
    if strict and pos != len(data):
        exc = CorruptRequest if request else CorruptResponse
        raise exc(f"{len(data) - pos} bytes left after the body")
    return body


def decode_request_body(api_key: int, api_version: int, data, offset: int = 0, *,
                        strict: bool = False) -> dict:
    return decode_body(api_key, api_version, data, request=True, offset=offset, strict=strict)


def decode_response_body(api_key: int, api_version: int, data, offset: int = 0, *,
                         strict: bool = False) -> dict:
    return decode_body(api_key, api_version, data, request=False, offset=offset, strict=strict)


def _encode_into(api_key: int, api_version: int, body: dict, request: bool, out: list) -> list:
    fn = _encoder(api_key, api_version, request)
    try:
        return fn(body, out)
    except _ENCODE_ERRORS as e:
        name = BY_KEY[api_key].name
        raise EncodeError(f"{name} v{api_version} {'request' if request else 'response'}: "
                          f"{type(e).__name__}: {e}") from e


def encode_body(api_key: int, api_version: int, body: dict, *, request: bool) -> bytes:
    """Encode a request or response body dict (missing keys take their schema default)."""
    return b"".join(_encode_into(api_key, api_version, body, request, []))


def encode_request_body(api_key: int, api_version: int, body: dict) -> bytes:
    return encode_body(api_key, api_version, body, request=True)


def encode_response_body(api_key: int, api_version: int, body: dict) -> bytes:
    return encode_body(api_key, api_version, body, request=False)


# ---------------------------------------------------------------------------------------------
# Whole messages.

def decode_request(frame, *, strict: bool = False) -> Request:
    """Decode one request frame (without its 4-byte size): header, then body.

    Raises UnsupportedVersion/UnknownApiKey (with .header set) for versions or api keys this
    codec does not support, CorruptRequest for malformed bytes.
    """
    header, pos = decode_request_header_checked(frame)
    body = decode_body(header.api_key, header.api_version, frame, request=True, offset=pos,
                       strict=strict)
    return Request(header, body)


def decode_request_header_checked(frame) -> tuple[RequestHeader, int]:
    """decode_request's first half: the header and where the body starts, with the same errors
    for api keys and versions this codec does not support."""
    header, pos = parse_request_header(frame)
    api = BY_KEY.get(header.api_key)
    if api is None:
        raise UnknownApiKey(header.api_key, header.api_version, header)
    if not api.supports(header.api_version):
        raise UnsupportedVersion(header.api_key, header.api_version, header)
    return header, pos


def encode_request(api_key: int, api_version: int, correlation_id: int, body: dict, *,
                   client_id: str | None = "rmq-bridge", framed: bool = True) -> bytes:
    """Encode a whole request (header chosen by the header-version rule), framed by default."""
    _api(api_key, api_version)
    out = [b"", encode_request_header(api_key, api_version, correlation_id, client_id)]
    _encode_into(api_key, api_version, body, True, out)
    return _finish(out, framed)


def encode_response_parts(header: RequestHeader, body: dict, *, framed: bool = True) -> list:
    """Encode the response to `header` as a list of buffers for transport.writelines().

    records/bytes values appear in the list as they were given (no copy).
    """
    key, version = header.api_key, header.api_version
    _api(key, version)
    out = [b"", encode_response_header(header.correlation_id,
                                       response_header_version(key, version))]
    _encode_into(key, version, body, False, out)
    if framed:
        out[0] = _SIZE.pack(sum(map(len, out)))
    return out


def encode_response(header: RequestHeader, body: dict, *, framed: bool = True) -> bytes:
    """Encode the response to the request whose header is given, framed by default."""
    return b"".join(encode_response_parts(header, body, framed=framed))


def decode_response(api_key: int, api_version: int, frame, *, strict: bool = False
                    ) -> tuple[int, dict]:
    """Decode one response frame (without its size); return (correlation_id, body)."""
    _api(api_key, api_version)
    corr, pos = decode_response_header(frame, response_header_version(api_key, api_version))
    if api_key == API_VERSIONS and api_version > 0:
        # A broker that does not support the version we asked for answers with a v0 body
        # (KIP-511); read it as v0 when it says so or when it does not parse as asked.
        try:
            (error_code,) = struct.unpack_from(">h", frame, pos)
        except struct.error:
            error_code = 0
        if error_code == UNSUPPORTED_VERSION:
            api_version = 0
        else:
            try:
                return corr, decode_body(api_key, api_version, frame, request=False,
                                         offset=pos, strict=strict)
            except CorruptResponse:
                api_version = 0
    body = decode_body(api_key, api_version, frame, request=False, offset=pos, strict=strict)
    return corr, body


def _finish(out: list, framed: bool) -> bytes:
    if framed:
        out[0] = _SIZE.pack(sum(map(len, out)))
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# ApiVersions.

def api_versions_response_body(supported: dict[int, tuple[int, int]] | None = None, *,
                               error_code: int = 0, throttle_time_ms: int = 0) -> dict:
    """An ApiVersionsResponse body listing `supported` (default: everything this codec does)."""
    supported = SUPPORTED if supported is None else supported
    return {
        "error_code": error_code,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                     for k, (lo, hi) in sorted(supported.items())],
        "throttle_time_ms": throttle_time_ms,
    }


def encode_unsupported_api_versions(correlation_id: int,
                                    supported: dict[int, tuple[int, int]] | None = None, *,
                                    framed: bool = True) -> bytes:
    """The reply to an ApiVersions request of an unsupported version (KIP-511).

    Response header v0 and a v0 ApiVersionsResponse body carrying UNSUPPORTED_VERSION (35)
    and the supported list, which every client version can read.
    """
    body = api_versions_response_body(supported, error_code=UNSUPPORTED_VERSION)
    header = RequestHeader(API_VERSIONS, 0, correlation_id)
    return encode_response(header, body, framed=framed)
