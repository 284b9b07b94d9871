"""Kafka compression codecs (gzip, xerial/raw snappy, LZ4 frame, zstd) for record
batches (SPEC §11); every decompression is bounded so a compression bomb raises."""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError

__all__ = [
    "Compression",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "compress",
    "decompress",
    "gzip_compress",
    "gzip_decompress",
    "snappy_compress",
    "snappy_decompress",
    "lz4_compress",
    "lz4_decompress",
    "zstd_compress",
    "zstd_decompress",
    "xxh32",
]

#: Default ceiling for what one batch may expand to (the batch's own size is added).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024


class Compression(IntEnum):
    """Codec ids as stored in bits 0-2 of the batch / message attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """Parse a Kafka ``compression.type`` value ("none", "gzip", "lz4"...)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise UnsupportedCompressionError(f"unknown compression type {name!r}") from None


def _too_large(codec: str, cap: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{codec} payload expands beyond the {cap}-byte decompression limit")


# --------------------------------------------------------------------------- gzip
# Measured on 100 KB of record data: cramjam (flate2) is ~2x faster than zlib at
# levels 1-2 and a little faster at 8-9, zlib is faster at 3-7. Both write RFC 1952.
_GZIP_CRAMJAM_LEVELS = frozenset((1, 2, 8, 9))
#: Kafka's producer default (Deflater.DEFAULT_COMPRESSION).
DEFAULT_GZIP_LEVEL = 6


def gzip_compress(data, level: int | None = None):
    """Compress into one gzip member."""
    if level is None or level < 0:
        level = DEFAULT_GZIP_LEVEL
    level = min(level, 9)
    if level in _GZIP_CRAMJAM_LEVELS:
        return cramjam.gzip.compress(data, level=level)
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def gzip_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress gzip (several concatenated members allowed, as GZIPInputStream does)."""
    out = []
    total = 0
    data = memoryview(data)
    while True:
        d = zlib.decompressobj(31)
        try:
            chunk = d.decompress(data, max_size + 1 - total)
        except zlib.error as e:
            raise CorruptRecordError(f"invalid gzip data: {e}") from None
        total += len(chunk)
        if total > max_size:
            raise _too_large("gzip", max_size)
        out.append(chunk)
        if not d.eof:
            raise CorruptRecordError("truncated gzip data")
        rest = d.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            break  # trailing padding is ignored, like java.util.zip.GZIPInputStream
        data = memoryview(rest)
    return out[0] if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------- snappy
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # xerial SnappyOutputStream's default block size
_I32 = struct.Struct(">i")


def snappy_compress(data, xerial: bool = True, block_size: int = _XERIAL_BLOCK):
    """Snappy as the Java client writes it: xerial framing, 32 KiB raw blocks.
    ``xerial=False`` gives one raw snappy block (what librdkafka writes)."""
    if not xerial:
        return cramjam.snappy.compress_raw(data)
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    pack = _I32.pack
    compress_raw = cramjam.snappy.compress_raw
    for i in range(0, len(mv), block_size):
        block = compress_raw(mv[i : i + block_size])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block, max_size: int, total: int):
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except Exception as e:  # cramjam.DecompressionError and friends
        raise CorruptRecordError(f"invalid snappy block: {e}") from None
    if total + n > max_size:
        raise _too_large("snappy", max_size)
    try:
        return cramjam.snappy.decompress_raw(block), n
    except Exception as e:
        raise CorruptRecordError(f"invalid snappy block: {e}") from None


def snappy_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress xerial-framed snappy (Java client) or a raw snappy block (librdkafka).
    The version/compat ints of the xerial header are ignored, as the Java reader does."""
    mv = memoryview(data)
    if len(mv) < 16 or mv[:8] != _XERIAL_MAGIC:
        block, _ = _snappy_raw(mv, max_size, 0)
        return bytes(block)
    pos, end, total = 16, len(mv), 0
    out = []
    unpack = _I32.unpack_from
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = unpack(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy block length {n} out of bounds")
        block, size = _snappy_raw(mv[pos : pos + n], max_size, total)
        total += size
        out.append(block)
        pos += n
    return b"".join(out)


# --------------------------------------------------------------------------- lz4
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 in plain Python; only used on LZ4 frame descriptors (a few bytes)."""
    data = bytes(data)
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            w1, w2, w3, w4 = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + w1 * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + w2 * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + w3 * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + w4 * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (w,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_descriptor_end(mv) -> int:
    """Offset of the HC byte of an LZ4 frame header (after FLG, BD, optional
    content size and dictionary id)."""
    if len(mv) < 7 or mv[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame (bad magic)")
    flg = mv[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(mv) <= end:
        raise CorruptRecordError("truncated LZ4 frame header")
    return end


def _lz4_fix_header_checksum(data) -> bytes:
    """Kafka 0.8-0.9 (magic 0) computed the LZ4 header checksum over the magic number
    too; rewrite the HC byte with the standard value so any LZ4 reader accepts it."""
    mv = memoryview(data)
    end = _lz4_descriptor_end(mv)
    hc = (xxh32(mv[4:end]) >> 8) & 0xFF
    if mv[end] == hc:
        return data
    return b"".join((mv[:end], bytes((hc,)), mv[end + 1 :]))


def _lz4_break_header_checksum(frame) -> bytes:
    """Inverse of :func:`_lz4_fix_header_checksum`, for writing magic 0 messages."""
    mv = memoryview(frame)
    end = _lz4_descriptor_end(mv)
    hc = (xxh32(mv[:end]) >> 8) & 0xFF
    return b"".join((mv[:end], bytes((hc,)), mv[end + 1 :]))


# An LZ4 sequence needs at least one byte per 255 bytes of output, so an input of n
# bytes cannot expand past ~255 n: below that a one-shot decode cannot exceed the cap.
_LZ4_MAX_RATIO = 256


def lz4_compress(data, level: int | None = None, *, legacy_header_checksum: bool = False):
    """LZ4 frame as Kafka's Java client writes it: 64 KiB independent blocks, no
    content size, no checksums. ``legacy_header_checksum`` reproduces the magic-0 quirk."""
    frame = lz4.frame.compress(
        data,
        compression_level=level or 0,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    return _lz4_break_header_checksum(frame) if legacy_header_checksum else frame


def lz4_decompress(
    data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE, *, legacy_header_checksum: bool = False
) -> bytes:
    """Decompress one LZ4 frame. With ``legacy_header_checksum`` (magic 0 messages) the
    header checksum is recomputed first, accepting both the broken and correct forms."""
    if legacy_header_checksum:
        data = _lz4_fix_header_checksum(data)
    mv = memoryview(data)
    _lz4_descriptor_end(mv)
    if mv[4] & 0x08:  # content size present: lz4 would allocate it up front
        (size,) = struct.unpack_from("<Q", mv, 6)
        if size > max_size:
            raise _too_large("lz4", max_size)
    try:
        if len(data) * _LZ4_MAX_RATIO <= max_size:
            return lz4.frame.decompress(data)
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(data, max_size + 1)
    except RuntimeError as e:  # lz4.frame reports every LZ4F error as RuntimeError
        raise CorruptRecordError(f"invalid LZ4 frame: {e}") from None
    if len(out) > max_size:
        raise _too_large("lz4", max_size)
    if not d.eof:
        raise CorruptRecordError("truncated LZ4 frame")
    return out


# --------------------------------------------------------------------------- zstd
DEFAULT_ZSTD_LEVEL = 3  # Kafka's and librdkafka's default
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_tls = threading.local()


def _zstd_ctx(level: int | None):
    if level is None:
        level = DEFAULT_ZSTD_LEVEL
    comps = getattr(_tls, "zc", None)
    if comps is None:
        comps = _tls.zc = {}
    c = comps.get(level)
    if c is None:
        c = comps[level] = zstandard.ZstdCompressor(level=level)
    return c


def _zstd_dctx():
    d = getattr(_tls, "zd", None)
    if d is None:
        d = _tls.zd = zstandard.ZstdDecompressor()
    return d


def zstd_compress(data, level: int | None = None) -> bytes:
    """One zstd frame (content size written), level 3 by default."""
    return _zstd_ctx(level).compress(data)


def _zstd_bound(mv) -> tuple[int, int]:
    """Walk the frames and block headers (no decoding) and return (upper bound of the
    decompressed size, number of frames). Raises on truncation or malformed headers,
    which a streaming zstd decoder would otherwise silently report as a short read."""
    n = len(mv)
    pos = 0
    bound = 0
    frames = 0
    unpack = struct.unpack_from
    while pos < n:
        if pos + 4 > n:
            raise CorruptRecordError("truncated zstd frame magic")
        (magic,) = unpack("<I", mv, pos)
        pos += 4
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 4 > n:
                raise CorruptRecordError("truncated zstd skippable frame")
            (size,) = unpack("<I", mv, pos)
            pos += 4 + size
            if pos > n:
                raise CorruptRecordError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"not a zstd frame (magic {magic:#010x})")
        if pos >= n:
            raise CorruptRecordError("truncated zstd frame header")
        fhd = mv[pos]
        pos += 1
        if fhd & 0x08:
            raise CorruptRecordError("zstd frame header reserved bit set")
        single_segment = fhd & 0x20
        fcs_flag = fhd >> 6
        pos += (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 0x03]
        pos += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        if pos > n:
            raise CorruptRecordError("truncated zstd frame header")
        while True:
            if pos + 3 > n:
                raise CorruptRecordError("truncated zstd block")
            bh = mv[pos] | (mv[pos + 1] << 8) | (mv[pos + 2] << 16)
            pos += 3
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 0:  # raw
                pos += bsize
                bound += bsize
            elif btype == 1:  # RLE
                pos += 1
                bound += bsize
            elif btype == 2:  # compressed
                pos += bsize
                bound += _ZSTD_BLOCK_MAX
            else:
                raise CorruptRecordError("zstd reserved block type")
            if pos > n:
                raise CorruptRecordError("truncated zstd block")
            if bh & 1:
                break
        if fhd & 0x04:
            pos += 4
            if pos > n:
                raise CorruptRecordError("truncated zstd frame checksum")
        frames += 1
    return bound, frames


def zstd_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress one or more zstd frames, with or without a content size."""
    mv = memoryview(data)
    bound, frames = _zstd_bound(mv)
    if frames == 0:
        raise CorruptRecordError("zstd payload holds no frame")
    dctx = _zstd_dctx()
    try:
        if frames == 1:
            size = zstandard.frame_content_size(mv)
            if size > max_size:
                raise _too_large("zstd", max_size)
            if size >= 0:
                return dctx.decompress(mv)
        # No content size or several frames: stream, never asking for more than
        # min(bound, cap + 1) bytes in total.
        limit = min(bound, max_size + 1)
        reader = dctx.stream_reader(mv, read_across_frames=True)
        out = []
        total = 0
        while total < limit:
            chunk = reader.read(min(limit - total, 1 << 20))
            if not chunk:
                break
            out.append(chunk)
            total += len(chunk)
        if total > max_size:
            raise _too_large("zstd", max_size)
        return out[0] if len(out) == 1 else b"".join(out)
    except zstandard.ZstdError as e:
        raise CorruptRecordError(f"invalid zstd data: {e}") from None


# --------------------------------------------------------------------------- dispatch
def compress(codec: int, data, level: int | None = None, *, legacy_lz4: bool = False):
    """Compress ``data`` with codec id ``codec``; returns a bytes-like object."""
    if codec == 1:
        return gzip_compress(data, level)
    if codec == 2:
        return snappy_compress(data)
    if codec == 3:
        return lz4_compress(data, level, legacy_header_checksum=legacy_lz4)
    if codec == 4:
        return zstd_compress(data, level)
    if codec == 0:
        return data
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def decompress(
    codec: int, data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE, *, legacy_lz4: bool = False
) -> bytes:
    """Decompress ``data`` written with codec id ``codec``; the output may not exceed
    ``max_size`` bytes (RecordTooLargeError) and garbage raises CorruptRecordError."""
    if codec == 1:
        return gzip_decompress(data, max_size)
    if codec == 2:
        return snappy_decompress(data, max_size)
    if codec == 3:
        return lz4_decompress(data, max_size, legacy_header_checksum=legacy_lz4)
    if codec == 4:
        return zstd_decompress(data, max_size)
    if codec == 0:
        return bytes(data)
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")
