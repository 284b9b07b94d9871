"""One segment of a Kafka partition log, in Kafka's own file layout (kafka.log.LogSegment):

    00000000000000000000.log        record batches v2, exactly as the producer sent them, with the
                                    baseOffset (and, for LogAppendTime, the max timestamp) rewritten
    00000000000000000000.index      sparse offset index: (offset - base) int32, file position int32,
                                    an entry each time more than index.interval.bytes (4096) were
                                    appended since the last one
    00000000000000000000.timeindex  sparse time index: max timestamp so far int64, (offset - base)
                                    int32, written with the offset index when the max timestamp grew

All integers are big-endian, as in Kafka. The file name is the segment's base offset on 20 digits.
Kafka preallocates the two index files (segment.index.bytes) and trims them when a segment rolls;
here they grow entry by entry, so a file always holds exactly its entries. Nothing is written
through a mapping: every append is a write(2) at the files' ends, and an append the file system
refuses (ENOSPC, EDQUOT) is taken back whole (the three files cut to their old lengths, the
in-memory indexes as they were) before the OSError goes up: a full disk never leaves half a batch.
"""
from __future__ import annotations

import bisect
import os
import struct

from rmq.store.mapped_file import IO_COUNTERS

from ..records import HEADER_SIZE, RecordBatch, RecordsError
from ..records.batch import HEADER

LOG_OVERHEAD = 12                      # baseOffset int64 + batchLength int32
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


def _write_end(f, data: bytes) -> None:
    """Append `data` to file object `f` (opened "a+b", so the descriptor writes at the end) with
    write(2) calls, past Python's buffer: a write that fails leaves nothing buffered to reappear in
    a later write."""
    fd = f.fileno()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class BatchInfo:
    """What the log needs to know of one stored batch, read from its header."""

    __slots__ = ("base_offset", "last_offset", "max_timestamp", "size", "position")

    def __init__(self, base_offset: int, last_offset: int, max_timestamp: int, size: int, position: int):
        self.base_offset, self.last_offset, self.max_timestamp = base_offset, last_offset, max_timestamp
        self.size, self.position = size, position


def batch_header(buf, pos: int = 0) -> BatchInfo:
    (base, length, _epoch, magic, _crc, _attrs, last_delta, _bts, max_ts, _pid, _pe, _bs, _n) = HEADER.unpack_from(buf, pos)
    return BatchInfo(base, base + last_delta, max_ts, length + LOG_OVERHEAD, pos)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int = 4096) -> None:
        self.dir, self.base_offset = directory, base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, file_name(base_offset, ".log"))
        self.index_path = os.path.join(directory, file_name(base_offset, ".index"))
        self.time_path = os.path.join(directory, file_name(base_offset, ".timeindex"))
        self._log = open(self.log_path, "a+b")
        self._index = open(self.index_path, "a+b")
        self._time = open(self.time_path, "a+b")
        self.size = os.fstat(self._log.fileno()).st_size
        self.index: list[tuple[int, int]] = []          # (relative offset, position)
        self.time_index: list[tuple[int, int]] = []     # (timestamp, relative offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.bytes_since_index = 0
        self.unflushed = 0                               # messages appended since the last flush

    # ---- loading ---------------------------------------------------------------------------------
    def load_indexes(self) -> None:
        """Read the index files as they are (a cleanly closed segment)."""
        self._index.seek(0)
        raw = self._index.read()
        self.index = [OFFSET_ENTRY.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % 8, 8)]
        self._time.seek(0)
        raw = self._time.read()
        self.time_index = [TIME_ENTRY.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % 12, 12)]
        last = self._last_batch()
        if last is not None:
            self.next_offset = last.last_offset + 1
        self.max_timestamp = max((t for t, _ in self.time_index), default=-1)
        if last is not None:
            self.max_timestamp = max(self.max_timestamp, last.max_timestamp)

    def _last_batch(self) -> BatchInfo | None:
        pos = self.index[-1][1] if self.index else 0
        last = None
        for info in self.scan(pos):
            last = info
        return last

    def recover(self) -> int:
        """Kafka's LogSegment.recover: read every batch from the start, check it (length, magic,
        CRC), rebuild both indexes, and truncate the log at the first batch that fails (a torn
        write at a crash). Returns the number of bytes truncated."""
        self.index, self.time_index = [], []
        self.next_offset, self.max_timestamp, self.bytes_since_index = self.base_offset, -1, 0
        self._log.seek(0)
        data = self._log.read()
        pos, good = 0, 0
        while pos + HEADER_SIZE <= len(data):
            try:
                b = RecordBatch(data, pos, verify_crc=True)
            except RecordsError:
                break
            size = b.batch_length + LOG_OVERHEAD
            self._index_batch(b.base_offset, b.base_offset + b.last_offset_delta, b.max_timestamp, pos, size)
            pos += size
            good = pos
        truncated = len(data) - good
        if truncated:
            self._log.truncate(good)
            self.size = good
        for f, entries, st in ((self._index, self.index, OFFSET_ENTRY), (self._time, self.time_index, TIME_ENTRY)):
            f.truncate(0)
            f.write(b"".join(st.pack(*e) for e in entries))
            f.flush()
        return truncated

    # ---- writing ---------------------------------------------------------------------------------
    def _index_batch(self, base: int, last: int, max_ts: int, position: int, size: int) -> list[bytes]:
        """Update the in-memory state for a batch at `position`; returns new (index, timeindex) bytes."""
        out_idx, out_time = b"", b""
        if self.bytes_since_index > self.index_interval_bytes:
            entry = (last - self.base_offset, position)
            self.index.append(entry)
            out_idx = OFFSET_ENTRY.pack(*entry)
            ts = max(self.max_timestamp, max_ts)
            if not self.time_index or ts > self.time_index[-1][0]:
                t_entry = (ts, last - self.base_offset)
                self.time_index.append(t_entry)
                out_time = TIME_ENTRY.pack(*t_entry)
            self.bytes_since_index = 0
        self.bytes_since_index += size
        self.max_timestamp = max(self.max_timestamp, max_ts)
        self.next_offset = last + 1
        return [out_idx, out_time]

    def append(self, batch: bytes, base: int, last: int, max_ts: int) -> None:
        """Write one batch at the end (to the page cache: Kafka writes through a FileChannel) and its
        index entries, if due. On an OSError nothing of it stays (see the module's note)."""
        position = self.size
        n_idx, n_time = len(self.index), len(self.time_index)
        state = (self.next_offset, self.max_timestamp, self.bytes_since_index)
        idx, tim = self._index_batch(base, last, max_ts, position, len(batch))
        try:
            _write_end(self._log, batch)
            if idx:
                _write_end(self._index, idx)
            if tim:
                _write_end(self._time, tim)
        except OSError:
            for f, length in ((self._log, position), (self._index, n_idx * OFFSET_ENTRY.size),
                              (self._time, n_time * TIME_ENTRY.size)):
                try:
                    os.ftruncate(f.fileno(), length)
                except OSError:
                    pass
            del self.index[n_idx:], self.time_index[n_time:]
            self.next_offset, self.max_timestamp, self.bytes_since_index = state
            raise
        self.size += len(batch)
        self.unflushed += last - base + 1

    def flush(self) -> int:
        """fsync the log and its indexes; returns the number of fsync calls."""
        for f in (self._log, self._index, self._time):
            f.flush()
            os.fsync(f.fileno())
        IO_COUNTERS["fsync_calls"] += 3          # beside the store's fdatasyncs, in GET_BROKER_RUNTIME_INFO
        self.unflushed = 0
        return 3

    # ---- reading ---------------------------------------------------------------------------------
    def scan(self, position: int = 0):
        """BatchInfo of every whole batch from `position` on (headers only)."""
        fd = self._log.fileno()
        end = self.size
        while position + HEADER_SIZE <= end:
            head = os.pread(fd, HEADER_SIZE, position)
            if len(head) < HEADER_SIZE:
                return
            info = batch_header(head)
            if info.size < HEADER_SIZE or position + info.size > end:
                return
            info.position = position
            yield info
            position += info.size

    def lookup(self, offset: int) -> int:
        """The position of the last indexed batch at or before `offset` (0 when none is)."""
        i = bisect.bisect_right(self.index, (offset - self.base_offset, 1 << 31)) - 1
        return self.index[i][1] if i >= 0 else 0

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset`, up to max_bytes (at least one batch, as Kafka
        returns the first batch even when it is larger than the limit)."""
        start = None
        end = None
        for info in self.scan(self.lookup(offset)):
            if start is None:
                if info.last_offset < offset:
                    continue
                start = info.position
            elif info.position + info.size - start > max_bytes:
                break
            end = info.position + info.size
        if start is None:
            return b""
        return os.pread(self._log.fileno(), end - start, start)

    def find_time(self, ts: int):
        """BatchInfo of the first batch whose max timestamp is >= ts, or None."""
        i = bisect.bisect_left([t for t, _ in self.time_index], ts) - 1
        pos = self.lookup(self.time_index[i][1] + self.base_offset) if i >= 0 else 0
        for info in self.scan(pos):
            if info.max_timestamp >= ts:
                return info
        return None

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._log.fileno(), size, position)

    # ---- life ------------------------------------------------------------------------------------
    def close(self) -> None:
        for f in (self._log, self._index, self._time):
            f.close()

    def delete(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.time_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
