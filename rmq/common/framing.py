"""Length-prefixed framing both wire protocols share (RocketMQ remoting and Kafka): a 4-byte
big-endian length, then that many bytes."""
from __future__ import annotations

import struct

_I32 = struct.Struct(">i")


def split_frames(stream: bytes) -> list[bytes]:
    """A recorded stream of frames back to back -> the whole frames in it, length prefixes
    included; a negative length or a frame cut short ends the list."""
    out, pos = [], 0
    while pos + 4 <= len(stream):
        (n,) = _I32.unpack_from(stream, pos)
        if n < 0 or pos + 4 + n > len(stream):
            break
        out.append(stream[pos:pos + 4 + n])
        pos += 4 + n
    return out
