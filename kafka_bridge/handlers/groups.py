"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups, OffsetCommit,
OffsetFetch: the classic consumer-group protocol over the shared offset table (SPEC §4, §11).

In cluster mode (kafka_bridge.cluster) only the group's coordinator node answers these; the others
say NOT_COORDINATOR. The coordinator keeps offsets on the brokers owning the queues through
ClusterOffsetStore: the remote reads are done before, and the remote writes awaited after, the
GroupCoordinator's (synchronous) offset calls."""
from __future__ import annotations

from ..authorized_ops import authorized_operations
from ..cluster import cluster_of
from ..group_coordinator import JoinResult, SyncResult
from ..protocol import error_codes as ec


def _host(conn) -> str:
    return f"/{conn.peer[0]}"


async def not_coordinator(bridge, group_id) -> bool:
    """True in cluster mode when another node coordinates this group."""
    if bridge.cluster is None or not group_id:
        return False
    cl = await cluster_of(bridge)
    return cl is not None and not cl.is_coordinator(group_id)


def _other_protocol(bridge, group_id: str) -> bool:
    """True when a KIP-848 consumer group or a KIP-932 share group with members holds group_id."""
    for attr in ("consumer_groups", "share_groups"):
        groups = getattr(bridge, attr, None)
        if groups is not None and groups.owns(group_id):
            return True
    return False


async def handle_join_group(bridge, conn, version: int, body: dict):
    if await not_coordinator(bridge, body["group_id"]):
        r = JoinResult.error(body["member_id"], ec.NOT_COORDINATOR)
    elif _other_protocol(bridge, body["group_id"]):  # a live consumer (KIP-848) or share group holds the id
        r = JoinResult.error(body["member_id"], ec.INCONSISTENT_GROUP_PROTOCOL)
    else:
        r = await bridge.coordinator.join_group(
            body["group_id"], body["member_id"], body.get("group_instance_id"), conn.client_id or "", _host(conn),
            body["session_timeout_ms"], body["rebalance_timeout_ms"] if version >= 1 else body["session_timeout_ms"],
            body["protocol_type"], [(p["name"], p["metadata"]) for p in body["protocols"]], version >= 4)
    return {"throttle_time_ms": 0, "error_code": r.error_code, "generation_id": r.generation_id,
            "protocol_type": r.protocol_type, "protocol_name": r.protocol_name if version >= 7 or r.protocol_name else "",
            "leader": r.leader or "", "skip_assignment": False, "member_id": r.member_id or "",
            "members": [{"member_id": m, "group_instance_id": gi, "metadata": md} for m, gi, md in r.members]}


async def handle_sync_group(bridge, conn, version: int, body: dict):
    if await not_coordinator(bridge, body["group_id"]):
        r = SyncResult(ec.NOT_COORDINATOR)
    else:
        r = await bridge.coordinator.sync_group(
            body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id"),
            body.get("protocol_type"), body.get("protocol_name"),
            {a["member_id"]: a["assignment"] for a in body["assignments"]})
    return {"throttle_time_ms": 0, "error_code": r.error_code, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name, "assignment": r.assignment or b""}


async def handle_heartbeat(bridge, conn, version: int, body: dict):
    if await not_coordinator(bridge, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ec.NOT_COORDINATOR}
    err = bridge.coordinator.heartbeat(body["group_id"], body["generation_id"], body["member_id"],
                                       body.get("group_instance_id"))
    return {"throttle_time_ms": 0, "error_code": err}


async def handle_leave_group(bridge, conn, version: int, body: dict):
    if version >= 3:
        members = [(m["member_id"], m.get("group_instance_id")) for m in body["members"]]
    else:
        members = [(body["member_id"], None)]
    if await not_coordinator(bridge, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ec.NOT_COORDINATOR, "members": []}
    err, results = bridge.coordinator.leave_group(body["group_id"], members)
    if version < 3 and err == ec.NONE and results:
        err = results[0][2]  # v0-v2 carry the single member's error at the top level
    return {"throttle_time_ms": 0, "error_code": err,
            "members": [{"member_id": m, "group_instance_id": gi, "error_code": e} for m, gi, e in results]}


async def handle_list_groups(bridge, conn, version: int, body: dict):
    states = body.get("states_filter") or None
    groups = bridge.coordinator.list_groups(states)
    cl = await cluster_of(bridge)
    if cl is not None:  # each node lists the groups it coordinates; admin clients ask every node
        groups = [g for g in groups if cl.is_coordinator(g[0])]
    listed = [{"group_id": g, "protocol_type": pt, "group_state": st, "group_type": "classic"} for g, pt, st in groups]
    wanted_states = {s.lower() for s in states or ()}
    for attr, ptype, gtype in (("consumer_groups", "consumer", "consumer"), ("share_groups", "share", "share")):
        v2 = getattr(bridge, attr, None)  # KIP-848 / KIP-932 groups this node knows
        if v2 is None:
            continue
        names = {g["group_id"]: g for g in listed}
        for gid, st in v2.list_groups():
            if cl is not None and not cl.is_coordinator(gid) or states and st.lower() not in wanted_states:
                continue
            names.pop(gid, None)  # a group known from its offsets only is listed with its kind
            names[gid] = {"group_id": gid, "protocol_type": ptype, "group_state": st, "group_type": gtype}
        listed = list(names.values())
    types = body.get("types_filter") or None
    if types:
        wanted = {t.lower() for t in types}
        listed = [g for g in listed if g["group_type"] in wanted]
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "groups": listed}


async def handle_describe_groups(bridge, conn, version: int, body: dict):
    out = []
    for gid in body["groups"]:
        if await not_coordinator(bridge, gid):
            out.append({"error_code": ec.NOT_COORDINATOR, "group_id": gid, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": [], "authorized_operations": -2147483648})
            continue
        d = bridge.coordinator.describe_group(gid)
        out.append({"error_code": d.get("error_code", ec.NONE), "group_id": gid, "group_state": d.get("state", "Dead"),
                    "protocol_type": d.get("protocol_type") or "", "protocol_data": d.get("protocol") or "",
                    "members": [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                                 "client_id": m.get("client_id", ""), "client_host": m.get("client_host", ""),
                                 "member_metadata": m.get("metadata", b""), "member_assignment": m.get("assignment", b"")}
                                for m in d.get("members", [])],
                    "authorized_operations": authorized_operations(bridge, conn, "group", gid)
                    if body.get("include_authorized_operations") else -2147483648})
    return {"throttle_time_ms": 0, "groups": out}


async def handle_offset_commit(bridge, conn, version: int, body: dict):
    offsets = []
    unknown = []
    cl = await cluster_of(bridge)
    if cl is not None and body["group_id"] and not cl.is_coordinator(body["group_id"]):
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": ec.NOT_COORDINATOR}
                                               for p in t["partitions"]]} for t in body["topics"]]}
    for t in body["topics"]:
        if cl is not None:
            layout = await cl.layout(t["name"], max((p["partition_index"] for p in t["partitions"]), default=None))
            count = layout.total if layout is not None else None
        else:
            tc = bridge.topic(t["name"])
            count = bridge.partition_count(tc) if tc is not None else None
        for p in t["partitions"]:
            if count is None or not 0 <= p["partition_index"] < count:
                unknown.append((t["name"], p["partition_index"]))
            else:
                offsets.append((t["name"], p["partition_index"], p["committed_offset"], p.get("committed_metadata"),
                                p.get("committed_leader_epoch", -1)))
    epoch = body.get("generation_id_or_member_epoch", -1) if version >= 1 else -1
    member = body.get("member_id", "") if version >= 1 else ""
    v2 = getattr(bridge, "consumer_groups", None)  # a KIP-848 group: member id and epoch checked there
    v2_err = v2.validate_commit(body["group_id"], member, epoch) if v2 is not None else None
    if v2_err is None:
        results = bridge.coordinator.commit_offsets(body["group_id"], epoch, member, body.get("group_instance_id"),
                                                    offsets)
    elif v2_err == ec.NONE:
        results = bridge.coordinator.commit_offsets_unchecked(body["group_id"], offsets)
    else:
        results = [(o[0], o[1], v2_err) for o in offsets]
    if cl is not None:  # the commits of other brokers' partitions: wait for those brokers' answers
        store = bridge.coordinator.offset_store
        failed = await store.settle(store.take_pending())
        results = [(t, p, failed.get((t, p), err) if err == ec.NONE else err) for t, p, err in results]
    by_topic: dict[str, list] = {}
    for topic, part, err in results:
        by_topic.setdefault(topic, []).append({"partition_index": part, "error_code": err})
    for topic, part in unknown:
        by_topic.setdefault(topic, []).append({"partition_index": part, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION})
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def _fetch_group(bridge, group_id: str, topics, version: int) -> tuple[int, list]:
    parts = None
    if topics is not None:
        parts = [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    cl = await cluster_of(bridge)
    unavailable: set = set()
    if cl is not None and group_id:
        if not cl.is_coordinator(group_id):
            err = ec.NOT_COORDINATOR
        else:
            store = bridge.coordinator.offset_store
            if parts is None:
                err, parts = await store.committed_partitions(group_id)
            else:
                err = await store.prefetch(group_id, parts)
                # offsets kept by a broker that is down: unknown, not "none" (a client that took -1
                # would reset to auto.offset.reset and read the partition again, or skip it), unless
                # known here or the group has no offset known here at all (a new group)
                unavailable = store.offline_partitions(group_id, parts)
        if err != ec.NONE:  # top-level error (v2+), repeated per partition for v0-v1
            by_topic: dict[str, list] = {}
            for topic, part in parts or ():
                by_topic.setdefault(topic, []).append({"partition_index": part, "committed_offset": -1,
                                                       "committed_leader_epoch": -1, "metadata": "",
                                                       "error_code": err})
            return err, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
    rows = bridge.coordinator.fetch_offsets(group_id, parts)
    by_topic: dict[str, list] = {}
    for topic, part, off, meta, err in rows:
        if (topic, part) in unavailable and err == ec.NONE:
            # retried per partition: librdkafka asks again for UNSTABLE_OFFSET_COMMIT (v7+), kafka-python
            # and the Java client for COORDINATOR_LOAD_IN_PROGRESS; the other partitions start meanwhile
            off, meta = -1, ""
            err = ec.UNSTABLE_OFFSET_COMMIT if version >= 7 else ec.COORDINATOR_LOAD_IN_PROGRESS
        by_topic.setdefault(topic, []).append({"partition_index": part, "committed_offset": off,
                                               "committed_leader_epoch": bridge.coordinator.leader_epoch_for(
                                                   group_id, topic, part, off),
                                               "metadata": meta if meta is not None else "",
                                               "error_code": err})
    return ec.NONE, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


async def handle_offset_fetch(bridge, conn, version: int, body: dict):
    if version >= 8:
        groups = []
        for g in body["groups"]:
            err, topics = await _fetch_group(bridge, g["group_id"], g["topics"], version)
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": err})
        return {"throttle_time_ms": 0, "groups": groups}
    err, topics = await _fetch_group(bridge, body["group_id"], body["topics"], version)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": err}


async def handle_init_producer_id(bridge, conn, version: int, body: dict):
    txn_id = body["transactional_id"]
    if txn_id is not None and await cluster_of(bridge) is not None:
        return {"throttle_time_ms": 0, "error_code": ec.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
    if txn_id is not None and bridge.txn is None:
        return {"throttle_time_ms": 0, "error_code": ec.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
    if txn_id is not None:
        return await bridge.txn.init_producer_id(txn_id, body["transaction_timeout_ms"], body.get("producer_id", -1),
                                                 body.get("producer_epoch", -1))
    err, pid, epoch = bridge.producers.init_producer(None, body["transaction_timeout_ms"], body.get("producer_id", -1),
                                                     body.get("producer_epoch", -1))
    return {"throttle_time_ms": 0, "error_code": err, "producer_id": pid, "producer_epoch": epoch}
