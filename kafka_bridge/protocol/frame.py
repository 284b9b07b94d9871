"""Kafka frame layer (SPEC §11): a 4-byte big-endian size, then that many bytes.

FrameDecoder is incremental and sans-IO: feed() whatever the socket gave, then pull whole
frames with next_frame(). The size prefix is checked as soon as its 4 bytes arrive, before
any of the body is buffered, so a hostile size never makes the decoder hold or allocate it.
"""

from __future__ import annotations

import struct

from .exceptions import CorruptFrame, FrameTooLarge

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder", "encode_frame"]

#: Kafka's socket.request.max.bytes default (100 MiB).
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

_SIZE = struct.Struct(">i")


def encode_frame(payload) -> bytes:
    """Prefix a payload with its 4-byte size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into frames.

    >>> d = FrameDecoder()
    >>> d.feed(b"\\x00\\x00\\x00\\x03ab")
    >>> d.next_frame() is None
    True
    >>> d.feed(b"c")
    >>> d.next_frame()
    b'abc'
    """

    __slots__ = ("max_frame_size", "_buf", "_pos", "_need")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0       # start of the unconsumed bytes in _buf
        self._need = -1     # body size of the frame being collected, -1 if its prefix is unread

    def feed(self, data) -> None:
        """Append bytes received from the peer; raises FrameTooLarge/CorruptFrame on a bad size."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data
        if self._need < 0:
            self._read_size()

    def _read_size(self) -> None:
        buf = self._buf
        if len(buf) - self._pos >= 4:
            (size,) = _SIZE.unpack_from(buf, self._pos)
            if size < 0:
                raise CorruptFrame(f"negative frame size {size}")
            if size > self.max_frame_size:
                raise FrameTooLarge(size, self.max_frame_size)
            self._need = size

    def next_frame(self) -> bytes | None:
        """Return the next whole frame's payload (without its size), or None if incomplete."""
        if self._need < 0:
            self._read_size()
            if self._need < 0:
                return None
        start = self._pos + 4
        end = start + self._need
        buf = self._buf
        if len(buf) < end:
            return None
        frame = bytes(memoryview(buf)[start:end])  # one copy (the views are gone before buf changes)
        self._need = -1
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 65536 and end * 2 > len(buf):
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return frame

    def frames(self):
        """Iterate over every whole frame buffered so far."""
        while True:
            frame = self.next_frame()
            if frame is None:
                return
            yield frame

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame."""
        return len(self._buf) - self._pos
