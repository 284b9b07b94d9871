"""IndexFile and IndexService: the hash index from `topic#key` to commitlog offsets (SPEC §2, seed 001).

File = 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount,
indexCount) + hashSlotNum slots x 4 bytes + indexNum entries x 20 bytes (keyHash 4, phyOffset 8,
timeDiff 4 in seconds since beginTimestamp, prevIndexNo 4). A slot holds its newest entry's number;
entries chain backwards through prevIndexNo. Files are named by creation time yyyyMMddHHmmssSSS.

Disk full: the header and hash slots (written at random places) are allocated with
posix_fallocate when a file is created, the entries a chunk (INDEX_RESERVE_CHUNK) ahead of the
next one, so no write through the mapping lands on a block the file system has not allocated
(that would be a SIGBUS); a reservation that fails raises OSError ENOSPC/EDQUOT instead, with
nothing written (a file that cannot be created is removed again).
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
import time

from rmq.common.jhash import java_string_hash

from .. import native
from .mapped_file import PAGE_SIZE, StoreError, reserve_blocks

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_INT = struct.Struct(">i")
# Entries are reserved this many bytes ahead (13,107 entries of 20 bytes).
INDEX_RESERVE_CHUNK = 256 * 1024


def new_file_reserve_bytes(hash_slot_num: int, index_num: int) -> int:
    """What creating an index file allocates at once: header, hash slots, the first entries chunk."""
    size = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE
    return min(size, INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + INDEX_RESERVE_CHUNK)


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(String.hashCode), with Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    if h == -2**31:
        return 0
    return abs(h)


def build_key(topic: str, key: str) -> str:
    """IndexService.buildKey."""
    return f"{topic}#{key}"


def file_name_for(ts_ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS in local time."""
    t = time.localtime(ts_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ts_ms % 1000:03d}"


class IndexFile:
    """One index file over mmap. Header fields are written through as they change."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int,
                 end_phy_offset: int = 0, end_timestamp: int = 0, *, create: bool = True):
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        size = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE
        self.file_size = size
        exists = os.path.exists(path)
        if exists and os.path.getsize(path) != size:
            raise StoreError(f"{path}: size {os.path.getsize(path)} bytes, expected {size} "
                             f"for maxHashSlotNum={hash_slot_num}, maxIndexNum={index_num}")
        if not exists and not create:
            raise StoreError(f"{path}: missing")
        self.entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        # Bytes below this are allocated; a file found on disk is reserved again on its first put
        # (older files were made sparse; posix_fallocate over allocated blocks costs little).
        self.reserved_until = 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not exists:
                try:
                    os.ftruncate(fd, size)
                    reserve = new_file_reserve_bytes(hash_slot_num, index_num)
                    self.reserved_until = reserve if reserve_blocks(fd, 0, reserve) else size
                except OSError:
                    os.unlink(path)  # no half-made index file left behind (its header was never written)
                    raise
            self.mm = mmap.mmap(fd, size)
            self._fd = fd
        except BaseException:
            os.close(fd)
            raise
        if exists:
            self._load_header()
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            self._write_header()

    def _load_header(self) -> None:
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = _HEADER.unpack_from(self.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if self.index_count > self.index_num + 1:
            raise StoreError(f"{self.path}: header says {self.index_count} entries, "
                             f"file holds at most {self.index_num}")

    def reserve_entries(self, n: int) -> None:
        """Allocate the blocks of the next `n` entries (and the hash slots, for a file found on disk)
        before they are written through the mapping; OSError ENOSPC/EDQUOT when there is no room."""
        want = min(self.file_size, self.entries_base + (min(self.index_count + n, self.index_num) + 1) * INDEX_SIZE)
        if want <= self.reserved_until:
            return
        start = self.reserved_until - self.reserved_until % PAGE_SIZE
        end = min(self.file_size, want + INDEX_RESERVE_CHUNK)
        self.reserved_until = end if reserve_blocks(self._fd, start, end - start) else self.file_size

    def _write_header(self) -> None:
        _HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                          self.end_phy_offset, self.hash_slot_count, self.index_count)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """IndexFile.putKey. Returns False when the file is full."""
        if self.index_count >= self.index_num:
            return False
        if self.entries_base + (self.index_count + 1) * INDEX_SIZE > self.reserved_until:
            self.reserve_entries(1)
        key_hash = index_key_hash(key)
        abs_slot = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        mm = self.mm
        slot_value = _INT.unpack_from(mm, abs_slot)[0]
        if slot_value <= INVALID_INDEX or slot_value > self.index_count:
            slot_value = INVALID_INDEX
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = (store_timestamp - self.begin_timestamp) // 1000 if store_timestamp >= self.begin_timestamp \
                else -((self.begin_timestamp - store_timestamp) // 1000)
            time_diff = 0 if time_diff < 0 else min(time_diff, 2**31 - 1)
        count = self.index_count
        _ENTRY.pack_into(mm, self.entries_base + count * INDEX_SIZE, key_hash, phy_offset, time_diff, slot_value)
        _INT.pack_into(mm, abs_slot, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        # RocketMQ 4.x counts every put here (hashSlotCount grows even on a used slot).
        self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """IndexFile.selectPhyOffset: walk the slot's chain newest first, appending matches."""
        key_hash = index_key_hash(key)
        abs_slot = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        mm = self.mm
        slot_value = _INT.unpack_from(mm, abs_slot)[0]
        if slot_value <= INVALID_INDEX or slot_value > self.index_count or self.index_count <= 1:
            return
        nxt = slot_value
        steps = 0
        while len(out) < max_num and steps <= self.index_count:
            steps += 1
            h, phy, diff, prev = _ENTRY.unpack_from(mm, self.entries_base + nxt * INDEX_SIZE)
            if diff < 0:
                break
            t = self.begin_timestamp + diff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > self.index_count or prev == nxt or t < begin:
                break
            nxt = prev

    def slot_value(self, slot: int) -> int:
        return _INT.unpack_from(self.mm, INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE)[0]

    def entry(self, number: int) -> tuple[int, int, int, int]:
        return _ENTRY.unpack_from(self.mm, self.entries_base + number * INDEX_SIZE)

    def flush(self) -> None:
        self._write_header()
        self.mm.flush()

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class IndexService:
    """Builds and queries the index files under <storeRoot>/index."""

    def __init__(self, store_root: str, hash_slot_num: int, index_num: int, clock=None):
        self.dir = os.path.join(store_root, "index")
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self.lock = threading.RLock()
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)

    def load(self) -> None:
        if not os.path.isdir(self.dir):
            return
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if not (len(name) == 17 and name.isdigit()):
                raise StoreError(f"{path}: unexpected file in index/ (names are yyyyMMddHHmmssSSS)")
            self.files.append(IndexFile(path, self.hash_slot_num, self.index_num, create=False))

    def truncate_after(self, phy_offset: int) -> None:
        """Drop index files whose entries start beyond `phy_offset` (abnormal recovery: the
        commitlog was cut shorter than what the index saw). RocketMQ deletes such files too."""
        with self.lock:
            while self.files and self.files[-1].end_phy_offset >= phy_offset and self.files[-1].index_count > 1:
                f = self.files.pop()
                f.destroy()

    @property
    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else 0

    def unindexed_from(self) -> int:
        """The lowest commitlog offset build_index would still index: it skips the units below the
        last file's end offset, and the one at it once that file holds an entry (recovery)."""
        f = self.files[-1] if self.files else None
        if f is None:
            return 0
        end = f.end_phy_offset
        return end + 1 if f.index_count > 1 or end > 0 else end

    def _last_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full():
            return last
        end_phy = last.end_phy_offset if last else 0
        end_ts = last.end_timestamp if last else 0
        if last is not None:
            last.flush()
        os.makedirs(self.dir, exist_ok=True)
        ts = self.clock()
        name = file_name_for(ts)
        while os.path.exists(os.path.join(self.dir, name)) or (self.files and name <= self.files[-1].name):
            ts += 1
            name = file_name_for(ts)
        f = IndexFile(os.path.join(self.dir, name), self.hash_slot_num, self.index_num, end_phy, end_ts)
        self.files.append(f)
        return f

    def build_index(self, topic: str, phy_offset: int, store_timestamp: int,
                    keys: str | None, uniq_key: str | None) -> None:
        """IndexService.buildIndex for one dispatched unit (the caller skips rollback units)."""
        if not keys and not uniq_key:
            return
        with self.lock:
            f = self._last_file()
            if phy_offset < f.end_phy_offset or (phy_offset == f.end_phy_offset and
                                                 (f.index_count > 1 or f.end_phy_offset > 0)):
                return  # already indexed (recovery re-dispatch)
            if uniq_key:
                f = self._put(f, build_key(topic, uniq_key), phy_offset, store_timestamp)
            if keys:
                for k in keys.split(" "):
                    if k:
                        f = self._put(f, build_key(topic, k), phy_offset, store_timestamp)

    def build_index_hashed(self, key_hashes: bytes, key_units: bytes, cq_units: bytes, store_timestamp: int) -> None:
        """build_index for a batch of units with one key each whose index hashes are computed
        (EncodedUnits.index_hashes), through rmq._native.index_put: the same entries, slots and
        headers build_index writes. A unit's commitlog offset is read from its consumequeue unit."""
        index_put = native.ext.index_put
        with self.lock:
            i, n = 0, len(key_hashes) // 4
            while i < n:
                f = self._last_file()
                f.reserve_entries(n - i)
                i, state = index_put(f.mm, f.hash_slot_num, f.index_num, f.entries_base,
                                     (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset,
                                      f.hash_slot_count, f.index_count),
                                     key_hashes, key_units, i, cq_units, store_timestamp)
                (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count,
                 f.index_count) = state

    def _put(self, f: IndexFile, key: str, phy: int, ts: int) -> IndexFile:
        if not f.put_key(key, phy, ts):
            f = self._last_file()
            f.put_key(key, phy, ts)
        return f

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """IndexService.queryOffset: newest file first, stop at max_num or at a file older than begin."""
        out: list[int] = []
        full_key = build_key(topic, key)
        with self.lock:
            files = list(self.files)
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(out, full_key, max_num, begin, end)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files whose last entry points below the commitlog's minimum (keep the last file)."""
        n = 0
        with self.lock:
            while len(self.files) > 1 and self.files[0].end_phy_offset < commitlog_min_offset:
                self.files.pop(0).destroy()
                n += 1
        return n

    def flush(self) -> None:
        with self.lock:
            for f in self.files:
                f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
