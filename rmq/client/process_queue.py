"""ProcessQueue (SPEC §4 "minimum offset of the in-flight set is what gets committed"): the
pulled-but-not-yet-consumed messages of one assigned queue, kept in offset order."""
from __future__ import annotations

import time
from typing import Iterable

from .message import MessageExt

__all__ = ["ProcessQueue", "PULL_MAX_IDLE_TIME"]

#: ProcessQueue.PULL_MAX_IDLE_TIME (rocketmq.client.pull.pullMaxIdleTime): 120 s.
PULL_MAX_IDLE_TIME = 120.0


class ProcessQueue:
    """In-flight messages of one queue.  ``remove_messages`` returns the offset to commit:
    the smallest offset still in flight, or one past the largest offset ever taken in.

    Pulls are sequential per queue, so insertion order is offset order and the first key of
    the dict is always the minimum.  Touched only from the client's event loop."""

    __slots__ = ("msgs", "msg_size", "queue_offset_max", "dropped", "last_pull_timestamp",
                 "last_consume_timestamp", "locked", "last_lock_timestamp", "consuming",
                 "try_unlock_times", "msg_acc_cnt", "consuming_msgs")

    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.last_pull_timestamp = time.monotonic()
        self.last_consume_timestamp = time.monotonic()
        # orderly consumption (next issue): broker lock and the messages being consumed
        self.locked = False
        self.last_lock_timestamp = time.monotonic()
        self.consuming = False
        self.try_unlock_times = 0
        self.msg_acc_cnt = 0
        self.consuming_msgs: dict[int, MessageExt] = {}

    @property
    def msg_count(self) -> int:
        return len(self.msgs)

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
        dispatch = added > 0 and not self.consuming
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
