"""Exceptions raised by the RocketMQ remoting codec (frames, command headers, custom headers, bodies)."""

from __future__ import annotations

# Numeric values mirror RemotingSysResponseCode.SYSTEM_ERROR; kept here so that this
# module has no import cycle with response_code.
_SYSTEM_ERROR = 1


class RemotingError(Exception):
    """Base class of every error raised by rmq.remoting."""


class FramingError(RemotingError):
    """The byte stream does not hold a valid remoting frame (bad or oversized length,
    truncated stream).  The connection cannot be resynchronised and should be closed."""


class CommandDecodeError(RemotingError):
    """A frame arrived whole but its command header could not be decoded
    (bad JSON, inconsistent ROCKETMQ binary lengths, unknown serialize type)."""


class CommandEncodeError(RemotingError):
    """A RemotingCommand cannot be put on the wire (header too long, value out of range)."""


class HeaderFieldError(RemotingError):
    """A custom header (extFields) is missing a required field or holds a bad value.

    ``field`` names the offending extFields key; ``response_code`` and ``remark`` are what
    a server should answer with (RocketMQ answers header errors with SYSTEM_ERROR and a
    remark naming the field).
    """

    response_code = _SYSTEM_ERROR

    def __init__(self, header: str, field: str, message: str) -> None:
        super().__init__(message)
        self.header = header
        self.field = field

    @property
    def remark(self) -> str:
        return str(self)


class MissingHeaderField(HeaderFieldError):
    """A required extFields entry is absent."""

    def __init__(self, header: str, field: str) -> None:
        super().__init__(header, field, f"{header}: required header field <{field}> is missing")


class BadHeaderField(HeaderFieldError):
    """An extFields entry cannot be converted to the field's declared type."""

    def __init__(self, header: str, field: str, value: object, expected: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(header, field,
                         f"{header}: header field <{field}> = {shown} is not a valid {expected}")
        self.value = value
        self.expected = expected


class BodyDecodeError(RemotingError):
    """A command body is not the JSON document (or shape) its request code requires."""
