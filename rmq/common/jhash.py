"""Java ``String.hashCode()`` for Python strings (signed 32-bit, over UTF-16 code units),
plus the consume-queue tags code RocketMQ derives from it."""

from __future__ import annotations

import sys
from functools import lru_cache

from rmq import native

__all__ = ["java_string_hash", "tags_code"]

# Native-order UTF-16 so that memoryview.cast("H") yields the code units directly.
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_CACHE_MAX_LEN = 256


def _hash_units(units) -> int:
    """h = 31*h + unit over an iterable of 16-bit code units, wrapped to signed 32 bits."""
    h = 0
    for unit in units:
        h = (h * 31 + unit) & _MASK32
    return h - 0x100000000 if h & _SIGN32 else h


def _compute(s: str) -> int:
    ext = native.ext
    if ext is not None:
        try:  # the same hash in C over the UTF-8 bytes (index keys are mostly unique: no cache hit)
            return ext.java_string_hash(s.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: the Python code below handles it
            pass
    if s.isascii():
        # ASCII: one byte per UTF-16 code unit, and iterating bytes yields ints.
        return _hash_units(s.encode("ascii"))
    # Characters outside the BMP become surrogate pairs, as in a Java String; lone
    # surrogates in the Python string pass through as single code units.
    data = s.encode(_UTF16_NATIVE, "surrogatepass")
    return _hash_units(memoryview(data).cast("H"))


@lru_cache(maxsize=16384)
def _compute_cached(s: str) -> int:
    return _compute(s)


def java_string_hash(s: str) -> int:
    """Return what ``s.hashCode()`` returns in Java, as a signed 32-bit int."""
    if len(s) <= _CACHE_MAX_LEN:
        return _compute_cached(s)
    return _compute(s)


def tags_code(tags: str | None) -> int:
    """The tagsCode RocketMQ stores in a consume-queue entry: 0 without tags, else the hash."""
    if not tags:
        return 0
    return java_string_hash(tags)
