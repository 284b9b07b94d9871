"""Latency fault tolerance for sends (SPEC §3 "latency fault tolerance"): MQFaultStrategy and
LatencyFaultToleranceImpl — a broker that failed or answered slowly is avoided for a while
(latencyMax / notAvailableDuration tables)."""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import Callable

from rmq.remoting import MessageQueue

from .route import TopicPublishInfo

__all__ = ["LATENCY_MAX", "NOT_AVAILABLE_DURATION", "FaultItem", "LatencyFaultTolerance",
           "MQFaultStrategy"]

#: MQFaultStrategy.latencyMax (ms) and the matching notAvailableDuration (ms).
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class FaultItem:
    """A broker's last send latency and the time (ms) from which it is usable again."""
    name: str
    current_latency: int
    start_timestamp: int

    def is_available(self, now: int | None = None) -> bool:
        return (now if now is not None else _now_ms()) - self.start_timestamp >= 0

    def sort_key(self, now: int) -> tuple[int, int, int]:
        """FaultItem.compareTo: available first, then lower latency, then earlier start."""
        return (0 if self.is_available(now) else 1, self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    """LatencyFaultToleranceImpl: the fault table keyed by broker name."""

    def __init__(self, clock: Callable[[], int] = _now_ms) -> None:
        self.clock = clock
        self.items: dict[str, FaultItem] = {}
        self._which_worst = itertools.count(random.randrange(1 << 16))

    def update_fault_item(self, name: str, current_latency: int, not_available_duration: int) -> None:
        start = self.clock() + not_available_duration
        item = self.items.get(name)
        if item is None:
            self.items[name] = FaultItem(name, current_latency, start)
        else:
            item.current_latency = current_latency
            item.start_timestamp = start

    def is_available(self, name: str) -> bool:
        item = self.items.get(name)
        return item is None or item.is_available(self.clock())

    def remove(self, name: str) -> None:
        self.items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker: sort the table, choose round-robin among the better half."""
        if not self.items:
            return None
        now = self.clock()
        ranked = sorted(self.items.values(), key=lambda it: it.sort_key(now))
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        return ranked[next(self._which_worst) % half].name


class MQFaultStrategy:
    """Queue selection with optional latency fault tolerance (sendLatencyFaultEnable)."""

    def __init__(self, send_latency_fault_enable: bool = False,
                 latency_max: tuple[int, ...] = LATENCY_MAX,
                 not_available_duration: tuple[int, ...] = NOT_AVAILABLE_DURATION,
                 clock: Callable[[], int] = _now_ms) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration must have the same length")
        self.send_latency_fault_enable = send_latency_fault_enable
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.tolerance = LatencyFaultTolerance(clock)

    def select_one_message_queue(self, tp: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue | None:
        if not self.send_latency_fault_enable:
            return tp.select_one_message_queue(last_broker_name)
        mqs = tp.message_queue_list
        if not mqs:
            return None
        n = len(mqs)
        index = tp.next_index()
        for _ in range(n):
            mq = mqs[index % n]
            index += 1
            if self.tolerance.is_available(mq.brokerName):
                return mq
        not_best = self.tolerance.pick_one_at_least()
        if not_best is not None:
            write_queue_nums = tp.write_queue_nums_of(not_best)
            if write_queue_nums > 0:
                return MessageQueue(mqs[0].topic, not_best, tp.next_index() % write_queue_nums)
            self.tolerance.remove(not_best)
        return tp.select_one_message_queue()

    def update_fault_item(self, broker_name: str, current_latency_ms: int, isolation: bool) -> None:
        """After a send: record its latency; ``isolation`` (a failure) counts as 30 s."""
        if self.send_latency_fault_enable:
            duration = self.compute_not_available_duration(30000 if isolation else current_latency_ms)
            self.tolerance.update_fault_item(broker_name, current_latency_ms, duration)

    def compute_not_available_duration(self, current_latency_ms: int) -> int:
        for i in range(len(self.latency_max) - 1, -1, -1):
            if current_latency_ms >= self.latency_max[i]:
                return self.not_available_duration[i]
        return 0
