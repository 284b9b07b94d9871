"""The two Python data sources, `pykafka` and `rocketmq`, against one real `rmq up`, through the same
tests for every option they share (tests/spark_fixtures.py puts both behind one face), then what is
each one's own: Kafka headers and timestamps, RocketMQ filters, columns and consumer offsets, and both
writers. One local SparkSession (tests/conftest.py) for all of them."""
from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("pyspark")

from tests.kafka_fixtures import start_broker, unique  # noqa: E402
from tests.spark_fixtures import KafkaSide, RocketSide, offsets_json  # noqa: E402

SPARK_KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
ROCKETMQ_EXTRA = ["tags", "keys", "msgId", "bornTimestamp", "storeTimestamp", "reconsumeTimes", "properties",
                  "brokerName", "retryTopic", "originMsgId", "systemProperties"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("spark-up")), {"enablePropertyFilter": True})
    try:
        yield b
    finally:
        b.stop()
        assert "Traceback" not in b.log_text(), b.log_text()[-4000:]


@pytest.fixture(scope="module", params=["pykafka", "rocketmq"])
def side(request, broker):
    return KafkaSide(broker) if request.param == "pykafka" else RocketSide(broker)


@pytest.fixture(scope="module")
def data(side):
    """Topic `a`: 2 partitions of 5 records each (value a<p>-<i>, key k<i>); topic `b`: 1 partition of 3."""
    tok = unique("spk")
    a, b = side.create(f"{tok}-a", 2), side.create(f"{tok}-b", 1)
    side.produce(a, [(p, b"a%d-%d" % (p, i), b"k%d" % i) for p in (0, 1) for i in range(5)])
    side.produce(b, [(0, b"b%d" % i, None) for i in range(3)])
    return {"a": a, "b": b, "tok": tok}


def read(spark, side, **opts):
    r = spark.read.format(side.fmt)
    for k, v in side.options(**opts).items():
        r = r.option(k, v)
    return r.load()


# ---- the options both sources share ----------------------------------------------------------------------

def test_schema_and_every_record_once(spark, side, data):
    df = read(spark, side, topic=data["a"])
    want_cols = SPARK_KAFKA_COLUMNS + (ROCKETMQ_EXTRA if side.fmt == "rocketmq" else [])
    assert df.columns == want_cols
    assert [f.dataType.simpleString() for f in df.schema.fields][:7] == [
        "binary", "binary", "string", "int", "bigint", "timestamp", "int"]
    rows = sorted((r.partition, r.offset, bytes(r.value), bytes(r.key), r.topic) for r in df.collect())
    assert rows == [(p, i, b"a%d-%d" % (p, i), b"k%d" % i, data["a"]) for p in (0, 1) for i in range(5)]
    assert df.rdd.getNumPartitions() == 2          # one Spark partition per Kafka partition / queue


def test_json_starting_and_ending_offsets(spark, side, data):
    a = data["a"]
    df = read(spark, side, topic=a, startingOffsets=offsets_json(a, {side.pkey(1): 2, side.pkey(0): -2}),
              endingOffsets=offsets_json(a, {side.pkey(1): 4, side.pkey(0): 0}))
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(1, 2), (1, 3)]
    # as in Spark's Kafka source: the JSON names every partition, and a batch cannot start at latest
    with pytest.raises(Exception, match="option endingOffsets: the JSON must name every partition read"):
        read(spark, side, topic=a, endingOffsets=offsets_json(a, {side.pkey(1): 4})).collect()
    with pytest.raises(Exception, match="option startingOffsets: latest is not allowed for a batch query"):
        read(spark, side, topic=a, startingOffsets="latest").collect()


def test_subscribe_pattern(spark, side, data):
    df = read(spark, side, subscribePattern=data["tok"] + "-[ab]-.*")
    got = sorted({(r.topic, r.partition) for r in df.collect()})
    assert got == [(data["a"], 0), (data["a"], 1), (data["b"], 0)]


def test_min_partitions_splits_ranges(spark, side, data):
    df = read(spark, side, topic=data["a"], minPartitions="5")
    assert df.rdd.getNumPartitions() == 5
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(p, i) for p in (0, 1) for i in range(5)]


def test_starting_timestamp(spark, side):
    t = side.create("spk-ts", 1)
    side.produce(t, [(0, b"old-0", None), (0, b"old-1", None)])
    time.sleep(1.2)
    mark = int(time.time() * 1000)
    side.produce(t, [(0, b"new-2", None)])
    df = read(spark, side, topic=t, startingTimestamp=str(mark))
    assert [(r.offset, bytes(r.value)) for r in df.collect()] == [(2, b"new-2")]
    by_partition = read(spark, side, topic=t, startingOffsetsByTimestamp=offsets_json(t, {side.pkey(0): mark}))
    assert [r.offset for r in by_partition.collect()] == [2]
    # a time after the last record: an error, as Spark's default startingOffsetsByTimestampStrategy=error
    with pytest.raises(Exception, match="is at or after timestamp"):
        read(spark, side, topic=t, startingTimestamp=str(mark + 60_000)).count()
    assert read(spark, side, topic=t, startingTimestamp=str(mark + 60_000),
                startingOffsetsByTimestampStrategy="latest").count() == 0
    # endingTimestamp: up to the first record at or after it
    assert [r.offset for r in read(spark, side, topic=t, endingTimestamp=str(mark)).collect()] == [0, 1]


def test_offsets_out_of_range_and_fail_on_data_loss(spark, side, data):
    b = data["b"]
    too_far = offsets_json(b, {side.pkey(0): 9})
    with pytest.raises(Exception, match="ending offset 9 is beyond the latest offset 3"):
        read(spark, side, topic=b, endingOffsets=too_far).collect()
    df = read(spark, side, topic=b, endingOffsets=too_far, failOnDataLoss="false")
    assert sorted(r.offset for r in df.collect()) == [0, 1, 2]


def test_streaming_reads_every_record_once_within_max_offsets_per_trigger(spark, side, tmp_path):
    t = side.create("spk-stream", 2)
    side.produce(t, [(i % 2, b"s%d" % i, None) for i in range(40)])
    name = unique("mem").replace("-", "_")
    r = spark.readStream.format(side.fmt)
    for k, v in side.options(topic=t, startingOffsets="earliest", maxOffsetsPerTrigger="15",
                             consumerGroup=unique("spark-cg")).items():
        if side.fmt == "pykafka" and k == "consumerGroup":
            continue
        r = r.option(k, v)
    q = (r.load().writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 90
        while spark.sql(f"select count(*) from {name}").first()[0] < 40:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the stream did not read 40 records within 90 s"
            time.sleep(0.3)
        side.produce(t, [(0, b"late", None)])
        while spark.sql(f"select count(*) from {name}").first()[0] < 41:
            assert time.monotonic() < deadline, "a record produced while streaming was not read"
            time.sleep(0.3)
    finally:
        q.stop()
    values = sorted(bytes(r.value) for r in spark.sql(f"select value from {name}").collect())
    assert values == sorted([b"s%d" % i for i in range(40)] + [b"late"])
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 15 and sum(sizes) == 41, sizes


@pytest.mark.parametrize("opts, words", [
    ({"topic": "x", "nosuch": "1"}, "unknown option(s) nosuch"),
    ({"topic": "no-such-topic-xyz"}, "no-such-topic-xyz"),
    ({"topic": "{a}", "startingOffsets": "{{bad json"}, "option startingOffsets: expected earliest, latest or JSON"),
    ({"topic": "{a}", "minPartitions": "many"}, "option minPartitions: expected a whole number"),
    ({"topic": "{a}", "failOnDataLoss": "maybe"}, "option failOnDataLoss: expected true or false"),
])
def test_bad_options_name_the_option(spark, side, data, opts, words):
    opts = {k: v.format(a=data["a"]) for k, v in opts.items()}
    with pytest.raises(Exception, match=words.replace("(", r"\(").replace(")", r"\)")):
        read(spark, side, **opts).collect()


def test_unreachable_broker_is_a_clear_error(spark, side):
    # The port stays bound (not listening) for the whole test: a connection to it is refused, and no
    # other process of a busy suite can take it meanwhile. A port closed again could be handed to a
    # listener that accepts and never answers the Kafka protocol (a Spark worker's connect-back socket,
    # another test's server), and the source would then wait out its 30 s Metadata timeout.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        opts = dict(side.options(topic="t"))
        key = "kafka.bootstrap.servers" if side.fmt == "pykafka" else "namesrv"
        opts[key] = f"127.0.0.1:{port}"
        r = spark.read.format(side.fmt)
        for k, v in opts.items():
            r = r.option(k, v)
        t0 = time.monotonic()
        with pytest.raises(Exception, match=f"127.0.0.1:{port}") as err:
            r.load().collect()
        assert time.monotonic() - t0 < 120
    # register() has Spark report the source's sentence alone, not under a Python traceback
    assert "Traceback" not in str(err.value), str(err.value)
    # refused at once, not a Metadata request that went unanswered
    if side.fmt == "pykafka":
        assert "no broker answers there" in str(err.value), str(err.value)


def test_writer_round_trip(spark, side):
    t = side.create("spk-w", 1)
    rows = [(b"k%d" % i, b"w%d" % i) for i in range(20)]
    w = spark.createDataFrame(rows, "key binary, value binary").coalesce(2).write.format(side.fmt).mode("append")
    for k, v in side.write_options(t).items():
        w = w.option(k, v)
    w.save()
    got = sorted((bytes(r.key), bytes(r.value)) for r in read(spark, side, topic=t).collect())
    assert got == sorted(rows)


# ---- Kafka only ----------------------------------------------------------------------------------------

def test_kafka_assign_and_headers(spark, broker):
    from confluent_kafka import Producer
    k = KafkaSide(broker)
    t = k.create("spk-h", 2)
    p = Producer({"bootstrap.servers": k.bootstrap})
    for i in range(3):
        p.produce(t, value=b"h%d" % i, partition=1, headers=[("h", b"%d" % i)], timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    df = read(spark, k, assign=json.dumps({t: [1]}), includeHeaders="true")
    assert df.columns == SPARK_KAFKA_COLUMNS + ["headers"]
    got = sorted((r.offset, [(h.key, bytes(h.value)) for h in r.headers], r.timestamp.year, r.timestampType)
                 for r in df.collect())
    assert got == [(i, [("h", b"%d" % i)], 2023, 0) for i in range(3)]
    with pytest.raises(Exception, match="option assign: expected JSON"):
        read(spark, k, assign="[1, 2]").collect()
    with pytest.raises(Exception, match="exactly one of the options subscribe, subscribePattern, assign"):
        read(spark, k).collect()


def test_kafka_format_picks_the_python_source_without_the_jar(spark):
    """Detection asks Spark's own DataSource lookup (spark.read.format("kafka")), which sees jars added
    with spark.jars / --jars and works in a Spark Connect client; without the jar it says pykafka."""
    from kafka_bridge.spark import kafka_format, official_kafka_available
    assert official_kafka_available(spark) is False
    said = []
    assert kafka_format(spark, log=said.append) == "pykafka"
    assert "Python data source" in said[0] and "not on the classpath" in said[0]


# ---- RocketMQ only -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tagged(broker):
    r = RocketSide(broker)
    t = r.create("spk-tags", 2)
    n = 12
    r.produce(t, [(i % 2, b"m%d" % i, b"key%d" % i) for i in range(n)],
              tags=["TagA" if i % 3 else "TagB" for i in range(n)], properties=[{"n": str(i)} for i in range(n)])
    return r, t


def test_rocketmq_tag_filter_runs_on_the_broker(spark, tagged):
    r, t = tagged
    df = read(spark, r, topic=t, filter="TagB")
    got = sorted((int(bytes(x.value)[1:]), x.tags, x.keys, x.properties["n"]) for x in df.collect())
    assert got == [(i, "TagB", f"key{i}", str(i)) for i in range(0, 12, 3)]
    both = read(spark, r, topic=t, filter="TagA || TagB").count()
    assert both == 12


def test_rocketmq_sql92_filter_and_columns(spark, tagged):
    r, t = tagged
    df = read(spark, r, topic=t, filter="n >= 9 AND TAGS = 'TagA'", filterType="SQL92")
    rows = df.collect()
    assert sorted(int(x.properties["n"]) for x in rows) == [10, 11]
    x = rows[0]
    assert set(x.properties) == {"n"}              # the producer's own; the broker's in systemProperties
    assert "UNIQ_KEY" in x.systemProperties and "TAGS" in x.systemProperties
    assert x.retryTopic is None and x.originMsgId is None
    assert x.brokerName == "broker-a" and x.reconsumeTimes == 0 and x.timestampType == 1
    assert len(x.msgId) == 32 and x.bornTimestamp <= x.storeTimestamp == x.timestamp
    with pytest.raises(Exception, match="option filterType: expected TAG or SQL92"):
        read(spark, r, topic=t, filterType="XPATH").collect()


def test_rocketmq_streaming_commits_the_group_offsets(spark, tagged, tmp_path):
    """A streaming query stores each finished micro-batch's end as the group's offsets on the broker:
    what `rmq admin consumerProgress` shows."""
    r, t = tagged
    group = unique("spark-group")
    name = unique("memr").replace("-", "_")
    rs = spark.readStream.format("rocketmq")
    for k, v in r.options(topic=t, consumerGroup=group, startingOffsets="earliest", maxOffsetsPerTrigger="5").items():
        rs = rs.option(k, v)
    q = (rs.load().writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    from rmq.client.admin import MQAdmin
    try:
        deadline = time.monotonic() + 90
        with MQAdmin(namesrv=[r.namesrv]) as admin:
            while True:
                assert q.exception() is None, q.exception()
                rows, _tps = admin.consumer_progress(group, t)
                consumed = sum(max(x.consumer_offset, 0) for x in rows)
                if consumed == 12:
                    break
                assert time.monotonic() < deadline, f"the group's offsets reached {consumed} of 12"
                time.sleep(0.3)
    finally:
        q.stop()
    assert spark.sql(f"select count(*) from {name}").first()[0] == 12


def test_rocketmq_available_now_commits_the_group_offsets(spark, tagged, tmp_path):
    """A one-shot run (trigger availableNow, as a pipeline's streaming table) leaves the group's offsets
    at the end of what it read, within maxOffsetsPerTrigger batches."""
    r, t = tagged
    group = unique("spark-once")
    rs = spark.readStream.format("rocketmq")
    for k, v in r.options(topic=t, consumerGroup=group, startingOffsets="earliest", maxOffsetsPerTrigger="5").items():
        rs = rs.option(k, v)
    q = (rs.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 12 and max(sizes) <= 5, sizes
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv=[r.namesrv]) as admin:
        rows, _tps = admin.consumer_progress(group, t)
    assert sum(max(x.consumer_offset, 0) for x in rows) == 12


def test_rocketmq_writer_sends_tags_keys_and_delay(spark, broker):
    r = RocketSide(broker)
    t = r.create("spk-rw", 1)
    df = spark.createDataFrame([(b"now", "T1", "k1", None), (b"later", "T2", "k2", 1)],
                               "value binary, tags string, keys string, delayLevel int")
    w = df.coalesce(1).write.format("rocketmq").mode("append")
    for k, v in r.options(topic=t).items():
        w = w.option(k, v)
    w.save()
    deadline = time.monotonic() + 20      # delay level 1 is 1 s
    while True:
        rows = read(spark, r, topic=t).collect()
        if len(rows) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    got = sorted((bytes(x.value), x.tags, x.keys) for x in rows)
    assert got == [(b"later", "T2", "k2"), (b"now", "T1", "k1")]
    waited = {bytes(x.value): (x.storeTimestamp - x.bornTimestamp).total_seconds() for x in rows}
    assert waited[b"later"] >= 0.9 > waited[b"now"]      # level 1 held it 1 s in SCHEDULE_TOPIC_XXXX
    with pytest.raises(Exception, match="cannot write column"):
        spark.createDataFrame([(b"x", 1)], "value binary, color int").write.format("rocketmq") \
            .option("namesrv", r.namesrv).option("topic", t).mode("append").save()


def test_a_corrupt_checkpoint_is_a_clear_error(spark, broker, tmp_path):
    k = KafkaSide(broker)
    t = k.create("spk-ck", 1)
    k.produce(t, [(0, b"c%d" % i, None) for i in range(3)])
    ck = tmp_path / "ck"

    def start():
        return (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", k.bootstrap)
                .option("subscribe", t).option("startingOffsets", "earliest").load()
                .writeStream.format("noop").option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q = start()
    q.awaitTermination(60)
    assert q.exception() is None
    offsets = sorted((ck / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)[-1]
    lines = offsets.read_text().splitlines()
    lines[-1] = json.dumps({t: {"0": "not-a-number"}})                # the source's offset, damaged
    offsets.write_text("\n".join(lines) + "\n")
    k.produce(t, [(0, b"more", None)])
    q = start()
    with pytest.raises(Exception, match="start the query with a new checkpointLocation"):
        q.awaitTermination(60)
