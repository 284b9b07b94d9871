"""LatencyHistogram: a fixed-bucket latency counter cheap enough for a hot path (one bisect and two
list increments per observation); the console's /metrics (rmq/console/metrics.py) turns it into a
Prometheus histogram at scrape time, so the put and request paths never touch prometheus_client."""
from __future__ import annotations

from bisect import bisect_left

#: upper bounds in nanoseconds: 50 us ... 5 s (the last bucket, +Inf, is implicit)
DEFAULT_BOUNDS_NS = (50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
                     25_000_000, 50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 5_000_000_000)


class LatencyHistogram:
    """Counts of observations per bucket (not cumulative) plus their sum, in nanoseconds."""

    __slots__ = ("bounds", "counts", "sum_ns")

    def __init__(self, bounds_ns: tuple[int, ...] = DEFAULT_BOUNDS_NS):
        self.bounds = bounds_ns
        self.counts = [0] * (len(bounds_ns) + 1)
        self.sum_ns = 0

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect_left(self.bounds, ns)] += 1
        self.sum_ns += ns

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative_seconds(self) -> list[tuple[str, int]]:
        """[(upper bound in seconds as Prometheus writes it, cumulative count)], ending with +Inf."""
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append((repr(bound / 1e9), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out
