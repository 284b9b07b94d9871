"""Log lines that a flood cannot multiply (issue 22): repeated lines keyed by (peer host, reason) are
summarised, so one misconfigured client retrying in a loop cannot fill the disk with WARNING lines.

For each key the first `burst` lines (5) are logged in full; after that, at most one line per
`interval` (10 s) says how many similar lines were suppressed::

    ACL: 12,345 more refusals from 127.0.0.1 (Check signature failed) in the last 10 s

A key that stays quiet for a whole interval starts over (its next line is logged in full). Memory is
bounded: at most `max_keys` keys, the least recently seen dropped first (its pending count is
logged as it goes). The summary is written when the key's next line arrives after the interval,
or, on an asyncio loop, by a timer at the interval's end, so the last burst of a flood is counted
too. `clock` is injectable for tests; the limiter is thread-safe.

Callers pass a short `reason` from a bounded set (a category, not the peer's own words: an access
key or a topic name in the key would let a client open a fresh key with every request).
"""
from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import OrderedDict

__all__ = ["RateLimitedLog", "host_of", "reason_of"]

_DIGITS = re.compile(r"\d+")


def reason_of(text: str, limit: int = 60) -> str:
    """A bounded category for a message the code composed: numbers become N, the rest is cut at
    `limit` characters ("frame of 70000 bytes exceeds 65536" -> "frame of N bytes exceeds N")."""
    return _DIGITS.sub("N", str(text))[:limit]


def host_of(conn) -> str:
    """The peer address a connection's lines are keyed by (its host, not its port: a client that
    reconnects is still the same client)."""
    host = getattr(conn, "remote_host", None)
    if host:
        return str(host[0])
    return str(getattr(conn, "remote_addr", "?")).rsplit(":", 1)[0]


class _Key:
    __slots__ = ("full", "suppressed", "since", "level")

    def __init__(self, now: float):
        self.full = 0          # lines logged in full in this episode
        self.suppressed = 0    # lines not logged since `since`
        self.since = now       # start of the current interval
        self.level = logging.WARNING


class RateLimitedLog:
    """`log(level, host, reason, msg, *args)`: a logging call that a flood of one kind is summarised in."""

    def __init__(self, logger: logging.Logger, what: str = "refusals", *, prefix: str = "", burst: int = 5,
                 interval: float = 10.0, max_keys: int = 1024, clock=time.monotonic):
        if burst < 0 or interval <= 0 or max_keys < 1:
            raise ValueError("burst >= 0, interval > 0 and max_keys >= 1 are needed")
        self.logger = logger
        self.what = what
        self.prefix = prefix
        self.burst = burst
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self.suppressed_total = 0
        self._keys: OrderedDict[tuple[str, str], _Key] = OrderedDict()
        self._lock = threading.Lock()
        self._timer = None
        self._timer_loop = None

    def warning(self, host, reason: str, msg: str, *args) -> bool:
        return self.log(logging.WARNING, host, reason, msg, *args)

    def info(self, host, reason: str, msg: str, *args) -> bool:
        return self.log(logging.INFO, host, reason, msg, *args)

    def log(self, level: int, host, reason: str, msg: str, *args) -> bool:
        """Log `msg % args` in full, or count it; True when it was logged in full."""
        if not self.logger.isEnabledFor(level):
            return False
        key = (str(host), reason)
        summaries = []
        with self._lock:
            now = self.clock()
            st = self._keys.get(key)
            if st is None:
                st = self._keys[key] = _Key(now)
                while len(self._keys) > self.max_keys:
                    old_key, old = self._keys.popitem(last=False)
                    if old.suppressed:
                        summaries.append(self._summary(old_key, old, now))
            else:
                self._keys.move_to_end(key)
                if now - st.since >= self.interval:
                    if st.suppressed:        # the flood goes on: one line for the interval that ended
                        summaries.append(self._summary(key, st, now))
                    else:                    # quiet for an interval: a new episode, logged in full
                        st.full = 0
                    st.since = now
            st.level = max(st.level, level)
            full = st.full < self.burst
            if full:
                st.full += 1
            else:
                st.suppressed += 1
                self.suppressed_total += 1
                schedule = st.suppressed == 1
        for s in summaries:
            self.logger.log(*s)
        if full:
            self.logger.log(level, msg, *args)
        elif schedule:
            self._arm_timer(self.interval - (now - st.since))
        return full

    def _summary(self, key: tuple[str, str], st: _Key, now: float) -> tuple:
        n, st.suppressed = st.suppressed, 0
        secs = max(now - st.since, 0.0)
        return (st.level, "%s%s more %s from %s (%s) in the last %.0f s", self.prefix, f"{n:,}", self.what,
                key[0], key[1], secs)

    def flush(self, *, force: bool = False) -> int:
        """Log the summary of every key whose interval has ended (all of them with `force`, as at
        shutdown); returns the number of summary lines."""
        out = []
        with self._lock:
            now = self.clock()
            for key, st in self._keys.items():
                if st.suppressed and (force or now - st.since >= self.interval):
                    out.append(self._summary(key, st, now))
                    st.since = now
        for s in out:
            self.logger.log(*s)
        return len(out)

    def pending(self) -> int:
        """Lines counted but not yet reported in a summary."""
        with self._lock:
            return sum(st.suppressed for st in self._keys.values())

    def _arm_timer(self, delay: float) -> None:
        """On an asyncio loop, flush when the interval ends (without a loop the next line does it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            if self._timer is not None and not self._timer.cancelled() and self._timer_loop is loop:
                return
            self._timer_loop = loop
            self._timer = loop.call_later(max(delay, 0.01) + 0.01, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()
        with self._lock:
            now = self.clock()
            waits = [self.interval - (now - st.since) for st in self._keys.values() if st.suppressed]
        if waits:
            self._arm_timer(min(waits))
