"""The admin APIs Kafka's own admin clients call besides topics and configs (issue 11, item 5):
DeleteRecords, DeleteGroups, OffsetDelete, DescribeLogDirs, ListPartitionReassignments,
ElectLeaders, DescribeProducers, DescribeTransactions, ListTransactions (the ACL APIs are in
handlers/security.py).

Each is answered from what this broker really has: one log directory (the store root), one replica
per partition (nothing to reassign or elect), the idempotent-producer and transaction state the
bridge keeps, and no authorizer (the ACL APIs answer SECURITY_DISABLED, as a Kafka broker without
one does).
"""
from __future__ import annotations

import os
import shutil
import time

from rmq.broker.config_manager import ConfigManager
from rmq.broker.offsets import TOPIC_GROUP_SEPARATOR

from ..cluster import cluster_of, resolve_partition
from ..protocol import error_codes as ec

CQ_UNIT = 20


class LogStartOffsets(ConfigManager):
    """Where DeleteRecords moved each partition's log start (config/kafkaLogStartOffsets.json), so a
    restart keeps it: `topic -> {queueId: offset}`, applied to the consumequeue's minimum offset."""

    file_name = "kafkaLogStartOffsets.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.table: dict[str, dict[int, int]] = {}

    def encode(self) -> dict:
        return {"logStartOffsets": {t: {str(q): o for q, o in qs.items()} for t, qs in self.table.items()}}

    def decode(self, data: dict) -> None:
        for t, qs in (data.get("logStartOffsets") or {}).items():
            if isinstance(qs, dict):
                self.table[t] = {int(q): int(o) for q, o in qs.items()}

    def apply(self, store) -> None:
        for topic, qs in self.table.items():
            for q, off in qs.items():
                cq = store.get_consume_queue(topic, q)
                if cq is not None:
                    cq.min_logic_offset = max(cq.min_logic_offset, off * CQ_UNIT)

    def move(self, store, topic: str, queue_id: int, offset: int) -> int:
        """Move the log start of a queue to `offset` (never backwards); the new low watermark. A
        compacted topic's compacted log starts there too."""
        cq = store.find_consume_queue(topic, queue_id)
        with self.lock:
            cq.min_logic_offset = max(cq.min_logic_offset, offset * CQ_UNIT)
            low = cq.min_offset
            self.table.setdefault(topic, {})[queue_id] = low
        self.persist()
        store.compaction.move_start(topic, queue_id, low)
        return low


def log_start_offsets(bridge) -> LogStartOffsets:
    ls = getattr(bridge, "_log_start", None)
    if ls is None:
        ls = LogStartOffsets(bridge.controller.config_dir)
        ls.load()
        ls.apply(bridge.store)
        bridge._log_start = ls
    return ls


# ------------------------------------------------------------------ retention.ms, retention.bytes
def apply_topic_retention(bridge, now_ms: int | None = None) -> list[tuple[str, int, int]]:
    """Per-topic retention, as Kafka's topic configs ask: a partition's log start moves past the
    records older than `retention.ms` and past the oldest bytes beyond `retention.bytes` (whole
    units). The commitlog is shared by every topic, so its files go by RocketMQ's own cleanup
    (fileReservedTime, disk ratios); what moves is where the topic's queues start, as DeleteRecords
    does. Returns (topic, queueId, new start) for every queue that moved."""
    store = bridge.store
    starts = log_start_offsets(bridge)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    moved = []
    for name in list(bridge.controller.topic_config_manager.table):
        tc = bridge.topic(name)
        attrs = tc.attributes if tc is not None else {}
        if "delete" not in attrs.get("cleanup.policy", "delete").split(","):
            continue                  # cleanup.policy=compact: records go by compaction only
        ms = int(attrs.get("retention.ms", "-1"))
        limit = int(attrs.get("retention.bytes", "-1"))
        if ms < 0 and limit < 0:
            continue
        for q in range(bridge.partition_count(tc)):
            cq = store.get_consume_queue(name, q)
            if cq is None or cq.min_offset >= cq.max_offset:
                continue
            target = cq.min_offset
            if ms >= 0:
                target = max(target, store.get_offset_in_queue_by_time(name, q, now - ms))
            if limit >= 0:
                target = max(target, _offset_keeping_bytes(cq, limit))
            if target > cq.min_offset:
                moved.append((name, q, starts.move(store, name, q, target)))
    return moved


def _offset_keeping_bytes(cq, limit: int) -> int:
    """The first offset from which the queue's units hold at most `limit` bytes."""
    total, off = 0, cq.max_offset
    while off > cq.min_offset:
        start = max(cq.min_offset, off - 1024)
        raw = cq.get_units(start, off - start)
        if len(raw) < (off - start) * CQ_UNIT:       # across a file boundary: one unit at a time
            start, raw = off - 1, cq.get_units(off - 1, 1)
            if not raw:
                break
        for i in range(len(raw) - CQ_UNIT, -1, -CQ_UNIT):
            size = int.from_bytes(raw[i + 8:i + 12], "big", signed=True)
            if size == 0x7FFFFFFF:
                continue
            if total + size > limit:
                return start + i // CQ_UNIT + 1
            total += size
        off = start
    return cq.min_offset


async def retention_loop(bridge) -> None:
    import asyncio
    import logging
    interval = max(0.05, getattr(bridge.config, "kafkaRetentionCheckIntervalMs", 30000) / 1000)
    log = logging.getLogger("kafka_bridge.retention")
    while True:
        await asyncio.sleep(interval)
        try:
            for topic, q, start in apply_topic_retention(bridge):
                log.info("retention: %s-%d now starts at offset %d", topic, q, start)
        except Exception:  # keep the loop going; the next round tries again
            log.exception("topic retention failed")


# ------------------------------------------------------------------ DeleteRecords
async def handle_delete_records(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    store = bridge.store
    starts = log_start_offsets(bridge)
    topics = []
    for t in body["topics"]:
        name = t["name"]
        parts = []
        for p in t["partitions"]:
            idx, offset = p["partition_index"], p["offset"]
            res = {"partition_index": idx, "low_watermark": -1, "error_code": ec.NONE}
            queue = idx
            if cl is not None:
                err, queue = await resolve_partition(cl, name, idx)
                if err != ec.NONE:
                    res["error_code"] = err
                    parts.append(res)
                    continue
            tc = bridge.topic(name)
            if tc is None or not 0 <= queue < bridge.partition_count(tc):
                res["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                hw = store.get_max_offset_in_queue(name, queue)
                if offset == -1:            # DeleteRecordsRequest.HIGH_WATERMARK
                    offset = hw
                if offset < 0 or offset > hw:
                    res["error_code"] = ec.OFFSET_OUT_OF_RANGE
                else:
                    res["low_watermark"] = starts.move(store, name, queue, offset)
            parts.append(res)
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


# ------------------------------------------------------------------ DeleteGroups, OffsetDelete
def _local_offsets(bridge):
    return bridge.controller.offset_manager


def _delete_group_offsets(bridge, group: str, keep=lambda topic, queue: False) -> int:
    mgr = _local_offsets(bridge)
    n = 0
    with mgr.lock:
        for key in list(mgr.offset_table):
            topic, _, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if g != group:
                continue
            queues = mgr.offset_table[key]
            for q in [q for q in queues if not keep(topic, q)]:
                del queues[q]
                n += 1
            if not queues:
                del mgr.offset_table[key]
        mgr.dirty = True
    mgr.flush_if_dirty()
    return n


async def handle_delete_groups(bridge, conn, version: int, body: dict):
    from .groups import not_coordinator
    coord = bridge.coordinator
    results = []
    for gid in body["groups_names"]:
        if await not_coordinator(bridge, gid):
            results.append({"group_id": gid, "error_code": ec.NOT_COORDINATOR})
            continue
        group = coord._groups.get(gid)
        known = group is not None and group.state != "Dead" or gid in _local_offsets(bridge).all_groups()
        if not known:
            results.append({"group_id": gid, "error_code": ec.GROUP_ID_NOT_FOUND})
            continue
        if group is not None and group.members:
            results.append({"group_id": gid, "error_code": ec.NON_EMPTY_GROUP})
            continue
        coord._groups.pop(gid, None)
        _delete_group_offsets(bridge, gid)
        results.append({"group_id": gid, "error_code": ec.NONE})
    return {"throttle_time_ms": 0, "results": results}


def _subscribed_topics(group) -> set[str]:
    """Topics the group's consumers subscribe (from their JoinGroup metadata, consumer protocol)."""
    import struct
    out = set()
    for m in group.members.values():
        meta = m.metadata(group.protocol_name or "") if group.protocol_name else b""
        try:
            p = 2
            (n,) = struct.unpack_from(">i", meta, p)
            p += 4
            for _ in range(max(n, 0)):
                (ln,) = struct.unpack_from(">h", meta, p)
                p += 2
                out.add(meta[p:p + ln].decode("utf-8", "replace"))
                p += ln
        except (struct.error, TypeError):
            continue
    return out


async def handle_offset_delete(bridge, conn, version: int, body: dict):
    from .groups import not_coordinator
    gid = body["group_id"]
    out = {"error_code": ec.NONE, "throttle_time_ms": 0, "topics": []}
    if await not_coordinator(bridge, gid):
        out["error_code"] = ec.NOT_COORDINATOR
        return out
    group = bridge.coordinator._groups.get(gid)
    if (group is None or group.state == "Dead") and gid not in _local_offsets(bridge).all_groups():
        out["error_code"] = ec.GROUP_ID_NOT_FOUND
        return out
    subscribed = _subscribed_topics(group) if group is not None and group.members else set()
    for t in body["topics"]:
        parts = []
        name = t["name"]
        wanted = {p["partition_index"] for p in t["partitions"]}
        for idx in sorted(wanted):
            err = ec.GROUP_SUBSCRIBED_TO_TOPIC if name in subscribed else ec.NONE
            parts.append({"partition_index": idx, "error_code": err})
        if name not in subscribed:
            _delete_group_offsets(bridge, gid, keep=lambda topic, q, _n=name, _w=wanted: topic != _n or q not in _w)
        out["topics"].append({"name": name, "partitions": parts})
    return out


# ------------------------------------------------------------------ DescribeLogDirs
def _queue_bytes(store, topic: str, queue_id: int) -> int:
    """Bytes of a queue's messages still stored: the sizes in its consumequeue units."""
    cq = store.get_consume_queue(topic, queue_id)
    if cq is None:
        return 0
    total, off = 0, cq.min_offset
    while off < cq.max_offset:
        raw = cq.get_units(off, 4096)
        if not raw:
            break
        for i in range(0, len(raw), CQ_UNIT):
            size = int.from_bytes(raw[i + 8:i + 12], "big", signed=True)
            if 0 < size != 0x7FFFFFFF:
                total += size
        off += len(raw) // CQ_UNIT
    return total


async def handle_describe_log_dirs(bridge, conn, version: int, body: dict):
    store = bridge.store
    wanted = body["topics"]
    if wanted is None:
        wanted = [{"topic": n, "partitions": list(range(bridge.partition_count(bridge.topic(n))))}
                  for n in bridge.visible_topics() if bridge.topic(n) is not None]
    topics = []
    for t in wanted:
        tc = bridge.topic(t["topic"])
        if tc is None:
            continue
        parts = [{"partition_index": p, "partition_size": _queue_bytes(store, t["topic"], p), "offset_lag": 0,
                  "is_future_key": False} for p in t["partitions"] if 0 <= p < bridge.partition_count(tc)]
        topics.append({"name": t["topic"], "partitions": parts})
    usage = shutil.disk_usage(store.root)
    return {"throttle_time_ms": 0, "error_code": ec.NONE,
            "results": [{"error_code": ec.NONE, "log_dir": os.path.abspath(store.root), "topics": topics,
                         "total_bytes": usage.total, "usable_bytes": usage.free}]}


# ------------------------------------------------------------------ reassignments, elections
async def handle_list_partition_reassignments(bridge, conn, version: int, body: dict):
    """One replica per partition: nothing is ever being reassigned."""
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "topics": []}


async def handle_elect_leaders(bridge, conn, version: int, body: dict):
    """One replica per partition: its leader is always the preferred one (ELECTION_NOT_NEEDED)."""
    wanted = body["topic_partitions"]
    if wanted is None:
        wanted = [{"topic": n, "partitions": list(range(bridge.partition_count(bridge.topic(n))))}
                  for n in bridge.visible_topics() if bridge.topic(n) is not None]
    out = []
    for t in wanted:
        tc = bridge.topic(t["topic"])
        res = []
        for p in t["partitions"]:
            if tc is None or not 0 <= p < bridge.partition_count(tc):
                res.append({"partition_id": p, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": f"{t['topic']}-{p} does not exist"})
            else:
                res.append({"partition_id": p, "error_code": ec.ELECTION_NOT_NEEDED,
                            "error_message": "Leader election not needed for topic partition"})
        out.append({"topic": t["topic"], "partition_result": res})
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "replica_election_results": out}


# ------------------------------------------------------------------ producers and transactions
async def handle_describe_producers(bridge, conn, version: int, body: dict):
    pm = bridge.producers
    topics = []
    for t in body["topics"]:
        tc = bridge.topic(t["name"])
        parts = []
        for idx in t["partition_indexes"]:
            if tc is None or not 0 <= idx < bridge.partition_count(tc):
                parts.append({"partition_index": idx, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION,
                              "error_message": None, "active_producers": []})
                continue
            active = []
            for (pid, topic, part), st in list(pm.partitions.items()):
                if topic == t["name"] and part == idx:
                    info = pm.producers.get(pid)
                    active.append({"producer_id": pid, "producer_epoch": st.epoch, "last_sequence": st.last_seq,
                                   "last_timestamp": int((time.time() - (time.monotonic() - info.last_seen)) * 1000)
                                   if info is not None else -1,
                                   "coordinator_epoch": -1, "current_txn_start_offset": -1})
            parts.append({"partition_index": idx, "error_code": ec.NONE, "error_message": None,
                          "active_producers": active})
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _txn_state_name(t) -> str:
    return "Ongoing" if t.state == "Ongoing" else "Empty"


async def handle_describe_transactions(bridge, conn, version: int, body: dict):
    txns = bridge.txn.txns if bridge.txn is not None else {}
    out = []
    for tid in body["transactional_ids"]:
        t = txns.get(tid)
        if t is None:
            out.append({"error_code": ec.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": tid, "transaction_state": "",
                        "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                        "producer_epoch": -1, "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, part in sorted(t.partitions):
            by_topic.setdefault(topic, []).append(part)
        started = int((time.time() - (time.monotonic() - t.started)) * 1000) if t.started else -1
        out.append({"error_code": ec.NONE, "transactional_id": tid, "transaction_state": _txn_state_name(t),
                    "transaction_timeout_ms": t.timeout_ms, "transaction_start_time_ms": started,
                    "producer_id": t.producer_id, "producer_epoch": t.epoch,
                    "topics": [{"topic": k, "partitions": v} for k, v in by_topic.items()]})
    return {"throttle_time_ms": 0, "transaction_states": out}


KNOWN_TXN_STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                    "Dead", "PrepareEpochFence"}


async def handle_list_transactions(bridge, conn, version: int, body: dict):
    txns = bridge.txn.txns if bridge.txn is not None else {}
    states = set(body["state_filters"])
    pids = set(body["producer_id_filters"])
    duration = body.get("duration_filter", -1)
    now = time.monotonic()
    out = []
    for tid, t in sorted(txns.items()):
        state = _txn_state_name(t)
        if states and state not in states:
            continue
        if pids and t.producer_id not in pids:
            continue
        if duration is not None and duration >= 0 and not (t.started and (now - t.started) * 1000 >= duration):
            continue
        out.append({"transactional_id": tid, "producer_id": t.producer_id, "transaction_state": state})
    return {"throttle_time_ms": 0, "error_code": ec.NONE,
            "unknown_state_filters": sorted(states - KNOWN_TXN_STATES), "transaction_states": out}


HANDLERS = {
    21: handle_delete_records,
    35: handle_describe_log_dirs, 42: handle_delete_groups, 43: handle_elect_leaders,
    46: handle_list_partition_reassignments, 47: handle_offset_delete, 61: handle_describe_producers,
    65: handle_describe_transactions, 66: handle_list_transactions,
}
