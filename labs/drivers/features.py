"""Drivers for the labs that set a RocketMQ feature beside the way a Kafka user does the same thing:
broker-side filtering, key lookup, delay levels, retry and dead letters, broadcasting. Each takes a
running system and the lab's params and returns the measured figures (the verdict rule picks one)."""
from __future__ import annotations

import random
import time
import uuid
import zlib

from ..systems import RunningSystem, tcp_bytes_sent
from .common import DRIVERS, KAFKA, ROCKETMQ, kafka_send, kafka_topic, rmq_send, rmq_topic


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
        rmq_topic(run, topic, queues)
        rmq_send(run, ((topic, body, f"T{i % k}", f"k{i}", None) for i in range(n)))
    else:
        kafka_topic(run, topic, queues)
        kafka_send(run, ((topic, i % queues, None, body, [("tag", f"T{i % k}".encode())]) for i in range(n)))
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
        rmq_topic(run, topic, parts)
        rmq_send(run, ((topic, body, None, f"key-{i}", None) for i in range(n)))
    else:
        kafka_topic(run, topic, parts)
        kafka_send(run, ((topic, zlib.crc32(b"key-%d" % i) % parts, b"key-%d" % i, body, None) for i in range(n)))
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


DRIVERS["filter"] = (run_filter, ROCKETMQ + KAFKA)
DRIVERS["lookup"] = (run_lookup, ROCKETMQ + KAFKA)


# ---- delayed delivery: delay levels in the broker vs a delay topic and a relay ----------------------------

# RocketMQ's default messageDelayLevel: level -> seconds
DELAY_LEVELS = {1: 1, 2: 5, 3: 10, 4: 30, 5: 60}


def _lateness(lates: list[float]) -> dict:
    lates = sorted(lates)
    n = len(lates)
    return {"delivered": n, "latenessMsAvg": sum(lates) / n if n else 0.0,
            "latenessMsP50": lates[n // 2] if n else 0.0, "latenessMsP99": lates[min(n - 1, int(0.99 * n))] if n else 0.0,
            "deliveredEarly": sum(1 for x in lates if x < -5.0)}


def run_delay(run: RunningSystem, w, params: dict, say) -> dict:
    """N messages each to be delivered `delay level` later. RocketMQ: the producer sets the level, the
    broker parks the message in SCHEDULE_TOPIC_XXXX and its schedule service re-puts it when due.
    Kafka has no delayed delivery; the usual workaround (seed 003's consumer method) is a delay topic
    and a relay that holds each record until it is due and then produces it to the real topic."""
    import json
    import threading
    n, level = int(params.get("messages", 100)), int(params.get("delayLevel", 1))
    delay = DELAY_LEVELS[level]
    topic = f"lab-delay-{uuid.uuid4().hex[:6]}"
    lates: list[float] = []
    deadline = time.monotonic() + delay + 60
    if run.spec.system in ROCKETMQ:
        from rmq.client.message import Message
        from rmq.client.producer import Producer
        from rmq.client.pull_consumer import PullConsumer
        rmq_topic(run, topic, 1)
        c = PullConsumer(f"lab-delay-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
        c.start()
        p = Producer(f"lab-delay-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
        p.start()
        try:
            mq = c.fetch_subscribe_message_queues(topic)[0]
            for i in range(n):
                p.send(Message(topic, json.dumps({"due": time.time() + delay}), delay_time_level=level))
            say(f"{n} messages sent with delay level {level} ({delay}s)")
            off = 0
            while len(lates) < n and time.monotonic() < deadline:
                r = c.pull(mq, "*", off, 32)
                now = time.time()
                for m in r.msg_found_list:
                    lates.append((now - json.loads(m.body)["due"]) * 1000)
                if r.next_begin_offset > off:
                    off = r.next_begin_offset
                else:
                    time.sleep(0.01)
        finally:
            p.shutdown()
            c.shutdown()
        parts = {"relayProcesses": 0}
    else:
        from confluent_kafka import Consumer, Producer
        delay_topic = f"{topic}-delay-{delay}s"
        kafka_topic(run, topic, 1)
        kafka_topic(run, delay_topic, 1)
        stop = threading.Event()
        relayed = [0]

        def relay() -> None:            # the component a Kafka user writes and runs
            rc = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"relay-{topic}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": True})
            rp = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 0})
            rc.subscribe([delay_topic])
            try:
                while not stop.is_set():
                    for m in rc.consume(100, 0.05):
                        if m.error() is not None:
                            continue
                        due = json.loads(m.value())["due"]
                        while not stop.is_set() and time.time() < due:
                            time.sleep(min(0.005, max(0.0, due - time.time())))
                        rp.produce(topic, m.value())
                        rp.poll(0)
                        relayed[0] += 1
                    rp.poll(0)
            finally:
                rp.flush(10)
                rc.close()
        th = threading.Thread(target=relay, daemon=True)
        th.start()
        fc = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"final-{topic}",
                       "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
        fc.subscribe([topic])
        p = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 0})
        try:
            for i in range(n):
                p.produce(delay_topic, json.dumps({"due": time.time() + delay}).encode())
            p.flush(30)
            say(f"{n} records sent to {delay_topic}; the relay holds each for {delay}s")
            while len(lates) < n and time.monotonic() < deadline:
                for m in fc.consume(100, 0.05):
                    if m.error() is None:
                        lates.append((time.time() - json.loads(m.value())["due"]) * 1000)
        finally:
            stop.set()
            th.join(15)
            fc.close()
        parts = {"relayProcesses": 1}
    if len(lates) < n:
        raise RuntimeError(f"{len(lates)} of {n} delayed messages arrived within {delay + 60}s")
    return {**_lateness(lates), "delaySeconds": delay, **parts}


DRIVERS["delay"] = (run_delay, ROCKETMQ + KAFKA)


# ---- retries: %RETRY% and %DLQ% in the broker vs retry topics the application keeps ------------------------

def run_retry(run: RunningSystem, w, params: dict, say) -> dict:
    """N messages; processing each fails `failures` times before it succeeds, and `poison` of them never
    succeed. RocketMQ: the listener returns RECONSUME_LATER (raises), the broker re-delivers through
    %RETRY%<group> after the delay level, and after maxReconsumeTimes parks it in %DLQ%<group>. Kafka:
    the application publishes a failed record to <topic>-retry-<k> (consumed again after a delay) and
    finally to <topic>-dlq, creating and consuming those topics itself. The listener gets one message
    at a time (consumeMessageBatchMaxSize 1, RocketMQ's default)."""
    import json
    import threading
    n, failures = int(params.get("messages", 50)), int(params.get("failures", 2))
    poison, delay = int(params.get("poison", 2)), float(params.get("retryDelaySeconds", 1))
    topic = f"lab-retry-{uuid.uuid4().hex[:6]}"
    max_times = failures + 1
    seen: dict[str, int] = {}
    done: set[str] = set()
    dead: set[str] = set()
    lock = threading.Lock()

    def attempt(key: str) -> bool:
        with lock:
            seen[key] = seen.get(key, 0) + 1
            ok = seen[key] > failures and not key.startswith("poison")
            if ok:
                done.add(key)
            return ok
    keys = [f"poison-{i}" for i in range(poison)] + [f"m-{i}" for i in range(n - poison)]
    t0 = time.monotonic()
    deadline = t0 + 60 + 10 * delay * (max_times + 1)
    topics_made = 0
    if run.spec.system in ROCKETMQ:
        from rmq.client.admin import MQAdmin
        from rmq.client.message import Message
        from rmq.client.producer import Producer
        from rmq.client.push_consumer import PushConsumer
        rmq_topic(run, topic, 2)
        group = f"lab-retry-{uuid.uuid4().hex[:6]}"
        c = PushConsumer(group, namesrv=[run.namesrv], consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         max_reconsume_times=max_times)

        from rmq.client.message import ConsumeStatus

        def listener(msgs, ctx):
            ok = all([attempt(m.keys) for m in msgs])
            return ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        c.start()
        p = Producer(f"lab-retry-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
        p.start()
        try:
            for k in keys:
                p.send(Message(topic, json.dumps({"k": k}), keys=k))
            say(f"{n} messages sent; each fails {failures} time(s), {poison} never succeed")
            with MQAdmin(namesrv=[run.namesrv]) as admin:
                while time.monotonic() < deadline:
                    try:
                        dlq = sum(q.max_offset - q.min_offset for q in admin.topic_status(f"%DLQ%{group}"))
                    except Exception:
                        dlq = 0
                    if len(done) >= n - poison and dlq >= poison:
                        dead = set(keys[:poison])
                        break
                    time.sleep(0.2)
        finally:
            p.shutdown()
            c.shutdown()
    else:
        from confluent_kafka import Consumer, Producer
        stages = [topic] + [f"{topic}-retry-{k}" for k in range(1, max_times + 1)] + [f"{topic}-dlq"]
        for t in stages:
            kafka_topic(run, t, 2 if t == topic else 1)
        topics_made = len(stages) - 1
        p = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 0})
        for k in keys:
            p.produce(topic, json.dumps({"k": k, "due": 0}).encode(), key=k.encode())
        p.flush(30)
        say(f"{n} records sent; failures go through {max_times} retry topics, then {stages[-1]}")
        c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"lab-retry-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
        c.subscribe(stages[:-1])
        pending: list = []              # (due, stage index, value): records waiting out their retry delay
        try:
            while time.monotonic() < deadline and (len(done) < n - poison or len(dead) < poison):
                for m in c.consume(100, 0.02):
                    if m.error() is None:
                        pending.append((json.loads(m.value())["due"], stages.index(m.topic()), m.value()))
                now = time.time()
                ready = [x for x in pending if x[0] <= now]
                pending = [x for x in pending if x[0] > now]
                for _, stage, value in ready:
                    k = json.loads(value)["k"]
                    if attempt(k):
                        continue
                    nxt = stage + 1
                    if nxt == len(stages) - 1:                # out of retries: the DLQ topic
                        dead.add(k)
                    p.produce(stages[nxt], json.dumps({"k": k, "due": now + delay}).encode(), key=k.encode())
                p.poll(0)
        finally:
            p.flush(10)
            c.close()
    secs = time.monotonic() - t0
    if len(done) < n - poison or len(dead) < poison:
        raise RuntimeError(f"{len(done)} of {n - poison} messages succeeded and {len(dead)} of {poison} reached "
                           f"the dead letters before the deadline")
    return {"completionSeconds": round(secs, 3), "deliveriesPerMessage": sum(seen.values()) / n,
            "topicsTheApplicationCreated": topics_made, "deadLetters": len(dead)}


DRIVERS["retry"] = (run_retry, ROCKETMQ + KAFKA)


# ---- clustering vs broadcasting --------------------------------------------------------------------------

def _broker_offsets(run: RunningSystem, topic: str) -> int:
    """Committed-offset entries the broker keeps for `topic` (config/consumerOffset.json, where this
    broker keeps RocketMQ and Kafka group offsets alike): one per (group, queue)."""
    import json
    import os
    path = os.path.join(run.data_dir or "", "config", "consumerOffset.json")
    try:
        with open(path, encoding="utf-8") as fh:
            table = json.load(fh).get("offsetTable", {})
    except (OSError, ValueError):
        return 0
    return sum(len(q) for key, q in table.items() if key.split("@", 1)[0] == topic)


def run_broadcast(run: RunningSystem, w, params: dict, say) -> dict:
    """N messages that every one of C consumers must see. RocketMQ: one group in BROADCASTING mode;
    each consumer keeps its offsets in a local file and the broker keeps none. Kafka has no broadcast
    mode: each consumer joins a group of its own, and the broker keeps each group's offsets."""
    import tempfile
    import threading
    n, consumers = int(params.get("messages", 200)), int(params.get("consumers", 3))
    queues = w.partitionsPerTopic
    topic = f"lab-bcast-{uuid.uuid4().hex[:6]}"
    got = [set() for _ in range(consumers)]
    lock = threading.Lock()
    t0 = time.monotonic()
    deadline = t0 + 90
    if run.spec.system in ROCKETMQ:
        from rmq.client.message import ConsumeStatus
        from rmq.client.push_consumer import PushConsumer
        rmq_topic(run, topic, queues)
        group = f"lab-bcast-{uuid.uuid4().hex[:6]}"
        tmp = tempfile.mkdtemp(prefix="lab-bcast-")
        cs = []
        for i in range(consumers):
            c = PushConsumer(group, namesrv=[run.namesrv], message_model="BROADCASTING", instance_name=f"c{i}",
                             offset_store_dir=f"{tmp}/c{i}", consume_from_where="CONSUME_FROM_FIRST_OFFSET")

            def listener(msgs, ctx, i=i):
                with lock:
                    got[i].update(m.keys for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS
            c.subscribe(topic, "*")
            c.register_message_listener(listener)
            c.start()
            cs.append(c)
        try:
            rmq_send(run, ((topic, b"b", None, f"m{i}", None) for i in range(n)))
            say(f"{n} messages for {consumers} broadcasting consumers of one group")
            while any(len(g) < n for g in got) and time.monotonic() < deadline:
                time.sleep(0.1)
            secs = time.monotonic() - t0
        finally:
            for c in cs:
                c.shutdown()                       # persists the local offset files
        time.sleep(0.5)
    else:
        from confluent_kafka import Consumer
        kafka_topic(run, topic, queues)
        stop = threading.Event()

        def consume(i: int) -> None:
            c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"{topic}-reader-{i}",
                          "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200})
            c.subscribe([topic])
            try:
                while not stop.is_set():
                    for m in c.consume(100, 0.1):
                        if m.error() is None:
                            with lock:
                                got[i].add(m.key().decode())
            finally:
                c.close()                           # commits the group's offsets
        ths = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(consumers)]
        for th in ths:
            th.start()
        kafka_send(run, ((topic, i % queues, f"m{i}".encode(), b"b", None) for i in range(n)))
        say(f"{n} records for {consumers} consumers, each in a group of its own")
        while any(len(g) < n for g in got) and time.monotonic() < deadline:
            time.sleep(0.1)
        secs = time.monotonic() - t0
        stop.set()
        for th in ths:
            th.join(15)
    if any(len(g) < n for g in got):
        raise RuntimeError(f"consumers saw {[len(g) for g in got]} of {n} messages each")
    # the broker persists its offset table every few seconds: wait for the file to show the final state
    entries, settle = 0, time.monotonic() + 12
    while time.monotonic() < settle:
        entries = _broker_offsets(run, topic)
        if run.spec.system in ROCKETMQ or entries >= consumers * queues:
            break
        time.sleep(0.5)
    return {"deliveries": sum(len(g) for g in got), "deliveriesPerMessage": sum(len(g) for g in got) / n,
            "completionSeconds": round(secs, 3), "brokerOffsetEntries": entries}


DRIVERS["broadcast"] = (run_broadcast, ROCKETMQ + KAFKA)
