"""Zig-zag varint / varlong codec used inside Kafka RecordBatch v2 records (SPEC §11),
with a precomputed table of encodings for small non-negative values."""

from __future__ import annotations

from .errors import CorruptRecordError

__all__ = [
    "VARINT_TABLE",
    "VARINT_TABLE_SIZE",
    "encode_varint",
    "varint",
    "decode_varint",
    "decode_varlong",
    "size_of_varint",
]


def encode_varint(value: int) -> bytes:
    """Zig-zag encode a signed 64-bit integer as a base-128 varint."""
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"varlong out of range: {value}")
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


#: Encodings of 0..VARINT_TABLE_SIZE-1; lengths, offset deltas and timestamp deltas
#: of a fetch batch nearly always fall in this range.
VARINT_TABLE_SIZE = 1 << 14
VARINT_TABLE: tuple[bytes, ...] = tuple(encode_varint(i) for i in range(VARINT_TABLE_SIZE))


def varint(value: int, _t=VARINT_TABLE, _n=VARINT_TABLE_SIZE, _enc=encode_varint) -> bytes:
    """Table-backed :func:`encode_varint`."""
    if 0 <= value < _n:
        return _t[value]
    return _enc(value)


def _decode(buf, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    z = 0
    shift = 0
    n = len(buf)
    for _ in range(max_bytes):
        if pos >= n:
            raise CorruptRecordError(f"truncated {what} at byte {pos}")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    raise CorruptRecordError(f"{what} longer than {max_bytes} bytes at byte {pos - max_bytes}")


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint (at most 5 bytes, int32 range); return (value, new_pos)."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value, pos = _decode(buf, pos, 5, "varint")
    if not -(1 << 31) <= value < (1 << 31):
        raise CorruptRecordError(f"varint out of int32 range: {value}")
    return value, pos


def decode_varlong(buf, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varlong (at most 10 bytes); return (value, new_pos)."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value, pos = _decode(buf, pos, 10, "varlong")
    if not -(1 << 63) <= value < (1 << 63):
        raise CorruptRecordError(f"varlong out of int64 range: {value}")
    return value, pos


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint` produces for ``value``."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    return max(1, (z.bit_length() + 6) // 7)
