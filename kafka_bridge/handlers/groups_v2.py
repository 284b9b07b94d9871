"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): decode, call the broker's
ConsumerGroupCoordinator (kafka_bridge.groups_v2), encode; plus the coexistence checks that keep
one group id to one protocol (classic, consumer or share), as Kafka's group coordinator does.

Topic ids are the bridge's stable name-derived ids (KafkaBridge.topic_id). The coordinator is
created on first use with the broker's kafkaConsumerGroup* settings.
"""
from __future__ import annotations

import re

from ..groups_v2 import ConsumerGroupCoordinator
from ..protocol import error_codes as ec
from .groups import not_coordinator

_LEGAL = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def subscribable_topics(bridge) -> dict[str, int]:
    """{topic: partitions} a Kafka consumer may subscribe to (legal Kafka names, not internal)."""
    out = {}
    for name in bridge.visible_topics():
        if bridge.is_internal(name) or not _LEGAL.fullmatch(name):
            continue
        tc = bridge.topic(name)
        if tc is not None:
            out[name] = tc.readQueueNums
    return out


def consumer_groups(bridge) -> ConsumerGroupCoordinator:
    cg = getattr(bridge, "consumer_groups", None)
    if cg is None:
        cfg = bridge.config
        cg = bridge.consumer_groups = ConsumerGroupCoordinator(
            lambda: subscribable_topics(bridge),
            heartbeat_interval_ms=getattr(cfg, "kafkaConsumerGroupHeartbeatIntervalMs", 5000),
            session_timeout_ms=getattr(cfg, "kafkaConsumerGroupSessionTimeoutMs", 45_000),
            default_assignor=getattr(cfg, "kafkaConsumerGroupAssignor", "uniform"))
    return cg


def classic_in_use(bridge, group_id: str) -> bool:
    """A classic group with members (JoinGroup protocol) holds this group id."""
    d = bridge.coordinator.describe_group(group_id)
    return d.get("state") not in (None, "", "Dead", "Empty")


def group_kind(bridge, group_id: str) -> str | None:
    """'classic', 'consumer' or 'share' when a live group of that kind holds the id."""
    if classic_in_use(bridge, group_id):
        return "classic"
    cg = getattr(bridge, "consumer_groups", None)
    if cg is not None and cg.owns(group_id):
        return "consumer"
    sg = getattr(bridge, "share_groups", None)
    if sg is not None and sg.owns(group_id):
        return "share"
    return None


def _assignment(bridge, parts: dict[str, list[int]]) -> dict:
    return {"topic_partitions": [{"topic_id": bridge.topic_id(t), "partitions": ps} for t, ps in parts.items()]}


def heartbeat_error(code: int, msg: str | None = None) -> dict:
    """A ConsumerGroupHeartbeat / ShareGroupHeartbeat response carrying an error (the two share
    their response fields)."""
    return {"throttle_time_ms": 0, "error_code": code, "error_message": msg, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


async def heartbeat_refusal(bridge, gid: str, kind: str) -> dict | None:
    """The error response when this broker does not coordinate `gid` or a live group of another
    kind than `kind` ('consumer' or 'share') holds it; None when the heartbeat may go on."""
    if await not_coordinator(bridge, gid):
        return heartbeat_error(ec.NOT_COORDINATOR)
    held = group_kind(bridge, gid)
    if held not in (None, kind):
        return heartbeat_error(ec.GROUP_ID_NOT_FOUND, f"Group {gid} is not a {kind} group (it is a {held} group).")
    return None


def heartbeat_response(bridge, r) -> dict:
    """The response for a coordinator's HeartbeatResult `r` (group_registry.HeartbeatResult)."""
    if r.error_code != ec.NONE:
        return heartbeat_error(r.error_code, r.error_message)
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "member_id": r.member_id,
            "member_epoch": r.member_epoch, "heartbeat_interval_ms": r.heartbeat_interval_ms,
            "assignment": None if r.assignment is None else _assignment(bridge, r.assignment)}


async def handle_consumer_group_heartbeat(bridge, conn, version: int, body: dict):
    gid = body["group_id"]
    refused = await heartbeat_refusal(bridge, gid, "consumer")
    if refused is not None:
        return refused
    owned = None
    if body.get("topic_partitions") is not None:
        owned = []
        for tp in body["topic_partitions"]:
            name = bridge.topic_by_id(tp["topic_id"])
            if name is not None:
                owned.extend((name, p) for p in tp["partitions"])
    r = consumer_groups(bridge).heartbeat(
        gid, body["member_id"], body["member_epoch"], instance_id=body.get("instance_id"),
        rack_id=body.get("rack_id"), rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1),
        topic_names=body.get("subscribed_topic_names"), regex=body.get("subscribed_topic_regex"),
        assignor=body.get("server_assignor"), owned=owned, client_id=conn.client_id or "",
        client_host=f"/{conn.peer[0]}")
    return heartbeat_response(bridge, r)


def described_tps(bridge, parts: dict[str, list[int]]) -> dict:
    return {"topic_partitions": [{"topic_id": bridge.topic_id(t), "topic_name": t, "partitions": ps}
                                 for t, ps in parts.items()]}


async def describe_groups(bridge, group_ids, describe, not_found, answer) -> dict:
    """A ConsumerGroupDescribe / ShareGroupDescribe response (the two share their fields): per
    group id NOT_COORDINATOR, GROUP_ID_NOT_FOUND with `not_found(gid)` as message when
    `describe(gid)` is None, else `answer(base, described)`."""
    out = []
    for gid in group_ids:
        base = {"error_code": ec.NONE, "error_message": None, "group_id": gid, "group_state": "", "group_epoch": -1,
                "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": -2147483648}
        if await not_coordinator(bridge, gid):
            out.append(dict(base, error_code=ec.NOT_COORDINATOR))
            continue
        d = describe(gid)
        if d is None:
            out.append(dict(base, error_code=ec.GROUP_ID_NOT_FOUND, error_message=not_found(gid)))
            continue
        out.append(answer(base, d))
    return {"throttle_time_ms": 0, "groups": out}


async def handle_consumer_group_describe(bridge, conn, version: int, body: dict):
    def not_found(gid: str) -> str:
        return f"Group {gid} is not a consumer group." if group_kind(bridge, gid) else f"Group {gid} not found."

    def answer(base: dict, d: dict) -> dict:
        return dict(base, group_state=d["state"], group_epoch=d["group_epoch"],
                    assignment_epoch=d["assignment_epoch"], assignor_name=d["assignor"],
                    members=[{"member_id": m["member_id"], "instance_id": m["instance_id"],
                              "rack_id": m["rack_id"], "member_epoch": m["member_epoch"],
                              "client_id": m["client_id"], "client_host": m["client_host"],
                              "subscribed_topic_names": m["topic_names"],
                              "subscribed_topic_regex": m["regex"],
                              "assignment": described_tps(bridge, m["assignment"]),
                              "target_assignment": described_tps(bridge, m["target"])}
                             for m in d["members"]])
    return await describe_groups(bridge, body["group_ids"], lambda gid: consumer_groups(bridge).describe(gid),
                                 not_found, answer)


HANDLERS = {
    68: handle_consumer_group_heartbeat,
    69: handle_consumer_group_describe,
}
