"""RocketMQ semantics through the Kafka bridge (issue 5): the delay header, the tags header, and
Kafka transactions carried on half messages, with confluent-kafka and kafka-python."""
from __future__ import annotations

import time
import uuid

import pytest

from .kafka_fixtures import start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("sem")), {"messageDelayLevel": "1s 2s 3s"})
    yield b
    alive = b.alive()
    code = b.stop()
    assert alive and code == 0, b.log_text()[-3000:]
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


def _name(prefix):
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _create(bootstrap, topic, partitions=1):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def _consume_confluent(bootstrap, topic, *, n, timeout, isolation="read_uncommitted", reset="earliest"):
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("g"), "auto.offset.reset": reset,
                  "isolation.level": isolation, "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < n:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append((time.time(), m.value(), m.headers() or []))
    c.close()
    return out


def _consume_kafka_python(bootstrap, topic, *, n, timeout, isolation="read_uncommitted"):
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=_name("g"), auto_offset_reset="earliest",
                      isolation_level=isolation, enable_auto_commit=False)
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < n:
        for recs in c.poll(200).values():
            out.extend((time.time(), r.value, r.headers or []) for r in recs)
    c.close()
    return out


CLIENTS = ["confluent", "kafka-python"]


def _produce(client, bootstrap, topic, records):
    """records: list of (value, headers)."""
    if client == "confluent":
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": bootstrap})
        for v, h in records:
            p.produce(topic, value=v, headers=h)
        assert p.flush(15) == 0
    else:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=bootstrap)
        for v, h in records:
            p.send(topic, value=v, headers=h)
        p.flush(15)
        p.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_delay_header_holds_the_record_for_its_level(broker, client):
    topic = _name("delay")
    _create(broker.bootstrap, topic)
    sent = time.time()
    _produce(client, broker.bootstrap, topic, [(b"now", []), (b"in-2s", [("rocketmq.delay", b"2")])])
    got = _consume_confluent(broker.bootstrap, topic, n=2, timeout=8)
    by_value = {v: t for t, v, _ in got}
    assert set(by_value) == {b"now", b"in-2s"}
    assert by_value[b"now"] - sent < 1.5
    assert 2.0 <= by_value[b"in-2s"] - sent <= 3.0 + 0.5  # no earlier than level 2, within ~1 s after


@pytest.mark.parametrize("client", CLIENTS)
def test_bad_delay_level_is_refused(broker, client):
    from confluent_kafka import Producer
    topic = _name("baddelay")
    _create(broker.bootstrap, topic)
    if client == "confluent":
        errors = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
        p.produce(topic, value=b"x", headers=[("rocketmq.delay", b"99")],
                  on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None and "INVALID_RECORD" in errors[0].name()
    else:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
        fut = p.send(topic, value=b"x", headers=[("rocketmq.delay", b"zero")])
        with pytest.raises(Exception, match="InvalidRecord|INVALID_RECORD|87"):
            fut.get(10)
        p.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_tags_header_sets_and_exposes_rocketmq_tags(broker, client):
    topic = _name("tags")
    _create(broker.bootstrap, topic)
    _produce(client, broker.bootstrap, topic, [(b"tagged", [("rocketmq.tags", b"TagA"), ("app", b"1")])])
    consume = _consume_confluent if client == "confluent" else _consume_kafka_python
    got = consume(broker.bootstrap, topic, n=1, timeout=8)
    assert len(got) == 1
    headers = dict(got[0][2])
    assert headers["rocketmq.tags"] == b"TagA" and headers["app"] == b"1"


def test_transactions_confluent_read_committed_sees_only_committed(broker):
    from confluent_kafka import Producer
    topic = _name("txc")
    _create(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": _name("tid")})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(15)
    got = _consume_confluent(broker.bootstrap, topic, n=6, timeout=4, isolation="read_committed")
    assert sorted(v for _, v, _ in got) == [b"c0", b"c1", b"c2"]


def test_transactions_open_records_are_invisible_until_commit(broker):
    from confluent_kafka import Producer
    topic = _name("txo")
    _create(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": _name("tid")})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"pending")
    assert p.flush(10) == 0
    assert _consume_confluent(broker.bootstrap, topic, n=1, timeout=1.5) == []
    p.commit_transaction(15)
    got = _consume_confluent(broker.bootstrap, topic, n=1, timeout=5, isolation="read_committed")
    assert [v for _, v, _ in got] == [b"pending"]


def test_transactions_kafka_python_commit_and_abort(broker):
    from kafka import KafkaProducer
    topic = _name("txk")
    _create(broker.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_name("tid"))
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, b"kept")
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, b"dropped")
    p.abort_transaction()
    p.close()
    got = _consume_kafka_python(broker.bootstrap, topic, n=2, timeout=4, isolation="read_committed")
    assert [v for _, v, _ in got] == [b"kept"]


def test_transactional_offsets_commit_with_the_transaction(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    src, dst = _name("src"), _name("dst")
    _create(broker.bootstrap, src)
    _create(broker.bootstrap, dst)
    _produce("confluent", broker.bootstrap, src, [(b"in-%d" % i, []) for i in range(4)])
    group = _name("eos")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([src])
    msgs = []
    deadline = time.monotonic() + 10
    while len(msgs) < 4 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            msgs.append(m)
    assert len(msgs) == 4
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": _name("tid")})
    p.init_transactions(15)
    p.begin_transaction()
    for m in msgs:
        p.produce(dst, value=m.value().replace(b"in", b"out"))
    p.send_offsets_to_transaction([TopicPartition(src, 0, msgs[-1].offset() + 1)], c.consumer_group_metadata(), 15)
    p.commit_transaction(15)
    committed = c.committed([TopicPartition(src, 0)], 10)
    c.close()
    assert committed[0].offset == 4
    got = _consume_confluent(broker.bootstrap, dst, n=4, timeout=5, isolation="read_committed")
    assert sorted(v for _, v, _ in got) == [b"out-0", b"out-1", b"out-2", b"out-3"]
