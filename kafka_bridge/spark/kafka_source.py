"""A Python data source for Kafka-protocol topics, `format("pykafka")` (issue 12, item 3).

Spark's own Kafka source (`format("kafka")`) needs the spark-sql-kafka jar from Maven; this one needs
nothing but pyspark and confluent-kafka, and speaks to any Kafka broker, this project's bridge
included. It keeps the option names and the schema of Spark's source, so switching is one word:

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int [, headers array<struct<key: string, value: binary>>]  (includeHeaders)

Batch and streaming reads (common.py plans the offset ranges), one Spark partition per Kafka
partition, read on the executors and returned as Arrow batches; and a writer (batch and streaming)
that takes Spark's Kafka sink columns: value, and optionally key, topic, partition, headers.
"""
from __future__ import annotations

import re
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from .common import (TIMEOUT_S, Backend, BatchReader, SourceError, StreamReader, check_options, opt, opt_bool, opt_int,
                     ARROW_BATCH_ROWS)

KafkaSourceError = SourceError          # the name the first version exported

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
               "timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"
KNOWN_OPTIONS = {"kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign", "startingoffsets",
                 "endingoffsets", "startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
                 "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "minpartitions",
                 "maxrecordsperpartition", "failondataloss", "includeheaders", "maxoffsetspertrigger",
                 "minoffsetspertrigger", "maxtriggerdelay", "groupidprefix", "kafkaconsumer.polltimeoutms",
                 "fetchoffset.numretries", "fetchoffset.retryintervalms", "path", "topic", "checkpointlocation"}
# kafka.* options Spark's Kafka source refuses, and why (its KafkaSourceProvider's messages)
REFUSED_CONSUMER = {
    "auto.offset.reset": "set the source option startingOffsets to earliest or latest instead",
    "key.deserializer": "keys are always read as bytes; use DataFrame operations to deserialize them",
    "value.deserializer": "values are always read as bytes; use DataFrame operations to deserialize them",
    "enable.auto.commit": "the source commits no offsets to Kafka (the checkpoint holds them)",
    "interceptor.classes": "the source reads keys and values as bytes, which interceptors could break",
}
REFUSED_PRODUCER = {
    "key.serializer": "keys are written from the key column as bytes or strings",
    "value.serializer": "values are written from the value column as bytes or strings",
}


def _probe_bootstrap(bs: str, timeout: float = 3.0) -> None:
    """Fail at once, naming the address, when no bootstrap server accepts a connection (librdkafka
    would retry until its timeout)."""
    import socket
    errors = []
    for addr in [a.strip() for a in bs.split(",") if a.strip()]:
        host, _, port = addr.rpartition(":")
        if "://" in host:
            host = host.split("://", 1)[1]
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            errors.append(f"{addr}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
    raise SourceError(f"option kafka.bootstrap.servers={bs}: no broker answers there ({'; '.join(errors)})")


def consumer_conf(options, role: str = "relation") -> dict:
    bs = opt(options, "kafka.bootstrap.servers")
    if not bs:
        raise SourceError("option kafka.bootstrap.servers is required (host:port of a Kafka broker)")
    group = opt(options, "kafka.group.id")
    if not group:
        import uuid
        group = f"{opt(options, 'groupIdPrefix') or 'spark-kafka-' + role}-{uuid.uuid4()}"
    conf = {"bootstrap.servers": bs, "enable.auto.commit": False, "enable.partition.eof": True,
            "group.id": group, "isolation.level": "read_uncommitted",     # the Kafka consumer's default, as in Spark
            "socket.timeout.ms": 10000, "session.timeout.ms": 10000,
            "auto.offset.reset": "earliest" if not opt_bool(options, "failOnDataLoss", True) else "error"}
    for k, v in options.items():
        kl = k.lower()
        if kl.startswith("kafka.") and kl not in ("kafka.bootstrap.servers", "kafka.group.id"):
            name = k[len("kafka."):]
            if name.lower() in REFUSED_CONSUMER and role != "sink":
                raise SourceError(f"option {k} is not supported (as in Spark's Kafka source): "
                                  f"{REFUSED_CONSUMER[name.lower()]}")
            if name.lower() in REFUSED_PRODUCER and role == "sink":
                raise SourceError(f"option {k} is not supported (as in Spark's Kafka sink): "
                                  f"{REFUSED_PRODUCER[name.lower()]}")
            conf[name] = v
    return conf


class KafkaBackend(Backend):
    fmt = "pykafka"

    def __init__(self, options, role: str = "relation") -> None:
        super().__init__(options)
        check_options(options, KNOWN_OPTIONS, ("kafka.",), self.fmt, "it takes Spark's Kafka source options")
        self.conf = consumer_conf(options, role)
        self.poll_timeout_s = (opt_int(options, "kafkaConsumer.pollTimeoutMs", None, minimum=1) or TIMEOUT_S * 1000) / 1000
        self._consumer = None

    def _probe(self):
        if self._consumer is None:
            from confluent_kafka import Consumer
            self._consumer = Consumer(dict(self.conf, **{"group.id": self.conf["group.id"] + "-planner"}))
        return self._consumer

    def _metadata(self):
        from confluent_kafka.admin import AdminClient
        _probe_bootstrap(self.conf["bootstrap.servers"])
        admin = AdminClient({"bootstrap.servers": self.conf["bootstrap.servers"], "socket.timeout.ms": 10000})
        try:
            return admin.list_topics(timeout=TIMEOUT_S)
        except Exception as exc:
            raise SourceError(f"option kafka.bootstrap.servers={self.conf['bootstrap.servers']}: the broker did not "
                              f"answer a Metadata request ({exc})") from None

    def partitions(self):
        options = self.options
        given = [k for k in ("subscribe", "subscribePattern", "assign") if opt(options, k)]
        if len(given) != 1:
            raise SourceError("exactly one of the options subscribe, subscribePattern, assign must be set "
                              f"(got {', '.join(given) or 'none'})")
        md = self._metadata()
        topics = {n: sorted(t.partitions) for n, t in md.topics.items() if t.error is None}
        how, value = given[0], opt(options, given[0])
        if how == "assign":
            import json
            try:
                pairs = [(str(t), str(int(p))) for t, ps in json.loads(value).items() for p in ps]
            except (ValueError, TypeError, AttributeError):
                raise SourceError(f"option assign: expected JSON like {{\"topic\": [0, 1]}}, got {value!r}") from None
            for t, p in pairs:
                if int(p) not in topics.get(t, []):
                    raise SourceError(f"option assign: {t}-{p} does not exist")
            return pairs
        if how == "subscribe":
            names = [t.strip() for t in value.split(",") if t.strip()]
            missing = [t for t in names if t not in topics]
            if missing:
                raise SourceError(f"option subscribe: topic(s) {', '.join(missing)} do not exist")
        else:
            try:
                rx = re.compile(value)
            except re.error as exc:
                raise SourceError(f"option subscribePattern: {exc}") from None
            names = sorted(t for t in topics if rx.fullmatch(t))
        return [(t, str(p)) for t in names for p in topics[t]]

    def watermarks(self, parts):
        from confluent_kafka import KafkaException, TopicPartition
        c = self._probe()
        try:
            return {(t, k): c.get_watermark_offsets(TopicPartition(t, int(k)), timeout=TIMEOUT_S) for t, k in parts}
        except KafkaException as exc:
            raise SourceError(f"asking {self.conf['bootstrap.servers']} for the offsets of {parts[0][0]}: {exc}") from None

    def offsets_for_times(self, wanted):
        from confluent_kafka import TopicPartition
        found = self._probe().offsets_for_times([TopicPartition(t, int(k), ms) for (t, k), ms in wanted.items()],
                                                timeout=TIMEOUT_S)
        return {(tp.topic, str(tp.partition)): tp.offset for tp in found}

    def range_value(self, tp, start, end):
        return {"topic": tp[0], "partition": int(tp[1]), "start": start, "end": end, "conf": self.conf,
                "headers": opt_bool(self.options, "includeHeaders", False), "timeout": self.poll_timeout_s}

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def arrow_schema(headers: bool):
    import pyarrow as pa
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if headers:
        fields.append(("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def read_range(r: dict) -> Iterator:
    """Arrow batches of offsets [start, end) of one partition, as Spark's Kafka source gives them
    (runs on an executor).

    Offsets are not dense: transaction markers (control batches) take an offset and yield no record,
    and under read_committed aborted records are skipped. So the range is done when the consumer's
    position reaches `end` (librdkafka moves it past markers and reports the partition's end), not
    when a record at end-1 arrives."""
    import time
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    schema = arrow_schema(r["headers"])
    topic, part, nxt, end = r["topic"], r["partition"], r["start"], r["end"]
    timeout = r.get("timeout", TIMEOUT_S)
    c = Consumer(dict(r["conf"]))
    done = False
    try:
        c.assign([TopicPartition(topic, part, nxt)])
        idle_since = time.monotonic()
        while not done and nxt < end:
            keys, values, offsets, stamps, types, hdrs = [], [], [], [], [], []
            while not done and nxt < end and len(offsets) < ARROW_BATCH_ROWS:
                msgs = c.consume(min(ARROW_BATCH_ROWS - len(offsets), end - nxt), 0.5)
                if not msgs:
                    at = c.position([TopicPartition(topic, part)])[0].offset
                    if at >= end:                 # past markers / aborted records up to the end
                        done = True
                        break
                    if time.monotonic() - idle_since > timeout:
                        raise SourceError(f"{topic}-{part}: no records from offset {nxt} (expected up to {end}) "
                                          f"within {timeout:.0f}s")
                    if offsets:
                        break
                    continue
                idle_since = time.monotonic()
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if m.offset() >= end:
                                done = True
                            continue
                        if err.code() == KafkaError._AUTO_OFFSET_RESET:
                            raise SourceError(f"{topic}-{part}: offset {nxt} is no longer available (records were "
                                              "deleted); set failOnDataLoss=false to skip them")
                        raise SourceError(f"{topic}-{part}: {err.str()}")
                    off = m.offset()
                    if off >= end:
                        done = True
                        break
                    if off < nxt:
                        continue
                    nxt = off + 1
                    ts_type, ts = m.timestamp()
                    keys.append(m.key())
                    values.append(m.value())
                    offsets.append(off)
                    stamps.append(ts * 1000 if ts >= 0 else None)
                    types.append(ts_type - 1 if ts_type > 0 else 0)
                    if r["headers"]:
                        hdrs.append([{"key": k, "value": v} for k, v in (m.headers() or [])])
            if not offsets:
                continue
            n = len(offsets)
            cols = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                    pa.array([topic] * n, pa.string()), pa.array([part] * n, pa.int32()),
                    pa.array(offsets, pa.int64()), pa.array(stamps, pa.timestamp("us", tz="UTC")), pa.array(types, pa.int32())]
            if r["headers"]:
                cols.append(pa.array(hdrs, schema.field("headers").type))
            yield pa.RecordBatch.from_arrays(cols, schema=schema)
    finally:
        c.close()


# ---- writing ---------------------------------------------------------------------------------------------

class _Written(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


def _bytes(v):
    if v is None or isinstance(v, (bytes, bytearray)):
        return v
    return str(v).encode()


class KafkaWriter(DataSourceWriter):
    """Spark's Kafka sink, in Python: each row's value (and key, headers, partition) goes to the row's
    topic or to option topic. At least once, as Spark's own sink: a retried task writes again."""

    def __init__(self, options, schema) -> None:
        check_options(options, KNOWN_OPTIONS, ("kafka.",), "pykafka", "it takes Spark's Kafka sink options")
        names = [f.name for f in schema.fields]
        if "value" not in names:
            raise SourceError("format pykafka writes a column named value (and optionally key, topic, partition, "
                              f"headers); the data has {', '.join(names)}")
        self.topic = opt(options, "topic")
        if not self.topic and "topic" not in names:
            raise SourceError("format pykafka needs option topic or a column named topic to know where to write")
        conf = consumer_conf(options, "sink")
        self.conf = {k: v for k, v in conf.items() if k not in ("enable.auto.commit", "enable.partition.eof",
                                                                 "group.id", "session.timeout.ms", "isolation.level",
                                                                 "auto.offset.reset")}
        _probe_bootstrap(self.conf["bootstrap.servers"])
        self.conf.setdefault("linger.ms", 5)

    def write(self, iterator):
        from confluent_kafka import Producer
        p = Producer(self.conf)
        failed: list[str] = []
        n = 0

        def done(err, _msg):
            if err is not None:
                failed.append(err.str())
        for row in iterator:
            d = row.asDict()
            topic = self.topic or d.get("topic")
            if not topic:
                raise SourceError("a row has no topic (column topic is null and option topic is not set)")
            kw = {"value": _bytes(d.get("value")), "key": _bytes(d.get("key")), "on_delivery": done}
            if d.get("partition") is not None:
                kw["partition"] = int(d["partition"])
            if d.get("headers"):
                kw["headers"] = [(h["key"], _bytes(h["value"])) for h in d["headers"]]
            while True:
                try:
                    p.produce(topic, **kw)
                    break
                except BufferError:
                    p.poll(0.1)
            n += 1
            if failed:
                break
        left = p.flush(TIMEOUT_S)
        if failed:
            raise SourceError(f"writing to {self.conf['bootstrap.servers']}: {failed[0]}")
        if left:
            raise SourceError(f"writing to {self.conf['bootstrap.servers']}: {left} record(s) not acknowledged "
                              f"within {TIMEOUT_S:.0f}s")
        return _Written(n)


class KafkaStreamWriter(KafkaWriter, DataSourceStreamWriter):
    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class PyKafkaDataSource(DataSource):
    """`format("pykafka")`: Spark's Kafka source and sink options and schema, in Python."""

    @classmethod
    def name(cls) -> str:
        return "pykafka"

    def schema(self) -> str:
        return BASE_SCHEMA + (", " + HEADERS_FIELD if opt_bool(self.options, "includeHeaders", False) else "")

    def reader(self, schema):
        options = dict(self.options)
        return BatchReader(lambda: KafkaBackend(options), read_range)

    def streamReader(self, schema):
        options = dict(self.options)
        return StreamReader(lambda: KafkaBackend(options, "source"), read_range)

    def writer(self, schema, overwrite):
        return KafkaWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return KafkaStreamWriter(dict(self.options), schema)
