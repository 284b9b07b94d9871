"""Exceptions raised by the sans-IO Kafka codec (SPEC §11), one class per way a peer can be wrong.

A server maps them to a reply or a closed connection:
UnsupportedVersion/UnknownApiKey -> ApiVersions gets an UNSUPPORTED_VERSION body, anything else
closes; CorruptRequest, CorruptFrame, FrameTooLarge -> log and close the connection.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every error this package raises for bad wire data or bad values."""


class FrameError(ProtocolError):
    """The 4-byte size prefix of a frame cannot be accepted."""


class CorruptFrame(FrameError):
    """The size prefix is negative."""


class FrameTooLarge(FrameError):
    """The size prefix exceeds the decoder's max_frame_size (socket.request.max.bytes)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class CorruptMessage(ProtocolError):
    """A header or body is truncated, has a bad length/count, bad UTF-8 or a bad null."""


class CorruptRequest(CorruptMessage):
    """A request header or request body could not be decoded."""


class CorruptResponse(CorruptMessage):
    """A response header or response body could not be decoded."""


class UnsupportedVersion(ProtocolError):
    """The (api_key, api_version) pair is not one this codec supports.

    ``header`` is the parsed RequestHeader when the error comes from decode_request, so the
    server can still answer (ApiVersions) with the right correlation id.
    """

    def __init__(self, api_key: int, api_version: int, header=None, message: str | None = None):
        super().__init__(message or f"unsupported version {api_version} of api key {api_key}")
        self.api_key = api_key
        self.api_version = api_version
        self.header = header


class UnknownApiKey(UnsupportedVersion):
    """The api key is not one this codec knows at all."""

    def __init__(self, api_key: int, api_version: int, header=None):
        super().__init__(api_key, api_version, header, f"unknown api key {api_key}")


class EncodeError(ProtocolError, ValueError):
    """A value handed to an encoder does not fit its field (wrong type, out of range, null)."""
