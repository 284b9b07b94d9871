"""Iteration over a Kafka ``records`` blob (concatenated batches of any magic) and the
checks a Produce handler applies before storing (SPEC §11)."""

from __future__ import annotations

import struct
from typing import Iterator, Union

from .batch import HEADER_SIZE, LOG_OVERHEAD, RecordBatch
from .errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from .legacy import LegacyBatch

__all__ = [
    "AnyBatch", "iter_batches", "decode_batches", "decode_produce_records", "check_produce_batch", "records_size_valid",
]

AnyBatch = Union[RecordBatch, LegacyBatch]

_I32 = struct.Struct(">i")
_MAGIC_OFFSET = 16  # same position in every magic: offset, length, epoch|crc, magic
_MIN_LENGTH = {0: 14, 1: 22, 2: HEADER_SIZE - LOG_OVERHEAD}


def iter_batches(
    data,
    *,
    allow_partial: bool = False,
    verify_crc: bool = True,
    max_batch_size: int | None = None,
    max_decompressed_size: int | None = None,
) -> Iterator[AnyBatch]:
    """Yield each batch of ``data`` in order: :class:`RecordBatch` for magic 2,
    :class:`LegacyBatch` for each top-level magic 0/1 message.

    ``allow_partial=True`` (Fetch responses) silently stops at a truncated last batch;
    otherwise (Produce requests) a truncated batch raises CorruptRecordError.
    ``max_batch_size`` rejects larger batches with RecordTooLargeError before any
    work; ``max_decompressed_size`` caps what a compressed batch may expand to
    (default 64 MiB + the batch's own size)."""
    n = len(data)
    pos = 0
    while pos < n:
        remaining = n - pos
        if remaining <= _MAGIC_OFFSET:
            if allow_partial:
                return
            raise CorruptRecordError(f"{remaining} trailing bytes do not hold a record batch header")
        (length,) = _I32.unpack_from(data, pos + 8)
        magic = data[pos + _MAGIC_OFFSET]
        minimum = _MIN_LENGTH.get(magic)
        if minimum is None:
            raise CorruptRecordError(f"unsupported record magic {magic} at byte {pos}")
        if length < minimum:
            raise CorruptRecordError(f"record batch at byte {pos}: length {length} below the minimum {minimum}")
        if max_batch_size is not None and length + LOG_OVERHEAD > max_batch_size:
            raise RecordTooLargeError(
                f"record batch at byte {pos} is {length + LOG_OVERHEAD} bytes, above the {max_batch_size}-byte limit"
            )
        if length + LOG_OVERHEAD > remaining:
            if allow_partial:
                return
            raise CorruptRecordError(
                f"record batch at byte {pos} declares {length + LOG_OVERHEAD} bytes but only {remaining} remain"
            )
        if magic == 2:
            batch = RecordBatch(data, pos, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
        else:
            end = pos + length + LOG_OVERHEAD
            view = data if end == n else memoryview(data)[:end]
            batch = LegacyBatch(view, pos, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
        yield batch
        pos += length + LOG_OVERHEAD


def decode_batches(data, **kwargs) -> list[AnyBatch]:
    """``list(iter_batches(data, **kwargs))``."""
    return list(iter_batches(data, **kwargs))


def decode_produce_records(
    data,
    *,
    max_batch_size: int | None = None,
    max_decompressed_size: int | None = None,
) -> list[AnyBatch]:
    """Decode and validate the ``records`` of one partition of a Produce request.

    Every batch is complete and CRC-valid, records are parsed (so ``batch.records()``
    is free afterwards), no batch is a control batch or empty, and offset deltas run
    0..n-1 with ``last_offset_delta == n - 1`` so the broker can assign offsets
    ``base .. base + n - 1``. Raises a RecordsError subclass (``.error_code`` is the
    Kafka error code to answer with)."""
    return [
        check_produce_batch(batch)
        for batch in iter_batches(
            data, allow_partial=False, max_batch_size=max_batch_size, max_decompressed_size=max_decompressed_size
        )
    ]


def check_produce_batch(batch: AnyBatch) -> AnyBatch:
    """The checks :func:`decode_produce_records` applies to each batch: records parsed, not a
    control batch, not empty, offset deltas 0..n-1. Returns the batch; raises a RecordsError."""
    if batch.is_control:
        raise InvalidRecordError(f"batch at offset {batch.base_offset}: clients may not write control batches")
    records = batch.records()
    if not records:
        raise InvalidRecordError(f"batch at offset {batch.base_offset} has no records")
    if [r[0] for r in records] != list(range(len(records))):
        raise InvalidRecordError(f"batch at offset {batch.base_offset}: offset deltas are not 0..{len(records) - 1}")
    if batch.last_offset_delta != len(records) - 1:
        raise InvalidRecordError(
            f"batch at offset {batch.base_offset}: last offset delta {batch.last_offset_delta} "
            f"does not match {len(records)} records"
        )
    return batch


def records_size_valid(data) -> int:
    """Bytes of ``data`` covered by complete batches (what a Fetch reader can use)."""
    n = len(data)
    pos = 0
    while n - pos > _MAGIC_OFFSET:
        (length,) = _I32.unpack_from(data, pos + 8)
        if length < 0 or pos + LOG_OVERHEAD + length > n:
            break
        pos += LOG_OVERHEAD + length
    return pos
