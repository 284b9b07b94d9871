"""ProcessQueue (SPEC §4 "minimum offset of the in-flight set is what gets committed", "Orderly
listener"): the pulled-but-not-yet-consumed messages of one assigned queue, kept in offset order,
plus what the orderly service needs — the broker lock state, the messages being consumed
(takeMessages / commit / makeMessageToConsumeAgain / rollback) and the consume lock that a
rebalance waits on before it unlocks the queue on the broker."""
from __future__ import annotations

import threading
import time
from typing import Iterable

from .message import MessageExt

__all__ = ["ProcessQueue", "PULL_MAX_IDLE_TIME", "REBALANCE_LOCK_MAX_LIVE_TIME", "REBALANCE_LOCK_INTERVAL"]

#: ProcessQueue.PULL_MAX_IDLE_TIME (rocketmq.client.pull.pullMaxIdleTime): 120 s.
PULL_MAX_IDLE_TIME = 120.0
#: ProcessQueue.REBALANCE_LOCK_MAX_LIVE_TIME (rocketmq.client.rebalance.lockMaxLiveTime): the
#: client trusts a broker lock this long after it was last granted (30 s; the broker keeps it 60 s).
REBALANCE_LOCK_MAX_LIVE_TIME = 30.0
#: ProcessQueue.REBALANCE_LOCK_INTERVAL (rocketmq.client.rebalance.lockInterval): renew every 20 s.
REBALANCE_LOCK_INTERVAL = 20.0


class ProcessQueue:
    """In-flight messages of one queue.  ``remove_messages`` returns the offset to commit:
    the smallest offset still in flight, or one past the largest offset ever taken in.

    Pulls are sequential per queue, so insertion order is offset order and the first key of
    the dict is always the minimum.  Touched only from the client's event loop."""

    __slots__ = ("msgs", "msg_size", "queue_offset_max", "dropped", "last_pull_timestamp",
                 "last_consume_timestamp", "locked", "last_lock_timestamp", "consuming",
                 "try_unlock_times", "msg_acc_cnt", "consuming_msgs", "consume_lock")

    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.last_pull_timestamp = time.monotonic()
        self.last_consume_timestamp = time.monotonic()
        # orderly consumption: broker lock and the messages being consumed
        self.locked = False
        self.last_lock_timestamp = time.monotonic()
        self.consuming = False
        self.try_unlock_times = 0
        self.msg_acc_cnt = 0
        self.consuming_msgs: dict[int, MessageExt] = {}
        #: held by the orderly consume thread around each listener call (ProcessQueue.lockConsume)
        self.consume_lock = threading.Lock()

    @property
    def msg_count(self) -> int:
        """Cached messages, including those an orderly listener is consuming right now."""
        return len(self.msgs) + len(self.consuming_msgs)

    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled messages; returns True when an orderly consumer should be dispatched."""
        added = 0
        for m in msgs:
            off = m.queue_offset
            if off not in self.msgs:
                self.msgs[off] = m
                self.msg_size += len(m.body)
                added += 1
                if off > self.queue_offset_max:
                    self.queue_offset_max = off
        dispatch = bool(self.msgs) and not self.consuming
        if dispatch:
            self.consuming = True
        return dispatch

    def max_span(self) -> int:
        """Offset distance between the oldest and newest in-flight message."""
        if not self.msgs:
            return 0
        return self.queue_offset_max - next(iter(self.msgs))

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; return the offset that may be committed (-1 if none)."""
        self.last_consume_timestamp = time.monotonic()
        if not self.msgs:
            return -1
        result = self.queue_offset_max + 1
        for m in msgs:
            prev = self.msgs.pop(m.queue_offset, None)
            if prev is not None:
                self.msg_size -= len(prev.body)
        if self.msgs:
            result = next(iter(self.msgs))
        return result

    def is_pull_expired(self) -> bool:
        return time.monotonic() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME

    # ------------------------------------------------------------------ orderly
    def is_lock_expired(self, max_live: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> bool:
        return time.monotonic() - self.last_lock_timestamp > max_live

    def has_temp_message(self) -> bool:
        """Messages pulled but not yet handed to the listener."""
        return bool(self.msgs)

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """The next ``batch_size`` messages in offset order, moved to the consuming set; an
        empty result ends the current consume request (``consuming`` goes False)."""
        self.last_consume_timestamp = time.monotonic()
        out: list[MessageExt] = []
        msgs = self.msgs
        while msgs and len(out) < batch_size:
            off = next(iter(msgs))
            m = msgs.pop(off)
            self.consuming_msgs[off] = m
            out.append(m)
        if not out:
            self.consuming = False
        return out

    def commit(self) -> int:
        """The consuming set was consumed: drop it; returns the offset after its last message
        (what may be committed), or -1 when nothing was being consumed."""
        if not self.consuming_msgs:
            return -1
        last = max(self.consuming_msgs)
        for m in self.consuming_msgs.values():
            self.msg_size -= len(m.body)
        if not self.msgs:
            self.msg_size = 0
        self.consuming_msgs.clear()
        return last + 1

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put messages of the consuming set back in front, to be taken again."""
        back = {}
        for m in msgs:
            self.consuming_msgs.pop(m.queue_offset, None)
            back[m.queue_offset] = m
        if back:
            back.update(self.msgs)
            self.msgs = dict(sorted(back.items()))

    def rollback(self) -> None:
        """Everything being consumed goes back to be taken again."""
        self.make_message_to_consume_again(list(self.consuming_msgs.values()))

    def clear(self) -> None:
        self.msgs.clear()
        self.consuming_msgs.clear()
        self.msg_size = 0
        self.queue_offset_max = 0
