"""kafka_bridge.spark's Python Kafka data source (`pykafka`) against a real `rmq up`: Spark's Kafka
source options and schema, read on executors of one shared local SparkSession."""
from __future__ import annotations

import os
import sys
import time

import pytest

pyspark = pytest.importorskip("pyspark")

from confluent_kafka import Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.kafka_fixtures import kafka_broker, unique  # noqa: E402,F401

SPARK_KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("rmq-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    from kafka_bridge.spark import register
    register(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def topics(kafka_broker):  # noqa: F811
    """Two topics: `a` with 2 partitions (5 records each, with headers), `b` with 1 (3 records)."""
    a, b = unique("spk-a"), unique("spk-b")
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for f in admin.create_topics([NewTopic(a, 2, 1), NewTopic(b, 1, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    t0 = int(time.time() * 1000)
    for part in (0, 1):
        for i in range(5):
            p.produce(a, key=b"k%d" % i, value=b"a%d-%d" % (part, i), partition=part, timestamp=t0 + i * 1000,
                      headers=[("h", b"%d" % i)])
    for i in range(3):
        p.produce(b, value=b"b%d" % i, partition=0)
    assert p.flush(30) == 0
    return {"a": a, "b": b, "t0": t0, "bootstrap": kafka_broker.bootstrap}


def _read(spark, bs, **opts):
    r = spark.read.format("pykafka").option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_schema_and_every_record_once(spark, topics):
    df = _read(spark, topics["bootstrap"], subscribe=topics["a"])
    assert df.columns == SPARK_KAFKA_COLUMNS
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "binary", "binary", "string", "int", "bigint", "timestamp", "int"]
    rows = sorted((r.partition, r.offset, bytes(r.value), bytes(r.key), r.timestampType) for r in df.collect())
    assert rows == [(p, i, b"a%d-%d" % (p, i), b"k%d" % i, 0) for p in (0, 1) for i in range(5)]
    assert df.rdd.getNumPartitions() == 2          # one Spark partition per Kafka partition


def test_assign_and_json_offsets(spark, topics):
    a = topics["a"]
    df = _read(spark, topics["bootstrap"], assign=f'{{"{a}": [1]}}',
               startingOffsets=f'{{"{a}": {{"1": 2}}}}', endingOffsets=f'{{"{a}": {{"1": 4}}}}')
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(1, 2), (1, 3)]


def test_subscribe_pattern_and_headers(spark, topics):
    pattern = topics["a"].rsplit("-", 3)[0].replace("spk-a", "spk-[ab]") + ".*"
    df = _read(spark, topics["bootstrap"], subscribePattern=pattern, includeHeaders="true")
    got = {r.topic for r in df.collect()}
    assert {topics["a"], topics["b"]} <= got
    assert df.columns == SPARK_KAFKA_COLUMNS + ["headers"]
    hdr = [(r.offset, [(h.key, bytes(h.value)) for h in r.headers]) for r in df.where(df.topic == topics["a"])
           .where(df.partition == 0).collect()]
    assert sorted(hdr) == [(i, [("h", b"%d" % i)]) for i in range(5)]


def test_min_partitions_splits_ranges(spark, topics):
    df = _read(spark, topics["bootstrap"], subscribe=topics["a"], minPartitions="5")
    assert df.rdd.getNumPartitions() == 5
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(p, i) for p in (0, 1) for i in range(5)]


def test_starting_timestamp(spark, topics):
    """The bridge answers ListOffsets by time from the store time (docs/kafka-mapping.md)."""
    t = unique("spk-ts")
    admin = AdminClient({"bootstrap.servers": topics["bootstrap"]})
    admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": topics["bootstrap"]})
    p.produce(t, b"old-0", partition=0)
    p.produce(t, b"old-1", partition=0)
    assert p.flush(30) == 0
    time.sleep(1.2)
    mark = int(time.time() * 1000)
    p.produce(t, b"new-2", partition=0)
    assert p.flush(30) == 0
    df = _read(spark, topics["bootstrap"], subscribe=t, startingTimestamp=str(mark))
    assert [(r.offset, bytes(r.value)) for r in df.collect()] == [(2, b"new-2")]
    empty = _read(spark, topics["bootstrap"], subscribe=t, startingTimestamp=str(mark + 60_000))
    assert empty.count() == 0


def test_fail_on_data_loss(spark, topics):
    b = topics["b"]
    admin = AdminClient({"bootstrap.servers": topics["bootstrap"]})
    for f in admin.delete_records([TopicPartition(b, 0, 1)]).values():
        f.result(30)
    with pytest.raises(Exception, match="before the earliest available offset 1"):
        _read(spark, topics["bootstrap"], subscribe=b, startingOffsets=f'{{"{b}": {{"0": 0}}}}').collect()
    df = _read(spark, topics["bootstrap"], subscribe=b, startingOffsets=f'{{"{b}": {{"0": 0}}}}',
               failOnDataLoss="false")
    assert sorted(r.offset for r in df.collect()) == [1, 2]


@pytest.mark.parametrize("opts, words", [
    ({"subscribe": "x", "nosuch": "1"}, "unknown option(s) nosuch"),
    ({}, "exactly one of the options subscribe, subscribePattern, assign"),
    ({"subscribe": "no-such-topic-xyz"}, "topic(s) no-such-topic-xyz do not exist"),
    ({"subscribe": "{a}", "startingOffsets": "{{bad json"}, "option startingOffsets: expected earliest, latest or JSON"),
    ({"assign": "[1, 2]"}, "option assign: expected JSON"),
])
def test_bad_options_name_the_option(spark, topics, opts, words):
    opts = {k: v.format(a=topics["a"]) for k, v in opts.items()}
    with pytest.raises(Exception, match=words.replace("(", r"\(").replace(")", r"\)")):
        _read(spark, topics["bootstrap"], **opts).collect()


def test_unreachable_bootstrap_is_a_clear_error(spark):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(Exception, match=f"cannot reach kafka.bootstrap.servers=127.0.0.1:{port}"):
        _read(spark, f"127.0.0.1:{port}", subscribe="t").collect()
    assert time.monotonic() - t0 < 120


def test_kafka_format_picks_the_python_source_without_the_jar(spark):
    from kafka_bridge.spark import kafka_format
    said = []
    assert kafka_format(spark, log=said.append) == "pykafka"
    assert "Python data source" in said[0] and "not on the classpath" in said[0]
