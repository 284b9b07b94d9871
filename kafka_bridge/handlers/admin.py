"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs: Kafka admin over RocketMQ topics
(queues = partitions; a replication factor other than 1 or -1 is refused) (SPEC §11).

In cluster mode (kafka_bridge.cluster) these act on every broker over RocketMQ remoting, as
`mqadmin updateTopic -c` / `deleteTopic -c` do: CreateTopics splits num_partitions over the brokers
in brokerName order (the first num_partitions % N brokers get one queue more; -1 = each broker gets
defaultTopicQueueNums), CreatePartitions adds the new queues to the last broker holding the topic (so
no existing partition changes its number), and both answer once the NameServer routes show the result.
"""
from __future__ import annotations

import asyncio
import time
import uuid

from rmq.broker.controller import TopicError
from rmq.broker.topic_config import topic_collision
from rmq.store.message_store import validate_topic

from .. import dynamic_configs, topic_configs
from ..admin_state import admin_state
from ..names import kafka_topic_error
from ..cluster import ClusterError, cluster_of, split_partitions
from ..protocol import error_codes as ec

MAX_PARTITIONS = 1024
_ZERO_UUID = uuid.UUID(int=0)

def _topic_config_entries(bridge, name: str, include_synonyms: bool = False) -> list[dict]:
    """DescribeConfigs entries of a topic: every Kafka topic config (topic_configs.DEFS), its value
    (the topic's own, or the broker's default) and where that comes from. Only Kafka topic configs
    are listed, so a client can write back with AlterConfigs everything it read (RocketMQ's queue
    numbers and perm are shown by `rmq admin topicRoute`, where RocketMQ tools look)."""
    tc = bridge.topic(name)
    attrs = tc.attributes if tc is not None else {}
    st = admin_state(bridge)
    with st.lock:
        dynamic = {k: dict(v) for k, v in st.broker_configs.items()}
    out = []
    for key, (default, source, synonym) in topic_configs.broker_defaults(bridge.store.config, bridge.config).items():
        own = attrs.get(key)
        d = topic_configs.DEFS[key]
        syn = []
        if include_synonyms:
            if own is not None:
                syn.append({"name": key, "value": own, "source": topic_configs.SOURCE_DYNAMIC_TOPIC})
        # a dynamic broker value of the synonym (this broker's, then the cluster default) is the
        # topic's default, as in Kafka
        dyn = dynamic_configs.dynamic_value(dynamic, bridge.node_id, synonym) if synonym else None
        if dyn is not None:
            if include_synonyms:
                syn.append({"name": synonym, "value": dyn[0], "source": dyn[1]})
            default, source = dyn
        elif include_synonyms and (synonym is not None or source == topic_configs.SOURCE_DEFAULT):
            syn.append({"name": synonym or key, "value": default, "source": source})
        out.append({"name": key, "value": own if own is not None else default, "read_only": False,
                    "config_source": topic_configs.SOURCE_DYNAMIC_TOPIC if own is not None else source,
                    "is_sensitive": False, "synonyms": syn, "config_type": topic_configs.TYPE_CODES[d.type],
                    "documentation": d.doc or None})
    return out


def _topic_configs(bridge, name: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _topic_config_entries(bridge, name)}


def _admin_error(exc: ClusterError) -> int:
    """A broker or NameServer that failed an admin step: REQUEST_TIMED_OUT or UNKNOWN_SERVER_ERROR
    (with the broker's remark as the error message)."""
    return ec.REQUEST_TIMED_OUT if exc.timeout else ec.UNKNOWN_SERVER_ERROR


def _route_wait_s(body: dict) -> float:
    """How long an admin request waits for the routes: its timeout_ms, at most 10 s."""
    return max(0.5, min(body.get("timeout_ms", 5000) or 5000, 10_000) / 1000.0)


def _create_result(name: str) -> dict:
    """A CreateTopics result before the checks: no error yet, nothing known."""
    return {"name": name, "topic_id": _ZERO_UUID, "error_code": ec.NONE, "error_message": None,
            "num_partitions": -1, "replication_factor": -1, "configs": None}


def _spec_error(t: dict, node_ids: list[int] | None = None) -> tuple[int, str] | None:
    """The CreateTopics checks that do not depend on where the topic goes: replication factor,
    manual assignments, topic configs. (error code, message) or None. `node_ids`: the brokers a
    manual assignment may name (this broker alone when not in a cluster)."""
    nodes = sorted(node_ids or [])
    rf = t["replication_factor"]
    if t["assignments"]:
        # Kafka: with assignments, num_partitions and replication_factor must be -1
        if t["num_partitions"] != -1 or rf != -1:
            return (ec.INVALID_REQUEST, "num_partitions and replication_factor must be -1 when a replica "
                                        "assignment is given")
        seen = set()
        for a in t["assignments"]:
            ids = list(a["broker_ids"])
            if a["partition_index"] in seen or not ids:
                return ec.INVALID_REPLICA_ASSIGNMENT, f"partition {a['partition_index']}: empty or repeated"
            seen.add(a["partition_index"])
            missing = [b for b in ids if b not in nodes]
            if missing:
                return (ec.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {a['partition_index']}: unknown broker id(s) {missing} (brokers: {nodes})")
            if len(ids) > 1:
                return (ec.INVALID_REPLICATION_FACTOR,
                        f"Replication factor: {len(ids)} larger than available brokers for one queue: 1 "
                        "(this broker keeps one copy per queue; replication is master/slave)")
        if seen != set(range(len(seen))):
            return ec.INVALID_REPLICA_ASSIGNMENT, f"partitions must be numbered 0..{len(seen) - 1}"
    elif rf not in (-1, 1):
        return (ec.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {rf} larger than available brokers: 1 "
                "(this broker keeps one copy per queue; replication is master/slave, not per topic)")
    names = [c["name"] for c in t["configs"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        return ec.INVALID_REQUEST, f"topic config(s) given twice: {', '.join(dup)}"
    bad = topic_configs.check({c["name"]: c["value"] for c in t["configs"]})
    if bad is not None:
        return ec.INVALID_CONFIG, bad[1]
    return None


def _requested_configs(t: dict) -> dict[str, str]:
    return {c["name"]: topic_configs.canonical(c["name"], c["value"]) for c in t["configs"]}


def _collision(bridge, name: str, names) -> str | None:
    """Kafka refuses a topic whose name differs from an existing one only by '.' against '_'
    (their metric names would collide)."""
    return topic_collision(name, names)


def _created(bridge, res: dict, partitions: int) -> None:
    """Fill a successful CreateTopics result: id, partition count, the topic's configs."""
    name = res["name"]
    res.update(topic_id=bridge.topic_id(name), num_partitions=partitions, replication_factor=1,
               configs=[{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                        for e in _topic_config_entries(bridge, name)])


async def _cluster_create_topics(bridge, cl, body: dict) -> dict:
    results = []
    await cl.refresh_nodes()  # the brokers up now (a Kafka cluster gives a new topic's partitions to live brokers)
    nodes = cl.masters  # queues are created on masters; their slaves copy them
    if not nodes:
        return {"throttle_time_ms": 0, "topics": [
            {**_create_result(t["name"]), "error_code": ec.BROKER_NOT_AVAILABLE,
             "error_message": "no master broker is up: topics are created on masters (a slave serves reads only)"}
            for t in body["topics"]]}
    deadline = time.monotonic() + _route_wait_s(body)
    for t in body["topics"]:
        name, n = t["name"], t["num_partitions"]
        res = _create_result(name)
        if t["assignments"]:
            # a manual assignment: each broker gets the partitions assigned to it, in brokerName order
            ids = [n_.node_id for n_ in nodes]
            counts = [sum(1 for a in t["assignments"] if list(a["broker_ids"])[:1] == [i]) for i in ids]
            order = [list(a["broker_ids"])[:1] for a in sorted(t["assignments"], key=lambda a: a["partition_index"])]
            laid = [[i] for i, c in zip(ids, counts) for _ in range(c)]
            if order != laid and all(o and o[0] in ids for o in order):
                res["error_code"] = ec.INVALID_REPLICA_ASSIGNMENT
                res["error_message"] = ("partitions are numbered across brokers in brokerName order: the first "
                                        f"{counts[0]} must be on broker {ids[0]}, and so on")
                results.append(res)
                continue
        else:
            counts = [bridge.config.defaultTopicQueueNums] * len(nodes) if n == -1 else split_partitions(max(n, 0), len(nodes))
        total = sum(counts)
        reason = kafka_topic_error(name) or validate_topic(name) or _collision(bridge, name, cl.known_topic_names())
        if reason:
            res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, reason
        elif await cl.layout(name, refresh=True) is not None:
            res["error_code"], res["error_message"] = ec.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif not 1 <= total <= MAX_PARTITIONS * len(nodes) or max(counts) > MAX_PARTITIONS:
            res["error_code"] = ec.INVALID_PARTITIONS
            res["error_message"] = f"num_partitions must be 1..{MAX_PARTITIONS * len(nodes)} ({MAX_PARTITIONS} per broker)"
        elif (err := _spec_error(t, [n_.node_id for n_ in nodes])) is not None:
            res["error_code"], res["error_message"] = err
        elif not body.get("validate_only"):
            try:
                await asyncio.gather(*(cl.create_topic_on(node.broker_addr, name, q)
                                       for node, q in zip(nodes, counts) if q > 0))
            except ClusterError as exc:
                res["error_code"], res["error_message"] = _admin_error(exc), str(exc)
            else:
                lay = await cl.wait_layout(name, lambda lay: lay is not None and lay.total == total,
                                           max(0.0, deadline - time.monotonic()))
                if lay is None or lay.total != total:
                    res["error_code"] = ec.REQUEST_TIMED_OUT
                    res["error_message"] = "created on the brokers; the NameServer routes do not show it yet"
        if res["error_code"] == ec.NONE:
            _created(bridge, res, total)
        results.append(res)
    return {"throttle_time_ms": 0, "topics": results}


async def handle_create_topics(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    if cl is not None:
        return await _cluster_create_topics(bridge, cl, body)
    results = []
    for t in body["topics"]:
        name = t["name"]
        n = t["num_partitions"]
        res = _create_result(name)
        if t["assignments"]:
            n = len(t["assignments"])
        elif n == -1:
            n = bridge.config.defaultTopicQueueNums
        reason = kafka_topic_error(name) or validate_topic(name) or _collision(bridge, name, bridge.controller.topic_config_manager.table)
        if reason:
            res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, reason
        elif bridge.topic(name) is not None:
            res["error_code"], res["error_message"] = ec.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif not 1 <= n <= MAX_PARTITIONS:
            res["error_code"], res["error_message"] = ec.INVALID_PARTITIONS, f"num_partitions must be 1..{MAX_PARTITIONS}"
        elif (err := _spec_error(t, [bridge.node_id])) is not None:
            res["error_code"], res["error_message"] = err
        elif not body.get("validate_only"):
            try:
                bridge.controller.create_topic(name, n, attributes=_requested_configs(t))
            except TopicError as exc:
                res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, str(exc)
        if res["error_code"] == ec.NONE:
            _created(bridge, res, n)
        results.append(res)
    # Answer once the new queues' files exist (the store's allocator thread makes them), as a
    # Kafka broker answers once the partitions exist: the first produce then only writes.
    if not body.get("validate_only") and any(r["error_code"] == ec.NONE for r in results):
        done = bridge.controller.store.queues_prepared_event()
        await asyncio.to_thread(done.wait, min(max(body.get("timeout_ms") or 0, 0) / 1000 or 30.0, 30.0))
    return {"throttle_time_ms": 0, "topics": results}


async def handle_delete_topics(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    names = []
    if version >= 6:
        for t in body["topics"]:
            name = t["name"] if t["name"] is not None else bridge.topic_by_id(t["topic_id"])
            if name is None and cl is not None:
                name = next((n for n in cl.known_topic_names() if bridge.topic_id(n) == t["topic_id"]), None)
            names.append((name, t.get("topic_id")))
    else:
        names = [(n, None) for n in body["topic_names"]]
    out = []
    for name, tid in names:
        r = {"name": name, "topic_id": tid or _ZERO_UUID, "error_code": ec.NONE, "error_message": None}
        if name is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_ID
        elif cl is not None:  # every broker of the route, then every NameServer
            lay = await cl.layout(name, refresh=True)
            if lay is None:
                r["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                r["topic_id"] = bridge.topic_id(name)
                try:
                    await cl.delete_topic_everywhere(name, lay.broker_addrs)
                except ClusterError as exc:
                    r["error_code"], r["error_message"] = _admin_error(exc), str(exc)
        elif bridge.topic(name) is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        else:
            r["topic_id"] = bridge.topic_id(name)
            bridge.controller.delete_topic(name)
            if bridge.klog is not None:
                bridge.klog.delete_topic(name)
        out.append(r)
    return {"throttle_time_ms": 0, "responses": out}


def _new_partitions_error(assignments, added: int, node_ids, home: int | None = None) -> str | None:
    """Kafka's checks of CreatePartitions' manual assignments (KRaft's ReplicationControlManager
    wording, Kafka 3.9): one replica list per added partition, each of the topic's replication
    factor (1 here), naming registered brokers once each. `home`: in a cluster the broker that must
    hold every new partition (the last broker of the topic, so no partition is renumbered).
    INVALID_REPLICA_ASSIGNMENT's message, or None."""
    lists = [list(a["broker_ids"]) for a in assignments]
    if len(lists) != added:
        return (f"Attempted to add {added} additional partition(s), but only {len(lists)} assignment(s) were "
                "specified.")
    for ids in lists:
        if not ids:
            return "The manual partition assignment includes an empty replica list."
        for b in ids:
            if b not in node_ids:
                return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        if len(set(ids)) != len(ids):
            dup = next(b for b in ids if ids.count(b) > 1)
            return f"The manual partition assignment includes the broker {dup} more than once."
        if len(ids) != 1:
            return (f"The manual partition assignment includes a partition with {len(ids)} replica(s), but this is "
                    "not consistent with previous partitions, which have 1 replica(s).")
    if home is not None:
        off = sorted({ids[0] for ids in lists if ids[0] != home})
        if off:
            return (f"new partitions must go to broker {home} (the last broker of the topic: partitions are "
                    f"numbered across brokers in brokerName order, so a new queue on broker(s) {off} would "
                    "renumber the partitions after it)")
    return None


async def _cluster_create_partitions(bridge, cl, body: dict) -> dict:
    results = []
    deadline = time.monotonic() + _route_wait_s(body)
    for t in body["topics"]:
        name, count = t["name"], t["count"]
        r = {"name": name, "error_code": ec.NONE, "error_message": None}
        lay = await cl.layout(name, refresh=True)
        last = lay.segments[-1] if lay is not None and lay.segments else None
        if last is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        elif count <= lay.total:
            r["error_code"] = ec.INVALID_PARTITIONS
            r["error_message"] = f"Topic currently has {lay.total} partitions, {count} would not be an increase."
        elif last.count + count - lay.total > MAX_PARTITIONS:
            r["error_code"] = ec.INVALID_PARTITIONS
            r["error_message"] = (f"new partitions go to {last.node.broker_name} (the last broker of the topic, so "
                                  f"no partition is renumbered); it may hold at most {MAX_PARTITIONS}")
        elif t["assignments"] is not None and (why := _new_partitions_error(
                t["assignments"], count - lay.total, [n_.node_id for n_ in cl.masters], last.node.node_id)):
            r["error_code"], r["error_message"] = ec.INVALID_REPLICA_ASSIGNMENT, why
        elif not body.get("validate_only"):
            local = bridge.topic(name) if cl.is_local(last) else None
            try:
                await cl.create_topic_on(last.node.broker_addr, name, last.count + count - lay.total, perm=last.perm,
                                         order=bool(local.order) if local is not None else False)
            except ClusterError as exc:
                r["error_code"], r["error_message"] = _admin_error(exc), str(exc)
            else:
                lay = await cl.wait_layout(name, lambda x: x is not None and x.total == count,
                                           max(0.0, deadline - time.monotonic()))
                if lay is None or lay.total != count:
                    r["error_code"] = ec.REQUEST_TIMED_OUT
                    r["error_message"] = "added on the broker; the NameServer routes do not show it yet"
        results.append(r)
    return {"throttle_time_ms": 0, "results": results}


async def handle_create_partitions(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    if cl is not None:
        return await _cluster_create_partitions(bridge, cl, body)
    results = []
    for t in body["topics"]:
        name, count = t["name"], t["count"]
        r = {"name": name, "error_code": ec.NONE, "error_message": None}
        tc = bridge.topic(name)
        if tc is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        elif count <= bridge.partition_count(tc):
            r["error_code"] = ec.INVALID_PARTITIONS
            r["error_message"] = f"Topic currently has {bridge.partition_count(tc)} partitions, {count} would not be an increase."
        elif count > MAX_PARTITIONS:
            r["error_code"], r["error_message"] = ec.INVALID_PARTITIONS, f"at most {MAX_PARTITIONS} partitions"
        elif t["assignments"] is not None and (why := _new_partitions_error(
                t["assignments"], count - bridge.partition_count(tc), [bridge.node_id])):
            r["error_code"], r["error_message"] = ec.INVALID_REPLICA_ASSIGNMENT, why
        elif not body.get("validate_only"):
            bridge.controller.create_topic(name, count, read_queue_nums=count, perm=tc.perm, order=tc.order)
        results.append(r)
    return {"throttle_time_ms": 0, "results": results}


RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32


async def handle_describe_configs(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    results = []
    for res in body["resources"]:
        rtype, rname = res["resource_type"], res["resource_name"]
        keys = res["configuration_keys"]
        r = {"error_code": ec.NONE, "error_message": None, "resource_type": rtype, "resource_name": rname, "configs": []}
        if rtype == RESOURCE_TOPIC:
            if (await cl.layout(rname) is None) if cl is not None else bridge.topic(rname) is None:
                r["error_code"], r["error_message"] = ec.UNKNOWN_TOPIC_OR_PARTITION, f"topic {rname} not found"
                results.append(r)
                continue
            entries = _topic_config_entries(bridge, rname, bool(body.get("include_synonyms")))
            r["configs"] = [e for e in entries if keys is None or e["name"] in keys]
            if not body.get("include_documentation"):
                for e in r["configs"]:
                    e["documentation"] = None
            results.append(r)
            continue
        elif rtype == RESOURCE_BROKER:
            node = cl.node_id if cl is not None else bridge.node_id
            if rname not in ("", str(node)):
                r["error_code"], r["error_message"] = ec.INVALID_REQUEST, (
                    f"Unexpected broker id, expected {node} or empty string, but received {rname}")
                results.append(r)
                continue
            st = admin_state(bridge)
            with st.lock:
                dynamic = {k: dict(v) for k, v in st.broker_configs.items()}
            entries = dynamic_configs.broker_entries(bridge.config, bridge.store.config, node, dynamic,
                                                     default_resource=rname == "",
                                                     include_synonyms=bool(body.get("include_synonyms")))
            r["configs"] = [e for e in entries if keys is None or e["name"] in keys]
            results.append(r)
            continue
        elif rtype == RESOURCE_GROUP:
            if not rname:
                r["error_code"], r["error_message"] = ec.INVALID_REQUEST, "Group name must not be empty"
                results.append(r)
                continue
            entries = dynamic_configs.group_entries(_group_overrides(bridge, rname),
                                                    bool(body.get("include_synonyms")))
            r["configs"] = [e for e in entries if keys is None or e["name"] in keys]
            results.append(r)
            continue
        else:
            r["error_code"], r["error_message"] = ec.INVALID_REQUEST, f"resource type {rtype} not supported"
            results.append(r)
            continue
    return {"throttle_time_ms": 0, "results": results}


# ------------------------------------------------------------------ AlterConfigs, IncrementalAlterConfigs
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_SHARE_RESET = "share.auto.offset.reset"  # a group config the share-group coordinator applies


def _group_overrides(bridge, group: str) -> dict[str, str]:
    """A group's own group configs: admin_state's, and share.auto.offset.reset from the share groups."""
    st = admin_state(bridge)
    with st.lock:
        out = dict(st.group_configs.get(group, {}))
    sg = getattr(bridge, "share_groups", None)
    g = sg.groups.get(group) if sg is not None else None
    if g is not None and g.auto_offset_reset is not None:
        out[_SHARE_RESET] = g.auto_offset_reset
    else:
        out.pop(_SHARE_RESET, None)
    return out


def _alter_topic(bridge, name: str, new: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    """Validate the topic's whole new config table, then store it (unless validate_only)."""
    if bridge.topic(name) is None:
        return ec.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
    bad = topic_configs.check(new)
    if bad is not None:
        return ec.INVALID_CONFIG, bad[1]
    if not validate_only:
        bridge.controller.set_topic_attributes(name, {k: topic_configs.canonical(k, v) for k, v in new.items()})
    return ec.NONE, None


def _alter_result(res: dict, code: int, msg: str | None) -> dict:
    return {"error_code": code, "error_message": msg, "resource_type": res["resource_type"],
            "resource_name": res["resource_name"]}


def _resource_error(bridge, res: dict, cl) -> tuple[int, str] | None:
    rtype, rname = res["resource_type"], res["resource_name"]
    if rtype == RESOURCE_BROKER:
        node = cl.node_id if cl is not None else bridge.node_id
        if rname not in ("", str(node)):
            return ec.INVALID_REQUEST, f"Unexpected broker id, expected {node} or empty string, but received {rname}"
        return None
    if rtype == RESOURCE_GROUP:
        return (ec.INVALID_REQUEST, "Group name must not be empty") if not rname else None
    if rtype != RESOURCE_TOPIC:
        return ec.INVALID_REQUEST, f"resource type {rtype} not supported"
    if cl is not None:
        return ec.INVALID_REQUEST, "topic configs are kept per broker; altering them in a cluster is not supported yet"
    return None


_CODES = {"INVALID_REQUEST": ec.INVALID_REQUEST, "INVALID_CONFIG": ec.INVALID_CONFIG}


def _apply_ops(defs: dict, current: dict[str, str], configs: list[dict], unknown: str) -> tuple[dict, tuple | None]:
    """IncrementalAlterConfigs' operations on `current` (a copy is returned): SET, DELETE (back to
    the default), APPEND / SUBTRACT (list configs only). (new table, (code, message) or None)."""
    new = dict(current)
    for c in configs:
        key, op, value = c["name"], c["config_operation"], c["value"]
        d = defs.get(key)
        if op == OP_SET:
            new[key] = value
        elif op == OP_DELETE:
            new.pop(key, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if d is None:
                return new, (ec.INVALID_CONFIG, f"{unknown}: {key}")
            if d.type != "list":
                return new, (ec.INVALID_CONFIG, f"Config value append/subtract is not allowed for config key "
                                                f"{key} (not a list)")
            cur = [x for x in new.get(key, d.default or "").split(",") if x]
            items = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                cur += [x for x in items if x not in cur]
            else:
                cur = [x for x in cur if x not in items]
            new[key] = ",".join(cur)
        else:
            return new, (ec.INVALID_REQUEST, f"unknown config operation {op} for {key}")
    return new, None


def _store_broker(bridge, rname: str, new: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    """Validate a broker resource's whole new set of dynamic configs, then keep it (kafkaAdmin.json)."""
    bad = dynamic_configs.check_broker(new)
    if bad is not None:
        return _CODES[bad[0]], bad[1]
    if not validate_only:
        st = admin_state(bridge)
        with st.lock:
            canon = {k: dynamic_configs.canonical(dynamic_configs.BROKER_DYNAMIC, k, v) for k, v in new.items()}
            if canon:
                st.broker_configs[rname] = canon
            else:
                st.broker_configs.pop(rname, None)
        st.changed()
    return ec.NONE, None


def _store_group(bridge, group: str, new: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    """Validate a group's whole new set of group configs, then keep it; share.auto.offset.reset goes to
    the share-group coordinator, which applies it."""
    bad = dynamic_configs.check_group(new)
    if bad is not None:
        return _CODES[bad[0]], bad[1]
    if not validate_only:
        canon = {k: dynamic_configs.canonical(dynamic_configs.GROUP_DEFS, k, v) for k, v in new.items()}
        reset = canon.pop(_SHARE_RESET, None)
        from .share import share_groups, _save
        sg = share_groups(bridge)
        g = sg.groups.get(group)
        if reset is not None or (g is not None and g.auto_offset_reset is not None):
            sg.set_auto_offset_reset(group, reset)
            _save(sg)
        st = admin_state(bridge)
        with st.lock:
            if canon:
                st.group_configs[group] = canon
            else:
                st.group_configs.pop(group, None)
        st.changed()
    return ec.NONE, None


async def handle_alter_configs(bridge, conn, version: int, body: dict):
    """AlterConfigs replaces a resource's whole set of configs (a topic's, a broker's dynamic ones, a
    group's) with the given one."""
    cl = await cluster_of(bridge)
    out = []
    for res in body["resources"]:
        err = _resource_error(bridge, res, cl)
        if err is not None:
            out.append(_alter_result(res, *err))
            continue
        new = {c["name"]: c["value"] for c in res["configs"]}
        rtype, rname, vo = res["resource_type"], res["resource_name"], body["validate_only"]
        if rtype == RESOURCE_BROKER:
            out.append(_alter_result(res, *_store_broker(bridge, rname, new, vo)))
        elif rtype == RESOURCE_GROUP:
            out.append(_alter_result(res, *_store_group(bridge, rname, new, vo)))
        else:
            out.append(_alter_result(res, *_alter_topic(bridge, rname, new, vo)))
    return {"throttle_time_ms": 0, "responses": out}


async def handle_incremental_alter_configs(bridge, conn, version: int, body: dict):
    """IncrementalAlterConfigs: SET, DELETE (back to the default), APPEND / SUBTRACT (list configs)
    on a topic, a broker (this broker's id, or "" for the cluster default) or a group."""
    cl = await cluster_of(bridge)
    out = []
    for res in body["resources"]:
        err = _resource_error(bridge, res, cl)
        if err is not None:
            out.append(_alter_result(res, *err))
            continue
        rtype, name, vo = res["resource_type"], res["resource_name"], body["validate_only"]
        if rtype == RESOURCE_BROKER:
            st = admin_state(bridge)
            with st.lock:
                cur = dict(st.broker_configs.get(name, {}))
            new, problem = _apply_ops(dynamic_configs.BROKER_DYNAMIC, cur, res["configs"], "Unknown broker config name")
            out.append(_alter_result(res, *(problem or _store_broker(bridge, name, new, vo))))
            continue
        if rtype == RESOURCE_GROUP:
            new, problem = _apply_ops(dynamic_configs.GROUP_DEFS, _group_overrides(bridge, name), res["configs"],
                                      "Unknown group config name")
            out.append(_alter_result(res, *(problem or _store_group(bridge, name, new, vo))))
            continue
        tc = bridge.topic(name)
        if tc is None:
            out.append(_alter_result(res, ec.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"))
            continue
        unknown = next((c["name"] for c in res["configs"] if c["name"] not in topic_configs.DEFS), None)
        if unknown is not None:
            out.append(_alter_result(res, ec.INVALID_CONFIG, f"Unknown topic config name: {unknown}"))
            continue
        new, problem = _apply_ops(topic_configs.DEFS, tc.attributes, res["configs"], "Unknown topic config name")
        if problem is not None:
            out.append(_alter_result(res, *problem))
            continue
        out.append(_alter_result(res, *_alter_topic(bridge, name, new, vo)))
    return {"throttle_time_ms": 0, "responses": out}
