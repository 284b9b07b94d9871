"""The HA slave as a Kafka follower replica (docs/ha.md "Kafka clients and the slave";
kafka_bridge/cluster.py): real `rmq namesrv` / `rmq broker -c` processes on 127.0.0.1 with
ephemeral ports, a SYNC_MASTER and its SLAVE, both with a Kafka listener.

Checked: Metadata from either node lists the master (node 0) and the slave (node 1000) as the
partitions' replicas, both in the ISR, the master as leader (confluent-kafka's view too); the slave
refuses produce with NOT_LEADER_OR_FOLLOWER and serves Fetch/ListOffsets from its own copy; after
SIGKILL of the master the slave leads for reads (the master an offline replica), still refuses
produce, coordinates groups, and fresh confluent-kafka and kafka-python consumers read every
record acknowledged by the master, a group resuming from the offset it committed on the master.
The rules themselves (node ids, replicas, whose view decides the ISR, coordinators) are checked on
a made-up view of the cluster first.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.peers import stop_process
from kafka_bridge.protocol import error_codes as ec
from kafka_bridge.records import encode_batch
from rmq.remoting import KVTable, RequestCode
from tests.kafka_fixtures import RawClient, wait_until
from tests.remoting_harness import SyncClient
from tests.test_cluster_processes import spawn, wait_file
from tests.test_ha import create_topic, start_namesrv, start_sync_pair, wait_caught_up, wait_log
from tests.test_kafka_cluster import _metadata

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka")]

TOPIC = "hk-orders"
PARTITIONS = 2
RECORDS = 40
MASTER_NODE, SLAVE_NODE = 0, 1000  # brokerId * 1000 + index of broker-a
OP_TIMEOUT = 15.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A NameServer; broker-a as SYNC_MASTER and its SLAVE (learning the master's HA address from
    the NameServer), each with a Kafka listener on a free port; topic TOPIC with RECORDS records
    produced to the master by confluent-kafka with acks=all."""
    tmp_path = tmp_path_factory.mktemp("ha-kafka")
    started: list = []
    kafka = {"kafkaEnable": True, "kafkaPort": 0, "kafkaGroupMinSessionTimeoutMs": 1000}
    try:
        ns = start_namesrv(started, tmp_path)
        pm, ps, m, s = start_sync_pair(started, tmp_path, ns, **kafka)
        create_topic(m["brokerAddr"], TOPIC, PARTITIONS)
        _produce_records(m["kafka"])
        yield {"tmp": tmp_path, "ns": ns, "m": m, "s": s, "pm": pm, "ps": ps}
        assert ps.poll() is None, "the slave died"
        slave_log = (tmp_path / "s.log").read_text(errors="replace")
        assert "Traceback" not in slave_log, slave_log[-4000:]
    finally:
        for p in reversed(started):  # brokers first: they withdraw their endpoints from the NameServer
            stop_process(p, 10)


def _produce_records(bootstrap: str) -> None:
    from confluent_kafka import Producer
    acked, errors = [], []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 15000})
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"order-{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg.offset()))
    assert p.flush(OP_TIMEOUT) == 0
    assert errors == [] and len(acked) == RECORDS  # SYNC_MASTER: each acknowledged once the slave had it


def _partitions(bootstrap: str, topic: str = TOPIC) -> dict[int, tuple]:
    """{partition: (leader, replicas, isr, offline)} from Metadata v9."""
    (t,) = _metadata(bootstrap, [topic])["topics"]
    if t["error_code"] != ec.NONE:
        return {}
    return {p["partition_index"]: (p["leader_id"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"])
            for p in t["partitions"]}


def _brokers(bootstrap: str) -> dict[int, str]:
    return {b["node_id"]: f"{b['host']}:{b['port']}" for b in _metadata(bootstrap)["brokers"]}


def _produce(c: RawClient, partition: int) -> dict:
    batch = encode_batch([(b"k", b"to the slave", [], int(time.time() * 1000))])
    r = c.request(kp.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
    return r["responses"][0]["partition_responses"][0]


def _fetch(c: RawClient, partition: int, offset: int = 0) -> dict:
    r = c.request(kp.FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                 "forgotten_topics_data": [], "rack_id": ""})
    return r["responses"][0]["partitions"][0]


def _latest_offset(c: RawClient, partition: int) -> int:
    r = c.request(kp.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == ec.NONE, p
    return p["offset"]


def _consume(consumer, want: int, timeout: float = 20.0) -> list:
    """confluent-kafka: poll until `want` records arrived (or the timeout); [(partition, offset, value)]."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append((m.partition(), m.offset(), m.value()))
    return got


# ============================================================================================= rules

def test_groups_node_ids_replicas_isr_and_coordinators():
    from types import SimpleNamespace

    from kafka_bridge.cluster import KafkaCluster, Segment, build_groups
    from rmq.remoting import BrokerData
    table = {"broker-a": BrokerData("C", "broker-a", {0: "h:10", 1: "h:11"}),
             "broker-b": BrokerData("C", "broker-b", {1: "h:21"}),            # master down
             "broker-c": BrokerData("C", "broker-c", {0: "h:30", 1: "h:31"}),  # master up without Kafka
             "broker-d": BrokerData("C", "broker-d", {0: "h:40"})}
    kv = {"broker-a": "h:1", "broker-a@1": "h:2", "broker-b": "h:3", "broker-b@1": "h:4", "broker-c@1": "h:5",
          "broker-d": "h:6"}
    groups = build_groups(table, table, kv)
    assert [(g.broker_name, g.index) for g in groups] == [("broker-a", 0), ("broker-b", 1), ("broker-d", 2)]
    a, b, d = groups
    assert (a.leader.node_id, a.replicas, a.slaves[0].broker_addr) == (0, [0, 1000], "h:11")
    assert (b.master, b.leader.node_id, b.replicas) == (None, 1001, [1, 1001])
    assert (d.leader.node_id, d.replicas) == (2, [2])

    def view(name: str, broker_id: int, in_sync) -> KafkaCluster:
        cfg = SimpleNamespace(brokerClusterName="C", brokerName=name, brokerId=broker_id, namesrvAddr="",
                              registerNameServerPeriod=30000)
        cl = KafkaCluster(cfg, "h", 9, in_sync=lambda: in_sync)
        cl.set_groups(groups)
        return cl

    def seg(g):
        return Segment(g.leader, 0, 1, 6)
    # the pair's own HA service decides for its slave; any other broker goes by the registration
    assert view("broker-a", 0, True).replica_state(seg(a)) == ([0, 1000], [0, 1000], [])
    assert view("broker-a", 0, False).replica_state(seg(a)) == ([0, 1000], [0], [])
    assert view("broker-a", 1, False).replica_state(seg(a)) == ([0, 1000], [0], [])
    assert view("broker-d", 0, False).replica_state(seg(a)) == ([0, 1000], [0, 1000], [])
    assert view("broker-d", 0, None).replica_state(seg(a)) == ([0, 1000], [0, 1000], [])
    # master down: its slave leads alone, the master an offline replica
    assert view("broker-d", 0, True).replica_state(seg(b)) == ([1, 1001], [1001], [1])
    # a follower reads but never writes; the slave of a downed master leads (offsets, groups) but
    # takes no writes either
    fa, sb = view("broker-a", 1, True), view("broker-b", 1, None)
    assert (fa.is_replica(seg(a)), fa.is_local(seg(a)), fa.takes_writes(seg(a))) == (True, False, False)
    assert (sb.is_replica(seg(b)), sb.is_local(seg(b)), sb.takes_writes(seg(b))) == (True, True, False)
    assert not sb.is_replica(seg(a)) and view("broker-a", 0, True).takes_writes(seg(a))
    assert (sb.active, sb.node_id, sb.controller_id) == (True, 1001, 0)
    assert [n.node_id for n in sb.nodes] == [0, 2, 1000, 1001] and [n.node_id for n in sb.masters] == [0, 2]
    # coordinators: the leader of brokerName hash mod 3, the same from every node
    coords = {k: sb.coordinator_for(k).node_id for k in (f"g{i}" for i in range(30))}
    assert set(coords.values()) == {0, 1001, 2} and coords == {k: fa.coordinator_for(k).node_id for k in coords}
    assert all(sb.is_coordinator(k) == (n == 1001) for k, n in coords.items())


# ============================================================================================= processes

def test_metadata_lists_master_and_slave_as_replicas(pair):
    from confluent_kafka.admin import AdminClient
    m, s = pair["m"]["kafka"], pair["s"]["kafka"]
    want = {p: (MASTER_NODE, [MASTER_NODE, SLAVE_NODE], [MASTER_NODE, SLAVE_NODE], []) for p in range(PARTITIONS)}
    for bs in (m, s):  # each node's view of the NameServer refreshes every 2 s
        wait_until(lambda b=bs: _partitions(b) == want, OP_TIMEOUT, 0.2,
                   what=f"Metadata from {bs} to list both replicas")
        assert _brokers(bs) == {MASTER_NODE: m, SLAVE_NODE: s}
    # the slave's endpoint is published next to the master's, under brokerName@brokerId
    c = SyncClient(pair["ns"])
    try:
        kv = KVTable.decode(c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "KAFKA_BRIDGE"}).body).table
    finally:
        c.close()
    assert kv == {"broker-a": m, "broker-a@1": s}
    # what a stock client sees
    md = AdminClient({"bootstrap.servers": s}).list_topics(TOPIC, timeout=OP_TIMEOUT)
    assert {k: f"{v.host}:{v.port}" for k, v in md.brokers.items()} == {MASTER_NODE: m, SLAVE_NODE: s}
    parts = md.topics[TOPIC].partitions
    assert {p: (x.leader, x.replicas, x.isrs) for p, x in parts.items()} == {
        p: (MASTER_NODE, [MASTER_NODE, SLAVE_NODE], [MASTER_NODE, SLAVE_NODE]) for p in range(PARTITIONS)}


def test_slave_refuses_produce_and_serves_reads(pair):
    m, s = pair["m"]["kafka"], pair["s"]["kafka"]
    with RawClient(m) as cm, RawClient(s) as cs:
        r = _produce(cs, 0)
        assert r["error_code"] == ec.NOT_LEADER_OR_FOLLOWER and "produce to its master" in r["error_message"]
        for part in range(PARTITIONS):
            top = _latest_offset(cm, part)
            assert top == RECORDS // PARTITIONS
            # the slave's topic config arrives with SlaveSynchronize (every 500 ms here)
            f = wait_until(lambda q=part: (x := _fetch(cs, q))["error_code"] == ec.NONE and x, OP_TIMEOUT, 0.1,
                           what="the slave to serve a fetch")
            assert f["high_watermark"] == top and f["records"]
            assert _latest_offset(cs, part) == top


def test_master_killed_kafka_consumers_read_from_slave(pair):
    """Last in the module: kills the master."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    m, s = pair["m"]["kafka"], pair["s"]["kafka"]
    # a group commits offset 5 of partition 0 on the master (its coordinator while it is up)
    group = "hk-resume"
    c = Consumer({"bootstrap.servers": m, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=False)
    finally:
        c.close()
    # SlaveSynchronize copies the committed offset to the slave; HA has every record there already
    def synced():
        cl = SyncClient(pair["s"]["brokerAddr"])
        try:
            return f"{TOPIC}@{group}".encode() in (cl.request(RequestCode.GET_ALL_CONSUMER_OFFSET, {}).body or b"")
        finally:
            cl.close()
    wait_until(synced, OP_TIMEOUT, 0.1, what="the committed offset to reach the slave")
    wait_caught_up(pair["m"]["brokerAddr"], pair["s"]["brokerAddr"])

    pm = pair["pm"]
    os.kill(pm.pid, signal.SIGKILL)
    pm.wait(10)
    # the NameServer drops the master when its connection closes; the slave's view follows within 2 s
    down = {p: (SLAVE_NODE, [MASTER_NODE, SLAVE_NODE], [SLAVE_NODE], [MASTER_NODE]) for p in range(PARTITIONS)}
    wait_until(lambda: _partitions(s) == down, OP_TIMEOUT, 0.2, what="the slave to lead for reads")
    assert _brokers(s) == {SLAVE_NODE: s}
    with RawClient(s) as cs:
        r = _produce(cs, 1)
        assert r["error_code"] == ec.NOT_LEADER_OR_FOLLOWER and "is down" in r["error_message"], r
        coord = cs.request(kp.FIND_COORDINATOR, 3, {"key": "hk-fresh", "key_type": 0})
        assert (coord["error_code"], coord["node_id"]) == (ec.NONE, SLAVE_NODE)

    # a fresh group, bootstrapping from both addresses, reads every record the master acknowledged
    want = {f"order-{i}".encode() for i in range(RECORDS)}
    conf = {"bootstrap.servers": f"{m},{s}", "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    c = Consumer({**conf, "group.id": "hk-fresh"})
    try:
        c.subscribe([TOPIC])
        got = _consume(c, RECORDS)
    finally:
        c.close()
    assert len(got) == RECORDS and {v for _, _, v in got} == want
    # the group that committed on the master goes on from its committed offset (synced to the slave)
    c = Consumer({**conf, "bootstrap.servers": s, "group.id": group})
    try:
        c.subscribe([TOPIC])
        got = _consume(c, RECORDS - 5)
    finally:
        c.close()
    assert len(got) == RECORDS - 5 and min(o for p, o, _ in got if p == 0) == 5

    # kafka-python, no group: assign and read from the beginning
    kc = KafkaConsumer(bootstrap_servers=s, enable_auto_commit=False, consumer_timeout_ms=3000,
                       request_timeout_ms=int(OP_TIMEOUT * 1000))
    try:
        kc.assign([KTopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        kc.seek_to_beginning()
        values = []
        deadline = time.monotonic() + 20
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [r.value for recs in kc.poll(timeout_ms=500).values() for r in recs]
    finally:
        kc.close()
    assert sorted(values) == sorted(want)

    # a Kafka producer cannot write while the master is down: its records wait, then time out
    errs = []
    p = Producer({"bootstrap.servers": s, "message.timeout.ms": 2000, "linger.ms": 0})
    p.produce(TOPIC, value=b"nowhere", partition=0, on_delivery=lambda err, msg: errs.append(err))
    assert p.flush(10) == 0 and len(errs) == 1 and errs[0] is not None


def test_master_back_leads_again_and_takes_writes(pair):
    """After the test above: the killed master restarts on its store, its slave reconnects over HA,
    Metadata names the master leader again, and an acks=all produce to it succeeds (a SYNC_MASTER
    answers only once the slave has the bytes); the slave then serves the new record too."""
    from confluent_kafka import Producer
    if pair["pm"].poll() is None:
        pytest.skip("the master was not killed (the test above did not run)")
    tmp = pair["tmp"]
    started: list = []
    try:
        ready = tmp / "m-again.json"
        log = tmp / "m-again.log"
        pm = spawn(started, ["broker", "-c", str(tmp / "m.yaml"), "--ready-file", str(ready)], log)
        m = wait_file(ready, pm)
        wait_log(log, "HA: slave 127.0.0.1:", OP_TIMEOUT)
        s = pair["s"]["kafka"]

        def leaders_back() -> bool:
            (t,) = _metadata(s, [TOPIC])["topics"]
            return t["error_code"] == ec.NONE and all(p["leader_id"] == MASTER_NODE for p in t["partitions"])
        wait_until(leaders_back, OP_TIMEOUT, 0.2, what="the slave's Metadata to name the master leader again")
        acked = []
        p = Producer({"bootstrap.servers": m["kafka"], "acks": "all", "message.timeout.ms": 15000})
        p.produce(TOPIC, value=b"after-failback", partition=1,
                  on_delivery=lambda err, msg: acked.append((err, msg.offset())))
        assert p.flush(OP_TIMEOUT) == 0
        assert len(acked) == 1 and acked[0][0] is None, acked
        offset = acked[0][1]
        assert offset == RECORDS // PARTITIONS  # the master's queue went on where it stopped
        wait_caught_up(m["brokerAddr"], pair["s"]["brokerAddr"])
        with RawClient(s) as rc:
            r = rc.request(kp.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 1, "timestamp": -1}]}]})
        assert r["topics"][0]["partitions"][0]["offset"] == offset + 1
    finally:
        for proc in started:
            stop_process(proc, 10)
