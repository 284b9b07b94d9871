"""Idempotent consumption: at-least-once delivery made effectively-once with a dedup store (SPEC §10).

Duplicates happen (a send retried after a lost ack, an offset commit lost, a rebalance handing a
queue over mid-batch). The remedy is an idempotence key, usually the business key in KEYS, and a
dedup store consulted around the listener:

    claim(key) -> True: first time, consume it; False: done (or being consumed) already, skip it
    the listener succeeds -> mark_done(key); it fails -> release(key) so the retry consumes it

A key claimed but never finished (the consumer crashed mid-consume) becomes claimable again after
`processing_timeout_s`, so a crash does not swallow a message. SQLite is the default store (one
file, safe across threads and processes on one machine); anything with the same four methods
plugs in (Redis, a database table).
"""
from __future__ import annotations

import sqlite3
import threading
import time
from typing import Callable, Iterable, Protocol

from .message import ConsumeStatus

CONSUMING, CONSUMED = 0, 1
PURGE_EVERY = 10_000                      # finished keys between two purges of a SQLiteDedupStore


class DedupStore(Protocol):
    def claim(self, key: str) -> bool: ...
    def mark_done(self, key: str) -> None: ...
    def release(self, key: str) -> None: ...
    def is_done(self, key: str) -> bool: ...


class SQLiteDedupStore:
    """Keys in a SQLite table: (key, state, updated). `path=":memory:"` for a per-process store."""

    def __init__(self, path: str = "dedup.sqlite3", *, processing_timeout_s: float = 60.0,
                 retention_s: float = 7 * 24 * 3600, clock: Callable[[], float] = time.time):
        self.path = path
        self.processing_timeout_s = processing_timeout_s
        self.retention_s = retention_s
        self.clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS dedup (key TEXT PRIMARY KEY, state INTEGER NOT NULL, "
                         "updated REAL NOT NULL)")
        self._done_since_purge = 0
        self.purge()                      # keys older than retention_s go when a store opens ...

    def claim(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO dedup(key, state, updated) VALUES (?, ?, ?)",
                                   (key, CONSUMING, now))
            if cur.rowcount == 1:
                return True
            # Take over a claim whose consumer vanished (still CONSUMING after the timeout).
            cur = self._db.execute("UPDATE dedup SET updated = ? WHERE key = ? AND state = ? AND updated < ?",
                                   (now, key, CONSUMING, now - self.processing_timeout_s))
            return cur.rowcount == 1

    def mark_done(self, key: str) -> None:
        with self._lock:
            self._db.execute("UPDATE dedup SET state = ?, updated = ? WHERE key = ?", (CONSUMED, self.clock(), key))
            self._done_since_purge += 1
            due = self._done_since_purge >= PURGE_EVERY
        if due:                           # ... and every PURGE_EVERY finished keys
            self.purge()

    def release(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM dedup WHERE key = ? AND state = ?", (key, CONSUMING))

    def is_done(self, key: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT state FROM dedup WHERE key = ?", (key,)).fetchone()
        return bool(row) and row[0] == CONSUMED

    def purge(self) -> int:
        """Forget keys finished longer than `retention_s` ago; returns how many went."""
        with self._lock:
            self._done_since_purge = 0
            cur = self._db.execute("DELETE FROM dedup WHERE state = ? AND updated < ?",
                                   (CONSUMED, self.clock() - self.retention_s))
            return cur.rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()


class MemoryDedupStore:
    """The same contract in a dict: for tests and single-process demos."""

    def __init__(self, *, processing_timeout_s: float = 60.0, clock: Callable[[], float] = time.time):
        self.processing_timeout_s = processing_timeout_s
        self.clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[int, float]] = {}

    def claim(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            cur = self._keys.get(key)
            if cur is None or (cur[0] == CONSUMING and cur[1] < now - self.processing_timeout_s):
                self._keys[key] = (CONSUMING, now)
                return True
            return False

    def mark_done(self, key: str) -> None:
        with self._lock:
            self._keys[key] = (CONSUMED, self.clock())

    def release(self, key: str) -> None:
        with self._lock:
            if self._keys.get(key, (CONSUMED,))[0] == CONSUMING:
                del self._keys[key]

    def is_done(self, key: str) -> bool:
        return self._keys.get(key, (CONSUMING,))[0] == CONSUMED


def default_key(msg) -> str | None:
    """The idempotence key: the first KEYS entry, else the client message id (UNIQ_KEY)."""
    keys = (msg.properties.get("KEYS") or "").split()
    if keys:
        return f"{msg.topic}#{keys[0]}"
    uniq = msg.properties.get("UNIQ_KEY")
    return f"{msg.topic}#{uniq}" if uniq else None


def idempotent_listener(listener: Callable, store: DedupStore, *,
                        key_fn: Callable[[object], str | None] = default_key) -> Callable:
    """Wrap a concurrent listener `fn(msgs[, context]) -> ConsumeStatus` so each key is consumed once.

    Messages whose key was consumed already are dropped from the batch; if nothing is left the
    batch succeeds at once. A batch that fails (RECONSUME_LATER, None or an exception) releases its
    claims so the retry is consumed. Messages without a key are passed through."""

    from .consume_service import adapt_listener
    inner, _ = adapt_listener(listener)   # fn(msgs) or fn(msgs, context) -> fn(msgs, context)

    def wrapped(msgs: Iterable, context=None):
        fresh, claimed = [], []
        for m in msgs:
            key = key_fn(m)
            if key is None:
                fresh.append(m)
            elif store.claim(key):
                fresh.append(m)
                claimed.append(key)
        if not fresh:
            return ConsumeStatus.CONSUME_SUCCESS
        try:
            status = inner(fresh, context)
        except Exception:
            for k in claimed:
                store.release(k)
            raise
        if status is ConsumeStatus.CONSUME_SUCCESS:
            for k in claimed:
                store.mark_done(k)
        else:
            for k in claimed:
                store.release(k)
        return status

    return wrapped
