"""ApiVersions, Metadata, FindCoordinator, DescribeCluster: what the client needs to find its way (SPEC §11).

In cluster mode (kafka_bridge.cluster) Metadata lists every broker's Kafka listener as a node
(slaves too) and a topic's partitions across brokers with the owning master as leader and its
slaves as the other replicas (the slave leads while its master is down), and FindCoordinator
answers the node that coordinates the group, the same from every broker."""
from __future__ import annotations

import asyncio
import logging
import uuid

from rmq.broker.topic_config import topic_collision
from rmq.store.message_store import validate_topic

from ..authorized_ops import authorized_operations
from ..names import kafka_topic_error

from .. import protocol as kp
from ..cluster import cluster_of
from ..protocol import error_codes as ec

bridge_log = logging.getLogger("kafka_bridge.metadata")

# APIs this broker answers; ApiVersions advertises exactly these ranges.
IMPLEMENTED: set[int] = set()

_ZERO_UUID = uuid.UUID(int=0)
_ALL = ("all topics",)  # metadata_cache's key for the list of every visible topic's entry


def advertised_versions() -> dict[int, tuple[int, int]]:
    return {k: v for k, v in kp.SUPPORTED.items() if k in IMPLEMENTED}


async def handle_api_versions(bridge, conn, version: int, body: dict):
    return kp.api_versions_response_body(advertised_versions())


def _broker(bridge) -> dict:
    return {"node_id": bridge.node_id, "host": bridge.host, "port": bridge.port, "rack": None}


def topic_metadata(bridge, name: str, version: int) -> dict:
    """One topic's Metadata entry. An existing topic's entry is built once per topic-table version
    and shared by the responses until the table changes (bridge.metadata_cache); callers must not
    modify it."""
    bridge.sync_topics()
    cache = bridge.metadata_cache
    hit = cache.get(name)
    if hit is not None:
        return hit
    tc = bridge.topic(name)
    out = {"error_code": ec.NONE, "name": name, "topic_id": bridge.topic_id(name) if tc else _ZERO_UUID,
           "is_internal": bridge.is_internal(name), "partitions": [], "topic_authorized_operations": -2147483648}
    if tc is None:
        out["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        return out
    node = bridge.node_id
    for p in range(bridge.partition_count(tc)):
        out["partitions"].append({"error_code": ec.NONE, "partition_index": p, "leader_id": node, "leader_epoch": 0,
                                  "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []})
    cache[name] = out
    return out


def _with_authorized_operations(bridge, conn, version: int, body: dict, res: dict) -> dict:
    """Metadata v8+: the topics' (and, v8-10, the cluster's) authorized operations when asked for;
    INT32_MIN (omitted) otherwise. Topic entries may be shared cache entries: copied, not changed."""
    if version >= 8 and body.get("include_topic_authorized_operations"):
        res["topics"] = [{**t, "topic_authorized_operations": authorized_operations(bridge, conn, "topic", t["name"])}
                         if t.get("error_code") == ec.NONE else t for t in res["topics"]]
    if 8 <= version <= 10 and body.get("include_cluster_authorized_operations"):
        res["cluster_authorized_operations"] = authorized_operations(bridge, conn, "cluster")
    return res


async def handle_metadata(bridge, conn, version: int, body: dict):
    return _with_authorized_operations(bridge, conn, version, body, await _metadata(bridge, conn, version, body))


async def _metadata(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    if cl is not None:
        return await cluster_metadata(bridge, cl, version, body)
    req_topics = body["topics"]
    allow_auto = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    topics = []
    bridge.sync_topics()  # empties metadata_cache when the topic table changed
    if req_topics is None or (version == 0 and not req_topics):
        # every topic: the list is kept until the topic table changes
        every = bridge.metadata_cache.get(_ALL)
        if every is None:
            every = bridge.metadata_cache[_ALL] = [topic_metadata(bridge, n, version) for n in bridge.visible_topics()]
        topics = list(every)
    else:
        for t in req_topics:
            name = t.get("name")
            if name is None and t.get("topic_id") not in (None, _ZERO_UUID):
                name = bridge.topic_by_id(t["topic_id"])
                if name is None:
                    topics.append({"error_code": ec.UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",  # v10-11: not nullable
                                   "topic_id": t["topic_id"],
                                   "is_internal": False, "partitions": []})
                    continue
            if name is None:
                continue
            if bridge.topic(name) is None:
                reason = kafka_topic_error(name) or validate_topic(name)
                if not reason and allow_auto and bridge.config.kafkaAutoCreateTopics:
                    reason = bridge.controller.topic_config_manager.collision(name)
                if reason:
                    topics.append({"error_code": ec.INVALID_TOPIC_EXCEPTION, "name": name, "topic_id": _ZERO_UUID,
                                   "is_internal": False, "partitions": []})
                    continue
                if allow_auto and bridge.config.kafkaAutoCreateTopics:
                    bridge.controller.auto_create_topic(name)
            topics.append(topic_metadata(bridge, name, version))
    return {"throttle_time_ms": 0, "brokers": [_broker(bridge)], "cluster_id": bridge.cluster_id,
            "controller_id": bridge.node_id, "topics": topics, "cluster_authorized_operations": -2147483648}


# ------------------------------------------------------------------------------------ cluster mode
TXN_IN_CLUSTER = "Kafka transactions are not supported when the bridge spans several brokers"


def _cluster_brokers(cl) -> list[dict]:
    return [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None} for n in cl.nodes]


def cluster_hidden_topics(bridge, cl) -> set[str]:
    from ..bridge import HIDDEN_TOPICS
    return set(HIDDEN_TOPICS) | {bridge.config.brokerClusterName} | set(cl.cluster_brokers) | set(cl.group_of)


def cluster_topic_metadata(bridge, cl, name: str, layout) -> dict:
    out = {"error_code": ec.NONE, "name": name, "topic_id": bridge.topic_id(name),
           "is_internal": bridge.is_internal(name), "partitions": [], "topic_authorized_operations": -2147483648}
    if layout is None:
        out.update(error_code=ec.UNKNOWN_TOPIC_OR_PARTITION, topic_id=_ZERO_UUID)
        return out
    if layout.total == 0:  # queues only on brokers without a Kafka listener
        out["error_code"] = ec.LEADER_NOT_AVAILABLE
        return out
    for seg in layout.segments:
        leader = seg.node.node_id
        replicas, isr, offline = cl.replica_state(seg)
        error = ec.NONE
        if seg.offline or not isr:  # no live replica: an offline partition, as Kafka reports it
            leader, error = -1, ec.LEADER_NOT_AVAILABLE
        for p in range(seg.base, seg.base + seg.count):
            # leader_epoch stays 0: clients drop metadata whose epoch goes backwards, and the master
            # takes its partitions back when it returns
            out["partitions"].append({"error_code": error, "partition_index": p, "leader_id": leader,
                                      "leader_epoch": 0, "replica_nodes": replicas, "isr_nodes": isr,
                                      "offline_replicas": offline})
    return out


async def cluster_auto_create(bridge, cl, name: str):
    """Metadata's auto-creation in cluster mode: defaultTopicQueueNums queues on every master (what
    RocketMQ's autoCreateTopicEnable yields once producers have sent to each broker)."""
    from ..cluster import ClusterError
    q = bridge.config.defaultTopicQueueNums
    masters = cl.masters
    if not masters:
        return None
    try:
        await asyncio.gather(*(cl.create_topic_on(n.broker_addr, name, q) for n in masters))
    except ClusterError as exc:
        bridge_log.warning("auto-creating %s in the cluster failed: %s", name, exc)
        return None
    return await cl.wait_layout(name, lambda lay: lay is not None and lay.total == q * len(masters), 3.0)


async def cluster_metadata(bridge, cl, version: int, body: dict) -> dict:
    req_topics = body["topics"]
    allow_auto = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    topics = []
    if req_topics is None or (version == 0 and not req_topics):
        hidden = cluster_hidden_topics(bridge, cl)
        names = [n for n in await cl.topic_names() if n not in hidden]
        layouts = await asyncio.gather(*(cl.layout(n) for n in names))
        topics = [cluster_topic_metadata(bridge, cl, n, lay) for n, lay in zip(names, layouts) if lay is not None]
    else:
        for t in req_topics:
            name = t.get("name")
            if name is None and t.get("topic_id") not in (None, _ZERO_UUID):
                name = bridge.topic_by_id(t["topic_id"])
                if name is None:
                    name = next((n for n in cl.known_topic_names() if bridge.topic_id(n) == t["topic_id"]), None)
                if name is None:
                    topics.append({"error_code": ec.UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",  # v10-11: not nullable
                                   "topic_id": t["topic_id"],
                                   "is_internal": False, "partitions": []})
                    continue
            if name is None:
                continue
            layout = await cl.layout(name)
            if layout is None:
                reason = kafka_topic_error(name) or validate_topic(name)
                if not reason and allow_auto and bridge.config.kafkaAutoCreateTopics:
                    reason = topic_collision(name, cl.known_topic_names())
                if reason:
                    topics.append({"error_code": ec.INVALID_TOPIC_EXCEPTION, "name": name, "topic_id": _ZERO_UUID,
                                   "is_internal": False, "partitions": []})
                    continue
                if allow_auto and bridge.config.kafkaAutoCreateTopics:
                    layout = await cluster_auto_create(bridge, cl, name)
                    if layout is None or layout.total == 0:  # created, not yet routed: clients retry
                        topics.append({"error_code": ec.LEADER_NOT_AVAILABLE, "name": name,
                                       "topic_id": bridge.topic_id(name), "is_internal": False, "partitions": []})
                        continue
            topics.append(cluster_topic_metadata(bridge, cl, name, layout))
    return {"throttle_time_ms": 0, "brokers": _cluster_brokers(cl), "cluster_id": bridge.cluster_id,
            "controller_id": cl.controller_id, "topics": topics, "cluster_authorized_operations": -2147483648}


def _cluster_find_coordinator(cl, version: int, body: dict) -> dict:
    key_type = body.get("key_type", 0)
    keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
    coords = []
    for key in keys:
        if key_type == 1:
            coords.append({"key": key, "node_id": -1, "host": "", "port": -1,
                           "error_code": ec.COORDINATOR_NOT_AVAILABLE, "error_message": TXN_IN_CLUSTER})
        else:
            n = cl.coordinator_for(key)
            if n is None:
                coords.append({"key": key, "node_id": -1, "host": "", "port": -1,
                               "error_code": ec.COORDINATOR_NOT_AVAILABLE, "error_message": "no broker is up"})
            else:
                coords.append({"key": key, "node_id": n.node_id, "host": n.host, "port": n.port,
                               "error_code": ec.NONE, "error_message": None})
    if version >= 4:
        return {"throttle_time_ms": 0, "coordinators": coords}
    c = coords[0]
    return {"throttle_time_ms": 0, "error_code": c["error_code"], "error_message": c["error_message"],
            "node_id": c["node_id"], "host": c["host"], "port": c["port"]}


async def handle_find_coordinator(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    if cl is not None:
        return _cluster_find_coordinator(cl, version, body)
    b = bridge
    key_type = body.get("key_type", 0)
    if version >= 4:
        coords = []
        for key in body["coordinator_keys"]:
            err = ec.NONE
            if key_type == 1 and b.txn is None:
                err = ec.COORDINATOR_NOT_AVAILABLE
            coords.append({"key": key, "node_id": b.node_id, "host": b.host, "port": b.port, "error_code": err,
                           "error_message": None})
        return {"throttle_time_ms": 0, "coordinators": coords}
    err = ec.NONE
    if key_type == 1 and b.txn is None:
        err = ec.COORDINATOR_NOT_AVAILABLE
    if err:
        return {"throttle_time_ms": 0, "error_code": err, "error_message": "transactions are not enabled",
                "node_id": -1, "host": "", "port": -1}
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "node_id": b.node_id,
            "host": b.host, "port": b.port}


async def handle_describe_cluster(bridge, conn, version: int, body: dict):
    res = await _describe_cluster(bridge, conn, version, body)
    if body.get("include_cluster_authorized_operations"):
        res["cluster_authorized_operations"] = authorized_operations(bridge, conn, "cluster")
    return res


async def _describe_cluster(bridge, conn, version: int, body: dict):
    cl = await cluster_of(bridge)
    if cl is not None:
        return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "endpoint_type": 1,
                    "cluster_id": bridge.cluster_id, "controller_id": cl.controller_id,
                    "brokers": [{"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
                                for n in cl.nodes],
                    "cluster_authorized_operations": -2147483648}
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "endpoint_type": 1,
            "cluster_id": bridge.cluster_id, "controller_id": bridge.node_id,
            "brokers": [{"broker_id": bridge.node_id, "host": bridge.host, "port": bridge.port, "rack": None}],
            "cluster_authorized_operations": -2147483648}
