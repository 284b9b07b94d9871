"""Compaction on both designs: Kafka's log cleaner over a partition's own segments (kafka-log)
against RocketMQ 5's compacted log built from the shared commitlog (kafka-bridge, the broker's
RocketMQ store; rmq.store.compaction).

The driver creates a topic with cleanup.policy=compact, produces `keys` x `recordsPerKey` records
(each key's value rewritten recordsPerKey times), then keeps producing a tick record a few times a
second (a Kafka log never cleans its active segment, which rolls only when a record arrives after
segment.ms) and reads the topic from the beginning until it holds exactly one record per key. It
reports what compaction cost and what it saved, from the broker's own log lines of each cleaning
pass (GET_BROKER_RUNTIME_INFO's compaction* counters, before and after) and from the topic's files:

  cleanSeconds          from the last produced record to a read that holds one record per key
  cleanerBytesWritten   bytes the cleaning passes wrote (rewritten segments / compacted log)
  cleanerBytesRead      bytes they read; readAmplification = cleanerBytesRead / bytes produced
  cleanerMillis         the passes' own time, summed
  diskBytesAfter        the topic's bytes on disk afterwards: its partition directory (kafka-log);
                        its units still in the commitlog plus its compacted log (kafka-bridge)
"""
from __future__ import annotations

import os
import struct
import time
import uuid

from ..systems import RunningSystem, broker_counters
from .common import DRIVERS, kafka_send

_CQ_UNIT = struct.Struct(">qiq")


def _dir_bytes(path: str) -> int:
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(d, n))
            except OSError:
                pass
    return total


def _topic_disk_bytes(run: RunningSystem, topic: str) -> int:
    store = run.data_dir or ""
    if run.spec.system == "kafka-log":
        return _dir_bytes(os.path.join(store, "kafka-logs", f"{topic}-0"))
    units = 0
    cq_dir = os.path.join(store, "consumequeue", topic, "0")
    for name in sorted(os.listdir(cq_dir)) if os.path.isdir(cq_dir) else []:
        with open(os.path.join(cq_dir, name), "rb") as fh:
            raw = fh.read()
        for phy, size, _ in _CQ_UNIT.iter_unpack(raw[:len(raw) - len(raw) % 20]):
            if size > 0 and size != 0x7FFFFFFF and not (phy == 0 and size == 0):
                units += size
    return units + _dir_bytes(os.path.join(store, "compaction", topic))


def _read_keys(run: RunningSystem, topic: str, tick: bytes) -> tuple[int, int]:
    """(records of real keys, distinct real keys) a consumer reading from the beginning gets."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"lab-compact-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    n, keys = 0, set()
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:          # _PARTITION_EOF
                    break
                raise RuntimeError(f"reading {topic}: {m.error()}")
            if m.key() != tick:
                n += 1
                keys.add(m.key())
    finally:
        c.close()
    return n, len(keys)


def run_compaction(run: RunningSystem, w, params: dict, say) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    keys = int(params.get("keys", 1000))
    per_key = int(params.get("recordsPerKey", 20))
    timeout = float(params.get("timeoutSeconds", 120))
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    configs = {"cleanup.policy": "compact", "segment.ms": str(int(params.get("segmentMs", 200))),
               "min.cleanable.dirty.ratio": str(params.get("dirtyRatio", 0.5))}
    admin = AdminClient({"bootstrap.servers": run.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)
    value = b"v" * w.messageSize
    before = broker_counters(run)
    n = keys * per_key
    kafka_send(run, ((topic, 0, b"key-%06d" % (i % keys), value, None) for i in range(n)))
    produced = n * (w.messageSize + 16)
    done_at = time.monotonic()
    say(f"{n} records over {keys} keys produced to {topic}; waiting for one record per key")
    tick = b"__tick__"
    p = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 0})
    clean_s = None
    seen = (n, keys)
    while time.monotonic() - done_at < timeout:
        p.produce(topic, key=tick, value=b"t", partition=0)
        p.flush(30)
        seen = _read_keys(run, topic, tick)
        if seen[0] == keys:
            clean_s = time.monotonic() - done_at
            break
        time.sleep(0.3)
    if clean_s is None:
        raise RuntimeError(f"{run.name}: {topic} still had {seen[0]} records of {keys} keys after {timeout:.0f}s")
    after = broker_counters(run)
    if "compactionPasses" not in after:
        raise RuntimeError(f"{run.name}: the broker did not report its compaction counters")

    def delta(k):
        return after[k] - before.get(k, 0)
    read = delta("compactionBytesRead")
    return {
        "records": n,
        "cleanSeconds": round(clean_s, 3),
        "cleanerPasses": delta("compactionPasses"),
        "cleanerBytesRead": read,
        "cleanerBytesWritten": delta("compactionBytesWritten"),
        "cleanerMillis": delta("compactionMillis"),
        "readAmplification": round(read / produced, 3),
        "diskBytesAfter": _topic_disk_bytes(run, topic),
    }


DRIVERS["compaction"] = (run_compaction, ("kafka-bridge", "kafka-log"))
