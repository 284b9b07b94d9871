"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge (KIP-932), and the
share-group offset admin APIs (Describe/Alter/DeleteShareGroupOffsets): decode,
call the broker's ShareGroupCoordinator (kafka_bridge.share), read the acquired records from the
RocketMQ store, encode.

ShareFetch first applies the acknowledgements piggy-backed on it, then acquires up to MaxRecords
records over the session's partitions and waits (long polling on the store's arrival hub, and
until the earliest acquisition lock expires) while there are none, up to MaxWaitMs. A response
carries only acquired records: each partition's records are RecordBatches holding exactly the
acquired offsets, described by AcquiredRecords ranges with their delivery counts.

With kafkaShareDlqEnable, a record rejected or archived at the delivery limit is also written to
%DLQ%<group> (RocketMQ's dead-letter topic, through the broker's CONSUMER_SEND_MSG_BACK path), so
`rmq admin resendDLQ` works on share groups. kafkaStorage kafka-log topics are not served here.
"""
from __future__ import annotations

import os
import struct
import time

from rmq import native

from ..mapping import unit_to_record, units_to_batch
from ..protocol import error_codes as ec
from ..records import encode_batch
from ..share import ShareGroupCoordinator
from .groups import not_coordinator
from .groups_v2 import (described_tps, describe_groups, group_kind, heartbeat_refusal, heartbeat_response,
                        subscribable_topics)

_PHYS = struct.Struct(">q")


def _bounds(bridge, topic: str, part: int):
    tc = bridge.topic(topic)
    if tc is None or not bridge.readable(tc, part) or bridge.klog is not None:
        return None
    store = bridge.store
    lo, hi = store.get_min_offset_in_queue(topic, part), store.get_max_offset_in_queue(topic, part)
    if bridge.txn is not None:  # share consumers read committed records only (KIP-932)
        hi = bridge.txn.last_stable_offset(topic, part, hi)
    return lo, hi


def _dlq_writer(bridge):
    def write(group: str, topic: str, part: int, off: int, count: int, why: str) -> None:
        from rmq.broker.retry import consumer_send_msg_back
        res = bridge.store.get_message(None, topic, part, off, 1, max_bytes=1 << 26)
        if not res.messages or res.queue_offsets[0] != off:
            return
        phys = _PHYS.unpack_from(res.messages[0], 28)[0]
        r = consumer_send_msg_back(bridge.controller, offset=phys, group=group, delay_level=-1)
        if not r.ok:
            raise RuntimeError(f"{r.code}: {r.remark}")
    return write


def share_groups(bridge) -> ShareGroupCoordinator:
    sg = getattr(bridge, "share_groups", None)
    if sg is None:
        cfg = bridge.config
        path = os.path.join(bridge.store.config.storePathRootDir, "config", "kafkaShareGroups.json")
        sg = bridge.share_groups = ShareGroupCoordinator(
            lambda: subscribable_topics(bridge), lambda t, p: _bounds(bridge, t, p), path,
            heartbeat_interval_ms=getattr(cfg, "kafkaShareHeartbeatIntervalMs", 5000),
            session_timeout_ms=getattr(cfg, "kafkaShareSessionTimeoutMs", 45_000),
            lock_duration_ms=getattr(cfg, "kafkaShareRecordLockDurationMs", 30_000),
            delivery_count_limit=getattr(cfg, "kafkaShareDeliveryCountLimit", 5),
            auto_offset_reset=getattr(cfg, "kafkaShareAutoOffsetReset", "latest"),
            on_archive=_dlq_writer(bridge) if getattr(cfg, "kafkaShareDlqEnable", False) else None)
    return sg


def _save(sg: ShareGroupCoordinator) -> None:
    try:
        sg.save()
    except OSError as exc:
        import logging
        logging.getLogger("kafka_bridge.share").error("share-group state not saved: %s", exc)


# ------------------------------------------------------------------------------- membership
async def handle_share_group_heartbeat(bridge, conn, version: int, body: dict):
    gid = body["group_id"]
    refused = await heartbeat_refusal(bridge, gid, "share")
    if refused is not None:
        return refused
    sg = share_groups(bridge)
    r = sg.heartbeat(gid, body["member_id"], body["member_epoch"], rack_id=body.get("rack_id"),
                     topic_names=body.get("subscribed_topic_names"), client_id=conn.client_id or "",
                     client_host=f"/{conn.peer[0]}")
    _save(sg)
    return heartbeat_response(bridge, r)


async def handle_share_group_describe(bridge, conn, version: int, body: dict):
    def answer(base: dict, d: dict) -> dict:
        return dict(base, group_state=d["state"], group_epoch=d["group_epoch"], assignment_epoch=d["group_epoch"],
                    assignor_name="simple",
                    members=[{"member_id": m["member_id"], "rack_id": m["rack_id"], "member_epoch": m["member_epoch"],
                              "client_id": m["client_id"], "client_host": m["client_host"],
                              "subscribed_topic_names": m["topic_names"],
                              "assignment": described_tps(bridge, m["assignment"])}
                             for m in d["members"]])
    return await describe_groups(bridge, body["group_ids"], lambda gid: share_groups(bridge).describe(gid),
                                 lambda gid: f"Group {gid} not found.", answer)


# ------------------------------------------------------------------------------- records
def _runs(acquired: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """[(offset, delivery count)] sorted -> [(first, last, delivery count)] contiguous runs."""
    out: list[list[int]] = []
    for off, cnt in acquired:
        if out and out[-1][1] == off - 1 and out[-1][2] == cnt:
            out[-1][1] = off
        else:
            out.append([off, off, cnt])
    return [tuple(r) for r in out]


def _read_records(bridge, topic: str, part: int, acquired: list[tuple[int, int]]) -> tuple[list, list[int]]:
    """RecordBatches for the acquired offsets, and the offsets that are gone from the log."""
    store = bridge.store
    pieces = []
    missing = []
    offsets = [o for o, _ in acquired]
    i = 0
    while i < len(offsets):  # contiguous offset runs, whatever their delivery counts
        j = i
        while j + 1 < len(offsets) and offsets[j + 1] == offsets[j] + 1:
            j += 1
        first, count = offsets[i], j - i + 1
        got_n = 0
        if native.ext is not None:
            view = store.units_view(topic, part, first, count)
            got = units_to_batch(view, 1 << 30, count) if view is not None else None
            if got is not None:
                pieces.append(got[0])
                got_n = got[1]
        else:
            res = store.get_message(None, topic, part, first, count, max_bytes=1 << 30)
            if res.messages:
                offs = res.queue_offsets
                recs = [unit_to_record(raw)[:4] for raw in res.messages]
                pieces.append(encode_batch(recs, base_offset=offs[0], offset_deltas=[o - offs[0] for o in offs],
                                           partition_leader_epoch=0))
                got_n = len(offs)
        missing.extend(offsets[i + got_n:j + 1])
        i = j + 1
    return pieces, missing


def _partition_entry(part: int, err: int = ec.NONE, ack_err: int = ec.NONE) -> dict:
    return {"partition_index": part, "error_code": err, "error_message": None, "acknowledge_error_code": ack_err,
            "acknowledge_error_message": None, "current_leader": {"leader_id": -1, "leader_epoch": -1},
            # empty, never null: Kafka sends MemoryRecords.EMPTY, and librdkafka (2.16) drops the whole
            # ShareFetch response at a null ("invalid MessageSetSize -1"), acquired records of other
            # partitions included, which then came back only when their locks expired
            "records": b"", "acquired_records": []}


def _apply_acks(bridge, sg, g, member, topics) -> dict:
    """(topic id, partition) -> acknowledge error code for the acknowledgement batches in topics."""
    out = {}
    for t in topics:
        name = bridge.topic_by_id(t["topic_id"])
        for p in t["partitions"]:
            batches = p.get("acknowledgement_batches") or []
            if not batches:
                continue
            key = (t["topic_id"], p["partition_index"])
            if name is None:
                out[key] = ec.UNKNOWN_TOPIC_ID
                continue
            out[key] = sg.acknowledge(g, member, name, p["partition_index"], batches)
    return out


async def handle_share_fetch(bridge, conn, version: int, body: dict):
    gid, member, epoch = body.get("group_id") or "", body.get("member_id") or "", body["share_session_epoch"]

    def top(code: int, msg: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": msg, "acquisition_lock_timeout_ms": 0,
                "responses": [], "node_endpoints": []}
    if await not_coordinator(bridge, gid):
        return top(ec.NOT_COORDINATOR)
    sg = share_groups(bridge)
    has_acks = any(p.get("acknowledgement_batches") for t in body["topics"] for p in t["partitions"])
    if epoch == 0 and has_acks:
        return top(ec.INVALID_REQUEST, "Acknowledgements are not allowed when opening a share session (epoch 0).")
    err, g, session = sg.open_session(gid, member, epoch)
    if err != ec.NONE:
        return top(err)
    acks = _apply_acks(bridge, sg, g, member, body["topics"])
    requested = []  # (topic id, name, partition)
    for t in body["topics"]:
        name = bridge.topic_by_id(t["topic_id"])
        for p in t["partitions"]:
            requested.append((t["topic_id"], name, p["partition_index"]))
            if name is not None:
                session.partitions.add((name, p["partition_index"]))
    for t in body.get("forgotten_topics_data") or []:
        name = bridge.topic_by_id(t["topic_id"])
        for p in t["partitions"]:
            session.partitions.discard((name, p))
    entries: dict[tuple, dict] = {}
    for tid, name, part in requested:
        e = entries[(tid, part)] = _partition_entry(part)
        if name is None:
            e["error_code"] = ec.UNKNOWN_TOPIC_ID
        elif _bounds(bridge, name, part) is None:
            e["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
    for key, code in acks.items():
        entries.setdefault(key, _partition_entry(key[1]))["acknowledge_error_code"] = code
    closing = epoch == -1
    if closing:
        sg.close_session(g, member)
    max_records = body.get("max_records") or 500
    if max_records <= 0:
        max_records = 500
    deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000.0
    parts = sorted(session.partitions) if not closing and member in g.members else []
    max_bytes = body["max_bytes"] if body["max_bytes"] > 0 else 1 << 30
    while True:
        total = 0
        nbytes = 0
        for name, part in parts:
            if total >= max_records or nbytes >= max_bytes:
                break
            got = sg.acquire(g, member, name, part, max_records - total)
            if not got:
                continue
            pieces, missing = _read_records(bridge, name, part, got)
            if missing:  # deleted from the log meanwhile: nothing to deliver, archive them
                gone = set(missing)
                sg.acknowledge(g, member, name, part,
                               [{"first_offset": o, "last_offset": o, "acknowledge_types": [1]} for o in sorted(gone)])
                got = [x for x in got if x[0] not in gone]
            if not got:
                continue
            tid = bridge.topic_id(name)
            e = entries.setdefault((tid, part), _partition_entry(part))
            e["records"] = b"".join(pieces)
            e["acquired_records"] = [{"first_offset": f, "last_offset": la, "delivery_count": c}
                                     for f, la, c in _runs(got)]
            total += len(got)
            nbytes += len(e["records"])
        left = deadline - time.monotonic()
        if total or left <= 0 or not parts or acks:
            break
        # long poll: new records, or the earliest acquisition lock expiring, whichever comes first
        nd = sg.next_deadline(g, parts)
        wait = left if nd is None else max(0.0, min(left, nd - time.monotonic() + 0.001))
        store = bridge.store
        wants = [(n, p, store.get_max_offset_in_queue(n, p)) for n, p in parts]
        if wait > 0:
            await bridge.controller.arrival_hub.wait(wants, wait)
        if member not in g.members or g.sessions.get(member) is not session:
            break
    _save(sg)
    by_topic: dict = {}
    for (tid, part), e in entries.items():
        by_topic.setdefault(tid, []).append(e)
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": sg.lock_duration_ms,
            "responses": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()],
            "node_endpoints": []}


async def handle_share_acknowledge(bridge, conn, version: int, body: dict):
    gid, member, epoch = body.get("group_id") or "", body.get("member_id") or "", body["share_session_epoch"]

    def top(code: int, msg: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": msg, "responses": [], "node_endpoints": []}
    if await not_coordinator(bridge, gid):
        return top(ec.NOT_COORDINATOR)
    if epoch == 0:
        return top(ec.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session (epoch 0).")
    sg = share_groups(bridge)
    err, g, session = sg.open_session(gid, member, epoch)
    if err != ec.NONE:
        return top(err)
    acks = _apply_acks(bridge, sg, g, member, body["topics"])
    if epoch == -1:
        sg.close_session(g, member)
    _save(sg)
    by_topic: dict = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            code = acks.get((t["topic_id"], p["partition_index"]), ec.NONE)
            by_topic.setdefault(t["topic_id"], []).append(
                {"partition_index": p["partition_index"], "error_code": code, "error_message": None,
                 "current_leader": {"leader_id": -1, "leader_epoch": -1}})
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None,
            "responses": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()], "node_endpoints": []}


# ------------------------------------------------------------------------------- offsets (admin)
async def handle_describe_share_group_offsets(bridge, conn, version: int, body: dict):
    sg = share_groups(bridge)
    out = []
    for grp in body["groups"]:
        gid = grp["group_id"]
        entry = {"group_id": gid, "topics": [], "error_code": ec.NONE, "error_message": None}
        if await not_coordinator(bridge, gid):
            out.append(dict(entry, error_code=ec.NOT_COORDINATOR))
            continue
        wanted = None
        if grp.get("topics") is not None:
            wanted = [(t["topic_name"], p) for t in grp["topics"] for p in t["partitions"]]
        offsets = sg.start_offsets(gid, wanted)
        if offsets is None:
            out.append(dict(entry, error_code=ec.GROUP_ID_NOT_FOUND, error_message=f"Group {gid} not found."))
            continue
        by_topic: dict[str, list] = {}
        for (t, p), off in offsets.items():
            err = ec.NONE if _bounds(bridge, t, p) is not None else ec.UNKNOWN_TOPIC_OR_PARTITION
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": off, "leader_epoch": 0,
                                               "error_code": err, "error_message": None})
        entry["topics"] = [{"topic_name": t, "topic_id": bridge.topic_id(t), "partitions": ps}
                           for t, ps in by_topic.items()]
        out.append(entry)
    return {"throttle_time_ms": 0, "groups": out}


async def handle_alter_share_group_offsets(bridge, conn, version: int, body: dict):
    gid = body["group_id"]
    sg = share_groups(bridge)
    coord = not await not_coordinator(bridge, gid)
    kind = group_kind(bridge, gid) if coord else None
    out = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            if not coord:
                err = ec.NOT_COORDINATOR
            elif kind not in (None, "share"):
                err = ec.GROUP_ID_NOT_FOUND
            else:
                err = sg.alter_start_offset(gid, t["topic_name"], p["partition_index"], p["start_offset"])
            parts.append({"partition_index": p["partition_index"], "error_code": err, "error_message": None})
        out.append({"topic_name": t["topic_name"], "topic_id": bridge.topic_id(t["topic_name"]), "partitions": parts})
    _save(sg)
    return {"throttle_time_ms": 0, "responses": out}


async def handle_delete_share_group_offsets(bridge, conn, version: int, body: dict):
    gid = body["group_id"]
    if await not_coordinator(bridge, gid):
        return {"throttle_time_ms": 0, "error_code": ec.NOT_COORDINATOR, "error_message": None, "responses": []}
    sg = share_groups(bridge)
    out = []
    for t in body["topics"]:
        err, parts = sg.delete_offsets(gid, t["topic_name"])
        if err in (ec.GROUP_ID_NOT_FOUND, ec.NON_EMPTY_GROUP):
            return {"throttle_time_ms": 0, "error_code": err, "error_message": None, "responses": []}
        out.append({"topic_name": t["topic_name"], "topic_id": bridge.topic_id(t["topic_name"]),
                    "partitions": [{"partition_index": p, "error_code": ec.NONE, "error_message": None} for p in parts]})
    _save(sg)
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "responses": out}


HANDLERS = {
    76: handle_share_group_heartbeat,
    77: handle_share_group_describe,
    78: handle_share_fetch,
    79: handle_share_acknowledge,
    90: handle_describe_share_group_offsets,
    91: handle_alter_share_group_offsets,
    92: handle_delete_share_group_offsets,
}
