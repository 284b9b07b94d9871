"""One process per store directory: an exclusive flock on `<storePathRootDir>/lock`, as RocketMQ's
DefaultMessageStore locks `<storePathRootDir>/lock` ("Lock failed, MQ already started") and Kafka's
LogManager locks `<log.dir>/.lock` (issue 22).

The lock is taken before anything else in the directory is read or written and held for the life
of the process; the kernel drops it when the process dies in any way, so a lock file left by a
killed broker stops nobody. The holder writes its pid into the file, only so that the refusal can
say who holds it. The file descriptor is close-on-exec: a child started with exec does not keep
the lock.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import os


def _holder_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


class DirLock:
    """An exclusive, non-blocking flock on one file of a directory; `release()` (or death) drops it."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Unlock and close (the file stays: a later start reuses it)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @classmethod
    def acquire(cls, directory: str, name: str, fail) -> "DirLock":
        """Lock `directory/name`, creating it; `fail(reason, locked)` raises the caller's error.

        `directory` must exist. Nothing else in it is touched: when another process holds the lock,
        this returns through `fail` having only opened the lock file."""
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                fail(f"cannot open its lock file {path}: {exc.strerror or exc}", False)
            # read-only here: still say who holds it when someone does
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fail(f"cannot write in it: {exc.strerror or exc}", False)
            try:
                cls._try_lock(fd, path, fail)
            finally:
                os.close(fd)
            fail(f"cannot write in it: {exc.strerror or exc}", False)
        try:
            cls._try_lock(fd, path, fail)
            try:  # the pid is also the proof that the directory takes writes
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            except OSError as exc:
                fail(f"cannot write in it: {exc.strerror or exc}", False)
        except BaseException:
            os.close(fd)  # closing drops our lock, if we got it
            raise
        return cls(path, fd)

    @staticmethod
    def _try_lock(fd: int, path: str, fail) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            who = f"process {pid}" if pid else "another process"
            fail(f"{who} holds its lock file {path}", True)
        except OSError as exc:  # a filesystem without flock support
            fail(f"cannot lock {path}: {exc.strerror or exc}", False)


def release_lock_on_error(method):
    """For `load()`-like methods: when they raise, drop the lock in `self._dir_lock` they took, so
    the same process may try again (a flock conflicts even between two opens in one process)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        before = self._dir_lock
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            lock = self._dir_lock
            if lock is not None and lock is not before:  # only the lock this call took
                self._dir_lock = before
                lock.release()
            raise
    return wrapper
