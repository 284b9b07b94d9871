"""Queues with a failing record: a Kafka share group, RocketMQ clustering consumption and a classic
Kafka group read the same backlog with more consumers than partitions (issue 28, the share-groups lab).

N records on P partitions are read by C consumers (C > P by default), each one record at a time,
each record taking processMs of simulated work. The first attempt of every failEvery-th record
fails. What each design does with it:

- Kafka share group (KIP-932, confluent-kafka ShareConsumer in explicit mode): the consumer
  RELEASEs the record; it is available again at once, to any member, with its delivery count
  raised, and the partition goes on. Every member is assigned a partition (SimpleAssignor shares
  partitions when members outnumber them), so all C consumers work.
- RocketMQ clustering consumption (PushConsumer, one consume thread): the listener returns
  RECONSUME_LATER, the message goes to %RETRY%<group> and comes back after its delay level (the lab
  sets the levels to 1 s); the queue goes on. A queue has one owner: consumers beyond the queue
  count (the topic's queues plus the retry queue) are idle.
- Classic Kafka group (confluent-kafka Consumer): a partition's progress is one offset, so to keep
  the failed record the consumer pauses the partition, seeks back to it and retries after
  retryPauseMs: every record behind it on that partition waits (head-of-line blocking). Consumers
  beyond the partition count get no partition.

Figures: meanDoneSeconds (mean time from the first delivery to each record's successful
processing), completionSeconds (to the last one), activeConsumers (consumers that processed at least
one record), deliveriesPerRecord.
"""
from __future__ import annotations

import threading
import time
import uuid

from ..systems import RunningSystem
from .common import DRIVERS, kafka_send, kafka_topic, rmq_send, rmq_topic


class Ledger:
    """Who processed what and when; the first attempt of every fail_every-th record fails."""

    def __init__(self, fail_every: int, process_ms: int) -> None:
        self.lock = threading.Lock()
        self.fail_every = fail_every
        self.process_s = process_ms / 1000
        self.attempts: dict[int, int] = {}
        self.done: dict[int, float] = {}
        self.by_consumer: dict[str, int] = {}
        self.t0: float | None = None

    def process(self, consumer: str, record: int) -> bool:
        with self.lock:
            if self.t0 is None:
                self.t0 = time.monotonic()
            n = self.attempts[record] = self.attempts.get(record, 0) + 1
        time.sleep(self.process_s)  # the consumer's work on the record
        if self.fail_every and record % self.fail_every == 0 and n == 1:
            return False
        with self.lock:
            self.done.setdefault(record, time.monotonic())
            self.by_consumer[consumer] = self.by_consumer.get(consumer, 0) + 1
        return True

    def count(self) -> int:
        with self.lock:
            return len(self.done)


def run_share_groups(run: RunningSystem, w, params: dict, say) -> dict:
    n, consumers = int(params.get("records", 120)), int(params.get("consumers", 4))
    fail_every, process_ms = int(params.get("failEvery", 10)), int(params.get("processMs", 20))
    pause_ms = int(params.get("retryPauseMs", 1000))
    parts = w.partitionsPerTopic
    mode = str(run.spec.consumer.get("group", "share" if run.spec.system != "rocketmq" else "clustering"))
    ledger = Ledger(fail_every, process_ms)
    topic = f"lab-share-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + float(params.get("timeoutSeconds", 120))
    stop = threading.Event()
    if run.spec.system == "rocketmq":
        rmq_topic(run, topic, parts)
        rmq_send(run, ((topic, str(i).encode(), None, None, {}) for i in range(n)))
        workers = _rocketmq(run, topic, consumers, ledger)
    else:
        kafka_topic(run, topic, parts)
        kafka_send(run, ((topic, i % parts, None, str(i).encode(), None) for i in range(n)))
        target = _share if mode == "share" else _classic
        workers = [threading.Thread(target=target, args=(run, topic, f"c{i}", ledger, stop, pause_ms),
                                    name=f"lab-{mode}-{i}", daemon=True) for i in range(consumers)]
        for t in workers:
            t.start()
    say(f"{n} records on {parts} partitions, {consumers} consumers ({mode}); first attempt of every "
        f"{fail_every}th record fails")
    try:
        while ledger.count() < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        if run.spec.system == "rocketmq":
            for c in workers:
                c.shutdown()
        else:
            for t in workers:
                t.join(30)
    if ledger.count() < n:
        raise RuntimeError(f"{ledger.count()} of {n} records processed before the deadline")
    t0 = ledger.t0 or 0.0
    times = [t - t0 for t in ledger.done.values()]
    return {"mode": mode, "records": n, "meanDoneSeconds": round(sum(times) / n, 3),
            "completionSeconds": round(max(times), 3), "activeConsumers": len(ledger.by_consumer),
            "deliveriesPerRecord": round(sum(ledger.attempts.values()) / n, 3)}


def _rocketmq(run, topic: str, consumers: int, ledger: Ledger) -> list:
    from rmq.client.instance import ClientConfig
    from rmq.client.message import ConsumeStatus
    from rmq.client.push_consumer import PushConsumer
    group = f"{topic}-g"
    out = []
    for i in range(consumers):
        name = f"c{i}"

        def listener(msgs, ctx=None, name=name):
            ok = all([ledger.process(name, int(m.body)) for m in msgs])
            return ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER
        c = PushConsumer(group, namesrv=[run.namesrv], config=ClientConfig(instance_name=f"{group}-{name}"),
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET", consume_thread_nums=1,
                         consume_message_batch_max_size=1)
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        c.start()
        out.append(c)
    return out


def _share(run, topic: str, name: str, ledger: Ledger, stop: threading.Event, pause_ms: int) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer
    c = ShareConsumer({"bootstrap.servers": run.bootstrap, "group.id": f"{topic}-share",
                       "share.acknowledgement.mode": "explicit", "max.poll.records": 1, "log_level": 3})
    try:
        c.subscribe([topic])
        while not stop.is_set():
            for m in c.poll(0.1):
                if m.error() is not None:
                    continue
                ok = ledger.process(name, int(m.value()))
                c.acknowledge(m, AcknowledgeType.ACCEPT if ok else AcknowledgeType.RELEASE)
    finally:
        c.close()


def _classic(run, topic: str, name: str, ledger: Ledger, stop: threading.Event, pause_ms: int) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"{topic}-classic", "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 50,
                  "max.poll.interval.ms": 60000})
    blocked: dict[int, float] = {}
    try:
        c.subscribe([topic])
        while not stop.is_set():
            now = time.monotonic()
            for part, due in list(blocked.items()):
                if now >= due:
                    c.resume([TopicPartition(topic, part)])
                    del blocked[part]
            m = c.poll(0.05)
            if m is None or m.error() is not None or m.partition() in blocked:
                continue
            if ledger.process(name, int(m.value())):
                continue
            # keep the failed record: pause its partition, rewind to it, retry after the pause
            tp = TopicPartition(topic, m.partition(), m.offset())
            c.pause([tp])
            c.seek(tp)
            blocked[m.partition()] = time.monotonic() + pause_ms / 1000
    finally:
        c.close()


DRIVERS["share-groups"] = (run_share_groups, ("rocketmq", "kafka-bridge"))
