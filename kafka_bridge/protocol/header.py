"""Kafka request and response headers and the rule choosing their version (SPEC §11).

Request header v0: api_key int16, api_version int16, correlation_id int32; v1 adds client_id
(nullable, always the classic int16-length string); v2 adds a tagged-field section.
Response header v0: correlation_id; v1 adds a tagged-field section. Flexible API versions use
request v2 / response v1, except that ApiVersions responses always use response header v0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .compiler import Malformed, skip_tagged_fields
from .exceptions import CorruptRequest, CorruptResponse, EncodeError
from .messages import API_VERSIONS, BY_KEY

__all__ = [
    "RequestHeader", "decode_request_header", "encode_request_header", "encode_response_header",
    "decode_response_header", "parse_request_header", "request_header_version",
    "response_header_version",
]

_REQ = struct.Struct(">hhih")
_REQ0 = struct.Struct(">hhi")
_CORR = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    """A decoded request header. header_version is 0, 1 or 2."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    header_version: int = 1


def _flexible(api_key: int, api_version: int) -> bool:
    api = BY_KEY.get(api_key)
    return api is not None and api.is_flexible(api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions of the API, else 1 (also for api keys this codec does not know)."""
    return 2 if _flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, else 0; ApiVersions responses are always v0."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if _flexible(api_key, api_version) else 0


def encode_request_header(api_key: int, api_version: int, correlation_id: int,
                          client_id: str | None = None, header_version: int | None = None) -> bytes:
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    try:
        if header_version == 0:
            return _REQ0.pack(api_key, api_version, correlation_id)
        if client_id is None:
            out = _REQ.pack(api_key, api_version, correlation_id, -1)
        else:
            cid = client_id.encode("utf-8")
            out = _REQ.pack(api_key, api_version, correlation_id, len(cid)) + cid
    except (struct.error, AttributeError) as e:
        raise EncodeError(f"bad request header value: {e}") from e
    return out + b"\x00" if header_version >= 2 else out


def decode_request_header(data, header_version: int, offset: int = 0) -> tuple[RequestHeader, int]:
    """Decode a request header of a known version; return (header, offset of the body)."""
    try:
        if header_version == 0:
            api_key, api_version, corr = _REQ0.unpack_from(data, offset)
            return RequestHeader(api_key, api_version, corr, None, 0), offset + 8
        api_key, api_version, corr, n = _REQ.unpack_from(data, offset)
        pos = offset + 10
        if n < 0:
            if n != -1:
                raise CorruptRequest(f"negative client_id length {n}")
            client_id = None
        else:
            if pos + n > len(data):
                raise CorruptRequest("client_id overruns the request")
            client_id = str(data[pos:pos + n], "utf-8")
            pos += n
        if header_version >= 2:
            pos = skip_tagged_fields(data, pos, len(data))
    except CorruptRequest:
        raise
    except (struct.error, IndexError, UnicodeDecodeError, Malformed) as e:
        raise CorruptRequest(f"bad request header: {e}") from e
    return RequestHeader(api_key, api_version, corr, client_id, header_version), pos


def parse_request_header(data, offset: int = 0) -> tuple[RequestHeader, int]:
    """Decode the header of any request, even of an api key or version this codec does not
    support (so the server can still answer UNSUPPORTED_VERSION with the correlation id).

    The header version follows request_header_version(); for an unsupported version the
    tagged section of a v2 header is skipped on a best-effort basis.
    """
    try:
        api_key, api_version = struct.unpack_from(">hh", data, offset)
    except struct.error as e:
        raise CorruptRequest("truncated request header") from e
    hv = request_header_version(api_key, api_version)
    api = BY_KEY.get(api_key)
    if hv == 2 and (api is None or not api.supports(api_version)):
        try:
            return decode_request_header(data, 2, offset)
        except CorruptRequest:
            header, pos = decode_request_header(data, 1, offset)
            header.header_version = 2
            return header, pos
    return decode_request_header(data, hv, offset)


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    try:
        out = _CORR.pack(correlation_id)
    except struct.error as e:
        raise EncodeError(f"bad correlation id: {e}") from e
    return out + b"\x00" if header_version >= 1 else out


def decode_response_header(data, header_version: int, offset: int = 0) -> tuple[int, int]:
    """Return (correlation_id, offset of the body)."""
    try:
        (corr,) = _CORR.unpack_from(data, offset)
        pos = offset + 4
        if header_version >= 1:
            pos = skip_tagged_fields(data, pos, len(data))
    except (struct.error, IndexError, Malformed) as e:
        raise CorruptResponse(f"bad response header: {e}") from e
    return corr, pos
