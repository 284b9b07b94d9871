"""The store side of master/slave replication (SPEC §9; RocketMQ 4.x HAService's use of
DefaultMessageStore): hand out commitlog byte ranges from an offset, and apply received bytes at a
slave's end offset. No sockets: rmq/server/ha.py carries the bytes.

A range never crosses a mapped-file boundary (getCommitLogData reads one MappedFile) and, unlike
RocketMQ's, ends on a unit boundary (see _whole_units_end), so a slave
writes each range into the file of the same name and its commitlog is a byte-for-byte copy of the
master's, END_OF_FILE blank units included; its ReputMessageService then builds consumequeue and
index from those bytes exactly as for local writes.
"""
from __future__ import annotations

from rmq.common.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, read_total_and_magic

#: haTransferBatchSize: the most bytes one HA frame carries (RocketMQ 4.x default 32 KiB).
HA_TRANSFER_BATCH_SIZE = 32 * 1024


class HAApplyError(Exception):
    """Received bytes that cannot go at the slave's end (they do not start where its commitlog ends)."""


def max_phy_offset(store) -> int:
    """getMaxPhyOffset: the offset just after the commitlog's last written byte."""
    return store.commitlog.max_offset


def transfer_start_offset(store, slave_offset: int) -> int:
    """Where the master starts streaming to a slave that reported `slave_offset`. A slave with an
    empty commitlog (0) gets the master's last file from its start, as HAConnection.WriteSocketService
    does (masterOffset - masterOffset % mappedFileSizeCommitLog), not the whole history."""
    if slave_offset > 0:
        return slave_offset
    size = store.commitlog.file_size
    top = store.commitlog.max_offset
    return max(0, top - top % size)


def get_commitlog_data(store, offset: int, max_bytes: int = HA_TRANSFER_BATCH_SIZE) -> bytes | None:
    """DefaultMessageStore.getCommitLogData: the bytes from `offset` up to the write position of the
    mapped file that holds it, at most `max_bytes` (one file at most). b"" when nothing is written
    there yet, None when `offset` is not stored (before the oldest file, or past the end)."""
    if max_bytes <= 0:
        return b""
    cl = store.commitlog
    mf = cl.queue.find_by_offset(offset)
    if mf is None:
        return b"" if offset == cl.max_offset else None
    pos = offset - mf.file_from_offset
    wrote = mf.wrote_position
    end = min(wrote, pos + max_bytes)
    if end <= pos:
        return b""
    try:
        end = _whole_units_end(mf.mm, pos, end, wrote)
        return mf.read(pos, end - pos)
    except ValueError:  # the file was deleted by cleanup meanwhile
        return None


def _whole_units_end(mm, pos: int, end: int, wrote: int) -> int:
    """Where the last whole unit (message or END_OF_FILE blank) that starts in [pos, end) ends, so a
    slave's commitlog always ends on a unit boundary (its normal recovery trusts its checkpoint's end
    offset, and its reput dispatches whole units). One unit larger than the window goes alone. When
    the first unit cannot be read as one, the raw window goes, as RocketMQ sends it."""
    p = pos
    while p < end and p + 8 <= wrote:
        total, magic = read_total_and_magic(mm, p)
        if total <= 0 or p + total > wrote or magic not in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE):
            break
        if p + total > end:
            if p == pos:
                p += total
            break
        p += total
    return p if p > pos else end


def append_to_commitlog(store, start_offset: int, data) -> int:
    """DefaultMessageStore.appendToCommitLog on a slave: write `data` at `start_offset`, which must be
    the commitlog's end (an empty commitlog takes bytes at the start of any file, the way a new
    slave receives the master's last file), then dispatch the new units to consumequeue and index.
    Returns the new max offset; HAApplyError when the bytes do not start at the end."""
    cl = store.commitlog
    n = len(data)
    with store.put_lock:
        if store.shutdown_done:
            raise HAApplyError("the message store is shut down")
        empty = not cl.queue.files
        end = cl.max_offset
        if empty:
            if start_offset % cl.file_size:
                raise HAApplyError(f"bytes for offset {start_offset} do not start a commitlog file "
                                   f"(mappedFileSizeCommitLog {cl.file_size}) and this commitlog is empty")
        elif start_offset != end:
            raise HAApplyError(f"bytes for offset {start_offset} do not start at this commitlog's end {end}")
        if n == 0:
            return end
        view = memoryview(data)
        done = 0
        while done < n:
            mf = cl.queue.get_last_file(start_offset)
            pos = mf.wrote_position
            take = min(mf.file_size - pos, n - done)
            mf.write_through(pos, view[done:done + take])
            mf.wrote_position = pos + take
            done += take
        if empty:
            store.reput.reput_from_offset = start_offset
    if store._flush_service is not None:
        store._flush_service.wakeup()
    # ReputMessageService: consumequeue and index from the new bytes (the thread mode wakes its thread)
    if store._inline:
        store.reput.do_reput()
    else:
        store.reput.wakeup()
    if store.last_dispatched_timestamp > cl.last_store_timestamp:
        cl.last_store_timestamp = store.last_dispatched_timestamp
    return cl.max_offset


__all__ = ["HA_TRANSFER_BATCH_SIZE", "HAApplyError", "max_phy_offset", "transfer_start_offset",
           "get_commitlog_data", "append_to_commitlog"]
