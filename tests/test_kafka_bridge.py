"""Integration tests of the Kafka wire bridge (SPEC §11, issue 3) with real third-party clients
(kafka-python, confluent-kafka / librdkafka, aiokafka) against `rmq up` running as a subprocess.

Covered, each with each client where the client allows:
  1. CreateTopics through each client's admin API; produce with every codec and with headers
     (also null keys/values, binary/null/repeated/reserved-name headers, header order kept);
     consume from earliest, from latest, from a timestamp; commit and fetch committed offsets.
  2. A 3-member group rebalances when a member leaves and when one joins, and every message is
     processed and committed exactly once by the union of the members (per client, with
     librdkafka's cooperative-sticky protocol, and in a group mixing the three clients); a member
     that stops heartbeating is expired after its session timeout.
  3. Idempotent producers: a retried Produce (same producer id/epoch/sequence, raw protocol) is
     answered with the first base offset and stored once; a sequence gap is
     OUT_OF_ORDER_SEQUENCE_NUMBER; each client with idempotence on produces exactly N records.
  4. Kafka keys are RocketMQ KEYS: `rmq store inspect` shows ordinary MESSAGE units (TOPIC,
     QUEUEID = partition, KEYS) and DefaultMessageStore.query_message finds the record by key.
  6. The reserved header rocketmq.tags becomes TAGS in the store and comes back as that header.
(5, bad input, is tests/test_kafka_bad_input.py.)
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.protocol import error_codes as ec
from kafka_bridge.records import Compression, decode_batches, encode_batch

from .kafka_fixtures import (  # noqa: F401  (kafka_broker, own_broker: fixtures)
    ROOT, RawClient, create_topic_raw, kafka_broker, own_broker, unique, wait_until,
)

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka"),
              pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning")]

CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
OP_TIMEOUT = 20.0  # bound on any single client operation


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


def _hdrs(headers) -> tuple:
    return tuple((k, None if v is None else bytes(v)) for k, v in (headers or ()))


# =============================================================================================
# One small synchronous adapter per client library, so each scenario is written once.

def _kafka_python_snappy() -> None:
    """kafka-python 3 does snappy through the python-snappy module (not installed here); python-snappy
    >= 0.7 is itself a thin wrapper over cramjam's raw snappy codec, which is installed. Give
    kafka-python that same codec so its own xerial/raw snappy framing code is what gets tested."""
    import kafka.codec
    if kafka.codec.has_snappy():
        return
    cramjam = pytest.importorskip("cramjam", reason="kafka-python needs python-snappy or cramjam for snappy")

    class _Snappy:
        @staticmethod
        def compress(data):
            return bytes(cramjam.snappy.compress_raw(bytes(data)))

        @staticmethod
        def decompress(data):
            return bytes(cramjam.snappy.decompress_raw(bytes(data)))

    kafka.codec.snappy = _Snappy


class KafkaPythonAdapter:
    name = "kafka-python"

    def __init__(self, bootstrap: str):
        self.bs = bootstrap
        _kafka_python_snappy()

    # -- admin
    def create_topic(self, name: str, partitions: int) -> int:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError
        admin = KafkaAdminClient(bootstrap_servers=self.bs, request_timeout_ms=int(OP_TIMEOUT * 1000))
        try:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
            return 0
        except KafkaError as exc:
            return getattr(exc, "errno", -1)
        finally:
            admin.close()

    def partition_count(self, name: str) -> int:
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.bs)
        try:
            (t,) = admin.describe_topics([name])
            return len(t["partitions"])
        finally:
            admin.close()

    def group_offsets(self, group: str) -> dict:
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.bs)
        try:
            fn = getattr(admin, "list_consumer_group_offsets", None) or admin.list_group_offsets
            res = fn(group)
            if group in res and isinstance(res[group], dict):
                res = res[group]
            return {(tp.topic, tp.partition): om.offset for tp, om in res.items()}
        finally:
            admin.close()

    # -- produce
    def produce(self, topic: str, records: list[dict], compression: str = "none",
                idempotent: bool = False) -> list[tuple[int, int]]:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=self.bs, acks="all", linger_ms=5,
                          compression_type=None if compression == "none" else compression,
                          enable_idempotence=idempotent)
        try:
            futs = [p.send(topic, key=r.get("key"), value=r.get("value"), headers=r.get("headers") or [],
                           partition=r.get("partition"), timestamp_ms=r.get("timestamp")) for r in records]
            p.flush(OP_TIMEOUT)
            mds = [f.get(OP_TIMEOUT) for f in futs]
            return [(m.partition, m.offset) for m in mds]
        finally:
            p.close(5)

    # -- consume
    def consumer(self, group: str | None, reset: str = "earliest", **kw):
        return _KPConsumer(self.bs, group, reset, **kw)


class _KPConsumer:
    def __init__(self, bs, group, reset, **kw):
        from kafka import KafkaConsumer
        self.c = KafkaConsumer(bootstrap_servers=bs, group_id=group, auto_offset_reset=reset,
                               enable_auto_commit=False, heartbeat_interval_ms=200, session_timeout_ms=6000,
                               max_poll_interval_ms=20_000, fetch_max_wait_ms=100, **kw)

    @staticmethod
    def tp(topic, p):
        from kafka import TopicPartition
        return TopicPartition(topic, p)

    def subscribe(self, topic, listener=None):
        if listener is None:
            self.c.subscribe([topic])
        else:
            self.c.subscribe([topic], listener=listener)

    def assign(self, topic, partitions):
        self.c.assign([self.tp(topic, p) for p in partitions])

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def wait_ready(self, n_partitions: int, timeout: float = OP_TIMEOUT):
        """Subscribed consumer: until all n partitions are assigned and their start offsets known."""
        deadline = time.monotonic() + timeout
        while len(self.c.assignment()) < n_partitions:
            assert time.monotonic() < deadline, "no assignment"
            got = self.c.poll(timeout_ms=100)
            assert not got, "a message arrived before the consumer was ready"
        for tp in self.c.assignment():
            self.c.position(tp, timeout_ms=int(timeout * 1000))

    def poll(self, timeout: float = 0.2) -> list[Rec]:
        out = []
        for tp, ms in self.c.poll(timeout_ms=int(timeout * 1000)).items():
            out.extend(Rec(m.partition, m.offset, m.key, m.value, _hdrs(m.headers), m.timestamp) for m in ms)
        return out

    def seek(self, topic, p, offset):
        self.c.seek(self.tp(topic, p), offset)

    def offsets_for_times(self, topic, stamps: dict[int, int]) -> dict[int, tuple[int, int] | None]:
        res = self.c.offsets_for_times({self.tp(topic, p): ts for p, ts in stamps.items()})
        return {tp.partition: (None if v is None else (v.offset, v.timestamp)) for tp, v in res.items()}

    def commit(self, offsets: dict[tuple[str, int], int] | None = None):
        from kafka.structs import OffsetAndMetadata
        if offsets is None:
            self.c.commit()
        else:
            self.c.commit({self.tp(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})

    def committed(self, topic, partitions) -> dict[int, int | None]:
        return {p: self.c.committed(self.tp(topic, p)) for p in partitions}

    def close(self):
        self.c.close(autocommit=False)


class ConfluentAdapter:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str):
        self.bs = bootstrap

    def _admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bs})

    def create_topic(self, name: str, partitions: int) -> int:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic
        admin = self._admin()  # must outlive the future
        fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                  request_timeout=OP_TIMEOUT)[name]
        try:
            fut.result(OP_TIMEOUT)
            return 0
        except KafkaException as exc:
            return exc.args[0].code()

    def partition_count(self, name: str) -> int:
        md = self._admin().list_topics(topic=name, timeout=OP_TIMEOUT)
        return len(md.topics[name].partitions)

    def group_offsets(self, group: str) -> dict:
        from confluent_kafka import ConsumerGroupTopicPartitions
        admin = self._admin()
        futs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=OP_TIMEOUT)
        res = futs[group].result(OP_TIMEOUT)
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}

    def produce(self, topic: str, records: list[dict], compression: str = "none",
                idempotent: bool = False) -> list[tuple[int, int]]:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bs, "acks": "all", "linger.ms": 5,
                      "compression.type": compression, "enable.idempotence": idempotent})
        results: list = [None] * len(records)

        def cb(i):
            def on_delivery(err, msg):
                results[i] = (err, msg.partition(), msg.offset())
            return on_delivery

        for i, r in enumerate(records):
            kw = {}
            if r.get("partition") is not None:
                kw["partition"] = r["partition"]
            if r.get("timestamp") is not None:
                kw["timestamp"] = r["timestamp"]
            p.produce(topic, key=r.get("key"), value=r.get("value"), headers=r.get("headers") or None,
                      on_delivery=cb(i), **kw)
            p.poll(0)
        left = p.flush(OP_TIMEOUT)
        assert left == 0, f"{left} messages not delivered"
        errs = [r[0] for r in results if r[0] is not None]
        assert not errs, errs
        return [(r[1], r[2]) for r in results]

    def consumer(self, group: str | None, reset: str = "earliest", **kw):
        return _CKConsumer(self.bs, group, reset, **kw)


class _CKConsumer:
    def __init__(self, bs, group, reset, **kw):
        from confluent_kafka import Consumer
        self.stats = {}
        conf = {"bootstrap.servers": bs, "group.id": group or unique("ck-nogroup"), "auto.offset.reset": reset,
                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                "max.poll.interval.ms": 20_000, "fetch.wait.max.ms": 100, "statistics.interval.ms": 100,
                "stats_cb": self._on_stats}
        conf.update(kw)
        self.c = Consumer(conf)

    def _on_stats(self, text):
        self.stats = json.loads(text)

    @staticmethod
    def tp(topic, p, offset=None):
        from confluent_kafka import TopicPartition
        return TopicPartition(topic, p) if offset is None else TopicPartition(topic, p, offset)

    def subscribe(self, topic, on_assign=None, on_revoke=None):
        kw = {}
        if on_assign:
            kw["on_assign"] = on_assign
        if on_revoke:
            kw["on_revoke"] = on_revoke
        self.c.subscribe([topic], **kw)

    def assign(self, topic, partitions, offsets=None):
        self.c.assign([self.tp(topic, p, None if offsets is None else offsets[p]) for p in partitions])

    def assignment(self):
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def wait_ready(self, n_partitions: int, timeout: float = OP_TIMEOUT):
        """Until n partitions are assigned and librdkafka has resolved where each starts fetching
        (statistics: fetch_state "active" with a next_offset)."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.c.poll(0.1)
            assert m is None or m.error() is not None, "a message arrived before the consumer was ready"
            assigned = self.assignment()
            if len(assigned) >= n_partitions and self.stats:
                ready = 0
                for (topic, p) in assigned:
                    st = self.stats.get("topics", {}).get(topic, {}).get("partitions", {}).get(str(p), {})
                    if st.get("fetch_state") == "active" and st.get("next_offset", -1) >= 0:
                        ready += 1
                if ready == len(assigned):
                    return
            assert time.monotonic() < deadline, f"consumer not ready: {self.assignment()} {self.stats.get('topics')}"

    def poll(self, timeout: float = 0.2) -> list[Rec]:
        out = []
        for m in self.c.consume(num_messages=100, timeout=timeout):
            if m.error():
                raise AssertionError(f"consumer error: {m.error()}")
            out.append(Rec(m.partition(), m.offset(), m.key(), m.value(), _hdrs(m.headers()), m.timestamp()[1]))
        return out

    def seek(self, topic, p, offset):
        # librdkafka seeks only partitions it is already fetching; before that, (re)assigning the
        # partition at the offset is how a start position is given
        if (topic, p) in self.assignment():
            try:
                self.c.seek(self.tp(topic, p, offset))
                return
            except Exception:
                pass
        self.c.assign([self.tp(topic, q, offset if q == p else None) for (t, q) in self.assignment() | {(topic, p)}
                       if t == topic])

    def offsets_for_times(self, topic, stamps):
        res = self.c.offsets_for_times([self.tp(topic, p, ts) for p, ts in stamps.items()], timeout=OP_TIMEOUT)
        out = {}
        for tp in res:
            assert tp.error is None, tp.error
            out[tp.partition] = None if tp.offset < 0 else (tp.offset, None)
        return out

    def commit(self, offsets=None):
        if offsets is None:
            self.c.commit(asynchronous=False)
        else:
            self.c.commit(offsets=[self.tp(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)

    def committed(self, topic, partitions):
        res = self.c.committed([self.tp(topic, p) for p in partitions], timeout=OP_TIMEOUT)
        return {tp.partition: (None if tp.offset < 0 else tp.offset) for tp in res}

    def close(self):
        self.c.close()


class AioKafkaAdapter:
    """aiokafka is asyncio-only: each adapter/consumer owns a private event loop and runs one
    coroutine at a time on it (the client's background tasks run while it does)."""
    name = "aiokafka"

    def __init__(self, bootstrap: str):
        self.bs = bootstrap

    @staticmethod
    def _run(coro):
        return asyncio.run(asyncio.wait_for(coro, OP_TIMEOUT * 2))

    def create_topic(self, name, partitions) -> int:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def go():
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bs, request_timeout_ms=int(OP_TIMEOUT * 1000))
            await admin.start()
            try:
                resp = await admin.create_topics([NewTopic(name, partitions, 1)])
                return resp.topic_errors[0][1]
            finally:
                await admin.close()
        return self._run(go())

    def partition_count(self, name) -> int:
        from aiokafka.admin import AIOKafkaAdminClient

        async def go():
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bs)
            await admin.start()
            try:
                (t,) = await admin.describe_topics([name])
                return len(t["partitions"])
            finally:
                await admin.close()
        return self._run(go())

    def group_offsets(self, group) -> dict:
        from aiokafka.admin import AIOKafkaAdminClient

        async def go():
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bs)
            await admin.start()
            try:
                res = await admin.list_consumer_group_offsets(group)
                return {(tp.topic, tp.partition): om.offset for tp, om in res.items()}
            finally:
                await admin.close()
        return self._run(go())

    def produce(self, topic, records, compression="none", idempotent=False):
        from aiokafka import AIOKafkaProducer

        async def go():
            p = AIOKafkaProducer(bootstrap_servers=self.bs, acks="all", linger_ms=5,
                                 compression_type=None if compression == "none" else compression,
                                 enable_idempotence=idempotent)
            await p.start()
            try:
                futs = [await p.send(topic, key=r.get("key"), value=r.get("value"), headers=r.get("headers") or None,
                                     partition=r.get("partition"), timestamp_ms=r.get("timestamp"))
                        for r in records]
                mds = await asyncio.gather(*futs)
                return [(m.partition, m.offset) for m in mds]
            finally:
                await p.stop()
        return self._run(go())

    def consumer(self, group, reset="earliest", **kw):
        return _AIOConsumer(self.bs, group, reset, **kw)


class _AIOConsumer:
    def __init__(self, bs, group, reset, **kw):
        from aiokafka import AIOKafkaConsumer
        self.loop = asyncio.new_event_loop()

        async def make():
            return AIOKafkaConsumer(bootstrap_servers=bs, group_id=group, auto_offset_reset=reset,
                                    enable_auto_commit=False, heartbeat_interval_ms=200, session_timeout_ms=6000,
                                    max_poll_interval_ms=20_000, fetch_max_wait_ms=100, **kw)
        self.c = self.run(make())
        self.run(self.c.start())

    def run(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, OP_TIMEOUT * 2))

    def sync(self, fn, *args, **kw):
        """Call one of aiokafka's plain methods with our loop running (some create futures)."""
        async def call():
            return fn(*args, **kw)
        return self.run(call())

    @staticmethod
    def tp(topic, p):
        from aiokafka import TopicPartition
        return TopicPartition(topic, p)

    def subscribe(self, topic, listener=None):
        self.sync(self.c.subscribe, [topic], listener=listener)

    def assign(self, topic, partitions):
        self.sync(self.c.assign, [self.tp(topic, p) for p in partitions])

    def assignment(self):
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def wait_ready(self, n_partitions, timeout=OP_TIMEOUT):
        async def go():
            deadline = time.monotonic() + timeout
            while len(self.c.assignment()) < n_partitions:
                assert time.monotonic() < deadline, "no assignment"
                got = await self.c.getmany(timeout_ms=100)
                assert not got, "a message arrived before the consumer was ready"
            for tp in self.c.assignment():
                await self.c.position(tp)
        self.run(go())

    def poll(self, timeout=0.2):
        res = self.run(self.c.getmany(timeout_ms=int(timeout * 1000)))
        return [Rec(m.partition, m.offset, m.key, m.value, _hdrs(m.headers), m.timestamp)
                for ms in res.values() for m in ms]

    def seek(self, topic, p, offset):
        self.sync(self.c.seek, self.tp(topic, p), offset)

    def offsets_for_times(self, topic, stamps):
        res = self.run(self.c.offsets_for_times({self.tp(topic, p): ts for p, ts in stamps.items()}))
        return {tp.partition: (None if v is None else (v.offset, v.timestamp)) for tp, v in res.items()}

    def commit(self, offsets=None):
        if offsets is None:
            self.run(self.c.commit())
        else:
            self.run(self.c.commit({self.tp(t, p): o for (t, p), o in offsets.items()}))

    def committed(self, topic, partitions):
        return {p: self.run(self.c.committed(self.tp(topic, p))) for p in partitions}

    def close(self):
        try:
            self.run(self.c.stop())
        finally:
            self.loop.close()


ADAPTERS = {"kafka-python": KafkaPythonAdapter, "confluent-kafka": ConfluentAdapter, "aiokafka": AioKafkaAdapter}


@pytest.fixture(params=CLIENTS)
def client(request, kafka_broker):
    return ADAPTERS[request.param](kafka_broker.bootstrap)


def consume_n(consumer, n: int, timeout: float = OP_TIMEOUT, settle: float = 0.3) -> list[Rec]:
    """Poll until n records arrived (bounded by `timeout`), then poll `settle` seconds more so any
    record beyond n is caught too."""
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    end = time.monotonic() + settle
    while time.monotonic() < end:
        got.extend(consumer.poll(0.1))
    return got


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """High watermarks through a raw ListOffsets(LATEST)."""
    with RawClient(bootstrap) as c:
        r = c.request(kp.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                           for p in range(partitions)]}]})
    out = {}
    for p in r["topics"][0]["partitions"]:
        assert p["error_code"] == 0, p
        out[p["partition_index"]] = p["offset"]
    return out


# =============================================================================================
# 1. Admin, every codec, headers, earliest/latest/timestamp, commit + committed

def test_create_topics_through_admin_api(client, kafka_broker):
    topic = unique(f"adm-{client.name}")
    assert client.create_topic(topic, 5) == 0
    assert client.partition_count(topic) == 5
    assert client.create_topic(topic, 5) == ec.TOPIC_ALREADY_EXISTS
    assert client.create_topic(unique("bad-rf"), 0) == ec.INVALID_PARTITIONS


def test_produce_every_codec_with_headers_and_consume_from_earliest_then_commit(client, kafka_broker):
    topic, group = unique(f"codec-{client.name}"), unique("g-codec")
    assert client.create_topic(topic, 3) == 0
    sent: dict[str, list[tuple[dict, tuple[int, int]]]] = {}
    for codec in CODECS:
        recs = [{"key": f"{codec}-key-{i}".encode(),
                 "value": (f"{codec} value {i} " + "compressible payload " * 40).encode(),
                 "headers": [("codec", codec.encode()), ("seq", str(i).encode()), ("trace-id", f"t-{i}".encode())]}
                for i in range(8)]
        recs[0]["headers"] = recs[0]["headers"] + [("binary", b"\x00\xff\xfe"), ("seq", b"repeated")]
        positions = client.produce(topic, recs, compression=codec)
        sent[codec] = list(zip(recs, positions))
    # offsets handed out per partition are contiguous and unique
    by_part = defaultdict(list)
    for pairs in sent.values():
        for _, (p, o) in pairs:
            by_part[p].append(o)
    for p, offs in by_part.items():
        assert sorted(offs) == list(range(len(offs))), (p, sorted(offs))

    c = client.consumer(group, "earliest")
    try:
        c.subscribe(topic)
        got = consume_n(c, 40)
        assert len(got) == 40, f"expected 40 records, got {len(got)}"
        by_pos = {(r.partition, r.offset): r for r in got}
        assert len(by_pos) == 40, "a record was delivered twice"
        for codec, pairs in sent.items():
            for rec, pos in pairs:
                r = by_pos[pos]
                assert r.key == rec["key"] and r.value == rec["value"], (codec, pos)
                assert r.headers == tuple(rec["headers"]), (codec, r.headers)
        # commit synchronously, then read the committed offsets back (consumer and admin API)
        c.commit()
        hw = end_offsets(kafka_broker.bootstrap, topic, 3)
        assert c.committed(topic, range(3)) == hw
    finally:
        c.close()
    assert client.group_offsets(group) == {(topic, p): o for p, o in hw.items()}


def test_null_empty_and_awkward_records_round_trip(client, kafka_broker):
    """Null key, null value (tombstone), empty value, a key with a space, header names that are
    RocketMQ system properties, empty/binary/null header values: all come back as sent, headers in
    their order."""
    topic = unique(f"edge-{client.name}")
    assert client.create_topic(topic, 1) == 0
    recs = [{"key": None, "value": b"no key"},
            {"key": b"tomb", "value": None},
            {"key": b"empty", "value": b""},
            {"key": b"a key with spaces", "value": b"v", "headers": [("e", b""), ("b", b"\xff\x00")]},
            {"key": b"k", "value": b"v", "headers": [("b", b"\xff"), ("t", b"text"), ("b", b"\xfe"), ("u", b"")]},
            {"key": "ключ-\u00e9".encode(), "value": b"utf-8 key",
             "headers": [("KEYS", b"x"), ("TAGS", b"y"), ("UNIQ_KEY", b"z"), ("DELAY", b"3")]},
            {"key": b"\x00\x01\xff", "value": b"binary key", "headers": [("h", b"1"), ("h", b"2"), ("h", b"3")]}]
    if client.name != "kafka-python":  # kafka-python refuses a None header value itself
        recs.append({"key": b"nullhdr", "value": b"v", "headers": [("n", None), ("t", b"text"), ("e", b"")]})
    positions = client.produce(topic, recs)
    assert positions == [(0, i) for i in range(len(recs))]
    c = client.consumer(None, "earliest")
    try:
        c.assign(topic, [0])
        got = consume_n(c, len(recs), settle=0.1)
    finally:
        c.close()
    assert [(r.offset, r.key, r.value) for r in got] == [(i, r.get("key"), r["value"]) for i, r in enumerate(recs)]
    for r, sent in zip(got, recs):
        assert r.headers == tuple(sent.get("headers", [])), (sent, r.headers)


def test_commit_explicit_offsets_and_resume(client, kafka_broker):
    """Commit an offset in the middle; a new consumer of the same group resumes exactly there."""
    topic, group = unique(f"resume-{client.name}"), unique("g-resume")
    assert client.create_topic(topic, 1) == 0
    client.produce(topic, [{"value": f"m{i}".encode(), "partition": 0} for i in range(10)])
    c = client.consumer(group, "earliest")
    try:
        c.assign(topic, [0])
        got = consume_n(c, 10, settle=0.1)
        assert [r.value for r in got] == [f"m{i}".encode() for i in range(10)]
        c.commit({(topic, 0): 6})
        assert c.committed(topic, [0]) == {0: 6}
    finally:
        c.close()
    assert client.group_offsets(group) == {(topic, 0): 6}
    c = client.consumer(group, "earliest")
    try:
        c.subscribe(topic)
        got = consume_n(c, 4)
        assert [r.value for r in got] == [b"m6", b"m7", b"m8", b"m9"]
    finally:
        c.close()


def test_consume_from_latest_sees_only_new_messages(client, kafka_broker):
    topic, group = unique(f"latest-{client.name}"), unique("g-latest")
    assert client.create_topic(topic, 2) == 0
    client.produce(topic, [{"key": b"old", "value": f"old-{i}".encode()} for i in range(6)])
    c = client.consumer(group, "latest")
    try:
        c.subscribe(topic)
        c.wait_ready(2)
        client.produce(topic, [{"key": f"k{i}".encode(), "value": f"new-{i}".encode()} for i in range(5)])
        got = consume_n(c, 5, settle=0.5)
        assert sorted(r.value for r in got) == [f"new-{i}".encode() for i in range(5)]
    finally:
        c.close()


def test_consume_from_timestamp(client, kafka_broker):
    """offsets_for_times finds the first record whose (CreateTime) timestamp is >= the one asked,
    also for records stamped with event times earlier than when they were stored."""
    topic = unique(f"ts-{client.name}")
    assert client.create_topic(topic, 2) == 0
    t0 = int(time.time() * 1000) - 3_600_000
    client.produce(topic, [{"value": f"ev-{i}".encode(), "partition": 0, "timestamp": t0 + i * 1000}
                           for i in range(6)])
    client.produce(topic, [{"value": b"now", "partition": 1}])
    c = client.consumer(None, "earliest")
    try:
        found = c.offsets_for_times(topic, {0: t0 + 2500, 1: t0 + 2500})
        assert found[0] is not None and found[0][0] == 3, found
        if found[0][1] is not None:  # confluent-kafka does not return the timestamp
            assert found[0][1] == t0 + 3000
        assert found[1] is not None and found[1][0] == 0, found
        assert c.offsets_for_times(topic, {0: int(time.time() * 1000) + 3_600_000}) == {0: None}
        c.assign(topic, [0])
        c.seek(topic, 0, found[0][0])
        got = consume_n(c, 3, settle=0.2)
        assert [(r.offset, r.value, r.timestamp) for r in got] == [
            (3 + i, f"ev-{3 + i}".encode(), t0 + (3 + i) * 1000) for i in range(3)]
    finally:
        c.close()


# =============================================================================================
# 2. A 3-member group: a member leaves mid-stream, another joins; nothing lost, nothing twice

class GroupLedger:
    """What every member processed and committed, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.processed: dict[tuple[int, int], list[str]] = defaultdict(list)
        self.by_member: Counter = Counter()
        self.values: list[bytes] = []
        self.commits: dict[int, list[tuple[int, str]]] = defaultdict(list)  # partition -> [(offset, member)]
        self.errors: list[str] = []
        self.commit_retries = 0
        self.assigned: dict[str, set] = {}
        self.history: list[tuple[str, tuple]] = []  # (member, partitions) at each assignment change

    def process(self, member: str, rec: Rec) -> None:
        with self.lock:
            self.processed[(rec.partition, rec.offset)].append(member)
            self.by_member[member] += 1
            self.values.append(rec.value)

    def committed(self, member: str, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, o in offsets.items():
                self.commits[p].append((o, member))

    def total(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.processed.values())


def _is_rebalance_in_progress(exc: Exception) -> bool:
    """A commit refused because the group is rebalancing: REBALANCE_IN_PROGRESS (between JoinGroup
    and SyncGroup), or ILLEGAL_GENERATION for a commit sent just before this member's own JoinGroup
    answer gave it the new generation (requests on a connection are served in order, so it waited
    behind the JoinGroup). A cooperative member keeps its partitions and commits again."""
    err = exc.args[0] if exc.args else None
    if hasattr(err, "code"):  # confluent_kafka.KafkaException(KafkaError)
        from confluent_kafka import KafkaError
        return err.code() in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)
    return type(exc).__name__ in ("RebalanceInProgressError", "IllegalGenerationError")  # kafka-python, aiokafka


class _Member(threading.Thread):
    """One consumer-group member in its own thread: poll, process, commit synchronously; on revoke,
    commit what was processed before giving the partitions up."""

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str, name: str, ledger: GroupLedger):
        super().__init__(name=name, daemon=True)
        self.kind, self.bs, self.topic, self.group, self.ledger = kind, bootstrap, topic, group, ledger
        self.stop_event = threading.Event()
        self.pending: dict[int, int] = {}

    def process_batch(self, recs: list[Rec]) -> None:
        for r in recs:
            time.sleep(0.002)  # "work": keeps messages in flight while the group rebalances
            self.ledger.process(self.name, r)
            self.pending[r.partition] = r.offset + 1

    def commit_pending(self, commit_fn, partitions=None, retry_later: bool = False) -> None:
        """Commit what was processed (of `partitions`). retry_later: a commit refused with
        REBALANCE_IN_PROGRESS (the group is between JoinGroup and SyncGroup; members of a
        cooperative group keep consuming then) stays pending for the next try, as Kafka means it."""
        todo = {p: o for p, o in self.pending.items() if partitions is None or p in partitions}
        if not todo:
            return
        try:
            commit_fn(todo)
        except Exception as exc:
            if retry_later and _is_rebalance_in_progress(exc):
                with self.ledger.lock:
                    self.ledger.commit_retries += 1
                return
            raise
        self.ledger.committed(self.name, todo)
        for p in todo:
            self.pending.pop(p, None)

    def commit_before_leaving(self, commit_fn, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.pending:
            self.commit_pending(commit_fn, retry_later=time.monotonic() < deadline)
            if self.pending:
                time.sleep(0.1)

    def set_assigned(self, parts) -> None:
        with self.ledger.lock:
            self.ledger.assigned[self.name] = set(parts)
            self.ledger.history.append((self.name, tuple(sorted(self.ledger.assigned[self.name]))))

    def run(self) -> None:
        try:
            if self.kind == "confluent-kafka-cooperative":
                self.run_confluent_kafka("cooperative-sticky")
            else:
                getattr(self, "run_" + self.kind.replace("-", "_"))()
        except BaseException as exc:  # reported by the test
            import traceback
            try:
                where = "".join(traceback.format_tb(exc.__traceback__))
            except Exception:  # some client exceptions chain objects traceback cannot format
                where = ""
            self.ledger.errors.append(f"{self.name}: {exc!r}\n{where}")

    # -- kafka-python: the listener runs inside poll(), on this thread
    def run_kafka_python(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata
        c = KafkaConsumer(bootstrap_servers=self.bs, group_id=self.group, client_id=self.name,
                          auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=10,
                          heartbeat_interval_ms=200, session_timeout_ms=6000, max_poll_interval_ms=20_000,
                          fetch_max_wait_ms=100)
        member = self

        def commit_fn(todo):
            c.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in todo.items()})

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.commit_pending(commit_fn, {tp.partition for tp in revoked})
                member.set_assigned(())

            def on_partitions_assigned(self, assigned):
                member.set_assigned(tp.partition for tp in assigned)

        c.subscribe([self.topic], listener=Listener())
        try:
            while not self.stop_event.is_set():
                batch = c.poll(timeout_ms=100, max_records=10)
                recs = [Rec(m.partition, m.offset, m.key, m.value, (), m.timestamp)
                        for ms in batch.values() for m in ms]
                self.process_batch(recs)
                self.commit_pending(commit_fn, retry_later=True)
            self.commit_before_leaving(commit_fn)
        finally:
            c.close(autocommit=False)
            self.set_assigned(())

    # -- confluent-kafka: on_revoke is served inside consume(), on this thread
    def run_confluent_kafka(self, strategy: str = "range,roundrobin") -> None:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bs, "group.id": self.group, "client.id": self.name,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "max.poll.interval.ms": 20_000,
                      "fetch.wait.max.ms": 100, "partition.assignment.strategy": strategy})
        incremental = strategy == "cooperative-sticky"

        def commit_fn(todo):
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in todo.items()], asynchronous=False)

        def on_assign(consumer, parts):
            if incremental:  # parts are the partitions added to what this member keeps
                parts = [*parts, *consumer.assignment()]
            self.set_assigned(tp.partition for tp in parts)

        def on_revoke(consumer, parts):
            self.commit_pending(commit_fn, {tp.partition for tp in parts})
            if incremental:
                gone = {tp.partition for tp in parts}
                self.set_assigned(tp.partition for tp in consumer.assignment() if tp.partition not in gone)
            else:
                self.set_assigned(())

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop_event.is_set():
                msgs = c.consume(num_messages=10, timeout=0.1)
                for m in msgs:
                    if m.error():
                        raise AssertionError(f"consumer error {m.error()}")
                self.process_batch([Rec(m.partition(), m.offset(), m.key(), m.value(), (), 0) for m in msgs])
                self.commit_pending(commit_fn, retry_later=True)
            self.commit_before_leaving(commit_fn)
        finally:
            c.close()
            self.set_assigned(())

    # -- aiokafka: the rebalance runs in a background task, so the listener waits on a lock that
    #    the process-and-commit step holds
    def run_aiokafka(self) -> None:
        asyncio.run(self._aio_main())

    async def _aio_main(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
        lock = asyncio.Lock()
        c = AIOKafkaConsumer(bootstrap_servers=self.bs, group_id=self.group, client_id=self.name,
                             auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=200,
                             session_timeout_ms=6000, max_poll_interval_ms=20_000, fetch_max_wait_ms=100)
        member = self
        await c.start()

        async def commit_async(todo):
            await c.commit({TopicPartition(self.topic, p): o for p, o in todo.items()})
            self.ledger.committed(self.name, todo)
            for p in todo:
                self.pending.pop(p, None)

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                async with lock:
                    parts = {tp.partition for tp in revoked}
                    todo = {p: o for p, o in member.pending.items() if p in parts}
                    if todo:
                        await commit_async(todo)
                    member.set_assigned(())

            async def on_partitions_assigned(self, assigned):
                member.set_assigned(tp.partition for tp in assigned)

        c.subscribe([self.topic], listener=Listener())
        try:
            while not self.stop_event.is_set():
                # getmany() returns nothing while a reassignment is in progress, and nothing
                # yields between its return and taking the lock: the listener cannot revoke a
                # partition between a batch being handed out and it being processed and committed
                batch = await c.getmany(timeout_ms=100, max_records=10)
                async with lock:
                    recs = [Rec(m.partition, m.offset, m.key, m.value, (), m.timestamp)
                            for ms in batch.values() for m in ms]
                    for r in recs:
                        await asyncio.sleep(0.002)
                        self.ledger.process(self.name, r)
                        self.pending[r.partition] = r.offset + 1
                    if self.pending:
                        try:
                            await commit_async(dict(self.pending))
                        except Exception as exc:
                            if not _is_rebalance_in_progress(exc):
                                raise
                            with self.ledger.lock:
                                self.ledger.commit_retries += 1
            async with lock:
                if self.pending:
                    await commit_async(dict(self.pending))
        finally:
            await c.stop()
            self.set_assigned(())


MIXED_GROUP = {"m1": "kafka-python", "m2": "confluent-kafka", "m3": "aiokafka", "m4": "kafka-python"}


@pytest.mark.parametrize("kind", CLIENTS + ["confluent-kafka-cooperative", "mixed"])
def test_group_rebalance_leave_and_join_exactly_once(kind, kafka_broker):
    """kind "confluent-kafka-cooperative": librdkafka's incremental (cooperative-sticky) rebalancing
    over the same classic group protocol; "mixed": one group of kafka-python, confluent-kafka and
    aiokafka members (they agree on the roundrobin assignor)."""
    bs = kafka_broker.bootstrap
    adapter = ADAPTERS["confluent-kafka" if kind == "mixed" else kind.replace("-cooperative", "")](bs)

    def member_kind(name):
        return MIXED_GROUP[name] if kind == "mixed" else kind
    topic, group = unique(f"rebal-{kind}"), unique(f"g-rebal-{kind}")
    parts, chunk = 6, 120
    assert adapter.create_topic(topic, parts) == 0
    ledger = GroupLedger()
    members = {f"m{i}": _Member(member_kind(f"m{i}"), bs, topic, group, f"m{i}", ledger) for i in (1, 2, 3)}
    producer = adapter

    def produce_chunk(k: int) -> None:
        producer.produce(topic, [{"key": f"key-{i}".encode(), "value": f"{i}".encode()}
                                 for i in range(k * chunk, (k + 1) * chunk)])

    def assignment_union(names) -> set:
        with ledger.lock:
            return set().union(*(ledger.assigned.get(n, set()) for n in names))

    def no_errors():
        assert not ledger.errors, "\n".join(ledger.errors)
        return True

    try:
        for m in members.values():
            m.start()
        wait_until(lambda: no_errors() and all(ledger.assigned.get(n) for n in members)
                   and assignment_union(members) == set(range(parts)), 30, what="3 members sharing 6 partitions")
        produce_chunk(0)
        # mid-stream: m3 has processed some of its share when it leaves
        wait_until(lambda: no_errors() and ledger.by_member["m3"] > 0 and ledger.total() >= chunk // 2, 30,
                   what="the first messages processed")
        members["m3"].stop_event.set()
        members["m3"].join(OP_TIMEOUT)
        assert not members["m3"].is_alive()
        left_at = ledger.total()
        wait_until(lambda: no_errors() and assignment_union(["m1", "m2"]) == set(range(parts)), 30,
                   what="m1 and m2 taking over m3's partitions")
        produce_chunk(1)
        wait_until(lambda: no_errors() and ledger.total() >= chunk + chunk // 2, 30, what="processing after leave")
        members["m4"] = _Member(member_kind("m4"), bs, topic, group, "m4", ledger)
        members["m4"].start()
        wait_until(lambda: no_errors() and ledger.assigned.get("m4")
                   and assignment_union(["m1", "m2", "m4"]) == set(range(parts)), 30, what="m4 joining")
        produce_chunk(2)
        hw = end_offsets(bs, topic, parts)
        assert sum(hw.values()) == 3 * chunk

        def all_committed():
            no_errors()
            with ledger.lock:
                last = {p: c[-1][0] for p, c in ledger.commits.items() if c}
            return ledger.total() >= 3 * chunk and last == {p: o for p, o in hw.items() if o > 0}
        wait_until(all_committed, 60, what="every message processed and committed")
    finally:
        for m in members.values():
            m.stop_event.set()
        for m in members.values():
            m.join(OP_TIMEOUT)
    assert not ledger.errors, "\n".join(ledger.errors)
    # every message processed exactly once, by exactly one member
    dups = {pos: who for pos, who in ledger.processed.items() if len(who) > 1}
    assert not dups, f"processed more than once: {dups}"
    assert sorted(ledger.processed) == sorted((p, o) for p, n in hw.items() for o in range(n))
    assert sorted(int(v) for v in ledger.values) == list(range(3 * chunk))
    # each partition's commits only move forward: no range was committed twice
    for p, seq in ledger.commits.items():
        offs = [o for o, _ in seq]
        assert offs == sorted(offs), f"partition {p}: commits went backwards {seq}"
    # the leaver and the joiner both took part; m3's partitions went to m1/m2 when it left
    assert ledger.by_member["m3"] > 0 and ledger.by_member["m4"] > 0, ledger.by_member
    assert left_at < 3 * chunk
    m3_parts = next(set(ps) for who, ps in ledger.history if who == "m3" and ps)
    m3_gone = max(i for i, (who, ps) in enumerate(ledger.history) if who == "m3" and ps)
    taken = set().union(*(set(ps) for who, ps in ledger.history[m3_gone:] if who in ("m1", "m2")))
    assert m3_parts <= taken, ledger.history
    assert adapter.group_offsets(group) == {(topic, p): o for p, o in hw.items() if o > 0}


def test_member_that_stops_heartbeating_is_expired_and_its_partitions_move(kafka_broker):
    """A member that hangs (no LeaveGroup, no heartbeats) is removed after its session timeout (or,
    if it hangs during a rebalance, the rebalance timeout) and a real client (kafka-python) gets its
    partitions back. The member that hangs is a raw protocol client that behaves until told to hang."""
    import struct
    from kafka import KafkaConsumer
    bs = kafka_broker.bootstrap
    topic, group = unique("expire"), unique("g-expire")
    assert KafkaPythonAdapter(bs).create_topic(topic, 4) == 0
    tname = topic.encode()
    subscription = struct.pack(">hih", 0, 1, len(tname)) + tname + struct.pack(">i", -1)  # ConsumerProtocol v0
    k = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                      heartbeat_interval_ms=200, session_timeout_ms=6000, max_poll_interval_ms=5000,
                      fetch_max_wait_ms=100)
    raw: dict = {"stable": False}
    hang = threading.Event()  # set: the raw member stops heartbeating
    done = threading.Event()

    def raw_member():
        try:
            with RawClient(bs, timeout=30) as c:
                body = {"group_id": group, "session_timeout_ms": 2000, "rebalance_timeout_ms": 5000,
                        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                        "protocols": [{"name": n, "metadata": subscription} for n in ("range", "roundrobin")]}
                while not hang.is_set():
                    j = c.request(kp.JOIN_GROUP, 5, body)
                    if j["error_code"] == ec.MEMBER_ID_REQUIRED:
                        body["member_id"] = raw["member"] = j["member_id"]
                        continue
                    assert j["error_code"] == 0 and j["leader"] != j["member_id"], j
                    sync = c.request(kp.SYNC_GROUP, 3, {"group_id": group, "generation_id": j["generation_id"],
                                                        "member_id": j["member_id"], "group_instance_id": None,
                                                        "assignments": []})
                    if sync["error_code"] == ec.REBALANCE_IN_PROGRESS:
                        continue
                    assert sync["error_code"] == 0, sync
                    while not hang.wait(0.2):  # a live member: heartbeats, rejoins when asked
                        hb = c.request(kp.HEARTBEAT, 3, {"group_id": group, "generation_id": j["generation_id"],
                                                         "member_id": j["member_id"], "group_instance_id": None})
                        if hb["error_code"] == ec.REBALANCE_IN_PROGRESS:
                            raw["stable"] = False
                            break
                        assert hb["error_code"] == 0, hb
                        raw["stable"] = True
                done.wait(30)  # hung: connection open, no heartbeat, no LeaveGroup
        except BaseException as exc:
            raw["error"] = repr(exc)

    def k_parts():
        k.poll(timeout_ms=100)
        assert "error" not in raw, raw
        return {tp.partition for tp in k.assignment()}

    t = threading.Thread(target=raw_member, daemon=True)
    try:
        wait_until(lambda: k_parts() == {0, 1, 2, 3}, 20, what="kafka-python owning all 4 partitions")
        t.start()
        wait_until(lambda: len(k_parts()) == 2 and raw["stable"], 20,
                   what="the partitions shared with a second, live member")
        hang.set()
        wait_until(lambda: k_parts() == {0, 1, 2, 3}, 20, what="the hung member's partitions moving back")
        with RawClient(bs) as c:
            d = c.request(kp.DESCRIBE_GROUPS, 3, {"groups": [group], "include_authorized_operations": False})
        members = [m["member_id"] for m in d["groups"][0]["members"]]
        assert raw["member"] not in members and len(members) == 1
    finally:
        hang.set()
        done.set()
        k.close(autocommit=False)
        t.join(10)


# =============================================================================================
# 3. Idempotent producers

def _produce_raw(c: RawClient, topic: str, partition: int, batch: bytes, version: int = 9) -> dict:
    r = c.request(kp.PRODUCE, version, {"transactional_id": None, "acks": -1, "timeout_ms": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return r["responses"][0]["partition_responses"][0]


def _fetch_raw(c: RawClient, topic: str, partition: int, offset: int = 0) -> tuple[int, list]:
    r = c.request(kp.FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                 "forgotten_topics_data": [], "rack_id": ""})
    p = r["responses"][0]["partitions"][0]
    recs = []
    for b in decode_batches(bytes(p["records"] or b"")):
        recs.extend((b.base_offset + r.offset_delta, r.value) for r in b.records())
    return p["error_code"], recs


def test_idempotent_retry_is_stored_once_and_gap_is_out_of_order(kafka_broker):
    topic = unique("idem-raw")
    assert create_topic_raw(kafka_broker.bootstrap, topic, 2) == 0
    with RawClient(kafka_broker.bootstrap) as c:
        r = c.request(kp.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60_000,
                                               "producer_id": -1, "producer_epoch": -1})
        assert r["error_code"] == 0 and r["producer_id"] >= 0
        pid, epoch = r["producer_id"], r["producer_epoch"]
        now = int(time.time() * 1000)

        def batch(first_seq: int, values: list[bytes], compression=Compression.NONE) -> bytes:
            return encode_batch([(None, v, [], now) for v in values], producer_id=pid, producer_epoch=epoch,
                                base_sequence=first_seq, compression=compression)

        b0 = batch(0, [b"a0", b"a1", b"a2"])
        first = _produce_raw(c, topic, 1, b0)
        assert first["error_code"] == 0 and first["base_offset"] == 0
        b1 = batch(3, [b"b3", b"b4"], Compression.GZIP)
        assert _produce_raw(c, topic, 1, b1)["base_offset"] == 3
        # the retry of either batch (same pid/epoch/sequence) answers its first base offset
        again = _produce_raw(c, topic, 1, b0)
        assert again["error_code"] == 0 and again["base_offset"] == 0
        assert _produce_raw(c, topic, 1, b1) == _produce_raw(c, topic, 1, b1)
        assert _produce_raw(c, topic, 1, b1)["base_offset"] == 3
        # a gap in the sequence
        gap = _produce_raw(c, topic, 1, batch(9, [b"gap"]))
        assert gap["error_code"] == ec.OUT_OF_ORDER_SEQUENCE_NUMBER
        # the partition holds each record once
        err, recs = _fetch_raw(c, topic, 1)
        assert err == 0
        assert recs == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b3"), (4, b"b4")]
        # and the producer continues where it was
        nxt = _produce_raw(c, topic, 1, batch(5, [b"c5"]))
        assert nxt["error_code"] == 0 and nxt["base_offset"] == 5
        # another partition has its own sequence
        assert _produce_raw(c, topic, 0, batch(0, [b"p0"]))["base_offset"] == 0


@pytest.mark.parametrize("journal", [True, False])
def test_idempotent_retry_after_kill_9_is_stored_once(tmp_path, journal):
    """A broker killed after storing an idempotent producer's batches, restarted on its store: the
    client's retry of those batches (same producer id, epoch and sequences) gets the first offsets
    back, as Kafka rebuilds its producer state from its log. kafkaProducerStateJournal: false (memory
    only) stores the retry again: the check can fail."""
    from .kafka_fixtures import start_broker
    cfg = {"kafkaProducerStateJournal": journal}
    broker = start_broker(str(tmp_path / "b"), cfg)
    try:
        topic = unique("idem-kill")
        assert create_topic_raw(broker.bootstrap, topic, 1) == 0
        now = int(time.time() * 1000)
        with RawClient(broker.bootstrap) as c:
            r = c.request(kp.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60_000,
                                                   "producer_id": -1, "producer_epoch": -1})
            pid, epoch = r["producer_id"], r["producer_epoch"]
            batches = [encode_batch([(None, v, [], now) for v in vals], producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, compression=comp)
                       for seq, vals, comp in ((0, [b"a0", b"a1", b"a2"], Compression.NONE),
                                               (3, [b"b3", b"b4"], Compression.GZIP))]
            assert [_produce_raw(c, topic, 0, b)["base_offset"] for b in batches] == [0, 3]
        broker.proc.kill()                                  # SIGKILL: no clean shutdown
        broker.proc.wait(10)
        broker = start_broker(str(tmp_path / "b"), cfg)     # the same store
        with RawClient(broker.bootstrap) as c:
            again = [_produce_raw(c, topic, 0, b) for b in batches]
            err, recs = _fetch_raw(c, topic, 0)
        assert err == 0
        if journal:
            assert [(a["error_code"], a["base_offset"]) for a in again] == [(0, 0), (0, 3)]
            assert recs == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b3"), (4, b"b4")]
        else:
            assert [a["base_offset"] for a in again] == [5, 8] and len(recs) == 10
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text()


def test_producer_state_journal_folds_into_its_snapshot_and_skips_a_torn_line(tmp_path, monkeypatch):
    """kafka_bridge.idempotence's journal: past JOURNAL_COMPACT_BYTES it is folded into the snapshot and
    emptied; a reopened manager answers retries of batches from both with their first offsets, and a
    torn last line (a crash inside write) is skipped."""
    from kafka_bridge import idempotence
    monkeypatch.setattr(idempotence, "JOURNAL_COMPACT_BYTES", 200)
    m = idempotence.ProducerStateManager(first_id=7)
    assert m.open_journal(str(tmp_path)) == 0
    for seq in range(0, 40, 4):                              # 10 batches of 4: past 200 bytes
        m.record(7, 0, "t", 0, seq, 4, seq)
        m.sync()
    assert (tmp_path / idempotence.SNAPSHOT_NAME).exists()
    assert (tmp_path / idempotence.JOURNAL_NAME).stat().st_size < 200
    m.record(7, 0, "t", 1, 0, 2, 100)
    m.sync()
    m.close_journal()
    with open(tmp_path / idempotence.JOURNAL_NAME, "ab") as fh:
        fh.write(b"0badc0de [7,0,\"t\",1,2,")                 # torn
    r = idempotence.ProducerStateManager(first_id=99)
    assert r.open_journal(str(tmp_path)) >= 6
    assert r.check(7, 0, "t", 0, 36, 4) == (ec.NONE, 36)     # the last five batches are remembered
    assert r.check(7, 0, "t", 1, 0, 2) == (ec.NONE, 100)
    assert r.check(7, 0, "t", 0, 40, 1) == (ec.NONE, None)   # the next sequence is new
    assert r.check(7, 0, "t", 0, 44, 1)[0] == ec.OUT_OF_ORDER_SEQUENCE_NUMBER
    r.close_journal()


def test_producer_state_journal_reads_both_line_forms_and_writes_after_a_torn_tail(tmp_path):
    """The journal's lines: the short text form, the JSON form of older journals (and of topics that
    are not plain ASCII) are both replayed; a torn tail is cut off on open, so the lines written after
    it are replayed at the next open instead of being skipped with it."""
    import zlib

    from kafka_bridge import idempotence
    path = tmp_path / idempotence.JOURNAL_NAME
    old = b'[5,0,"t",0,0,3,10]'
    path.write_bytes(b"%08x %s\n" % (zlib.crc32(old), old) + b"0badc0de 5 0 0 3")   # an old line, then a torn one
    m = idempotence.ProducerStateManager(first_id=7)
    assert m.open_journal(str(tmp_path)) == 1
    assert m.check(5, 0, "t", 0, 0, 3) == (ec.NONE, 10)
    m.record(5, 0, "t", 0, 3, 2, 13)
    m.record(5, 0, "t\nx\u00e9", 1, 0, 1, 40)                 # a newline and non-ASCII: the JSON form
    m.sync()
    m.close_journal()
    lines = path.read_bytes().split(b"\n")
    assert lines[1].endswith(b" 5 0 0 3 2 13 t") and lines[2].split(b" ", 1)[1].startswith(b"[") and lines[3] == b""
    r = idempotence.ProducerStateManager(first_id=99)
    assert r.open_journal(str(tmp_path)) == 3
    assert r.check(5, 0, "t", 0, 3, 2) == (ec.NONE, 13)
    assert r.check(5, 0, "t\nx\u00e9", 1, 0, 1) == (ec.NONE, 40)
    assert r.check(5, 0, "t", 0, 5, 1) == (ec.NONE, None)
    r.close_journal()


def test_idempotent_producer_produces_exactly_n(client, kafka_broker):
    topic = unique(f"idem-{client.name}")
    n = 150
    assert client.create_topic(topic, 3) == 0
    positions = client.produce(topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(n)],
                               idempotent=True)
    assert len(set(positions)) == n
    hw = end_offsets(kafka_broker.bootstrap, topic, 3)
    assert sum(hw.values()) == n
    c = client.consumer(unique("g-idem"), "earliest")
    try:
        c.subscribe(topic)
        got = consume_n(c, n)
    finally:
        c.close()
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(n))


# =============================================================================================
# 4 and 6. Kafka keys are found by the store's key query; rocketmq.tags is TAGS

def _inspect(data_dir: str, *args) -> dict:
    out = subprocess.run([sys.executable, "-m", "rmq.cli", "store", "inspect", data_dir, *args, "--json",
                          "--limit", "0"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.timeout(180)
def test_keys_are_indexed_and_reserved_tags_header_is_tags(own_broker):
    bs = own_broker.bootstrap
    topic = unique("orders")
    kp_adapter = KafkaPythonAdapter(bs)
    assert kp_adapter.create_topic(topic, 4) == 0
    # key "order-42" (kafka-python), plus the reserved header rocketmq.tags through every client
    hdrs42 = [("source", b"kafka"), ("blob", b"\x00\xff"), ("tenant", b"acme")]
    (pos42,) = kp_adapter.produce(topic, [{"key": b"order-42", "value": b"the answer", "headers": hdrs42}])
    tagged = {}
    for name in CLIENTS:
        a = ADAPTERS[name](bs)
        (tagged[name],) = a.produce(topic, [{"key": f"tagged-{name}".encode(), "value": name.encode(),
                                             "headers": [("rocketmq.tags", b"TagA"), ("x", b"y")]}])
    c = kp_adapter.consumer(None)
    try:
        c.assign(topic, [pos42[0]])
        c.seek(topic, pos42[0], pos42[1])
        (r42,) = [r for r in consume_n(c, 1, settle=0.1) if r.offset == pos42[1]]
        assert (r42.key, r42.value, r42.headers) == (b"order-42", b"the answer", tuple(hdrs42))
    finally:
        c.close()
    # each client reads its tagged record back with the header rocketmq.tags = TagA
    for name in CLIENTS:
        c = ADAPTERS[name](bs).consumer(None, "earliest")
        try:
            p, o = tagged[name]
            c.assign(topic, [p])
            c.seek(topic, p, o)
            got = [r for r in consume_n(c, 1, settle=0.1) if r.offset == o]
            assert got and got[0].value == name.encode(), (name, got)
            assert dict(got[0].headers) == {"rocketmq.tags": b"TagA", "x": b"y"}, (name, got[0].headers)
        finally:
            c.close()

    # `rmq store inspect` on the live store: ordinary MESSAGE units, QUEUEID = partition, KEYS, TAGS
    def units():
        rep = _inspect(own_broker.data_dir, "--topic", topic, "--key", "order-42")
        chain = [f["chain"] for f in rep["index"]["files"] if f["chain"]]
        if len(rep["commitlog"]["units"]) < 4 or not any(e["match"] for ch in chain for e in ch["entries"]):
            return None  # the index is written by the dispatcher just after the put: look again
        return rep
    rep = wait_until(units, 15, interval=0.2, what="units and index entry visible to inspect")
    by_key = {u["PROPERTIES"].get("KEYS"): u for u in rep["commitlog"]["units"]}
    u42 = by_key["order-42"]
    assert u42["MAGICCODE"] == "MESSAGE" and u42["TOPIC"] == topic
    assert (u42["QUEUEID"], u42["QUEUEOFFSET"]) == pos42
    assert u42["BODY"]["length"] == len(b"the answer")
    # text headers are user properties (also the one after a binary header, kept in KAFKA_HEADERS_B64)
    assert u42["PROPERTIES"]["source"] == "kafka" and u42["PROPERTIES"]["tenant"] == "acme"
    assert "blob" not in u42["PROPERTIES"]
    for name in CLIENTS:
        u = by_key[f"tagged-{name}"]
        assert u["MAGICCODE"] == "MESSAGE" and (u["QUEUEID"], u["QUEUEOFFSET"]) == tagged[name]
        assert u["PROPERTIES"]["TAGS"] == "TagA" and u["PROPERTIES"]["x"] == "y"
        assert "rocketmq.tags" not in u["PROPERTIES"]
    # the consumequeue entry of a tagged record carries the tag's hash code, as RocketMQ's does
    cq = {(q["queueId"], un["queueOffset"]): un for q in rep["consumequeue"]["queues"] for un in q["units"]}
    assert cq[tagged["aiokafka"]]["tagsCode_check"] == "= hash(TAGS)"

    # a Kafka group's committed offset is a consumerOffset.json entry "topic@group", as for RocketMQ groups
    group = unique("g-orders")
    c = kp_adapter.consumer(group)
    try:
        c.commit({(topic, pos42[0]): pos42[1] + 1})
    finally:
        c.close()

    # stop the broker cleanly and ask the store itself (same config) for the key
    assert own_broker.stop() == 0
    with open(os.path.join(own_broker.data_dir, "config", "consumerOffset.json"), encoding="utf-8") as fh:
        table = json.load(fh)["offsetTable"]
    assert table[f"{topic}@{group}"] == {str(pos42[0]): pos42[1] + 1}
    from rmq.config import load_config
    from rmq.store import DefaultMessageStore
    cfg = load_config(own_broker.config_path, {"storePathRootDir": own_broker.data_dir})
    store = DefaultMessageStore(cfg.store).load()
    try:
        found = store.query_message(topic, "order-42")
        assert len(found) == 1
        m = found[0]
        assert (m.topic, m.queue_id, m.queue_offset, m.body) == (topic, pos42[0], pos42[1], b"the answer")
        assert m.properties["KEYS"] == "order-42"
        assert [x.body for x in store.query_message(topic, "tagged-confluent-kafka")] == [b"confluent-kafka"]
        assert store.query_message(topic, "order-43") == []
    finally:
        store.shutdown()
