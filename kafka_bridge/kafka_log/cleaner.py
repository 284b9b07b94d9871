"""The kafka-log peer's log cleaner: Kafka's LogCleaner / Cleaner for topics with cleanup.policy
compact (or compact,delete), over the segments of kafka_log.segment.

One pass (Kafka's CleanerThread.cleanFilthiestLog):
  * choose the compacted log with the highest dirty ratio (dirty bytes / (clean + dirty bytes)) above
    its min.cleanable.dirty.ratio, or one whose oldest dirty record is older than
    max.compaction.lag.ms, or else one whose tombstones' delete horizon has passed (KIP-534);
  * the cleanable range ends at the active segment, at the first segment holding a record younger
    than min.compaction.lag.ms and at the first offset of a transaction still open (the LSO);
  * build the offset map (key -> last offset) from the dirty segments, a segment at a time until the
    map is full (the dedupe buffer), skipping control batches and aborted transactions' records;
  * rewrite every segment from the log start to the end of what the map covers, in groups whose
    total fits segment.bytes: a record survives when it has a key and no later record of its key is
    in the map; records of aborted transactions go; a tombstone (null value) and a transaction
    marker whose data is all gone stay until their batch's delete horizon, which the first cleaning
    that keeps them sets to now + delete.retention.ms (the batch's baseTimestamp and attribute bit
    0x40, as Kafka 3.1+ writes it); a batch keeps its base offset and last offset delta, so offsets
    keep their meaning and a fetch inside a removed range gets the next surviving record;
  * swap the cleaned group in (`<base>.log.cleaned` -> `<base>.log.swap.<end>` -> `<base>.log`;
    load() finishes or drops an interrupted swap) and record the first dirty offset in
    `<log.dir>/cleaner-offset-checkpoint`.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from crc32c import crc32c

from rmq.store.compaction import COMPACTION_COUNTERS

from ..records import HEADER_SIZE, RecordBatch, RecordsError, encode_batch
from ..records.batch import CONTROL_MASK, CRC_START, DELETE_HORIZON_MASK, HEADER, TRANSACTIONAL_MASK, ControlType
from .segment import LogSegment, file_name

log = logging.getLogger("kafka_bridge.kafka_log.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
INT32_MAX = (1 << 31) - 1
_ATTRS = struct.Struct(">h")
_LAST_DELTA = struct.Struct(">i")
_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")


def is_compacted(config) -> bool:
    return "compact" in config.cleanup_policy.split(",")


@dataclass
class CleanStats:
    """What one cleaning did (Kafka's CleanerStats), also kept as the log's last_clean."""
    topic: str = ""
    partition: int = 0
    start_offset: int = 0            # first offset rewritten (the log start)
    end_offset: int = 0              # the new first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    superseded: int = 0              # a later record of the same key is in the map
    tombstones_removed: int = 0
    keyless_removed: int = 0
    aborted_removed: int = 0
    markers_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    seconds: float = 0.0
    at_ms: int = 0
    reasons: list = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.topic}-{self.partition}: cleaned offsets [{self.start_offset}, {self.end_offset}), "
                f"{self.records_read} records read, {self.records_kept} kept ({self.superseded} superseded, "
                f"{self.tombstones_removed} tombstones, {self.aborted_removed} aborted, {self.markers_removed} "
                f"markers, {self.keyless_removed} keyless removed), {self.bytes_read} -> {self.bytes_written} bytes, "
                f"{self.segments_before} -> {self.segments_after} segments in {self.seconds * 1000:.0f} ms")


def _patch(buf: bytearray, last_delta: int, horizon: int | None) -> bytes:
    """Give a re-encoded batch its original lastOffsetDelta (and the delete-horizon flag), new CRC."""
    _LAST_DELTA.pack_into(buf, 23, last_delta)
    if horizon is not None:
        attrs = _ATTRS.unpack_from(buf, 21)[0] | DELETE_HORIZON_MASK
        _ATTRS.pack_into(buf, 21, attrs)
    _CRC.pack_into(buf, CRC_START - 4, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def rewrite_batch(b: RecordBatch, kept: list, horizon: int | None) -> bytes:
    recs = [(r.key, r.value, r.headers, r.timestamp) for r in kept]
    if horizon is not None:
        base_ts = horizon
    else:     # a batch whose horizon is dropped gets its first record's time back as base timestamp
        base_ts = None if b.attributes & DELETE_HORIZON_MASK else b.base_timestamp
    raw = encode_batch(recs, base_offset=b.base_offset, compression=int(b.attributes & 0x07),
                       producer_id=b.producer_id, producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
                       is_transactional=b.is_transactional, is_control=b.is_control,
                       timestamp_type=int(b.timestamp_type), max_timestamp=b.max_timestamp,
                       partition_leader_epoch=b.partition_leader_epoch,
                       offset_deltas=[r.offset_delta for r in kept], base_timestamp=base_ts)
    return _patch(bytearray(raw), b.last_offset_delta, horizon)


def _batches(seg: LogSegment):
    """(position, RecordBatch) of every whole batch of a segment, one pread per batch (memory stays
    one batch whatever the segment's size)."""
    for info in seg.scan(0):
        data = seg.read_at(info.position, info.size)
        try:
            b = RecordBatch(data, 0, verify_crc=False)
        except RecordsError:
            return
        yield info.position, b


def _headers(seg: LogSegment):
    """(position, size, base offset, attributes, producer id, base timestamp) of every batch, from
    its header alone."""
    fd = seg._log.fileno()
    for info in seg.scan(0):
        head = os.pread(fd, HEADER_SIZE, info.position)
        f = HEADER.unpack_from(head, 0)
        yield info.position, info.size, f[0], f[5], f[9], f[7]


class Transactions:
    """Which transactional batches were aborted and which markers close which batches, from a scan of
    batch headers (and markers) over a range of segments: Kafka reads this from the producer state
    and the .txnindex; the peer has neither, so the cleaner scans."""

    def __init__(self) -> None:
        self.open: dict[int, list[int]] = {}          # producer id -> base offsets of its open txn
        self.aborted: set[int] = set()                # base offsets of batches of aborted txns
        self.closes: dict[int, list[int]] = {}        # marker offset -> the batches it closed
        self.first_unstable: int | None = None

    def scan(self, segments) -> None:
        for seg in segments:
            for pos, size, base, attrs, pid, _ in _headers(seg):
                if not attrs & TRANSACTIONAL_MASK:
                    continue
                if attrs & CONTROL_MASK:
                    try:
                        kind = RecordBatch(seg.read_at(pos, size), 0, verify_crc=False).control_marker().type
                    except RecordsError:
                        continue
                    batches = self.open.pop(pid, [])
                    self.closes[base] = batches
                    if kind == ControlType.ABORT:
                        self.aborted.update(batches)
                else:
                    self.open.setdefault(pid, []).append(base)
        firsts = [v[0] for v in self.open.values() if v]
        self.first_unstable = min(firsts) if firsts else None


class LogCleaner:
    """The cleaner thread of a KafkaLogManager (log.cleaner.threads = 1)."""

    def __init__(self, manager, backoff_ms: int = 15_000, max_map_entries: int = 1_000_000) -> None:
        self.manager = manager
        self.backoff_ms = backoff_ms
        self.max_map_entries = max_map_entries
        self.first_dirty: dict[tuple[str, int], int] = {}
        self.last: CleanStats | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._retired: list[tuple[float, LogSegment]] = []   # old segments, closed a while after a swap

    # ---- the thread ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kafka-log-cleaner", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for _, seg in self._retired:
            seg.close()
        self._retired.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                did = self.clean_once()
            except Exception:           # a cleaner that died silently would stop compaction for good
                log.exception("kafka-log cleaner")
                did = None
            self._close_retired()
            if did is None:
                self._stop.wait(self.backoff_ms / 1000)

    def _close_retired(self, older_than: float = 5.0) -> None:
        now = time.monotonic()
        keep = []
        for t, seg in self._retired:
            if now - t >= older_than:
                seg.close()
            else:
                keep.append((t, seg))
        self._retired = keep

    # ---- choosing a log --------------------------------------------------------------------------
    def _candidate(self, plog, now: int):
        """(first dirty, end of cleanable, clean bytes, dirty bytes, needs compaction now) or None."""
        cfg = plog.config
        with plog.lock:
            segs = list(plog.segments)
        if len(segs) < 2:
            return None
        first_dirty = max(self.first_dirty.get((plog.topic, plog.partition), 0), plog.log_start_offset)
        if first_dirty >= segs[-1].base_offset:
            first_dirty = segs[-1].base_offset
        end = segs[-1].base_offset                                       # never the active segment
        if cfg.min_compaction_lag_ms > 0:
            for s in segs[:-1]:
                if s.base_offset >= first_dirty and s.max_timestamp > now - cfg.min_compaction_lag_ms:
                    end = min(end, s.base_offset)
                    break
        clean = sum(s.size for s in segs if s.next_offset <= first_dirty)
        dirty_segs = [s for s in segs[:-1] if s.next_offset > first_dirty and s.base_offset < end]
        dirty = sum(s.size for s in dirty_segs)
        need_now = False
        if cfg.max_compaction_lag_ms < (1 << 62) and dirty_segs:
            first_ts = self._first_timestamp(dirty_segs[0])
            need_now = first_ts >= 0 and now - first_ts > cfg.max_compaction_lag_ms
        return first_dirty, end, clean, dirty, need_now

    @staticmethod
    def _scan_horizons(plog) -> int:
        """The latest delete horizon a batch of the log carries (-1: none): the cleaner keeps it in
        memory, so after a restart it is read back from the batch headers."""
        with plog.lock:
            segs = list(plog.segments[:-1])
        latest = -1
        for seg in segs:
            for _, _, _, attrs, _, base_ts in _headers(seg):
                if attrs & DELETE_HORIZON_MASK:
                    latest = max(latest, base_ts)
        return latest

    @staticmethod
    def _first_timestamp(seg: LogSegment) -> int:
        for _, _, _, attrs, _, base_ts in _headers(seg):
            return base_ts if not attrs & DELETE_HORIZON_MASK else -1
        return -1

    def clean_once(self, now_ms: int | None = None) -> CleanStats | None:
        """Clean the filthiest compacted log, if one is due; what was done, or None."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        due, expired = [], []
        for plog in list(self.manager.logs.values()):
            self.manager.refresh_config(plog)
            if not is_compacted(plog.config):
                continue
            if plog.latest_delete_horizon == -1 and not getattr(plog, "horizons_scanned", False):
                plog.latest_delete_horizon = self._scan_horizons(plog)    # once per log after a start
                plog.horizons_scanned = True
            c = self._candidate(plog, now)
            if c is None:
                continue
            first_dirty, end, clean, dirty, need_now = c
            ratio = dirty / (clean + dirty) if clean + dirty else 0.0
            if (need_now and dirty > 0) or (dirty > 0 and ratio > plog.config.min_cleanable_dirty_ratio):
                reason = "max.compaction.lag.ms" if need_now else f"dirty ratio {ratio:.2f}"
                due.append((1.0 if need_now else ratio, plog, first_dirty, end, reason))
            elif 0 <= plog.latest_delete_horizon <= now:
                expired.append((0.0, plog, first_dirty, end, "tombstones past their delete horizon"))
        due.sort(key=lambda x: -x[0])
        for _, plog, first_dirty, end, reason in due + expired:
            st = self.clean(plog, first_dirty, end, now, reason)
            if st.segments_before:        # an open transaction may leave nothing cleanable: next log
                return st
        return None

    # ---- cleaning --------------------------------------------------------------------------------
    def clean(self, plog, first_dirty: int, end: int, now: int, reason: str = "") -> CleanStats:
        t0 = time.monotonic()
        cfg = plog.config
        st = CleanStats(plog.topic, plog.partition, plog.log_start_offset, first_dirty, at_ms=now, reasons=[reason])
        with plog.lock:
            segs = [s for s in plog.segments[:-1]]
        # transactions: which batches were aborted; nothing past the first open transaction is cleaned
        txns = Transactions()
        txns.scan([s for s in segs if s.base_offset < end])
        if txns.first_unstable is not None and txns.first_unstable < end:
            end = max([first_dirty] + [s.base_offset for s in segs if s.base_offset <= txns.first_unstable])
        # the offset map, from the dirty segments, a segment at a time while it has room
        offset_map: dict[bytes, int] = {}
        map_end = end
        dirty_segs = [s for s in segs if s.next_offset > first_dirty and s.base_offset < end]
        for i, seg in enumerate(dirty_segs):
            added: dict[bytes, int] = {}
            for _, b in _batches(seg):
                if b.attributes & CONTROL_MASK or b.base_offset in txns.aborted:
                    continue
                for r in b.records():
                    off = b.base_offset + r.offset_delta
                    if off >= first_dirty and r.key is not None:
                        added[bytes(r.key)] = off
            if offset_map and len(offset_map) + len(added) > self.max_map_entries:
                map_end = seg.base_offset            # the dedupe buffer is full: the rest waits
                break
            offset_map.update(added)
        end = max(first_dirty, min(end, map_end))
        st.end_offset = end
        # rewrite from the log start to `end`, in groups that fit one segment
        todo = [s for s in segs if s.base_offset < end]
        st.segments_before = len(todo)
        if not todo:
            return st
        aborted = False
        retained_txn: dict[int, bool] = {}        # base offset of a transactional batch -> kept something
        latest_horizon = -1
        for group in self._groups(todo, cfg.segment_bytes):
            out = []
            for seg in group:
                for _, b in _batches(seg):
                    size = b.batch_length + 12
                    st.bytes_read += size
                    raw = self._clean_batch(b, offset_map, txns, retained_txn, cfg, now, st)
                    if raw is None:
                        continue
                    if _ATTRS.unpack_from(raw, 21)[0] & DELETE_HORIZON_MASK:
                        latest_horizon = max(latest_horizon, _TS.unpack_from(raw, 27)[0])
                    out.append(raw)
            new_seg = self._swap(plog, group, out)
            if new_seg is False:                      # retention or a delete got there first
                aborted = True
                continue
            st.bytes_written += sum(len(x) for x in out)
            st.segments_after += 1 if new_seg is not None else 0
        plog.latest_delete_horizon = latest_horizon
        if not aborted:               # Kafka: an aborted cleaning leaves the first dirty offset as it was
            self.first_dirty[(plog.topic, plog.partition)] = end
        st.seconds = time.monotonic() - t0
        plog.last_clean = st
        self.last = st
        s = self.manager.stats
        for k, v in (("cleaner_passes", 1), ("cleaner_bytes_read", st.bytes_read),
                     ("cleaner_bytes_written", st.bytes_written), ("cleaner_records_removed",
                                                                   st.records_read - st.records_kept)):
            s[k] = s.get(k, 0) + v
        for k, v in (("passes", 1), ("bytes_read", st.bytes_read), ("bytes_written", st.bytes_written),
                     ("millis", int(st.seconds * 1000))):
            COMPACTION_COUNTERS[k] += v
        log.info("kafka-log cleaner (%s): %s", reason, st.line())
        return st

    @staticmethod
    def _groups(segs: list[LogSegment], max_bytes: int):
        group, size = [], 0
        for s in segs:
            if group and (size + s.size > max_bytes or s.next_offset - group[0].base_offset > INT32_MAX):
                yield group
                group, size = [], 0
            group.append(s)
            size += s.size
        if group:
            yield group

    def _clean_batch(self, b: RecordBatch, offset_map, txns, retained_txn, cfg, now: int, st: CleanStats):
        """The batch as it goes to the cleaned segment (raw bytes, unchanged when nothing changed), or
        None when nothing of it stays."""
        horizon = b.base_timestamp if b.attributes & DELETE_HORIZON_MASK else None
        expired = horizon is not None and horizon <= now
        if b.attributes & CONTROL_MASK:
            st.records_read += b.records_count
            batches = txns.closes.get(b.base_offset)
            still_has_data = batches is None or any(retained_txn.get(x, False) for x in batches)
            if still_has_data:
                st.records_kept += b.records_count
                return bytes(b.raw)
            if expired:
                st.markers_removed += 1
                return None
            st.records_kept += b.records_count
            if horizon is None:
                return rewrite_batch(b, b.records(), now + cfg.delete_retention_ms)
            return bytes(b.raw)
        recs = b.records()
        st.records_read += len(recs)
        if b.base_offset in txns.aborted:
            st.aborted_removed += len(recs)
            return None
        kept = []
        tombstones = False
        for r in recs:
            off = b.base_offset + r.offset_delta
            if r.key is None:
                st.keyless_removed += 1
                continue
            if offset_map.get(bytes(r.key), -1) > off:
                st.superseded += 1
                continue
            if r.value is None:
                if expired:
                    st.tombstones_removed += 1
                    continue
                tombstones = True
            kept.append(r)
        if b.attributes & TRANSACTIONAL_MASK:
            retained_txn[b.base_offset] = bool(kept)
        st.records_kept += len(kept)
        if not kept:
            return None
        new_horizon = now + cfg.delete_retention_ms if tombstones and horizon is None else None
        if len(kept) == len(recs) and new_horizon is None:
            return bytes(b.raw)
        if new_horizon is None and horizon is not None:
            new_horizon = horizon if tombstones else None
        return rewrite_batch(b, kept, new_horizon)

    def _swap(self, plog, group: list[LogSegment], batches: list[bytes]) -> LogSegment | None | bool:
        """Replace `group` by one segment holding `batches` (Kafka's replaceSegments): write
        <base>.log.cleaned, fsync, rename to <base>.log.swap.<end>, unlink the old files (readers that
        hold them keep reading), rename the swap file to <base>.log and index it. Returns the new
        segment, None when nothing of the group stays, False when the group is no longer the log's."""
        base = group[0].base_offset
        end = group[-1].next_offset
        d = plog.dir
        cleaned = os.path.join(d, file_name(base, ".log.cleaned"))
        with open(cleaned, "wb") as fh:
            for x in batches:
                fh.write(x)
            fh.flush()
            os.fsync(fh.fileno())
        swap = os.path.join(d, file_name(base, f".log.swap.{end}"))
        os.replace(cleaned, swap)
        with plog.lock:
            idx = [i for i, s in enumerate(plog.segments) if s in group]
            if len(idx) != len(group) or idx != list(range(idx[0], idx[0] + len(group))) \
                    or plog.segments[-1] in group:
                os.unlink(swap)                        # retention or a delete got there first
                return False
            first_of_log = idx[0] == 0
            for s in group:
                for p in (s.log_path, s.index_path, s.time_path):
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
            if not batches and not first_of_log:
                os.unlink(swap)
                del plog.segments[idx[0]:idx[0] + len(group)]
                new = None
            else:
                os.replace(swap, os.path.join(d, file_name(base, ".log")))
                new = LogSegment(d, base, plog.config.index_interval_bytes)
                new.recover()
                plog.segments[idx[0]:idx[0] + len(group)] = [new]
        t = time.monotonic()
        self._retired.extend((t, s) for s in group)
        return new


def finish_interrupted_swaps(directory: str) -> int:
    """At load: drop `.cleaned` files (a cleaning that did not finish) and complete `.swap` ones (the
    old segments of [base, end) go, the swap file becomes the segment). Returns the swaps completed."""
    done = 0
    names = os.listdir(directory)
    for n in names:
        if n.endswith(".log.cleaned"):
            os.unlink(os.path.join(directory, n))
    for n in names:
        if ".log.swap." not in n:
            continue
        base_s, _, end_s = n.partition(".log.swap.")
        if not (base_s.isdigit() and end_s.isdigit()):
            continue
        base, end = int(base_s), int(end_s)
        for m in os.listdir(directory):
            stem = m.split(".")[0]
            if stem.isdigit() and base <= int(stem) < end and m.endswith((".log", ".index", ".timeindex")):
                os.unlink(os.path.join(directory, m))
        os.replace(os.path.join(directory, n), os.path.join(directory, file_name(base, ".log")))
        done += 1
    return done
