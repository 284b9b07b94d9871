"""Lab drivers other than OMB's workload: experiments that need a RocketMQ feature on one side and the
way a Kafka user does the same thing on the other. Each takes a running system and the lab's params
and returns the measured figures (the verdict rule picks one of them)."""
from __future__ import annotations

import random
import time
import uuid
import zlib

from .systems import RunningSystem, tcp_bytes_sent

ROCKETMQ = ("rocketmq",)
KAFKA = ("kafka-bridge", "kafka-log", "tansu", "docker-kafka")


def _rmq_topic(run: RunningSystem, topic: str, queues: int) -> None:
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv=[run.namesrv]) as admin:
        admin.create_topic(topic, broker_addr=run.extra["remoting"], read_queue_nums=queues, write_queue_nums=queues)
        admin.wait_for_route(topic, queues=queues, timeout=30)


def _kafka_topic(run: RunningSystem, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": run.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def _rmq_send(run: RunningSystem, messages) -> None:
    """messages: (topic, body, tags, keys, properties) tuples, sent in batches of 64 per topic."""
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    p = Producer(f"lab-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
    p.start()
    try:
        batch: list = []
        for topic, body, tags, keys, props in messages:
            batch.append(Message(topic, body, tags=tags, keys=keys, properties=props))
            if len(batch) == 64:
                p.send_batch(batch)
                batch = []
        if batch:
            p.send_batch(batch)
    finally:
        p.shutdown()


def _kafka_send(run: RunningSystem, records) -> None:
    """records: (topic, partition, key, value, headers)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 5})
    for topic, part, key, value, headers in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=part, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60):
        raise RuntimeError(f"records not acknowledged by {run.bootstrap}")


# ---- broker-side filtering vs client-side filtering ----------------------------------------------------

def run_filter(run: RunningSystem, w, params: dict, say) -> dict:
    """N messages of `tags` tags in turn; a consumer wants one tag. RocketMQ: the pull request carries
    the tag and the broker sends only matches; Kafka: every record crosses the wire and the client
    drops the others. Wire bytes = what the broker's listener sent on its TCP connections while the
consumer read (the kernel's per-connection bytes_sent, `ss -ti`)."""
    n, k, size = int(params.get("messages", 20000)), int(params.get("tags", 4)), w.messageSize
    queues = w.partitionsPerTopic
    topic = f"lab-filter-{uuid.uuid4().hex[:6]}"
    body = bytes(random.Random(1).getrandbits(8) for _ in range(size))
    want = "T0"
    rocket = run.spec.system in ROCKETMQ
    if rocket:
        _rmq_topic(run, topic, queues)
        _rmq_send(run, ((topic, body, f"T{i % k}", f"k{i}", None) for i in range(n)))
    else:
        _kafka_topic(run, topic, queues)
        _kafka_send(run, ((topic, i % queues, None, body, [("tag", f"T{i % k}".encode())]) for i in range(n)))
    say(f"{n} messages of {size} B with {k} tags sent; reading tag {want}")
    time.sleep(0.5)
    port = int((run.extra["remoting"] if rocket else run.bootstrap).rsplit(":", 1)[1])
    before = tcp_bytes_sent(port)
    after: dict = {}
    t0 = time.monotonic()
    matched = received = 0
    if rocket:
        from rmq.client.pull_consumer import PullConsumer
        c = PullConsumer(f"lab-filter-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
        c.start()
        try:
            for mq in c.fetch_subscribe_message_queues(topic):
                off, end = 0, c.max_offset(mq)
                while off < end:
                    r = c.pull(mq, want, off, 32)
                    received += len(r.msg_found_list)
                    matched += sum(1 for m in r.msg_found_list if m.tags == want)
                    if r.next_begin_offset <= off:
                        break
                    off = r.next_begin_offset
            after = tcp_bytes_sent(port)           # before the consumer's connections close
        finally:
            c.shutdown()
    else:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"lab-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(queues)}
        c.assign([TopicPartition(topic, p, 0) for p in range(queues)])
        seen = {p: 0 for p in range(queues)}
        deadline = time.monotonic() + 120
        try:
            while any(seen[p] < ends[p] for p in seen) and time.monotonic() < deadline:
                for m in c.consume(1000, 0.5):
                    if m.error() is not None:
                        continue
                    received += 1
                    seen[m.partition()] = m.offset() + 1
                    if dict(m.headers() or []).get("tag") == want.encode():
                        matched += 1
            after = tcp_bytes_sent(port)
        finally:
            c.close()
    secs = time.monotonic() - t0
    wire = sum(v - before.get(peer, 0) for peer, v in after.items())
    if matched != n // k + (1 if n % k else 0):
        raise RuntimeError(f"the consumer matched {matched} messages of tag {want}, expected {n // k}")
    return {"messagesMatched": matched, "messagesOverTheWire": received, "wireBytes": wire,
            "wireBytesPerMatch": wire / matched if matched else 0.0, "readSeconds": round(secs, 3),
            "matchedPerSecond": matched / secs if secs else 0.0}


# ---- key lookup: the indexfile vs scanning a partition -------------------------------------------------

def run_lookup(run: RunningSystem, w, params: dict, say) -> dict:
    """N keyed messages, then `lookups` random keys found again. RocketMQ: QUERY_MESSAGE through the
    indexfile (hash slot -> chain of entries -> commitlog); Kafka has no key index: the reader scans
    the partition the key was sent to from its first offset until it meets the key."""
    n, lookups, size = int(params.get("messages", 20000)), int(params.get("lookups", 10)), w.messageSize
    parts = w.partitionsPerTopic
    topic = f"lab-lookup-{uuid.uuid4().hex[:6]}"
    body = b"x" * size
    rocket = run.spec.system in ROCKETMQ
    if rocket:
        _rmq_topic(run, topic, parts)
        _rmq_send(run, ((topic, body, None, f"key-{i}", None) for i in range(n)))
    else:
        _kafka_topic(run, topic, parts)
        _kafka_send(run, ((topic, zlib.crc32(b"key-%d" % i) % parts, b"key-%d" % i, body, None) for i in range(n)))
    say(f"{n} keyed messages sent; looking up {lookups} keys")
    rnd = random.Random(5)
    keys = [f"key-{rnd.randrange(n)}" for _ in range(lookups)]
    times, scanned = [], 0
    if rocket:
        from rmq.client.admin import MQAdmin
        with MQAdmin(namesrv=[run.namesrv]) as admin:
            for key in keys:
                t0 = time.monotonic()
                found = admin.query_msg_by_key(topic, key, max_num=4)
                times.append(time.monotonic() - t0)
                if not found:
                    raise RuntimeError(f"the index did not find {key}")
                scanned += len(found)
    else:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"lab-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        try:
            for key in keys:
                kb = key.encode()
                p = zlib.crc32(kb) % parts
                t0 = time.monotonic()
                c.assign([TopicPartition(topic, p, 0)])
                hit, deadline = False, time.monotonic() + 60
                while not hit and time.monotonic() < deadline:
                    for m in c.consume(1000, 0.02):
                        if m.error() is None:
                            scanned += 1
                            if m.key() == kb:
                                hit = True
                                break
                times.append(time.monotonic() - t0)
                if not hit:
                    raise RuntimeError(f"scanning partition {p} did not find {key}")
        finally:
            c.close()
    times.sort()
    return {"lookups": lookups, "lookupMsAvg": 1000 * sum(times) / len(times),
            "lookupMsP50": 1000 * times[len(times) // 2], "lookupMsMax": 1000 * times[-1],
            "messagesReadPerLookup": scanned / lookups}


DRIVERS = {"filter": (run_filter, ROCKETMQ + KAFKA), "lookup": (run_lookup, ROCKETMQ + KAFKA)}
