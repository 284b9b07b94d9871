"""Fetch and ListOffsets: consumequeue offsets are Kafka offsets; stored units become one
RecordBatch per partition; long polling wakes on message arrival (SPEC §4, §11).

Fetch sessions are declined (session_id 0), which the protocol allows: clients then send full
fetch requests. In cluster mode (kafka_bridge.cluster) partition p of this brokerName is local
queue p - base, served by the master and by its slaves (followers, from their HA copy), and a
partition of another brokerName gets NOT_LEADER_OR_FOLLOWER.
"""
from __future__ import annotations

import time

from rmq import native

from ..cluster import cluster_of, resolve_partition
from ..mapping import record_timestamp, unit_to_record, units_to_batch
from ..protocol import error_codes as ec
from ..records import TimestampType, encode_batch

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
MAX_RECORDS_PER_PARTITION = 10_000


def _partition_error(partition: int, code: int, hw: int = -1, lso: int = -1, start: int = -1) -> dict:
    return {"partition_index": partition, "error_code": code, "high_watermark": hw, "last_stable_offset": lso,
            "log_start_offset": start, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": b""}


def read_partition(bridge, topic: str, partition: int, offset: int, max_bytes: int, isolation: int) -> tuple[dict, int]:
    """One partition's FetchResponse entry and the bytes of records in it."""
    tc = bridge.topic(topic)
    if tc is None or not bridge.readable(tc, partition):
        return _partition_error(partition, ec.UNKNOWN_TOPIC_OR_PARTITION), 0
    if bridge.klog is not None:
        return read_kafka_log(bridge, tc, topic, partition, offset, max_bytes)
    store = bridge.store
    cq = store.get_consume_queue(topic, partition)
    lo = cq.min_offset if cq else 0
    hw = cq.max_offset if cq else 0
    comp = store.compaction
    compacted_start = comp.log_start(topic, partition) if comp.queues else None
    if compacted_start is not None:        # a compacted topic: its log starts where its compacted log does
        lo = min(lo, compacted_start)
    lso = hw
    txn = bridge.txn
    if isolation == READ_COMMITTED and txn is not None:
        lso = txn.last_stable_offset(topic, partition, hw)
    if offset < lo or offset > hw:
        return _partition_error(partition, ec.OFFSET_OUT_OF_RANGE, hw, lso, lo), 0
    limit_offset = lso if isolation == READ_COMMITTED else hw
    entry = {"partition_index": partition, "error_code": ec.NONE, "high_watermark": hw, "last_stable_offset": lso,
             "log_start_offset": lo, "aborted_transactions": [] if isolation == READ_COMMITTED else None,
             "preferred_read_replica": -1, "records": b""}
    if offset >= limit_offset:
        return entry, 0
    count = min(MAX_RECORDS_PER_PARTITION, limit_offset - offset)
    if compacted_start is not None and comp.covers(topic, partition, offset):
        # below the cleaned point: the compacted log's next surviving records (RocketMQ 5's
        # CompactionStore.getMessage); past its end, the consumequeue from the cleaned point on
        raws, offs, _ = comp.read(topic, partition, offset, count, max(max_bytes, 1))
        if raws:
            return _units_entry(entry, raws, offs, tc)
        offset = max(offset, comp.cleaned_to(topic, partition), cq.min_offset if cq else 0)
        if offset >= limit_offset:
            return entry, 0
        count = min(MAX_RECORDS_PER_PARTITION, limit_offset - offset)
    # message.timestamp.type=LogAppendTime (a Kafka topic config): records carry the store time and
    # the batch says so; the C path builds CreateTime batches only
    log_append = tc.attributes.get("message.timestamp.type") == "LogAppendTime"
    if native.ext is not None and not log_append:  # the same batch, built in C straight from the mapped files
        view = store.units_view(topic, partition, offset, count)
        got = units_to_batch(view, max(max_bytes, 1), count) if view is not None else None
        if got is None:
            return entry, 0
        entry["records"], n = got
        store.stats["get_messages"] += n
        store.count_out(topic, n, len(entry["records"]))
        return entry, len(entry["records"])
    res = store.get_message(None, topic, partition, offset, count, max_bytes=max(max_bytes, 1))  # counts them out
    if not res.messages:
        return entry, 0
    offs = res.queue_offsets
    base = offs[0]
    recs = [unit_to_record(raw, log_append_time=log_append)[:4] for raw in res.messages]
    if log_append:
        batch = encode_batch(recs, base_offset=base, offset_deltas=[o - base for o in offs], partition_leader_epoch=0,
                             timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=max(r[3] for r in recs))
    else:
        batch = encode_batch(recs, base_offset=base, offset_deltas=[o - base for o in offs],
                             partition_leader_epoch=0)
    entry["records"] = batch
    return entry, len(batch)


def _units_entry(entry: dict, raws: list, offs: list, tc) -> tuple[dict, int]:
    """A fetch entry holding stored units (at queue offsets `offs`) as one RecordBatch."""
    log_append = tc.attributes.get("message.timestamp.type") == "LogAppendTime"
    base = offs[0]
    recs = [unit_to_record(raw, log_append_time=log_append)[:4] for raw in raws]
    if log_append:
        batch = encode_batch(recs, base_offset=base, offset_deltas=[o - base for o in offs], partition_leader_epoch=0,
                             timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=max(r[3] for r in recs))
    else:
        batch = encode_batch(recs, base_offset=base, offset_deltas=[o - base for o in offs], partition_leader_epoch=0)
    entry["records"] = batch
    return entry, len(batch)


def read_kafka_log(bridge, tc, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[dict, int]:
    """kafkaStorage kafka-log: whole stored batches from the one holding `offset`, bytes as written
    (what Kafka sends with sendfile; the client skips records before the fetch offset)."""
    plog = bridge.partition_log(topic, partition, tc)
    lo, hw = plog.log_start_offset, plog.end_offset
    if offset < lo or offset > hw:
        return _partition_error(partition, ec.OFFSET_OUT_OF_RANGE, hw, hw, lo), 0
    entry = {"partition_index": partition, "error_code": ec.NONE, "high_watermark": hw, "last_stable_offset": hw,
             "log_start_offset": lo, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
    if offset < hw and max_bytes > 0:
        entry["records"] = plog.read(offset, max_bytes)
    return entry, len(entry["records"])


async def handle_fetch(bridge, conn, version: int, body: dict):
    by_id = version >= 13
    cl = await cluster_of(bridge)
    layout = []  # per topic: (request topic dict, name, [(partition, offset, max bytes, queue id, error)])
    for t in body["topics"]:
        if by_id:
            name = bridge.topic_by_id(t["topic_id"])
        else:
            name = t["topic"]
        parts = []
        for p in t["partitions"]:
            part = p["partition"]
            err, qid = ec.NONE, part
            if cl is not None and name is not None:
                err, qid = await resolve_partition(cl, name, part, read=True)
            parts.append((part, p["fetch_offset"], p["partition_max_bytes"], qid, err))
        layout.append((t, name, parts))
    entries = await fetch_layout(bridge, layout, body["max_wait_ms"], body["min_bytes"],
                                 body["max_bytes"] if version >= 3 else 1 << 30, body.get("isolation_level", 0))
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "session_id": 0, "responses": [
        {"topic": t.get("topic", name) if not by_id else "", "topic_id": t.get("topic_id"), "partitions": parts}
        for (t, name, _), parts in zip(layout, entries)]}


async def fetch_layout(bridge, layout: list, max_wait_ms: int, min_bytes: int, total_max: int,
                       isolation: int) -> list[list[dict]]:
    """The partition entries of a Fetch, one list per topic of `layout` ((request topic, name or
    None for an unknown topic id, [(partition, fetch offset, partition max bytes, queue id, error)])),
    once at least min_bytes are there, an error is met or max_wait_ms passed (long polling on the
    arrival hub). handle_fetch and the frame path (handlers/fetch_frame.py) share it."""
    max_wait = max(0, max_wait_ms) / 1000.0
    if total_max <= 0:
        total_max = 1 << 30
    wants = [(name, qid, off) for _, name, parts in layout if name is not None
             for _part, off, _pmax, qid, err in parts if err == ec.NONE]  # what the long poll waits on
    deadline = time.monotonic() + max_wait
    store = bridge.store
    committed = isolation == READ_COMMITTED
    while True:
        responses = []
        total = 0
        any_error = False
        ends = {}  # (name, queue id) -> high watermark just read
        # read_partition's plain case (consumequeue storage, no compacted queues): a partition with
        # nothing past its fetch offset, most of those a woken fetch asks for, is answered here
        # without its per-partition lookups; anything else goes to read_partition
        quick = bridge.klog is None and not store.compaction.queues
        txn = bridge.txn if committed else None
        for _, name, parts in layout:
            entries = []
            tc = bridge.topic(name) if quick and name is not None else None
            cqs = store.consume_queue_table.get(name) if tc is not None else None
            for part, off, pmax, qid, err in parts:
                if name is None or err != ec.NONE:
                    entries.append(_partition_error(part, ec.UNKNOWN_TOPIC_ID if name is None else err))
                    any_error = True
                    continue
                if tc is not None and bridge.readable(tc, qid):
                    cq = cqs.get(qid) if cqs else None
                    hw = cq.max_offset if cq else 0
                    lso = txn.last_stable_offset(name, qid, hw) if txn is not None else hw
                    if lso <= off <= hw and off >= (lo := cq.min_offset if cq else 0):
                        ends[(name, qid)] = hw
                        entries.append({"partition_index": part, "error_code": ec.NONE, "high_watermark": hw,
                                        "last_stable_offset": lso, "log_start_offset": lo,
                                        "aborted_transactions": [] if committed else None,
                                        "preferred_read_replica": -1, "records": b""})
                        continue
                budget = min(pmax, total_max - total) if total < total_max else 0
                if budget <= 0 and total > 0:
                    entry, n = read_partition(bridge, name, qid, off, 0, isolation)
                    entry["records"] = b""
                    n = 0
                else:
                    entry, n = read_partition(bridge, name, qid, off, budget, isolation)
                entry["partition_index"] = part
                if entry["error_code"] != ec.NONE:
                    any_error = True
                else:
                    ends[(name, qid)] = entry["high_watermark"]
                total += n
                entries.append(entry)
            responses.append(entries)
        left = deadline - time.monotonic()
        if total >= min_bytes or total > 0 and min_bytes <= 1 or any_error or left <= 0 or not wants:
            return responses
        # wait for records past what was just read (fewer bytes than min_bytes): waiting from the
        # fetch offset returned at once while the queue held data there, a busy loop that held the
        # event loop, and every other connection, until max_wait_ms (found by fuzzing)
        wants = [(n, q, max(off, ends.get((n, q), off))) for n, q, off in wants]
        await bridge.controller.arrival_hub.wait(wants, left)


def offset_for_timestamp(store, topic: str, partition: int, ts: int, lo: int, hi: int) -> tuple[int, int]:
    """ListOffsets by timestamp: the first offset whose record timestamp (CreateTime, i.e. the
    BORNTIMESTAMP that Fetch returns) is >= ts, with that timestamp; (-1, -1) when there is none.

    The consumequeue is binary-searched by store time first: a record stored before ts was also
    created before ts (unless its producer stamped it in the future), so the answer is at or after
    that point. From there records are read forward until one's CreateTime reaches ts, because a
    producer may stamp records with earlier (event) times than when they were stored."""
    off = max(lo, store.get_offset_in_queue_by_time(topic, partition, ts))
    while off < hi:
        res = store.get_message(None, topic, partition, off, min(256, hi - off), max_bytes=1 << 20)
        if not res.messages:
            if res.next_begin_offset > off:
                off = res.next_begin_offset
                continue
            break
        for raw, qoff in zip(res.messages, res.queue_offsets):
            rts = record_timestamp(raw)
            if rts >= ts:
                return qoff, rts
        off = res.queue_offsets[-1] + 1
    return -1, -1


async def handle_list_offsets(bridge, conn, version: int, body: dict):
    store = bridge.store
    isolation = body.get("isolation_level", 0)
    cl = await cluster_of(bridge)
    topics = []
    for t in body["topics"]:
        name = t["name"]
        tc = bridge.topic(name)
        parts = []
        for p in t["partitions"]:
            idx = p["partition_index"]
            ts = p["timestamp"]
            out = {"partition_index": idx, "error_code": ec.NONE, "timestamp": -1, "offset": -1, "leader_epoch": 0,
                   "old_style_offsets": []}
            if cl is not None:
                err, idx = await resolve_partition(cl, name, idx, read=True)
                if err != ec.NONE:
                    out["error_code"] = err
                    parts.append(out)
                    continue
            if tc is None or not bridge.readable(tc, idx):
                out["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(out)
                continue
            plog = bridge.partition_log(name, idx, tc) if bridge.klog is not None else None
            if plog is not None:
                lo, hi = plog.log_start_offset, plog.end_offset
            else:
                lo = store.get_min_offset_in_queue(name, idx)
                hi = store.get_max_offset_in_queue(name, idx)
                compacted_start = store.compaction.log_start(name, idx) if store.compaction.queues else None
                if compacted_start is not None:
                    lo = min(lo, compacted_start)
            if plog is None and isolation == READ_COMMITTED and bridge.txn is not None:
                hi = bridge.txn.last_stable_offset(name, idx, hi)
            if ts == -1:      # LATEST
                out["offset"] = hi
            elif ts == -2:    # EARLIEST
                out["offset"] = lo
            elif ts == -3 and plog is not None:
                out["offset"], out["timestamp"] = plog.max_timestamp_offset()
            elif ts == -3:    # MAX_TIMESTAMP (v7+): the record with the largest timestamp
                best_off, best_ts = -1, -1
                cq = store.get_consume_queue(name, idx)
                if cq is not None and hi > lo:
                    res = store.get_message(None, name, idx, max(lo, hi - 1000), 1000, max_bytes=1 << 26)
                    for raw, off in zip(res.messages, res.queue_offsets):
                        rts = unit_to_record(raw)[3]
                        if rts >= best_ts:
                            best_ts, best_off = rts, off
                out["offset"], out["timestamp"] = best_off, best_ts
            elif ts < 0:
                out["error_code"] = ec.INVALID_REQUEST
            elif plog is not None:
                out["offset"], out["timestamp"] = plog.offset_for_time(ts)
            else:
                out["offset"], out["timestamp"] = offset_for_timestamp(store, name, idx, ts, lo, hi)
            if version == 0:
                out["old_style_offsets"] = [out["offset"]] if out["offset"] >= 0 else []
            parts.append(out)
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
