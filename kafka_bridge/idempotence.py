"""Idempotent-producer state: producer ids, epochs and per-partition sequence numbers (SPEC §11, §10).

A retried batch (same producer id, epoch and sequence range) is answered with the offsets it
got the first time instead of being stored again; a gap in sequences is OUT_OF_ORDER_SEQUENCE_NUMBER.
The last five batches per producer and partition are remembered, as Kafka's ProducerStateManager does.
State idle for producer.id.expiration.ms is forgotten, as Kafka does: every start of an idempotent
producer takes a new producer id, so without expiry producers that come and go would grow the
broker's memory for ever.

With a state directory (the broker's config dir), the state survives kill -9 of the broker as Kafka's
does (Kafka rebuilds it from the batch headers in its log; the commitlog's units do not keep the
producer id and sequence): every recorded batch is appended to kafkaProducerState.journal as one
short text line (CRC, six integers, the topic), written with one pwrite(2) by sync() before the
Produce answer (and fdatasync'ed under SYNC_FLUSH), and the
journal is folded into kafkaProducerState.json once it grows past JOURNAL_COMPACT_BYTES. On start
the snapshot and then the journal are replayed, so a client's retry of a batch the killed broker
had stored is answered with its first offsets instead of being stored twice. The window left is a
kill between the store's put and sync() of the same request.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field

from rmq import native

from .protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.idempotence")

MAX_BATCHES_REMEMBERED = 5
INT32_MAX = 2**31 - 1
#: Kafka's producer.id.expiration.ms and producer.id.expiration.check.interval.ms: the sequence
#: state of a producer and partition with no batch for that long, and a non-transactional producer
#: id with none, are forgotten (checked on InitProducerId, at most once per interval).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
PRODUCER_ID_EXPIRATION_CHECK_MS = 600_000
JOURNAL_NAME = "kafkaProducerState.journal"
SNAPSHOT_NAME = "kafkaProducerState.json"
#: the journal is folded into the snapshot (and emptied) past this size
JOURNAL_COMPACT_BYTES = 8 << 20


def _journal_line(producer_id: int, epoch: int, topic: str, partition: int, first_seq: int, count: int,
                  base_offset: int) -> bytes:
    """One journal line: the CRC32 (8 hex digits) of the payload, a space, the payload, a newline.
    The payload is the batch's six integers and then its topic, space-separated
    (b"pid epoch partition first_seq count base_offset topic"): formatting it costs a fraction of
    json.dumps, which every idempotent Produce paid (issue 24). A topic that holds a newline, which
    would cut the line, or is not ASCII is written as the JSON list
    [producer_id, epoch, topic, partition, first_seq, count, base_offset], as journals before this
    format were; the reader takes both."""
    if topic.isascii() and "\n" not in topic:
        payload = b"%d %d %d %d %d %d %s" % (producer_id, epoch, partition, first_seq, count, base_offset,
                                             topic.encode("ascii"))
    else:
        payload = json.dumps([producer_id, epoch, topic, partition, first_seq, count, base_offset],
                             separators=(",", ":"), ensure_ascii=True).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _parse_payload(payload: bytes):
    """A journal line's payload as [producer_id, epoch, topic, partition, first_seq, count, base_offset]
    (either form _journal_line writes), or None."""
    if payload[:1] == b"[":
        return json.loads(payload)
    fields = payload.split(b" ", 6)
    if len(fields) != 7:
        return None
    pid, epoch, partition, first_seq, count, base = (int(x) for x in fields[:6])
    return [pid, epoch, fields[6].decode("ascii"), partition, first_seq, count, base]


def _journal_entries(data: bytes, path: str):
    """([producer_id, epoch, topic, partition, first_seq, count, base_offset], end) of each intact line,
    end being where the line ends in `data` (after its newline); stops at the first torn or corrupt
    one (logged unless it is an unterminated last line)."""
    lines = data.split(b"\n")
    end = 0
    for i, line in enumerate(lines):
        crc, _, payload = line.partition(b" ")
        try:
            entry = _parse_payload(payload) if line and int(crc, 16) == zlib.crc32(payload) else None
        except ValueError:  # UnicodeDecodeError and json's errors included
            entry = None
        if not (isinstance(entry, list) and len(entry) == 7 and isinstance(entry[2], str)
                and all(type(x) is int for i2, x in enumerate(entry) if i2 != 2)):
            if line or i != len(lines) - 1:
                log.warning("%s: line %d is torn or corrupt; the %d lines after it are skipped", path, i + 1,
                            len(lines) - i - 1)
            return
        end = min(end + len(line) + 1, len(data))
        yield entry, end


@dataclass
class _PartitionState:
    epoch: int
    last_seq: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_REMEMBERED))  # (first, last, base_offset)
    last_seen: float = field(default_factory=time.monotonic)


@dataclass
class ProducerInfo:
    producer_id: int
    epoch: int
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    last_seen: float = field(default_factory=time.monotonic)


class ProducerStateManager:
    def __init__(self, first_id: int | None = None, *, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                 check_interval_ms: int = PRODUCER_ID_EXPIRATION_CHECK_MS):
        # Ids start from the clock so a restarted broker does not hand out ids still cached by clients.
        start = first_id if first_id is not None else int(time.time() * 1000) % (1 << 40)
        self._ids = itertools.count(start)
        self._lock = threading.Lock()
        self.producers: dict[int, ProducerInfo] = {}
        self.by_txn_id: dict[str, ProducerInfo] = {}
        self.partitions: dict[tuple[int, str, int], _PartitionState] = {}
        self.expiration_s = expiration_ms / 1000.0
        self.check_interval_s = check_interval_ms / 1000.0
        self._checked_at = time.monotonic()
        self._dir: str | None = None  # with a state directory: journaled (open_journal)
        self._fsync = False
        self._fd: int | None = None
        self._buf: list[bytes] = []
        self._journal_bytes = 0

    # ------------------------------------------------------------------ persistence
    def open_journal(self, state_dir: str, *, fsync: bool = False) -> int:
        """Load the saved state (snapshot, then journal) and journal every later record(); returns the
        number of batches replayed."""
        self._dir, self._fsync = state_dir, fsync
        os.makedirs(state_dir, exist_ok=True)
        n = 0
        snap = os.path.join(state_dir, SNAPSHOT_NAME)
        try:
            with open(snap, "rb") as fh:
                saved = json.load(fh)
            for entry in saved.get("batches", []):
                self._replay(entry)
                n += 1
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.error("%s: unreadable (%s); idempotent producers' state starts from the journal only", snap, exc)
        path = os.path.join(state_dir, JOURNAL_NAME)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            data = b""
        intact = 0
        for entry, intact in _journal_entries(data, path):
            self._replay(entry)
            n += 1
        # later lines go right after the last intact one: a torn tail (a crash inside a write) is cut
        # off, so the next line does not run on from it and get skipped with it at the next start
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        if intact < len(data):
            os.ftruncate(self._fd, intact)
        elif data and not data.endswith(b"\n"):  # an intact last line that lost only its newline
            os.pwrite(self._fd, b"\n", intact)
            intact += 1
        self._journal_bytes = intact
        if n:
            log.info("idempotent producers: %d stored batches replayed from %s", n, state_dir)
        return n

    def _replay(self, entry: list) -> None:
        pid, epoch, topic, partition, first_seq, count, base = entry
        self._record(pid, epoch, topic, partition, first_seq, count, base)
        info = self.producers.get(pid)
        if info is None:
            self.producers[pid] = ProducerInfo(pid, epoch)
        elif epoch > info.epoch and info.transactional_id is None:
            info.epoch = epoch

    def sync(self) -> None:
        """Write the batches recorded since the last sync (one write(2); fdatasync under SYNC_FLUSH).
        Called before a Produce answer; an OSError is logged: the answer still goes out, as the
        records are stored, and only a retry after a crash could then be stored twice."""
        if not self._buf or self._fd is None:
            self._buf.clear()
            return
        with self._lock:
            buf, self._buf = self._buf, []
            data = b"".join(buf)
            try:
                # at the journal's end, keeping the GIL for a small write (rmq._native.pwrite_all):
                # os.write releases it, and the event loop waited to get it back after each Produce
                native.pwrite_all(self._fd, data, self._journal_bytes)
                if self._fsync:
                    os.fdatasync(self._fd)
            except OSError as exc:
                log.error("writing %s failed (%s): a retried batch could be stored twice after a crash",
                          JOURNAL_NAME, exc)
                return
            self._journal_bytes += len(data)
            if self._journal_bytes > JOURNAL_COMPACT_BYTES:
                self._compact()

    def _compact(self) -> None:
        """Fold the journal into the snapshot (the caller holds the lock). A crash between the snapshot's
        rename and the truncation replays the journal over a snapshot that holds it: the same state."""
        batches = [[pid, st.epoch, topic, partition, f, (l - f) % (INT32_MAX + 1) + 1, base]
                   for (pid, topic, partition), st in self.partitions.items() for f, l, base in st.batches]
        snap = os.path.join(self._dir, SNAPSHOT_NAME)
        tmp = snap + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"batches": batches}, fh, separators=(",", ":"))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, snap)
            os.ftruncate(self._fd, 0)
            self._journal_bytes = 0
        except OSError as exc:
            log.error("folding %s into %s failed (%s); the journal keeps growing", JOURNAL_NAME, SNAPSHOT_NAME, exc)

    def close_journal(self) -> None:
        self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def init_producer(self, transactional_id: str | None, timeout_ms: int,
                      producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int, int]:
        """InitProducerId: (error_code, producer_id, epoch). A transactional id keeps its producer id
        and bumps the epoch (fencing the previous instance)."""
        with self._lock:
            self._expire_idle()
            if transactional_id is not None:
                info = self.by_txn_id.get(transactional_id)
                if info is None:
                    info = ProducerInfo(next(self._ids), 0, transactional_id, timeout_ms)
                    self.by_txn_id[transactional_id] = info
                else:
                    if producer_id >= 0 and (producer_id != info.producer_id or producer_epoch != info.epoch):
                        return ec.INVALID_PRODUCER_EPOCH if producer_id == info.producer_id else ec.INVALID_PRODUCER_ID_MAPPING, -1, -1
                    info.epoch += 1
                    if info.epoch > 32767:
                        info = ProducerInfo(next(self._ids), 0, transactional_id, timeout_ms)
                        self.by_txn_id[transactional_id] = info
                    info.transaction_timeout_ms = timeout_ms
                self.producers[info.producer_id] = info
                return ec.NONE, info.producer_id, info.epoch
            if producer_id >= 0 and producer_id in self.producers:
                info = self.producers[producer_id]
                if producer_epoch != info.epoch:
                    return ec.INVALID_PRODUCER_EPOCH, -1, -1
                info.epoch += 1
                return ec.NONE, info.producer_id, info.epoch
            info = ProducerInfo(next(self._ids), 0)
            self.producers[info.producer_id] = info
            return ec.NONE, info.producer_id, 0

    def check(self, producer_id: int, epoch: int, topic: str, partition: int, first_seq: int,
              count: int) -> tuple[int, int | None]:
        """Before appending a batch: (error_code, duplicate_base_offset). A duplicate returns NONE
        with the base offset it was stored at; the caller must then not store it again."""
        if producer_id < 0:
            return ec.NONE, None
        info = self.producers.get(producer_id)
        if info is not None and epoch < info.epoch:
            return ec.INVALID_PRODUCER_EPOCH, None
        st = self.partitions.get((producer_id, topic, partition))
        if st is None or epoch > st.epoch:
            return ec.NONE, None  # first batch we see from this producer epoch: accept
        last = (first_seq + count - 1) % (INT32_MAX + 1)
        for f, l, base in st.batches:
            if f == first_seq and l == last:
                return ec.NONE, base
        expected = (st.last_seq + 1) % (INT32_MAX + 1)
        if first_seq != expected:
            if any(f <= first_seq <= l for f, l, _ in st.batches):
                return ec.DUPLICATE_SEQUENCE_NUMBER, None
            return ec.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ec.NONE, None

    def record(self, producer_id: int, epoch: int, topic: str, partition: int, first_seq: int,
               count: int, base_offset: int) -> None:
        """After a successful append (journaled by the next sync())."""
        if producer_id < 0:
            return
        self._record(producer_id, epoch, topic, partition, first_seq, count, base_offset)
        if self._fd is not None:
            self._buf.append(_journal_line(producer_id, epoch, topic, partition, first_seq, count, base_offset))

    def _record(self, producer_id: int, epoch: int, topic: str, partition: int, first_seq: int,
                count: int, base_offset: int) -> None:
        key = (producer_id, topic, partition)
        st = self.partitions.get(key)
        if st is None or epoch > st.epoch:
            st = _PartitionState(epoch)
            self.partitions[key] = st
        last = (first_seq + count - 1) % (INT32_MAX + 1)
        st.last_seq = last
        st.batches.append((first_seq, last, base_offset))
        st.last_seen = time.monotonic()
        info = self.producers.get(producer_id)
        if info is not None:
            info.last_seen = st.last_seen

    def _expire_idle(self) -> None:
        """producer.id.expiration.ms, at most once per check interval (the caller holds the lock).
        Transactional producer ids are kept: kafka_bridge.txn expires them (forget_transactional)."""
        now = time.monotonic()
        if now - self._checked_at < self.check_interval_s:
            return
        self._checked_at = now
        cutoff = now - self.expiration_s
        parts = [k for k, st in self.partitions.items() if st.last_seen < cutoff]
        for k in parts:
            del self.partitions[k]
        ids = [pid for pid, info in self.producers.items()
               if info.transactional_id is None and info.last_seen < cutoff]
        for pid in ids:
            del self.producers[pid]
        if parts or ids:
            log.info("expired %d idle producer ids and %d producer partition states (producer.id.expiration.ms "
                     "= %d)", len(ids), len(parts), self.expiration_s * 1000)

    def forget_transactional(self, transactional_id: str) -> None:
        """The transactional id expired (transactional.id.expiration.ms): its producer id and sequence
        state go too."""
        with self._lock:
            info = self.by_txn_id.pop(transactional_id, None)
            if info is None:
                return
            self.producers.pop(info.producer_id, None)
            for k in [k for k in self.partitions if k[0] == info.producer_id]:
                del self.partitions[k]
