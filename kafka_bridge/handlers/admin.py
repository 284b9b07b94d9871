"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs: Kafka admin over RocketMQ topics
(queues = partitions; a replication factor other than 1 or -1 is refused) (SPEC §11)."""
from __future__ import annotations

import uuid

from rmq.broker.controller import TopicError
from rmq.store.message_store import validate_topic

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


async def handle_create_topics(bridge, conn, version: int, body: dict):
    results = []
    for t in body["topics"]:
        name = t["name"]
        n = t["num_partitions"]
        rf = t["replication_factor"]
        res = {"name": name, "topic_id": _ZERO_UUID, "error_code": ec.NONE, "error_message": None,
               "num_partitions": -1, "replication_factor": -1, "configs": None}
        if n == -1:
            n = bridge.config.defaultTopicQueueNums
        reason = validate_topic(name)
        bad_cfg = [c["name"] for c in t["configs"] if c["name"] not in KNOWN_TOPIC_CONFIGS]
        if reason:
            res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, reason
        elif bridge.topic(name) is not None:
            res["error_code"], res["error_message"] = ec.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif not 1 <= n <= MAX_PARTITIONS:
            res["error_code"], res["error_message"] = ec.INVALID_PARTITIONS, f"num_partitions must be 1..{MAX_PARTITIONS}"
        elif rf not in (-1, 1):
            res["error_code"] = ec.INVALID_REPLICATION_FACTOR
            res["error_message"] = "this broker keeps one copy per queue (replication is master/slave, not per topic)"
        elif t["assignments"]:
            res["error_code"], res["error_message"] = ec.INVALID_REPLICA_ASSIGNMENT, "manual assignments not supported"
        elif bad_cfg:
            res["error_code"], res["error_message"] = ec.INVALID_CONFIG, f"unsupported topic config(s): {', '.join(bad_cfg)}"
        elif not body.get("validate_only"):
            try:
                bridge.controller.create_topic(name, n)
            except TopicError as exc:
                res["error_code"], res["error_message"] = ec.INVALID_TOPIC_EXCEPTION, str(exc)
        if res["error_code"] == ec.NONE:
            res.update(topic_id=bridge.topic_id(name), num_partitions=n, replication_factor=1,
                       configs=[{"name": k, "value": v, "read_only": False, "config_source": 5, "is_sensitive": False}
                                for k, v in _topic_configs(bridge, name).items()])
        results.append(res)
    return {"throttle_time_ms": 0, "topics": results}


async def handle_delete_topics(bridge, conn, version: int, body: dict):
    names = []
    if version >= 6:
        for t in body["topics"]:
            name = t["name"] if t["name"] is not None else bridge.topic_by_id(t["topic_id"])
            names.append((name, t.get("topic_id")))
    else:
        names = [(n, None) for n in body["topic_names"]]
    out = []
    for name, tid in names:
        r = {"name": name, "topic_id": tid or _ZERO_UUID, "error_code": ec.NONE, "error_message": None}
        if name is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_ID
        elif bridge.topic(name) is None:
            r["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        else:
            r["topic_id"] = bridge.topic_id(name)
            bridge.controller.delete_topic(name)
        out.append(r)
    return {"throttle_time_ms": 0, "responses": out}


async def handle_create_partitions(bridge, conn, version: int, body: dict):
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
    results = []
    for res in body["resources"]:
        rtype, rname = res["resource_type"], res["resource_name"]
        keys = res["configuration_keys"]
        r = {"error_code": ec.NONE, "error_message": None, "resource_type": rtype, "resource_name": rname, "configs": []}
        if rtype == RESOURCE_TOPIC:
            if bridge.topic(rname) is None:
                r["error_code"], r["error_message"] = ec.UNKNOWN_TOPIC_OR_PARTITION, f"topic {rname} not found"
                results.append(r)
                continue
            cfg = _topic_configs(bridge, rname)
        elif rtype == RESOURCE_BROKER:
            b, s = bridge.config, bridge.store.config
            cfg = {"broker.id": str(bridge.node_id), "num.partitions": str(b.defaultTopicQueueNums),
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
