"""Kafka compatibility, third round (issue 27, items 1-4), with stock clients against `rmq up`:
per-record produce errors, CreatePartitions with manual assignments, topic configs that round-trip
(Kafka 3.9's table, the generated docs table), broker configs with their sources, and Kafka's
topic-name rules on every path that creates a topic."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic

from kafka_bridge import protocol as kp
from kafka_bridge import topic_configs
from kafka_bridge.records import encode_batch
from tests.kafka_fixtures import RawClient, kafka_broker, unique, wait_until  # noqa: F401

RMQ = [sys.executable, "-m", "rmq.cli", "admin"]


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker, topic: NewTopic):
    try:
        a = _admin(broker)
        a.create_topics([topic], request_timeout=30)[topic.topic].result(30)
        return None
    except KafkaException as exc:
        return exc.args[0]


def _describe(broker, resource: ConfigResource) -> dict:
    a = _admin(broker)
    return {k: v for fut in a.describe_configs([resource]).values() for k, v in fut.result(30).items()}


def _compacted(broker) -> str:
    topic = unique("compacted")
    assert _create(broker, NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})) is None
    return topic


KEYLESS = {i for i in range(100) if i % 10 == 7}  # 10 of the 100 records have no key


# ------------------------------------------------------------------------------ 1. per-record errors
def test_confluent_kafka_blames_only_the_keyless_records(kafka_broker):  # noqa: F811
    topic = _compacted(kafka_broker)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 1000, "batch.num.messages": 1000,
                  "enable.idempotence": False, "retries": 0})
    errors: dict[int, KafkaError | None] = {}
    for i in range(100):
        p.produce(topic, key=None if i in KEYLESS else f"k{i}".encode(), value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg, i=i: errors.__setitem__(i, err))
    assert p.flush(30) == 0
    assert len(errors) == 100
    bad = {i for i, e in errors.items() if e is not None and e.code() == KafkaError.INVALID_RECORD}
    others = {i for i, e in errors.items() if e is not None and e.code() == KafkaError._INVALID_DIFFERENT_RECORD}
    assert bad == KEYLESS
    assert others == set(range(100)) - KEYLESS
    # nothing of the refused batch was stored
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g")})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        c.close()


def test_kafka_python_blames_only_the_keyless_records(kafka_broker):  # noqa: F811
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError
    topic = _compacted(kafka_broker)
    p = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=1000, batch_size=1 << 20, retries=0,
                      enable_idempotence=False)
    try:
        futures = [p.send(topic, key=None if i in KEYLESS else f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
                   for i in range(100)]
        p.flush(30)
        excs = {i: f.exception for i, f in enumerate(futures)}
    finally:
        p.close(10)
    assert all(e is not None for e in excs.values())
    assert {i for i, e in excs.items() if isinstance(e, InvalidRecordError)} == KEYLESS
    assert all("part of a batch which had one more more invalid records" in str(e)
               for i, e in excs.items() if i not in KEYLESS)


def test_produce_response_record_errors_on_the_wire(kafka_broker):  # noqa: F811
    """batch_index is the record's index in its batch; the partition's error message is Kafka's
    LogValidator.processRecordErrors text, listing at most three."""
    topic = _compacted(kafka_broker)
    recs = [(None if i in (2, 5, 6, 9) else b"k", b"v", [], 1000) for i in range(10)]
    batch = encode_batch(recs, base_timestamp=0)
    with RawClient(kafka_broker.bootstrap) as c:
        r = c.request(kp.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10_000,
                                       "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    part = r["responses"][0]["partition_responses"][0]
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    assert part["error_code"] == 87  # INVALID_RECORD
    assert [(e["batch_index"], e["batch_index_error_message"]) for e in part["record_errors"]] == \
        [(i, why) for i in (2, 5, 6, 9)]
    assert part["error_message"] == (
        "One or more records have been rejected due to 4 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=2, message='{why}'), RecordError(batchIndex=5, message='{why}'), "
        f"RecordError(batchIndex=6, message='{why}')]")
    assert part["base_offset"] == -1


# ------------------------------------------------------------------------------ 2. CreatePartitions
def test_create_partitions_with_a_manual_assignment(kafka_broker):  # noqa: F811
    a = _admin(kafka_broker)
    node = next(iter(a.list_topics(timeout=30).brokers))
    topic = unique("grow")
    assert _create(kafka_broker, NewTopic(topic, 2, 1)) is None

    def grow(count, assignment):
        try:
            a.create_partitions([NewPartitions(topic, count, assignment)], request_timeout=30)[topic].result(30)
            return None
        except KafkaException as exc:
            return exc.args[0]

    assert grow(4, [[node], [node]]) is None
    parts = a.list_topics(topic, timeout=30).topics[topic].partitions
    assert sorted(parts) == [0, 1, 2, 3] and {p.leader for p in parts.values()} == {node}
    for assignment, words in (([[node + 7]], f"includes broker {node + 7}, but no such broker is registered"),
                              ([[node, node]], f"includes the broker {node} more than once")):
        err = grow(5, assignment)
        assert err is not None and err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and words in err.str(), err
    assert len(a.list_topics(topic, timeout=30).topics[topic].partitions) == 4


def test_kafka_python_create_partitions_with_assignment(kafka_broker):  # noqa: F811
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KPNewPartitions
    from kafka.errors import InvalidReplicationAssignmentError
    node = next(iter(_admin(kafka_broker).list_topics(timeout=30).brokers))
    topic = unique("grow-kp")
    assert _create(kafka_broker, NewTopic(topic, 1, 1)) is None
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_partitions({topic: KPNewPartitions(2, [[node]])})
        with pytest.raises(InvalidReplicationAssignmentError, match="no such broker is registered"):
            admin.create_partitions({topic: KPNewPartitions(3, [[node + 3]])})
        # the count is checked by the broker (confluent-kafka checks it client-side)
        with pytest.raises(InvalidReplicationAssignmentError, match="Attempted to add 1 additional partition"):
            admin.create_partitions({topic: KPNewPartitions(3, [[node], [node]])})
    finally:
        admin.close()
    assert len(_admin(kafka_broker).list_topics(topic, timeout=30).topics[topic].partitions) == 2


# ------------------------------------------------------------------------------ 3. configs round-trip
def test_described_configs_are_written_back_unchanged(kafka_broker):  # noqa: F811
    """What librdkafka's 0092 and Kafka tools do: read every config, write them all back."""
    topic = unique("roundtrip")
    assert _create(kafka_broker, NewTopic(topic, 1, 1, config={"retention.ms": "3600000"})) is None
    res = ConfigResource("topic", topic)
    got = _describe(kafka_broker, res)
    assert not [n for n in got if n.startswith("rocketmq.")]   # not Kafka topic configs
    assert set(got) == set(topic_configs.DEFS)
    for name, entry in got.items():
        res.set_config(name, entry.value)
    a = _admin(kafka_broker)
    a.alter_configs([res])[res].result(30)
    again = _describe(kafka_broker, ConfigResource("topic", topic))
    assert {n: e.value for n, e in again.items()} == {n: e.value for n, e in got.items()}


@pytest.mark.parametrize("name, value", [("message.format.version", "0.10.0.0"), ("message.format.version", "2.8"),
                                         ("compression.zstd.level", "-5"), ("compression.gzip.level", "9"),
                                         ("compression.lz4.level", "17"), ("remote.log.copy.disable", "true"),
                                         ("remote.log.delete.on.disable", "true"),
                                         ("message.downconversion.enable", "false")])
def test_kafka_39_configs_are_accepted(kafka_broker, name, value):  # noqa: F811
    topic = unique("k39")
    assert _create(kafka_broker, NewTopic(topic, 1, 1, config={name: value})) is None
    assert _describe(kafka_broker, ConfigResource("topic", topic))[name].value == value


@pytest.mark.parametrize("name, value, words", [("message.format.version", "9.9", "is not a valid version"),
                                                ("compression.gzip.level", "0", "-1 or between 1 and 9"),
                                                ("compression.lz4.level", "18", "no more than 17"),
                                                ("rocketmq.readQueueNums", "8", "Unknown topic config name")])
def test_kafka_39_configs_are_validated(kafka_broker, name, value, words):  # noqa: F811
    err = _create(kafka_broker, NewTopic(unique("k39bad"), 1, 1, config={name: value}))
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG and words in err.str(), err


def test_broker_configs_with_their_sources(kafka_broker):  # noqa: F811
    a = _admin(kafka_broker)
    node = next(iter(a.list_topics(timeout=30).brokers))
    got = _describe(kafka_broker, ConfigResource("broker", str(node)))
    # every topic config's broker-level synonym, and the broker's own settings
    assert {s for s in topic_configs.SYNONYMS.values()} <= set(got)
    assert got["broker.id"].value == str(node)
    assert got["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert got["log.cleanup.policy"].value == "delete"
    assert got["log.cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["log.message.format.version"].value == "3.0-IV1"
    # static configs are read-only; Kafka's dynamic ones (dynamic_configs.BROKER_DYNAMIC) are not
    assert got["broker.id"].is_read_only and got["num.partitions"].is_read_only
    assert not got["log.cleanup.policy"].is_read_only
    assert len(got) > 40


def test_docs_config_table_matches_the_implementation():
    table = topic_configs.docs_table()
    for path in topic_configs.docs_pages():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        assert table in text, f"{path}: run `python -m kafka_bridge.topic_configs --write-docs`"


# ------------------------------------------------------------------------------ 4. names
def test_249_character_names_work_and_250_do_not(kafka_broker):  # noqa: F811
    topic = unique("long").replace("-", "_")
    topic = topic + "x" * (249 - len(topic))
    assert _create(kafka_broker, NewTopic(topic, 1, 1)) is None
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    p.produce(topic, key=b"k", value=b"249", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msg = wait_until(lambda: c.poll(0.5), 20, what="the record of the 249-character topic")
        assert msg.error() is None and msg.value() == b"249"
    finally:
        c.close()
    err = _create(kafka_broker, NewTopic(topic + "y", 1, 1))
    assert err.code() == KafkaError.TOPIC_EXCEPTION and "longer than 249 characters" in err.str()
    # RocketMQ's side (docs/kafka-mapping.md): the project's client consumes such a topic, but refuses
    # to send to it, as RocketMQ's own client Validators refuse names over 127 characters
    ns = ["-n", kafka_broker.listeners["namesrv"]]
    out = subprocess.run(RMQ + ["consumeMessage", *ns, "-t", topic, "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and [m["body"] for m in json.loads(out.stdout)["messages"]] == ["249"], out
    out = subprocess.run(RMQ + ["sendMessage", *ns, "-t", topic, "-p", "x", "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "longer than topic max length 127" in out.stdout + out.stderr, out


@pytest.mark.parametrize("name", ["50%off", "a|b"])
def test_rocketmq_only_characters_are_refused_through_kafka(kafka_broker, name):  # noqa: F811
    err = _create(kafka_broker, NewTopic(unique("x") + name, 1, 1))
    assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION and "other than ASCII alphanumerics" in err.str()


def test_collisions_on_auto_creation_and_update_topic(kafka_broker):  # noqa: F811
    base = unique("coll").replace("-", "_")
    assert _create(kafka_broker, NewTopic(base + "_a", 1, 1)) is None
    # auto-creation by a Metadata request (what a producer to an unknown topic sends)
    with RawClient(kafka_broker.bootstrap) as c:
        r = c.request(kp.METADATA, 9, {"topics": [{"name": base + ".a"}], "allow_auto_topic_creation": True,
                                       "include_cluster_authorized_operations": False,
                                       "include_topic_authorized_operations": False})
    assert r["topics"][0]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
    assert base + ".a" not in _admin(kafka_broker).list_topics(timeout=30).topics
    # RocketMQ's updateTopic
    ns = ["-n", kafka_broker.listeners["namesrv"]]
    out = subprocess.run(RMQ + ["updateTopic", *ns, "-t", base + ".a", "-c", "DefaultCluster"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "collides with existing topics" in out.stdout + out.stderr, out
    # the same topic updated again is not a collision with itself
    out = subprocess.run(RMQ + ["updateTopic", *ns, "-t", base + "_a", "-c", "DefaultCluster"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out


def test_consumer_progress_of_a_kafka_only_group_without_topic(kafka_broker):  # noqa: F811
    topic, group = unique("progress"), unique("kgroup")
    assert _create(kafka_broker, NewTopic(topic, 1, 1)) is None
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(5):
        p.produce(topic, value=b"x", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        c.close()
    out = subprocess.run(RMQ + ["consumerProgress", "-n", kafka_broker.listeners["namesrv"], "-g", group, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    rows = [(q["topic"], q["queueId"], q["brokerOffset"], q["consumerOffset"], q["diff"])
            for q in json.loads(out.stdout)["queues"]]
    assert rows == [(topic, 0, 5, 3, 2)]


def test_mapping_errors_name_their_record(kafka_broker):  # noqa: F811
    """A record the RocketMQ mapping refuses (a bad rocketmq.delay level) is named by its index too."""
    topic = unique("baddelay")
    assert _create(kafka_broker, NewTopic(topic, 1, 1)) is None
    recs = [(b"k", b"v", [("rocketmq.delay", b"99")] if i in (1, 3) else [], 1000) for i in range(4)]
    with RawClient(kafka_broker.bootstrap) as c:
        r = c.request(kp.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
                                       "topic_data": [{"name": topic, "partition_data": [
                                           {"index": 0, "records": encode_batch(recs)}]}]})
    part = r["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 87 and [e["batch_index"] for e in part["record_errors"]] == [1, 3], part
    assert "rejected due to 2 record errors in total" in part["error_message"]


# ------------------------------------------------------------------ authorized operations
def test_authorized_operations_without_an_authorizer_are_every_supported_one(kafka_broker):  # noqa: F811
    """librdkafka 0081 (DescribeTopics / DescribeCluster / DescribeConsumerGroups with
    include_authorized_operations): without an authorizer Kafka answers every operation the resource
    type supports; not asked, nothing (INT32_MIN)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation
    a = _admin(kafka_broker)
    topic = unique("authops")
    _create(kafka_broker, NewTopic(topic, num_partitions=1, replication_factor=1))
    desc = a.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert sorted(op.name for op in desc.authorized_operations) == sorted(
        ["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"])
    assert not a.describe_topics(TopicCollection([topic]))[topic].result(30).authorized_operations
    cluster = a.describe_cluster(include_authorized_operations=True).result(30)
    assert sorted(op.name for op in cluster.authorized_operations) == sorted(
        ["CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"])
    assert AclOperation.READ in desc.authorized_operations


def test_committed_leader_epoch_round_trips(kafka_broker):  # noqa: F811
    """librdkafka 0081 (Alter/ListConsumerGroupOffsets): the leader epoch committed with an offset
    comes back with it; an offset committed without one (or moved since) has -1 (None here)."""
    topic = unique("epoch")
    _create(kafka_broker, NewTopic(topic, num_partitions=2, replication_factor=1))
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(4):
        p.produce(topic, b"x", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g-epoch"),
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 2, leader_epoch=2), TopicPartition(topic, 1, 1)],
                 asynchronous=False)
        got = {tp.partition: tp for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 30)}
        assert (got[0].offset, got[0].leader_epoch) == (2, 2)
        assert got[1].offset == 1 and got[1].leader_epoch in (None, -1)
    finally:
        c.close()
