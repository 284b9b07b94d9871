"""Exercise indexfile-lookup: fill in the four functions (see task.md). All numbers big-endian.

An index file is: a 40-byte header, then `slot_num` hash slots of 4 bytes, then index items of
20 bytes each: keyHash (int32), phyOffset (int64), timeDiff (int32), prevIndex (int32)."""
import struct

HEADER_SIZE = 40
SLOT_SIZE = 4
ITEM_SIZE = 20


def key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: the absolute value of Java's String.hashCode() of `key`
    (s[0]*31^(n-1) + ... + s[n-1], in 32-bit signed arithmetic that wraps), with
    Integer.MIN_VALUE (whose absolute value does not fit) mapped to 0."""
    raise NotImplementedError


def slot_position(hash_code: int, slot_num: int) -> int:
    """Byte position in the file of the hash slot for `hash_code`."""
    raise NotImplementedError


def item_position(slot_num: int, index: int) -> int:
    """Byte position in the file of index item number `index` (items are numbered from 1)."""
    raise NotImplementedError


def find(data: bytes, slot_num: int, topic: str, key: str) -> list[int]:
    """The commitlog offsets (phyOffset) of every message of `topic` with message key `key`, newest
    first, read from the index file's bytes `data`. The indexed string is "<topic>#<key>"."""
    raise NotImplementedError
