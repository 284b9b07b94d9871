"""MappedFile and MappedFileQueue: fixed-size files named by their 20-digit start offset, over mmap.

The building block of the commitlog and consumequeue directories (SPEC §2, seeds 000/003).
"""
from __future__ import annotations

import errno
import mmap
import os
import threading

from .. import native

from .lock import DirLock

PAGE_SIZE = mmap.PAGESIZE
# MappedFile.prepare_pages writes zeros through the file this far ahead of the write position.
PREPARE_BYTES = 4 * PAGE_SIZE
_ZEROS = bytes(PREPARE_BYTES)
# MappedFile.reserve has the file system allocate blocks this far ahead of what a write needs.
RESERVE_CHUNK = 1 << 20
# The errors that mean "the file system has no room": a refusal, not a broken store.
DISK_FULL_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT))

# Process-wide I/O counters, shown by runtime_info and `rmq bench topics` (the mechanism behind
# throughput with many queues): files created, fdatasync calls. Plain ints: a lost increment under
# a race costs a figure one count, never correctness.
IO_COUNTERS = {"files_created": 0, "fdatasync_calls": 0, "fsync_calls": 0}   # fsync: the kafka-log peer's


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the start offset zero-padded to 20 digits."""
    return f"{offset:020d}"


class StoreError(Exception):
    """A store file or directory that is not what the store expects."""


class StoreDirError(StoreError):
    """The store's root directory cannot be created or written (the message says which path and why)."""


def is_disk_full(exc: BaseException) -> bool:
    """True for an OSError saying the file system is out of space (ENOSPC) or quota (EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def reserve_blocks(fd: int, start: int, length: int) -> bool:
    """posix_fallocate [start, start+length) of `fd`: the file system allocates the blocks now, so
    a later write through a mapping of them cannot fail (a store into a mapped page of a sparse
    file that the file system cannot back kills the process with SIGBUS). Raises OSError ENOSPC or
    EDQUOT when there is no room (on tmpfs nothing of the range stays allocated then). False when
    the file system cannot reserve (EOPNOTSUPP, EINVAL): the caller writes as before."""
    if length <= 0:
        return True
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return False
        raise
    return True


class StoreLockedError(StoreDirError):
    """Another live process holds the directory's lock (the message names the directory and its pid)."""


def prepare_store_dir(root: str, lock_name: str = "lock"):
    """Create ``root`` if needed, lock it for this process (``<root>/lock``, rmq.store.lock) and prove
    it is writable; returns the DirLock. Else StoreDirError naming the path and why; when another
    process holds the lock (StoreLockedError) nothing in ``root`` was read or written."""
    def fail(reason: str, locked: bool = False):
        if locked:
            raise StoreLockedError(f"cannot use {root} as the store directory: {reason} (a broker, or `rmq store "
                                   "recover`, is running on it); stop it, or choose another "
                                   "with --data, or storePathRootDir in the --config file")
        raise StoreDirError(f"cannot use {root} as the store directory: {reason}; "
                            "choose another with --data, or storePathRootDir in the --config file")

    if os.path.exists(root) and not os.path.isdir(root):
        fail("it is a file, not a directory")
    probe = root
    while probe and not os.path.exists(probe):      # the nearest existing ancestor
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if probe != root and os.path.exists(probe) and not os.path.isdir(probe):
        fail(f"{probe} is a file, not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create it: {exc.strerror or exc}")
    # the lock comes before anything else is read or written; creating it and writing the pid into it
    # is also the write probe (a read-only filesystem, a directory without write permission)
    lock = DirLock.acquire(root, lock_name, fail)
    if not os.access(root, os.W_OK | os.X_OK):  # a writable lock file left in a directory that is not
        lock.release()
        fail("it is not writable by this user")
    return lock


class MappedFile:
    """One pre-allocated file mapped in memory. Writes go through `wrote_position`."""

    __slots__ = ("path", "file_from_offset", "file_size", "_fd", "mm", "wrote_position",
                 "flushed_position", "store_timestamp", "_closed", "prepared_until", "reserved_until")

    def __init__(self, path: str, file_size: int, *, create: bool = True):
        self.path = path
        self.file_size = file_size
        name = os.path.basename(path)
        if not (len(name) == 20 and name.isdigit()):
            raise StoreError(f"{path}: file name must be a 20-digit start offset")
        self.file_from_offset = int(name)
        exists = os.path.exists(path)
        if not exists and not create:
            raise StoreError(f"{path}: missing")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            actual = os.fstat(fd).st_size
            if exists and actual != file_size:
                raise StoreError(f"{path}: size {actual} bytes, expected {file_size} "
                                 f"(is the configured file size the one this store was written with?)")
            if not exists:
                os.ftruncate(fd, file_size)
                IO_COUNTERS["files_created"] += 1
            self.mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.wrote_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended (for the checkpoint)
        self._closed = False
        self.prepared_until = 0   # bytes below this were written through the file (prepare_pages)
        self.reserved_until = 0   # bytes below this (and past the write position) are allocated (reserve)

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def fd(self) -> int:
        """The open file's descriptor (C writes through it with pwrite, as write_through does)."""
        return self._fd

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def append(self, data: bytes) -> int:
        """Append at the write position; returns the absolute offset written at."""
        pos = self.wrote_position
        n = len(data)
        self.mm[pos:pos + n] = data
        self.wrote_position = pos + n
        return self.file_from_offset + pos

    def write_through(self, pos: int, data) -> None:
        """Write `data` at `pos` with pwrite instead of through the mapping (the same page cache
        pages, so the mapping sees the bytes at once). With the C extension a write below 256 KiB
        keeps the GIL (rmq._native.pwrite_all: releasing it for a copy of a few microseconds handed
        it to the flush thread, and the writer waited for it); else the GIL is released while the
        kernel copies."""
        native.pwrite_all(self._fd, data, pos)

    def prepare_pages(self, upto: int) -> None:
        """Write zeros through the file (pwrite) from the write position to past `upto`, a few
        pages at a time, so that the mapped writes that follow land on blocks the file system has
        already allocated. A mapped write that makes ext4 allocate a block of a sparse file can
        cost milliseconds (the first one of a file always did here), taken holding the GIL; a
        pwrite allocates the same blocks in a few microseconds. The consumequeue writes its
        20-byte units this way: one pwrite per 4 pages (819 units), then plain memory writes.
        It is also the consumequeue's reservation: the pwrite allocates (ext4's delayed allocation
        reserves) the blocks, and raises OSError ENOSPC when the file system cannot, where a
        mapped write would have been a SIGBUS."""
        start = max(self.prepared_until, self.wrote_position)
        end = min(self.file_size, -(-upto // PREPARE_BYTES) * PREPARE_BYTES)
        while start < end:
            n = os.pwrite(self._fd, memoryview(_ZEROS)[:min(PREPARE_BYTES, end - start)], start)
            start += n
        self.prepared_until = max(self.prepared_until, end)

    def data_end(self) -> int:
        """Where the file's first hole starts (lseek SEEK_HOLE; the file size when it has none or
        the file system cannot say). Nothing was ever written past it: readers that search a file
        (consumequeue recovery) stay below it, since reading an unallocated page through the
        mapping is a SIGBUS on a full tmpfs."""
        try:
            return min(self.file_size, os.lseek(self._fd, 0, os.SEEK_HOLE))
        except (OSError, AttributeError):
            return self.file_size

    def reserve(self, upto: int) -> None:
        """Have the file system allocate the blocks from the write position to `upto` (rounded up
        to RESERVE_CHUNK past it, at most the file's end) before bytes are written there through
        the mapping: a mapped store into a block the file system cannot allocate is a SIGBUS, a
        failed reservation is an OSError (ENOSPC, EDQUOT) the put path turns into a refusal. The
        commitlog calls it before its mapped writes (one call per RESERVE_CHUNK of log)."""
        start = self.reserved_until
        wp = self.wrote_position
        if start < wp:
            start = wp - wp % PAGE_SIZE
        end = min(self.file_size, -(-(upto + 1) // RESERVE_CHUNK) * RESERVE_CHUNK)
        if end <= start:
            return
        if not reserve_blocks(self._fd, start, end - start):
            end = self.file_size   # nothing to reserve with on this file system
        self.reserved_until = end

    def write_at(self, pos: int, data: bytes) -> None:
        self.mm[pos:pos + len(data)] = data

    def read(self, pos: int, size: int) -> bytes:
        """Bytes [pos, pos+size) of this file, relative positions."""
        return self.mm[pos:pos + size]

    def flush(self, least_pages: int = 0) -> int:
        """msync the dirty range; returns the flushed position."""
        wrote = self.wrote_position
        flushed = self.flushed_position
        if wrote <= flushed:
            return flushed
        if least_pages > 0 and (wrote // PAGE_SIZE - flushed // PAGE_SIZE) < least_pages:
            return flushed
        if not self._closed:
            # fdatasync writes back the file's dirty page-cache pages, the mmap'd ones included,
            # and releases the GIL while the disk works (mmap.flush would hold it).
            os.fdatasync(self._fd)
            IO_COUNTERS["fdatasync_calls"] += 1
        self.flushed_position = wrote
        return wrote

    def zero_from(self, pos: int) -> None:
        """Erase everything from `pos` to the end (truncating a torn or dirty tail). The file is cut
        to `pos` and extended back, which drops the tail's blocks in one call whatever its length
        (the kernel zeroes the rest of the page holding `pos`), instead of reading the tail of a
        1 GiB file through the mapping; where that fails the tail is written over with zeros."""
        done = pos >= self.file_size
        if not done:
            try:
                os.ftruncate(self._fd, pos)
                os.ftruncate(self._fd, self.file_size)
                self.prepared_until = min(self.prepared_until, pos - pos % PREPARE_BYTES)
                self.reserved_until = min(self.reserved_until, pos - pos % PAGE_SIZE)
                done = True
            except OSError:
                pass
        if not done:
            chunk = 1 << 20
            p = pos
            while p < self.file_size:
                n = min(chunk, self.file_size - p)
                if self.mm[p:p + n].count(0) != n:
                    self.mm[p:p + n] = bytes(n)
                p += n
        self.wrote_position = min(self.wrote_position, pos)
        self.flushed_position = min(self.flushed_position, pos)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a view; the mapping goes when it is released
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0


class MappedFileQueue:
    """The ordered list of MappedFiles of one directory (commitlog, or one consumequeue/<topic>/<qid>)."""

    def __init__(self, store_path: str, file_size: int):
        self.store_path = store_path
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.lock = threading.RLock()

    def load(self) -> None:
        """Open the files already present, checking names and sizes."""
        if not os.path.isdir(self.store_path):
            return
        names = sorted(n for n in os.listdir(self.store_path) if not n.startswith("."))
        files = []
        for name in names:
            path = os.path.join(self.store_path, name)
            if not (len(name) == 20 and name.isdigit()):
                raise StoreError(f"{path}: unexpected file (names must be 20-digit start offsets)")
            size = os.path.getsize(path)
            if size != self.file_size:
                raise StoreError(f"{path}: size {size} bytes, expected {self.file_size} "
                                 f"(mappedFileSize setting differs from the store's files?)")
            files.append(MappedFile(path, self.file_size, create=False))
        for prev, cur in zip(files, files[1:]):
            if cur.file_from_offset != prev.file_from_offset + self.file_size:
                raise StoreError(f"{cur.path}: expected start offset {prev.file_from_offset + self.file_size} "
                                 f"after {os.path.basename(prev.path)} (missing file?)")
        for f in files:
            f.wrote_position = f.flushed_position = self.file_size
        self.files = files

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def first_file(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def get_last_file(self, start_offset: int = 0) -> MappedFile:
        """The file to write to: the last one, or a new one when it is full or missing."""
        files = self.files
        if files:
            last = files[-1]
            if last.wrote_position < last.file_size:
                return last
        with self.lock:
            last = self.files[-1] if self.files else None
            if last is not None and not last.is_full():
                return last
            if last is None:
                start = start_offset - (start_offset % self.file_size)
            else:
                start = last.file_from_offset + self.file_size
            os.makedirs(self.store_path, exist_ok=True)
            mf = MappedFile(os.path.join(self.store_path, offset_to_file_name(start)), self.file_size)
            self.files.append(mf)
            return mf

    def find_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        idx = (offset - first) // self.file_size
        if 0 <= idx < len(files):
            f = files[idx]
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        for f in files:  # after deletions the arithmetic may be off; fall back to a scan
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Offset just after the last written byte."""
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.wrote_position if last else 0

    @property
    def flushed_offset(self) -> int:
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.flushed_position if last else 0

    def flush(self, least_pages: int = 0) -> int:
        """Flush every file that has unflushed bytes; returns the flushed absolute offset."""
        for f in list(self.files):
            if f.flushed_position < f.wrote_position:
                f.flush(0 if f.is_full() else least_pages)
        return self.flushed_offset

    def truncate_dirty(self, offset: int) -> None:
        """Drop everything at or past `offset`: later files deleted, the one holding it zeroed."""
        with self.lock:
            keep = []
            for f in self.files:
                if f.file_from_offset + self.file_size <= offset:
                    keep.append(f)
                elif f.file_from_offset <= offset:
                    f.zero_from(offset - f.file_from_offset)
                    f.wrote_position = offset - f.file_from_offset
                    f.flushed_position = f.wrote_position
                    f.mm.flush()
                    keep.append(f)
                else:
                    f.destroy()
            self.files = keep

    def delete_first(self, count: int = 1) -> list[MappedFile]:
        with self.lock:
            gone, self.files = self.files[:count], self.files[count:]
        for f in gone:
            f.destroy()
        return gone

    def close(self) -> None:
        for f in self.files:
            f.close()

    def destroy(self) -> None:
        for f in self.files:
            f.destroy()
        self.files = []
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
