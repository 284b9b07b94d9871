"""A Kafka partition log (kafka.log.UnifiedLog / LocalLog): a directory `<topic>-<partition>/` of
segments, appended at the active (last) one, rolled at segment.bytes or segment.ms, trimmed from the
front by retention.ms / retention.bytes, flushed by flush.messages / flush.ms (by default never:
Kafka leaves durability to replication and the page cache)."""
from __future__ import annotations

import errno
import os
import struct
import threading
import time
from dataclasses import dataclass

from crc32c import crc32c

from ..records import RecordBatch, RecordsError
from ..records.batch import CONTROL_MASK, CRC_START, TIMESTAMP_TYPE_MASK
from .segment import LogSegment

LONG_MAX = (1 << 63) - 1


@dataclass
class LogConfig:
    """The per-log settings of Kafka's LogConfig, with Kafka's defaults."""
    segment_bytes: int = 1 << 30                     # log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000           # log.roll.ms / segment.ms
    index_interval_bytes: int = 4096                 # log.index.interval.bytes
    flush_messages: int = LONG_MAX                   # log.flush.interval.messages
    flush_ms: int = LONG_MAX                         # log.flush.interval.ms
    retention_ms: int = 7 * 24 * 3600 * 1000         # log.retention.ms (168 h)
    retention_bytes: int = -1                        # log.retention.bytes
    message_timestamp_type: str = "CreateTime"
    # the log cleaner's (kafka_log.cleaner): cleanup.policy and the compaction settings
    cleanup_policy: str = "delete"                   # log.cleanup.policy: delete, compact or compact,delete
    min_cleanable_dirty_ratio: float = 0.5           # log.cleaner.min.cleanable.ratio
    min_compaction_lag_ms: int = 0                   # log.cleaner.min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX            # log.cleaner.max.compaction.lag.ms
    delete_retention_ms: int = 24 * 3600 * 1000      # log.cleaner.delete.retention.ms


class AppendError(ValueError):
    """A batch the log refuses; `code` is the Kafka error code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
KAFKA_STORAGE_ERROR = 56


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig, stats: dict) -> None:
        self.dir, self.topic, self.partition, self.config, self.stats = directory, topic, partition, config, stats
        os.makedirs(directory, exist_ok=True)
        self.lock = threading.RLock()
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.last_flush_ms = time.time() * 1000
        self.segment_created_ms = self.last_flush_ms
        self.latest_delete_horizon = -1        # the cleaner's: when kept tombstones may go (-1: none kept)
        self.last_clean = None                 # the cleaner's CleanStats of its last pass on this log
        self.config_source = None              # the topic attributes the config was made from (the bridge's)

    # ---- opening ---------------------------------------------------------------------------------
    def load(self, recovery_point: int, clean: bool, log_start: int = 0) -> int:
        """Open the segments; after an unclean shutdown, recover every segment holding offsets at or
        past the recovery point (Kafka's LogLoader). Returns the bytes truncated."""
        from .cleaner import finish_interrupted_swaps
        finish_interrupted_swaps(self.dir)
        bases = sorted(int(f[:-4]) for f in os.listdir(self.dir) if f.endswith(".log") and f[:-4].isdigit())
        truncated = 0
        for i, base in enumerate(bases):
            seg = LogSegment(self.dir, base, self.config.index_interval_bytes)
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if clean or (nxt is not None and nxt <= recovery_point):
                seg.load_indexes()
            else:
                truncated += seg.recover()
                self.stats["segments_recovered"] = self.stats.get("segments_recovered", 0) + 1
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(LogSegment(self.dir, max(log_start, 0), self.config.index_interval_bytes))
            self.stats["files_created"] = self.stats.get("files_created", 0) + 3
        self.log_start_offset = max(log_start, self.segments[0].base_offset)
        self.recovery_point = min(recovery_point, self.end_offset) if not clean else self.end_offset
        return truncated

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def end_offset(self) -> int:
        """The log end offset: the next offset to be written (the high watermark of a lone replica)."""
        return self.active.next_offset

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- appending -------------------------------------------------------------------------------
    def append(self, records: bytes, now_ms: int | None = None, max_batch: int = 1 << 20, *,
               coordinator: bool = False) -> tuple[int, int, int]:
        """Append the batches of one produce request's partition data: check each (length, magic 2,
        CRC, not a control batch, offset deltas), give them the next offsets, write them as received.
        `coordinator`: the batches come from the broker itself (Kafka's AppendOrigin.Coordinator), so
        transaction markers are allowed. Returns (base offset, last offset, log append time or -1)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        mv = memoryview(records)
        batches = []
        pos = 0
        while pos < len(mv):
            try:
                b = RecordBatch(mv, pos, verify_crc=True)
            except RecordsError as exc:
                raise AppendError(getattr(exc, "error_code", 2), str(exc)) from None
            size = b.batch_length + 12
            if b.attributes & CONTROL_MASK and not coordinator:
                raise AppendError(87, "clients may not write control batches")        # INVALID_RECORD
            if b.records_count <= 0 or b.last_offset_delta != b.records_count - 1:
                raise AppendError(87, f"batch of {b.records_count} records has last offset delta {b.last_offset_delta}")
            if size > max_batch:
                raise AppendError(10, f"the record batch ({size} bytes) is larger than max.message.bytes={max_batch}")
            batches.append((pos, size, b.records_count, b.max_timestamp))
            pos += size
        if not batches:
            raise AppendError(2, "no record batches")                                  # CORRUPT_MESSAGE
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        with self.lock:
            base = nxt = self.end_offset
            n_segments = len(self.segments)
            for p, size, count, max_ts in batches:
                buf = bytearray(mv[p:p + size])
                struct.pack_into(">q", buf, 0, nxt)
                if log_append:
                    buf[22] |= TIMESTAMP_TYPE_MASK
                    struct.pack_into(">q", buf, 35, now)
                    struct.pack_into(">I", buf, CRC_START - 4, crc32c(memoryview(buf)[CRC_START:]))
                    max_ts = now
                try:
                    self._maybe_roll(size, now)
                    self.active.append(bytes(buf), nxt, nxt + count - 1, max_ts)
                except OSError as exc:
                    if exc.errno not in DISK_FULL_ERRNOS:
                        raise
                    self._take_back(n_segments, base)
                    raise AppendError(KAFKA_STORAGE_ERROR, f"disk full: {exc.strerror or exc} appending to "
                                                           f"{self.dir}; nothing of this request was stored") from None
                self.stats["bytes_appended"] = self.stats.get("bytes_appended", 0) + size
                self.stats["writes"] = self.stats.get("writes", 0) + 1
                nxt += count
            self._maybe_flush(now)
            return base, nxt - 1, now if log_append else -1

    def _take_back(self, n_segments: int, end: int) -> None:
        """After a batch of a request failed for want of space: the request's earlier batches go
        too (segments it rolled are deleted, the old active segment cut back to `end`), so the
        producer's retry stores each record once."""
        while len(self.segments) > n_segments:
            self.segments.pop().delete()
        seg = self.active
        if seg.next_offset > end:
            cut = None
            for info in seg.scan(0):
                if info.base_offset >= end:
                    cut = info.position
                    break
            if cut is not None:
                os.ftruncate(seg._log.fileno(), cut)
                seg.size = cut
                seg.recover()

    def _maybe_roll(self, size: int, now: int) -> None:
        seg = self.active
        if seg.size > 0 and (seg.size + size > self.config.segment_bytes
                             or now - self.segment_created_ms >= self.config.segment_ms):
            self.roll(now)

    def roll(self, now: int | None = None) -> LogSegment:
        with self.lock:
            seg = LogSegment(self.dir, self.end_offset, self.config.index_interval_bytes)
            seg.next_offset = seg.base_offset
            self.segments.append(seg)
            self.segment_created_ms = now if now is not None else time.time() * 1000
            self.stats["files_created"] = self.stats.get("files_created", 0) + 3
            self.stats["segments_rolled"] = self.stats.get("segments_rolled", 0) + 1
            return seg

    def _maybe_flush(self, now: int) -> None:
        unflushed = self.end_offset - self.recovery_point
        if unflushed >= self.config.flush_messages or now - self.last_flush_ms >= self.config.flush_ms:
            self.flush(now)

    def flush(self, now: int | None = None) -> None:
        """fsync every segment past the recovery point, then move the recovery point to the end."""
        with self.lock:
            end = self.end_offset
            for seg in self.segments:
                if seg.next_offset > self.recovery_point or seg is self.active:
                    self.stats["fsyncs"] = self.stats.get("fsyncs", 0) + seg.flush()
            self.recovery_point = end
            self.last_flush_ms = now if now is not None else time.time() * 1000

    # ---- reading ---------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one that holds `offset` (the client skips records before it)."""
        with self.lock:
            segs = list(self.segments)
        i = max((k for k, s in enumerate(segs) if s.base_offset <= offset), default=0)
        for seg in segs[i:]:
            data = seg.read(offset, max_bytes)
            if data:
                self.stats["bytes_read"] = self.stats.get("bytes_read", 0) + len(data)
                return data
        return b""

    def offset_for_time(self, ts: int) -> tuple[int, int]:
        """The first record whose timestamp is >= ts, as (offset, timestamp); (-1, -1) when none is
        (Kafka's fetchOffsetByTimestamp: the time index finds the batch, its records the offset)."""
        with self.lock:
            segs = list(self.segments)
        for seg in segs:
            if seg.max_timestamp < ts:
                continue
            info = seg.find_time(ts)
            while info is not None:
                b = RecordBatch(seg.read_at(info.position, info.size), 0, verify_crc=False)
                for r in b.records():
                    if r.timestamp >= ts and b.base_offset + r.offset_delta >= self.log_start_offset:
                        return b.base_offset + r.offset_delta, r.timestamp
                nxt = [x for x in seg.scan(info.position + info.size)][:1]
                info = nxt[0] if nxt else None
        return -1, -1

    def max_timestamp_offset(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP: the offset and timestamp of the record with the largest timestamp."""
        with self.lock:
            segs = [s for s in self.segments if s.max_timestamp >= 0]
        if not segs:
            return -1, -1
        seg = max(segs, key=lambda s: s.max_timestamp)
        best = (-1, -1)
        for info in seg.scan(0):
            if info.max_timestamp >= best[1]:
                b = RecordBatch(seg.read_at(info.position, info.size), 0, verify_crc=False)
                for r in b.records():
                    if r.timestamp >= best[1]:
                        best = (b.base_offset + r.offset_delta, r.timestamp)
        return best

    # ---- retention -------------------------------------------------------------------------------
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's deleteRetentionMsBreachedSegments / deleteRetentionSizeBreachedSegments: drop whole
        segments (never the active one) that are past retention.ms or beyond retention.bytes."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dropped = 0
        if "delete" not in self.config.cleanup_policy.split(","):
            return 0                  # cleanup.policy=compact: only the cleaner removes records
        with self.lock:
            while len(self.segments) > 1:
                seg = self.segments[0]
                too_old = self.config.retention_ms >= 0 and now - seg.max_timestamp > self.config.retention_ms \
                    and seg.max_timestamp >= 0
                too_big = self.config.retention_bytes >= 0 and \
                    self.size_bytes() - seg.size >= self.config.retention_bytes
                if not (too_old or too_big):
                    break
                self.segments.pop(0)
                seg.delete()
                dropped += 1
                self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.stats["segments_deleted"] = self.stats.get("segments_deleted", 0) + dropped
        return dropped

    def close(self) -> None:
        with self.lock:
            for seg in self.segments:
                seg.close()
