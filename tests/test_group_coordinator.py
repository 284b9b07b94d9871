"""Scenario tests of the Kafka classic group coordinator (kafka_bridge.group_coordinator), SPEC §11.

Each test drives the coordinator the way the Kafka request handlers do, with plain values, on an
event loop started by asyncio.run; offsets go to a real ConsumerOffsetManager in a temp dir.
"""
from __future__ import annotations

import asyncio

from kafka_bridge.group_coordinator import DEAD, EMPTY, GroupCoordinator
from kafka_bridge.protocol import error_codes as E
from rmq.broker.offsets import ConsumerOffsetManager

PROTOCOLS = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


def make(tmp_path, **kw):
    store = ConsumerOffsetManager(str(tmp_path))
    kw.setdefault("initial_rebalance_delay_ms", 20)
    kw.setdefault("min_session_timeout_ms", 10)
    return GroupCoordinator(store, **kw), store


async def join(gc, member_id="", *, group="g", client="client", instance=None, session=10_000,
               rebalance=10_000, ptype="consumer", protocols=PROTOCOLS, require=False):
    return await gc.join_group(group, member_id, instance, client, "/127.0.0.1", session, rebalance, ptype,
                               protocols, require)


async def join_new(gc, **kw):
    """The JoinGroup v4+ dance: MEMBER_ID_REQUIRED, then join again with the given id."""
    first = await join(gc, require=True, **kw)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    assert first.member_id.startswith(kw.get("client", "client") + "-")
    return await join(gc, first.member_id, require=True, **kw)


async def sync_all(gc, results, group="g"):
    """Followers sync first (and wait), then the leader sends the assignment."""
    leader = next(r for r in results if r.member_id == r.leader)
    assignments = {mid: f"assign-{mid}".encode() for mid, _, _ in leader.members}
    followers = [asyncio.ensure_future(gc.sync_group(group, r.generation_id, r.member_id, None, "consumer",
                                                     r.protocol_name, {}))
                 for r in results if r is not leader]
    await asyncio.sleep(0.01)
    assert not any(f.done() for f in followers), "followers must wait for the leader's SyncGroup"
    lead = await gc.sync_group(group, leader.generation_id, leader.member_id, None, "consumer",
                               leader.protocol_name, assignments)
    out = {leader.member_id: lead}
    for r, f in zip([r for r in results if r is not leader], followers):
        out[r.member_id] = await f
    for mid, res in out.items():
        assert res.error_code == E.NONE
        assert res.assignment == f"assign-{mid}".encode()
        assert res.protocol_type == "consumer" and res.protocol_name == "range"
    return out


async def stable_group(gc, n, **kw):
    results = await asyncio.gather(*(join_new(gc, client=f"c{i}", **kw) for i in range(n)))
    await sync_all(gc, results, kw.get("group", "g"))
    return results


def test_single_member_join_sync_heartbeat(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        r = await join_new(gc, client="solo")
        assert r.error_code == E.NONE and r.generation_id == 1
        assert r.leader == r.member_id and r.protocol_name == "range" and r.protocol_type == "consumer"
        assert r.members == [(r.member_id, None, b"meta-range")]
        s = await gc.sync_group("g", 1, r.member_id, None, "consumer", "range", {r.member_id: b"A"})
        assert (s.error_code, s.assignment) == (E.NONE, b"A")
        assert gc.heartbeat("g", 1, r.member_id, None) == E.NONE
        # A follower-less Stable group answers a repeated SyncGroup with the current assignment.
        s2 = await gc.sync_group("g", 1, r.member_id, None, None, None, {})
        assert (s2.error_code, s2.assignment) == (E.NONE, b"A")
        d = gc.describe_group("g")
        assert (d["error_code"], d["state"], d["protocol_type"], d["protocol"]) == \
            (E.NONE, "Stable", "consumer", "range")
        assert d["members"] == [{"member_id": r.member_id, "group_instance_id": None, "client_id": "solo",
                                 "client_host": "/127.0.0.1", "metadata": b"meta-range",
                                 "assignment": b"A"}]
        assert gc.list_groups(None) == [("g", "consumer", "Stable")]
        gc.close()

    asyncio.run(main())


def test_join_without_member_id_requirement_and_v0_rebalance_timeout(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        r = await join(gc, rebalance=-1)  # JoinGroup v0..v3: no MEMBER_ID_REQUIRED round trip
        assert r.error_code == E.NONE and r.member_id.startswith("client-") and r.generation_id == 1
        gc.close()

    asyncio.run(main())


def test_two_members_leader_gets_metadata_followers_wait(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        a, b = await asyncio.gather(join_new(gc, client="a"), join_new(gc, client="b"))
        assert a.generation_id == b.generation_id == 1
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        assert follower.leader == leader.member_id
        assert sorted(m[0] for m in leader.members) == sorted([a.member_id, b.member_id])
        assert follower.members == []
        await sync_all(gc, [a, b])
        assert gc.describe_group("g")["state"] == "Stable"
        gc.close()

    asyncio.run(main())


def test_three_members_leave_triggers_rebalance(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        results = await stable_group(gc, 3)
        leaving, *staying = results
        top, per_member = gc.leave_group("g", [(leaving.member_id, None)])
        assert top == E.NONE and per_member == [(leaving.member_id, None, E.NONE)]
        for r in staying:
            assert gc.heartbeat("g", 1, r.member_id, None) == E.REBALANCE_IN_PROGRESS
        assert gc.describe_group("g")["state"] == "PreparingRebalance"
        rejoined = await asyncio.gather(*(join(gc, r.member_id, client=f"x{i}") for i, r in enumerate(staying)))
        assert all(r.error_code == E.NONE and r.generation_id == 2 for r in rejoined)
        leader = next(r for r in rejoined if r.member_id == r.leader)
        assert sorted(m[0] for m in leader.members) == sorted(r.member_id for r in staying)
        await sync_all(gc, rejoined)
        assert gc.heartbeat("g", 1, staying[0].member_id, None) == E.ILLEGAL_GENERATION
        assert gc.heartbeat("g", 2, leaving.member_id, None) == E.UNKNOWN_MEMBER_ID
        # The last members leaving (LeaveGroup v3+ batch) empty the group.
        top, per_member = gc.leave_group("g", [(r.member_id, None, "bye") for r in staying] + [("ghost", None)])
        assert top == E.NONE
        assert [e for _, _, e in per_member] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
        d = gc.describe_group("g")
        assert d["state"] == EMPTY and d["members"] == []
        assert gc.heartbeat("g", 3, staying[0].member_id, None) == E.UNKNOWN_MEMBER_ID
        assert gc.leave_group("nosuchgroup", [("m", None)]) == (E.NONE, [("m", None, E.UNKNOWN_MEMBER_ID)])
        gc.close()

    asyncio.run(main())


def test_session_expiry_removes_member(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        a, b = await stable_group(gc, 2, session=150)
        stop = asyncio.Event()
        answers = []

        async def keep_alive():  # only `a` heartbeats
            while not stop.is_set():
                answers.append(gc.heartbeat("g", 1, a.member_id, None))
                if answers[-1] != E.NONE:
                    return
                await asyncio.sleep(0.03)

        task = asyncio.ensure_future(keep_alive())
        await asyncio.wait_for(task, 2)
        assert answers[-1] == E.REBALANCE_IN_PROGRESS
        r = await join(gc, a.member_id, session=150)
        assert r.error_code == E.NONE and r.generation_id == 2 and r.leader == a.member_id
        assert [m[0] for m in r.members] == [a.member_id]
        assert gc.heartbeat("g", 1, b.member_id, None) == E.UNKNOWN_MEMBER_ID
        s = await gc.sync_group("g", 2, a.member_id, None, "consumer", "range", {a.member_id: b"all"})
        assert s.assignment == b"all"
        # Nobody heartbeats any more: the group ends up Empty with a new generation.
        await asyncio.sleep(0.35)
        d = gc.describe_group("g")
        assert d["state"] == EMPTY and d["members"] == []
        gc.close()

    asyncio.run(main())


def test_rebalance_timeout_drops_member_that_does_not_rejoin(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        results = await stable_group(gc, 3, session=5000, rebalance=300)
        leader = next(r for r in results if r.member_id == r.leader)
        slow, other = [r for r in results if r is not leader]
        t_leader = asyncio.ensure_future(join(gc, leader.member_id, session=5000, rebalance=300))
        await asyncio.sleep(0.01)
        assert gc.heartbeat("g", 1, other.member_id, None) == E.REBALANCE_IN_PROGRESS
        t_other = asyncio.ensure_future(join(gc, other.member_id, session=5000, rebalance=300))
        await asyncio.sleep(0.1)
        assert not t_leader.done() and not t_other.done()
        rl, ro = await asyncio.wait_for(asyncio.gather(t_leader, t_other), 2)
        assert rl.generation_id == ro.generation_id == 2 and rl.leader == leader.member_id
        assert sorted(m[0] for m in rl.members) == sorted([leader.member_id, other.member_id])
        assert gc.heartbeat("g", 1, slow.member_id, None) == E.UNKNOWN_MEMBER_ID
        late = await join(gc, slow.member_id, session=5000, rebalance=300)
        assert late.error_code == E.UNKNOWN_MEMBER_ID
        gc.close()

    asyncio.run(main())


def test_member_that_never_syncs_is_removed(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        a, b = await asyncio.gather(join_new(gc, client="a", rebalance=200), join_new(gc, client="b", rebalance=200))
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        s = await gc.sync_group("g", 1, leader.member_id, None, "consumer", "range",
                                {leader.member_id: b"L", follower.member_id: b"F"})
        assert s.assignment == b"L"
        await asyncio.sleep(0.3)  # the follower never sends SyncGroup
        assert gc.heartbeat("g", 1, leader.member_id, None) == E.REBALANCE_IN_PROGRESS
        assert gc.heartbeat("g", 1, follower.member_id, None) == E.UNKNOWN_MEMBER_ID
        gc.close()

    asyncio.run(main())


def test_join_and_sync_errors(tmp_path):
    async def main():
        gc, _ = make(tmp_path, min_session_timeout_ms=6000, max_session_timeout_ms=30_000)
        assert (await join(gc, group="")).error_code == E.INVALID_GROUP_ID
        assert (await join(gc, session=1000)).error_code == E.INVALID_SESSION_TIMEOUT
        assert (await join(gc, session=60_000)).error_code == E.INVALID_SESSION_TIMEOUT
        assert (await join(gc, "who-is-this", group="fresh")).error_code == E.UNKNOWN_MEMBER_ID
        assert (await join(gc, group="h", ptype="")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(gc, group="h", protocols=[])).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        a = await join(gc, session=6000)
        assert a.error_code == E.NONE
        # Members of a group must share the protocol type and one protocol.
        assert (await join(gc, session=6000, ptype="connect")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(gc, session=6000, protocols=[("sticky", b"")])).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(gc, "stranger", session=6000)).error_code == E.UNKNOWN_MEMBER_ID
        assert (await gc.sync_group("g", 0, a.member_id, None, None, None, {})).error_code == E.ILLEGAL_GENERATION
        assert (await gc.sync_group("g", 1, "x", None, None, None, {})).error_code == E.UNKNOWN_MEMBER_ID
        assert (await gc.sync_group("g", 1, a.member_id, None, "connect", None, {})).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert (await gc.sync_group("g", 1, a.member_id, None, "consumer", "roundrobin", {})).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert (await gc.sync_group("nope", 1, a.member_id, None, None, None, {})).error_code == \
            E.UNKNOWN_MEMBER_ID
        assert (await gc.sync_group("", 1, a.member_id, None, None, None, {})).error_code == E.INVALID_GROUP_ID
        # CompletingRebalance: heartbeats are fine, commits are told to wait.
        assert gc.heartbeat("g", 1, a.member_id, None) == E.NONE
        assert gc.commit_offsets("g", 1, a.member_id, None, [("t", 0, 5, None)]) == \
            [("t", 0, E.REBALANCE_IN_PROGRESS)]
        # A lost JoinGroup answer: rejoining with the same metadata repeats the current answer.
        same = await join(gc, a.member_id, session=6000)
        assert (same.error_code, same.generation_id, same.leader) == (E.NONE, 1, a.member_id)
        assert same.members == [(a.member_id, None, b"meta-range")]
        # Rejoining with a new subscription puts the group back in PreparingRebalance; a member
        # that got MEMBER_ID_REQUIRED is waited for before the join completes.
        b_first = await join(gc, session=6000, require=True)
        pending = asyncio.ensure_future(join(gc, a.member_id, session=6000, protocols=[("range", b"new-sub")]))
        await asyncio.sleep(0.01)
        assert not pending.done()
        assert (await gc.sync_group("g", 1, a.member_id, None, None, None, {})).error_code == \
            E.REBALANCE_IN_PROGRESS
        b = await join(gc, b_first.member_id, session=6000, require=True)
        ra = await pending
        assert ra.generation_id == b.generation_id == 2
        assert gc.heartbeat("", 2, a.member_id, None) == E.INVALID_GROUP_ID
        gc.close()

    asyncio.run(main())


def test_offset_commit_generation_rules(tmp_path):
    async def main():
        gc, store = make(tmp_path)
        results = await stable_group(gc, 2)
        a, b = results
        assert gc.commit_offsets("g", 1, a.member_id, None, [("t", 0, 10, "m0"), ("t", 1, 20, None)]) == \
            [("t", 0, E.NONE), ("t", 1, E.NONE)]
        assert store.query_offset("g", "t", 0) == 10 and store.offset_table == {"t@g": {0: 10, 1: 20}}
        assert gc.commit_offsets("g", 0, a.member_id, None, [("t", 0, 11, None)]) == [("t", 0, E.ILLEGAL_GENERATION)]
        assert gc.commit_offsets("g", 1, "intruder", None, [("t", 0, 11, None)]) == \
            [("t", 0, E.UNKNOWN_MEMBER_ID)]
        # A standalone commit is refused while the group has members.
        assert gc.commit_offsets("g", -1, "", None, [("t", 0, 11, None)]) == [("t", 0, E.UNKNOWN_MEMBER_ID)]
        assert gc.commit_offsets("g", 1, a.member_id, None, [("t", 2, 1, "x" * 5000)]) == \
            [("t", 2, E.OFFSET_METADATA_TOO_LARGE)]
        assert store.query_offset("g", "t", 0) == 10
        # PreparingRebalance: a member of the current generation may still commit (Kafka 3.9/4.x).
        leader = next(r for r in results if r.member_id == r.leader)
        follower = a if leader is b else b
        parked = asyncio.ensure_future(join(gc, leader.member_id))
        await asyncio.sleep(0.01)
        assert gc.heartbeat("g", 1, follower.member_id, None) == E.REBALANCE_IN_PROGRESS
        assert gc.commit_offsets("g", 1, follower.member_id, None, [("t", 0, 15, None)]) == [("t", 0, E.NONE)]
        assert store.query_offset("g", "t", 0) == 15
        rf = await join(gc, follower.member_id)
        rl = await parked
        assert rf.generation_id == rl.generation_id == 2
        # CompletingRebalance: REBALANCE_IN_PROGRESS; the old generation is stale.
        assert gc.commit_offsets("g", 2, follower.member_id, None, [("t", 0, 16, None)]) == \
            [("t", 0, E.REBALANCE_IN_PROGRESS)]
        await sync_all(gc, [rl, rf])
        assert gc.commit_offsets("g", 1, follower.member_id, None, [("t", 0, 16, None)]) == \
            [("t", 0, E.ILLEGAL_GENERATION)]
        assert gc.commit_offsets("g", 2, follower.member_id, None, [("t", 0, 16, None)]) == [("t", 0, E.NONE)]
        gc.close()

    asyncio.run(main())


def test_simple_commit_and_fetch(tmp_path):
    async def main():
        gc, store = make(tmp_path)
        assert gc.commit_offsets("standalone", -1, "", None, [("orders", 0, 7, "meta"), ("orders", 3, 9, "")]) == \
            [("orders", 0, E.NONE), ("orders", 3, E.NONE)]
        # A group the coordinator never saw, committed with a generation: the member must rejoin.
        assert gc.commit_offsets("ghost", 4, "m", None, [("orders", 0, 1, None)]) == \
            [("orders", 0, E.ILLEGAL_GENERATION)]
        assert gc.fetch_offsets("standalone", None) == [("orders", 0, 7, "meta", E.NONE), ("orders", 3, 9, "", E.NONE)]
        assert gc.fetch_offsets("standalone", [("orders", 0), ("orders", 1), ("other", 0)]) == [
            ("orders", 0, 7, "meta", E.NONE), ("orders", 1, -1, "", E.NONE), ("other", 0, -1, "", E.NONE)]
        # The offset table is shared with RocketMQ consumers: their commits show through, and the
        # Kafka metadata string is dropped once the offset moved.
        store.commit_offset("standalone", "orders", 0, 42)
        assert gc.fetch_offsets("standalone", [("orders", 0)]) == [("orders", 0, 42, "", E.NONE)]
        store.commit_offset("rmq_consumers", "orders", 1, 5)
        store.commit_offset("rmq_consumers", "%RETRY%rmq_consumers", 0, 2)
        assert gc.fetch_offsets("rmq_consumers", None) == [("orders", 1, 5, "", E.NONE)]
        assert gc.fetch_offsets("unknown", None) == []
        assert ("rmq_consumers", "", EMPTY) in gc.list_groups(None)
        d = gc.describe_group("rmq_consumers")
        assert (d["error_code"], d["state"], d["protocol_type"], d["members"]) == (E.NONE, EMPTY, "", [])
        d = gc.describe_group("never-heard-of")
        assert (d["error_code"], d["state"]) == (E.NONE, DEAD)
        assert gc.describe_group("never-heard-of", api_version=6)["error_code"] == E.GROUP_ID_NOT_FOUND
        # The simple group may later be used with group management.
        r = await join(gc, group="standalone")
        assert r.error_code == E.NONE and r.generation_id == 1
        gc.close()

    asyncio.run(main())


def test_static_membership_rejoin_without_rebalance_and_fencing(tmp_path):
    async def main():
        gc, store = make(tmp_path)
        a, b = await asyncio.gather(join(gc, client="ca", instance="inst-a", require=True),
                                    join(gc, client="cb", instance="inst-b", require=True))
        assert a.error_code == b.error_code == E.NONE  # static members skip MEMBER_ID_REQUIRED
        assert a.member_id.startswith("inst-a-") and b.member_id.startswith("inst-b-")
        leader = a if a.leader == a.member_id else b
        assert sorted(m[1] for m in leader.members) == ["inst-a", "inst-b"]
        await sync_all(gc, [a, b])
        # inst-a restarts: it joins with no member id, keeps its assignment, no rebalance.
        again = await join(gc, client="ca", instance="inst-a", require=True)
        assert again.error_code == E.NONE and again.generation_id == 1
        assert again.member_id != a.member_id and again.members == []
        assert again.leader == leader.member_id  # the old leader id, so it never runs the assignor
        assert gc.describe_group("g")["state"] == "Stable"
        assert gc.heartbeat("g", 1, a.member_id, "inst-a") == E.FENCED_INSTANCE_ID
        assert (await join(gc, a.member_id, instance="inst-a")).error_code == E.FENCED_INSTANCE_ID
        assert gc.commit_offsets("g", 1, a.member_id, "inst-a", [("t", 0, 1, None)]) == \
            [("t", 0, E.FENCED_INSTANCE_ID)]
        assert gc.heartbeat("g", 1, again.member_id, "inst-a") == E.NONE
        assert gc.heartbeat("g", 1, b.member_id, "inst-b") == E.NONE
        s = await gc.sync_group("g", 1, again.member_id, "inst-a", "consumer", "range", {})
        assert s.assignment == f"assign-{a.member_id}".encode()
        assert gc.commit_offsets("g", 1, again.member_id, "inst-a", [("t", 0, 3, None)]) == [("t", 0, E.NONE)]
        assert gc.heartbeat("g", 1, again.member_id, "inst-zzz") == E.UNKNOWN_MEMBER_ID
        members = {m["group_instance_id"]: m["member_id"] for m in gc.describe_group("g")["members"]}
        assert members == {"inst-a": again.member_id, "inst-b": b.member_id}
        # LeaveGroup v3+ by instance id alone (administrative removal) starts a rebalance.
        top, per_member = gc.leave_group("g", [("", "inst-b"), ("", "inst-unknown")])
        assert per_member == [("", "inst-b", E.NONE), ("", "inst-unknown", E.UNKNOWN_MEMBER_ID)]
        assert gc.heartbeat("g", 1, again.member_id, "inst-a") == E.REBALANCE_IN_PROGRESS
        r = await join(gc, again.member_id, instance="inst-a")
        assert r.generation_id == 2 and r.leader == again.member_id
        await gc.sync_group("g", 2, again.member_id, "inst-a", None, None, {again.member_id: b"x"})
        # A static rejoin that changes the selected protocol does rebalance.
        changed = await join(gc, instance="inst-a", protocols=[("roundrobin", b"rr2")])
        assert changed.error_code == E.NONE and changed.generation_id == 3 and changed.protocol_name == "roundrobin"
        assert changed.leader == changed.member_id and changed.members == [(changed.member_id, "inst-a", b"rr2")]
        gc.close()

    asyncio.run(main())


def test_list_groups_states_filter(tmp_path):
    async def main():
        gc, store = make(tmp_path)
        await stable_group(gc, 1, group="stable-one")
        parked = asyncio.ensure_future(join(gc, group="joining", rebalance=10_000))
        await asyncio.sleep(0)
        store.commit_offset("rocketmq-group", "t", 0, 1)
        assert gc.list_groups(None) == [("joining", "consumer", "PreparingRebalance"),
                                        ("rocketmq-group", "", "Empty"),
                                        ("stable-one", "consumer", "Stable")]
        assert gc.list_groups(["stable"]) == [("stable-one", "consumer", "Stable")]
        assert gc.list_groups(["Empty", "PreparingRebalance"]) == [
            ("joining", "consumer", "PreparingRebalance"), ("rocketmq-group", "", "Empty")]
        assert gc.list_groups([]) == gc.list_groups(None)
        d = gc.describe_group("joining")
        assert d["state"] == "PreparingRebalance" and d["protocol"] == ""
        assert d["members"][0]["metadata"] == b"" and d["members"][0]["client_id"] == "client"
        await parked
        gc.close()

    asyncio.run(main())


def test_close_answers_parked_requests(tmp_path):
    async def main():
        gc, _ = make(tmp_path, initial_rebalance_delay_ms=5000)
        parked = asyncio.ensure_future(join(gc))
        await asyncio.sleep(0.01)
        assert not parked.done()
        gc.close()
        r = await asyncio.wait_for(parked, 1)
        assert r.error_code == E.NOT_COORDINATOR
        assert gc.heartbeat("g", 1, r.member_id, None) == E.COORDINATOR_NOT_AVAILABLE
        assert (await join(gc)).error_code == E.COORDINATOR_NOT_AVAILABLE
        assert gc.commit_offsets("g", -1, "", None, [("t", 0, 1, None)]) == [("t", 0, E.COORDINATOR_NOT_AVAILABLE)]
        assert gc.list_groups(None) == []

    asyncio.run(main())


def test_txn_offset_commit_hooks(tmp_path):
    async def main():
        gc, store = make(tmp_path)
        (a,) = await asyncio.gather(join(gc))
        # CompletingRebalance: transactional commits are not held back, plain ones are.
        assert gc.validate_txn_offset_commit("g", 1, a.member_id, None) == E.NONE
        assert gc.validate_txn_offset_commit("g", -1, "", None) == E.NONE
        assert gc.validate_txn_offset_commit("g", 0, a.member_id, None) == E.ILLEGAL_GENERATION
        assert gc.commit_offsets_unchecked("g", [("t", 0, 99, "txn")]) == [("t", 0, E.NONE)]
        assert gc.fetch_offsets("g", [("t", 0)]) == [("t", 0, 99, "txn", E.NONE)]
        gc.close()

    asyncio.run(main())


class FakeScheduler:
    """A virtual clock: timers fire only when the test advances time."""

    class Handle:
        def __init__(self, when, cb, args):
            self.when, self.cb, self.args, self.cancelled = when, cb, args, False

        def cancel(self):
            self.cancelled = True

    def __init__(self):
        self.now = 0.0
        self.timers = []

    def call_later(self, delay, cb, *args):
        h = self.Handle(self.now + delay, cb, args)
        self.timers.append(h)
        return h

    def advance(self, seconds):
        target = self.now + seconds
        while True:
            due = [h for h in self.timers if not h.cancelled and h.when <= target]
            if not due:
                break
            h = min(due, key=lambda x: x.when)
            self.timers.remove(h)
            self.now = h.when
            h.cb(*h.args)
        self.now = target


def test_initial_rebalance_delay_extends_while_members_arrive(tmp_path):
    async def main():
        clock = FakeScheduler()
        gc, _ = make(tmp_path, initial_rebalance_delay_ms=100, scheduler=clock)
        a = asyncio.ensure_future(join(gc, client="a", rebalance=1000))
        await asyncio.sleep(0)
        clock.advance(0.05)
        b = asyncio.ensure_future(join(gc, client="b", rebalance=1000))  # arrives during the delay
        await asyncio.sleep(0)
        clock.advance(0.06)  # t=110 ms: the first delay ran out, but a member arrived: wait again
        await asyncio.sleep(0)
        assert not a.done() and not b.done()
        clock.advance(0.1)  # t=210 ms
        ra, rb = await asyncio.wait_for(asyncio.gather(a, b), 1)
        assert ra.generation_id == rb.generation_id == 1 and ra.leader == rb.leader
        # A later member joining a Stable group waits the full rebalance, not the initial delay.
        await gc.sync_group("g", 1, ra.member_id, None, None, None, {})
        await gc.sync_group("g", 1, rb.member_id, None, None, None, {})
        c = asyncio.ensure_future(join(gc, client="c", rebalance=1000))
        await asyncio.sleep(0)
        clock.advance(0.5)
        await asyncio.sleep(0)
        assert not c.done()
        clock.advance(0.6)  # a and b never rejoined: dropped at the rebalance timeout
        rc = await asyncio.wait_for(c, 1)
        assert rc.generation_id == 2 and rc.members == [(rc.member_id, None, b"meta-range")]
        gc.close()

    asyncio.run(main())


def test_group_max_size(tmp_path):
    async def main():
        gc, _ = make(tmp_path, max_group_size=1)
        a = await join(gc)
        assert a.error_code == E.NONE
        b = await join(gc)
        assert (b.error_code, b.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
        gc.close()

    asyncio.run(main())


def test_cancelled_join_handler_keeps_group_consistent(tmp_path):
    async def main():
        gc, _ = make(tmp_path)
        results = await stable_group(gc, 2)
        leader = next(r for r in results if r.member_id == r.leader)
        follower = next(r for r in results if r is not leader)
        # The leader's connection closes while its JoinGroup is parked: the member still counts
        # as rejoined, and the join completes when the follower rejoins.
        parked = asyncio.ensure_future(join(gc, leader.member_id))
        await asyncio.sleep(0.01)
        assert not parked.done()
        parked.cancel()
        await asyncio.sleep(0)
        rf = await join(gc, follower.member_id)
        assert rf.error_code == E.NONE and rf.generation_id == 2 and rf.leader == leader.member_id
        d = gc.describe_group("g")
        assert d["state"] == "CompletingRebalance" and len(d["members"]) == 2
        assert gc.heartbeat("g", 2, leader.member_id, None) == E.NONE
        gc.close()

    asyncio.run(main())


def test_empty_groups_without_offsets_leave_memory_at_the_cleanup_interval(tmp_path):
    """Kafka's cleanupGroupMetadata: group ids made up by clients (a console consumer's random
    group, a fuzzer) do not stay in memory for ever; a group with committed offsets stays known."""
    async def main():
        gc, _ = make(tmp_path, group_cleanup_interval_ms=0)  # every group creation checks
        for group in ("made-up-1", "made-up-2", "with-offsets"):
            (r,) = await stable_group(gc, 1, group=group)
            if group == "with-offsets":
                assert gc.commit_offsets(group, r.generation_id, r.member_id, None, [("t", 0, 5, None)]) == \
                    [("t", 0, E.NONE)]
            assert gc.leave_group(group, [(r.member_id, None)])[0] == E.NONE
            assert gc.describe_group(group)["state"] == EMPTY  # kept until the next check
        busy = asyncio.ensure_future(join_new(gc, group="busy"))  # creating a group runs the check
        await asyncio.sleep(0)
        assert sorted(gc._groups) == ["busy", "with-offsets"]
        assert gc.describe_group("made-up-1", 6)["error_code"] == E.GROUP_ID_NOT_FOUND  # Dead, as in Kafka
        assert ("with-offsets", "consumer", EMPTY) in gc.list_groups()
        assert (await busy).error_code == E.NONE
        gc.close()

        default, _ = make(tmp_path)  # Kafka's 10 minutes: nothing goes meanwhile
        (r,) = await stable_group(default, 1, group="one")
        default.leave_group("one", [(r.member_id, None)])
        await stable_group(default, 1, group="two")
        assert sorted(default._groups) == ["one", "two"]
        default.close()

    asyncio.run(main())


def test_members_carry_on_when_the_coordinator_moves(tmp_path):
    """Cluster mode (issue 27): the group's coordinator moved to a broker that has no state for it.
    The members that heartbeat or commit with their generation are taken over (as Kafka's new
    coordinator loads them from __consumer_offsets) instead of being sent to rejoin, which rewound
    the group to its last commit that succeeded; older generations and static members are not."""
    async def main():
        old, _ = make(tmp_path / "a")
        m0, m1 = await stable_group(old, 2)
        assert m0.generation_id == m1.generation_id == 1
        # without adoption (one broker, the coordinator never moves): rejoin, as before
        plain, _ = make(tmp_path / "plain")
        assert plain.heartbeat("g", 1, m0.member_id, None) == E.UNKNOWN_MEMBER_ID
        assert plain.commit_offsets("g", 1, m0.member_id, None, [("t", 0, 5, None)]) == [("t", 0, E.ILLEGAL_GENERATION)]
        off, _ = make(tmp_path / "off", adopt_moved_members=lambda: False)  # a cluster view not active
        assert off.heartbeat("g", 1, m0.member_id, None) == E.UNKNOWN_MEMBER_ID

        new, store = make(tmp_path / "b", adopt_moved_members=True)
        assert new.commit_offsets("g", 1, m1.member_id, None, [("t", 0, 7, None)]) == [("t", 0, E.NONE)]
        assert store.query_offset("g", "t", 0) == 7
        assert new.heartbeat("g", 1, m0.member_id, None) == E.NONE
        d = new.describe_group("g")
        assert d["state"] == "Stable" and {m["member_id"] for m in d["members"]} == {m0.member_id, m1.member_id}
        # a member of an older generation, an unknown static member: checked as usual
        assert new.heartbeat("g", 0, "zombie", None) == E.UNKNOWN_MEMBER_ID
        assert new.heartbeat("g", 1, "static-1", "instance-1") == E.UNKNOWN_MEMBER_ID
        # a new member joins: a normal rebalance; the taken-over members rejoin with their ids
        newcomer = asyncio.ensure_future(join_new(new, client="c2"))
        await asyncio.sleep(0)
        assert new.heartbeat("g", 1, m0.member_id, None) == E.REBALANCE_IN_PROGRESS
        rejoined = await asyncio.gather(join(new, m0.member_id, client="c0"), join(new, m1.member_id, client="c1"))
        results = [*rejoined, await newcomer]
        assert {r.error_code for r in results} == {E.NONE} and {r.generation_id for r in results} == {2}
        assert {r.protocol_name for r in results} == {"range"}
        await sync_all(new, results)
        # once it rebalanced here, nobody is taken over any more
        assert new.heartbeat("g", 3, "late", None) == E.UNKNOWN_MEMBER_ID
        assert new.heartbeat("g", 2, m0.member_id, None) == E.NONE

        # a member of a newer generation replaces the older one's taken-over members
        other, _ = make(tmp_path / "c", adopt_moved_members=True)
        assert other.heartbeat("h", 4, "x", None) == E.NONE
        assert other.heartbeat("h", 5, "y", None) == E.NONE
        assert other.heartbeat("h", 4, "x", None) == E.UNKNOWN_MEMBER_ID
        assert other.heartbeat("h", 5, "y", None) == E.NONE
        # a taken-over member that never comes back expires after adopted_session_timeout_ms
        short, _ = make(tmp_path / "d", adopt_moved_members=True, adopted_session_timeout_ms=30)
        assert short.heartbeat("k", 2, "gone", None) == E.NONE
        for _ in range(200):
            if short.describe_group("k")["state"] == EMPTY:
                break
            await asyncio.sleep(0.01)
        assert short.describe_group("k")["state"] == EMPTY

        # the coordinator moves away: the group is unloaded (a parked JoinGroup answered
        # NOT_COORDINATOR); when it comes back, its members are taken over again
        parked = asyncio.ensure_future(join_new(new, client="c3"))
        await asyncio.sleep(0)
        assert new.unload_groups(lambda gid: gid == "g") == 1
        assert (await parked).error_code == E.NOT_COORDINATOR
        assert new.describe_group("g")["state"] == EMPTY  # known from its offsets only
        assert new.heartbeat("g", 2, m0.member_id, None) == E.NONE
    asyncio.run(main())
