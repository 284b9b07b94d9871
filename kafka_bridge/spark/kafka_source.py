"""A Python data source for Kafka-protocol topics, `spark.read.format("pykafka")` (issue 12, item 3).

Spark's own Kafka source (`format("kafka")`) needs the spark-sql-kafka jar from Maven; this one needs
nothing but pyspark and confluent-kafka, and speaks to any Kafka broker, this project's bridge
included. It keeps the option names and the schema of Spark's source, so switching is one word:

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int [, headers array<struct<key: string, value: binary>>]  (includeHeaders)

Options: kafka.bootstrap.servers; one of subscribe, subscribePattern, assign; startingOffsets and
endingOffsets ("earliest", "latest" or per-partition JSON, -2 = earliest, -1 = latest);
startingTimestamp / startingOffsetsByTimestamp; minPartitions; failOnDataLoss; includeHeaders;
kafka.isolation.level; kafka.group.id; other kafka.* options go to the consumer. One Spark
partition per Kafka partition (ranges split further for minPartitions), read on the executors.
"""
from __future__ import annotations

import json
import re
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
               "timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"
EARLIEST, LATEST = -2, -1
KNOWN_OPTIONS = {"kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign", "startingoffsets",
                 "endingoffsets", "startingtimestamp", "startingoffsetsbytimestamp", "minpartitions", "failondataloss", "includeheaders", "maxoffsetspertrigger", "path"}
TIMEOUT_S = 30.0


class KafkaSourceError(ValueError):
    """Bad options or an unreachable broker: the message names the option or the cause."""


class KafkaRange(InputPartition):
    """Offsets [start, end) of one Kafka partition, with the consumer settings to read them. All of
    it lives in InputPartition's `value`, the one field Spark carries to the executors."""

    def __init__(self, topic: str, partition: int, start: int, end: int, conf: dict, headers: bool):
        super().__init__({"topic": topic, "partition": partition, "start": start, "end": end, "conf": conf,
                          "headers": headers})

    def __getattr__(self, name):
        v = self.__dict__.get("value")
        if isinstance(v, dict) and name in v:
            return v[name]
        raise AttributeError(name)


def _opt(options, name: str, default=None):
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return default


def _bool(options, name: str, default: bool) -> bool:
    v = _opt(options, name)
    if v is None:
        return default
    if str(v).lower() not in ("true", "false"):
        raise KafkaSourceError(f"option {name}: expected true or false, got {v!r}")
    return str(v).lower() == "true"


def consumer_conf(options) -> dict:
    bs = _opt(options, "kafka.bootstrap.servers")
    if not bs:
        raise KafkaSourceError("option kafka.bootstrap.servers is required (host:port of a Kafka broker)")
    conf = {"bootstrap.servers": bs, "enable.auto.commit": False, "enable.partition.eof": True,
            "group.id": _opt(options, "kafka.group.id") or "spark-pykafka-reader",
            "socket.timeout.ms": 10000, "session.timeout.ms": 10000}
    for k, v in options.items():
        kl = k.lower()
        if kl.startswith("kafka.") and kl not in ("kafka.bootstrap.servers", "kafka.group.id"):
            conf[k[len("kafka."):]] = v
    return conf


def _metadata(conf: dict):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": conf["bootstrap.servers"], "socket.timeout.ms": 10000})
    try:
        return admin.list_topics(timeout=TIMEOUT_S)
    except Exception as exc:
        raise KafkaSourceError(f"cannot reach kafka.bootstrap.servers={conf['bootstrap.servers']}: {exc}") from None


def topic_partitions(options, conf: dict) -> list[tuple[str, int]]:
    """(topic, partition) pairs named by exactly one of subscribe, subscribePattern, assign."""
    given = [k for k in ("subscribe", "subscribePattern", "assign") if _opt(options, k)]
    if len(given) != 1:
        raise KafkaSourceError("exactly one of the options subscribe, subscribePattern, assign must be set "
                               f"(got {', '.join(given) or 'none'})")
    md = _metadata(conf)
    topics = {n: sorted(t.partitions) for n, t in md.topics.items() if t.error is None}
    how = given[0]
    value = _opt(options, how)
    if how == "assign":
        try:
            spec = json.loads(value)
            pairs = [(str(t), int(p)) for t, ps in spec.items() for p in ps]
        except (ValueError, TypeError, AttributeError):
            raise KafkaSourceError(f"option assign: expected JSON like {{\"topic\": [0, 1]}}, got {value!r}") from None
        for t, p in pairs:
            if p not in topics.get(t, []):
                raise KafkaSourceError(f"option assign: {t}-{p} does not exist")
        return pairs
    if how == "subscribe":
        names = [t.strip() for t in value.split(",") if t.strip()]
        missing = [t for t in names if t not in topics]
        if missing:
            raise KafkaSourceError(f"option subscribe: topic(s) {', '.join(missing)} do not exist")
    else:
        try:
            rx = re.compile(value)
        except re.error as exc:
            raise KafkaSourceError(f"option subscribePattern: {exc}") from None
        names = sorted(t for t in topics if rx.fullmatch(t))
    return [(t, p) for t in names for p in topics[t]]


def _offset_spec(options, name: str, default: str, pairs) -> dict[tuple[str, int], int]:
    value = _opt(options, name, default)
    if value in ("earliest", "latest"):
        if name == "endingOffsets" and value == "earliest":
            raise KafkaSourceError("option endingOffsets: earliest is not allowed (use latest or JSON)")
        return {tp: EARLIEST if value == "earliest" else LATEST for tp in pairs}
    try:
        spec = json.loads(value)
        out = {(str(t), int(p)): int(o) for t, ps in spec.items() for p, o in ps.items()}
    except (ValueError, TypeError, AttributeError):
        raise KafkaSourceError(f"option {name}: expected earliest, latest or JSON like "
                               f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {value!r}") from None
    unknown = sorted(set(out) - set(pairs))
    if unknown:
        raise KafkaSourceError(f"option {name}: {unknown[0][0]}-{unknown[0][1]} is not one of the partitions read")
    fill = EARLIEST if name == "startingOffsets" else LATEST
    return {tp: out.get(tp, fill) for tp in pairs}


def plan(options) -> list[KafkaRange]:
    """Resolve the options into offset ranges: one per Kafka partition (split for minPartitions)."""
    unknown = [k for k in options if k.lower() not in KNOWN_OPTIONS and not k.lower().startswith("kafka.")]
    if unknown:
        raise KafkaSourceError(f"unknown option(s) {', '.join(sorted(unknown))} for format pykafka "
                               f"(it takes Spark's Kafka source options)")
    from confluent_kafka import Consumer, TopicPartition
    conf = consumer_conf(options)
    pairs = topic_partitions(options, conf)
    fail_on_loss = _bool(options, "failOnDataLoss", True)
    headers = _bool(options, "includeHeaders", False)
    start_spec = _offset_spec(options, "startingOffsets", "earliest", pairs)
    end_spec = _offset_spec(options, "endingOffsets", "latest", pairs)
    ts_all = _opt(options, "startingTimestamp")
    ts_by = _opt(options, "startingOffsetsByTimestamp")
    probe = Consumer(dict(conf, **{"group.id": conf["group.id"] + "-planner"}))
    try:
        by_time = {}
        if ts_all is not None or ts_by is not None:
            try:
                wanted = ({tp: int(ts_all) for tp in pairs} if ts_all is not None else
                          {(str(t), int(p)): int(v) for t, ps in json.loads(ts_by).items() for p, v in ps.items()})
            except (ValueError, TypeError, AttributeError):
                raise KafkaSourceError("option startingTimestamp / startingOffsetsByTimestamp: expected epoch "
                                       "milliseconds (or JSON of them per partition)") from None
            found = probe.offsets_for_times([TopicPartition(t, p, ms) for (t, p), ms in wanted.items()],
                                            timeout=TIMEOUT_S)
            by_time = {(tp.topic, tp.partition): tp.offset for tp in found}
        ranges = []
        for t, p in pairs:
            lo, hi = probe.get_watermark_offsets(TopicPartition(t, p), timeout=TIMEOUT_S)
            start = by_time.get((t, p), start_spec[(t, p)])
            start = lo if start == EARLIEST else hi if start in (LATEST,) or start < -2 else start
            if start < lo:
                if fail_on_loss:
                    raise KafkaSourceError(f"{t}-{p}: starting offset {start} is before the earliest available "
                                           f"offset {lo} (records were deleted); set failOnDataLoss=false to "
                                           "start at the earliest")
                start = lo
            end = end_spec[(t, p)]
            end = hi if end == LATEST else end
            if end > hi:
                if fail_on_loss:
                    raise KafkaSourceError(f"{t}-{p}: ending offset {end} is beyond the latest offset {hi}")
                end = hi
            if end > start:
                ranges.append((t, p, start, end))
    finally:
        probe.close()
    want = int(_opt(options, "minPartitions", "0") or 0)
    while want > len(ranges) and any(e - s > 1 for _, _, s, e in ranges):   # split the widest range
        i = max(range(len(ranges)), key=lambda k: ranges[k][3] - ranges[k][2])
        t, p, s, e = ranges[i]
        mid = s + (e - s) // 2
        ranges[i:i + 1] = [(t, p, s, mid), (t, p, mid, e)]
    return [KafkaRange(t, p, s, e, conf, headers) for t, p, s, e in ranges]


def read_range(part):
    """Rows of one range, as Spark's Kafka source gives them (runs on an executor)."""
    import datetime as dt
    from types import SimpleNamespace
    if not isinstance(getattr(part, "value", None), dict):
        return          # Spark reads one empty partition when planning found nothing to read
    r = SimpleNamespace(**part.value)

    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer(dict(r.conf))
    try:
        c.assign([TopicPartition(r.topic, r.partition, r.start)])
        nxt, idle = r.start, 0
        while nxt < r.end:
            msgs = c.consume(min(10_000, r.end - nxt), 1.0)
            if not msgs:
                idle += 1
                if idle > TIMEOUT_S:
                    raise KafkaSourceError(f"{r.topic}-{r.partition}: no records from offset {nxt} "
                                           f"(expected up to {r.end}) within {TIMEOUT_S:.0f}s")
                continue
            idle = 0
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaSourceError(f"{r.topic}-{r.partition}: {err.str()}")
                off = m.offset()
                if off >= r.end:
                    return
                if off < nxt:
                    continue
                nxt = off + 1
                ts_type, ts = m.timestamp()
                row = (m.key(), m.value(), m.topic(), m.partition(), off,
                       dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).replace(tzinfo=None)
                       if ts >= 0 else None, max(ts_type - 1, 0) if ts_type > 0 else 0)
                if r.headers:
                    row = row + ([{"key": k, "value": v} for k, v in (m.headers() or [])],)
                yield row
    finally:
        c.close()


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options):
        self.options = options

    def partitions(self):
        return plan(self.options)

    def read(self, partition):
        yield from read_range(partition)


class PyKafkaDataSource(DataSource):
    """`spark.read.format("pykafka")`: Spark's Kafka source options and schema, in Python."""

    @classmethod
    def name(cls) -> str:
        return "pykafka"

    def schema(self) -> str:
        return BASE_SCHEMA + (", " + HEADERS_FIELD if _bool(self.options, "includeHeaders", False) else "")

    def reader(self, schema):
        return KafkaBatchReader(dict(self.options))
