"""Kafka clients against a cluster of brokers (SPEC §9, §11; issue 3 "Metadata (several brokers)",
"partition = queueId numbered across brokers"): 1 `rmq namesrv` + 2 `rmq broker -c` processes on
127.0.0.1 with ephemeral ports look like ONE Kafka cluster to confluent-kafka and kafka-python.

Checked: Metadata from either broker lists both nodes and every partition with its owning broker as
leader; CreateTopics splits partitions over the brokers (3 + 3) and CreatePartitions appends to the
last broker; keyed records reach every partition; a consumer group reads each record exactly once and
commits; the committed offsets are the owning brokers' consumerOffset.json entries (topic@group,
local queueIds), which is what a RocketMQ consumer of that group reads (QUERY_CONSUMER_OFFSET); a
request for a partition or group on the wrong broker gets NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR;
a broker stopped cleanly withdraws its Kafka endpoint and the other answers alone.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml

from kafka_bridge import protocol as kp
from kafka_bridge.cluster import KafkaNode, build_layout, coordinator_index, java_string_hash, split_partitions
from kafka_bridge.protocol import error_codes as ec
from kafka_bridge.records import encode_batch
from rmq.remoting import BrokerData, KVTable, QueueData, RequestCode, ResponseCode, TopicRouteData
from tests.kafka_fixtures import RawClient, unique, wait_until
from tests.remoting_harness import SyncClient

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_TIMEOUT = 30.0
OP_TIMEOUT = 20.0
BROKERS = ("broker-a", "broker-b")


class Proc:
    def __init__(self, name: str, args: list[str], workdir) -> None:
        self.name = name
        self.ready_path = str(workdir / f"{name}.ready.json")
        self.log_path = str(workdir / f"{name}.log")
        env = dict(os.environ, RMQ_LOG="INFO")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", *args, "--ready-file", self.ready_path],
                                         cwd=str(workdir), stdout=log, stderr=subprocess.STDOUT, env=env)
        self.info: dict = {}

    def wait_ready(self) -> dict:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if os.path.exists(self.ready_path):
                with open(self.ready_path) as fh:
                    self.info = json.load(fh)
                return self.info
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not ready (exit {self.proc.poll()}):\n{self.log()[-3000:]}")

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """NameServer + broker-a + broker-b; yields {"namesrv": addr, "broker-a": Proc, "broker-b": Proc}."""
    workdir = tmp_path_factory.mktemp("kafka-cluster")
    procs: list[Proc] = []
    try:
        ns = Proc("namesrv", ["namesrv", "--port", "0"], workdir)
        procs.append(ns)
        ns_addr = ns.wait_ready()["namesrv"]
        out = {"namesrv": ns_addr}
        for name in BROKERS:
            conf = {"brokerClusterName": "KafkaCluster", "brokerName": name, "brokerId": 0, "namesrvAddr": ns_addr,
                    "brokerIP1": "127.0.0.1", "listenPort": 0, "kafkaEnable": True, "kafkaPort": 0,
                    "storePathRootDir": str(workdir / name), "registerNameServerPeriod": 1000,
                    "mappedFileSizeCommitLog": 4 * 1024 * 1024, "maxMessageSize": 1024 * 1024,
                    "mappedFileSizeConsumeQueue": 60_000, "maxHashSlotNum": 1000, "maxIndexNum": 4000,
                    "kafkaGroupInitialRebalanceDelayMs": 100, "kafkaGroupMinSessionTimeoutMs": 1000}
            path = workdir / f"{name}.yaml"
            path.write_text(yaml.safe_dump(conf))
            procs.append(Proc(name, ["broker", "-c", str(path)], workdir))
        for p in procs[1:]:
            out[p.name] = p
            p.wait_ready()
        # both brokers see each other (their views refresh every 2 s)
        for name in BROKERS:
            wait_until(lambda n=name: len(_metadata(out[n].info["kafka"])["brokers"]) == 2, 15,
                       what=f"{name} to list both Kafka nodes")
        yield out
    finally:
        codes = {p.name: (p.proc.poll() is None or p.name == "broker-b", p.stop()) for p in procs}
        for p in procs:
            assert "Traceback" not in p.log(), f"{p.name} logged an exception:\n{p.log()[-4000:]}"
        for name, (alive, code) in codes.items():
            assert alive, f"{name} died during the tests"
            assert code == 0, f"{name} exited with {code} on SIGTERM"


def _bs(cluster, name: str) -> str:
    return cluster[name].info["kafka"]


def _metadata(bootstrap: str, topics=None) -> dict:
    with RawClient(bootstrap) as c:
        return c.request(kp.METADATA, 9, {"topics": None if topics is None else [{"name": t} for t in topics],
                                          "allow_auto_topic_creation": False,
                                          "include_cluster_authorized_operations": False,
                                          "include_topic_authorized_operations": False})


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    (t,) = _metadata(bootstrap, [topic])["topics"]
    assert t["error_code"] == ec.NONE, t
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def _nodes(bootstrap: str) -> dict[int, str]:
    return {b["node_id"]: f"{b['host']}:{b['port']}" for b in _metadata(bootstrap)["brokers"]}


def _query_offset(remoting_addr: str, group: str, topic: str, queue_id: int) -> int:
    """What a RocketMQ consumer of `group` reads when it starts on that queue."""
    c = SyncClient(remoting_addr)
    try:
        r = c.request(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)})
        return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1
    finally:
        c.close()


def _offset_file(store_root: str) -> dict:
    path = os.path.join(store_root, "config", "consumerOffset.json")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return {k: {int(q): o for q, o in v.items()} for k, v in json.load(fh).get("offsetTable", {}).items()}


# ============================================================================================= rules

def test_partition_split_layout_and_coordinator_rules():
    assert split_partitions(6, 2) == [3, 3]
    assert split_partitions(7, 2) == [4, 3]
    assert split_partitions(1, 3) == [1, 0, 0]
    # Java's String.hashCode, and Kafka's Utils.abs (& 0x7fffffff) for Integer.MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert coordinator_index("polygenelubricants", 3) == 0
    assert coordinator_index("hello", 2) == 99162322 % 2
    # queues in brokerName order, whatever order the route lists them in; brokers without a Kafka
    # endpoint are left out
    nodes = {"broker-a": KafkaNode(0, "broker-a", "h", 1, "h:10"), "broker-b": KafkaNode(1, "broker-b", "h", 2, "h:20")}
    route = TopicRouteData(queueDatas=[QueueData("broker-b", 2, 3), QueueData("broker-x", 8, 8), QueueData("broker-a", 4, 4)],
                           brokerDatas=[BrokerData("c", "broker-b", {0: "h:20"}), BrokerData("c", "broker-a", {0: "h:10"})])
    lay = build_layout("T", route, nodes)
    assert lay.total == 7
    assert [(s.node.broker_name, s.base, s.count) for s in lay.segments] == [("broker-a", 0, 4), ("broker-b", 4, 3)]
    assert lay.locate(3).node.node_id == 0 and lay.locate(4).node.node_id == 1 and lay.locate(7) is None
    assert set(lay.broker_addrs) == {"h:10", "h:20"}


# ============================================================================================= processes

def test_metadata_from_either_broker_lists_both_brokers(cluster):
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    a, b = _bs(cluster, "broker-a"), _bs(cluster, "broker-b")
    want = {0: a, 1: b}  # node id = index of brokerName in sorted order
    for bs in (a, b):
        md = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=OP_TIMEOUT)
        assert {k: f"{v.host}:{v.port}" for k, v in md.brokers.items()} == want
        admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=int(OP_TIMEOUT * 1000))
        try:
            desc = admin.describe_cluster()
        finally:
            admin.close()
        assert {x["broker_id"]: f"{x['host']}:{x['port']}" for x in desc["brokers"]} == want
        assert desc["controller_id"] == 0
    # both endpoints are in the NameServer's KV config
    c = SyncClient(cluster["namesrv"])
    try:
        r = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "KAFKA_BRIDGE"})
    finally:
        c.close()
    assert KVTable.decode(r.body).table == {"broker-a": a, "broker-b": b}


def test_topic_across_brokers_produce_consume_commit(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    a, b = _bs(cluster, "broker-a"), _bs(cluster, "broker-b")
    topic, group, group2 = unique("ctopic"), unique("cgroup"), unique("cgroup2")

    # CreateTopics through broker-b: 6 partitions, 3 on each broker
    admin_b = AdminClient({"bootstrap.servers": b})  # keep the handle alive until the future completes
    admin_b.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(OP_TIMEOUT)
    for bs in (a, b):
        assert _leaders(bs, topic) == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1}
        md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=OP_TIMEOUT)
        assert {p: m.leader for p, m in md.topics[topic].partitions.items()} == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1}
    admin = KafkaAdminClient(bootstrap_servers=a, request_timeout_ms=int(OP_TIMEOUT * 1000))
    try:
        (t,) = admin.describe_topics([topic])
        assert {p["partition_index"]: p["leader_id"] for p in t["partitions"]} == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1}
    finally:
        admin.close()
    # each broker holds 3 queues of its own
    for name in BROKERS:
        with open(os.path.join(cluster[name].info["store"], "config", "topics.json")) as fh:
            tc = json.load(fh)["topicConfigTable"][topic]
        assert (tc["readQueueNums"], tc["writeQueueNums"]) == (3, 3)

    # keyed records to every partition: confluent (explicit partitions) and kafka-python (key hashing)
    sent = Counter()
    p = Producer({"bootstrap.servers": a, "linger.ms": 5})
    errors = []
    for i in range(60):
        p.produce(topic, key=f"key-{i}".encode(), value=f"c-{i}".encode(), partition=i % 6,
                  on_delivery=lambda err, msg: errors.append(err) if err else sent.update([msg.partition()]))
    assert p.flush(OP_TIMEOUT) == 0 and not errors
    kp_producer = KafkaProducer(bootstrap_servers=b, acks="all", linger_ms=5)
    try:
        futs = [kp_producer.send(topic, key=f"order-{i}".encode(), value=f"k-{i}".encode()) for i in range(60)]
        kp_producer.flush(OP_TIMEOUT)
        sent.update(f.get(OP_TIMEOUT).partition for f in futs)
    finally:
        kp_producer.close(OP_TIMEOUT)
    assert set(sent) == set(range(6)) and sum(sent.values()) == 120

    # a confluent consumer group reads every record exactly once and commits
    c = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    seen = Counter()
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while sum(seen.values()) < 120 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            seen[(m.partition(), m.offset())] += 1
        c.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, i) for i in range(6)],
                                                                    timeout=OP_TIMEOUT)}
    finally:
        c.close()
    assert sum(seen.values()) == 120 and max(seen.values()) == 1, "every record exactly once"
    assert Counter(part for part, _ in seen) == sent
    assert committed == {i: sent[i] for i in range(6)}

    # the offsets live where RocketMQ keeps them: on the owning broker, under its local queueIds
    for name, base in (("broker-a", 0), ("broker-b", 3)):
        want = {q: sent[base + q] for q in range(3)}
        remoting = cluster[name].info["remoting"]
        assert {q: _query_offset(remoting, group, topic, q) for q in range(3)} == want
        wait_until(lambda: _offset_file(cluster[name].info["store"]).get(f"{topic}@{group}") == want, 15,
                   what=f"{name}'s consumerOffset.json to hold {topic}@{group}")

    # kafka-python: another group, then the committed offsets of all its partitions (OffsetFetch
    # without a partition list gathers them from both brokers)
    kc = KafkaConsumer(topic, bootstrap_servers=a, group_id=group2, auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=3000, session_timeout_ms=6000,
                       heartbeat_interval_ms=500, fetch_max_wait_ms=100)
    try:
        got = Counter()
        deadline = time.monotonic() + 30
        while sum(got.values()) < 120 and time.monotonic() < deadline:
            for m in kc:
                got[(m.partition, m.offset)] += 1
        kc.commit()
    finally:
        kc.close()
    assert sum(got.values()) == 120 and max(got.values()) == 1
    admin = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=int(OP_TIMEOUT * 1000))
    try:
        offsets = admin.list_group_offsets(group2)[group2]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == {i: sent[i] for i in range(6)}


def test_wrong_broker_answers_not_leader_and_not_coordinator(cluster):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    a, b = _bs(cluster, "broker-a"), _bs(cluster, "broker-b")
    topic = unique("wtopic")
    admin_a = AdminClient({"bootstrap.servers": a})
    admin_a.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(OP_TIMEOUT)
    assert _leaders(b, topic) == {0: 0, 1: 0, 2: 1, 3: 1}
    batch = encode_batch([(b"k", b"v", [], int(time.time() * 1000))])

    def produce(c, partition):
        r = c.request(kp.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
        return r["responses"][0]["partition_responses"][0]

    def fetch(c, partition):
        r = c.request(kp.FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                     "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": 0,
                                             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                     "forgotten_topics_data": [], "rack_id": ""})
        return r["responses"][0]["partitions"][0]

    def list_offsets(c, partition):
        r = c.request(kp.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": -1}]}]})
        return r["topics"][0]["partitions"][0]

    with RawClient(a) as ca, RawClient(b) as cb:
        # partition 2 is broker-b's queue 0: broker-a refuses it, broker-b takes it
        assert produce(ca, 2)["error_code"] == ec.NOT_LEADER_OR_FOLLOWER
        assert fetch(ca, 2)["error_code"] == ec.NOT_LEADER_OR_FOLLOWER
        assert list_offsets(ca, 3)["error_code"] == ec.NOT_LEADER_OR_FOLLOWER
        r = produce(cb, 2)
        assert (r["index"], r["error_code"], r["base_offset"]) == (2, ec.NONE, 0)
        assert produce(cb, 0)["error_code"] == ec.NOT_LEADER_OR_FOLLOWER
        assert produce(ca, 4)["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        f = fetch(cb, 2)
        assert (f["partition_index"], f["error_code"], f["high_watermark"]) == (2, ec.NONE, 1)
        assert list_offsets(cb, 2)["offset"] == 1 and list_offsets(ca, 1)["offset"] == 0

        # the group's coordinator is the same node from both brokers; the other says NOT_COORDINATOR
        group = unique("wgroup")
        coords = [c.request(kp.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}) for c in (ca, cb)]
        assert coords[0] == coords[1] and coords[0]["error_code"] == ec.NONE
        assert coords[0]["node_id"] == coordinator_index(group, 2)
        other = cb if coords[0]["node_id"] == 0 else ca
        r = other.request(kp.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                                             "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                             "protocols": [{"name": "range", "metadata": b""}]})
        assert r["error_code"] == ec.NOT_COORDINATOR
        r = other.request(kp.OFFSET_COMMIT, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                                "group_instance_id": None, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                            "committed_metadata": None}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == ec.NOT_COORDINATOR
        r = other.request(kp.OFFSET_FETCH, 7, {"group_id": group, "topics": None, "require_stable": False})
        assert r["error_code"] == ec.NOT_COORDINATOR

    # CreatePartitions appends to the last broker: partitions 0-3 keep their numbers and owners
    admin_b = AdminClient({"bootstrap.servers": b})
    admin_b.create_partitions([NewPartitions(topic, 6)])[topic].result(OP_TIMEOUT)
    assert _leaders(a, topic) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 1}
    with RawClient(b) as cb:
        assert fetch(cb, 2)["high_watermark"] == 1  # still the record written above

    # DeleteTopics removes it from both brokers and the NameServer
    admin_a.delete_topics([topic])[topic].result(OP_TIMEOUT)
    assert _metadata(a, [topic])["topics"][0]["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
    # broker-b's cached view of the route expires within 2 s
    wait_until(lambda: _metadata(b, [topic])["topics"][0]["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION, 10,
               what="broker-b to forget the deleted topic")
    for name in BROKERS:
        with open(os.path.join(cluster[name].info["store"], "config", "topics.json")) as fh:
            assert topic not in json.load(fh)["topicConfigTable"]


def test_stopped_broker_withdraws_its_endpoint(cluster):
    """A stopped broker withdraws its endpoint but stays a member: its partitions keep their numbers,
    offline (issue 27), until `rmq admin deleteKvConfig` removes it from the Kafka cluster."""
    from confluent_kafka.admin import AdminClient, NewTopic
    a = _bs(cluster, "broker-a")
    topic = unique("members")
    admin = AdminClient({"bootstrap.servers": a})  # the client must outlive its futures
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(OP_TIMEOUT)
    wait_until(lambda: _leaders(a, topic) == {0: 0, 1: 0, 2: 1, 3: 1}, 10, what="2 + 2 partitions")
    assert cluster["broker-b"].stop() == 0
    c = SyncClient(cluster["namesrv"])
    try:
        r = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "KAFKA_BRIDGE"})
        members = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "KAFKA_BRIDGE_MEMBERS"})
    finally:
        c.close()
    assert KVTable.decode(r.body).table == {"broker-a": a}
    assert KVTable.decode(members.body).table == {"broker-a": "KafkaCluster", "broker-b": "KafkaCluster"}
    wait_until(lambda: _nodes(a) == {0: a}, 10, what="broker-a to answer alone")

    def partitions():
        (t,) = _metadata(a, [topic])["topics"]
        return {p["partition_index"]: (p["leader_id"], p["error_code"]) for p in t["partitions"]}
    wait_until(lambda: partitions() == {0: (0, 0), 1: (0, 0), 2: (-1, ec.LEADER_NOT_AVAILABLE),
                                        3: (-1, ec.LEADER_NOT_AVAILABLE)}, 10, what="broker-b's partitions offline")
    out = subprocess.run([sys.executable, "-m", "rmq.cli", "admin", "deleteKvConfig", "-n", cluster["namesrv"],
                          "-s", "KAFKA_BRIDGE_MEMBERS", "-k", "broker-b"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    # broker-b is no longer a member: broker-a is a single Kafka broker again
    wait_until(lambda: sorted(partitions()) == [0, 1], 10, what="broker-a alone with its 2 partitions")
