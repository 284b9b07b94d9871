"""PullRequestHoldService, asyncio flavour: pulls (RocketMQ long polling, Kafka Fetch max_wait_ms)
park here and wake as soon as the store dispatches a message to a queue they wait on (SPEC §4)."""
from __future__ import annotations

import asyncio
import threading


class _Waiter:
    __slots__ = ("loop", "future", "keys")

    def __init__(self, loop, keys):
        self.loop = loop
        self.future = loop.create_future()
        self.keys = keys


class MessageArrivalHub:
    """`notify` is called by the store's dispatch (any thread); `wait` is awaited by listeners."""

    def __init__(self, current_max=None):
        # current_max(topic, queue_id) -> the queue's max offset; checked after a waiter registers
        # so an arrival between the caller's last read and the registration is not missed.
        self.current_max = current_max
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, int], list[tuple[int, _Waiter]]] = {}
        self.active = 0

    def notify(self, topic: str, queue_id: int, next_offset: int) -> None:
        if not self.active:
            return
        key = (topic, queue_id)
        with self._lock:
            lst = self._waiters.get(key)
            if not lst:
                return
            fire = [w for off, w in lst if off < next_offset]
        # the Kafka produce path dispatches on the event loop's own thread: resolve the future there
        # and then (its waiter runs at the loop's next turn). call_soon_threadsafe would write a byte
        # to the loop's self-pipe per parked pull, a send that releases the GIL each time; the
        # reput thread and other threads still go through it.
        here = asyncio._get_running_loop()
        for w in fire:
            if w.loop is here:
                _resolve(w.future)
            else:
                w.loop.call_soon_threadsafe(_resolve, w.future)

    async def wait(self, wants: list[tuple[str, int, int]], timeout: float) -> bool:
        """Wait until any (topic, queue_id) gets a message at or beyond its offset, or timeout.
        Returns True when woken by an arrival."""
        if timeout <= 0 or not wants:
            return False
        loop = asyncio.get_running_loop()
        w = _Waiter(loop, [(t, q) for t, q, _ in wants])
        with self._lock:
            for t, q, off in wants:
                self._waiters.setdefault((t, q), []).append((off, w))
            self.active += 1
        try:
            cm = self.current_max
            if cm is not None and any(cm(t, q) > off for t, q, off in wants):
                return True
            # a timer that resolves the future with False, rather than wait_for(shield(...)): that
            # made two more futures and a task wrapper per parked pull (a Kafka consumer parks
            # one Fetch per response it gets)
            timer = loop.call_later(timeout, _expire, w.future)
            try:
                return await w.future
            finally:
                timer.cancel()
        finally:
            with self._lock:
                self.active -= 1
                for key in w.keys:
                    lst = self._waiters.get(key)
                    if lst:
                        lst[:] = [(o, x) for o, x in lst if x is not w]
                        if not lst:
                            del self._waiters[key]


def _resolve(fut) -> None:
    if not fut.done():
        fut.set_result(True)


def _expire(fut) -> None:
    if not fut.done():
        fut.set_result(False)
