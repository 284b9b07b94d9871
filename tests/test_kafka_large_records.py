"""Large keys and many headers (issue 11, item 2): a record whose key and headers do not fit
RocketMQ's 32,767 bytes of properties keeps them at the front of the body (KAFKA_ENVELOPE) and
round-trips byte for byte through stock Kafka clients; the key is indexed by its SHA-256 digest."""
from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from kafka_bridge.mapping import (
    KEY_DIGEST_PREFIX,
    PROP_ENVELOPE,
    MappingError,
    record_to_message,
    unit_to_record,
)
from rmq.store import DefaultMessageStore
from tests.conftest import small_config
from tests.kafka_fixtures import create_topic_raw, kafka_broker, unique  # noqa: F401

BIG_BINARY_KEY = bytes(range(256)) * 400                 # 102,400 bytes, not UTF-8
BIG_TEXT_KEY = b"k" * 900_000
MANY_HEADERS = [(f"h{i}", b"v" * 20) for i in range(3000)]  # ~80 KB of headers
CASES = [
    (BIG_BINARY_KEY, b"value-1", []),
    (BIG_TEXT_KEY, b"value-2", [("trace", b"t-2")]),
    ("é".encode() * 20_000, b"value-3", MANY_HEADERS),
    (b"small", b"value-4", MANY_HEADERS),                   # headers alone do not fit
    (BIG_BINARY_KEY, None, []),                             # a tombstone with a large key
]


def _roundtrip_store(tmp_path, key, value, headers):
    msg = record_to_message("T", 0, key, value, headers, 1_700_000_000_000, ("127.0.0.1", 1), 18)
    with DefaultMessageStore(small_config(str(tmp_path / "s"), mappedFileSizeCommitLog=4 << 20,
                                          maxMessageSize=2 << 20)).load().start() as store:
        r = store.put_message(msg)
        assert r.ok, r
        raw = store.commitlog.read(r.result.wrote_offset, r.result.wrote_bytes)
    return msg, unit_to_record(raw)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_envelope_roundtrip_through_the_store(tmp_path, case):
    key, value, headers = CASES[case]
    msg, (k2, v2, h2, ts, props) = _roundtrip_store(tmp_path, key, value, headers)
    assert PROP_ENVELOPE in msg.properties
    assert (k2, v2, ts) == (key, value, 1_700_000_000_000)
    assert [(n, bytes(v)) for n, v in h2] == [(n, v) for n, v in headers]
    assert props["KEYS"].split(" ")[0] == KEY_DIGEST_PREFIX + hashlib.sha256(key).hexdigest()


def test_small_records_do_not_use_the_envelope():
    msg = record_to_message("T", 0, b"order-1", b"v", [("a", b"b")], 1, ("127.0.0.1", 1), 18)
    assert PROP_ENVELOPE not in msg.properties and msg.properties["KEYS"] == "order-1" and msg.body == b"v"


def test_reserved_headers_beyond_the_properties_limit_are_refused():
    with pytest.raises(MappingError, match="reserved headers need"):
        record_to_message("T", 0, None, b"v", [("rocketmq.keys", b"k" * 40_000)], 1, ("127.0.0.1", 1), 18)


# ------------------------------------------------------------------ over the wire, stock clients
def _produce_consume_kafka_python(bootstrap, topic):
    from kafka import KafkaConsumer, KafkaProducer
    prod = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=5_000_000)
    for key, value, headers in CASES:
        prod.send(topic, key=key, value=value, headers=headers).get(30)
    prod.close()
    cons = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                         consumer_timeout_ms=8000, fetch_max_bytes=50_000_000,
                         max_partition_fetch_bytes=10_000_000)
    out = [(m.key, m.value, [(n, bytes(v)) for n, v in m.headers]) for m in cons]
    cons.close()
    return out


def _produce_consume_confluent(bootstrap, topic):
    from confluent_kafka import Consumer, Producer
    prod = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 5_000_000})
    for key, value, headers in CASES:
        prod.produce(topic, key=key, value=value, headers=headers)
    assert prod.flush(30) == 0
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g-big"), "auto.offset.reset": "earliest",
                     "fetch.max.bytes": 50_000_000, "max.partition.fetch.bytes": 10_000_000,
                     "receive.message.max.bytes": 60_000_000})
    cons.subscribe([topic])
    out = []
    for _ in range(100):
        if len(out) == len(CASES):
            break
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            out.append((m.key(), m.value(), [(n, bytes(v)) for n, v in (m.headers() or [])]))
    cons.close()
    return out


def _produce_consume_aiokafka(bootstrap, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=5_000_000)
        await prod.start()
        try:
            for key, value, headers in CASES:
                await prod.send_and_wait(topic, key=key, value=value, headers=headers)
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                fetch_max_bytes=50_000_000, max_partition_fetch_bytes=10_000_000)
        await cons.start()
        out = []
        try:
            async with asyncio.timeout(20):
                async for m in cons:
                    out.append((m.key, m.value, [(n, bytes(v)) for n, v in m.headers]))
                    if len(out) == len(CASES):
                        break
        finally:
            await cons.stop()
        return out
    return asyncio.run(run())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_large_keys_and_many_headers_roundtrip_exactly(kafka_broker, client):  # noqa: F811
    topic = unique("big")
    assert create_topic_raw(kafka_broker.bootstrap, topic, 1) == 0   # one partition: one order
    run = {"kafka-python": _produce_consume_kafka_python, "confluent-kafka": _produce_consume_confluent,
           "aiokafka": _produce_consume_aiokafka}[client]
    got = run(kafka_broker.bootstrap, topic)
    assert len(got) == len(CASES)
    for (key, value, headers), (k2, v2, h2) in zip(CASES, got):
        assert (len(k2), k2 == key) == (len(key), True)
        assert v2 == value
        assert h2 == [(n, v) for n, v in headers]
    # RocketMQ's view: the key is indexed by its digest (topic#sha256:...), as queryMsgByKey looks it up
    from rmq.store.inspect import inspect_store
    from tests.kafka_fixtures import wait_until
    digest = KEY_DIGEST_PREFIX + hashlib.sha256(BIG_TEXT_KEY).hexdigest()

    def matches():
        rep = inspect_store(kafka_broker.data_dir, "index", topic=topic, key=digest, limit=0)
        return [e for f in rep["index"]["files"] if f["chain"] for e in f["chain"]["entries"] if e["match"]]
    assert len(wait_until(matches, 15, interval=0.2, what="the digest's index entry")) == 1
