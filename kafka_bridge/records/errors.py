"""Exceptions raised by the Kafka record codecs (SPEC §11), each carrying the Kafka
error code a Produce handler should answer with."""

from __future__ import annotations

__all__ = [
    "RecordsError",
    "CorruptRecordError",
    "InvalidRecordError",
    "UnsupportedCompressionError",
    "RecordTooLargeError",
]


class RecordsError(ValueError):
    """Base class: the bytes do not form acceptable Kafka records."""

    #: Kafka protocol error code (CORRUPT_MESSAGE).
    error_code = 2


class CorruptRecordError(RecordsError):
    """Framing is broken: CRC mismatch, bad lengths, truncated data, undecodable
    compressed payload (Kafka CORRUPT_MESSAGE, code 2)."""

    error_code = 2


class InvalidRecordError(RecordsError):
    """The batch frames correctly but its content is not acceptable: record count
    disagrees with the records present, negative header count, control batch sent by
    a producer... (Kafka INVALID_RECORD, code 87)."""

    error_code = 87


class UnsupportedCompressionError(RecordsError):
    """Unknown compression codec id, or zstd inside a magic 0/1 message
    (Kafka UNSUPPORTED_COMPRESSION_TYPE, code 76)."""

    error_code = 76


class RecordTooLargeError(RecordsError):
    """A batch, or what a compressed batch expands to, exceeds the configured cap
    (Kafka MESSAGE_TOO_LARGE, code 10). Raised instead of decompressing a bomb."""

    error_code = 10
