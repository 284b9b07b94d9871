"""RocketMQ remoting frame splitter (sans-IO): ``int32 length | int32 serializeType<<24 |
headerLength | header | body``, where length counts every byte after itself.

Java's NettyDecoder caps a frame at 16 MiB including the length field
(``com.rocketmq.remoting.frameMaxLength``); the default here allows a little more so a
4 MiB batch plus headers always fits, and it is configurable.
"""

from __future__ import annotations

import struct

from .errors import FramingError

LENGTH_PREFIX = struct.Struct(">i")
FRAME_PREFIX = struct.Struct(">ii")  # total length, (serialize type << 24) | header length

#: Largest header length expressible in the 3 low bytes of the header-length word.
MAX_HEADER_LENGTH = 0xFFFFFF
#: RocketMQ's NettyDecoder default (16 MiB, counted including the 4-byte length field).
JAVA_FRAME_MAX_LENGTH = 16 * 1024 * 1024
#: Default cap on the length field (bytes after it): 16 MiB plus 1 MiB of headroom.
DEFAULT_MAX_FRAME_SIZE = JAVA_FRAME_MAX_LENGTH + 1024 * 1024

# Smallest possible payload: the header-length word alone.
_MIN_PAYLOAD = 4


def check_payload_length(length: int, max_frame_size: int) -> None:
    """Raise FramingError unless ``length`` (the frame's length field) is acceptable."""
    if length < _MIN_PAYLOAD:
        raise FramingError(f"frame length {length} is too small (minimum {_MIN_PAYLOAD})")
    if length > max_frame_size:
        raise FramingError(f"frame length {length} exceeds the maximum of {max_frame_size} bytes")


def split_header_word(word: int) -> tuple[int, int]:
    """Split the header-length word into ``(serialize_type, header_length)``."""
    return (word >> 24) & 0xFF, word & MAX_HEADER_LENGTH


class FrameDecoder:
    """Incremental splitter of a remoting byte stream into frame payloads.

    Feed it bytes as they arrive; it returns each complete frame's payload (the bytes after
    the 4-byte length field, i.e. header-length word + header + body) ready for
    ``RemotingCommand.decode``.  A frame's length is checked against ``max_frame_size``
    as soon as its 4 length bytes are in, before any of its content is buffered.  After a
    FramingError the stream is out of sync: every later call raises the same error.
    """

    __slots__ = ("max_frame_size", "_buf", "_pos", "_need", "_error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < _MIN_PAYLOAD:
            raise ValueError("max_frame_size must be at least 4")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0          # start of unconsumed data in _buf
        self._need = -1        # payload length of the frame being assembled, -1 if unknown
        self._error: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf) - self._pos

    @property
    def broken(self) -> bool:
        return self._error is not None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` and return the payloads of all frames now complete (maybe none).

        If a bad length is met after some good frames in the same call, the good frames are
        returned and the FramingError is raised by the next call.
        """
        if self._error is not None:
            raise self._error
        if self._need < 0 and not self._buf and len(data) >= 4:
            # the common read on a request/response connection: exactly one whole frame and
            # nothing buffered; its payload without the bytearray round trip (the same checks)
            length = LENGTH_PREFIX.unpack_from(data, 0)[0]
            if length == len(data) - 4:
                try:
                    check_payload_length(length, self.max_frame_size)
                except FramingError as exc:
                    self._error = exc
                    raise
                return [bytes(data[4:])]
        if data:
            self._buf += data
        frames: list[bytes] = []
        try:
            while True:
                frame = self._next()
                if frame is None:
                    break
                frames.append(frame)
        except FramingError as exc:
            self._error = exc
            if not frames:
                raise
        self._compact()
        return frames

    def _next(self) -> bytes | None:
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if self._need < 0:
            if avail < 4:
                return None
            (length,) = LENGTH_PREFIX.unpack_from(buf, pos)
            check_payload_length(length, self.max_frame_size)
            self._need = length
            pos += 4
            self._pos = pos
            avail -= 4
        need = self._need
        if avail < need:
            return None
        view = memoryview(buf)
        try:
            payload = view[pos:pos + need].tobytes()   # one copy, no intermediate bytearray
        finally:
            view.release()
        self._pos = pos + need
        self._need = -1
        return payload

    def _compact(self) -> None:
        if self._pos and (self._pos == len(self._buf) or self._pos > 65536):
            del self._buf[:self._pos]
            self._pos = 0

    def eof(self) -> None:
        """Declare the end of the stream; raise FramingError if a frame was cut short."""
        if self._error is not None:
            raise self._error
        if self._need >= 0:
            raise FramingError(f"stream ended inside a frame: {self.buffered} of "
                               f"{self._need} payload bytes received")
        if self.buffered:
            raise FramingError(f"stream ended inside a frame length field "
                               f"({self.buffered} of 4 bytes received)")
