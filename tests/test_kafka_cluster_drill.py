"""Partitions that keep their numbers when a broker dies (issue 27, item 0): the layout rules
(offline groups keep their index, node ids and partition numbers), and a bounded drill with real
processes: 1 `rmq namesrv` + 2 `rmq broker` (configs/cluster-2b-2n.md's shape), a confluent-kafka
consumer group and an idempotent producer while broker-a is killed with SIGKILL and restarted on its
ports. Nothing acknowledged is lost, and every acknowledged (partition, offset) names its record
afterwards. Also (item 1 and 2 of the issue's third round): a Kafka OffsetCommit acknowledged just
before the kill -9 comes back after the restart (the offsets journal), and a topic created with
RocketMQ's admin, which no Kafka client looked at before the kill, keeps broker-a's partitions
(offline) in its numbering.

KAFKA_DRILL_SCALE=N makes each phase N times longer; KAFKA_DRILL_KILLS=K kills broker-a K times;
KAFKA_DRILL_DEBUG=cgrp passes librdkafka's `debug` setting to the group's consumer (its log on stderr)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import yaml

from kafka_bridge import protocol as kp
from kafka_bridge.cluster import QUEUES_NAMESPACE, KafkaNode, build_groups, build_layout, coordinator_index
from kafka_bridge.protocol import error_codes as ec
from rmq.remoting import BrokerData, KVTable, QueueData, RequestCode, TopicRouteData
from tests.kafka_fixtures import RawClient, unique, wait_until
from tests.remoting_harness import SyncClient
from tests.test_kafka_cluster import Proc, _metadata

#: KAFKA_DRILL_SCALE=10 runs the drill ten times longer (records before, during and after the outage)
SCALE = max(1, int(os.environ.get("KAFKA_DRILL_SCALE", "1")))
KILLS = max(1, int(os.environ.get("KAFKA_DRILL_KILLS", "1")))
pytestmark = pytest.mark.timeout(240 * SCALE * KILLS)


def test_offline_groups_keep_their_index_and_partitions():
    b = KafkaNode(1, "broker-b", "h", 2, "h:20")
    table = {"broker-b": BrokerData("c", "broker-b", {0: "h:20"})}
    groups = build_groups({"broker-b"}, table, {"broker-b": "h:2"}, known={"broker-a", "broker-b"})
    assert [(g.index, g.broker_name, g.offline) for g in groups] == [(0, "broker-a", True), (1, "broker-b", False)]
    assert groups[1].leader.node_id == 1 and groups[0].leader is None
    # without the members record, broker-b would become group 0 (node 0): the renumbering of issue 27
    assert build_groups({"broker-b"}, table, {"broker-b": "h:2"})[0].leader.node_id == 0
    route = TopicRouteData(queueDatas=[QueueData("broker-b", 4, 4)], brokerDatas=[table["broker-b"]])
    stand_in = KafkaNode(0, "broker-a", "", -1, "")
    lay = build_layout("T", route, {"broker-b": b}, {"broker-a": (stand_in, 4, 6)})
    assert [(s.node.broker_name, s.base, s.count, s.offline) for s in lay.segments] == \
        [("broker-a", 0, 4, True), ("broker-b", 4, 4, False)]
    assert lay.total == 8 and lay.locate(5).node is b and lay.locate(0).offline


# ------------------------------------------------------------------------------------------ drill
def _broker_conf(workdir, name: str, ns_addr: str, listen: int = 0, kafka: int = 0) -> str:
    conf = {"brokerClusterName": "DrillCluster", "brokerName": name, "brokerId": 0, "namesrvAddr": ns_addr,
            "brokerIP1": "127.0.0.1", "listenPort": listen, "kafkaEnable": True, "kafkaPort": kafka,
            "haListenPort": 0,  # ephemeral, also on the restart (listenPort + 1 may be taken by then)
            "storePathRootDir": str(workdir / name), "registerNameServerPeriod": 1000,
            "mappedFileSizeCommitLog": 4 * 1024 * 1024, "maxMessageSize": 1024 * 1024,
            "mappedFileSizeConsumeQueue": 60_000, "maxHashSlotNum": 1000, "maxIndexNum": 4000,
            "kafkaGroupInitialRebalanceDelayMs": 100, "kafkaGroupMinSessionTimeoutMs": 1000,
            # consumerOffset.json is written only at a clean stop: what survives the kill -9 is what
            # the offsets journal holds (a Kafka commit is journaled before its answer)
            "flushConsumerOffsetInterval": 3_600_000}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(conf))
    return str(path)


def _partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, error code) as Metadata reports it."""
    (t,) = _metadata(bootstrap, [topic])["topics"]
    return {p["partition_index"]: (p["leader_id"], p["error_code"]) for p in t["partitions"]}


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def _recorded_queues(ns_addr: str) -> dict[str, str]:
    c = SyncClient(ns_addr)
    try:
        r = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": QUEUES_NAMESPACE})
    finally:
        c.close()
    return KVTable.decode(r.body).table if r.body else {}


#: COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, _TIMED_OUT, _TRANSPORT
_RETRIABLE = {15, 14, 16, -185, -195}


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), asked again while the answer is a retriable
    error (COORDINATOR_NOT_AVAILABLE while a restarted broker's connections come back), as a Kafka
    client's own retries would."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
                return {tp.partition: tp.offset for tp in got}
            except KafkaException as exc:
                if exc.args[0].code() not in _RETRIABLE or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _offset_fetch(bootstrap: str, group: str, topic: str, partitions: int, version: int) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code) as OffsetFetch `version` answers."""
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]}
    if version >= 7:
        body["require_stable"] = False
    with RawClient(bootstrap) as c:
        resp = c.request(kp.OFFSET_FETCH, version, body)
    assert resp["error_code"] == ec.NONE, resp
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]}


def _group_led_by(index: int, prefix: str) -> str:
    """A group id whose coordinator is broker group `index` of 2."""
    return next(g for g in (unique(prefix) for _ in range(1000)) if coordinator_index(g, 2) == index)


def test_kill_and_restart_a_broker_under_a_group_and_an_idempotent_producer(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    procs: list[Proc] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        ns = Proc("namesrv", ["namesrv", "--port", "0"], tmp_path)
        procs.append(ns)
        ns_addr = ns.wait_ready()["namesrv"]
        brokers = {}
        for name in ("broker-a", "broker-b"):
            brokers[name] = Proc(name, ["broker", "-c", _broker_conf(tmp_path, name, ns_addr)], tmp_path)
            procs.append(brokers[name])
        for p in brokers.values():
            p.wait_ready()
        bs_a, bs_b = brokers["broker-a"].info["kafka"], brokers["broker-b"].info["kafka"]
        for bs in (bs_a, bs_b):
            wait_until(lambda bs=bs: len(_metadata(bs)["brokers"]) == 2, 20, what="both Kafka nodes listed")
        # the group's coordinator is broker-a, the broker killed: the group moves to broker-b and back,
        # rebalancing, and resumes from its committed offsets each time
        topic, group = unique("drill"), _group_led_by(0, "drill-group")
        admin = AdminClient({"bootstrap.servers": bs_b})
        admin.create_topics([NewTopic(topic, 8, 1)], request_timeout=30)[topic].result(30)
        wait_until(lambda: len(_partitions(bs_b, topic)) == 8, 20, what="8 partitions")
        assert {p: lead for p, (lead, _) in _partitions(bs_b, topic).items()} == {p: p // 4 for p in range(8)}

        acked: dict[str, tuple[int, int]] = {}
        failed: list[str] = []
        received: list[tuple[int, int, str]] = []
        producer = Producer({"bootstrap.servers": f"{bs_a},{bs_b}", "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 90_000, "reconnect.backoff.max.ms": 500,
                             "topic.metadata.refresh.interval.ms": 1000})

        def report(err, msg):
            if err is None:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())
            else:
                failed.append(f"{msg.value().decode()}: {err}")

        def produce():
            n = 0
            while not stop.is_set() and n < 20_000 * SCALE:
                try:
                    producer.produce(topic, f"r-{n}".encode(), key=f"k{n}".encode(), partition=n % 8,
                                     on_delivery=report)
                    n += 1
                except BufferError:
                    pass
                producer.poll(0.002)

        commit_errors: dict[str, int] = {}

        def on_commit(err, partitions):
            names = [str(err.name())] if err is not None else []
            names += [f"p{tp.partition}:{tp.error.name()}" for tp in partitions or () if tp.error is not None]
            for n in names:
                commit_errors[n] = commit_errors.get(n, 0) + 1

        consumer = Consumer({"on_commit": on_commit,
                             "bootstrap.servers": f"{bs_a},{bs_b}", "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": True, "auto.commit.interval.ms": 300, "session.timeout.ms": 6000,
                             "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                             **({"debug": os.environ["KAFKA_DRILL_DEBUG"]} if os.environ.get("KAFKA_DRILL_DEBUG") else {})})
        consumer.subscribe([topic])
        consuming = threading.Event()
        consuming.set()

        t0 = time.monotonic()
        rewinds: list[tuple[float, int, int, int]] = []  # (s, partition, next offset expected, offset delivered)
        next_at: dict[int, int] = {}
        last_at: dict[int, int] = {}
        events: list[tuple[float, str]] = []
        got_at: list[float] = []  # when each record was delivered (s since t0), for the pauses printed

        def consume():
            while consuming.is_set():
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    p, o = m.partition(), m.offset()
                    if o < next_at.get(p, 0) and last_at.get(p) != o - 1:
                        rewinds.append((round(time.monotonic() - t0, 1), p, next_at[p], o))
                    next_at[p] = max(next_at.get(p, 0), o + 1)
                    last_at[p] = o
                    received.append((p, o, m.value().decode()))
                    got_at.append(time.monotonic() - t0)

        threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
        for t in threads:
            t.start()
        wait_until(lambda: len(acked) >= 400 * SCALE and len(received) >= 100, 60 * SCALE,
                   what="records acked and consumed")

        # a topic made with RocketMQ's admin on both brokers, never looked at by a Kafka client:
        # each broker records its queues as created (NameServer KV), so its numbering survives a death
        from rmq.client.admin import MQAdmin
        unseen = unique("unseen")
        with MQAdmin(ns_addr) as mq:
            mq.create_topic(unseen, cluster="DrillCluster", read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: {f"broker-a/{unseen}", f"broker-b/{unseen}"} <= set(_recorded_queues(ns_addr)), 20,
                   what="both brokers to record the new topic's queues")

        a = brokers["broker-a"]
        ports = _port(a.info["remoting"]), _port(a.info["kafka"])
        lost_commits = 0
        stats = []
        for kill in range(KILLS):
            # Kafka commits acknowledged right before the kill: one group coordinated by broker-a (its
            # partitions committed locally, broker-b's over UPDATE_CONSUMER_OFFSET), one by broker-b
            committed = {}
            for index in (0, 1):
                g = _group_led_by(index, f"durable{kill}")
                c = Consumer({"bootstrap.servers": bs_b, "group.id": g, "enable.auto.commit": False})
                try:
                    want = [TopicPartition(topic, p, 1 + p + kill) for p in range(8)]
                    c.commit(offsets=want, asynchronous=False)
                finally:
                    c.close()
                committed[g] = {p: 1 + p + kill for p in range(8)}
            rereads_before = len(received) - len({v for _, _, v in list(received)})

            # kill -9 broker-a: its partitions keep their numbers, offline; broker-b's keep node id 1
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(10)
            events.append((round(time.monotonic() - t0, 1), "kill"))
            offline = {**{p: (-1, ec.LEADER_NOT_AVAILABLE) for p in range(4)}, **{p: (1, ec.NONE) for p in range(4, 8)}}
            wait_until(lambda: _partitions(bs_b, topic) == offline, 30, what="partitions 0-3 offline, 4-7 still led by node 1")
            if kill == 0:
                assert _partitions(bs_b, unseen) == offline, "a topic no Kafka client saw was renumbered"
                # a topic created while broker-a is down: its partitions go to the broker that is up, as in Kafka
                while_down = unique("while-down")
                down_admin = AdminClient({"bootstrap.servers": bs_b})
                down_admin.create_topics([NewTopic(while_down, 4, 1)], request_timeout=30)[while_down].result(40)
                assert _partitions(bs_b, while_down) == {p: (1, ec.NONE) for p in range(4)}
                # OffsetFetch at the live coordinator: broker-a's partitions answer the offsets this
                # coordinator committed there itself; for a group it knows but whose offsets on
                # broker-a it never saw, "not known now" (retriable), not "no offset"; broker-b's
                # partitions answer their commits
                g_b = next(g for g in committed if coordinator_index(g, 2) == 1)
                store_b = {p: (committed[g_b][p], ec.NONE) for p in range(4, 8)}
                for version, code in ((7, ec.UNSTABLE_OFFSET_COMMIT), (5, ec.COORDINATOR_LOAD_IN_PROGRESS)):
                    got = _offset_fetch(bs_b, g_b, topic, 8, version)
                    assert got == {**{p: (committed[g_b][p], ec.NONE) for p in range(4)}, **store_b}, (version, got)
                    got = _offset_fetch(bs_b, g_b, unseen, 8, version)
                    assert {p: got[p] for p in range(4)} == {p: (-1, code) for p in range(4)}, (version, got)
                    # a group with no offset known anywhere here is new: "no offset", so that its
                    # consumers start on the live partitions instead of waiting for broker-a
                    fresh = _offset_fetch(bs_b, _group_led_by(1, "fresh"), topic, 8, version)
                    assert fresh == {p: (-1, ec.NONE) for p in range(8)}, (version, fresh)
                # OffsetCommit there: broker-a's partitions refused (their offsets are on broker-a),
                # broker-b's committed
                body = {"group_id": g_b, "generation_id_or_member_epoch": -1, "member_id": "",
                        "retention_time_ms": -1,
                        "topics": [{"name": topic, "partitions": [
                            {"partition_index": p, "committed_offset": 1, "committed_metadata": None}
                            for p in range(8)]}]}
                with RawClient(bs_b) as c:
                    resp = c.request(kp.OFFSET_COMMIT, 2, body)
                codes = {p["partition_index"]: p["error_code"] for t in resp["topics"] for p in t["partitions"]}
                assert codes == {**{p: ec.NOT_LEADER_OR_FOLLOWER for p in range(4)},
                                 **{p: ec.NONE for p in range(4, 8)}}, codes
                for p in range(8):  # restore what the durability check below expects
                    body["topics"][0]["partitions"][p]["committed_offset"] = committed[g_b][p]
                with RawClient(bs_b) as c:
                    c.request(kp.OFFSET_COMMIT, 2, body)
            at_kill = len(acked)
            wait_until(lambda: len(acked) >= at_kill + 200 * SCALE, 60 * SCALE,
                       what="acks from broker-b while broker-a is down")

            # restart broker-a on its ports, with its store
            os.unlink(a.ready_path)
            a = Proc("broker-a", ["broker", "-c", _broker_conf(tmp_path, "broker-a", ns_addr, *ports)], tmp_path)
            procs.append(a)
            a.wait_ready()
            events.append((round(time.monotonic() - t0, 1), "ready"))
            wait_until(lambda: {p: lead for p, (lead, _) in _partitions(bs_b, topic).items()} ==
                       {p: p // 4 for p in range(8)}, 30, what="broker-a leading partitions 0-3 again")
            if kill == 0:
                assert _partitions(bs_b, while_down) == {p: (1, ec.NONE) for p in range(4)}, "renumbered on return"
            for g, want in committed.items():
                got = _committed(f"{bs_a},{bs_b}", g, topic, 8)
                lost_commits += sum(1 for p in want if got.get(p) != want[p])
                assert got == want, f"group {g}: acknowledged commits {want}, after the kill -9 {got}"
            back = len(acked)
            wait_until(lambda: sum(1 for p, _ in list(acked.values()) if p < 4) > 0 and len(acked) >= back + 200 * SCALE,
                       60 * SCALE, what="acks from both brokers after the restart")
            stats.append(rereads_before)
        stop.set()
        threads[0].join(30)
        assert producer.flush(90) == 0
        assert not failed, failed[:5]
        values = set(acked)
        wait_until(lambda: values <= {v for _, _, v in list(received)}, 60 * SCALE, what="every acked record consumed")
        consuming.clear()
        threads[1].join(30)
        consumer.close()

        # every acked (partition, offset) names its record, read back from the start
        reader = Consumer({"bootstrap.servers": f"{bs_a},{bs_b}", "group.id": unique("reader"),
                           "enable.auto.commit": False})
        stored: dict[tuple[int, int], str] = {}
        try:
            highs = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(8)}
            reader.assign([TopicPartition(topic, p, 0) for p in range(8)])
            deadline = time.monotonic() + 60 * SCALE
            while len(stored) < sum(highs.values()) and time.monotonic() < deadline:
                m = reader.poll(0.5)
                if m is not None and m.error() is None:
                    stored[(m.partition(), m.offset())] = m.value().decode()
        finally:
            reader.close()
        wrong = {v: po for v, po in acked.items() if stored.get(po) != v}
        assert not wrong, f"{len(wrong)} acked (partition, offset) pairs name other records: {list(wrong.items())[:5]}"
        by_position = {}
        for p, o, v in received:
            by_position.setdefault((p, o), set()).add(v)
        assert all(len(vs) == 1 and stored.get(po) in vs for po, vs in by_position.items())
        dup = len(received) - len({v for _, _, v in received})
        rereads = [b - a for a, b in zip(stats, stats[1:] + [dup])]  # deliveries again, from each kill to the next
        stored_twice = len(stored) - len(set(stored.values()))
        seen_once: set[str] = set()
        again_by_partition: dict[int, int] = {}
        for p, _, v in received:
            if v in seen_once:
                again_by_partition[p] = again_by_partition.get(p, 0) + 1
            seen_once.add(v)
        dup_a = sum(1 for p, _, _ in received if p < 4) - len({v for p, _, v in received if p < 4})
        # the group's pauses: longest stretches without a delivery while records were being produced
        pauses = sorted(((round(b - a, 1), round(a, 1)) for a, b in zip(got_at, got_at[1:])), reverse=True)[:3]
        print(f"drill: {KILLS} kill(s) of broker-a, {len(acked)} acked, {len(received)} received, 0 lost, "
              f"{len(stored)} stored, {dup} delivered more than once ({dup_a} on broker-a's partitions 0-3), "
              f"re-read after each kill {rereads} (by partition {dict(sorted(again_by_partition.items()))}), "
              f"{stored_twice} records stored twice, group rewinds (s, partition, expected, got) {rewinds[:24]} "
              f"broker-a {events}, longest pauses in delivery (s, from s) {pauses}, commit errors {commit_errors}, "
              f"acknowledged commits lost {lost_commits}")
        for p in reversed(procs):
            p.stop()
            assert "Traceback" not in p.log(), f"{p.name} logged an exception:\n{p.log()[-4000:]}"
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()


def test_a_master_records_its_topics_as_configured():
    """The reconciliation behind KAFKA_BRIDGE_QUEUES (no NameServer: the KV requests are captured):
    changed counts are put, a topic gone from the broker has its record deleted, what is recorded
    already is not sent again, and a NameServer that refuses keeps the old record for the next try."""
    import asyncio
    from types import SimpleNamespace

    from kafka_bridge.cluster import KafkaCluster
    cfg = SimpleNamespace(brokerClusterName="C", brokerName="broker-a", brokerId=0, namesrvAddr="",
                          registerNameServerPeriod=30000)
    cl = KafkaCluster(cfg, "h", 9)
    sent, accept = [], [True]

    async def kv_all(code, ext):
        sent.append((code, ext["key"], ext.get("value")))
        return accept[0]
    cl._kv_all = kv_all  # noqa: SLF001 - the NameServer side

    async def run():
        recorded = {"same": (4, 6), "grown": (2, 6), "gone": (4, 6)}
        out, done = await cl._record_own_topics(recorded, {"same": (4, 6), "grown": (8, 6), "new": (3, 6),
                                                           "empty": (0, 6)})
        assert done and out == {"same": (4, 6), "grown": (8, 6), "new": (3, 6)}
        assert sorted(sent) == sorted([(RequestCode.PUT_KV_CONFIG, "broker-a/grown", "8,6"),
                                       (RequestCode.PUT_KV_CONFIG, "broker-a/new", "3,6"),
                                       (RequestCode.DELETE_KV_CONFIG, "broker-a/gone", None)])
        sent.clear()
        accept[0] = False
        again, done = await cl._record_own_topics(out, {"same": (4, 6), "grown": (8, 4), "new": (3, 6)})
        assert not done and again == out  # the refused change is tried again later
        assert sent == [(RequestCode.PUT_KV_CONFIG, "broker-a/grown", "8,4")]
    asyncio.run(run())
