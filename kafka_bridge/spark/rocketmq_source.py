"""A RocketMQ-native Python data source, `format("rocketmq")` (issue 12, item 4).

It reads through the remoting protocol (rmq.client's pull consumer), so tag and SQL92 filters run on
the broker, and it gives Spark's Kafka source columns plus RocketMQ's own:

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int, tags string, keys string, msgId string, bornTimestamp timestamp,
    storeTimestamp timestamp, reconsumeTimes int, properties map<string,string>, brokerName string

`partition` is the queue id and `offset` the consume-queue offset; `key` is the KEYS property as bytes
and `timestamp` the store time (timestampType 1, LogAppendTime). A partition in offsets JSON is
"3" (queue 3 of every broker holding the topic) or "broker-a:3".

A streaming query stores each finished micro-batch's offsets as the consumer group's offsets on the
broker (option consumerGroup), so `rmq admin consumerProgress -g GROUP` shows the Spark job's lag
like any consumer's. The writer sends each row's value with its tags, keys, delayLevel and
properties columns.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import re
import threading
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from .common import (ARROW_BATCH_ROWS, TIMEOUT_S, Backend, BatchReader, SourceError, StreamReader, check_options,
                     opt, opt_bool, opt_int)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int, tags string, keys string, msgId string, bornTimestamp timestamp, "
          "storeTimestamp timestamp, reconsumeTimes int, properties map<string,string>, brokerName string, "
          "retryTopic string, originMsgId string, systemProperties map<string,string>")
KNOWN_OPTIONS = {"namesrv", "topic", "topics", "subscribepattern", "filter", "filtertype", "consumergroup",
                 "startingoffsets", "endingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
                 "endingtimestamp", "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
                 "minpartitions", "maxrecordsperpartition", "maxoffsetspertrigger", "minoffsetspertrigger",
                 "maxtriggerdelay", "failondataloss", "producergroup", "path", "checkpointlocation", "pullbatchsize",
                 "pullsinflight"}
# RocketMQ's system properties (MessageConst.STRING_HASH_SET and the broker's own): kept out of the
# `properties` column, which holds what the producer put there; in `systemProperties` instead, with the
# ones users ask for as columns of their own (tags, keys, msgId, retryTopic, originMsgId).
SYSTEM_PROPERTIES = frozenset((
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "SHARDING_KEY",
    "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "DUP_INFO", "EXTEND_UNIQ_INFO", "INNER_NUM", "INNER_BASE", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT", "BORNHOST", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "STORE_HOST", "PROPERTY_TIMER_OUT_MS", "CRC_CHECK", "BORN_HOST", "__BORNHOST"))
DEFAULT_GROUP = "spark-rocketmq-reader"
PULL_BATCH = 32            # the broker's default maxTransferCountOnMessageInMemory
# offsets one window of a read covers, and what each of its pulls asks for (pullBatchSize): a broker
# cuts a pull to its maxTransferCountOnMessageInMemory (32 by default), so a window takes several
# pulls there, and one where that cap is raised
READ_BATCH = 1024
PULLS_IN_FLIGHT = 8


def _group(options) -> str:
    return opt(options, "consumerGroup") or DEFAULT_GROUP


def _namesrv(options) -> str:
    ns = opt(options, "namesrv")
    if not ns:
        raise SourceError("option namesrv is required (host:port of a RocketMQ NameServer, ';' between several)")
    return ns


def _filter(options) -> tuple[str, str]:
    kind = (opt(options, "filterType") or "TAG").upper()
    if kind not in ("TAG", "SQL92"):
        raise SourceError(f"option filterType: expected TAG or SQL92, got {kind!r}")
    return (opt(options, "filter") or "*"), kind


# One pull consumer per (namesrv, group) and process: Spark reuses its Python workers, and starting a
# client (route lookups, heartbeats) costs more than reading a small range.
_consumers: dict[tuple[str, str], object] = {}
_consumers_lock = threading.Lock()


def pull_consumer(namesrv: str, group: str):
    from rmq.client.pull_consumer import PullConsumer
    with _consumers_lock:
        c = _consumers.get((namesrv, group))
        if c is None:
            c = PullConsumer(group, namesrv=namesrv.split(";"), consumer_pull_timeout=TIMEOUT_S / 3)
            try:
                c.start()
            except Exception as exc:
                raise SourceError(f"cannot start a RocketMQ client for namesrv={namesrv}: {exc}") from None
            _consumers[(namesrv, group)] = c
        return c


class RocketMQBackend(Backend):
    fmt = "rocketmq"

    def __init__(self, options) -> None:
        super().__init__(options)
        check_options(options, KNOWN_OPTIONS, (), self.fmt, "see docs/spark.md for its options")
        self.namesrv, self.group = _namesrv(options), _group(options)
        self.filter = _filter(options)
        self._queues: dict[tuple[str, str], object] = {}

    @property
    def consumer(self):
        return pull_consumer(self.namesrv, self.group)

    def _topics(self) -> list[str]:
        given = [k for k in ("topic", "topics", "subscribePattern") if opt(self.options, k)]
        if len(given) != 1:
            raise SourceError("exactly one of the options topic, topics, subscribePattern must be set "
                              f"(got {', '.join(given) or 'none'})")
        value = opt(self.options, given[0])
        if given[0] != "subscribePattern":
            return [t.strip() for t in value.split(",") if t.strip()]
        try:
            rx = re.compile(value)
        except re.error as exc:
            raise SourceError(f"option subscribePattern: {exc}") from None
        inst = self.consumer.impl.instance
        names = self.consumer._run(inst.api.get_all_topic_list(self.namesrv.split(";")[0]))
        return sorted(t for t in names if rx.fullmatch(t) and not t.startswith(("%RETRY%", "rmq_sys_"))
                      or (rx.fullmatch(t) and t.startswith("%DLQ%")))

    def partitions(self):
        out = []
        for t in self._topics():
            try:
                mqs = self.consumer.fetch_subscribe_message_queues(t)
            except SourceError:
                raise
            except Exception as exc:
                hint = (" (RocketMQ creates %DLQ% topics write-only: make one readable with `rmq admin "
                        "updateTopic -t TOPIC -p 6 -r 1 -w 1 -c CLUSTER`)" if t.startswith("%DLQ%") else "")
                raise SourceError(f"topic {t}: {exc} (namesrv={self.namesrv}){hint}") from None
            for mq in mqs:
                key = f"{mq.brokerName}:{mq.queueId}"
                self._queues[(t, key)] = mq
                out.append((t, key))
        return out

    def match(self, topic, key, parts):
        if ":" in key:
            return [tp for tp in parts if tp == (topic, key)]
        return [tp for tp in parts if tp[0] == topic and tp[1].rsplit(":", 1)[1] == key]

    def _mq(self, tp):
        if tp not in self._queues:
            from rmq.remoting import MessageQueue
            broker, qid = tp[1].rsplit(":", 1)
            self._queues[tp] = MessageQueue(tp[0], broker, int(qid))
        return self._queues[tp]

    def watermarks(self, parts):
        c = self.consumer
        try:
            return {tp: (c.min_offset(self._mq(tp)), c.max_offset(self._mq(tp))) for tp in parts}
        except Exception as exc:
            raise SourceError(f"asking the broker for the offsets of {parts[0][0]}: {exc}") from None

    def offsets_for_times(self, wanted):
        """The first offset whose store time is at or after the time (the broker's answer, moved on past
        earlier messages), or -1 when every message is older."""
        c = self.consumer
        out = {}
        for tp, ms in wanted.items():
            mq = self._mq(tp)
            lo, hi = c.min_offset(mq), c.max_offset(mq)
            at = max(lo, min(c.search_offset(mq, ms), hi))
            while at > lo:                          # the broker may answer the nearest, not the first
                r = c.pull(mq, "*", at - 1, 1)
                if not r.msg_found_list or r.msg_found_list[0].store_timestamp < ms:
                    break
                at -= 1
            while at < hi:
                r = c.pull(mq, "*", at, PULL_BATCH)
                newer = [m.queue_offset for m in r.msg_found_list if m.store_timestamp >= ms]
                if newer:
                    at = newer[0]
                    break
                at = r.next_begin_offset if r.next_begin_offset > at else hi
            out[tp] = at if at < hi else -1
        return out

    def range_value(self, tp, start, end):
        mq = self._mq(tp)
        return {"namesrv": self.namesrv, "group": self.group, "topic": mq.topic, "broker": mq.brokerName,
                "queue": mq.queueId, "start": start, "end": end, "filter": self.filter,
                "batch": opt_int(self.options, "pullBatchSize", READ_BATCH, minimum=1),
                "inflight": opt_int(self.options, "pullsInFlight", PULLS_IN_FLIGHT, minimum=1),
                "failOnDataLoss": opt_bool(self.options, "failOnDataLoss", True)}

    def commit(self, end):
        """Store the micro-batch's end as the group's consumed offsets on the broker."""
        c = self.consumer
        for t, keys in end.items():
            for key, off in keys.items():
                c.update_consume_offset(self._mq((t, key)), int(off))
        c.commit_offsets()


def _ts(ms: int):
    return ms * 1000 if ms and ms > 0 else None


async def _pull_window(consumer, mq, expr, kind, lo: int, hi: int, batch: int, fail_on_loss: bool) -> list:
    """The PULL_MESSAGE answers covering offsets [lo, hi) (a pull returns at most `batch` messages), as
    (body, from, to, minOffset, maxOffset): the units of `body` to keep are those in [from, to)."""
    from rmq.client.message import PullStatus
    got, at = [], lo
    while at < hi:
        r = await consumer.pull_raw(mq, expr, at, min(batch, hi - at), expression_type=kind)
        if r.pull_status is PullStatus.OFFSET_ILLEGAL:
            if fail_on_loss or r.next_begin_offset <= at:
                raise SourceError(f"{mq.topic}-{mq.brokerName}:{mq.queueId}: offset {at} is no longer available "
                                  f"(the queue holds {r.min_offset}..{r.max_offset}); set failOnDataLoss=false "
                                  "to skip")
            at = r.next_begin_offset
            continue
        if r.pull_status is PullStatus.NO_NEW_MSG:
            raise SourceError(f"{mq.topic}-{mq.brokerName}:{mq.queueId}: no messages from offset {at} "
                              f"(expected up to {hi}; the queue ends at {r.max_offset})")
        if r.pull_status is PullStatus.FOUND and r.body:
            got.append((r.body, at, hi, r.min_offset, r.max_offset))
        if r.next_begin_offset <= at:
            raise SourceError(f"{mq.topic}-{mq.brokerName}:{mq.queueId}: the broker did not move past offset {at}")
        at = r.next_begin_offset
    return got


class _Windows:
    """Consecutive windows of one queue's offsets, `inflight` of them being pulled at any time (on the
    client's event loop, also while the executor turns the previous ones into Arrow), taken in
    offset order."""

    def __init__(self, consumer, mq, expr: str, kind: str, start: int, end: int, batch: int, inflight: int,
                 fail_on_loss: bool) -> None:
        self.args = (consumer, mq, expr, kind)
        self.next, self.end, self.batch, self.inflight, self.fail = start, end, batch, inflight, fail_on_loss
        self.tasks: collections.deque = collections.deque()

    def _top_up(self) -> None:
        while len(self.tasks) < self.inflight and self.next < self.end:
            a, b = self.next, min(self.next + self.batch, self.end)
            self.tasks.append(asyncio.ensure_future(_pull_window(*self.args, a, b, self.batch, self.fail)))
            self.next = b

    def done(self) -> bool:
        return not self.tasks and self.next >= self.end

    async def take(self, offsets: int, max_bytes: int) -> list:
        """The pulls of the next windows, about `offsets` offsets or `max_bytes` of bodies."""
        out, covered, size = [], 0, 0
        self._top_up()
        while self.tasks and covered < offsets and size < max_bytes:
            part = await self.tasks.popleft()
            self._top_up()
            out.extend(part)
            covered += self.batch
            size += sum(len(p[0]) for p in part)
        return out

    async def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


def _tag_filter(topic: str, expr: str, kind: str) -> tuple | None:
    """The tags a TAG subscription keeps (the client re-checks what the broker matched by hash code)."""
    from rmq.client.consumer_base import build_subscription_data
    sd = build_subscription_data(topic, expr, kind)
    if sd.tagsSet and not sd.classFilterMode:
        return tuple(t.encode() for t in sd.tagsSet)
    return None


# the most bytes of message bodies turned into one Arrow batch (its binary columns have int32 offsets)
CHUNK_BYTES = 64 << 20


def read_range(r: dict) -> Iterator:
    """Arrow batches of one queue's offsets [start, end), filtered by the broker (runs on an executor).
    Several pulls of consecutive windows are in flight at once; rows come out in offset order. The
    answers are turned into Arrow columns in one C call per batch (rmq._native.spark_pull_columns),
    or through decode_messages when it declines (compressed bodies ...) or is not built."""
    from rmq.remoting import MessageQueue
    consumer = pull_consumer(r["namesrv"], r["group"])
    mq = MessageQueue(r["topic"], r["broker"], r["queue"])
    expr, kind = r["filter"]
    tags = _tag_filter(mq.topic, expr, kind)
    schema = _arrow_schema()
    where = f"{mq.topic}-{mq.brokerName}:{mq.queueId}"
    windows = _Windows(consumer.impl, mq, expr, kind, r["start"], r["end"], r["batch"], r["inflight"],
                       r["failOnDataLoss"])
    try:
        while not windows.done():
            try:
                pulls = consumer._lt.run(windows.take(ARROW_BATCH_ROWS, CHUNK_BYTES), TIMEOUT_S * 4)
            except SourceError:
                raise
            except concurrent.futures.TimeoutError:
                raise SourceError(f"{where}: reading offsets {r['start']}..{r['end']} took longer than "
                                  f"{TIMEOUT_S * 4:.0f}s without {ARROW_BATCH_ROWS} offsets coming") from None
            except Exception as exc:
                raise SourceError(f"{where}: {exc}") from None
            batch = _pulls_to_arrow(pulls, r, schema, tags)
            if batch is not None and batch.num_rows:
                yield batch
    finally:
        if not windows.done():
            try:
                consumer._lt.run(windows.cancel(), 10)
            except Exception:
                pass


def _pulls_to_arrow(pulls: list, r: dict, schema, tags: tuple | None):
    if not pulls:
        return None
    from rmq import native
    cols = native.ext.spark_pull_columns(pulls, SYSTEM_NAMES, tags) if native.ext is not None else None
    if cols is not None:
        return _columns_to_arrow(cols, r, schema)
    from rmq.client.message import decode_messages
    msgs = []
    for body, lo, hi, mn, mx in pulls:
        for m in decode_messages(body, r["broker"], min_offset=mn, max_offset=mx):
            if lo <= m.queue_offset < hi and (tags is None or (m.tags is not None and m.tags.encode() in tags)):
                msgs.append(m)
    return _to_arrow(msgs, r, schema)


SYSTEM_NAMES = tuple(sorted(n.encode() for n in SYSTEM_PROPERTIES))


def _columns_to_arrow(c: tuple, r: dict, schema):
    """The RecordBatch over the buffers spark_pull_columns made (no copy)."""
    import pyarrow as pa
    n = c[0]
    buf = pa.py_buffer

    def fixed(typ, data, valid=None, nulls=0, length=n):
        return pa.Array.from_buffers(typ, length, [buf(valid) if valid is not None else None, buf(data)],
                                     null_count=nulls)

    def var(typ, col, length=n):
        valid, nulls, off, data = col
        return pa.Array.from_buffers(typ, length, [buf(valid) if valid is not None else None, buf(off), buf(data)],
                                     null_count=nulls)

    def mapping(col, typ):
        entries, keys, values = col
        m = len(keys[2]) // 4 - 1              # entries over all rows
        return pa.MapArray.from_arrays(fixed(pa.int32(), entries, length=n + 1), var(pa.string(), keys, m),
                                       var(pa.string(), values, m), type=typ)

    ts = pa.timestamp("us", tz="UTC")
    store = fixed(ts, c[2][2], c[2][0], c[2][1])
    cols = [var(pa.binary(), c[6]), var(pa.binary(), c[5]), pa.repeat(pa.scalar(r["topic"], pa.string()), n),
            pa.repeat(pa.scalar(r["queue"], pa.int32()), n), fixed(pa.int64(), c[1]), store,
            pa.repeat(pa.scalar(1, pa.int32()), n), var(pa.string(), c[8]), var(pa.string(), c[7]),
            var(pa.string(), c[9]), fixed(ts, c[3][2], c[3][0], c[3][1]), store, fixed(pa.int32(), c[4]),
            mapping(c[12], schema.field("properties").type), pa.repeat(pa.scalar(r["broker"], pa.string()), n),
            var(pa.string(), c[10]), var(pa.string(), c[11]),
            mapping(c[13], schema.field("systemProperties").type)]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _arrow_schema():
    import pyarrow as pa
    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                      ("timestampType", pa.int32()), ("tags", pa.string()), ("keys", pa.string()),
                      ("msgId", pa.string()), ("bornTimestamp", pa.timestamp("us", tz="UTC")),
                      ("storeTimestamp", pa.timestamp("us", tz="UTC")), ("reconsumeTimes", pa.int32()),
                      ("properties", pa.map_(pa.string(), pa.string())), ("brokerName", pa.string()),
                      ("retryTopic", pa.string()), ("originMsgId", pa.string()),
                      ("systemProperties", pa.map_(pa.string(), pa.string()))])


def _to_arrow(msgs: list, r: dict, schema):
    import pyarrow as pa
    n = len(msgs)
    keys = [m.keys for m in msgs]
    store = [_ts(m.store_timestamp) for m in msgs]
    cols = [pa.array([k.encode() if k else None for k in keys], pa.binary()),
            pa.array([bytes(m.body) for m in msgs], pa.binary()),
            pa.array([r["topic"]] * n, pa.string()), pa.array([r["queue"]] * n, pa.int32()),
            pa.array([m.queue_offset for m in msgs], pa.int64()), pa.array(store, pa.timestamp("us", tz="UTC")),
            pa.array([1] * n, pa.int32()), pa.array([m.tags for m in msgs], pa.string()),
            pa.array(keys, pa.string()), pa.array([m.msg_id for m in msgs], pa.string()),
            pa.array([_ts(m.born_timestamp) for m in msgs], pa.timestamp("us", tz="UTC")),
            pa.array(store, pa.timestamp("us", tz="UTC")), pa.array([m.reconsume_times for m in msgs], pa.int32()),
            pa.array([[(k, v) for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES] for m in msgs],
                     pa.map_(pa.string(), pa.string())),
            pa.array([r["broker"]] * n, pa.string()),
            pa.array([m.properties.get("RETRY_TOPIC") for m in msgs], pa.string()),
            pa.array([m.properties.get("ORIGIN_MESSAGE_ID") for m in msgs], pa.string()),
            pa.array([[(k, v) for k, v in m.properties.items() if k in SYSTEM_PROPERTIES] for m in msgs],
                     pa.map_(pa.string(), pa.string()))]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# ---- writing ---------------------------------------------------------------------------------------------

class _Sent(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


WRITE_COLUMNS = {"value", "body", "topic", "tags", "keys", "key", "delaylevel", "properties"}


class RocketMQWriter(DataSourceWriter):
    """Sends each row as a message: value (or body), and optionally topic, tags, keys (or key),
    delayLevel (1..18, the broker's delay levels) and properties (a map). Each send waits for the
    broker's answer; a failed send fails the task (at least once, as Spark's Kafka sink)."""

    def __init__(self, options, schema) -> None:
        check_options(options, KNOWN_OPTIONS, (), "rocketmq", "see docs/spark.md for its options")
        self.namesrv = _namesrv(options)
        names = [f.name for f in schema.fields]
        if "value" not in names and "body" not in names:
            raise SourceError(f"format rocketmq writes a column named value (or body); the data has {', '.join(names)}")
        extra = [n for n in names if n.lower() not in WRITE_COLUMNS]
        if extra:
            raise SourceError(f"format rocketmq cannot write column(s) {', '.join(extra)} (it takes "
                              f"{', '.join(sorted(WRITE_COLUMNS))})")
        self.topic = opt(options, "topic")
        if not self.topic and "topic" not in names:
            raise SourceError("format rocketmq needs option topic or a column named topic to know where to write")
        self.group = opt(options, "producerGroup") or "spark-rocketmq-writer"

    def write(self, iterator):
        from rmq.client.message import Message
        from rmq.client.producer import Producer
        p = Producer(self.group, namesrv=self.namesrv.split(";"))
        try:
            p.start()
        except Exception as exc:
            raise SourceError(f"cannot start a RocketMQ producer for namesrv={self.namesrv}: {exc}") from None
        n = 0
        try:
            for row in iterator:
                d = {k.lower(): v for k, v in row.asDict().items()}
                body = d.get("value", d.get("body"))
                if body is None:
                    raise SourceError("a row has a null value (a RocketMQ message needs a body)")
                topic = self.topic or d.get("topic")
                keys = d.get("keys") or d.get("key")
                if isinstance(keys, (bytes, bytearray)):
                    keys = keys.decode()
                level = d.get("delaylevel") or 0
                msg = Message(topic, body if isinstance(body, (bytes, bytearray)) else str(body),
                              tags=d.get("tags"), keys=keys, properties=d.get("properties") or None,
                              delay_time_level=int(level))
                try:
                    p.send(msg)
                except Exception as exc:
                    raise SourceError(f"sending to {topic}: {exc}") from None
                n += 1
        finally:
            p.shutdown()
        return _Sent(n)


class RocketMQStreamWriter(RocketMQWriter, DataSourceStreamWriter):
    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class RocketMQDataSource(DataSource):
    """`format("rocketmq")`: RocketMQ topics read with broker-side filtering, batch and streaming."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema):
        options = dict(self.options)
        return BatchReader(lambda: RocketMQBackend(options), read_range)

    def streamReader(self, schema):
        options = dict(self.options)
        return StreamReader(lambda: RocketMQBackend(options), read_range)

    def writer(self, schema, overwrite):
        return RocketMQWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return RocketMQStreamWriter(dict(self.options), schema)
