"""Admin APIs that Kafka's own admin clients call (issue 11, item 5), through kafka-python's
KafkaAdminClient and confluent-kafka's AdminClient against a real `rmq up`."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KTP

from tests.kafka_fixtures import kafka_broker, unique  # noqa: F401


@pytest.fixture(scope="module")
def kp_admin(kafka_broker):  # noqa: F811
    a = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    yield a
    a.close()


def _topic_with(broker, n: int, partitions: int = 1) -> str:
    topic = unique("ops")
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    return topic


def test_delete_records_moves_the_log_start(kafka_broker):  # noqa: F811
    topic = _topic_with(kafka_broker, 10)
    a = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    res = a.delete_records([TopicPartition(topic, 0, 4)])
    low = res[TopicPartition(topic, 0, 4)].result(30)
    assert low.low_watermark == 4
    # beyond the high watermark: OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaException) as info:
        a.delete_records([TopicPartition(topic, 0, 99)])[TopicPartition(topic, 0, 99)].result(30)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # a fetch from before the new start is out of range; the earliest offset is now 4
    lo, hi = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique("g")}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=30)
    assert (lo, hi) == (4, 10)
    from kafka import KafkaConsumer
    from kafka.errors import OffsetOutOfRangeError
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="none", enable_auto_commit=False)
    c.assign([KTP(topic, 0)])
    c.seek(KTP(topic, 0), 1)
    with pytest.raises(OffsetOutOfRangeError):
        for _ in range(20):
            c.poll(500)
    c.seek(KTP(topic, 0), 4)
    got = []
    for _ in range(20):
        got += [r.value for recs in c.poll(500).values() for r in recs]
        if len(got) >= 6:
            break
    c.close()
    assert got == [b"v%d" % i for i in range(4, 10)]


def test_delete_groups_and_offsets(kafka_broker, kp_admin):  # noqa: F811
    topic = _topic_with(kafka_broker, 3)
    gid = unique("g-del")
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": gid, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    msgs = []
    for _ in range(40):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            msgs.append(m)
        if len(msgs) == 3:
            break
    c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    # a group with a live member cannot be deleted; its subscribed topic's offsets neither
    assert kp_admin.delete_groups([gid]) == {gid: "NonEmptyGroupError"}
    c.close()
    offsets = kp_admin.list_group_offsets(gid)
    assert repr(offsets).count("offset=3") == 1 and topic in repr(offsets), offsets
    kp_admin.delete_group_offsets(gid, [KTP(topic, 0)])
    assert topic not in repr(kp_admin.list_group_offsets(gid))
    never = unique("never")
    res = kp_admin.delete_groups([gid, never])
    assert res[never] == "GroupIdNotFoundError" and res[gid] == "OK", res
    assert gid not in [g[0] for g in kp_admin.list_groups()]


def test_log_dirs_reassignments_elections(kafka_broker, kp_admin):  # noqa: F811
    topic = _topic_with(kafka_broker, 5, partitions=2)
    dirs = kp_admin.describe_log_dirs()
    (log_dir,) = dirs[0]["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == kafka_broker.data_dir
    mine = [t for t in log_dir["topics"] if t["name"] == topic][0]
    sizes = {p["partition_index"]: p["partition_size"] for p in mine["partitions"]}
    assert sizes[1] == 0 and sizes[0] > 5 * 50          # five stored units of more than 50 bytes each
    assert kp_admin.list_partition_reassignments() == {}
    a = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    from confluent_kafka import ElectionType
    fut = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    with pytest.raises(KafkaException) as info:
        fut.result(30)[TopicPartition(topic, 0)]
        raise KafkaException(fut.result(30)[TopicPartition(topic, 0)])
    assert "ELECTION_NOT_NEEDED" in str(info.value) or "not needed" in str(info.value).lower()


def test_producers_and_transactions(kafka_broker, kp_admin):  # noqa: F811
    topic = _topic_with(kafka_broker, 0)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    p.produce(topic, b"x", partition=0)
    assert p.flush(30) == 0
    desc = kp_admin.describe_producers([KTP(topic, 0)])
    assert "producer_id" in repr(desc)
    tid = unique("tid")
    tp = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": tid})
    tp.init_transactions(30)
    tp.begin_transaction()
    tp.produce(topic, b"in txn", partition=0)
    tp.flush(30)
    listed = kp_admin.list_transactions()
    assert tid in repr(listed)
    described = kp_admin.describe_transactions([tid])
    assert "Ongoing" in repr(described) and topic in repr(described)
    tp.commit_transaction(30)


def test_acls_are_stored_but_not_enforced_without_kafka_acl_enable(kafka_broker):  # noqa: F811
    """Without kafkaAclEnable the ACL APIs keep bindings (as a Kafka broker whose authorizer allows
    everyone) and nothing is checked: a DENY of everything still lets the producer write."""
    a = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    topic = unique("acl-off")
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*",
                         AclOperation.ALL, AclPermissionType.DENY)
    a.create_acls([binding])[binding].result(30)
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert a.describe_acls(flt).result(30) == [binding]
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    errors = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
    assert a.delete_acls([flt])[flt].result(30) == [binding]
    assert a.describe_acls(flt).result(30) == []
