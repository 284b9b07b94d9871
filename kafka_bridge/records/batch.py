"""Kafka RecordBatch v2 (magic 2) decode and encode, including transaction control
batches (SPEC §11: Kafka produce/fetch payloads <-> broker messages)."""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple, Sequence

from crc32c import crc32c

from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from .varint import VARINT_TABLE, VARINT_TABLE_SIZE, decode_varint, decode_varlong, encode_varint, varint

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "TimestampType",
    "ControlType",
    "Record",
    "ControlMarker",
    "RecordBatch",
    "encode_batch",
    "encode_control_batch",
    "rebase_batch",
    "parse_control_record",
    "NO_TIMESTAMP",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
]

#: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
#: lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
#: baseSequence, recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
_HEAD = struct.Struct(">qiibI")  # the 21 bytes before the CRC-covered part
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (CRC-covered)
_BASE = struct.Struct(">q")
_BASE_LEN_EPOCH = struct.Struct(">qii")
CRC_START = _HEAD.size  # 21: CRC-32C covers attributes .. end of batch
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_RECORD_SIZE = 7  # length, attributes, tsDelta, offsetDelta, key, value, header count

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Transaction marker type stored in a control record's key."""

    ABORT = 0
    COMMIT = 1


class Record(NamedTuple):
    """One decoded record; its Kafka offset is ``batch.base_offset + offset_delta``."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list  # list[tuple[str, bytes | None]]


class ControlMarker(NamedTuple):
    """Decoded transaction marker (key: version, type; value: version, coordinatorEpoch)."""

    type: ControlType
    version: int = 0
    coordinator_epoch: int = 0


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def _parse_records(buf: bytes, pos: int, end: int, count: int, base_ts: int, append_ts, where: str):
    """Parse ``count`` records from ``buf[pos:end]``; ``buf`` is bytes so slices are bytes."""
    if count * MIN_RECORD_SIZE > end - pos:
        raise InvalidRecordError(
            f"{where}: declares {count} records but only {end - pos} bytes of records follow"
        )
    out = []
    append = out.append
    new = tuple.__new__
    R = Record
    dvarint = decode_varint
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = dvarint(buf, pos)
            rec_end = pos + length
            if length < MIN_RECORD_SIZE - 1 or rec_end > end:
                raise InvalidRecordError(f"{where}: record length {length} out of bounds")
            pos += 1  # record attributes: unused
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = decode_varlong(buf, pos)
            b = buf[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                offset_delta, pos = dvarint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = dvarint(buf, pos)
            if n >= 0:
                key = buf[pos : pos + n]
                pos += n
            elif n == -1:
                key = None
            else:
                raise InvalidRecordError(f"{where}: invalid key length {n}")
            b = buf[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = dvarint(buf, pos)
            if n >= 0:
                value = buf[pos : pos + n]
                pos += n
            elif n == -1:
                value = None
            else:
                raise InvalidRecordError(f"{where}: invalid value length {n}")
            b = buf[pos]
            pos += 1
            if b == 0:
                headers = []
            else:
                pos -= 1
                headers, pos = _parse_headers(buf, pos, rec_end, where)
            if pos != rec_end:
                raise InvalidRecordError(
                    f"{where}: record declares {length} bytes but its fields span {length + pos - rec_end}"
                )
            append(new(R, (offset_delta, base_ts + ts_delta if append_ts is None else append_ts, key, value, headers)))
    except IndexError:
        raise InvalidRecordError(f"{where}: premature end of records") from None
    if pos != end:
        raise InvalidRecordError(
            f"{where}: {end - pos} bytes remain after the declared {count} records"
        )
    return out


def _parse_headers(buf: bytes, pos: int, rec_end: int, where: str, dvarint=decode_varint):
    b = buf[pos]
    if b < 0x80:
        count = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        count, pos = dvarint(buf, pos)
    if count < 0:
        raise InvalidRecordError(f"{where}: invalid header count {count}")
    if count * 2 > rec_end - pos:
        raise InvalidRecordError(f"{where}: header count {count} exceeds record size")
    headers = []
    append = headers.append
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = dvarint(buf, pos)
        end = pos + n
        if n < 0 or end > rec_end:
            raise InvalidRecordError(f"{where}: invalid header key length {n}")
        try:
            hkey = buf[pos:end].decode()
        except UnicodeDecodeError:
            raise InvalidRecordError(f"{where}: header key is not UTF-8") from None
        b = buf[end]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos = end + 1
        else:
            n, pos = dvarint(buf, end)
        if n >= 0:
            end = pos + n
            if end > rec_end:
                raise InvalidRecordError(f"{where}: header value length {n} out of bounds")
            append((hkey, buf[pos:end]))
            pos = end
        elif n == -1:
            append((hkey, None))
        else:
            raise InvalidRecordError(f"{where}: invalid header value length {n}")
    return headers, pos


class RecordBatch:
    """A decoded RecordBatch v2 header plus lazy access to its records.

    Build one with :meth:`from_buffer` (or via :func:`kafka_bridge.records.iter_batches`).
    The CRC is checked at construction; decompression and record parsing happen on the
    first :meth:`records` call."""

    __slots__ = (
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
        "_buf",
        "_start",
        "_max_decompressed",
        "_records",
        "_section",
    )

    def __init__(self, buf, start: int = 0, *, verify_crc: bool = True, max_decompressed_size: int | None = None):
        """Parse the batch starting at ``buf[start]``; ``buf`` must hold the whole batch."""
        n = len(buf) - start
        if n < HEADER_SIZE:
            raise CorruptRecordError(f"record batch of {n} bytes is shorter than the {HEADER_SIZE}-byte header")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(buf, start)
        if self.magic != 2:
            raise CorruptRecordError(f"record batch magic {self.magic} is not 2")
        size = self.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or size > n:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset}: length {self.batch_length} out of bounds ({n} bytes available)"
            )
        if self.records_count < 0:
            raise InvalidRecordError(f"batch at offset {self.base_offset}: invalid record count {self.records_count}")
        self._buf = buf
        self._start = start
        self._max_decompressed = max_decompressed_size
        self._records = None
        self._section = None
        if verify_crc:
            computed = crc32c(memoryview(buf)[start + CRC_START : start + size])
            if computed != self.crc:
                raise CorruptRecordError(
                    f"batch at offset {self.base_offset} is corrupt (stored crc {self.crc:#010x}, computed {computed:#010x})"
                )

    @classmethod
    def from_buffer(cls, buf, *, verify_crc: bool = True, max_decompressed_size: int | None = None) -> RecordBatch:
        """Decode exactly one batch (trailing bytes are an error)."""
        batch = cls(buf, 0, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
        if batch.size_in_bytes != len(buf):
            raise CorruptRecordError(f"{len(buf) - batch.size_in_bytes} bytes follow the record batch")
        return batch

    # -- batch-level fields -------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        c = self.attributes & COMPRESSION_MASK
        try:
            return Compression(c)
        except ValueError:
            raise UnsupportedCompressionError(f"unknown compression codec id {c}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: when set, ``base_timestamp`` holds the delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def raw(self) -> memoryview:
        """The batch's bytes, unmodified (zero-copy view)."""
        return memoryview(self._buf)[self._start : self._start + self.batch_length + LOG_OVERHEAD]

    # -- records -------------------------------------------------------------------
    def records_section(self) -> tuple[bytes, int, int]:
        """The records section as ``(buf, start, end)``: ``buf[start:end]``, decompressed (bounded)
        when the batch is compressed. Cached after the first call."""
        if self._section is not None:
            return self._section
        codec = self.attributes & COMPRESSION_MASK
        start = self._start + HEADER_SIZE
        end = self._start + self.batch_length + LOG_OVERHEAD
        if codec == 0:
            buf = self._buf
            if type(buf) is not bytes:
                buf = bytes(memoryview(buf)[start:end])
                start, end = 0, len(buf)
        else:
            if codec > 4:
                raise UnsupportedCompressionError(f"batch at offset {self.base_offset}: unknown compression codec id {codec}")
            cap = self._max_decompressed
            if cap is None:
                cap = DEFAULT_MAX_DECOMPRESSED_SIZE + self.batch_length
            buf = decompress(codec, memoryview(self._buf)[start:end], cap)
            if type(buf) is not bytes:
                buf = bytes(buf)
            start, end = 0, len(buf)
        self._section = (buf, start, end)
        return self._section

    @property
    def append_timestamp(self) -> int | None:
        """The timestamp every record gets in a LOG_APPEND_TIME batch (its max timestamp), else None."""
        return self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None

    def records(self) -> list[Record]:
        """Decompress (bounded) and parse the records; cached after the first call."""
        if self._records is not None:
            return self._records
        buf, start, end = self.records_section()
        where = f"batch at offset {self.base_offset}"
        recs = _parse_records(buf, start, end, self.records_count, self.base_timestamp, self.append_timestamp, where)
        self._records = recs
        return recs

    def __iter__(self):
        return iter(self.records())

    def __len__(self) -> int:
        return self.records_count

    def control_marker(self) -> ControlMarker:
        """The transaction marker of a control batch."""
        if not self.is_control:
            raise InvalidRecordError(f"batch at offset {self.base_offset} is not a control batch")
        recs = self.records()
        if len(recs) != 1:
            raise InvalidRecordError(f"control batch at offset {self.base_offset} has {len(recs)} records")
        return parse_control_record(recs[0].key, recs[0].value)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, count={self.records_count}, "
            f"last_offset_delta={self.last_offset_delta}, compression={self.compression.name}, "
            f"transactional={self.is_transactional}, control={self.is_control}, "
            f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
            f"base_sequence={self.base_sequence})"
        )


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlMarker:
    """Decode a control record's key (version, type) and value (version, coordinatorEpoch)."""
    if key is None or len(key) < 4:
        raise InvalidRecordError("control record key shorter than 4 bytes")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    try:
        ctype = ControlType(ctype)
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {ctype}") from None
    coordinator_epoch = 0
    if value is not None and len(value) >= 6:
        _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return ControlMarker(ctype, version, coordinator_epoch)


# ------------------------------------------------------------------------------ encode
_HEADER_KEYS: dict = {}  # header key -> its encoded length prefix + UTF-8 bytes


def _header_key(hk) -> bytes:
    if type(hk) is not str:
        return varint(len(hk)) + hk
    raw = hk.encode("utf-8")
    enc = varint(len(raw)) + raw
    if len(_HEADER_KEYS) >= 4096:
        _HEADER_KEYS.clear()
    _HEADER_KEYS[hk] = enc
    return enc


def _encode_headers(headers, _t=VARINT_TABLE, _n=VARINT_TABLE_SIZE, _enc=encode_varint, _keys=_HEADER_KEYS) -> bytes:
    n = len(headers)
    out = _t[n] if n < _n else _enc(n)
    for hk, hv in headers:
        kb = _keys.get(hk) if type(hk) is str else None
        if kb is None:
            kb = _header_key(hk)
        if hv is None:
            out += kb + b"\x01"
        else:
            n = len(hv)
            out += kb + (_t[n] if n < _n else _enc(n)) + hv
    return out


def encode_batch(
    records: Sequence,
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    offset_deltas: Sequence[int] | None = None,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode one RecordBatch v2.

    ``records`` is a sequence of ``(key, value, headers, timestamp)``: key/value are
    bytes-like or None, headers an iterable of ``(str|bytes, bytes|None)`` (or None),
    timestamp an int in ms. Offset deltas are 0..n-1 unless ``offset_deltas`` gives
    them (increasing, e.g. when some offsets of the run are not returned).
    ``base_timestamp`` defaults to the first record's timestamp; ``max_timestamp`` to
    the largest record timestamp (set it to the append time for LOG_APPEND_TIME)."""
    t = VARINT_TABLE
    N = VARINT_TABLE_SIZE
    enc = encode_varint
    count = len(records)
    parts = []
    ap = parts.extend
    size = 0
    if count:
        first_ts = records[0][3] if base_timestamp is None else base_timestamp
        max_ts = first_ts
        i = 0
        idx = 0
        for key, value, headers, ts in records:
            d = ts - first_ts
            if ts > max_ts:
                max_ts = ts
            if offset_deltas is not None:
                i = offset_deltas[idx]
                idx += 1
            pre = b"\x00" + (t[d] if 0 <= d < N else enc(d)) + (t[i] if i < N else enc(i))
            if key is None:
                pre += b"\x01"
                kl = 0
                key = b""
            else:
                kl = len(key)
                pre += t[kl] if kl < N else enc(kl)
            if value is None:
                vlv = b"\x01"
                vl = 0
                value = b""
            else:
                vl = len(value)
                vlv = t[vl] if vl < N else enc(vl)
            hb = _encode_headers(headers) if headers else b"\x00"
            length = len(pre) + kl + len(vlv) + vl + len(hb)
            lv = t[length] if length < N else enc(length)
            ap((lv, pre, key, vlv, value, hb))
            size += len(lv) + length
            i += 1
        if offset_deltas is not None:
            last_delta = offset_deltas[count - 1]
        else:
            last_delta = count - 1
    else:
        first_ts = NO_TIMESTAMP if base_timestamp is None else base_timestamp
        max_ts = NO_TIMESTAMP
        last_delta = 0
    if max_timestamp is not None:
        max_ts = max_timestamp
    body = b"".join(parts)
    attrs = compression & COMPRESSION_MASK
    if attrs:
        body = compress(attrs, body, compression_level)
    if timestamp_type:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    tail = _TAIL.pack(attrs, last_delta, first_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    crc = crc32c(body, crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, crc)
    return b"".join((head, tail, body))


def encode_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
    timestamp: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (COMMIT/ABORT) as the broker writes it for
    read_committed consumers: transactional + control flags, one record."""
    key = _CONTROL_KEY.pack(0, int(control_type))
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [(key, value, None, timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def rebase_batch(
    raw, base_offset: int, partition_leader_epoch: int | None = None, log_append_time: int | None = None
) -> bytes:
    """Re-emit a stored v2 batch at a new base offset (and leader epoch) without
    touching the records: both fields sit before the CRC-covered range, so the CRC
    stays valid and the cost is one copy of the batch. ``log_append_time`` also
    switches the batch to LOG_APPEND_TIME with that max timestamp (CRC recomputed)."""
    mv = memoryview(raw)
    if len(mv) < HEADER_SIZE or mv[16] != 2:
        raise CorruptRecordError("rebase_batch needs a whole magic-2 record batch")
    if log_append_time is not None:
        buf = bytearray(mv)
        _BASE.pack_into(buf, 0, base_offset)
        if partition_leader_epoch is not None:
            struct.pack_into(">i", buf, 12, partition_leader_epoch)
        buf[22] |= TIMESTAMP_TYPE_MASK
        struct.pack_into(">q", buf, 35, log_append_time)
        struct.pack_into(">I", buf, CRC_START - 4, crc32c(memoryview(buf)[CRC_START:]))
        return bytes(buf)
    if partition_leader_epoch is None:
        return b"".join((_BASE.pack(base_offset), mv[8:]))
    (length,) = struct.unpack_from(">i", mv, 8)
    return b"".join((_BASE_LEN_EPOCH.pack(base_offset, length, partition_leader_epoch), mv[16:]))
