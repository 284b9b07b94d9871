"""Log compaction through the Kafka listener, on both storages (issue 27, item 5): `rmq up` with the
commitlog (the compacted log of rmq.store.compaction) and with --storage kafka-log (the log cleaner
of kafka_bridge.kafka_log.cleaner). Stock clients (confluent-kafka, then kafka-python) produce 10,000
records over 100 keys with tombstones, and both read the topic back from the beginning: exactly the latest
value of each live key, and the tombstones gone after delete.retention.ms; and the issue's small
repro (cleanup.policy=compact, segment.ms=100, min.cleanable.dirty.ratio=0.01, 16 records, 6 keys).

A Kafka log never cleans its active segment, and a segment rolls only when a record arrives after
segment.ms: so, as a real application's traffic would, the tests keep producing a "tick" record
(its own key, left out of the checks) while they wait for the cleaned state."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_fixtures import start_broker, unique

TICK = b"__tick__"
COMPACT = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture(scope="module", params=["commitlog", "kafka-log"])
def broker(request, tmp_path_factory):
    cfg = {"kafkaStorage": request.param, "compactionScheduleInternal": 100, "kafkaLogCleanerBackoffMs": 100}
    b = start_broker(str(tmp_path_factory.mktemp(f"compact-{request.param}")), cfg)
    try:
        yield b
    finally:
        code = b.stop()
        text = b.log_text()
        assert code == 0 and "Traceback" not in text, text[-4000:]


def create(broker, name: str, configs: dict) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def read_confluent(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the beginning up to the high watermark: (offset, key, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:      # _PARTITION_EOF: at the high watermark
                    break
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def read_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50)
    out = []
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + 30
        while c.position(tp) < end and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                out.extend((r.offset, r.key, r.value) for r in recs)
    finally:
        c.close()
    return out


def wait_compacted(broker, producer, topic: str, expect: dict, timeout: float = 60):
    """Produce a tick at a time and read the topic until its records, ticks aside, are exactly one
    per live key with its latest value (tombstones gone); returns the last read."""
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        producer.produce(topic, key=TICK, value=b"t", partition=0)
        assert producer.flush(30) == 0
        got = read_confluent(broker.bootstrap, topic)
        if {k: v for _, k, v in got if k != TICK} == expect and len([1 for _, k, _ in got if k != TICK]) == len(expect):
            return got
    pytest.fail(f"not compacted within {timeout}s: {len(got)} records, e.g. {got[:5]}")


def test_issue_repro_16_records_6_keys(broker):
    topic = unique("repro")
    create(broker, topic, COMPACT)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(16):
        p.produce(topic, key=b"key%d" % (i % 6), value=b"value%d" % i, partition=0)
        p.flush(30)
    expect = {b"key%d" % k: b"value%d" % max(i for i in range(16) if i % 6 == k) for k in range(6)}
    got = wait_compacted(broker, p, topic, expect)
    offsets = [o for o, k, _ in got if k != TICK]
    assert offsets == sorted(offsets) and offsets[0] >= 10      # offsets keep their meaning


def test_10000_records_100_keys_with_tombstones_both_clients(broker):
    topic = unique("big")
    create(broker, topic, dict(COMPACT, **{"delete.retention.ms": "500"}))
    from kafka import KafkaProducer
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    latest = {}
    try:
        for i in range(10_000):     # the first half through confluent-kafka, the rest through kafka-python
            key = b"key%03d" % (i % 100)
            value = None if i >= 9_900 and i % 100 < 20 else b"v%d" % i   # 20 keys end with a tombstone
            if i < 5_000:
                p.produce(topic, key=key, value=value, partition=0)
                if i % 1000 == 999:
                    p.poll(0)
            else:
                if i == 5_000:
                    assert p.flush(60) == 0
                kp.send(topic, key=key, value=value, partition=0)
            latest[key] = value
        kp.flush(60)
    finally:
        kp.close(10)
    expect = {k: v for k, v in latest.items() if v is not None}
    assert len(expect) == 80
    wait_compacted(broker, p, topic, expect)
    # kafka-python reads the same: the live keys' latest values, no tombstone, no older value
    got = read_kafka_python(broker.bootstrap, topic)
    live = [(k, v) for _, k, v in got if k != TICK]
    assert dict(live) == expect and len(live) == 80
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))


def test_keyless_records_are_refused_on_a_compacted_topic(broker):
    topic = unique("nokey")
    create(broker, topic, COMPACT)
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    errors = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert errors and errors[0] is not None and errors[0].name() == "INVALID_RECORD"


def test_rocketmq_pull_consumer_reads_the_compacted_topic(broker):
    """The RocketMQ side of the same topic: a PullConsumer from offset 0 gets the compacted log's
    records (RocketMQ 5's compaction store answers pulls below the cleaned point), then the tail."""
    if "kafka-log" in open(broker.config_path, encoding="utf-8").read():
        pytest.skip("kafka-log topics are not visible to RocketMQ clients")
    from rmq.client.pull_consumer import PullConsumer
    topic = unique("rq")
    create(broker, topic, COMPACT)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(16):
        p.produce(topic, key=b"key%d" % (i % 6), value=b"value%d" % i, partition=0)
    assert p.flush(30) == 0
    expect = {b"key%d" % k: b"value%d" % max(i for i in range(16) if i % 6 == k) for k in range(6)}
    wait_compacted(broker, p, topic, expect)
    c = PullConsumer(unique("pcg"), broker.listeners["namesrv"])
    c.start()
    try:
        mq = [q for q in c.fetch_subscribe_message_queues(topic) if q.queueId == 0][0]
        got, off = [], 0
        for _ in range(50):
            r = c.pull(mq, "*", off, 32)
            got += [(m.queue_offset, m.keys, m.body) for m in r.msg_found_list]
            if r.next_begin_offset <= off or r.next_begin_offset >= r.max_offset:
                break
            off = r.next_begin_offset
    finally:
        c.shutdown()
    real = [(o, k, b) for o, k, b in got if k != TICK.decode()]
    assert {k.encode(): b for _, k, b in real} == expect and len(real) == 6
    assert [o for o, _, _ in real] == sorted(o for o, _, _ in real) and real[0][0] >= 10


def test_a_topic_altered_to_compact_is_compacted(broker):
    """IncrementalAlterConfigs on a topic that already holds records: the running broker (and, for
    kafka-log, the partition's open log) takes the new cleanup.policy."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    topic = unique("alter")
    create(broker, topic, {})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(16):
        p.produce(topic, key=b"key%d" % (i % 6), value=b"value%d" % i, partition=0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in COMPACT.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    expect = {b"key%d" % k: b"value%d" % max(i for i in range(16) if i % 6 == k) for k in range(6)}
    wait_compacted(broker, p, topic, expect)
