"""KIP-932 share groups with confluent-kafka's ShareConsumer against `rmq up`: 3 members on a
1-partition topic all receiving, ACCEPT / RELEASE / REJECT, a killed consumer's records redelivered
after the (shortened) acquisition lock, the delivery count limit (archived, and in %DLQ% when
enabled), state surviving a broker restart; one message seen from both sides (a RocketMQ push
consumer group and a share group on the same topic, in `rmq admin` and `rmq store inspect history`);
and SharePartition's bad-input rules without a socket."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer (2.16+)", allow_module_level=True)
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafka_bridge.protocol import error_codes as ec  # noqa: E402
from kafka_bridge.share import ACKNOWLEDGED, ARCHIVED, AVAILABLE, SharePartition  # noqa: E402
from .kafka_fixtures import ROOT, start_broker, unique  # noqa: E402

LOCK_MS = 2000
LIMIT = 3
CONFIG = {"kafkaShareHeartbeatIntervalMs": 300, "kafkaShareRecordLockDurationMs": LOCK_MS,
          "kafkaShareDeliveryCountLimit": LIMIT, "kafkaShareAutoOffsetReset": "earliest",
          "kafkaShareDlqEnable": True,
          "messageDelayLevel": " ".join(["1s"] * 18)}  # RocketMQ retries after 1 s (both-sides test)


def _stop(b):
    alive = b.alive() or b.stop_requested
    b.stop()
    text = b.log_text()
    assert alive, f"the broker died; log tail:\n{text[-4000:]}"
    assert "Traceback" not in text, f"the broker logged an exception:\n{text[-6000:]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("rmq-up-share")), CONFIG)
    try:
        yield b
    finally:
        _stop(b)


def make_topic(bootstrap: str, records: int, partitions: int = 1) -> str:
    name = unique("share")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        p.produce(name, str(i).encode())
    assert p.flush(15) == 0
    return name


def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False, **extra) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    conf.update(extra)
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll_records(c, until, timeout: float = 20.0):
    """Poll c until until(records so far) holds; returns the (value, delivery count, message) seen."""
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(out):
        for m in c.poll(0.2):
            if m.error() is None:
                out.append((int(m.value()), m.delivery_count(), m))
    assert until(out), f"got only {[(v, d) for v, d, _ in out]}"
    return out


def test_three_members_one_partition_all_receive_each_record_once(broker):
    topic = make_topic(broker.bootstrap, 60)
    group = unique("sg")
    cs = [share_consumer(broker.bootstrap, group, topic, **{"max.poll.records": 4}) for _ in range(3)]
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    try:
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 60 and time.monotonic() < deadline:
            for i, c in enumerate(cs):
                for m in c.poll(0.1):
                    if m.error() is None:
                        got[i].append(int(m.value()))
    finally:
        for c in cs:
            c.close()
    everything = sorted(v for vs in got.values() for v in vs)
    assert everything == list(range(60)), "each record exactly once across the group"
    assert all(got[i] for i in range(3)), f"every member received records: {[len(v) for v in got.values()]}"


def test_accept_release_reject(broker):
    topic = make_topic(broker.bootstrap, 3)
    group = unique("sg")
    c = share_consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        first = poll_records(c, lambda r: len(r) >= 3)
        kinds = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.REJECT}
        for v, count, m in first:
            assert count == 1
            c.acknowledge(m, kinds[v])
        c.commit_sync()
        again = poll_records(c, lambda r: len(r) >= 1)
        # only the released record comes back, with its delivery count raised
        assert [(v, d) for v, d, _ in again] == [(1, 2)]
        for _, _, m in again:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
        assert c.poll(1.0) is not None and not [m for m in c.poll(0.5) if m.error() is None]
    finally:
        c.close()
    # the rejected record went to the group's %DLQ% (kafkaShareDlqEnable) beside being archived
    dlq = "%DLQ%" + group
    import json
    from click.testing import CliRunner
    from rmq.cli import main
    deadline = time.monotonic() + 15
    total = 0
    while time.monotonic() < deadline and total < 1:
        res = CliRunner().invoke(main, ["admin", "topicStatus", "-n", broker.listeners["namesrv"], "-t", dlq, "--json"],
                                 catch_exceptions=False)
        if res.exit_code == 0:
            total = sum(q["maxOffset"] - q["minOffset"] for q in json.loads(res.output)["queues"])
        if total < 1:
            time.sleep(0.2)
    assert total == 1, res.output


def test_killed_consumer_records_redelivered_after_lock(broker, tmp_path):
    topic = make_topic(broker.bootstrap, 5)
    group = unique("sg")
    ready = tmp_path / "acquired"
    script = textwrap.dedent(f"""
        import sys, time
        from confluent_kafka import ShareConsumer
        c = ShareConsumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
                            "share.acknowledgement.mode": "explicit"}})
        c.subscribe(["{topic}"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += [m for m in c.poll(0.2) if m.error() is None]
        open({str(ready)!r}, "w").write(str(len(got)))
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    c = None
    try:
        deadline = time.monotonic() + 40
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert ready.exists() and ready.read_text() == "5", "the first consumer acquired the records"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        c = share_consumer(broker.bootstrap, group, topic)
        again = poll_records(c, lambda r: len(r) >= 5, timeout=LOCK_MS / 1000 + 20)
        assert sorted(v for v, _, _ in again) == list(range(5))
        assert all(d == 2 for _, d, _ in again), "second delivery of each record"
        assert time.monotonic() - killed_at >= LOCK_MS / 1000 * 0.5  # not before the locks could expire
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if c is not None:
            c.close()


def test_delivery_count_limit_archives(broker):
    topic = make_topic(broker.bootstrap, 1)
    group = unique("sg")
    c = share_consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        counts = []
        for _ in range(LIMIT):
            got = poll_records(c, lambda r: len(r) >= 1)
            counts += [d for _, d, _ in got]
            for _, _, m in got:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync()
        assert counts == list(range(1, LIMIT + 1))
        # past the limit the record is archived: nothing more to read
        assert not [m for m in c.poll(1.5) if m.error() is None]
    finally:
        c.close()


def test_state_survives_broker_restart(tmp_path):
    b = start_broker(str(tmp_path / "restart"), CONFIG)
    try:
        topic = make_topic(b.bootstrap, 10)
        group = unique("sg")
        c = share_consumer(b.bootstrap, group, topic, explicit=True, **{"max.poll.records": 4})
        first = poll_records(c, lambda r: len(r) >= 4)
        for _, _, m in first:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
        accepted = {v for v, _, _ in first}
        c.close()
        b.stop()
        assert b.proc.returncode == 0
        b = start_broker(str(tmp_path / "restart"), CONFIG)
        c = share_consumer(b.bootstrap, group, topic)
        rest = poll_records(c, lambda r: len({v for v, _, _ in r}) >= 10 - len(accepted))
        c.close()
        assert {v for v, _, _ in rest} == set(range(10)) - accepted
    finally:
        _stop(b)


# ------------------------------------------------------------------------------- SharePartition rules
def test_share_partition_acknowledgement_rules():
    sp = SharePartition(0)
    archived: list = []
    got = sp.acquire("m1", log_end=5, max_records=3, now=0.0, lock_s=10.0, limit=2)
    assert got == [(0, 1), (1, 1), (2, 1)]
    assert sp.acknowledge("m2", 0, 0, [1], 1.0, 2, archived) == ec.INVALID_RECORD_STATE  # not its record
    assert sp.acknowledge("m1", 3, 3, [1], 1.0, 2, archived) == ec.INVALID_RECORD_STATE  # never acquired
    assert sp.acknowledge("m1", 2, 1, [1], 1.0, 2, archived) == ec.INVALID_REQUEST       # first > last
    assert sp.acknowledge("m1", 0, 2, [1, 1], 1.0, 2, archived) == ec.INVALID_REQUEST    # type count
    assert sp.acknowledge("m1", 0, 1, [1, 2], 1.0, 2, archived) == ec.NONE
    assert sp.acknowledge("m1", 0, 0, [1], 1.0, 2, archived) == ec.INVALID_RECORD_STATE  # nothing twice
    assert sp.start == 1 and sp.records[1][0] == AVAILABLE
    # record 2's lock expires: acknowledging it afterwards is refused
    assert sp.acknowledge("m1", 2, 2, [1], 11.0, 2, archived) == ec.INVALID_RECORD_STATE
    sp.expire(11.0, 2, archived)
    assert sp.records[2][0] == AVAILABLE
    again = sp.acquire("m2", log_end=5, max_records=10, now=12.0, lock_s=10.0, limit=2)
    assert again == [(1, 2), (2, 2), (3, 1), (4, 1)]
    assert sp.acknowledge("m2", 1, 2, [2], 13.0, 2, archived) == ec.NONE  # released at the limit
    assert [a[0] for a in archived] == [1, 2] and sp.start == 3  # archived, the start moved past them
    assert sp.acknowledge("m2", 3, 4, [3], 13.0, 2, archived) == ec.NONE
    assert sp.start == 5 and not sp.records
    restored = SharePartition.from_json(sp.to_json())
    assert (restored.start, restored.next) == (5, 5)
    assert sp.acknowledge("m2", 3, 3, [1], 14.0, 2, archived) == ec.INVALID_RECORD_STATE  # gone: no double ack
    sp2 = SharePartition(0)
    sp2.acquire("m", log_end=2, max_records=2, now=0.0, lock_s=10.0, limit=5)
    sp2.acknowledge("m", 1, 1, [3], 1.0, 5, archived)
    saved = sp2.to_json()  # acquired records come back AVAILABLE after a restart; decisions are kept
    assert saved["records"] == {"0": [AVAILABLE, 1], "1": [ARCHIVED, 1]}
    assert SharePartition.from_json(saved).records[1][0] == ARCHIVED != ACKNOWLEDGED


# ------------------------------------------------------------------------------- bad input on the wire
def test_bad_input_gets_kafka_error_codes(broker):
    from kafka_bridge import protocol as kp
    from .kafka_fixtures import RawClient, api_versions_ok
    topic = make_topic(broker.bootstrap, 5)
    group = unique("sg-raw")
    with RawClient(broker.bootstrap) as c:
        hb = c.request(76, 1, {"group_id": group, "member_id": "m1", "member_epoch": 0, "rack_id": None,
                               "subscribed_topic_names": [topic]})
        assert hb["error_code"] == ec.NONE and hb["member_epoch"] > 0
        tid = hb["assignment"]["topic_partitions"][0]["topic_id"]
        part = {"partition_index": 0, "acknowledgement_batches": []}
        fetch = {"group_id": group, "member_id": "m1", "max_wait_ms": 2000, "min_bytes": 1, "max_bytes": 1 << 20,
                 "max_records": 5, "batch_size": 5, "forgotten_topics_data": []}
        acks = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
        # acknowledgements cannot open a session
        r = c.request(78, 1, dict(fetch, share_session_epoch=0, topics=[
            {"topic_id": tid, "partitions": [dict(part, acknowledgement_batches=acks)]}]))
        assert r["error_code"] == ec.INVALID_REQUEST
        r = c.request(78, 1, dict(fetch, share_session_epoch=0, topics=[{"topic_id": tid, "partitions": [part]}]))
        got = r["responses"][0]["partitions"][0]["acquired_records"]
        assert got == [{"first_offset": 0, "last_offset": 4, "delivery_count": 1}]

        def ack(epoch, batches, member="m1"):
            return c.request(79, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": [
                {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": batches}]}]})
        assert ack(7, acks)["error_code"] == ec.INVALID_SHARE_SESSION_EPOCH
        assert ack(0, acks)["error_code"] == ec.INVALID_SHARE_SESSION_EPOCH
        assert ack(1, acks, member="stranger")["error_code"] == ec.UNKNOWN_MEMBER_ID

        def part_err(r):
            assert r["error_code"] == ec.NONE
            return r["responses"][0]["partitions"][0]["error_code"]
        overlap = [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]},
                   {"first_offset": 2, "last_offset": 3, "acknowledge_types": [1]}]
        assert part_err(ack(1, overlap)) == ec.INVALID_REQUEST
        beyond = [{"first_offset": 3, "last_offset": 9, "acknowledge_types": [1]}]
        assert part_err(ack(2, beyond)) == ec.INVALID_RECORD_STATE
        assert part_err(ack(3, [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}])) == ec.NONE
        assert part_err(ack(4, acks)) == ec.INVALID_RECORD_STATE  # nothing acknowledged twice
        d = c.request(77, 1, {"group_ids": [group, unique("nogroup")], "include_authorized_operations": False})
        assert d["groups"][0]["group_state"] == "Stable" and [m["member_id"] for m in d["groups"][0]["members"]] == ["m1"]
        assert d["groups"][1]["error_code"] == ec.GROUP_ID_NOT_FOUND
        # one group id, one protocol; a regex that does not compile
        cg = {"member_id": "x", "member_epoch": 0, "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 1000,
              "subscribed_topic_names": [topic], "subscribed_topic_regex": None, "server_assignor": None,
              "topic_partitions": []}
        assert c.request(68, 1, dict(cg, group_id=group))["error_code"] == ec.GROUP_ID_NOT_FOUND
        bad = dict(cg, group_id=unique("g"), subscribed_topic_names=None, subscribed_topic_regex="(oops")
        assert c.request(68, 1, bad)["error_code"] == ec.INVALID_REGULAR_EXPRESSION
        join = c.request(kp.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                                           "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                           "protocols": [{"name": "range", "metadata": b""}]})
        assert join["error_code"] == ec.INCONSISTENT_GROUP_PROTOCOL
    assert api_versions_ok(broker.bootstrap)


def test_share_group_offsets_admin_apis(broker):
    """DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets over the wire (no stock
    client here sends them): the start offset follows acknowledgements, an empty group's start can be
    moved, and a group with members refuses both changes."""
    from .kafka_fixtures import RawClient
    topic = make_topic(broker.bootstrap, 6)
    group = unique("sg-admin")
    c = share_consumer(broker.bootstrap, group, topic)
    poll_records(c, lambda r: len(r) >= 6)
    with RawClient(broker.bootstrap) as raw:
        alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 2}]}]}
        assert raw.request(91, 0, alter)["responses"][0]["partitions"][0]["error_code"] == ec.NON_EMPTY_GROUP
        assert raw.request(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})["error_code"] == \
            ec.NON_EMPTY_GROUP
        c.commit_sync()  # implicit mode: the records of the last poll are accepted by a commit
        c.close()
        c = None

        def start():
            d = raw.request(90, 0, {"groups": [{"group_id": group, "topics": None}]})["groups"][0]
            assert d["error_code"] == ec.NONE
            return {p["partition_index"]: p["start_offset"] for t in d["topics"] for p in t["partitions"]}
        deadline = time.monotonic() + 15
        while start() != {0: 6} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert start() == {0: 6}
        # the member is gone once its session times out or it left: the group is empty now
        assert raw.request(91, 0, alter)["responses"][0]["partitions"][0]["error_code"] == ec.NONE
        assert start() == {0: 2}
        d = raw.request(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert d["error_code"] == ec.NONE and d["responses"][0]["partitions"][0]["partition_index"] == 0
        assert start() == {}
        missing = raw.request(90, 0, {"groups": [{"group_id": unique("none"), "topics": None}]})["groups"][0]
        assert missing["error_code"] == ec.GROUP_ID_NOT_FOUND
    c2 = share_consumer(broker.bootstrap, group, topic)  # after the delete, earliest again: all 6 records
    try:
        assert sorted(v for v, _, _ in poll_records(c2, lambda r: len(r) >= 6)) == list(range(6))
    finally:
        c2.close()


def test_share_auto_offset_reset_group_config(broker):
    """share.auto.offset.reset set on the group (IncrementalAlterConfigs, resource GROUP) wins over the
    broker's default (earliest on this broker): the group starts at the log end."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    from .kafka_fixtures import RawClient
    topic = make_topic(broker.bootstrap, 5)
    group = unique("sg-reset")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(value, key="share.auto.offset.reset"):
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        return admin.incremental_alter_configs([res])[res].result(15)
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG|Invalid value"):
        alter("sometimes")
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG|Unknown group config"):
        alter("1", key="share.record.lock.duration.ms.typo")
    alter("latest")
    c = share_consumer(broker.bootstrap, group, topic)
    try:
        with RawClient(broker.bootstrap) as raw:
            def start():
                d = raw.request(90, 0, {"groups": [{"group_id": group, "topics": None}]})["groups"][0]
                return {p["partition_index"]: p["start_offset"] for t in d["topics"] for p in t["partitions"]}
            deadline = time.monotonic() + 20
            while start() != {0: 5} and time.monotonic() < deadline:
                assert not [m for m in c.poll(0.2) if m.error() is None]  # nothing before the log end
            assert start() == {0: 5}
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce(topic, b"5")
        assert p.flush(15) == 0
        assert [v for v, _, _ in poll_records(c, lambda r: len(r) >= 1)] == [5]
    finally:
        c.close()


def test_coordinator_member_expiry_and_saved_state(tmp_path):
    """Without sockets: a member that stops heartbeating is removed after the session timeout and
    its records come back; the JSON state brings delivery counts back after a restart."""
    from kafka_bridge.share import ShareGroupCoordinator

    class Clock:
        t = 100.0

        def __call__(self):
            return self.t
    clock = Clock()
    path = str(tmp_path / "config" / "kafkaShareGroups.json")

    def make():
        return ShareGroupCoordinator(lambda: {"t": 1}, lambda t, p: (0, 10), path, session_timeout_ms=1000,
                                     lock_duration_ms=60_000, delivery_count_limit=3,
                                     auto_offset_reset="earliest", clock=clock)
    sg = make()
    a = sg.heartbeat("g", "a", 0, topic_names=["t"])
    b = sg.heartbeat("g", "b", 0, topic_names=["t"])
    assert a.assignment == b.assignment == {"t": [0]}
    g = sg.groups["g"]
    assert sg.open_session("g", "a", 0)[0] == ec.NONE
    assert [o for o, _ in sg.acquire(g, "a", "t", 0, 4)] == [0, 1, 2, 3]
    clock.t += 0.6
    sg.heartbeat("g", "b", sg.groups["g"].members["b"].epoch)
    clock.t += 0.6  # a silent for 1.2 s: removed, its session closed, its records available again
    sg.heartbeat("g", "b", sg.groups["g"].members["b"].epoch)
    assert "a" not in g.members
    assert sg.open_session("g", "b", 0)[0] == ec.NONE
    again = sg.acquire(g, "b", "t", 0, 2)
    assert again == [(0, 2), (1, 2)]
    assert sg.acknowledge(g, "b", "t", 0, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]) == ec.NONE
    sg.save()
    restarted = make()
    sp = restarted.groups["g"].partitions[("t", 0)]
    assert sp.start == 1 and sp.records[1][:2] == [0, 2]  # AVAILABLE, delivered twice
    assert restarted.groups["g"].members == {}


def _rmq(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "rmq.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"rmq {' '.join(args)}: {r.stderr}"
    return r.stdout


def test_one_message_seen_from_both_sides(broker):
    """A RocketMQ push consumer group that fails the record (one retry, then %DLQ%) and a Kafka share
    group that releases it once and then rejects it (archived, %DLQ%): `rmq admin shareGroupProgress`
    shows the record acquired with its delivery count while a share consumer holds it, and
    `rmq store inspect history` shows the retry and dead-letter copies of both groups and each
    group's view of the record."""
    import json
    import threading

    from rmq.client import ClientConfig, ConsumeFromWhere, ConsumeStatus, PushConsumer
    topic = make_topic(broker.bootstrap, 1)
    ns = broker.listeners["namesrv"]
    share_group, push_group = unique("sg"), unique("pg")
    deliveries: list[int] = []
    lock = threading.Lock()

    def fail(msgs):
        with lock:
            deliveries.extend(m.reconsume_times for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    pc = PushConsumer(push_group, ns, config=ClientConfig(client_ip="127.0.0.1", instance_name=push_group),
                      consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, max_reconsume_times=1)
    pc.subscribe(topic, "*")
    pc.register_message_listener(fail)
    pc.start()
    c = share_consumer(broker.bootstrap, share_group, topic, explicit=True)
    try:
        (v, count, m), = poll_records(c, lambda r: len(r) >= 1)
        assert (v, count) == (0, 1)
        # while the share consumer holds the record, the RocketMQ side sees it acquired
        rec = json.loads(_rmq("admin", "shareGroupProgress", "-n", ns, "-g", share_group, "-t", topic, "-p", "0",
                              "-o", "0", "--json"))["record"]
        assert (rec["state"], rec["deliveryCount"]) == ("Acquired", 1) and rec["member"], rec
        c.acknowledge(m, AcknowledgeType.RELEASE)
        (v, count, m), = poll_records(c, lambda r: len(r) >= 1)
        assert (v, count) == (0, 2)
        c.acknowledge(m, AcknowledgeType.REJECT)
        c.commit_sync()
        # the push consumer: first delivery, one retry (reconsumeTimes 1), then %DLQ%
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(deliveries) < 2:
            time.sleep(0.1)
        assert deliveries[:2] == [0, 1], deliveries
        prog = json.loads(_rmq("admin", "shareGroupProgress", "-n", ns, "-g", share_group, "--json"))
        assert [(p["topic"], p["partition"], p["startOffset"]) for p in prog["partitions"]] == [(topic, 0, 1)]

        def history():
            return json.loads(_rmq("store", "inspect", broker.data_dir, "history", "--topic", topic, "--queue", "0",
                                   "--offset", "0", "--json"))
        deadline = time.monotonic() + 30
        h = history()
        while time.monotonic() < deadline and not (
                {("dead letter", f"%DLQ%{push_group}"), ("dead letter", f"%DLQ%{share_group}")}
                <= {(x["kind"], x["topic"]) for x in h["copies"]}
                and any(g["group"] == push_group and g["state"] == "consumed" for g in h["groups"])):
            time.sleep(0.2)
            h = history()
    finally:
        c.close()
        pc.shutdown()
    kinds = [(x["kind"], x["topic"], x["reconsumeTimes"]) for x in h["copies"]]
    assert ("retry", f"%RETRY%{push_group}", 1) in kinds, kinds
    assert ("dead letter", f"%DLQ%{push_group}", 2) in kinds, kinds
    assert ("dead letter", f"%DLQ%{share_group}", 1) in kinds, kinds
    views = {g["group"]: g for g in h["groups"]}
    assert views[push_group]["kind"] == "offset" and views[push_group]["state"] == "consumed", views
    assert views[share_group]["kind"] == "share" and views[share_group]["startOffset"] == 1, views


def test_simple_assignor_spreads_then_shares_partitions():
    """Without sockets: one member gets every partition; members spread over the partitions while
    there are at least as many partitions as members (each partition to exactly one member); with
    more members than partitions every member gets one partition and each partition is shared."""
    from kafka_bridge.share import ShareGroupCoordinator
    sg = ShareGroupCoordinator(lambda: {"four": 4, "one": 1}, lambda t, p: (0, 10), auto_offset_reset="earliest")

    def assignments(members):
        return {m: sg.describe("g")["members"][i]["assignment"] for i, m in enumerate(members)}
    sg.heartbeat("g", "a", 0, topic_names=["four", "one"])
    assert assignments(["a"]) == {"a": {"four": [0, 1, 2, 3], "one": [0]}}
    g = sg.groups["g"]
    assert sg.open_session("g", "a", 0)[0] == ec.NONE
    assert sg.acquire(g, "a", "four", 1, 2) == [(0, 1), (1, 1)]
    sg.heartbeat("g", "b", 0, topic_names=["four", "one"])
    sg.heartbeat("g", "a", g.members["a"].epoch)  # a learns it lost partitions 1 and 3
    asg = assignments(["a", "b"])
    assert asg == {"a": {"four": [0, 2], "one": [0]}, "b": {"four": [1, 3], "one": [0]}}
    # what a held on partition 1 is available again at once, its delivery count kept
    assert g.partitions[("four", 1)].records[0][:3] == [AVAILABLE, 1, None]
    assert sg.open_session("g", "b", 0)[0] == ec.NONE
    assert sg.acquire(g, "b", "four", 1, 1) == [(0, 2)]
    for m in "cdefg":
        sg.heartbeat("g", m, 0, topic_names=["four"])
    members = list("abcdefg")
    asg = assignments(members)
    four = [asg[m]["four"] for m in members]
    assert all(len(ps) == 1 for ps in four), four  # 7 members, 4 partitions: one each
    holders = {p: sum(ps == [p] for ps in four) for p in range(4)}
    assert holders == {0: 2, 1: 2, 2: 2, 3: 1}, holders  # every partition read, by 1 or 2 members
    assert asg["a"]["one"] == asg["b"]["one"] == [0]  # "one" is subscribed by a and b only


def test_history_and_share_progress_bad_input(broker):
    """One clear sentence for what cannot be answered: exit code 1, or click's 2 for a usage error."""
    def fails(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "rmq.cli", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
        return r.stderr
    assert "history needs --msg-id, or --topic, --queue and --offset" in fails(
        "store", "inspect", broker.data_dir, "history", "--topic", "nope")
    assert "no message with nope queue 0 offset 5" in fails(
        "store", "inspect", broker.data_dir, "history", "--topic", "nope", "--queue", "0", "--offset", "5")
    ns = broker.listeners["namesrv"]
    assert "share group 'no-such-group' not found" in fails("admin", "shareGroupProgress", "-n", ns, "-g", "no-such-group")
    assert "--offset needs --topic and --partition" in fails("admin", "shareGroupProgress", "-n", ns, "-g", "g", "-o", "1")
