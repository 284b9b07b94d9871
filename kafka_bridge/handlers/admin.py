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
from rmq.store.message_store import validate_topic

from ..cluster import ClusterError, cluster_of, split_partitions
from ..protocol import error_codes as ec

MAX_PARTITIONS = 1024
_ZERO_UUID = uuid.UUID(int=0)
# Topic configs a Kafka admin client may pass and we accept (and report back).
KNOWN_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(72 * 3600 * 1000),
                       "message.timestamp.type": "CreateTime", "max.message.bytes": None,
                       "compression.type": "producer", "min.insync.replicas": "1"}


def _topic_configs(bridge, name: str) -> dict[str, str]:
    cfg = dict(KNOWN_TOPIC_CONFIGS)
    cfg["retention.ms"] = str(bridge.store.config.fileReservedTime * 3600 * 1000)
    cfg["max.message.bytes"] = str(bridge.store.config.maxMessageSize)
    tc = bridge.topic(name)
    if tc is not None:
        cfg["rocketmq.readQueueNums"] = str(tc.readQueueNums)
        cfg["rocketmq.writeQueueNums"] = str(tc.writeQueueNums)
        cfg["rocketmq.perm"] = str(tc.perm)
    return cfg


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


def _spec_error(t: dict) -> tuple[int, str] | None:
    """The CreateTopics checks that do not depend on where the topic goes: replication factor,
    manual assignments, topic configs. (error code, message) or None."""
    if t["replication_factor"] not in (-1, 1):
        return (ec.INVALID_REPLICATION_FACTOR,
                "this broker keeps one copy per queue (replication is master/slave, not per topic)")
    if t["assignments"]:
        return ec.INVALID_REPLICA_ASSIGNMENT, "manual assignments not supported"
    bad_cfg = [c["name"] for c in t["configs"] if c["name"] not in KNOWN_TOPIC_CONFIGS]
    if bad_cfg:
        return ec.INVALID_CONFIG, f"unsupported topic config(s): {', '.join(bad_cfg)}"
    return None


def _created(bridge, res: dict, partitions: int) -> None:
    """Fill a successful CreateTopics result: id, partition count, the topic's configs."""
    name = res["name"]
    res.update(topic_id=bridge.topic_id(name), num_partitions=partitions, replication_factor=1,
               configs=[{"name": k, "value": v, "read_only": False, "config_source": 5, "is_sensitive": False}
                        for k, v in _topic_configs(bridge, name).items()])


async def _cluster_create_topics(bridge, cl, body: dict) -> dict:
    results = []
    nodes = cl.nodes
    deadline = time.monotonic() + _route_wait_s(body)
    for t in body["topics"]:
        name, n = t["name"], t["num_partitions"]
        res = _create_result(name)
        counts = [bridge.config.defaultTopicQueueNums] * len(nodes) if n == -1 else split_partitions(max(n, 0), len(nodes))
        total = sum(counts)
        reason = validate_topic(name)
        if reason:
            res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, reason
        elif await cl.layout(name, refresh=True) is not None:
            res["error_code"], res["error_message"] = ec.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif not 1 <= total <= MAX_PARTITIONS * len(nodes) or max(counts) > MAX_PARTITIONS:
            res["error_code"] = ec.INVALID_PARTITIONS
            res["error_message"] = f"num_partitions must be 1..{MAX_PARTITIONS * len(nodes)} ({MAX_PARTITIONS} per broker)"
        elif (err := _spec_error(t)) is not None:
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
        if n == -1:
            n = bridge.config.defaultTopicQueueNums
        reason = validate_topic(name)
        if reason:
            res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, reason
        elif bridge.topic(name) is not None:
            res["error_code"], res["error_message"] = ec.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif not 1 <= n <= MAX_PARTITIONS:
            res["error_code"], res["error_message"] = ec.INVALID_PARTITIONS, f"num_partitions must be 1..{MAX_PARTITIONS}"
        elif (err := _spec_error(t)) is not None:
            res["error_code"], res["error_message"] = err
        elif not body.get("validate_only"):
            try:
                bridge.controller.create_topic(name, n)
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
        out.append(r)
    return {"throttle_time_ms": 0, "responses": out}


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
        elif t["assignments"]:
            r["error_code"], r["error_message"] = ec.INVALID_REPLICA_ASSIGNMENT, "manual assignments not supported"
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
        elif t["assignments"]:
            r["error_code"], r["error_message"] = ec.INVALID_REPLICA_ASSIGNMENT, "manual assignments not supported"
        elif not body.get("validate_only"):
            bridge.controller.create_topic(name, count, read_queue_nums=count, perm=tc.perm, order=tc.order)
        results.append(r)
    return {"throttle_time_ms": 0, "results": results}


RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


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
            cfg = _topic_configs(bridge, rname)
        elif rtype == RESOURCE_BROKER:
            b, s = bridge.config, bridge.store.config
            cfg = {"broker.id": str(cl.node_id if cl is not None else bridge.node_id), "num.partitions": str(b.defaultTopicQueueNums),
                   "auto.create.topics.enable": str(b.kafkaAutoCreateTopics).lower(),
                   "log.retention.hours": str(s.fileReservedTime), "message.max.bytes": str(s.maxMessageSize),
                   "rocketmq.flushDiskType": s.flushDiskType, "rocketmq.brokerName": b.brokerName,
                   "rocketmq.brokerClusterName": b.brokerClusterName}
        else:
            r["error_code"], r["error_message"] = ec.INVALID_REQUEST, f"resource type {rtype} not supported"
            results.append(r)
            continue
        for k, v in cfg.items():
            if keys is not None and k not in keys:
                continue
            r["configs"].append({"name": k, "value": v, "read_only": k.startswith("rocketmq."), "config_source": 5,
                                 "is_sensitive": False, "synonyms": [], "config_type": 0, "documentation": None})
        results.append(r)
    return {"throttle_time_ms": 0, "results": results}
