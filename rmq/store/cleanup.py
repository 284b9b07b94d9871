"""CleanCommitLogService and CleanConsumeQueueService: expiry and disk-pressure cleanup (SPEC §2, seed 000).

Commitlog files older than fileReservedTime hours are deleted at the deleteWhen hour, or at any
hour once disk use passes diskMaxUsedSpaceRatio (75%). Past diskSpaceCleanForciblyRatio (85%)
files go even if not expired, oldest first. Past diskSpaceWarningLevelRatio (90%) the store
refuses writes until usage falls. Consumequeue and index files below the commitlog's minimum
offset follow. The clock, the disk-usage probe and the file-age probe are injectable for tests.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass


def default_disk_ratio(path: str) -> float:
    """Used fraction of the file system holding `path` (UtilAll.getDiskPartitionSpaceUsedPercent)."""
    try:
        du = shutil.disk_usage(path)
    except OSError:
        return -1.0
    if du.total <= 0:
        return -1.0
    return (du.total - du.free) / du.total


def dir_disk_bytes(path: str) -> int:
    """Bytes a directory tree takes on disk (allocated blocks, so a sparse mapped file counts what
    was written, not its length); files that vanish meanwhile count 0."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


@dataclass
class CleanupReport:
    disk_ratio: float
    disk_full: bool
    clean_immediately: bool
    ran: bool
    reason: str
    commitlog_files_deleted: int
    consumequeue_files_deleted: int
    index_files_deleted: int


class CleanupService:
    def __init__(self, store, *, clock=None, disk_ratio=None, file_age_ms=None):
        self.store = store
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.disk_ratio = disk_ratio or default_disk_ratio
        # When a commitlog file was last written (MappedFile.getLastModifiedTimestamp).
        self.file_age_ms = file_age_ms or (lambda mf: mf.last_modified_ms())
        self.manual_delete_requests = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def execute_delete_files_manually(self) -> None:
        """mqadmin deleteExpiredCommitLog: clean on the next run whatever the hour."""
        self.manual_delete_requests = 20

    def _is_time_to_delete(self) -> bool:
        hour = time.localtime(self.clock() / 1000).tm_hour
        return any(int(h) == hour for h in self.store.config.deleteWhen.split(";"))

    def run_once(self) -> CleanupReport:
        cfg = self.store.config
        ratio = self.disk_ratio(cfg.storePathRootDir)
        disk_full = ratio > cfg.diskSpaceWarningLevelRatio
        self.store.set_disk_full(disk_full, ratio)
        clean_immediately = ratio > cfg.diskSpaceCleanForciblyRatio
        space = ratio > cfg.diskMaxUsedSpaceRatio / 100.0
        reasons = []
        if self._is_time_to_delete():
            reasons.append(f"deleteWhen hour {cfg.deleteWhen}")
        if space:
            reasons.append(f"disk {ratio:.0%} > diskMaxUsedSpaceRatio {cfg.diskMaxUsedSpaceRatio}%")
        if self.manual_delete_requests > 0:
            self.manual_delete_requests -= 1
            reasons.append("manual request")
        cl_deleted = 0
        if reasons:
            clean_at_once = cfg.cleanFileForciblyEnable and clean_immediately
            if clean_at_once:
                reasons.append(f"disk {ratio:.0%} > diskSpaceCleanForciblyRatio: expired or not")
            cl_deleted = self._delete_commitlog_files(cfg.fileReservedTime * 3_600_000, clean_at_once,
                                                      cfg.deleteFileBatchMax)
        cq_deleted, idx_deleted = self.store.delete_logics_below_commitlog_min()
        return CleanupReport(ratio, disk_full, clean_immediately, bool(reasons), "; ".join(reasons) or "nothing due",
                             cl_deleted, cq_deleted, idx_deleted)

    def _delete_commitlog_files(self, reserved_ms: int, clean_at_once: bool, batch_max: int) -> int:
        """MappedFileQueue.deleteExpiredFileByTime: oldest first, never the file being written,
        stop at the first file still within its reserved time (unless cleaning at once)."""
        store = self.store
        now = self.clock()
        n = 0
        with store.put_lock:
            files = store.commitlog.queue.files
            candidates = files[:-1]
            dispatched = store.reput.reput_from_offset
            for mf in candidates:
                if mf.file_from_offset + mf.file_size > dispatched:
                    break  # units not dispatched yet (reput behind, or stopped by a full disk) stay
                if now >= self.file_age_ms(mf) + reserved_ms or clean_at_once:
                    n += 1
                    if n >= batch_max:
                        break
                else:
                    break
            if n:
                store.commitlog.queue.delete_first(n)
        if n:
            store.log.info("cleanup deleted %d commitlog file(s); min offset now %d", n, store.commitlog.min_offset)
        return n

    def start(self, interval_ms: int) -> None:
        def loop():
            while not self._stop.wait(interval_ms / 1000):
                try:
                    self.run_once()
                except Exception:
                    self.store.log.exception("cleanup failed")
        self._thread = threading.Thread(target=loop, name="CleanCommitLogService", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
