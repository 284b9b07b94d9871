"""Kafka compatibility, second round (issue 11): dotted topic names, Kafka's topic configs as a
persisted per-topic table (CreateTopics, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs)
with the configs that mean something here taking effect, and manual replica assignments."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from kafka_bridge import topic_configs
from tests.kafka_fixtures import kafka_broker, unique, wait_until  # noqa: F401


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker, topic: NewTopic):
    try:
        a = _admin(broker)      # the client must outlive its futures
        a.create_topics([topic], request_timeout=30)[topic.topic].result(30)
        return None
    except KafkaException as exc:
        return exc.args[0]


def _describe(broker, name) -> dict:
    a = _admin(broker)
    f = a.describe_configs([ConfigResource("topic", name)])
    return {k: v for res, fut in f.items() for k, v in fut.result(30).items()}


def test_dotted_topic_names_end_to_end(kafka_broker):  # noqa: F811
    topic = unique("orders") + ".v1"
    assert _create(kafka_broker, NewTopic(topic, 2, 1)) is None
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    p.produce(topic, key=b"k", value=b"from kafka", partition=0)
    assert p.flush(30) == 0
    # the RocketMQ side: the Python client sends to and reads the same dotted topic
    rmq = [sys.executable, "-m", "rmq.cli", "admin"]
    ns = ["-n", kafka_broker.listeners["namesrv"]]
    def sent():
        out = subprocess.run(rmq + ["sendMessage", *ns, "-t", topic, "-p", "from rocketmq", "-b", "broker-a",
                                    "-i", "0", "--json"], capture_output=True, text=True, timeout=60)
        return out.returncode == 0
    assert wait_until(sent, 20, interval=0.5, what="a RocketMQ send to the dotted topic")
    def consumed():
        out = subprocess.run(rmq + ["consumeMessage", *ns, "-t", topic, "--json"], capture_output=True, text=True,
                             timeout=60)
        return sorted(m["body"] for m in json.loads(out.stdout)["messages"]) if out.returncode == 0 else None
    assert wait_until(consumed, 20, interval=0.5, what="the dotted topic's messages") == ["from kafka", "from rocketmq"]


@pytest.mark.parametrize("name, reason", [(".", 'cannot be "." or ".."'), ("..", 'cannot be "." or ".."'),
                                          ("a b", "a character other than ASCII alphanumerics"),
                                          ("x" * 250, "longer than 249 characters")])
def test_illegal_names_are_refused(kafka_broker, name, reason):  # noqa: F811
    err = _create(kafka_broker, NewTopic(name, 1, 1))
    assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION and reason in err.str()


def test_dot_and_underscore_collide_as_in_kafka(kafka_broker):  # noqa: F811
    base = unique("coll").replace("-", "_")
    assert _create(kafka_broker, NewTopic(base + "_x", 1, 1)) is None
    err = _create(kafka_broker, NewTopic(base + ".x", 1, 1))
    assert err.code() == KafkaError.TOPIC_EXCEPTION and "collides with existing topics" in err.str()


def test_every_kafka_topic_config_is_accepted_at_creation_and_described(kafka_broker):  # noqa: F811
    topic = unique("cfg")
    given = {name: d.default for name, d in topic_configs.DEFS.items()}
    given.update({"cleanup.policy": "delete", "retention.ms": "3600000", "segment.bytes": "1048576",
                  "min.insync.replicas": "1", "message.timestamp.type": "CreateTime"})
    assert _create(kafka_broker, NewTopic(topic, 1, 1, config=given)) is None
    got = _describe(kafka_broker, topic)
    for name, value in given.items():
        assert got[name].value == topic_configs.canonical(name, value), name
        assert got[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    other = unique("cfg-default")
    assert _create(kafka_broker, NewTopic(other, 1, 1)) is None
    d = _describe(kafka_broker, other)
    assert d["cleanup.policy"].value == "delete" and d["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert d["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # persisted with the topic, in RocketMQ's topics.json (TopicConfig.attributes)
    with open(os.path.join(kafka_broker.data_dir, "config", "topics.json")) as fh:
        table = json.load(fh)["topicConfigTable"]
    assert table[topic]["attributes"]["retention.ms"] == "3600000" and table[other]["attributes"] == {}


@pytest.mark.parametrize("cfg, words", [
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms"),
    ({"min.insync.replicas": "0"}, "Value must be at least 1"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1.0"),
])
def test_bad_configs_get_invalid_config(kafka_broker, cfg, words):  # noqa: F811
    err = _create(kafka_broker, NewTopic(unique("bad"), 1, 1, config=cfg))
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG and words in err.str(), err


def test_alter_and_incremental_alter_round_trip(kafka_broker):  # noqa: F811
    topic = unique("alter")
    assert _create(kafka_broker, NewTopic(topic, 1, 1, config={"retention.ms": "1000"})) is None
    a = _admin(kafka_broker)
    res = ConfigResource("topic", topic, set_config={"cleanup.policy": "compact", "segment.ms": "60000"})
    for f in a.alter_configs([res]).values():
        f.result(30)
    d = _describe(kafka_broker, topic)
    assert (d["cleanup.policy"].value, d["segment.ms"].value) == ("compact", "60000")
    assert d["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value     # AlterConfigs replaces all
    inc = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    for f in a.incremental_alter_configs([inc]).values():
        f.result(30)
    d = _describe(kafka_broker, topic)
    assert d["cleanup.policy"].value == "compact,delete" and d["retention.ms"].value == "5000"
    assert d["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    sub = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT)])
    for f in a.incremental_alter_configs([sub]).values():
        f.result(30)
    assert _describe(kafka_broker, topic)["cleanup.policy"].value == "delete"
    # validate_only changes nothing; bad input is Kafka's INVALID_CONFIG / UNKNOWN_TOPIC_OR_PARTITION
    only = ConfigResource("topic", topic, set_config={"retention.ms": "7"})
    for f in a.alter_configs([only], validate_only=True).values():
        f.result(30)
    assert _describe(kafka_broker, topic)["retention.ms"].value == "5000"
    bad = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        for f in a.incremental_alter_configs([bad]).values():
            f.result(30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as info:
        for f in a.incremental_alter_configs([ConfigResource("topic", unique("nope"), incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_admin_alter_configs(kafka_broker):  # noqa: F811
    from kafka.admin import ConfigResource as KPConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic
    topic = unique("kp-alter")
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([KPNewTopic(topic, 1, 1, topic_configs={"retention.ms": "2000"})])
        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3000"})])
        desc = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic)])
        entry = desc["topic"][topic]["retention.ms"]
        assert (entry["value"], entry["config_source"], entry["config_type"]) == ("3000", "DYNAMIC_TOPIC_CONFIG", "LONG")
    finally:
        admin.close()


def _produce_error(broker, topic, **kw) -> KafkaError | None:
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": kw.pop("acks", "all"), "retries": 0,
                  "message.max.bytes": 2_000_000})
    p.produce(topic, partition=0, on_delivery=lambda err, _m: errors.append(err), **kw)
    p.flush(30)
    return errors[0] if errors else None


def test_configs_that_take_effect(kafka_broker):  # noqa: F811
    big = unique("maxbytes")
    assert _create(kafka_broker, NewTopic(big, 1, 1, config={"max.message.bytes": "2000"})) is None
    assert _produce_error(kafka_broker, big, value=b"x" * 100) is None
    assert _produce_error(kafka_broker, big, value=b"x" * 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    comp = unique("compact")
    assert _create(kafka_broker, NewTopic(comp, 1, 1, config={"cleanup.policy": "compact"})) is None
    assert _produce_error(kafka_broker, comp, key=b"k", value=b"v") is None
    assert _produce_error(kafka_broker, comp, value=b"no key").code() == KafkaError.INVALID_RECORD
    isr = unique("isr")
    assert _create(kafka_broker, NewTopic(isr, 1, 1, config={"min.insync.replicas": "2"})) is None
    assert _produce_error(kafka_broker, isr, value=b"v").code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert _produce_error(kafka_broker, isr, value=b"v", acks="1") is None


def test_manual_replica_assignment(kafka_broker):  # noqa: F811
    """Through kafka-python's admin (confluent-kafka 2.x refuses replica assignments client-side)."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic
    from kafka.errors import InvalidReplicationAssignmentError, InvalidReplicationFactorError
    a = _admin(kafka_broker)
    node = next(iter(a.list_topics(timeout=30).brokers))
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        topic = unique("assigned")
        admin.create_topics([KPNewTopic(topic, -1, -1, replica_assignments={0: [node], 1: [node], 2: [node]})])
        parts = a.list_topics(topic, timeout=30).topics[topic].partitions
        assert sorted(parts) == [0, 1, 2] and {p.leader for p in parts.values()} == {node}
        with pytest.raises(InvalidReplicationAssignmentError, match="unknown broker id"):
            admin.create_topics([KPNewTopic(unique("assigned"), -1, -1, replica_assignments={0: [node + 99]})])
        with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers"):
            admin.create_topics([KPNewTopic(unique("rf"), 1, 3)])
    finally:
        admin.close()


def test_the_stock_cpp_client_takes_dotted_topics(kafka_broker):  # noqa: F811
    """librocketmq 2.x (PyPI rocketmq) does not check topic names client-side: it sends to a dotted
    topic, and what it sent is read back through Kafka. (RocketMQ 4.x's Java client refuses '.'
    in its Validators; that is client-side, the broker takes the name.)"""
    rocketmq = pytest.importorskip("rocketmq.client")
    topic = unique("cpp") + ".events"
    assert _create(kafka_broker, NewTopic(topic, 1, 1)) is None
    pr = rocketmq.Producer(unique("cpp-dot"))
    pr.set_namesrv_addr(kafka_broker.listeners["namesrv"])
    pr.start()
    try:
        def sent():
            m = rocketmq.Message(topic)
            m.set_body(b"from cpp")
            try:
                return pr.send_sync(m).status == 0
            except Exception:       # the route may not have reached the NameServer yet
                return False
        assert wait_until(sent, 30, interval=0.5, what="a C++ send to a dotted topic")
    finally:
        pr.shutdown()
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = None
    for _ in range(40):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got = m.value()
            break
    c.close()
    assert got == b"from cpp"


def test_log_append_time_topics_return_the_store_time(kafka_broker):  # noqa: F811
    import time
    from kafka import KafkaConsumer
    topic = unique("lat")
    assert _create(kafka_broker, NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})) is None
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    before = int(time.time() * 1000)
    p.produce(topic, b"v", partition=0, timestamp=1_000_000_000_000)   # a CreateTime in 2001
    assert p.flush(30) == 0
    c = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=8000)
    recs = list(c)
    c.close()
    assert len(recs) == 1
    assert recs[0].timestamp_type == 1 and before - 1000 <= recs[0].timestamp <= int(time.time() * 1000) + 1000


def test_retention_ms_and_bytes_move_a_topics_log_start(kafka_broker):  # noqa: F811
    """retention.ms / retention.bytes: the topic's queues start past what is too old or too much
    (the broker here checks every 200 ms, kafkaRetentionCheckIntervalMs; 30 s by default)."""
    from confluent_kafka import Consumer, TopicPartition
    by_bytes = unique("ret-bytes")
    by_time = unique("ret-ms")
    assert _create(kafka_broker, NewTopic(by_bytes, 1, 1, config={"retention.bytes": "3500"})) is None
    assert _create(kafka_broker, NewTopic(by_time, 1, 1, config={"retention.ms": "1000"})) is None
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(10):
        p.produce(by_bytes, b"x" * 1000, partition=0)
        p.produce(by_time, b"y", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g")})

    def marks(topic):
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    # each stored record is a little over 1,000 bytes: three fit in 3,500, four do not
    assert wait_until(lambda: marks(by_bytes) == (7, 10), 15, interval=0.2, what="retention.bytes")
    assert wait_until(lambda: marks(by_time) == (10, 10), 15, interval=0.2, what="retention.ms")
    c.close()
