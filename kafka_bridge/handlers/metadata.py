"""ApiVersions, Metadata, FindCoordinator, DescribeCluster: what the client needs to find its way (SPEC §11)."""
from __future__ import annotations

import uuid

from rmq.store.message_store import validate_topic

from .. import protocol as kp
from ..protocol import error_codes as ec

# APIs this broker answers; ApiVersions advertises exactly these ranges.
IMPLEMENTED: set[int] = set()

_ZERO_UUID = uuid.UUID(int=0)


def advertised_versions() -> dict[int, tuple[int, int]]:
    return {k: v for k, v in kp.SUPPORTED.items() if k in IMPLEMENTED}


async def handle_api_versions(bridge, conn, version: int, body: dict):
    return kp.api_versions_response_body(advertised_versions())


def _broker(bridge) -> dict:
    return {"node_id": bridge.node_id, "host": bridge.host, "port": bridge.port, "rack": None}


def topic_metadata(bridge, name: str, version: int) -> dict:
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
    return out


async def handle_metadata(bridge, conn, version: int, body: dict):
    req_topics = body["topics"]
    allow_auto = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    topics = []
    if req_topics is None or (version == 0 and not req_topics):
        names = bridge.visible_topics()
        topics = [topic_metadata(bridge, n, version) for n in names]
    else:
        for t in req_topics:
            name = t.get("name")
            if name is None and t.get("topic_id") not in (None, _ZERO_UUID):
                name = bridge.topic_by_id(t["topic_id"])
                if name is None:
                    topics.append({"error_code": ec.UNKNOWN_TOPIC_ID, "name": None, "topic_id": t["topic_id"],
                                   "is_internal": False, "partitions": []})
                    continue
            if name is None:
                continue
            if bridge.topic(name) is None:
                reason = validate_topic(name)
                if reason:
                    topics.append({"error_code": ec.INVALID_TOPIC_EXCEPTION, "name": name, "topic_id": _ZERO_UUID,
                                   "is_internal": False, "partitions": []})
                    continue
                if allow_auto and bridge.config.kafkaAutoCreateTopics:
                    bridge.controller.auto_create_topic(name)
            topics.append(topic_metadata(bridge, name, version))
    return {"throttle_time_ms": 0, "brokers": [_broker(bridge)], "cluster_id": bridge.cluster_id,
            "controller_id": bridge.node_id, "topics": topics, "cluster_authorized_operations": -2147483648}


async def handle_find_coordinator(bridge, conn, version: int, body: dict):
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
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "endpoint_type": 1,
            "cluster_id": bridge.cluster_id, "controller_id": bridge.node_id,
            "brokers": [{"broker_id": bridge.node_id, "host": bridge.host, "port": bridge.port, "rack": None}],
            "cluster_authorized_operations": -2147483648}
