"""Kafka record formats for the bridge (SPEC §11): RecordBatch v2 and legacy magic 0/1
message sets, decode and encode, with gzip/snappy/lz4/zstd codecs. Sans-IO."""

from .batch import (
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    ControlMarker,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    encode_batch,
    encode_control_batch,
    parse_control_record,
    rebase_batch,
)
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordsError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from .legacy import LegacyBatch, encode_legacy
from .memory import (
    AnyBatch, check_produce_batch, decode_batches, decode_produce_records, iter_batches, records_size_valid,
)

__all__ = [
    "AnyBatch",
    "check_produce_batch",
    "Compression",
    "ControlMarker",
    "ControlType",
    "CorruptRecordError",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "HEADER_SIZE",
    "InvalidRecordError",
    "LegacyBatch",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "Record",
    "RecordBatch",
    "RecordTooLargeError",
    "RecordsError",
    "TimestampType",
    "UnsupportedCompressionError",
    "compress",
    "decode_batches",
    "decode_produce_records",
    "decompress",
    "encode_batch",
    "encode_control_batch",
    "encode_legacy",
    "iter_batches",
    "parse_control_record",
    "rebase_batch",
    "records_size_valid",
]
