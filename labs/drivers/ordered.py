"""Per-key order through failures: an orderly listener, a concurrent listener, and a Kafka consumer.

K orders, each with S steps (created, paid, packed, ...), sent in step order; every order's steps
go to one queue (RocketMQ: a MessageQueueSelector by order id; Kafka: the partition by order id).
Processing fails the first attempt of every failEvery-th message. The driver records the order in
which each order's steps were first processed successfully and counts the steps processed before
an earlier step of the same order (orderViolations).

RocketMQ orderly (consumeMode: orderly): the queue is locked on the broker, one thread consumes it,
and a failure suspends the queue (SUSPEND_CURRENT_QUEUE_A_MOMENT, suspendCurrentQueueTimeMillis)
and retries the same message: order kept, the queue blocked meanwhile. RocketMQ concurrently: a
failure goes to %RETRY%<group> and comes back after a delay level, after the later steps. Kafka:
the consumer seeks its partition back to the failed record and retries it after the same pause."""
from __future__ import annotations

import threading
import time
import uuid
import zlib

from ..systems import RunningSystem
from .common import DRIVERS, KAFKA, ROCKETMQ, kafka_send, kafka_topic, rmq_topic


class Ledger:
    def __init__(self, fail_every: int) -> None:
        self.lock = threading.Lock()
        self.fail_every = fail_every
        self.attempts: dict[str, int] = {}
        self.done: list[tuple[str, int]] = []          # (order, step) in the order first processed
        self.done_set: set[tuple[str, int]] = set()

    def process(self, key: str) -> bool:
        """key 'order-i:s'; the first attempt of every fail_every-th message fails."""
        order, step = key.rsplit(":", 1)
        with self.lock:
            n = self.attempts.get(key, 0) + 1
            self.attempts[key] = n
            index = int(order.split("-")[1]) * 1000 + int(step)
            if self.fail_every and index % self.fail_every == 0 and n == 1:
                return False
            if (order, int(step)) not in self.done_set:
                self.done_set.add((order, int(step)))
                self.done.append((order, int(step)))
            return True


def violations(done: list[tuple[str, int]]) -> int:
    """Steps processed while a later step of the same order had already been processed."""
    highest: dict[str, int] = {}
    bad = 0
    for order, step in done:
        if step < highest.get(order, -1):
            bad += 1
        highest[order] = max(highest.get(order, -1), step)
    return bad


def _queue_of(order: str, queues: int) -> int:
    return zlib.crc32(order.encode()) % queues


def run_ordered(run: RunningSystem, w, params: dict, say) -> dict:
    orders, steps = int(params.get("orders", 20)), int(params.get("steps", 5))
    fail_every = int(params.get("failEvery", 7))
    pause_ms = int(params.get("retryPauseMs", 1000))
    queues = w.partitionsPerTopic
    keys = [f"order-{o}:{s}" for s in range(steps) for o in range(orders)]    # step by step, orders interleaved
    ledger = Ledger(fail_every)
    topic = f"lab-order-{uuid.uuid4().hex[:6]}"
    mode = str(run.spec.consumer.get("consumeMode", "orderly")).lower()
    t0 = time.monotonic()
    deadline = t0 + float(params.get("timeoutSeconds", 120))
    if run.spec.system in ROCKETMQ:
        _rocketmq(run, topic, keys, queues, ledger, mode, pause_ms, deadline, say)
    else:
        mode = "seek-back"
        _kafka(run, topic, keys, queues, ledger, pause_ms, deadline, say)
    secs = time.monotonic() - t0
    if len(ledger.done_set) < len(keys):
        raise RuntimeError(f"{len(ledger.done_set)} of {len(keys)} steps processed before the deadline")
    return {"mode": mode, "steps": len(keys), "orderViolations": violations(ledger.done),
            "completionSeconds": round(secs, 3),
            "deliveriesPerMessage": round(sum(ledger.attempts.values()) / len(keys), 3),
            "failedAttempts": sum(ledger.attempts.values()) - len(keys)}


def _rocketmq(run, topic, keys, queues, ledger: Ledger, mode: str, pause_ms: int, deadline: float, say) -> None:
    from rmq.client.consume_orderly import ConsumeOrderlyStatus
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    rmq_topic(run, topic, queues)
    orderly = mode == "orderly"
    c = PushConsumer(f"lab-order-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv],
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET", suspend_current_queue_time_millis=pause_ms)
    if orderly:
        def listener(msgs, ctx):
            for m in msgs:
                if not ledger.process(m.keys):
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS
        c.register_message_listener_orderly(listener)
    else:
        def listener(msgs, ctx):
            ok = all([ledger.process(m.keys) for m in msgs])
            return ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER
        c.register_message_listener(listener)
    c.subscribe(topic, "*")
    p = Producer(f"lab-order-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
    p.start()
    try:
        for k in keys:
            p.send_orderly(Message(topic, b"step", keys=k), lambda mqs, msg, arg: mqs[arg],
                           _queue_of(k.split(":")[0], queues))
        c.start()
        say(f"{len(keys)} steps sent; consuming {'orderly' if orderly else 'concurrently'}")
        while len(ledger.done_set) < len(keys) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        p.shutdown()
        c.shutdown()


def _kafka(run, topic, keys, queues, ledger: Ledger, pause_ms: int, deadline: float, say) -> None:
    from confluent_kafka import Consumer, TopicPartition
    kafka_topic(run, topic, queues)
    kafka_send(run, ((topic, _queue_of(k.split(":")[0], queues), k.encode(), b"step", None) for k in keys))
    say(f"{len(keys)} records sent; on a failure the consumer seeks back and retries after {pause_ms} ms")
    c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.subscribe([topic])
    blocked: dict[int, float] = {}           # partition -> monotonic time its retry is due
    try:
        while len(ledger.done_set) < len(keys) and time.monotonic() < deadline:
            now = time.monotonic()
            for part, due in list(blocked.items()):
                if now >= due:
                    c.resume([TopicPartition(topic, part)])
                    del blocked[part]
            for m in c.consume(100, 0.05):
                if m.error() is not None or m.partition() in blocked:
                    continue
                if ledger.process(m.key().decode()):
                    continue
                # the Kafka way to keep a partition's order through a failure: pause it, rewind to the
                # failed record, and resume after the pause (the records fetched after it are re-read)
                tp = TopicPartition(topic, m.partition(), m.offset())
                c.pause([tp])
                c.seek(tp)
                blocked[m.partition()] = time.monotonic() + pause_ms / 1000
    finally:
        c.close()


DRIVERS["ordered"] = (run_ordered, ROCKETMQ + KAFKA)
