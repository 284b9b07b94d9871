"""CommitLog: the single sequential log every topic's messages are appended to (SPEC §2, seeds 000/001/003).

Files are named by their 20-digit start offset; a file that cannot hold the next unit gets an
END_OF_FILE blank unit (TOTALSIZE + BLANK_MAGIC_CODE) and the unit goes to the next file.

Disk full: files are created sparse; every append has MappedFile.reserve allocate its blocks
first (1 MiB at a time), so a unit written through the mapping never lands on a block the file
system has not allocated, and a full disk shows as ENOSPC before anything is written. An append
that fails that way leaves the log as it was (write position, queue offsets, files), and the
OSError goes to the caller (DefaultMessageStore turns it into a refusal).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator

from rmq.common.message import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    TRANSACTION_PREPARED_TYPE,
    CorruptMessage,
    MessageExt,
    decode_message,
    pack_host,
    read_total_and_magic,
    store_timestamp_of,
)
from rmq.store.unit import EncodedEntries, EncodedUnits, PreparedMessage, blank_unit

from .. import native
from .mapped_file import MappedFileQueue

BLANK_HEADER_SIZE = 8  # what _roll writes of the END_OF_FILE unit: TOTALSIZE + BLANK magic


@dataclass(slots=True)
class AppendResult:
    """Where one unit landed (AppendMessageResult)."""

    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp: int
    msg_id: str = ""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLog:
    """Appends prepared units, assigns queue offsets (topicQueueTable), reads units back."""

    def __init__(self, store_root: str, file_size: int, store_host: tuple[str, int], clock=_now_ms):
        self.dir = os.path.join(store_root, "commitlog")
        self.queue = MappedFileQueue(self.dir, file_size)
        self.file_size = file_size
        self.store_host = store_host
        self.store_addr, self.store_port, self.store_v6 = pack_host(store_host)
        self.clock = clock
        # "topic-queueId" -> next queue offset, as CommitLog.topicQueueTable in RocketMQ 4.x.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.last_store_timestamp = 0
        self.staging = bytearray(1 << 20)  # append_encoded writes batches through it
        self.on_roll = None  # called after a file is closed with its blank unit (the store rechecks the disk)

    # ----------------------------------------------------------------- write path
    def _store_time(self) -> int:
        ts = self.clock()
        return ts if ts >= self.last_store_timestamp else self.last_store_timestamp  # never backwards

    def append_one(self, pm: PreparedMessage, store_ts: int | None = None) -> AppendResult:
        """Append one unit at the end of the log, assigning its queue offset (prepared and rollback
        transaction units take none). A unit that does not fit in the current file closes it
        with a blank unit and goes to a new file. The caller holds the put lock."""
        if store_ts is None:
            store_ts = self._store_time()
        mf = self.queue.get_last_file()
        pos = mf.wrote_position
        size = pm.size
        if pos + size + END_FILE_MIN_BLANK_LENGTH > mf.file_size:
            mf = self._roll(mf, pos, store_ts)
            pos = mf.wrote_position
        if pos + size > mf.reserved_until:
            mf.reserve(pos + size)  # before anything of the unit is written or assigned
        msg = pm.msg
        if msg.sys_flag & TRANSACTION_PREPARED_TYPE:
            qoff = 0  # prepared (0b01..) and rollback (0b11..)
        else:
            key = (msg.topic, msg.queue_id)
            table = self.topic_queue_table
            qoff = table.get(key, 0)
            table[key] = qoff + 1
        phy = mf.file_from_offset + pos
        ext = native.ext
        if ext is not None:
            ext.write_unit(mf.mm, pos, size, msg.body, pm.topic_bytes, pm.props_bytes, pm.born_addr, self.store_addr,
                           msg.queue_id, msg.flag, qoff, phy, msg.sys_flag, msg.born_timestamp, pm.born_port, store_ts,
                           self.store_port, msg.reconsume_times, msg.prepared_transaction_offset)
        else:
            pm.write_into(mf.mm, pos, qoff, phy, store_ts, self.store_addr, self.store_port)
        mf.wrote_position = pos + size
        mf.store_timestamp = store_ts
        self.last_store_timestamp = store_ts
        return AppendResult(phy, size, qoff, store_ts)

    def append(self, batch: list[PreparedMessage]) -> list[AppendResult]:
        """append_one for each, with one store timestamp: the units of one call stay in order and
        together (the caller holds the put lock)."""
        store_ts = self._store_time()
        if len(batch) == 1:
            return [self.append_one(batch[0], store_ts)]
        mf = self.queue.get_last_file()
        total = sum(pm.size for pm in batch)
        if mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH <= mf.file_size:
            if mf.wrote_position + total > mf.reserved_until:
                mf.reserve(mf.wrote_position + total)  # all of it reserved: nothing below can fail
            return [self.append_one(pm, store_ts) for pm in batch]
        mark = self._mark({(pm.msg.topic, pm.msg.queue_id) for pm in batch})
        try:
            return [self.append_one(pm, store_ts) for pm in batch]
        except OSError:
            self._undo(mark)
            raise

    def _roll(self, mf, pos: int, store_ts: int):
        """Close `mf` at `pos` with an END_OF_FILE blank unit; returns the next file. A failure
        (no room for the blank unit, or for the next file) leaves a consistent log: `mf` as it
        was, or closed with its blank unit and no next file yet."""
        if pos + BLANK_HEADER_SIZE > mf.reserved_until:
            mf.reserve(pos + BLANK_HEADER_SIZE)
        mf.write_at(pos, blank_unit(mf.file_size - pos))
        mf.wrote_position = mf.file_size
        mf.store_timestamp = store_ts
        if self.on_roll is not None:
            self.on_roll()
        return self.queue.get_last_file()

    def _mark(self, keys) -> tuple:
        """What _undo puts back: the files, the last one's write position, the queue offsets of `keys`."""
        files = self.queue.files
        last = files[-1] if files else None
        table = self.topic_queue_table
        return len(files), last, last.wrote_position if last else 0, [(k, table.get(k)) for k in keys]

    def _undo(self, mark: tuple) -> None:
        """Take back an append that failed part way (the disk filled up between two files): files it
        created go, the bytes it wrote past the old write position are cut off, the queue offsets
        it assigned are given back. Nothing was acknowledged or dispatched from it."""
        n, last, pos, offsets = mark
        q = self.queue
        with q.lock:
            while len(q.files) > n:
                q.files.pop().destroy()
        if last is not None:
            last.zero_from(pos)
            last.wrote_position = pos
        table = self.topic_queue_table
        for k, v in offsets:
            if v is None:
                table.pop(k, None)
            else:
                table[k] = v

    def _cut_tail(self, mf) -> None:
        """After a pwrite append failed (ENOSPC): the bytes it may have written past the write
        position are cut off, so a recovery scan never meets half a batch that was refused."""
        try:
            mf.zero_from(mf.wrote_position)
        except (OSError, ValueError):
            pass

    def staging_buffer(self, size: int) -> bytearray:
        """The buffer append_encoded writes a batch through (used under the put lock), at least
        `size` bytes long."""
        if len(self.staging) < size:
            self.staging = bytearray(max(size, 2 * len(self.staging)))
        return self.staging

    def append_encoded(self, batch: EncodedUnits, cq_units: bytearray) -> tuple[int, int]:
        """append() for units encoded in one go (EncodedUnits), through rmq._native.append_units:
        the same bytes, queue offsets, rollover and blank unit as append() gives the same messages.
        Fills `cq_units` with the batch's 20-byte consumequeue units. The caller holds the put lock.
        Returns (first queue offset, store timestamp).

        A batch that fits in the current file is completed (offsets, store time and host) in the
        staging buffer and goes to the file with one pwrite: the kernel then allocates the page
        cache pages inside the write instead of taking a page fault per 4 KiB of the mapping, as
        RocketMQ's transient store pool commits through FileChannel.write. The mapping reads the
        same pages. put_batch encodes straight into the staging buffer (batch.units is then a view
        of it, and nothing is copied)."""
        append_units = native.ext.append_units
        store_ts = self._store_time()
        key = (batch.topic, batch.queue_id)
        qoff = self.topic_queue_table.get(key, 0)
        mfq = self.queue
        mf = mfq.get_last_file()
        pos = mf.wrote_position
        fsize = mf.file_size
        total = len(batch.units)
        done, upos, force = 0, 0, False
        if pos + total + END_FILE_MIN_BLANK_LENGTH <= fsize:
            if pos + total > mf.reserved_until:
                mf.reserve(pos + total)  # ENOSPC here, before anything is written or assigned
            with memoryview(self.staging_buffer(total))[:total] as buf:
                done, end, upos = append_units(buf, 0, fsize - pos, batch.units, 0, 0, qoff, mf.file_from_offset + pos,
                                               store_ts, self.store_addr, self.store_port, batch.tags_codes, cq_units,
                                               False)
                try:
                    mf.write_through(pos, buf[:end])
                except OSError:
                    self._cut_tail(mf)
                    raise
            pos += end
        if done < batch.count:
            # Units written through the mapping, across a file boundary: every block reserved
            # before it is written, and all of it taken back if the disk fills up part way.
            mark = self._mark((key,))
            try:
                return self._append_encoded_rolling(batch, cq_units, mf, pos, done, upos, qoff, store_ts)
            except OSError:
                self._undo(mark)
                raise
        mf.wrote_position = pos
        mf.store_timestamp = store_ts
        self.last_store_timestamp = store_ts
        self.topic_queue_table[key] = qoff + batch.count
        return qoff, store_ts

    def _append_encoded_rolling(self, batch: EncodedUnits, cq_units: bytearray, mf, pos: int, done: int, upos: int,
                                qoff: int, store_ts: int) -> tuple[int, int]:
        """append_encoded's units from unit `done` (at `upos` in batch.units) on, written through the
        mapping at `pos` of `mf` and on into the next files."""
        append_units = native.ext.append_units
        key = (batch.topic, batch.queue_id)
        fsize = mf.file_size
        force = False
        left = len(batch.units) - upos
        if min(fsize, pos + left) > mf.reserved_until:
            mf.reserve(min(fsize, pos + left))
        while done < batch.count:
            n, pos, upos = append_units(mf.mm, pos, fsize, batch.units, upos, done, qoff, mf.file_from_offset,
                                        store_ts, self.store_addr, self.store_port, batch.tags_codes, cq_units, force)
            done += n
            if done == batch.count:
                break
            # The next unit does not fit: close this file with a blank unit, go on in the next one.
            self.topic_queue_table[key] = qoff + done
            mf = self._roll(mf, pos, store_ts)
            pos = mf.wrote_position
            left = len(batch.units) - upos
            if min(fsize, pos + left) > mf.reserved_until:
                mf.reserve(min(fsize, pos + left))
            force = True
        mf.wrote_position = pos
        mf.store_timestamp = store_ts
        self.last_store_timestamp = store_ts
        self.topic_queue_table[key] = qoff + batch.count
        return qoff, store_ts

    def append_encoded_many(self, batches: list[EncodedUnits], cq_units: list[bytearray]) -> list[tuple[int, int]] | None:
        """append_encoded for several batches (of any queues) at once, in order, with one store
        timestamp: when all of them fit in the current file they are completed one after the other
        in the staging buffer and go to the file with one pwrite per staging buffer's worth (a
        Produce request of many partitions of one record each would otherwise take a pwrite per
        partition). The bytes, queue offsets and consumequeue units are those append_encoded
        gives them one by one. None when they do not all fit in the current file: the caller then
        appends them one at a time (append_encoded rolls the file over). The caller holds the put
        lock."""
        total = biggest = 0
        for b in batches:
            n = len(b.units)
            total += n
            if n > biggest:
                biggest = n
        mf = self.queue.get_last_file()
        pos = mf.wrote_position
        fsize = mf.file_size
        if pos + total + END_FILE_MIN_BLANK_LENGTH > fsize:
            return None
        if pos + total > mf.reserved_until:
            mf.reserve(pos + total)
        append_units = native.ext.append_units
        store_ts = self._store_time()
        table = self.topic_queue_table
        nexts: dict = {}
        out = []
        addr, port = self.store_addr, self.store_port
        staging = self.staging_buffer(min(total, max(biggest, len(self.staging))))  # grows past 1 MiB for a big batch only
        at = pos   # where staging[0] goes in the file
        off = 0    # bytes staged, not yet written
        with memoryview(staging) as buf:
            cap = len(buf)
            try:
                for b, cq in zip(batches, cq_units):
                    if off and off + len(b.units) > cap:
                        mf.write_through(at, buf[:off])
                        at += off
                        off = 0
                    key = (b.topic, b.queue_id)
                    qoff = nexts.get(key)
                    if qoff is None:
                        qoff = table.get(key, 0)
                    # buf[off] is file position at + off, physical offset file_from_offset + at + off
                    done, end, _ = append_units(buf, off, fsize - at, b.units, 0, 0, qoff, mf.file_from_offset + at,
                                                store_ts, addr, port, b.tags_codes, cq, False)
                    if done != b.count:  # cannot happen: all of them fit
                        raise RuntimeError("append_encoded_many: a batch did not fit in the staging buffer")
                    off = end
                    nexts[key] = qoff + b.count
                    out.append((qoff, store_ts))
                if off:
                    mf.write_through(at, buf[:off])
            except OSError:
                self._cut_tail(mf)
                raise
        mf.wrote_position = at + off
        mf.store_timestamp = store_ts
        self.last_store_timestamp = store_ts
        table.update(nexts)
        return out

    def append_entries(self, entries: EncodedEntries, selection: bytes, biggest: int,
                       cq_units: bytearray) -> tuple[int, int, int] | None:
        """append_encoded_many for the entries of `entries` named by `selection`, in C
        (rmq._native.produce_append): the same bytes, queue offsets and consumequeue units (in
        cq_units' slots of their units), one pwrite per staging buffer's worth. `biggest` is the
        size of the largest entry's units. Returns (end physical offset, units, store timestamp),
        or None when they do not all fit in the current file (nothing done). The caller holds the
        put lock."""
        mf = self.queue.get_last_file()
        upto = min(mf.file_size, mf.wrote_position + len(entries.units))  # at most what they can take
        if upto > mf.reserved_until:
            mf.reserve(upto)
        store_ts = self._store_time()
        staging = self.staging_buffer(biggest)
        try:
            out = native.ext.produce_append(staging, mf.fd, mf.wrote_position, mf.file_from_offset, mf.file_size,
                                            entries.table, selection, entries.units, entries.tags, entries.names,
                                            self.topic_queue_table, store_ts, self.store_addr, self.store_port,
                                            cq_units)
        except OSError:  # a pwrite failed (ENOSPC): queue offsets and write position were left as they were
            self._cut_tail(mf)
            raise
        if out is None:
            return None
        pos, end, n = out
        mf.wrote_position = pos
        mf.store_timestamp = store_ts
        self.last_store_timestamp = store_ts
        return end, n, store_ts

    # ----------------------------------------------------------------- read path
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def read(self, offset: int, size: int) -> bytes | None:
        """The `size` bytes at physical `offset`, or None when that is not (or no longer) stored."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        try:
            return mf.read(pos, size)
        except ValueError:  # file deleted by cleanup meanwhile
            return None

    def read_message(self, offset: int, *, check_crc: bool = False) -> MessageExt | None:
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return None
        try:
            total, magic = read_total_and_magic(mf.mm, pos)
            if magic != MESSAGE_MAGIC_CODE or total <= 0 or pos + total > mf.wrote_position:
                return None
            return decode_message(mf.read(pos, total), 0, check_crc=check_crc)
        except (ValueError, CorruptMessage):
            return None

    def store_timestamp_at(self, offset: int) -> int:
        """pickupStoreTimestamp: -1 when not found."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return -1
        try:
            return store_timestamp_of(mf.mm, offset - mf.file_from_offset)
        except (ValueError, IndexError):
            return -1

    def iter_units(self, start: int, *, check_crc: bool = True, decode: bool = True,
                   end: int | None = None) -> Iterator[tuple[int, int, MessageExt | None]]:
        """Walk the log from `start` (up to `end` if given), yielding (offset, size, message) per
        MESSAGE unit, hopping blank units. Stops at the first zero, torn or corrupt unit; where it
        stopped is `self.scan_end`."""
        self.scan_end = start
        limit = end if end is not None else 1 << 62
        mf = self.queue.find_by_offset(start)
        if mf is None:
            return
        idx = self.queue.files.index(mf)
        pos = start - mf.file_from_offset
        files = self.queue.files
        while idx < len(files):
            mf = files[idx]
            mm = mf.mm
            fsize = mf.file_size
            while pos + 8 <= fsize:
                if mf.file_from_offset + pos >= limit:
                    return
                total, magic = read_total_and_magic(mm, pos)
                if magic == MESSAGE_MAGIC_CODE and 0 < total <= fsize - pos:
                    if mf.file_from_offset + pos + total > limit:
                        # not wholly written below `end` yet (a slave's HA range may end inside a unit)
                        self.scan_end = mf.file_from_offset + pos
                        return
                    msg = None
                    if decode or check_crc:
                        try:
                            msg = decode_message(mm[pos:pos + total], 0, check_crc=check_crc)
                        except CorruptMessage:
                            self.scan_end = mf.file_from_offset + pos
                            return
                        if msg.commit_log_offset != mf.file_from_offset + pos:
                            self.scan_end = mf.file_from_offset + pos
                            return
                    yield mf.file_from_offset + pos, total, msg if decode else None
                    pos += total
                    self.scan_end = mf.file_from_offset + pos
                elif magic == BLANK_MAGIC_CODE and total == fsize - pos:
                    pos = fsize
                    self.scan_end = mf.file_from_offset + fsize
                    break
                else:
                    self.scan_end = mf.file_from_offset + pos
                    return
            else:
                if pos < fsize:  # fewer than 8 bytes left: the file ends here
                    self.scan_end = mf.file_from_offset + pos
                    return
            idx += 1
            pos = 0
        return

    def scan_native(self, start: int, *, check_crc: bool, end: int | None = None, queue_max: dict | None = None,
                    index_from: int = 0) -> tuple[int, int, list] | None:
        """iter_units' walk (and its stop: `scan_end`) in C, rmq._native.scan_units, file by file:
        (units walked, store time of the last one, [(file, position) of the units a re-dispatch
        would change]) - see scan_units for `queue_max` and `index_from`; that list stays empty
        without queue_max. None without the C extension (use iter_units)."""
        ext = native.ext
        if ext is None:
            return None
        self.scan_end = start
        limit = end if end is not None else 1 << 62
        files = self.queue.files
        mf = self.queue.find_by_offset(start)
        if mf is None:
            return 0, 0, []
        idx = files.index(mf)
        pos = start - mf.file_from_offset
        units, last_ts, todo = 0, 0, []
        while idx < len(files):
            mf = files[idx]
            stop, pos, n, ts, where = ext.scan_units(mf.mm, pos, limit, mf.file_from_offset, check_crc, queue_max,
                                                     index_from)
            units += n
            if n:
                last_ts = ts
            if where:
                todo.extend((mf, p) for p in memoryview(where).cast("q"))
            self.scan_end = mf.file_from_offset + pos
            if stop != 1:
                break
            idx += 1
            pos = 0
        return units, last_ts, todo

    def set_max_offset(self, offset: int, *, zero_tail: bool = True) -> None:
        """After recovery: files before `offset` are full, the one holding it is written up to it,
        later files go. With `zero_tail` the bytes after `offset` are erased (a torn tail)."""
        if zero_tail:
            self.queue.truncate_dirty(offset)
            return
        keep = []
        for f in self.queue.files:
            if f.file_from_offset + f.file_size <= offset:
                f.wrote_position = f.flushed_position = f.file_size
            elif f.file_from_offset <= offset:
                f.wrote_position = f.flushed_position = offset - f.file_from_offset
            else:
                f.destroy()
                continue
            keep.append(f)
        self.queue.files = keep

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    def close(self) -> None:
        self.queue.close()
