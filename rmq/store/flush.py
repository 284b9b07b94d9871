"""Flush services: FlushRealTimeService (ASYNC_FLUSH) and GroupCommitService (SYNC_FLUSH), SPEC §2.

ASYNC_FLUSH acknowledges a put once its bytes are in the page cache and flushes every
flushIntervalCommitLog ms. SYNC_FLUSH acknowledges only after fdatasync; concurrent puts wait
on one flush that covers all of them (group commit).
"""
from __future__ import annotations

import threading
import time

from .mapped_file import PAGE_SIZE


class FlushRealTimeService(threading.Thread):
    """ASYNC_FLUSH: flush the commitlog when at least flushCommitLogLeastPages pages are dirty, and
    everything every flushCommitLogThoroughInterval ms. As in RocketMQ, a put wakes the service
    (unless flushCommitLogTimed: then it sleeps flushIntervalCommitLog ms between rounds), so under
    load it flushes continuously, its fdatasync running beside the writers."""

    def __init__(self, store, interval_ms: int, least_pages: int, thorough_ms: int, timed: bool = False):
        super().__init__(name="FlushRealTimeService", daemon=True)
        self.store = store
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000
        self.timed = timed
        self.rounds = 0
        self._stop_evt = threading.Event()
        self._wake = threading.Event()
        self.wake_at = 0  # a put that writes up to here or beyond wakes the service
        self._last_thorough = time.monotonic()

    def wakeup(self, end_offset: int = -1) -> None:
        """Called after every put with the commitlog offset it wrote up to (-1: unknown); cheap when a
        wake-up is already pending. As the round it would start flushes nothing below
        flushCommitLogLeastPages dirty pages, the service is only woken once a put reaches that many
        past the last flush (the interval wakes it for the rest): waking a Python thread on every put
        costs the putting thread a GIL hand-off each time."""
        if self.timed or 0 <= end_offset < self.wake_at or self._wake.is_set():
            return
        self._wake.set()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            if self.timed:
                self._stop_evt.wait(self.interval)
            else:
                self._wake.wait(self.interval)
                self._wake.clear()
            if self._stop_evt.is_set():
                break
            now = time.monotonic()
            pages = self.least_pages
            if now - self._last_thorough >= self.thorough:
                pages = 0
                self._last_thorough = now
            try:
                done = self.store.flush_commitlog(pages)
                self.rounds += 1
                if self.least_pages > 0:  # the next put worth waking for
                    self.wake_at = done - done % PAGE_SIZE + self.least_pages * PAGE_SIZE
            except Exception:  # keep flushing even if one round fails
                self.store.log.exception("commitlog flush failed")

    def shutdown(self) -> None:
        self._stop_evt.set()
        self._wake.set()
        self.join(timeout=5)


class GroupCommitService(threading.Thread):
    """SYNC_FLUSH: put threads call wait_for(end_offset); one flush serves every waiting put."""

    def __init__(self, store, timeout_ms: int):
        super().__init__(name="GroupCommitService", daemon=True)
        self.store = store
        self.timeout = timeout_ms / 1000
        self.cond = threading.Condition()
        self.requested = 0
        self.flushed = 0
        self.flush_count = 0
        self._running = True

    def wait_for(self, end_offset: int) -> bool:
        """Block until the log is flushed to `end_offset`; False on syncFlushTimeout."""
        deadline = time.monotonic() + self.timeout
        with self.cond:
            if end_offset > self.requested:
                self.requested = end_offset
                self.cond.notify_all()
            while self.flushed < end_offset:
                left = deadline - time.monotonic()
                if left <= 0 or not self._running:
                    return self.flushed >= end_offset
                self.cond.wait(left)
        return True

    def run(self) -> None:
        while True:
            with self.cond:
                while self._running and self.requested <= self.flushed:
                    self.cond.wait(0.5)
                if not self._running and self.requested <= self.flushed:
                    return
            # Let writers that are already runnable append before this flush (a bigger group):
            # giving up the GIL once is enough; RocketMQ's GroupCommitService waits up to 10 ms.
            time.sleep(0.0003)
            try:
                done = self.store.flush_commitlog(0)
            except Exception:
                self.store.log.exception("group commit flush failed")
                time.sleep(0.01)
                continue
            with self.cond:
                self.flush_count += 1
                if done > self.flushed:
                    self.flushed = done
                self.cond.notify_all()

    def shutdown(self) -> None:
        with self.cond:
            self._running = False
            self.cond.notify_all()
        self.join(timeout=5)


class FlushConsumeQueueService(threading.Thread):
    """Every flushIntervalConsumeQueue ms, flush the consumequeues that have at least
    flushConsumeQueueLeastPages dirty pages, and every flushConsumeQueueThoroughInterval ms all of
    them, then the checkpoint (RocketMQ's FlushConsumeQueueService). The work is in proportion to
    the dirty data: thousands of queues with a few units each cost no fdatasync until the thorough
    round."""

    def __init__(self, store, interval_ms: int, least_pages: int = 0, thorough_ms: int = 0):
        super().__init__(name="FlushConsumeQueueService", daemon=True)
        self.store = store
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000
        self._last_thorough = time.monotonic()
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            pages = self.least_pages
            now = time.monotonic()
            if now - self._last_thorough >= self.thorough:
                pages = 0
                self._last_thorough = now
            try:
                self.store.flush_logics(pages)
            except Exception:
                self.store.log.exception("consumequeue flush failed")

    def shutdown(self) -> None:
        self._stop_evt.set()
        self.join(timeout=5)
