"""ConsumeQueue: per topic/queueId index of 20-byte units pointing into the commitlog (SPEC §2).

Unit = commitlog offset (8) + size (4) + tag hashcode (8); 300,000 units per file by default;
files live in consumequeue/<topic>/<queueId>/ and are named by their start byte offset.
"""
from __future__ import annotations

import os
import queue
import struct
import threading

from .mapped_file import MappedFile, MappedFileQueue

CQ_STORE_UNIT_SIZE = 20
CQ_UNIT = struct.Struct(">qiq")
# ConsumeQueue.fillPreBlank writes (0, Integer.MAX_VALUE, 0) before the first real unit of a queue
# that starts mid-file, so the units stay contiguous and a restart's search still works.
BLANK_UNIT = CQ_UNIT.pack(0, 0x7FFFFFFF, 0)


class ConsumeQueue:
    """One topic/queueId's consumequeue. Offsets in the API are logical (unit numbers)."""

    def __init__(self, store_root: str, topic: str, queue_id: int, file_size: int):
        self.topic = topic
        self.queue_id = queue_id
        self.dir = os.path.join(store_root, "consumequeue", topic, str(queue_id))
        self.mfq = MappedFileQueue(self.dir, file_size)
        self.file_size = file_size
        self.min_logic_offset = 0  # bytes; raised by cleanup (correctMinOffset)
        self.max_physic_offset = -1  # end of the last dispatched commitlog unit

    # --------------------------------------------------------------- offsets
    @property
    def max_offset(self) -> int:
        """Next logical offset to be written (getMaxOffsetInQueue)."""
        return self.mfq.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.mfq.min_offset) // CQ_STORE_UNIT_SIZE

    # --------------------------------------------------------------- write
    def put_unit(self, queue_offset: int, phy: int, size: int, tags_code: int) -> None:
        """put_units for one unit; the common case (it goes right after the last unit, in the
        last file) writes in place, into pages MappedFile.prepare_pages made ready."""
        files = self.mfq.files
        if files:
            mf = files[-1]
            wp = mf.wrote_position
            if wp + CQ_STORE_UNIT_SIZE <= mf.file_size and mf.file_from_offset + wp == queue_offset * CQ_STORE_UNIT_SIZE:
                if wp + CQ_STORE_UNIT_SIZE > mf.prepared_until:
                    mf.prepare_pages(wp + CQ_STORE_UNIT_SIZE)
                CQ_UNIT.pack_into(mf.mm, wp, phy, size, tags_code)
                mf.wrote_position = wp + CQ_STORE_UNIT_SIZE
                if phy + size > self.max_physic_offset:
                    self.max_physic_offset = phy + size
                return
        self.put_units(queue_offset, CQ_UNIT.pack(phy, size, tags_code), phy + size)

    def put_units(self, queue_offset: int, data: bytes, max_phy_end: int) -> None:
        """Write `data` (whole units) at logical `queue_offset`. Units already present are skipped,
        as ConsumeQueue.putMessagePositionInfo does when a dispatch is repeated on recovery."""
        expect = queue_offset * CQ_STORE_UNIT_SIZE
        cur = self.mfq.max_offset
        if not self.mfq.files:
            mf = self.mfq.get_last_file(expect)
            self.min_logic_offset = max(self.min_logic_offset, expect)
            cur = mf.file_from_offset
        if expect < cur:
            skip = cur - expect
            if skip >= len(data):
                return
            data = data[skip:]
            expect = cur
        elif expect > cur:
            # A hole: fill with blank units so later units land at their offsets.
            data = BLANK_UNIT * ((expect - cur) // CQ_STORE_UNIT_SIZE) + data
            expect = cur
        while data:
            mf = self.mfq.get_last_file(expect)
            room = mf.file_size - mf.wrote_position
            chunk = data[:room]
            if mf.wrote_position + len(chunk) > mf.prepared_until:
                mf.prepare_pages(mf.wrote_position + len(chunk))
            mf.append(chunk)
            data = data[room:]
            expect += len(chunk)
        if max_phy_end > self.max_physic_offset:
            self.max_physic_offset = max_phy_end

    # --------------------------------------------------------------- read
    def get_units(self, queue_offset: int, max_count: int) -> bytes:
        """Raw units from `queue_offset`, at most `max_count`, not crossing a file boundary."""
        where = self.units_range(queue_offset, max_count)
        if where is None:
            return b""
        mf, rel, end = where
        try:
            return mf.read(rel, end - rel)
        except ValueError:
            return b""

    def units_range(self, queue_offset: int, max_count: int) -> tuple[MappedFile, int, int] | None:
        """Where get_units reads: (file, start, end) byte positions in that file, or None."""
        pos = queue_offset * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset:
            return None
        mf = self.mfq.find_by_offset(pos)
        if mf is None:
            return None
        rel = pos - mf.file_from_offset
        end = min(mf.wrote_position, rel + max_count * CQ_STORE_UNIT_SIZE)
        if end <= rel:
            return None
        return mf, rel, end

    def get_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        raw = self.get_units(queue_offset, 1)
        if len(raw) < CQ_STORE_UNIT_SIZE:
            return None
        return CQ_UNIT.unpack(raw)

    def last_unit(self) -> tuple[int, int, int] | None:
        mo = self.max_offset
        return self.get_unit(mo - 1) if mo > 0 else None

    # --------------------------------------------------------------- recovery / cleanup
    def load(self) -> None:
        self.mfq.load()

    def recover(self) -> None:
        """Find the write position: units are filled in order, so the first unit with size 0 (after
        the last file's start) ends the queue. Binary search keeps a normal restart fast."""
        files = self.mfq.files
        while files:
            mf = files[-1]
            n = mf.data_end() // CQ_STORE_UNIT_SIZE  # no unit past the first hole (nor a read there)
            mm = mf.mm
            lo, hi = 0, n  # first index whose unit is empty
            while lo < hi:
                mid = (lo + hi) // 2
                _, size, _ = CQ_UNIT.unpack_from(mm, mid * CQ_STORE_UNIT_SIZE)
                if size > 0:
                    lo = mid + 1
                else:
                    hi = mid
            mf.wrote_position = mf.flushed_position = lo * CQ_STORE_UNIT_SIZE
            if lo == 0 and len(files) > 1:
                files.pop().destroy()
                continue
            break
        last = self.last_unit()
        if last:
            self.max_physic_offset = last[0] + last[1]

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units that point at or beyond `phy_offset` (commitlog truncated on recovery)."""
        while self.mfq.files:
            mo = self.max_offset
            last = self.get_unit(mo - 1) if mo > 0 else None
            if last is None or last[0] + last[1] <= phy_offset:
                break
            # binary search the first unit pointing past phy_offset in the last file
            mf = self.mfq.files[-1]
            n = mf.wrote_position // CQ_STORE_UNIT_SIZE
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                off, size, _ = CQ_UNIT.unpack_from(mf.mm, mid * CQ_STORE_UNIT_SIZE)
                if off + size <= phy_offset:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == 0 and len(self.mfq.files) > 1:
                self.mfq.files.pop().destroy()
                continue
            mf.zero_from(lo * CQ_STORE_UNIT_SIZE)
            mf.wrote_position = mf.flushed_position = lo * CQ_STORE_UNIT_SIZE
            break
        last = self.last_unit()
        self.max_physic_offset = last[0] + last[1] if last else -1

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete whole files whose last unit points below the commitlog's minimum offset and
        move min_logic_offset to the first unit still pointing at stored data. Returns files deleted."""
        deleted = 0
        while len(self.mfq.files) > 1:
            mf = self.mfq.files[0]
            if mf.wrote_position < CQ_STORE_UNIT_SIZE:
                break
            off, size, _ = CQ_UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_STORE_UNIT_SIZE)
            if off < commitlog_min_offset:
                self.mfq.delete_first(1)
                deleted += 1
            else:
                break
        self.correct_min_offset(commitlog_min_offset)
        return deleted

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        files = self.mfq.files
        if not files:
            return
        mf = files[0]
        n = mf.wrote_position // CQ_STORE_UNIT_SIZE
        lo = max(0, (self.min_logic_offset - mf.file_from_offset) // CQ_STORE_UNIT_SIZE)
        lo_b, hi = lo, n
        while lo_b < hi:
            mid = (lo_b + hi) // 2
            off, size, _ = CQ_UNIT.unpack_from(mf.mm, mid * CQ_STORE_UNIT_SIZE)
            if size <= 0 or off < commitlog_min_offset:
                lo_b = mid + 1
            else:
                hi = mid
        self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + lo_b * CQ_STORE_UNIT_SIZE)

    def prepare_first_file(self) -> bool:
        """Create the directory and first file of a queue nothing was written to yet (off the put
        path: the allocator thread calls it when a topic is created). False if the queue has files."""
        with self.mfq.lock:
            if self.mfq.files:
                return False
            self.mfq.get_last_file(0)
            return True

    def flush(self, least_pages: int = 0) -> None:
        self.mfq.flush(least_pages)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()


class ConsumeQueueAllocator(threading.Thread):
    """Creates the directory and first file of new queues off the put path (as RocketMQ's
    AllocateMappedFileService prepares the next commitlog file): when a topic is created, its queues
    are made here, so the first message to each queue does not pay mkdir, open, ftruncate and mmap."""

    def __init__(self, store):
        super().__init__(name="ConsumeQueueAllocator", daemon=True)
        self.store = store
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.prepared = 0

    def submit(self, topic: str, queue_ids) -> None:
        self.requests.put((topic, list(queue_ids)))

    def barrier(self) -> threading.Event:
        """An event set once every request submitted before it is done."""
        ev = threading.Event()
        self.requests.put(ev)
        return ev

    def run(self) -> None:
        while True:
            item = self.requests.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            topic, qids = item
            for qid in qids:
                try:
                    if self.store.prepare_consume_queue(topic, qid):
                        self.prepared += 1
                except Exception:  # a failure here only means the put path creates the file itself
                    self.store.log.exception("preparing consumequeue %s/%d failed", topic, qid)

    def shutdown(self) -> None:
        self.requests.put(None)
        self.join(timeout=10)
        while True:                     # release anyone still waiting on a barrier
            try:
                item = self.requests.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, threading.Event):
                item.set()
