"""`rmq up --storage kafka-log`: the same Kafka listener serving Kafka topics from Kafka's own log
design. Stock clients produce and consume, ListOffsets by time works, the partition directories hold
Kafka's files, and after SIGKILL the broker recovers the logs and serves every acknowledged record."""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_fixtures import start_broker, unique


def consume_all(bootstrap: str, topic: str, partitions: int, want: int, timeout: float = 30) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, deadline = [], time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


@pytest.fixture
def klog_broker(tmp_path):
    b = start_broker(str(tmp_path), {"kafkaStorage": "kafka-log"})
    try:
        yield b
    finally:
        b.stop()


def test_stock_clients_produce_and_consume_from_kafka_log_files(klog_broker):
    bs = klog_broker.bootstrap
    t = unique("kl")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(t, 3, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(300):
        p.produce(t, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    got = consume_all(bs, t, 3, 300)
    assert sorted((part, off) for part, off, _, _ in got) == sorted((p_, o) for p_ in range(3) for o in range(100))
    assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(300))
    root = os.path.join(klog_broker.data_dir, "kafka-logs")
    assert sorted(os.listdir(os.path.join(root, f"{t}-1"))) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    assert os.path.exists(os.path.join(root, "meta.properties"))
    # ListOffsets: earliest, latest and by time (the first record at or after the time)
    c = Consumer({"bootstrap.servers": bs, "group.id": unique("g")})
    try:
        assert c.get_watermark_offsets(TopicPartition(t, 0), timeout=10) == (0, 100)
        found = c.offsets_for_times([TopicPartition(t, 1, 1_700_000_000_000 + 100)], timeout=10)
        assert found[0].offset == 33                  # record 100 went to partition 1 as its 34th
    finally:
        c.close()


def test_kill_and_restart_keeps_every_acknowledged_record(klog_broker, tmp_path):
    bs = klog_broker.bootstrap
    t = unique("klk")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2, "acks": "all"})
    for i in range(500):
        p.produce(t, value=b"r%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    klog_broker.proc.send_signal(signal.SIGKILL)          # no clean shutdown: no marker, no checkpoint
    klog_broker.proc.wait(10)
    again = start_broker(klog_broker.workdir, {"kafkaStorage": "kafka-log"})
    try:
        got = consume_all(again.bootstrap, t, 2, 500)
        assert sorted(v for *_, v in got) == sorted(b"r%d" % i for i in range(500))
        assert "kafka-log: loaded" in again.log_text() and "unclean" in again.log_text()
    finally:
        again.stop()
        klog_broker.stop_requested = True
