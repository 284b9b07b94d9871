"""CompactionStore: RocketMQ 5's compacted topics (store/kv CompactionStore, CompactionLog,
CompactionService) over this store: a per-queue compacted log built from the commitlog, which
keeps the latest message of each key; reads below the queue's cleaned point are served from it.

Layout, under <storePathRootDir>/compaction/<topic>/<queueId>/:

    position.json             {"generation", "start", "cleanedTo", "lastClean"}: the live files
    <generation>.log          the surviving units, exactly as the commitlog holds them, in queue order
    <generation>.cq           28-byte entries (SparseConsumeQueue): queue offset int64, position in
                              the .log int64, size int32, delete horizon int64 (-1; for a tombstone,
                              when it may go)

A pass (CompactionService, a background thread, every compactionScheduleInternal ms) takes the
queues of compacted topics in turn, at most compactionMaxUnitsPerPass dirty units in all:
  * the dirty range is [cleanedTo, end): end stops at the consumequeue's end and at the first unit
    younger than min.compaction.lag.ms; it is cleaned when its share of the queue's units is above
    min.cleanable.dirty.ratio, when its oldest unit is older than max.compaction.lag.ms, or when a
    kept tombstone's horizon has passed;
  * the offset map (key -> last queue offset) is built from the dirty units;
  * a new generation is written: the old generation's units that no later unit of the range
    supersedes, then the dirty range's latest unit of each key. A unit without a key goes; a
    tombstone stays until its horizon (the pass that first keeps it + delete.retention.ms);
  * position.json is replaced (write, fsync, rename) and the old generation's files deleted.
Queue offsets keep their meaning: a read below cleanedTo returns the next surviving unit at or
after the requested offset (get_message), then continues in the consumequeue at cleanedTo. The
compacted log outlives the commitlog files it was built from (fileReservedTime).

What a key and a tombstone are is the caller's: RocketMQ's default is the KEYS property and an
empty body (CompactionLog.shouldRetainMsg); the Kafka bridge sets its own (the record key, a null
value). Which topics are compacted, and with which settings, is the broker's (policy_of).
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import struct
import threading
import time
from dataclasses import asdict, dataclass

from ..common.message import decode_message

log = logging.getLogger("rmq.store.compaction")

ENTRY = struct.Struct(">qqiq")            # queue offset, position, size, delete horizon
# what compaction cost this process, whichever design did it (this store's CompactionService, the
# kafka-log peer's LogCleaner): shown by GET_BROKER_RUNTIME_INFO, read by the compaction lab
COMPACTION_COUNTERS = {"passes": 0, "bytes_read": 0, "bytes_written": 0, "millis": 0}
LONG_MAX = (1 << 63) - 1


@dataclass
class CompactionPolicy:
    """A compacted topic's settings (Kafka's names, which RocketMQ 5's compaction does not have:
    it compacts on a schedule, keeps no tombstone, and has no lags)."""
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000


@dataclass
class PassStats:
    topic: str = ""
    queue_id: int = 0
    start: int = 0
    cleaned_from: int = 0
    cleaned_to: int = 0
    units_read: int = 0
    units_kept: int = 0
    superseded: int = 0
    tombstones_removed: int = 0
    keyless_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    at_ms: int = 0
    reason: str = ""

    def line(self) -> str:
        return (f"{self.topic}:{self.queue_id}: compacted [{self.start}, {self.cleaned_to}) "
                f"(dirty [{self.cleaned_from}, {self.cleaned_to})), {self.units_read} units read, {self.units_kept} "
                f"kept ({self.superseded} superseded, {self.tombstones_removed} tombstones, {self.keyless_removed} "
                f"keyless removed), {self.bytes_read} -> {self.bytes_written} bytes in {self.seconds * 1000:.0f} ms")


def default_key_of(raw: bytes) -> tuple[bytes | None, bool]:
    """RocketMQ's compaction key: the KEYS property; a message with an empty body is a tombstone."""
    m = decode_message(raw)
    k = m.keys
    return (k.encode("utf-8") if k else None), not m.body


class Generation:
    """One generation of a queue's compacted log, open for reading."""

    def __init__(self, directory: str, number: int) -> None:
        self.dir, self.number = directory, number
        self.log_path = os.path.join(directory, f"{number:020d}.log")
        self.cq_path = os.path.join(directory, f"{number:020d}.cq")
        with open(self.cq_path, "rb") as fh:
            raw = fh.read()
        n = len(raw) // ENTRY.size
        self.entries = [ENTRY.unpack_from(raw, i * ENTRY.size) for i in range(n)]
        self.offsets = [e[0] for e in self.entries]
        self.fd = os.open(self.log_path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def read(self, entry) -> bytes:
        return os.pread(self.fd, entry[2], entry[1])

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class QueueState:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.lock = threading.Lock()
        self.gen: Generation | None = None
        self.start = 0
        self.cleaned_to = 0
        self.last: dict | None = None
        path = os.path.join(directory, "position.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                pos = json.load(fh)
            self.start, self.cleaned_to = int(pos["start"]), int(pos["cleanedTo"])
            self.last = pos.get("lastClean")
            if pos.get("generation") is not None:
                self.gen = Generation(directory, int(pos["generation"]))
            for name in os.listdir(directory):       # files of a pass that did not finish, or of old ones
                stem = name.split(".")[0]
                if stem.isdigit() and (self.gen is None or int(stem) != self.gen.number):
                    os.unlink(os.path.join(directory, name))

    def min_horizon(self) -> int:
        g = self.gen
        hs = [e[3] for e in g.entries if e[3] >= 0] if g is not None else []
        return min(hs) if hs else -1


class CompactionStore:
    def __init__(self, store) -> None:
        self.store = store
        self.root = os.path.join(store.root, "compaction")
        cfg = store.config
        self.interval_ms = cfg.compactionScheduleInternal
        self.max_units = cfg.compactionMaxUnitsPerPass
        self.policy_of = lambda topic: None        # fn(topic) -> CompactionPolicy | None (the broker's)
        self.key_of = default_key_of               # fn(raw unit) -> (key | None, is tombstone)
        self.queues: dict[tuple[str, int], QueueState] = {}
        self.stats = {"passes": 0, "units_read": 0, "units_removed": 0, "bytes_read": 0, "bytes_written": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._retired: list[tuple[float, Generation]] = []
        self._cursor = 0

    # ---- opening ---------------------------------------------------------------------------------
    def load(self) -> None:
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            for q in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
                if q.isdigit():
                    self.queues[(topic, int(q))] = QueueState(os.path.join(tdir, q))

    def state(self, topic: str, queue_id: int, create: bool = False) -> QueueState | None:
        st = self.queues.get((topic, queue_id))
        if st is None and create:
            with self._lock:
                st = self.queues.get((topic, queue_id))
                if st is None:
                    d = os.path.join(self.root, topic, str(queue_id))
                    os.makedirs(d, exist_ok=True)
                    st = self.queues[(topic, queue_id)] = QueueState(d)
        return st

    def delete_topic(self, topic: str) -> None:
        """A deleted topic's compacted logs go with it (a topic made again under its name starts empty)."""
        import shutil
        with self._lock:
            for key in [k for k in self.queues if k[0] == topic]:
                st = self.queues.pop(key)
                with st.lock:
                    if st.gen is not None:
                        self._retired.append((time.monotonic(), st.gen))
                        st.gen = None
        shutil.rmtree(os.path.join(self.root, topic), ignore_errors=True)

    def move_start(self, topic: str, queue_id: int, offset: int) -> None:
        """The queue's log start moved (retention under compact,delete, DeleteRecords): the compacted
        log serves nothing below it any more, and the next pass drops those units."""
        st = self.queues.get((topic, queue_id))
        if st is None or offset <= st.start:
            return
        with st.lock:
            st.start = offset
            gen = st.gen
            self._write_position(st, gen.number if gen is not None else None, st.cleaned_to, st.last)

    @staticmethod
    def _write_position(st: QueueState, generation, cleaned_to: int, last) -> None:
        position = {"generation": generation, "start": st.start, "cleanedTo": cleaned_to, "lastClean": last}
        tmp = os.path.join(st.dir, "position.json.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(position, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(st.dir, "position.json"))

    # ---- reading ---------------------------------------------------------------------------------
    def covers(self, topic: str, queue_id: int, offset: int) -> bool:
        st = self.queues.get((topic, queue_id))
        return st is not None and st.gen is not None and offset < st.cleaned_to

    def log_start(self, topic: str, queue_id: int) -> int | None:
        st = self.queues.get((topic, queue_id))
        return st.start if st is not None and st.gen is not None else None

    def cleaned_to(self, topic: str, queue_id: int) -> int:
        st = self.queues.get((topic, queue_id))
        return st.cleaned_to if st is not None else 0

    def read(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int):
        """Units of the compacted log at or after `offset` (below the cleaned point): ([raw],
        [queue offset], next offset to read). Empty lists when nothing survives there."""
        st = self.queues.get((topic, queue_id))
        if st is None:
            return [], [], offset
        with st.lock:
            g, cleaned = st.gen, st.cleaned_to
        if g is None or offset >= cleaned:
            return [], [], offset
        i = bisect.bisect_left(g.offsets, max(offset, st.start))
        raws, offs, total = [], [], 0
        while i < len(g.entries) and len(raws) < max_count:
            e = g.entries[i]
            if raws and total + e[2] > max_bytes:
                break
            raws.append(g.read(e))
            offs.append(e[0])
            total += e[2]
            i += 1
        nxt = offs[-1] + 1 if i < len(g.entries) else cleaned
        return raws, offs, nxt

    # ---- the service thread ------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="CompactionService", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for st in self.queues.values():
            if st.gen is not None:
                st.gen.close()
        for _, g in self._retired:
            g.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.run_once()
            except Exception:
                log.exception("compaction pass")
            now = time.monotonic()
            old = [g for t, g in self._retired if now - t > 5]
            for g in old:
                g.close()
            self._retired = [(t, g) for t, g in self._retired if now - t <= 5]

    def compacted_queues(self) -> list[tuple[str, int, CompactionPolicy]]:
        out = []
        for topic, qs in list(self.store.consume_queue_table.items()):
            pol = self.policy_of(topic)
            if pol is not None:
                out.extend((topic, q, pol) for q in sorted(qs))
        return out

    def run_once(self, now_ms: int | None = None) -> list[PassStats]:
        """One pass over the compacted queues (round robin from where the last pass stopped), at most
        max_units dirty units in all. Returns what each cleaning did."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        queues = self.compacted_queues()
        done, budget = [], self.max_units
        if not queues:
            return done
        start = self._cursor % len(queues)
        for k in range(len(queues)):
            if budget <= 0:
                break
            topic, q, pol = queues[(start + k) % len(queues)]
            self._cursor = start + k + 1
            r = self.compact_queue(topic, q, pol, now, budget)
            if r is not None:
                done.append(r)
                budget -= r.cleaned_to - r.cleaned_from
        return done

    # ---- one queue -------------------------------------------------------------------------------
    def compact_queue(self, topic: str, queue_id: int, pol: CompactionPolicy, now: int,
                      budget: int | None = None) -> PassStats | None:
        store = self.store
        cq = store.get_consume_queue(topic, queue_id)
        if cq is None:
            return None
        st = self.state(topic, queue_id)
        lo, hi = cq.min_offset, cq.max_offset
        begin = max(st.cleaned_to, lo) if st is not None else lo
        end = min(hi, begin + (budget if budget is not None else self.max_units))
        if pol.min_compaction_lag_ms > 0 and end > begin:
            young = store.get_offset_in_queue_by_time(topic, queue_id, now - pol.min_compaction_lag_ms + 1)
            end = min(end, max(begin, young))           # the first unit younger than the lag stays dirty
        clean = len(st.gen.entries) if st is not None and st.gen is not None else 0
        dirty = end - begin
        reason = ""
        if dirty > 0 and dirty / (clean + dirty) > pol.min_cleanable_dirty_ratio:
            reason = f"dirty ratio {dirty / (clean + dirty):.2f}"
        elif dirty > 0 and pol.max_compaction_lag_ms < LONG_MAX:
            first = store.get_earliest_message_time(topic, queue_id) if begin == lo else \
                store.commitlog.store_timestamp_at(cq.get_unit(begin)[0])
            if 0 <= first < now - pol.max_compaction_lag_ms:
                reason = "max.compaction.lag.ms"
        if not reason and st is not None and 0 <= st.min_horizon() <= now:
            reason = "tombstones past their delete horizon"
        if not reason:
            return None
        if st is None:
            st = self.state(topic, queue_id, create=True)
            st.start = lo
        return self._compact(st, topic, queue_id, begin, end, pol, now, reason)

    def _dirty_units(self, topic: str, queue_id: int, begin: int, end: int):
        off = begin
        while off < end:
            res = self.store.get_message(None, topic, queue_id, off, min(1024, end - off), max_bytes=8 << 20)
            if not res.messages:
                if res.next_begin_offset > off:
                    off = res.next_begin_offset
                    continue
                return
            for raw, qoff in zip(res.messages, res.queue_offsets):
                if qoff >= end:
                    return
                yield qoff, raw
            off = res.next_begin_offset

    def _compact(self, st: QueueState, topic: str, queue_id: int, begin: int, end: int,
                 pol: CompactionPolicy, now: int, reason: str) -> PassStats:
        t0 = time.monotonic()
        ps = PassStats(topic, queue_id, st.start, begin, end, at_ms=now, reason=reason)
        key_of = self.key_of
        dirty = []                                   # (offset, raw, key, tombstone)
        latest: dict[bytes, int] = {}
        for off, raw in self._dirty_units(topic, queue_id, begin, end):
            ps.units_read += 1
            ps.bytes_read += len(raw)
            key, tomb = key_of(raw)
            if key is None:
                ps.keyless_removed += 1
                continue
            dirty.append((off, raw, key, tomb))
            latest[key] = off
        old = st.gen
        number = (old.number + 1) if old is not None else 0
        log_path = os.path.join(st.dir, f"{number:020d}.log")
        cq_path = os.path.join(st.dir, f"{number:020d}.cq")
        entries = []
        pos = 0
        with open(log_path, "wb") as out:
            if old is not None:
                for e in old.entries:
                    if e[0] < st.start:                # below a log start that moved (retention)
                        continue
                    raw = old.read(e)
                    ps.units_read += 1
                    ps.bytes_read += len(raw)
                    key, tomb = key_of(raw)
                    if key is not None and latest.get(key, -1) > e[0]:
                        ps.superseded += 1
                        continue
                    if tomb and 0 <= e[3] <= now:
                        ps.tombstones_removed += 1
                        continue
                    out.write(raw)
                    entries.append((e[0], pos, len(raw), e[3]))
                    pos += len(raw)
            for off, raw, key, tomb in dirty:
                if latest[key] != off:
                    ps.superseded += 1
                    continue
                horizon = now + pol.delete_retention_ms if tomb else -1
                if tomb and pol.delete_retention_ms == 0:
                    ps.tombstones_removed += 1
                    continue
                out.write(raw)
                entries.append((off, pos, len(raw), horizon))
                pos += len(raw)
            out.flush()
            os.fsync(out.fileno())
        with open(cq_path, "wb") as fh:
            fh.write(b"".join(ENTRY.pack(*e) for e in entries))
            fh.flush()
            os.fsync(fh.fileno())
        ps.units_kept = len(entries)
        ps.bytes_written = pos + len(entries) * ENTRY.size
        ps.seconds = time.monotonic() - t0
        with st.lock:
            self._write_position(st, number, end, asdict(ps))
            st.gen, st.cleaned_to, st.last = Generation(st.dir, number), end, asdict(ps)
        if old is not None:
            for p in (old.log_path, old.cq_path):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            self._retired.append((time.monotonic(), old))
        for k, v in (("passes", 1), ("bytes_read", ps.bytes_read), ("bytes_written", ps.bytes_written),
                     ("millis", int(ps.seconds * 1000))):
            COMPACTION_COUNTERS[k] += v
        s = self.stats
        s["passes"] += 1
        s["units_read"] += ps.units_read
        s["units_removed"] += ps.units_read - ps.units_kept
        s["bytes_read"] += ps.bytes_read
        s["bytes_written"] += ps.bytes_written
        log.info("compaction (%s): %s", reason, ps.line())
        return ps

    def describe(self) -> list[dict]:
        out = []
        for (topic, q), st in sorted(self.queues.items()):
            g = st.gen
            out.append({"topic": topic, "queueId": q, "start": st.start, "cleanedTo": st.cleaned_to,
                        "units": len(g.entries) if g else 0, "bytes": g.size if g else 0, "lastClean": st.last})
        return out


__all__ = ["COMPACTION_COUNTERS", "CompactionPolicy", "CompactionStore", "PassStats", "default_key_of"]
