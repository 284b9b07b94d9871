"""Cleanup vs retention: a topic that should keep its messages briefly beside one that should keep
them long, on one store.

Two topics share the broker: `clicks` should keep its messages `retentionSeconds`, `audit` far
longer. Phase 1 writes both, the driver waits past the clicks' retention, phase 2 writes both again
(so phase 1's files are no longer the ones being written), and then the driver watches cleanup run.
It counts what a consumer from the beginning can still read: phase-1 clicks past their retention
(should be gone) and audit messages (should all be there).

Kafka's log keeps a directory of segments per partition and applies retention.ms per topic, deleting
whole segments of that partition. RocketMQ's commitlog interleaves every topic in shared files and
deletes whole files once they are fileReservedTime hours old (at deleteWhen, or under disk
pressure): one retention for the whole store, in hours. Here rocketmq-keep uses RocketMQ's 72 h,
and rocketmq-expire the shortest setting, 0 h, as an operator who needs the clicks gone would."""
from __future__ import annotations

import time
import uuid

from rmq.store.cleanup import dir_disk_bytes

from ..systems import RunningSystem
from .common import DRIVERS, ROCKETMQ, kafka_send, rmq_send, rmq_topic


def _readable_rmq(run: RunningSystem, topic: str) -> int:
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv=[run.namesrv]) as admin:
        return sum(q.max_offset - q.min_offset for q in admin.topic_status(topic))


def _readable_kafka(run: RunningSystem, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"lab-cleanup-{uuid.uuid4().hex[:6]}"})
    try:
        total = 0
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += hi - lo
        return total
    finally:
        c.close()


def run_cleanup(run: RunningSystem, w, params: dict, say) -> dict:
    retention = float(params.get("retentionSeconds", 8))
    per_phase = int(float(params.get("phaseMB", 8)) * (1 << 20) / w.messageSize)
    watch = float(params.get("watchSeconds", 6))
    parts = w.partitionsPerTopic
    tag = uuid.uuid4().hex[:6]
    clicks, audit = f"clicks-{tag}", f"audit-{tag}"
    body = b"c" * w.messageSize
    rocket = run.spec.system in ROCKETMQ
    if rocket:
        rmq_topic(run, clicks, parts)
        rmq_topic(run, audit, parts)

        def readable(t):
            return _readable_rmq(run, t)

        def write(phase):
            rmq_send(run, ((clicks if i % 2 == 0 else audit, body, None, f"{phase}-{i}", None) for i in range(per_phase)))
    else:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": run.bootstrap})
        made = admin.create_topics([NewTopic(clicks, parts, 1, config={"retention.ms": str(int(retention * 1000))}),
                                    NewTopic(audit, parts, 1)])
        for f in made.values():
            f.result(60)

        def readable(t):
            return _readable_kafka(run, t, parts)

        def write(phase):
            kafka_send(run, ((clicks if i % 2 == 0 else audit, (i // 2) % parts, None, body, None)
                             for i in range(per_phase)))
    per_topic = per_phase // 2
    write(1)
    say(f"phase 1: {per_topic} messages to each of {clicks} and {audit}; waiting {retention:.0f}s, the clicks' retention")
    time.sleep(retention + 0.5)
    write(2)
    phase2_at = time.monotonic()
    say(f"phase 2 written; watching cleanup for {watch:.0f}s")
    # the audit topic must keep 2 x per_topic; the clicks should keep only phase 2's per_topic
    history = []
    while True:
        c, a = readable(clicks), readable(audit)
        history.append((round(time.monotonic() - phase2_at, 2), c, a))
        if time.monotonic() - phase2_at >= watch:
            break
        time.sleep(0.5)
    clicks_left, audit_left = history[-1][1], history[-1][2]
    expired_readable = max(0, clicks_left - per_topic)
    audit_lost = max(0, 2 * per_topic - audit_left)
    return {
        "messagesPerTopic": 2 * per_topic,
        "expiredClicksReadable": expired_readable,
        "auditLost": audit_lost,
        "requirementMisses": expired_readable + audit_lost,
        "clicksReadable": clicks_left,
        "auditReadable": audit_left,
        "storeBytes": dir_disk_bytes(run.data_dir or ""),
    }


DRIVERS["cleanup"] = (run_cleanup, ROCKETMQ + ("kafka-log",))
