"""The Kafka design as a peer storage for the Kafka listener (`rmq up --storage kafka-log`, issue 14):
Kafka's LogManager over a log directory laid out as Kafka lays it out:

    <log.dir>/meta.properties
    <log.dir>/recovery-point-offset-checkpoint     version 0, count, then "topic partition offset" lines
    <log.dir>/log-start-offset-checkpoint
    <log.dir>/.kafka_cleanshutdown                  present only after a clean shutdown
    <log.dir>/.lock                                 flock-ed by the process that has it open (holds its pid)
    <log.dir>/<topic>-<partition>/00000000000000000000.{log,index,timeindex}

Every partition is its own files, so a broker with thousands of partitions appends to thousands of
files: the contrast with RocketMQ's single commitlog that the labs measure. The same Kafka handlers
serve both designs; only this storage differs (kafka_bridge.handlers ask `bridge.klog`).
"""
from __future__ import annotations

import logging
import os
import threading
import time

from rmq.store.lock import DirLock
from rmq.store.mapped_file import StoreDirError, StoreLockedError

from .cleaner import CLEANER_CHECKPOINT, LogCleaner
from .log import LONG_MAX, AppendError, LogConfig, PartitionLog

log = logging.getLogger("kafka_bridge.kafka_log")

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"  # Kafka's LogManager.LockFileName: held by the process that has the directory open

__all__ = ["AppendError", "KafkaLogManager", "LogConfig", "read_checkpoint", "topic_log_config", "write_checkpoint"]

# Kafka topic config -> (LogConfig field, type)
TOPIC_OVERRIDES = (("segment.bytes", "segment_bytes", int), ("segment.ms", "segment_ms", int),
                   ("retention.ms", "retention_ms", int), ("retention.bytes", "retention_bytes", int),
                   ("flush.messages", "flush_messages", int), ("flush.ms", "flush_ms", int),
                   ("index.interval.bytes", "index_interval_bytes", int),
                   ("message.timestamp.type", "message_timestamp_type", str),
                   ("cleanup.policy", "cleanup_policy", str),
                   ("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", float),
                   ("min.compaction.lag.ms", "min_compaction_lag_ms", int),
                   ("max.compaction.lag.ms", "max_compaction_lag_ms", int),
                   ("delete.retention.ms", "delete_retention_ms", int))


def topic_log_config(base: LogConfig, attributes: dict | None) -> LogConfig:
    """A partition's LogConfig: the broker's log settings with the topic's Kafka configs over them."""
    import dataclasses
    over = {}
    for key, name, kind in TOPIC_OVERRIDES:
        if attributes and key in attributes:
            try:
                over[name] = kind(attributes[key]) if kind is not str else ",".join(
                    x.strip() for x in attributes[key].split(",") if x.strip())
            except ValueError:
                continue              # validated when set (kafka_bridge.topic_configs); never fatal here
    return dataclasses.replace(base, **over) if over else base


def write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    """Kafka's OffsetCheckpointFile: written to a temp file, fsynced, renamed over the old one."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"0\n{len(entries)}\n")
        for (t, p), off in sorted(entries.items()):
            fh.write(f"{t} {p} {off}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0] != "0":
        raise ValueError(f"{path}: not a version-0 offset checkpoint file")
    out = {}
    for line in lines[2:2 + int(lines[1])]:
        t, p, off = line.rsplit(" ", 2)
        out[(t, int(p))] = int(off)
    return out


def lock_log_dir(root: str) -> DirLock:
    """Create the log directory if needed and lock `<log.dir>/.lock` as Kafka's LogManager does (one
    process per log directory); StoreDirError (StoreLockedError when another process holds it),
    one sentence naming the directory, otherwise."""
    def fail(reason: str, locked: bool = False):
        what = (f"cannot use {root} as the kafka-log directory: {reason}" +
                (" (a broker is running on it); stop it, or choose another" if locked else "; choose another"))
        raise (StoreLockedError if locked else StoreDirError)(
            what + " with kafkaLogDir (or storePathRootDir) in the --config file")

    if os.path.exists(root) and not os.path.isdir(root):
        fail("it is a file, not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create it: {exc.strerror or exc}")
    return DirLock.acquire(root, LOCK_FILE, fail)


def split_dir_name(name: str) -> tuple[str, int] | None:
    topic, _, part = name.rpartition("-")
    return (topic, int(part)) if topic and part.isdigit() else None


class KafkaLogManager:
    def __init__(self, root: str, config: LogConfig | None = None, *, checkpoint_interval_ms: int = 60_000,
                 retention_check_interval_ms: int = 300_000, flush_check_interval_ms: int = 1000,
                 node_id: int = 0, cluster_id: str = "rmq", cleaner_backoff_ms: int = 15_000) -> None:
        self.root = root
        # fn(topic) -> the topic's Kafka configs (attributes), or None: set by the bridge, read when a
        # partition is opened and by the cleaner, so AlterConfigs takes effect on open logs too
        self.attributes_of = None
        self.config = config or LogConfig()
        self.stats: dict[str, int] = {}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.lock = threading.Lock()
        self.intervals = (checkpoint_interval_ms, retention_check_interval_ms, flush_check_interval_ms)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dir_lock = lock_log_dir(root)  # before anything in it is read or written
        try:
            meta = os.path.join(root, "meta.properties")
            if not os.path.exists(meta):
                with open(meta, "w", encoding="utf-8") as fh:
                    fh.write(f"version=1\nnode.id={node_id}\ncluster.id={cluster_id}\n")
            self.recovery_seconds = self._load()
            self.cleaner = LogCleaner(self, cleaner_backoff_ms)
            self.cleaner.first_dirty = read_checkpoint(os.path.join(root, CLEANER_CHECKPOINT))
        except BaseException:
            self._dir_lock.release()
            raise

    def _load(self) -> float:
        t0 = time.monotonic()
        clean_marker = os.path.join(self.root, CLEAN_SHUTDOWN)
        clean = os.path.exists(clean_marker)
        points = read_checkpoint(os.path.join(self.root, RECOVERY_CHECKPOINT))
        starts = read_checkpoint(os.path.join(self.root, LOG_START_CHECKPOINT))
        truncated = 0
        for name in sorted(os.listdir(self.root)):
            tp = split_dir_name(name)
            if tp is None or not os.path.isdir(os.path.join(self.root, name)):
                continue
            plog = PartitionLog(os.path.join(self.root, name), tp[0], tp[1], self.config, self.stats)
            truncated += plog.load(points.get(tp, 0), clean, starts.get(tp, 0))
            self.logs[tp] = plog
        if clean:
            os.unlink(clean_marker)
        secs = time.monotonic() - t0
        if self.logs:
            level = logging.INFO if clean else logging.WARNING
            log.log(level, "kafka-log: loaded %d partition logs in %.2fs (%s shutdown%s)", len(self.logs), secs,
                    "clean" if clean else "unclean", f", {truncated} torn bytes truncated" if truncated else "")
        return secs

    # ---- logs ------------------------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        plog = self.logs.get((topic, partition))
        if plog is not None:
            return plog
        with self.lock:
            plog = self.logs.get((topic, partition))
            if plog is None:
                plog = PartitionLog(os.path.join(self.root, f"{topic}-{partition}"), topic, partition, self.config,
                                    self.stats)
                plog.load(0, True)
                self.logs[(topic, partition)] = plog
            return plog

    def refresh_config(self, plog: PartitionLog) -> None:
        """Give an open log its topic's current configs (they may have changed since it was opened)."""
        if self.attributes_of is None:
            return
        attrs = self.attributes_of(plog.topic)
        if attrs is not plog.config_source and attrs != plog.config_source:
            plog.config = topic_log_config(self.config, attrs)
            plog.config_source = dict(attrs) if attrs is not None else None

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        plog = self.logs.get((topic, partition))
        return (plog.log_start_offset, plog.end_offset) if plog is not None else (0, 0)

    def delete_topic(self, topic: str) -> None:
        import shutil
        with self.lock:
            for tp in [tp for tp in self.logs if tp[0] == topic]:
                plog = self.logs.pop(tp)
                plog.close()
                shutil.rmtree(plog.dir, ignore_errors=True)
                self.cleaner.first_dirty.pop(tp, None)

    # ---- background: flush by time, checkpoints, retention -----------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kafka-log-scheduler", daemon=True)
            self._thread.start()
            self.cleaner.start()

    def _run(self) -> None:
        ck_ms, ret_ms, flush_ms = self.intervals
        last_ck = last_ret = time.monotonic()
        while not self._stop.wait(flush_ms / 1000):
            now = time.monotonic()
            try:
                if self.config.flush_ms < LONG_MAX:
                    wall = time.time() * 1000
                    for plog in list(self.logs.values()):
                        if wall - plog.last_flush_ms >= self.config.flush_ms and plog.end_offset > plog.recovery_point:
                            plog.flush()
                if (now - last_ck) * 1000 >= ck_ms:
                    self.checkpoint()
                    last_ck = now
                if (now - last_ret) * 1000 >= ret_ms:
                    for plog in list(self.logs.values()):
                        self.refresh_config(plog)        # a compacted topic's log keeps its records
                        plog.delete_old_segments()
                    last_ret = now
            except Exception:          # a scheduler that dies silently would stop retention for good
                log.exception("kafka-log scheduler")

    def checkpoint(self) -> None:
        write_checkpoint(os.path.join(self.root, RECOVERY_CHECKPOINT),
                         {tp: plog.recovery_point for tp, plog in self.logs.items()})
        write_checkpoint(os.path.join(self.root, LOG_START_CHECKPOINT),
                         {tp: plog.log_start_offset for tp, plog in self.logs.items()})
        write_checkpoint(os.path.join(self.root, CLEANER_CHECKPOINT),
                         {tp: off for tp, off in dict(self.cleaner.first_dirty).items() if tp in self.logs})

    def close(self) -> None:
        """Clean shutdown: flush every log, write the checkpoints, then the clean-shutdown marker."""
        self._stop.set()
        self.cleaner.stop()
        if self._thread is not None:
            self._thread.join(10)
        for plog in list(self.logs.values()):
            plog.flush()
        self.checkpoint()
        for plog in list(self.logs.values()):
            plog.close()
        with open(os.path.join(self.root, CLEAN_SHUTDOWN), "w", encoding="utf-8"):
            pass
        self._dir_lock.release()

    def describe(self) -> dict:
        return {"partitions": len(self.logs), "segments": sum(len(p.segments) for p in self.logs.values()),
                "bytes": sum(p.size_bytes() for p in self.logs.values()), **self.stats}
