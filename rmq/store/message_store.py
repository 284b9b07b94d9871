"""DefaultMessageStore: the facade over CommitLog, ConsumeQueue, IndexFile, dispatch, flush,
recovery and cleanup (SPEC §2). Plain synchronous Python: the broker layer calls it.
"""
from __future__ import annotations

import enum
import functools
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from rmq.common.jhash import java_string_hash
from rmq.common.latency import LatencyHistogram
from rmq.common.message import (
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    BatchDecodeError,
    Message,
    MessageExt,
    create_message_id,
    decode_batch_body,
    decode_message,
    decode_message_id,
    pack_host,
    properties_to_bytes,
    read_total_and_magic,
)
from rmq.store.unit import EncodedEntries, EncodedUnits, MessageBatch, PreparedMessage

from .. import native
from .checkpoint import (StoreCheckpoint, abort_file_boot_id, abort_file_exists, create_abort_file, current_boot_id,
                         delete_abort_file)
from .cleanup import CleanupService, default_disk_ratio
from .commitlog import AppendResult, CommitLog
from .config import MessageStoreConfig
from .consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT, ConsumeQueue, ConsumeQueueAllocator
from .flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from .index import INDEX_RESERVE_CHUNK, IndexService, new_file_reserve_bytes
from .lock import release_lock_on_error
from .mapped_file import IO_COUNTERS, PREPARE_BYTES, RESERVE_CHUNK, StoreError, is_disk_full, prepare_store_dir
from .compaction import COMPACTION_COUNTERS
from .reput import DispatchRequest, ReputMessageService, request_at, request_from_message

#: Kafka's limit (249), so that every name Kafka accepts is a topic here too. RocketMQ's clients and
#: its updateTopic keep their own 127 (rmq/client/producer.py, rmq/server/processors/admin.py); a
#: commitlog unit stores the topic's length in one unsigned byte, and a topic's directory name must fit
#: 255 bytes with a queue suffix, which is why Kafka chose 249.
TOPIC_MAX_LENGTH = 249
# RocketMQ 4.x's Validators pattern plus '.', so that every name Kafka accepts ([a-zA-Z0-9._-]) is a
# topic here too (orders.v1, dbserver1.inventory.customers).
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9._-]+$")
MAX_PROPERTIES_LENGTH = 32767


# The put path's view of the disk is refreshed at most this often (a statvfs costs a system call).
DISK_CHECK_INTERVAL_NS = 5_000_000
_monotonic_ns = time.monotonic_ns
# Free space kept for the consumequeue pages dispatch reserves ahead (prepare_pages), beyond the
# commitlog's next reservation and the index's: 16 queues' worth.
CQ_HEADROOM_BYTES = 16 * PREPARE_BYTES

class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass
class PutMessageResult:
    status: PutMessageStatus
    results: list[AppendResult] = field(default_factory=list)
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def result(self) -> AppendResult:
        return self.results[0]


@dataclass
class PutBatchResult:
    """What put_encoded returns: `count` units at queue offsets queue_offset.., written to the
    commitlog from wrote_offset up to end_offset (a blank unit may sit between when a file rolled)."""

    status: PutMessageStatus
    queue_offset: int = -1
    count: int = 0
    wrote_offset: int = -1
    end_offset: int = -1
    store_timestamp: int = 0
    remark: str = ""
    cq_units: bytes = b""  # each message's 20-byte consumequeue unit: commitlog offset, size, tag code

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    def commit_log_offsets(self) -> list[int]:
        """Where each message of the batch landed (for offsetMsgIds)."""
        return [CQ_UNIT.unpack_from(self.cq_units, i)[0] for i in range(0, len(self.cq_units), CQ_STORE_UNIT_SIZE)]


class QueueUnitsView(NamedTuple):
    """What get_message walks, without copies, for a reader that decodes units in one go
    (kafka_bridge.mapping.units_to_batch): the consumequeue file's buffer and the byte range of
    the units from `queue_offset` in it, and the commitlog's mapped files."""

    cq_buffer: object
    start: int
    end: int
    queue_offset: int
    commitlog_files: list
    file_size: int
    commitlog_min: int


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetMessageResult:
    """What a pull gets: raw commitlog units (exactly what RocketMQ puts in a PULL_MESSAGE body),
    their queue offsets, and where the next pull should start."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    tags_codes: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    # the reader is far behind (more than accessMessageInMemoryMaxRatio % of RAM of commitlog after
    # what it read): the broker may send it to a slave (PullMessageProcessor's suggestWhichBrokerId)
    suggest_pulling_from_slave: bool = False

    def decoded(self) -> list[MessageExt]:
        return [decode_message(raw) for raw in self.messages]


class MessageFilter:
    """RocketMQ's MessageFilter: a consumequeue pre-filter on the tag code, then a commitlog check."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:  # pragma: no cover - interface
        return True

    def is_matched_by_commit_log(self, raw: bytes) -> bool:  # pragma: no cover - interface
        return True


def validate_topic(topic: str) -> str | None:
    """Validators.checkTopic: None when fine, else the reason. Cached for names of a legal length
    only: the names are what clients send, and a cached key is kept whole."""
    if isinstance(topic, str) and len(topic) > TOPIC_MAX_LENGTH:
        return f"topic is longer than {TOPIC_MAX_LENGTH} characters ({len(topic)})"
    return _validate_topic(topic)


@functools.lru_cache(maxsize=65536)
def _validate_topic(topic: str) -> str | None:
    if not topic:
        return "topic is empty"
    if topic in (".", ".."):
        return f"topic name {topic!r} is not allowed"
    if not TOPIC_PATTERN.match(topic):
        return f"topic {topic!r} has characters other than letters, digits, ., %, |, _ and -"
    return None


def _timed_put(fn):
    """Adds one put call in PUT_LATENCY_SAMPLE to the store's put_latency histogram (the console's
    rocketmq_put_latency_seconds). Sampled: on the 2-core development machine timing every call
    added 3.4 us per call (two clock reads and the bisect), this wrapper adds 1.4 us (a counter and
    the extra frame); broker puts are batch calls (put_encoded, put_entries, put_messages), so that
    is per batch, not per message."""
    @functools.wraps(fn)
    def timed(self, *args, **kwargs):
        self._put_calls += 1
        if self._put_calls & PUT_LATENCY_SAMPLE_MASK:
            return fn(self, *args, **kwargs)
        t0 = _perf_ns()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self.put_latency.observe_ns(_perf_ns() - t0)
    return timed


#: one put call in this many is timed (a power of two)
PUT_LATENCY_SAMPLE = 16
PUT_LATENCY_SAMPLE_MASK = PUT_LATENCY_SAMPLE - 1
_perf_ns = time.perf_counter_ns
_FIRST_ENTRY = b"\x00\x00\x00\x00"  # a put_entries selection: entry 0 (native int32; zero either way)


class DefaultMessageStore:
    """Open with `DefaultMessageStore(config)`, then `load()` (recovery) and `start()` (threads)."""

    def __init__(self, config: MessageStoreConfig | None = None, *, clock=None, disk_ratio=None,
                 file_age_ms=None):
        self.config = config or MessageStoreConfig()
        self.config.validate()
        self._valid_topics: set[str] = set()  # names validate_topic accepted (bounded), for _prepare
        self.log = logging.getLogger("rmq.store")
        self.root = os.path.abspath(os.path.expanduser(self.config.storePathRootDir))
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.store_host = (self.config.brokerIP1, self.config.listenPort)
        self.delay_levels_ms = self.config.delay_levels_ms
        self.commitlog = CommitLog(self.root, self.config.mappedFileSizeCommitLog, self.store_host, self.clock)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.index_service = IndexService(self.root, self.config.maxHashSlotNum, self.config.maxIndexNum, self.clock)
        self.reput = ReputMessageService(self)
        self.cleanup = CleanupService(self, clock=self.clock, disk_ratio=disk_ratio, file_age_ms=file_age_ms)
        from .compaction import CompactionStore
        self.compaction = CompactionStore(self)   # compacted topics (the broker says which: policy_of)
        self.put_lock = threading.Lock()
        self.dispatch_lock = threading.Lock()
        self.cq_lock = threading.Lock()
        self.checkpoint: StoreCheckpoint | None = None
        self._dir_lock = None  # <root>/lock, held from load() to shutdown() (rmq.store.lock)
        self.message_arriving_listener = None  # fn(topic, queue_id, next_offset): long polling
        self.last_dispatched_timestamp = 0
        self.disk_full = False
        self.disk_ratio = 0.0
        # Disk space as the put path sees it (check_disk): a statvfs at most disk_check_interval_ns
        # old (and taken again after each commitlog file roll); the reason writes are refused.
        self.disk_check_interval_ns = DISK_CHECK_INTERVAL_NS
        self._disk_next_check = 0
        self.disk_full_reason = ""
        self._disk_probe = disk_ratio          # an injected usage probe (tests): no free-bytes headroom check
        self._enospc = ""                      # a write just failed for want of space (until the next check)
        self.dispatch_stalled_at = -1          # commitlog offset where dispatch stopped for want of space
        self._dispatch_retry: threading.Thread | None = None
        self.commitlog.on_roll = self._recheck_disk_soon
        self.shutdown_done = False
        self.recovered_abnormally = False
        self.recovery_truncated_end = -1  # where abnormal recovery cut the log (-1: not run)
        self.recovery_mode = ""            # normal | process-crash | os-crash (how load() recovered)
        self.recovery_scan_start = -1      # where abnormal recovery started reading the commitlog
        self._process_crash_only = False
        self._redispatched = 0             # units recovery re-dispatched (logged)
        self._rescanned = -1               # units abnormal recovery walked in C (-1: walked in Python)
        self.stats = {"put_messages": 0, "put_bytes": 0, "get_messages": 0, "put_failures": 0}
        self.put_latency = LatencyHistogram()  # 1 put call in PUT_LATENCY_SAMPLE (rocketmq_put_latency_seconds)
        self._put_calls = -1  # the first put call is timed, then one in PUT_LATENCY_SAMPLE
        self.topic_out: dict[str, list[int]] = {}  # topic -> [messages, bytes] read by consumers
        self._flush_service = None
        self._group_commit: GroupCommitService | None = None
        self._cq_flush = None
        self._allocator: ConsumeQueueAllocator | None = None
        self._started = False
        self._inline = self.config.reputMode == "inline"
        self._sync_flush = self.config.flushDiskType == "SYNC_FLUSH"

    # =============================================================== lifecycle
    @release_lock_on_error
    def load(self) -> "DefaultMessageStore":
        """Open the files and recover: normal when the last shutdown was clean, else abnormal."""
        root = self.root
        self._dir_lock = prepare_store_dir(root)  # first: a store another process holds is left untouched
        t0 = time.monotonic()
        abnormal = abort_file_exists(root)
        self.recovered_abnormally = abnormal
        boot = current_boot_id()
        self._process_crash_only = abnormal and bool(boot) and abort_file_boot_id(root) == boot
        self.recovery_mode = "normal"
        self.checkpoint = StoreCheckpoint(os.path.join(root, "checkpoint"))
        self.commitlog.queue.load()
        self._load_consume_queues()
        self.index_service.load()
        self.compaction.load()
        self._redispatched = 0
        self._rescanned = -1
        if abnormal:
            self._recover_abnormally()
        else:
            self._recover_normally()
        create_abort_file(root)
        self._log_recovery(abnormal, time.monotonic() - t0)
        return self

    def _log_recovery(self, abnormal: bool, seconds: float) -> None:
        """One line on what recovery found and did, and how long it took (a crash gets WARNING)."""
        cl = self.commitlog
        files = cl.queue.files
        cqs = sum(1 for _ in self._all_cqs())
        if not files and not cqs:
            self.log.info("store %s: empty, nothing to recover (%.0f ms)", self.root, seconds * 1000)
            return
        found = (f"{len(files)} commitlog file(s), log [{cl.min_offset}, {cl.max_offset}), {cqs} consume queue(s), "
                 f"{len(self.index_service.files)} index file(s)")
        if abnormal:
            cut = self.recovery_truncated_end
            how = ("the process died, this boot's page cache is intact: commitlog read from the last dispatched "
                   "unit" if self.recovery_mode == "process-crash" else
                   "no proof the machine stayed up: commitlog read from the checkpoint's file")
            walked = (f"{self._rescanned} unit(s) checked in C, " if self._rescanned >= 0 else "")
            self.log.warning("store %s: abort file found (the last shutdown was not clean): abnormal recovery, %s "
                             "(offset %d, %d bytes read), %s; valid log ends at %d, %s%d unit(s) re-dispatched to "
                             "consume queues and index; took %.0f ms", self.root, how, self.recovery_scan_start,
                             max(0, cut - self.recovery_scan_start), found, cut, walked, self._redispatched,
                             seconds * 1000)
        elif self.recovery_truncated_end >= 0:
            self.log.info("store %s: clean shutdown but no trusted end offset in the checkpoint: scanned the last "
                          "files, %s; %d unit(s) re-dispatched; took %.0f ms", self.root, found,
                          self._redispatched, seconds * 1000)
        else:
            self.log.info("store %s: clean shutdown, normal recovery: %s; took %.0f ms", self.root, found,
                          seconds * 1000)

    def start(self) -> "DefaultMessageStore":
        cfg = self.config
        if self._sync_flush:
            self._group_commit = GroupCommitService(self, cfg.syncFlushTimeout)
            self._group_commit.start()
        else:
            self._flush_service = FlushRealTimeService(self, cfg.flushIntervalCommitLog, cfg.flushCommitLogLeastPages,
                                                       cfg.flushCommitLogThoroughInterval, cfg.flushCommitLogTimed)
            self._flush_service.start()
        self._cq_flush = FlushConsumeQueueService(self, cfg.flushIntervalConsumeQueue, cfg.flushConsumeQueueLeastPages,
                                                  cfg.flushConsumeQueueThoroughInterval)
        self._cq_flush.start()
        self._allocator = ConsumeQueueAllocator(self)
        self._allocator.start()
        if not self._inline:
            self.reput.start_thread(cfg.reputIntervalMs)
        self.cleanup.start(cfg.cleanResourceInterval)
        self.compaction.start()
        self._started = True
        return self

    def shutdown(self) -> None:
        """Clean shutdown: stop threads, dispatch the rest, flush, record the end offset, drop abort
        (kept when dispatch could not finish for want of space: the next start re-dispatches)."""
        if self.shutdown_done:
            return
        self.shutdown_done = True
        if self._dir_lock is None:
            return  # never loaded, or its load failed: not ours to flush, nor its abort file to delete
        self.compaction.shutdown()
        self.cleanup.shutdown()
        if self._allocator is not None:
            self._allocator.shutdown()
        for svc in (self._flush_service, self._group_commit, self._cq_flush):
            if svc is not None:
                svc.shutdown()
        self.reput.shutdown()
        dispatched = self._dispatch_rest()
        self.commitlog.flush(0)
        self.flush_logics()
        if self.checkpoint is not None:
            self.checkpoint.confirm_phy_offset = self.commitlog.max_offset
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, self.commitlog.last_store_timestamp)
            self.checkpoint.close()
        self.commitlog.close()
        for qs in self.consume_queue_table.values():
            for cq in qs.values():
                cq.close()
        self.index_service.close()
        if dispatched:
            delete_abort_file(self.root)
        self._dir_lock.release()  # last: everything is flushed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # =============================================================== recovery
    def _load_consume_queues(self) -> None:
        cq_root = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(cq_root):
            return
        for topic in sorted(os.listdir(cq_root)):
            tdir = os.path.join(cq_root, topic)
            if not os.path.isdir(tdir):
                raise StoreError(f"{tdir}: expected a topic directory in consumequeue/")
            for qid in sorted(os.listdir(tdir)):
                if not qid.isdigit():
                    raise StoreError(f"{os.path.join(tdir, qid)}: expected a numeric queueId directory")
                cq = ConsumeQueue(self.root, topic, int(qid), self.config.mappedFileSizeConsumeQueue)
                cq.load()
                cq.recover()
                self.consume_queue_table.setdefault(topic, {})[int(qid)] = cq

    def _all_cqs(self):
        for qs in list(self.consume_queue_table.values()):
            yield from list(qs.values())

    def _recover_normally(self) -> None:
        cl = self.commitlog
        files = cl.queue.files
        cp = self.checkpoint
        if not files:
            self._after_recovery(0)
            return
        hint = cp.confirm_phy_offset
        if 0 < hint <= files[-1].end_offset and hint >= files[0].file_from_offset:
            cl.set_max_offset(hint, zero_tail=False)
            self._after_recovery(hint)
            return
        # No trusted end offset (e.g. a store copied from elsewhere): scan the last three files.
        start = files[max(0, len(files) - 3)].file_from_offset
        for _ in cl.iter_units(start, check_crc=self.config.checkCRCOnRecover, decode=False):
            pass
        self._truncate_and_redispatch(cl.scan_end, start)

    def _recover_abnormally(self) -> None:
        """CommitLog.recoverAbnormally: scan from the newest file whose first message is no newer
        than the checkpoint, re-dispatch every unit from there, truncate the torn tail."""
        cl = self.commitlog
        files = cl.queue.files
        if not files:
            self._after_recovery(0)
            return
        if self._process_crash_only and self._recover_after_process_crash():
            return
        self.recovery_mode = "os-crash"
        min_ts = self.checkpoint.min_timestamp_index if self.config.messageIndexEnable else self.checkpoint.min_timestamp
        start_idx = 0
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            try:
                total, magic = read_total_and_magic(f.mm, 0)
            except ValueError:
                continue
            if magic != MESSAGE_MAGIC_CODE:
                continue
            ts = cl.store_timestamp_at(f.file_from_offset)
            if 0 < ts <= min_ts:
                start_idx = i
                break
        start = files[start_idx].file_from_offset
        self.recovery_scan_start = start
        self._truncate_and_redispatch(None, start)

    def _recover_after_process_crash(self) -> bool:
        """Abnormal recovery when only the process died (the abort marker carries this boot's id):
        the page cache kept every byte written through the mappings, so the consumequeues hold
        every unit dispatched before the kill, and dispatch runs in commitlog order. As RocketMQ
        4.x's DefaultMessageStore.start sets reputFromOffset to the largest max physical offset of
        the consumequeues, the commitlog is read (CRC checked) only from there: the units appended
        but not dispatched yet, and a torn tail, which is cut. The cost is in proportion to what
        was in flight at the kill, not to the store's size. The unit ending at that offset is
        checked first; False (nothing changed) sends the caller to the checkpoint-based scan."""
        cl = self.commitlog
        files = cl.queue.files
        best = None
        for cq in self._all_cqs():
            u = cq.last_unit()
            if u is not None and u[1] > 0 and u[1] != 0x7FFFFFFF and (best is None or u[0] > best[0]):
                best = u
        if best is None:
            if cl.min_offset > 0 or self.index_service.files:
                return False  # nothing tells where dispatch was: the checkpoint-based scan decides
            start = files[0].file_from_offset  # a store whose queues were never written: read it all
        else:
            phy, size, _ = best
            msg = cl.read_message(phy, check_crc=True) if cl.queue.find_by_offset(phy) is not None else None
            if msg is None or msg.commit_log_offset != phy or msg.store_size != size:
                self.log.warning("store %s: the last dispatched unit (offset %d, %d bytes) does not read back; "
                                 "recovering from the checkpoint instead", self.root, phy, size)
                return False
            start = phy + size
        self.recovery_mode = "process-crash"
        self.recovery_scan_start = start
        self._truncate_and_redispatch(None, start)
        return True

    def _truncate_and_redispatch(self, known_end: int | None, start: int) -> None:
        cl = self.commitlog
        check = self.config.checkCRCOnRecover
        # Files fully before `start` are whole; count them as written so reads work meanwhile.
        for f in cl.queue.files:
            f.wrote_position = f.file_size
        batch: list[DispatchRequest] = []
        levels = self.delay_levels_ms
        # With the C extension the log is walked in C and only the units a dispatch would change
        # are decoded: those past their consumequeue's end, and those past what the index holds
        # that carry KEYS or UNIQ_KEY (the rest are skipped by ConsumeQueue.put_units and
        # IndexService.build_index anyway, or have nothing to index). The walk that finds the end
        # of the valid log (CRC checked) lists them too; it is walked again only when cutting the
        # consumequeues and the index at that end changed where they end.
        ends = self._dispatched_ends()
        end = known_end
        scanned = None
        if end is None:
            scanned = cl.scan_native(start, check_crc=check, queue_max=ends[0], index_from=ends[1])
            if scanned is None:
                for _ in cl.iter_units(start, check_crc=check, decode=False):
                    pass
            end = cl.scan_end
        # Consumequeue units that point past the valid log must go before re-dispatching.
        for cq in self._all_cqs():
            cq.truncate_dirty_logic_files(end)
        self.index_service.truncate_after(end)
        self.recovery_truncated_end = end
        cl.set_max_offset(end, zero_tail=True)
        if scanned is None or self._dispatched_ends() != ends:
            ends = self._dispatched_ends()
            scanned = cl.scan_native(start, check_crc=False, end=end, queue_max=ends[0], index_from=ends[1])
        if scanned is not None:
            self._rescanned, last_ts, todo = scanned
            requests = (request_at(mf.mm, pos, levels) for mf, pos in todo)
        else:
            requests = (request_from_message(msg, levels)
                        for _off, _size, msg in cl.iter_units(start, check_crc=False, end=end))
        for req in requests:
            self._redispatched += 1
            batch.append(req)
            if len(batch) >= 4096:
                self._redispatch(batch)
                batch = []
        if batch:
            self._redispatch(batch)
        if scanned is not None and last_ts > self.last_dispatched_timestamp:
            self.last_dispatched_timestamp = last_ts  # every unit up to `end` is in its queue now
        self._after_recovery(end)

    def _dispatched_ends(self) -> tuple[dict, int]:
        """What scan_units needs to tell the units a re-dispatch would change: {topic bytes:
        {queueId: consumequeue max offset}}, and the lowest commitlog offset the index may lack
        (past the log when the index is off)."""
        queue_max: dict = {}
        for cq in self._all_cqs():
            queue_max.setdefault(cq.topic.encode("utf-8"), {})[cq.queue_id] = cq.max_offset
        return queue_max, self.index_service.unindexed_from() if self.config.messageIndexEnable else 1 << 62

    def _redispatch(self, batch: list[DispatchRequest]) -> None:
        # Recovery skips units the consumequeue already has (ConsumeQueue.putMessagePositionInfo).
        listener, self.message_arriving_listener = self.message_arriving_listener, None
        try:
            self.reput.dispatch(batch)
        finally:
            self.message_arriving_listener = listener

    def _after_recovery(self, end: int) -> None:
        """Rebuild topicQueueTable from the consumequeues; reput continues from the log's end."""
        table = self.commitlog.topic_queue_table
        table.clear()
        for cq in self._all_cqs():
            table[(cq.topic, cq.queue_id)] = cq.max_offset
        self.reput.reput_from_offset = end
        last = self.commitlog.queue.last_file()
        if last is not None and self.commitlog.max_offset > 0:
            ts = self.commitlog.store_timestamp_at(self._last_unit_offset())
            self.commitlog.last_store_timestamp = max(ts, 0)
        min_cl = self.commitlog.min_offset
        for cq in self._all_cqs():
            cq.correct_min_offset(min_cl)

    def _last_unit_offset(self) -> int:
        best = 0
        for cq in self._all_cqs():
            u = cq.last_unit()
            if u and u[0] > best:
                best = u[0]
        return best

    # =============================================================== write path
    def set_disk_full(self, full: bool, ratio: float) -> None:
        """CleanupService's periodic verdict (usage `ratio` past diskSpaceWarningLevelRatio or not),
        merged with what the put path checks: free space for the next reservations, a write that
        just failed with ENOSPC, a stalled dispatch."""
        self._apply_disk(ratio, self._disk_free() if self._disk_probe is None else None)

    def _disk_free(self) -> int | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def check_disk(self) -> bool:
        """The put path's disk check (refreshed every disk_check_interval_ns at most): True when
        writes are refused now. See _apply_disk."""
        self._disk_next_check = time.monotonic_ns() + self.disk_check_interval_ns
        if self._disk_probe is not None:
            ratio, free = self._disk_probe(self.root), None
        elif self.cleanup.disk_ratio is not default_disk_ratio:
            ratio, free = self.cleanup.disk_ratio(self.root), None
        else:
            try:
                st = os.statvfs(self.root)
            except OSError:
                ratio, free = -1.0, None
            else:
                total = st.f_blocks * st.f_frsize
                free = st.f_bavail * st.f_frsize
                ratio = (total - free) / total if total > 0 else -1.0
        self._apply_disk(ratio, free)
        return self.disk_full

    def _recheck_disk_soon(self) -> None:
        self._disk_next_check = 0

    def disk_headroom(self) -> int:
        """Free bytes the store keeps before it refuses puts, so that what it has acknowledged can
        always be dispatched: the commitlog's next reservation, a few consumequeues' pages, and the
        index's next entries chunk - or a whole new index file's header and slots when the last
        one is nearly full (or there is none yet)."""
        cfg = self.config
        need = min(RESERVE_CHUNK, cfg.mappedFileSizeCommitLog) + CQ_HEADROOM_BYTES
        if cfg.messageIndexEnable:
            files = self.index_service.files
            last = files[-1] if files else None
            if last is None or last.index_num - last.index_count < max(1024, last.index_num // 8):
                need += new_file_reserve_bytes(cfg.maxHashSlotNum, cfg.maxIndexNum)
            else:
                need += INDEX_RESERVE_CHUNK
        return need

    def _apply_disk(self, ratio: float, free: int | None) -> None:
        """Decide whether puts are refused: usage past diskSpaceWarningLevelRatio (RocketMQ's
        rule), less free space than disk_headroom(), a write that failed with ENOSPC since the
        last check, or dispatch stopped for want of space. One log line per change."""
        cfg = self.config
        reason = ""
        if ratio > cfg.diskSpaceWarningLevelRatio:
            reason = (f"disk full: usage {ratio:.0%} > diskSpaceWarningLevelRatio "
                      f"{cfg.diskSpaceWarningLevelRatio:.0%}; writes refused")
        elif free is not None and free < (need := self.disk_headroom()):
            reason = (f"disk full: {free} bytes free, less than the {need} the store keeps for its next "
                      f"commitlog, consumequeue and index blocks; writes refused")
        elif self.dispatch_stalled_at >= 0:
            reason = (f"disk full: dispatch to consumequeues and index stopped at commitlog offset "
                      f"{self.dispatch_stalled_at} for want of space; writes refused until it catches up")
        elif self._enospc:
            reason = self._enospc
        self._enospc = ""
        full = bool(reason)
        if full != self.disk_full:
            if full:
                self.log.warning("%s (storePathRootDir %s)", reason, self.root)
            else:
                self.log.warning("disk usage %.1f%%: writes allowed again", ratio * 100)
        self.disk_full_reason = reason
        self.disk_full = full
        self.disk_ratio = ratio

    def _disk_full_now(self) -> bool:
        """The put path's check: the cached verdict, refreshed when older than disk_check_interval_ns."""
        if _monotonic_ns() >= self._disk_next_check:
            return self.check_disk()
        return self.disk_full

    def _space_refusal(self, exc: OSError, cls=PutMessageResult):
        """A put whose commitlog write failed with ENOSPC/EDQUOT (the log was left as it was): puts
        are refused until the next disk check says there is room."""
        self._enospc = f"disk full: {exc.strerror or exc} writing the commitlog; writes refused"
        self._disk_next_check = time.monotonic_ns() + self.disk_check_interval_ns
        if not self.disk_full:
            self.log.warning("%s (storePathRootDir %s)", self._enospc, self.root)
        self.disk_full = True
        self.disk_full_reason = self._enospc
        self.stats["put_failures"] += 1
        return cls(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._enospc)

    def _append_failed(self, exc: OSError, cls=PutMessageResult):
        if is_disk_full(exc):
            return self._space_refusal(exc, cls)
        self.log.error("append failed: %s", exc)
        return cls(PutMessageStatus.CREATE_MAPEDFILE_FAILED, remark=str(exc))

    def _dispatch_failed(self, exc: OSError) -> None:
        """Inline dispatch (or the reput thread) could not write a consumequeue or index block for
        want of space. The units are in the commitlog (acknowledged as such); dispatch stops at the
        first one not dispatched (reput_from_offset) and is retried until it goes through, puts
        being refused meanwhile. Any other error goes on up."""
        if not is_disk_full(exc):
            raise exc
        at = self.reput.reput_from_offset
        if self.dispatch_stalled_at < 0:
            self.log.warning("dispatch stopped at commitlog offset %d: %s; the units are stored and will be "
                             "dispatched when space returns, writes refused meanwhile", at, exc.strerror or exc)
        self.dispatch_stalled_at = at
        reason = (f"disk full: dispatch to consumequeues and index stopped at commitlog offset {at} for want "
                  f"of space; writes refused until it catches up")
        self.disk_full, self.disk_full_reason = True, reason
        self._disk_next_check = time.monotonic_ns() + self.disk_check_interval_ns
        if self._inline and (self._dispatch_retry is None or not self._dispatch_retry.is_alive()):
            self._dispatch_retry = threading.Thread(target=self._retry_dispatch, name="DispatchRetry", daemon=True)
            self._dispatch_retry.start()

    def _dispatch_resumed(self) -> None:
        if self.dispatch_stalled_at >= 0:
            self.log.warning("dispatch caught up with the commitlog at offset %d", self.reput.reput_from_offset)
            self.dispatch_stalled_at = -1
            self._disk_next_check = 0

    def _retry_dispatch(self) -> None:
        """Inline mode's retry after _dispatch_failed: every 50 ms, dispatch what the commitlog holds
        past reput_from_offset (ReputMessageService.do_reput, under the put lock so no put
        dispatches out of order meanwhile), until it is all dispatched or the store shuts down."""
        while not self.shutdown_done and self.dispatch_stalled_at >= 0:
            time.sleep(0.05)
            with self.put_lock:
                if self.shutdown_done:
                    return
                try:
                    self.reput.do_reput()  # takes the dispatch lock
                except OSError as exc:
                    if not is_disk_full(exc):
                        self.log.exception("dispatch retry failed")
                    continue
                if self.reput.reput_from_offset >= self.commitlog.max_offset:
                    self._dispatch_resumed()

    def _dispatch_rest(self) -> bool:
        """At shutdown: dispatch what the commitlog holds past reput_from_offset (thread mode, or
        inline after a stall). False when that failed for want of space (the abort file then stays,
        so the next start recovers abnormally and dispatches those units)."""
        if self._dispatch_retry is not None:
            self._dispatch_retry.join(timeout=5)  # it sees shutdown_done within 50 ms
        if self._inline and self.dispatch_stalled_at < 0:
            return True
        self.reput._stop.clear()
        try:
            self.reput.do_reput()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self.log.warning("shutdown: dispatch could not finish (%s): the next start re-dispatches from the "
                             "commitlog", exc.strerror or exc)
            return False
        return True

    def _refusal(self, cls=PutMessageResult):
        """Why no put is taken now (store shut down, disk over diskSpaceWarningLevelRatio), as a
        `cls` (PutMessageResult or PutBatchResult), or None."""
        if self.shutdown_done:
            return cls(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="message store is shut down")
        if self.config.brokerRole == "SLAVE":  # DefaultMessageStore.putMessage: a slave's log is the master's copy
            return cls(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="message store is slave mode, so putMessage is forbidden")
        if self._disk_full_now() or self.dispatch_stalled_at >= 0:
            return cls(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.disk_full_reason or "disk full")
        return None

    def _prepare(self, m: Message) -> PreparedMessage | PutMessageResult:
        """Everything done before the put lock: the delay-level rewrite, checks, the unit's size and
        byte forms, its consumequeue tag code and index keys. A PutMessageResult when refused."""
        props = m.properties
        if props and PROPERTY_DELAY_TIME_LEVEL in props:
            self._to_schedule_topic(m)
        topic = m.topic
        if topic in self._valid_topics:  # the put path's check of a name it has taken before
            reason = None
        else:
            reason = validate_topic(topic)
            if reason is None and len(self._valid_topics) < 65536:
                self._valid_topics.add(topic)
        if reason is None and m.queue_id < 0:
            reason = f"queueId {m.queue_id} is negative"
        if reason is not None:
            self.stats["put_failures"] += 1
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=reason)
        pm = PreparedMessage(m, self.commitlog.store_v6)
        if not props:
            if pm.size <= self.config.maxMessageSize:
                pm.tags_code = 0
                pm.keys = pm.uniq_key = None
                return pm
        elif len(pm.props_bytes) > MAX_PROPERTIES_LENGTH:
            self.stats["put_failures"] += 1
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                    remark=f"properties {len(pm.props_bytes)} bytes > {MAX_PROPERTIES_LENGTH}")
        if pm.size > self.config.maxMessageSize:
            self.stats["put_failures"] += 1
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"message of {pm.size} bytes exceeds maxMessageSize {self.config.maxMessageSize}")
        if m.topic != SCHEDULE_TOPIC:
            tags = props.get(PROPERTY_TAGS)
            pm.tags_code = java_string_hash(tags) if tags else 0
        else:
            pm.tags_code = None  # the delivery time, known once the store time is
        pm.keys = props.get(PROPERTY_KEYS)
        pm.uniq_key = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        return pm

    def _put_done(self, last: Message, results: list[AppendResult], wait_flush: bool) -> PutMessageResult:
        """After the put lock: wake the reput and flush services, count, and under SYNC_FLUSH wait
        for the group commit (unless the caller waits itself, or the message says WAIT=false)."""
        end = results[-1].wrote_offset + results[-1].wrote_bytes
        if not self._inline:
            self.reput.wakeup()
        if self._flush_service is not None:
            self._flush_service.wakeup(end)
        self.stats["put_messages"] += len(results)
        if wait_flush and self._sync_flush and self.needs_flush_wait(last):
            if not self._group_commit.wait_for(end):
                return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, results,
                                        remark=f"not flushed within syncFlushTimeout {self.config.syncFlushTimeout} ms")
        return PutMessageResult(PutMessageStatus.PUT_OK, results)

    @_timed_put
    def put_message(self, msg: Message, *, wait_flush: bool = True) -> PutMessageResult:
        """put_messages for one message, without the list handling."""
        if (self.shutdown_done or (self.check_disk() if _monotonic_ns() >= self._disk_next_check else self.disk_full)
                or self.config.brokerRole == "SLAVE"):
            return self._refusal()
        pm = self._prepare(msg)
        if pm.__class__ is PutMessageResult:
            return pm
        with self.put_lock:
            if self.shutdown_done or self.dispatch_stalled_at >= 0:
                return self._refusal()
            try:
                r = self.commitlog.append_one(pm)
            except OSError as exc:
                return self._append_failed(exc)
            if self._inline:
                try:
                    self.reput.dispatch_one(pm, r)
                except OSError as exc:
                    self._dispatch_failed(exc)
        return self._put_done(msg, [r], wait_flush)

    @_timed_put
    def put_messages(self, msgs: list[Message], *, wait_flush: bool = True) -> PutMessageResult:
        """Append messages (a batch stays contiguous in the log) and dispatch them.

        Under SYNC_FLUSH the call returns once the bytes are on disk (unless the message carries
        WAIT=false), reporting FLUSH_DISK_TIMEOUT after syncFlushTimeout. With wait_flush=False
        it returns after the append; the caller then calls wait_flushed() (an event loop does that
        in an executor so it never blocks on fsync)."""
        refused = self._refusal()
        if refused is not None:
            return refused
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="no message")
        prepared = []
        for m in msgs:
            pm = self._prepare(m)
            if pm.__class__ is PutMessageResult:
                return pm
            prepared.append(pm)
        with self.put_lock:
            if self.shutdown_done or self.dispatch_stalled_at >= 0:
                return self._refusal()
            try:
                results = self.commitlog.append(prepared)
            except OSError as exc:
                return self._append_failed(exc)
            if self._inline:
                try:
                    self.reput.dispatch_appended(prepared, results)
                except OSError as exc:
                    self._dispatch_failed(exc)
        return self._put_done(msgs[-1], results, wait_flush)

    @_timed_put
    def put_encoded(self, batch: EncodedUnits, *, wait_flush: bool = True) -> PutBatchResult:
        """put_messages for units encoded in one go (EncodedUnits: a Kafka batch mapped in C by
        kafka_bridge.mapping.batch_to_units). The same checks, put lock, commitlog bytes and
        rollover, dispatch (inline: consumequeue units, index keys, arrival notification; thread
        mode: wake the ReputMessageService) and SYNC_FLUSH wait as put_messages."""
        refused = self._refusal(PutBatchResult)
        if refused is not None:
            return refused
        if batch.count <= 0:
            return PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="no message")
        reason = validate_topic(batch.topic)
        if not reason and batch.queue_id < 0:
            reason = f"queueId {batch.queue_id} is negative"
        if not reason and batch.topic == SCHEDULE_TOPIC:
            reason = f"{SCHEDULE_TOPIC} units carry a delivery time as tag code: use put_messages"
        if not reason and batch.store_v6 != self.commitlog.store_v6:
            reason = "units were encoded for another store host address family"
        if not reason and batch.max_size > self.config.maxMessageSize:
            reason = f"message of {batch.max_size} bytes exceeds maxMessageSize {self.config.maxMessageSize}"
        if reason:
            self.stats["put_failures"] += 1
            return PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=reason)
        return self._put_encoded(lambda _mf: batch, wait_flush)

    def _encoded_refusal(self, batch: EncodedUnits, topic_ok: dict) -> str | None:
        """put_encoded's checks of one batch (validate_topic remembered per topic in `topic_ok`)."""
        topic = batch.topic
        reason = topic_ok.get(topic, 0)
        if reason == 0:
            reason = topic_ok[topic] = validate_topic(topic)
        if not reason and batch.queue_id < 0:
            reason = f"queueId {batch.queue_id} is negative"
        if not reason and topic == SCHEDULE_TOPIC:
            reason = f"{SCHEDULE_TOPIC} units carry a delivery time as tag code: use put_messages"
        if not reason and batch.store_v6 != self.commitlog.store_v6:
            reason = "units were encoded for another store host address family"
        if not reason and batch.max_size > self.config.maxMessageSize:
            reason = f"message of {batch.max_size} bytes exceeds maxMessageSize {self.config.maxMessageSize}"
        return reason or None

    @_timed_put
    def put_encoded_many(self, batches: list[EncodedUnits], *, wait_flush: bool = True) -> list[PutBatchResult]:
        """put_encoded for each of `batches` (any topics and queues), in order, under one put lock
        and, when they all fit in the current commitlog file, with one write (CommitLog.
        append_encoded_many): a Kafka Produce request of many partitions of a few records each.
        One result per batch, as put_encoded would give it; a batch refused by the checks does not
        stop the others. Under SYNC_FLUSH (wait_flush) one wait covers them all."""
        refused = self._refusal(PutBatchResult)
        if refused is not None:
            return [PutBatchResult(refused.status, remark=refused.remark) for _ in batches]
        results: list = [None] * len(batches)
        todo, idx = [], []
        topic_ok: dict = {}
        for i, b in enumerate(batches):
            reason = "no message" if b.count <= 0 else self._encoded_refusal(b, topic_ok)
            if reason:
                self.stats["put_failures"] += 1
                results[i] = PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=reason)
            else:
                todo.append(b)
                idx.append(i)
        if not todo:
            return results
        cqs = [bytearray(CQ_STORE_UNIT_SIZE * b.count) for b in todo]
        appended = []  # (index in todo, first queue offset, store timestamp)
        failure = None
        with self.put_lock:
            if self.shutdown_done or self.dispatch_stalled_at >= 0:
                failure = self._refusal(PutBatchResult)
            else:
                commitlog = self.commitlog
                try:
                    many = commitlog.append_encoded_many(todo, cqs)
                    if many is not None:
                        appended = [(k, q, ts) for k, (q, ts) in enumerate(many)]
                    else:  # they do not all fit in this file: one at a time, rolling over
                        for k, b in enumerate(todo):
                            qoff, ts = commitlog.append_encoded(b, cqs[k])
                            appended.append((k, qoff, ts))
                except OSError as exc:
                    failure = self._append_failed(exc, PutBatchResult)
                for k, _, _ in appended:
                    cqs[k] = bytes(cqs[k])
                if self._inline and appended:
                    try:
                        self.reput.dispatch_units_many(todo, appended, cqs)
                    except OSError as exc:
                        self._dispatch_failed(exc)
        if appended:
            if not self._inline:
                self.reput.wakeup()
            if self._flush_service is not None:
                self._flush_service.wakeup(self.commitlog.max_offset)
        unpack = CQ_UNIT.unpack_from
        last_end = -1
        for k, qoff, ts in appended:
            b, cq = todo[k], cqs[k]
            self.stats["put_messages"] += b.count
            first = unpack(cq, 0)[0]
            last_phy, last_size, _ = unpack(cq, len(cq) - CQ_STORE_UNIT_SIZE)
            last_end = last_phy + last_size
            results[idx[k]] = PutBatchResult(PutMessageStatus.PUT_OK, qoff, b.count, first, last_end, ts, cq_units=cq)
        if failure is not None:
            done = {k for k, _, _ in appended}
            for k in range(len(todo)):
                if k not in done:
                    results[idx[k]] = PutBatchResult(failure.status, remark=failure.remark)
        if appended and wait_flush and self.needs_flush_wait():
            if not self._group_commit.wait_for(last_end):
                remark = f"not flushed within syncFlushTimeout {self.config.syncFlushTimeout} ms"
                for k, _, _ in appended:
                    res = results[idx[k]]
                    res.status, res.remark = PutMessageStatus.FLUSH_DISK_TIMEOUT, remark
        return results

    @_timed_put
    def put_entries(self, entries: EncodedEntries, selection: bytes, biggest: int) -> PutBatchResult | None:
        """put_encoded_many for the entries of `entries` named by `selection` (native int32 entry
        numbers, in put order), in C: one put lock, the commitlog writes of
        CommitLog.append_entries, the consumequeue units, arrival notices and index keys of
        ReputMessageService.dispatch_entries. Each entry's first queue offset and queue log start
        offset are left in its table row. The entries must be of existing topics and queues
        (the caller checked them, as the broker does before put_encoded_many) and encoded for
        this store's host address family, with units no larger than maxMessageSize. One result for
        them all: PUT_OK with the commitlog end offset they reach (end_offset), or why nothing was
        put. None when they do not all fit in the current commitlog file: nothing was put, and the
        caller puts them one entry at a time (put_encoded_many rolls the file over). No flush
        wait: the caller waits for end_offset (needs_flush_wait, wait_flushed)."""
        refused = self._refusal(PutBatchResult)
        if refused is not None:
            return refused
        if entries.store_v6 != self.commitlog.store_v6:
            return PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                  remark="units were encoded for another store host address family")
        done = self._append_entries(entries, selection, biggest)
        if done is None or done.__class__ is PutBatchResult:
            return done
        end, count, store_ts = done
        if self._flush_service is not None:
            self._flush_service.wakeup(end)
        self.stats["put_messages"] += count
        return PutBatchResult(PutMessageStatus.PUT_OK, -1, count, -1, end, store_ts)

    def _append_entries(self, entries: EncodedEntries, selection: bytes, biggest: int):
        """The put lock's part of put_entries and put_entry: the C append (CommitLog.append_entries)
        and, in inline mode, its C dispatch (ReputMessageService.dispatch_entries; else the reput
        thread is woken). (end offset, unit count, store timestamp); a PutBatchResult saying why
        nothing was put; or None when the units do not fit in the current commitlog file."""
        cq_units = bytearray(CQ_STORE_UNIT_SIZE * entries.unit_count)
        with self.put_lock:
            if self.shutdown_done or self.dispatch_stalled_at >= 0:
                return self._refusal(PutBatchResult)
            try:
                done = self.commitlog.append_entries(entries, selection, biggest, cq_units)
            except OSError as exc:
                return self._append_failed(exc, PutBatchResult)
            if done is None:
                return None
            if self._inline:
                end, count, store_ts = done
                try:
                    self.reput.dispatch_entries(entries, selection, cq_units, end, count, store_ts)
                except OSError as exc:
                    self._dispatch_failed(exc)
        if not self._inline:
            self.reput.wakeup()
        return done

    def put_entry(self, entries: EncodedEntries) -> int | PutBatchResult | None:
        """put_entries for a one-entry table (the sync send of rmq/server/processors/send_frame.py),
        with the Python around the shared append (_append_entries) cut down: the refusals checked
        inline (put_entries says why), then the same put lock, C append and C dispatch, the same
        flush wake-up, counters and sampled put latency. Returns the commitlog end offset
        the entry's units reach (PUT_OK; its first queue offset is left in its table row), a
        PutBatchResult saying why nothing was put, or None when the units do not fit in the
        current commitlog file (nothing was put). No flush wait: the caller checked
        needs_flush_wait() first."""
        self._put_calls += 1
        t0 = 0 if self._put_calls & PUT_LATENCY_SAMPLE_MASK else _perf_ns()
        if (self.shutdown_done or self.dispatch_stalled_at >= 0 or self.config.brokerRole == "SLAVE"
                or (self.check_disk() if _monotonic_ns() >= self._disk_next_check else self.disk_full)
                or entries.store_v6 != self.commitlog.store_v6):
            return self.put_entries(entries, _FIRST_ENTRY, len(entries.units))  # says why
        done = self._append_entries(entries, _FIRST_ENTRY, len(entries.units))
        if done is None or done.__class__ is PutBatchResult:
            return done
        end, count, _ = done
        flush = self._flush_service
        if flush is not None and not flush.timed and end >= flush.wake_at:
            flush.wakeup(end)
        self.stats["put_messages"] += count
        if t0:
            self.put_latency.observe_ns(_perf_ns() - t0)
        return end

    def _put_encoded(self, make, wait_flush: bool) -> PutBatchResult | None:
        """put_encoded after its checks. `make(last_file)` gives the EncodedUnits under the put lock
        (put_batch encodes them into the commitlog's staging buffer there), or None: then nothing
        is put and None is returned."""
        with self.put_lock:
            if self.shutdown_done or self.dispatch_stalled_at >= 0:
                return self._refusal(PutBatchResult)
            try:
                batch = make(self.commitlog.queue.get_last_file())
                if batch is None:
                    return None
                cq_units = bytearray(CQ_STORE_UNIT_SIZE * batch.count)
                qoff, store_ts = self.commitlog.append_encoded(batch, cq_units)
            except OSError as exc:
                return self._append_failed(exc, PutBatchResult)
            cq_units = bytes(cq_units)
            if self._inline:
                try:
                    self.reput.dispatch_units(batch, qoff, cq_units, store_ts)
                except OSError as exc:
                    self._dispatch_failed(exc)
        if not self._inline:
            self.reput.wakeup()
        if self._flush_service is not None:
            self._flush_service.wakeup(self.commitlog.max_offset)
        self.stats["put_messages"] += batch.count
        first = CQ_UNIT.unpack_from(cq_units, 0)[0]
        last_phy, last_size, _ = CQ_UNIT.unpack_from(cq_units, len(cq_units) - CQ_STORE_UNIT_SIZE)
        res = PutBatchResult(PutMessageStatus.PUT_OK, qoff, batch.count, first, last_phy + last_size, store_ts,
                             cq_units=cq_units)
        if wait_flush and self.needs_flush_wait():
            if not self._group_commit.wait_for(res.end_offset):
                res.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                res.remark = f"not flushed within syncFlushTimeout {self.config.syncFlushTimeout} ms"
        return res

    def put_batch(self, batch: MessageBatch, *, wait_flush: bool = True) -> PutBatchResult:
        """CommitLog.putMessages(MessageExtBatch): the elements of a SEND_BATCH_MESSAGE body stored
        contiguously in one queue. rmq._native.batch_body_to_units encodes them in one go, under
        the put lock straight into the commitlog's staging buffer (or apart, when the file must
        roll over first), and put_encoded's path appends them. A body the C code leaves to Python
        (malformed, unusual properties, a delay or transaction flag) is decoded into Messages for
        put_messages, which writes the same bytes. Transactions and delay levels are refused, as
        RocketMQ refuses them in a batch."""
        illegal = functools.partial(PutBatchResult, PutMessageStatus.MESSAGE_ILLEGAL)
        if batch.sys_flag & TRANSACTION_ROLLBACK_TYPE != TRANSACTION_NOT_TYPE:
            return illegal(remark="transaction messages cannot be batched")
        reason = validate_topic(batch.topic)
        if reason is None and batch.queue_id < 0:
            reason = f"queueId {batch.queue_id} is negative"
        if reason is None and batch.topic == SCHEDULE_TOPIC:
            reason = f"{SCHEDULE_TOPIC} does not take batches"
        if reason is not None:
            return illegal(remark=reason)
        refused = self._refusal(PutBatchResult)
        if refused is not None:
            return refused
        ext = native.ext
        batch_props = properties_to_bytes(batch.properties)
        v6 = self.commitlog.store_v6
        if ext is not None and len(batch_props) <= MAX_PROPERTIES_LENGTH:
            born_addr, born_port, _ = pack_host(batch.born_host)
            args = (batch.body, batch.topic.encode("utf-8"), batch.queue_id, batch.sys_flag, batch.born_timestamp,
                    born_addr, born_port, v6, batch.reconsume_times, batch_props, self.config.maxMessageSize)

            def encode_staged(mf):
                """The units straight into the commitlog's staging buffer, when they fit in the
                current file; append_encoded writes them from there."""
                room = mf.file_size - END_FILE_MIN_BLANK_LENGTH - mf.wrote_position
                staging = self.commitlog.staging
                out = ext.batch_body_to_units(*args, staging, 0, min(len(staging), room))
                if out.__class__ is int:
                    if out > room:
                        return None  # the file rolls over first
                    staging = self.commitlog.staging_buffer(out)
                    out = ext.batch_body_to_units(*args, staging, 0, out)
                if out is None:
                    declined.append(True)  # the Python path does it
                    return None
                _, tags_codes, index_hashes, index_units, max_size, count, total = out
                views.append(memoryview(staging)[:total])
                return EncodedUnits(batch.topic, batch.queue_id, views[0], count, max_size, v6, tags_codes,
                                    index_hashes, index_units)
            views, declined = [], []
            try:
                res = self._put_encoded(encode_staged, wait_flush)
            finally:
                for v in views:
                    v.release()
            if res is not None:
                return res
            out = None if declined else ext.batch_body_to_units(*args)  # not in this file: encode apart, roll
            if out is not None:
                units, tags_codes, index_hashes, index_units, max_size, count, _ = out
                return self.put_encoded(EncodedUnits(batch.topic, batch.queue_id, units, count, max_size, v6, tags_codes,
                                                     index_hashes, index_units), wait_flush=wait_flush)
        try:
            items = decode_batch_body(batch.body)
        except BatchDecodeError as exc:
            return illegal(remark=str(exc))
        if not items:
            return illegal(remark="batch body holds no message")
        msgs = []
        for flag, body, props in items:
            for k, v in batch.properties.items():
                props.setdefault(k, v)
            if props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
                return illegal(remark="TimeDelayLevel is not supported for batched messages")
            if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
                return illegal(remark="transaction messages cannot be batched")
            msgs.append(Message(batch.topic, body, batch.queue_id, flag, props, batch.sys_flag, batch.born_timestamp,
                                batch.born_host, batch.reconsume_times))
        res = self.put_messages(msgs, wait_flush=wait_flush)
        if not res.results:
            return PutBatchResult(res.status, remark=res.remark)
        first, last = res.results[0], res.results[-1]
        cq_units = b"".join(CQ_UNIT.pack(r.wrote_offset, r.wrote_bytes, java_string_hash(m.properties.get(PROPERTY_TAGS) or ""))
                            for m, r in zip(msgs, res.results))
        return PutBatchResult(res.status, first.queue_offset, len(msgs), first.wrote_offset,
                              last.wrote_offset + last.wrote_bytes, first.store_timestamp, res.remark, cq_units)

    def needs_flush_wait(self, msg: Message | None = None) -> bool:
        """True when a put must wait for group commit (SYNC_FLUSH, and WAIT is not false)."""
        if not (self._sync_flush and self._group_commit is not None):
            return False
        return msg is None or msg.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"

    def wait_flushed(self, end_offset: int) -> bool:
        """Block until the commitlog is flushed to `end_offset` (SYNC_FLUSH); False on timeout."""
        if self._group_commit is None:
            return True
        return self._group_commit.wait_for(end_offset)

    def _to_schedule_topic(self, m: Message) -> None:
        """CommitLog.putMessage in RocketMQ 4.x: a message with a delay level (and not a prepared or
        rollback transaction unit) is stored under SCHEDULE_TOPIC_XXXX, queueId = level - 1, with
        its real topic and queue kept in REAL_TOPIC / REAL_QID."""
        tran = m.sys_flag & TRANSACTION_ROLLBACK_TYPE
        if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) or m.topic == SCHEDULE_TOPIC:
            return
        raw = m.properties.get(PROPERTY_DELAY_TIME_LEVEL, "")
        try:
            level = int(raw)
        except ValueError:
            return
        if level <= 0:
            return
        level = min(level, len(self.delay_levels_ms))
        m.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        m.properties[PROPERTY_REAL_TOPIC] = m.topic
        m.properties[PROPERTY_REAL_QUEUE_ID] = str(m.queue_id)
        m.topic = SCHEDULE_TOPIC
        m.queue_id = level - 1

    def msg_id(self, result: AppendResult) -> str:
        """The offsetMsgId of an appended unit."""
        return create_message_id(self.store_host, result.wrote_offset)

    def flush_commitlog(self, least_pages: int = 0) -> int:
        """Flush the commitlog; records the flushed store time in the checkpoint."""
        done = self.commitlog.flush(least_pages)
        if self.checkpoint is not None and self.commitlog.last_store_timestamp:
            self.checkpoint.physic_msg_timestamp = self.commitlog.last_store_timestamp
        return done

    def flush_logics(self, least_pages: int = 0) -> None:
        """Flush consumequeues with at least `least_pages` dirty pages (0: all, then the index and
        the checkpoint, whose logics timestamp may only move when every queue is on disk)."""
        ts = self.last_dispatched_timestamp
        # ConsumeQueue.flush inlined: this runs every flushIntervalConsumeQueue over every queue of
        # every topic, idle ones included, holding the GIL (1,000 idle queues: 3.2 ms a round
        # through cq.flush -> mfq.flush, about a quarter of that here)
        for qs in list(self.consume_queue_table.values()):
            for cq in list(qs.values()):
                mfq = cq.mfq
                files = mfq.files
                if files and files[-1].flushed_position >= files[-1].wrote_position and len(files) == 1:
                    continue  # the common idle queue: one file, nothing unflushed
                mfq.flush(least_pages)
        if least_pages:
            return
        self.index_service.flush()
        if self.checkpoint is not None and ts:
            self.checkpoint.logics_msg_timestamp = ts
            self.checkpoint.index_msg_timestamp = ts
            self.checkpoint.flush()

    def wait_dispatched(self, timeout: float = 5.0) -> bool:
        """Block until dispatch has caught up with the commitlog (thread mode); for tests and tools."""
        deadline = time.monotonic() + timeout
        while self.reput.reput_from_offset < self.commitlog.max_offset:
            if self._inline:
                return True
            if time.monotonic() > deadline:
                return False
            self.reput.wakeup()
            time.sleep(0.001)
        return True

    # =============================================================== consumequeues
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        qs = self.consume_queue_table.get(topic)
        cq = qs.get(queue_id) if qs else None
        if cq is not None:
            return cq
        with self.cq_lock:
            qs = self.consume_queue_table.setdefault(topic, {})
            cq = qs.get(queue_id)
            if cq is None:
                cq = ConsumeQueue(self.root, topic, queue_id, self.config.mappedFileSizeConsumeQueue)
                qs[queue_id] = cq
            return cq

    def prepare_consume_queues(self, topic: str, queue_ids) -> None:
        """Ask the allocator thread to create these queues' first files now (a topic was created),
        so that the first put to each does not. Without a started store it does nothing."""
        if self._allocator is not None and not self.shutdown_done:
            self._allocator.submit(topic, queue_ids)

    def queues_prepared_event(self) -> threading.Event:
        """Set when the allocator has made every queue asked for so far (at once if none runs)."""
        if self._allocator is None or self.shutdown_done:
            ev = threading.Event()
            ev.set()
            return ev
        return self._allocator.barrier()

    def prepare_consume_queue(self, topic: str, queue_id: int) -> bool:
        """Create a queue's first file if the queue has never been written (the allocator's step)."""
        if self.commitlog.topic_queue_table.get((topic, queue_id), 0) or self.shutdown_done:
            return False
        cq = self.find_consume_queue(topic, queue_id)
        return cq.prepare_first_file()

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        qs = self.consume_queue_table.get(topic)
        return qs.get(queue_id) if qs else None

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        u = cq.get_unit(cq_offset) if cq else None
        return u[0] if u else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, *,
                                    nearest: bool = False) -> int:
        """Binary search the consumequeue by store time. Default: the first offset whose message was
        stored at or after `timestamp` (max offset if none, as Kafka's ListOffsets wants).
        nearest=True: RocketMQ's getOffsetInQueueByTime choice of the closer neighbour."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset  # first index with ts >= timestamp in [lo, hi]
        lo0 = lo
        while lo < hi:
            mid = (lo + hi) // 2
            u = cq.get_unit(mid)
            ts = self.commitlog.store_timestamp_at(u[0]) if u else -1
            if ts < 0:  # unreadable (removed): treat as older
                lo = mid + 1
            elif ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        if not nearest:
            return lo
        if lo >= cq.max_offset:
            return max(lo0, cq.max_offset - 1) if cq.max_offset > lo0 else lo0
        if lo == lo0:
            return lo
        right = self.commitlog.store_timestamp_at(cq.get_unit(lo)[0])
        left = self.commitlog.store_timestamp_at(cq.get_unit(lo - 1)[0])
        return lo if abs(timestamp - left) > abs(timestamp - right) else lo - 1

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        u = cq.get_unit(cq.min_offset)
        return self.commitlog.store_timestamp_at(u[0]) if u else -1

    def topics(self) -> list[str]:
        return sorted(self.consume_queue_table)

    def delete_topic(self, topic: str) -> None:
        with self.cq_lock:
            qs = self.consume_queue_table.pop(topic, {})
        self.compaction.delete_topic(topic)  # after: a pass no longer finds the topic's queues
        for cq in qs.values():
            cq.destroy()
        with self.put_lock:
            for key in [k for k in self.commitlog.topic_queue_table if k[0] == topic]:
                del self.commitlog.topic_queue_table[key]
        try:
            os.rmdir(os.path.join(self.root, "consumequeue", topic))
        except OSError:
            pass

    # =============================================================== read path
    def _pull_bounds(self, topic: str, queue_id: int, offset: int):
        """What get_message and get_message_body check first: (consumequeue, its min and max
        offset, the result to return at once when `offset` reads nothing there, else None)."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return None, 0, 0, GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        early = None
        if max_off == 0:
            early = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        elif offset < min_off:
            early = GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        elif offset == max_off:
            early = GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        elif offset > max_off:
            early = GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0 if min_off == 0 else max_off,
                                     min_off, max_off)
        return cq, min_off, max_off, early

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int,
                    message_filter: MessageFilter | None = None, *, max_bytes: int = 256 * 1024,
                    max_scan_units: int | None = None) -> GetMessageResult:
        """DefaultMessageStore.getMessage: consumer offset -> consumequeue units -> tag pre-filter
        -> commitlog units. `max_bytes` bounds the bytes returned (at least one message is). Below a
        compacted queue's cleaned point, the compacted log answers (CompactionStore.getMessage)."""
        if self.compaction.queues and self.compaction.covers(topic, queue_id, offset):
            got = self._get_compacted(topic, queue_id, offset, max_count, message_filter, max_bytes)
            if got is not None:
                return got
            offset = max(offset, self.compaction.cleaned_to(topic, queue_id))
        cq, min_off, max_off, early = self._pull_bounds(topic, queue_id, offset)
        if early is not None:
            return early
        scan = max_scan_units or max(800, max_count * 20)
        units = cq.get_units(offset, scan)
        res = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        if not units:
            res.status = GetMessageStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = min(offset + 1, max_off) if offset < min_off else offset
            return res
        cl = self.commitlog
        cl_min = cl.min_offset
        msgs, qoffs, codes = res.messages, res.queue_offsets, res.tags_codes
        total = 0
        consumed = 0
        removed = 0
        for i, (phy, size, code) in enumerate(CQ_UNIT.iter_unpack(units)):
            consumed = i + 1
            if size <= 0 or size == 0x7FFFFFFF:
                continue
            if phy < cl_min:
                removed += 1
                continue
            if message_filter is not None and not message_filter.is_matched_by_consume_queue(code):
                continue
            if msgs and (total + size > max_bytes):
                consumed = i
                break
            raw = cl.read(phy, size)
            if raw is None:
                removed += 1
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(raw):
                continue
            msgs.append(raw)
            qoffs.append(offset + i)
            codes.append(code)
            total += size
            if len(msgs) >= max_count:
                break
        res.next_begin_offset = offset + consumed
        res.buffer_total_size = total
        if consumed:  # DefaultMessageStore.getMessage: diff = maxOffsetPy - maxPhyOffsetPulling
            last_phy = CQ_UNIT.unpack_from(units, (consumed - 1) * CQ_STORE_UNIT_SIZE)[0]
            res.suggest_pulling_from_slave = cl.max_offset - last_phy > self._memory_for_reads()
        if msgs:
            res.status = GetMessageStatus.FOUND
        elif removed:
            res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
        self.stats["get_messages"] += len(msgs)
        if msgs:
            self.count_out(topic, len(msgs), total)
        return res

    def _get_compacted(self, topic, queue_id, offset, max_count, message_filter, max_bytes):
        raws, offs, nxt = self.compaction.read(topic, queue_id, offset, max_count, max_bytes)
        if message_filter is not None:
            kept = [(r, o) for r, o in zip(raws, offs) if message_filter.is_matched_by_commit_log(r)]
            raws, offs = [r for r, _ in kept], [o for _, o in kept]
        if not raws:
            return None
        cq = self.get_consume_queue(topic, queue_id)
        start = self.compaction.log_start(topic, queue_id)
        min_off = min(start, cq.min_offset) if cq is not None else start
        res = GetMessageResult(GetMessageStatus.FOUND, nxt, min_off, cq.max_offset if cq is not None else nxt,
                               raws, offs, [0] * len(raws), sum(len(r) for r in raws))
        self.stats["get_messages"] += len(raws)
        return res

    def get_message_body(self, group: str, topic: str, queue_id: int, offset: int, max_count: int,
                         tag_codes: tuple[int, ...] | None = None, *, max_bytes: int = 256 * 1024,
                         max_scan_units: int | None = None) -> GetMessageResult | None:
        """get_message for PULL_MESSAGE in C (rmq._native.pull_units): the same statuses, offsets
        and selection, with a TAG pre-filter given as its int32 codes (None: every message), and
        the selected units already joined: `messages` holds one bytes, the response body, and
        `buffer_total_size` its length (`queue_offsets` and `tags_codes` stay empty). None when the
        C extension is not loaded (the caller then runs get_message)."""
        ext = native.ext
        if ext is None or self.compaction.queues and self.compaction.covers(topic, queue_id, offset):
            return None
        cq, min_off, max_off, early = self._pull_bounds(topic, queue_id, offset)
        if early is not None:
            return early
        res = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        where = cq.units_range(offset, max_scan_units or max(800, max_count * 20))
        got = None
        cl = self.commitlog
        if where is not None:
            mf, start, end = where
            got = ext.pull_units(mf.mm, start, end, cl.queue.files, cl.file_size, cl.min_offset, max_bytes,
                                 max_count, tag_codes)
        if got is None:  # get_units found nothing (or the consumequeue file is closed)
            res.status = GetMessageStatus.OFFSET_FOUND_NULL
            return res
        body, n, consumed, removed, last_phy = got
        res.next_begin_offset = offset + consumed
        res.buffer_total_size = len(body)
        if consumed:
            res.suggest_pulling_from_slave = cl.max_offset - last_phy > self._memory_for_reads()
        if n:
            res.messages.append(body)
            res.status = GetMessageStatus.FOUND
        elif removed:
            res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
        self.stats["get_messages"] += n
        if n:
            self.count_out(topic, n, len(body))
        return res

    def count_out(self, topic: str, n: int, nbytes: int) -> None:
        """Counts messages (and their stored bytes) handed to consumers of `topic`: the console's
        rocketmq_messages_out_total and rocketmq_throughput_out_total. Listeners that read units
        themselves (the Kafka fetch path) call it too."""
        c = self.topic_out.get(topic)
        if c is None:
            if len(self.topic_out) >= 100_000:  # bounded: topics are bounded by the topic table anyway
                return
            c = self.topic_out[topic] = [0, 0]
        c[0] += n
        c[1] += nbytes

    def _memory_for_reads(self) -> float:
        """TOTAL_PHYSICAL_MEMORY_SIZE * accessMessageInMemoryMaxRatio / 100: how far behind the log's
        end a reader may be before its reads are taken to miss the page cache."""
        mem = getattr(self, "_physical_memory", None)
        if mem is None:
            try:
                mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
                mem = 8 * 1024 ** 3
            self._physical_memory = mem
        return mem * self.config.accessMessageInMemoryMaxRatio / 100.0

    def units_view(self, topic: str, queue_id: int, offset: int, max_count: int, *,
                   max_scan_units: int | None = None) -> QueueUnitsView | None:
        """The consumequeue units get_message(topic, queue_id, offset, max_count) walks, as a view
        (no copy), with the commitlog files they point into; None where get_message finds nothing
        to read. The reader applies get_message's selection itself (rmq._native.kafka_fetch_batch)
        and adds what it returns to stats["get_messages"]."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return None
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0 or offset < min_off or offset >= max_off:
            return None
        where = cq.units_range(offset, max_scan_units or max(800, max_count * 20))
        if where is None:
            return None
        mf, start, end = where
        cl = self.commitlog
        return QueueUnitsView(mf.mm, start, end, offset, cl.queue.files, cl.file_size, cl.min_offset)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return self.commitlog.read_message(commit_log_offset)

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        """VIEW_MESSAGE_BY_ID: decode the offsetMsgId into (store host, offset) and read there."""
        host, offset = decode_message_id(msg_id)
        if host[1] != self.store_host[1] and host != self.store_host:
            self.log.debug("message id %s names store host %s, this store is %s", msg_id, host, self.store_host)
        return self.commitlog.read_message(offset)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """QUERY_MESSAGE by key (or uniq key) over a store-time range, newest first."""
        if end is None:
            end = 2**63 - 1
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        out = []
        for phy in self.index_service.query_offset(topic, key, max_num, begin, end):
            m = self.commitlog.read_message(phy)
            if m is None or m.topic != topic:
                continue
            keys = (m.properties.get(PROPERTY_KEYS) or "").split(" ")
            if key in keys or m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key:
                out.append(m)
        return out

    # =============================================================== cleanup
    def delete_logics_below_commitlog_min(self) -> tuple[int, int]:
        min_cl = self.commitlog.min_offset
        cq_n = 0
        for cq in self._all_cqs():
            cq_n += cq.delete_expired(min_cl)
        idx_n = self.index_service.delete_expired(min_cl)
        return cq_n, idx_n

    # =============================================================== stats
    def runtime_info(self) -> dict:
        cl = self.commitlog
        return {
            "commitLogMinOffset": cl.min_offset,
            "commitLogMaxOffset": cl.max_offset,
            "commitLogFlushedOffset": cl.queue.flushed_offset,
            "dispatchBehindBytes": cl.max_offset - self.reput.reput_from_offset,
            "reputFromOffset": self.reput.reput_from_offset,
            "putMessageTimesTotal": self.stats["put_messages"],
            "getMessageTimesTotal": self.stats["get_messages"],
            "putMessageFailedTimes": self.stats["put_failures"],
            "commitLogFiles": len(cl.queue.files),
            "consumeQueueCount": sum(len(q) for q in self.consume_queue_table.values()),
            "indexFiles": len(self.index_service.files),
            "diskRatio": round(self.disk_ratio, 4),
            "diskFull": self.disk_full,
            "diskFullReason": self.disk_full_reason,
            "dispatchStalledAt": self.dispatch_stalled_at,
            "flushDiskType": self.config.flushDiskType,
            "groupCommitFlushes": self._group_commit.flush_count if self._group_commit else 0,
            "recoveredAbnormally": self.recovered_abnormally,
            "consumeQueueFiles": sum(len(cq.mfq.files) for cq in self._all_cqs()),
            "mappedFilesCreated": IO_COUNTERS["files_created"],
            "fdatasyncCalls": IO_COUNTERS["fdatasync_calls"],
            "fsyncCalls": IO_COUNTERS["fsync_calls"],
            **{"compaction" + k.title().replace("_", ""): v for k, v in COMPACTION_COUNTERS.items()},
        }
