"""Legacy Kafka message sets (magic 0 and 1, CRC32, gzip/snappy/lz4 wrapper messages)
decode and encode, for old producers and old fetch versions (SPEC §11)."""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

from .batch import NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, Record, TimestampType
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError

__all__ = ["LegacyBatch", "encode_legacy"]

_V0 = struct.Struct(">qiIbb")  # offset, message size, crc, magic, attributes
_V1 = struct.Struct(">qiIbbq")  # ... + timestamp
_I32 = struct.Struct(">i")
_LOG_OVERHEAD = 12
_MIN_MESSAGE = {0: 14, 1: 22}  # crc + magic + attributes (+ timestamp) + key len + value len
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08


def _parse_message(buf, pos: int, end: int, verify_crc: bool):
    """Parse one message at ``buf[pos]`` (offset, size, message) -> tuple and new pos."""
    if end - pos < _LOG_OVERHEAD + 6:
        raise CorruptRecordError(f"truncated legacy message at byte {pos}")
    offset, size, crc, magic, attrs = _V0.unpack_from(buf, pos)
    if magic not in (0, 1):
        raise CorruptRecordError(f"legacy message at offset {offset}: magic {magic} inside a magic 0/1 message set")
    msg_end = pos + _LOG_OVERHEAD + size
    if size < _MIN_MESSAGE[magic] or msg_end > end:
        raise CorruptRecordError(f"legacy message at offset {offset}: size {size} out of bounds")
    if verify_crc:
        computed = zlib.crc32(memoryview(buf)[pos + 16 : msg_end])
        if computed != crc:
            raise CorruptRecordError(
                f"legacy message at offset {offset} is corrupt (stored crc {crc:#010x}, computed {computed:#010x})"
            )
    if magic == 1:
        timestamp = _V1.unpack_from(buf, pos)[5]
        p = pos + _V1.size
    else:
        timestamp = NO_TIMESTAMP
        p = pos + _V0.size
    fields = []
    for what in ("key", "value"):
        if p + 4 > msg_end:
            raise CorruptRecordError(f"legacy message at offset {offset}: truncated {what} length")
        (n,) = _I32.unpack_from(buf, p)
        p += 4
        if n == -1:
            fields.append(None)
        elif n < 0 or p + n > msg_end:
            raise CorruptRecordError(f"legacy message at offset {offset}: {what} length {n} out of bounds")
        else:
            fields.append(bytes(buf[p : p + n]))
            p += n
    if p != msg_end:
        raise CorruptRecordError(f"legacy message at offset {offset}: {msg_end - p} stray bytes")
    return (offset, magic, attrs, timestamp, fields[0], fields[1], crc, size), msg_end


class LegacyBatch:
    """One top-level magic 0/1 message, seen through the same interface as
    :class:`~kafka_bridge.records.batch.RecordBatch`. A compressed wrapper message
    expands to its inner messages (decoded, CRC-checked and bounded at construction)."""

    __slots__ = (
        "base_offset",
        "batch_length",
        "magic",
        "crc",
        "attributes",
        "timestamp",
        "_buf",
        "_start",
        "_records",
    )

    partition_leader_epoch = -1
    producer_id = NO_PRODUCER_ID
    producer_epoch = -1
    base_sequence = NO_SEQUENCE
    last_sequence = NO_SEQUENCE
    is_transactional = False
    is_control = False
    has_delete_horizon = False

    def __init__(self, buf, start: int = 0, *, verify_crc: bool = True, max_decompressed_size: int | None = None):
        end = len(buf)
        (offset, magic, attrs, ts, key, value, crc, size), msg_end = _parse_message(buf, start, end, verify_crc)
        self.batch_length = size
        self.magic = magic
        self.crc = crc
        self.attributes = attrs
        self.timestamp = ts
        self._buf = buf
        self._start = start
        codec = attrs & _CODEC_MASK
        if codec == 0:
            self.base_offset = offset
            self._records = [Record(0, ts, key, value, [])]
            return
        if codec > 3:
            raise UnsupportedCompressionError(f"legacy message at offset {offset}: compression codec {codec} not allowed in magic {magic}")
        if value is None:
            raise InvalidRecordError(f"compressed legacy message at offset {offset} has a null value")
        cap = max_decompressed_size
        if cap is None:
            cap = DEFAULT_MAX_DECOMPRESSED_SIZE + size
        inner_buf = decompress(codec, value, cap, legacy_lz4=(magic == 0))
        inner = []
        pos, n = 0, len(inner_buf)
        while pos < n:
            msg, pos = _parse_message(inner_buf, pos, n, verify_crc)
            if msg[2] & _CODEC_MASK:
                raise InvalidRecordError(f"legacy message at offset {offset}: nested compression")
            inner.append(msg)
        if not inner:
            raise InvalidRecordError(f"compressed legacy message at offset {offset} holds no messages")
        # magic 1 wrappers carry the absolute offset of their last inner message and
        # inner offsets are relative; magic 0 inner offsets are absolute.
        shift = offset - inner[-1][0] if magic > 0 else -1
        if shift < 0:
            shift = 0
        first = inner[0][0]
        self.base_offset = shift + first
        append_time = ts if (magic > 0 and attrs & _TIMESTAMP_TYPE_MASK) else None
        self._records = [
            Record(m[0] - first, m[3] if append_time is None else append_time, m[4], m[5], []) for m in inner
        ]

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + _LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.CREATE_TIME
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def records_count(self) -> int:
        return len(self._records)

    @property
    def last_offset_delta(self) -> int:
        return self._records[-1].offset_delta

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._records[-1].offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self._records[0].timestamp

    @property
    def max_timestamp(self) -> int:
        return max(r.timestamp for r in self._records)

    @property
    def raw(self) -> memoryview:
        return memoryview(self._buf)[self._start : self._start + self.batch_length + _LOG_OVERHEAD]

    def records(self) -> list[Record]:
        return self._records

    def __iter__(self):
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(magic={self.magic}, base_offset={self.base_offset}, "
            f"count={len(self._records)}, compression={self.compression.name})"
        )


def _message(offset: int, magic: int, attrs: int, timestamp: int, key, value) -> bytes:
    parts = [struct.pack(">bbq", magic, attrs, timestamp) if magic else struct.pack(">bb", magic, attrs)]
    for field in (key, value):
        if field is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(_I32.pack(len(field)))
            parts.append(field)
    body = b"".join(parts)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def encode_legacy(
    records: Sequence,
    *,
    magic: int,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    compression_level: int | None = None,
    timestamp_type: int = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """Encode a magic 0 or 1 message set from ``(key, value, headers, timestamp)``
    tuples. Headers cannot be represented in these formats and are dropped; magic 0
    drops timestamps too. With compression the set is one wrapper message."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    codec = int(compression)
    if codec > 3:
        raise UnsupportedCompressionError(f"compression codec {codec} is not available for magic {magic}")
    ts_attr = _TIMESTAMP_TYPE_MASK if (magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME) else 0
    if codec == 0:
        return b"".join(
            _message(base_offset + i, magic, ts_attr, log_append_time if ts_attr and log_append_time is not None else r[3], r[0], r[1])
            for i, r in enumerate(records)
        )
    if not records:
        return b""
    inner = b"".join(
        _message(i if magic else base_offset + i, magic, 0, r[3], r[0], r[1]) for i, r in enumerate(records)
    )
    payload = compress(codec, inner, compression_level, legacy_lz4=(magic == 0))
    wrapper_ts = max(r[3] for r in records)
    if ts_attr and log_append_time is not None:
        wrapper_ts = log_append_time
    return _message(base_offset + len(records) - 1, magic, codec | ts_attr, wrapper_ts, None, bytes(payload))
