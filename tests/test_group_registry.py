"""GroupRegistry (kafka_bridge/group_registry.py), the base of the KIP-848 and share-group
coordinators: the same expiry, listing, pruning and first heartbeat answers for both kinds, each
kind keeping its own messages and rules; and the heartbeat/describe response helpers the two
handlers share. No sockets, a fake clock."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kafka_bridge.group_registry import GroupRegistry, HeartbeatResult
from kafka_bridge.groups_v2 import ConsumerGroupCoordinator
from kafka_bridge.handlers import groups_v2 as h
from kafka_bridge.protocol import error_codes as ec
from kafka_bridge.share import ShareGroupCoordinator


class Clock:
    def __init__(self):
        self.t = 500.0

    def __call__(self):
        return self.t


def consumer(clock, **kw):
    return ConsumerGroupCoordinator(lambda: {"t": 2}, clock=clock, session_timeout_ms=1000, **kw)


def share(clock, **kw):
    return ShareGroupCoordinator(lambda: {"t": 2}, lambda t, p: (0, 10), None, clock=clock,
                                 session_timeout_ms=1000, **kw)


def join(reg, group, member):
    if isinstance(reg, ConsumerGroupCoordinator):
        return reg.heartbeat(group, member, 0, rebalance_timeout_ms=1000, topic_names=["t"])
    return reg.heartbeat(group, member, 0, topic_names=["t"])


KINDS = [pytest.param(consumer, -2, "Member m is not a member of group g.", id="consumer"),
         pytest.param(share, -1, "Member m is unknown.", id="share")]


@pytest.mark.parametrize("make,lowest,unknown", KINDS)
def test_first_heartbeat_answers(make, lowest, unknown):
    reg = make(Clock())
    assert isinstance(reg, GroupRegistry)
    r = reg.heartbeat("", "m", 0, topic_names=["t"])
    assert (r.error_code, r.error_message) == (ec.INVALID_GROUP_ID, "GroupId can't be empty.")
    r = reg.heartbeat("g", "m", lowest - 1)
    assert (r.error_code, r.error_message) == (ec.INVALID_REQUEST, f"MemberEpoch {lowest - 1} is invalid.")
    # a heartbeat other than a join does not create the group
    r = reg.heartbeat("g", "m", 3)
    assert (r.error_code, r.error_message) == (ec.UNKNOWN_MEMBER_ID, unknown)
    assert reg.groups == {}
    assert join(reg, "g", "a").error_code == ec.NONE
    r = reg.heartbeat("g", "m", 1)
    assert (r.error_code, r.error_message) == (ec.UNKNOWN_MEMBER_ID, unknown)


@pytest.mark.parametrize("make,lowest,unknown", KINDS)
def test_session_expiry_owns_and_list_groups(make, lowest, unknown):
    clock = Clock()
    reg = make(clock)
    a, b = join(reg, "g", "a"), join(reg, "g", "b")
    assert a.error_code == b.error_code == ec.NONE
    assert reg.owns("g") and not reg.owns("other")
    assert reg.list_groups() == [("g", "Stable" if isinstance(reg, ShareGroupCoordinator) else reg.groups["g"].state())]
    clock.t += 0.6
    assert reg.heartbeat("g", "b", reg.groups["g"].members["b"].epoch).error_code == ec.NONE
    clock.t += 0.6  # a silent for 1.2 s, b for 0.6 s
    assert reg.owns("g") and set(reg.groups["g"].members) == {"b"}
    clock.t += 1.5
    assert not reg.owns("g")
    assert reg.list_groups() == [("g", "Empty")]


def test_consumer_member_fenced_past_rebalance_timeout():
    """The consumer kind's extra expiry rule (_fenced): a member that keeps heartbeating but does
    not give up partitions within its rebalance timeout is removed."""
    clock = Clock()
    cg = ConsumerGroupCoordinator(lambda: {"t": 2}, clock=clock, session_timeout_ms=60_000)
    r1 = cg.heartbeat("g", "m1", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    cg.heartbeat("g", "m2", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    assert cg.heartbeat("g", "m1", r1.member_epoch).error_code == ec.NONE  # told to revoke one
    assert cg.groups["g"].members["m1"].revoking
    clock.t += 0.5
    assert cg.owns("g") and "m1" in cg.groups["g"].members
    clock.t += 0.6  # 1.1 s since the revocation started, session still alive
    assert cg.list_groups() == [("g", cg.groups["g"].state())]
    assert set(cg.groups["g"].members) == {"m2"}


def test_pruning_keeps_what_each_kind_must_keep():
    clock = Clock()
    cg = consumer(clock)
    join(cg, "gone", "m")
    clock.t += 2
    join(cg, "new", "m")
    assert set(cg.groups) == {"new"}  # an empty consumer group is forgotten (offsets live elsewhere)
    sg = share(clock)
    join(sg, "kept", "m")
    assert sg.open_session("kept", "m", 0)[0] == ec.NONE
    sg.acquire(sg.groups["kept"], "m", "t", 0, 1)  # partition state: the group must stay
    join(sg, "bare", "m")
    sg.set_auto_offset_reset("configured", "earliest")
    clock.t += 2
    join(sg, "new", "m")
    assert set(sg.groups) == {"kept", "configured", "new"}


def test_handler_heartbeat_answers():
    bridge = SimpleNamespace(topic_id=lambda t: f"id-{t}")
    assert h.heartbeat_response(bridge, HeartbeatResult(ec.UNKNOWN_MEMBER_ID, error_message="no")) == {
        "throttle_time_ms": 0, "error_code": ec.UNKNOWN_MEMBER_ID, "error_message": "no", "member_id": None,
        "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}
    ok = h.heartbeat_response(bridge, HeartbeatResult(ec.NONE, "m", 4, 5000, {"t": [0, 1]}))
    assert ok == {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "member_id": "m",
                  "member_epoch": 4, "heartbeat_interval_ms": 5000,
                  "assignment": {"topic_partitions": [{"topic_id": "id-t", "partitions": [0, 1]}]}}
    assert h.heartbeat_response(bridge, HeartbeatResult(ec.NONE, "m", 4, 5000))["assignment"] is None


def test_handler_describe_groups(monkeypatch):
    async def not_coordinator(bridge, gid):
        return gid == "elsewhere"
    monkeypatch.setattr(h, "not_coordinator", not_coordinator)
    described = {"g": {"state": "Stable"}}
    resp = asyncio.run(h.describe_groups(None, ["g", "elsewhere", "nope"], described.get,
                                         lambda gid: f"Group {gid} not found.",
                                         lambda base, d: dict(base, group_state=d["state"])))
    g, elsewhere, nope = resp["groups"]
    assert (g["error_code"], g["group_state"], g["group_id"]) == (ec.NONE, "Stable", "g")
    assert (elsewhere["error_code"], elsewhere["error_message"]) == (ec.NOT_COORDINATOR, None)
    assert (nope["error_code"], nope["error_message"]) == (ec.GROUP_ID_NOT_FOUND, "Group nope not found.")
    assert resp["throttle_time_ms"] == 0 and g["authorized_operations"] == -2147483648
