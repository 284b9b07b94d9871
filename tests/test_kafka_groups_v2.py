"""KIP-848 consumer groups (ConsumerGroupHeartbeat) with confluent-kafka `group.protocol=consumer`
against `rmq up`: join, leave, rebalance with 3 members, static member rejoin, regex subscription,
the offset table seen by `rmq admin consumerProgress`, the coexistence error with a classic group;
and the coordinator's epoch and validation rules without a socket."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafka_bridge.groups_v2 import ConsumerGroupCoordinator, assign_range, assign_uniform  # noqa: E402
from kafka_bridge.protocol import error_codes as ec  # noqa: E402
from .kafka_fixtures import start_broker, unique  # noqa: E402

HB_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("rmq-up-kip848")),
                     {"kafkaConsumerGroupHeartbeatIntervalMs": HB_MS, "kafkaConsumerGroupSessionTimeoutMs": 6000})
    try:
        yield b
    finally:
        alive = b.alive()
        b.stop()
        text = b.log_text()
        assert alive, f"the broker died; log tail:\n{text[-4000:]}"
        assert "Traceback" not in text, f"the broker logged an exception:\n{text[-6000:]}"


def make_topic(bootstrap: str, partitions: int, prefix: str = "k848", records: int = 0) -> str:
    name = unique(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    if records:
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(records):
            p.produce(name, str(i).encode(), partition=i % partitions)
        assert p.flush(15) == 0
    return name


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers, pred, timeout: float = 30.0, sink: dict | None = None):
    """Poll every consumer in turn until pred() holds (bounded in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            m = c.poll(0.05)
            if m is not None and m.error() is None and sink is not None:
                sink.setdefault(i, []).append((m.partition(), m.offset()))
        if pred():
            return
    raise AssertionError("condition not reached in time; assignments: "
                         f"{[[tp.partition for tp in c.assignment()] for c in consumers]}")


def describe(bootstrap: str, group: str):
    a = AdminClient({"bootstrap.servers": bootstrap})
    return a.describe_consumer_groups([group])[group].result(15)


def test_join_consume_commit_and_consumer_progress(broker):
    topic = make_topic(broker.bootstrap, 4, records=40)
    group = unique("g848")
    c = consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        seen: dict = {}
        poll_until([c], lambda: len(seen.get(0, [])) >= 40, sink=seen)
        assert sorted(p for p, _ in seen[0]).count(0) == 10
        assert sorted(tp.partition for tp in c.assignment()) == [0, 1, 2, 3]
        c.commit(asynchronous=False)
        committed = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(4)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 10, 10, 10]
        d = describe(broker.bootstrap, group)
        assert d.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert len(d.members) == 1 and len(d.members[0].assignment.topic_partitions) == 4
    finally:
        c.close()
    # the RocketMQ side reads the same offset table
    from rmq.cli import main
    res = CliRunner().invoke(main, ["admin", "consumerProgress", "-n", broker.listeners["namesrv"], "-g", group,
                                    "-t", topic, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    prog = json.loads(res.output)
    assert sorted(q["consumerOffset"] for q in prog["queues"]) == [10, 10, 10, 10]
    assert prog["diffTotal"] == 0


def test_rebalance_three_members_and_leave(broker):
    topic = make_topic(broker.bootstrap, 6)
    group = unique("g848")
    cs = [consumer(broker.bootstrap, group) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])

        def balanced(n):
            sizes = [len(c.assignment()) for c in cs[:n]]
            parts = [tp.partition for c in cs[:n] for tp in c.assignment()]
            return sorted(parts) == list(range(6)) and max(sizes) - min(sizes) <= 1 and min(sizes) >= 6 // n
        poll_until(cs, lambda: balanced(3))
        # no partition is ever held by two members at once
        parts = [tp.partition for c in cs for tp in c.assignment()]
        assert len(parts) == len(set(parts)) == 6
        cs[2].close()
        cs.pop()
        poll_until(cs, lambda: balanced(2))
        d = describe(broker.bootstrap, group)
        assert len(d.members) == 2
    finally:
        for c in cs:
            c.close()


def test_static_member_rejoin_keeps_its_partitions(broker):
    topic = make_topic(broker.bootstrap, 4)
    group = unique("g848")
    a = consumer(broker.bootstrap, group, **{"group.instance.id": "static-a"})
    b = consumer(broker.bootstrap, group, **{"group.instance.id": "static-b"})
    b2 = None
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        before = sorted(tp.partition for tp in b.assignment())
        b.close()  # a static member leaves with epoch -2: its partitions wait for it
        b = None
        b2 = consumer(broker.bootstrap, group, **{"group.instance.id": "static-b"})
        b2.subscribe([topic])
        poll_until([a, b2], lambda: len(b2.assignment()) == 2)
        assert sorted(tp.partition for tp in b2.assignment()) == before
        assert len(a.assignment()) == 2
    finally:
        for c in (a, b, b2):
            if c is not None:
                c.close()


def test_regex_subscription_picks_up_matching_topics(broker):
    prefix = unique("rx")
    group = unique("g848")
    t1 = prefix + "-one"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(t1, 2, 1)])[t1].result(15)
    c = consumer(broker.bootstrap, group, **{"topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe(["^" + prefix.replace("-", "[-]") + "-.*"])
        poll_until([c], lambda: {(tp.topic, tp.partition) for tp in c.assignment()} == {(t1, 0), (t1, 1)})
        t2 = prefix + "-two"
        admin.create_topics([NewTopic(t2, 1, 1)])[t2].result(15)
        poll_until([c], lambda: (t2, 0) in {(tp.topic, tp.partition) for tp in c.assignment()})
        d = describe(broker.bootstrap, group)
        assert len(d.members) == 1
    finally:
        c.close()


def test_classic_consumer_meets_consumer_group(broker):
    topic = make_topic(broker.bootstrap, 1)
    group = unique("g848")
    c = consumer(broker.bootstrap, group)
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "classic",
                        "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        poll_until([c], lambda: len(c.assignment()) == 1)
        classic.subscribe([topic])
        err = None
        deadline = time.monotonic() + 15
        while err is None and time.monotonic() < deadline:
            m = classic.poll(0.2)
            c.poll(0.05)
            if m is not None and m.error() is not None:
                err = m.error()
        assert err is not None and err.code() == confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL
        assert len(c.assignment()) == 1
    finally:
        classic.close()
        c.close()


# ------------------------------------------------------------------------------- coordinator, no sockets
class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def coordinator(topics, clock=None, **kw):
    return ConsumerGroupCoordinator(lambda: dict(topics), clock=clock or Clock(), **kw)


def tps(assignment):
    return sorted((t, p) for t, ps in (assignment or {}).items() for p in ps)


def test_epochs_incremental_revocation_and_fencing():
    clock = Clock()
    cg = coordinator({"t": 4}, clock)
    r1 = cg.heartbeat("g", "m1", 0, rebalance_timeout_ms=10_000, topic_names=["t"])
    assert r1.error_code == ec.NONE and tps(r1.assignment) == [("t", p) for p in range(4)]
    r2 = cg.heartbeat("g", "m2", 0, rebalance_timeout_ms=10_000, topic_names=["t"])
    assert r2.error_code == ec.NONE and tps(r2.assignment) == []  # m1 still owns everything
    # m1 is told to give two partitions up, at its old epoch
    r1b = cg.heartbeat("g", "m1", r1.member_epoch)
    assert len(tps(r1b.assignment)) == 2 and r1b.member_epoch == r1.member_epoch
    kept = tps(r1b.assignment)
    # until m1 confirms, m2 gets nothing of them
    assert tps(cg.heartbeat("g", "m2", r2.member_epoch).assignment or {}) == []
    r1c = cg.heartbeat("g", "m1", r1b.member_epoch, owned=kept)
    assert r1c.member_epoch > r1.member_epoch
    r2b = cg.heartbeat("g", "m2", r2.member_epoch)
    assert sorted(kept + tps(r2b.assignment)) == [("t", p) for p in range(4)]
    # an epoch from the future is fenced; an unknown member is unknown
    assert cg.heartbeat("g", "m2", r2b.member_epoch + 5).error_code == ec.FENCED_MEMBER_EPOCH
    assert cg.heartbeat("g", "nobody", 3).error_code == ec.UNKNOWN_MEMBER_ID
    # offset commits check the member and its epoch
    assert cg.validate_commit("g", "m1", r1c.member_epoch) == ec.NONE
    assert cg.validate_commit("g", "m1", r1c.member_epoch + 1) == ec.FENCED_MEMBER_EPOCH
    assert cg.validate_commit("g", "ghost", 1) == ec.UNKNOWN_MEMBER_ID
    assert cg.validate_commit("other", "", -1) is None  # not a consumer group: classic rules


def test_session_timeout_frees_partitions():
    clock = Clock()
    cg = coordinator({"t": 2}, clock, session_timeout_ms=1000)
    r1 = cg.heartbeat("g", "m1", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    r2 = cg.heartbeat("g", "m2", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    clock.t += 0.5
    cg.heartbeat("g", "m1", r1.member_epoch)
    clock.t += 0.8  # m2 silent for 1.3 s
    r = cg.heartbeat("g", "m1", r1.member_epoch)
    assert "m2" not in cg.groups["g"].members and r.error_code == ec.NONE
    assert r2.error_code == ec.NONE


def test_bad_input_codes():
    cg = coordinator({"t": 1})
    assert cg.heartbeat("g", "m", 0, rebalance_timeout_ms=1000, regex="(unclosed").error_code == ec.INVALID_REGULAR_EXPRESSION
    assert cg.heartbeat("g", "m", 0, rebalance_timeout_ms=1000, topic_names=["t"],
                        assignor="sticky").error_code == ec.UNSUPPORTED_ASSIGNOR
    assert cg.heartbeat("g", "m", 0, topic_names=["t"]).error_code == ec.INVALID_REQUEST  # no rebalance timeout
    assert cg.heartbeat("", "m", 0, rebalance_timeout_ms=1, topic_names=["t"]).error_code == ec.INVALID_GROUP_ID
    assert cg.heartbeat("g", "m", -3).error_code == ec.INVALID_REQUEST
    ok = cg.heartbeat("g", "s1", 0, instance_id="i", rebalance_timeout_ms=1000, topic_names=["t"])
    assert ok.error_code == ec.NONE
    # a second live member with the same instance id
    assert cg.heartbeat("g", "s2", 0, instance_id="i", rebalance_timeout_ms=1000,
                        topic_names=["t"]).error_code == ec.UNRELEASED_INSTANCE_ID


def test_assignors():
    subs = {"a": {"x", "y"}, "b": {"x", "y"}, "c": {"x", "y"}}
    u = assign_uniform(subs, {"x": 4, "y": 3}, {})
    assert sorted(len(v) for v in u.values()) == [2, 2, 3]
    assert set().union(*u.values()) == {("x", p) for p in range(4)} | {("y", p) for p in range(3)}
    r = assign_range(subs, {"x": 4, "y": 3}, {})
    assert r["a"] == {("x", 0), ("x", 1), ("y", 0)} and r["c"] == {("x", 3), ("y", 2)}
    # stickiness: a partition stays with its owner when counts allow
    again = assign_uniform(subs, {"x": 4, "y": 3}, u)
    assert again == u


def test_empty_groups_are_forgotten():
    """Group ids clients make up (a fuzzer, console consumers) do not stay in memory once empty."""
    clock = Clock()
    cg = coordinator({"t": 1}, clock, session_timeout_ms=1000)
    for i in range(50):
        r = cg.heartbeat(f"junk-{i}", "m", 0, rebalance_timeout_ms=1000, topic_names=["t"])
        assert cg.heartbeat(f"junk-{i}", "m", -1).error_code == ec.NONE and r.error_code == ec.NONE
    assert len(cg.groups) <= 1
    live = cg.heartbeat("live", "m", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    clock.t += 0.5
    cg.heartbeat("other", "m", 0, rebalance_timeout_ms=1000, topic_names=["t"])
    assert "live" in cg.groups and live.error_code == ec.NONE


@pytest.mark.parametrize("key,value,expect", [
    ("kafkaConsumerGroupAssignor", "sticky", "expected uniform or range"),
    ("kafkaShareDeliveryCountLimit", 0, "expected a positive number"),
    ("kafkaShareAutoOffsetReset", "none", "expected latest or earliest"),
    ("kafkaShareRecordLockDurationMs", -5, "expected a positive number"),
])
def test_group_config_keys_are_validated(key, value, expect):
    from rmq.config import ConfigError, load_config
    with pytest.raises(ConfigError, match=f"{key}: {expect}"):
        load_config(None, {key: value})
