"""A consumer joins a busy group: RocketMQ's allocation strategies vs Kafka's assignors.

A producer sends one message to every queue every tick. The group starts with consumers-1 members;
once each queue is consumed by exactly one of them, one more consumer starts. From the deliveries
(time, queue, consumer, key) the driver finds what the seeds call the harms of a rebalance
(seed 000, "Rebalance危害"): queues whose consumption paused and for how long, queues that moved to
another consumer, messages consumed twice, and the time until the group is stable again; and the
quality of the final assignment (most minus fewest queues per consumer).

RocketMQ: the broker notifies every member when the group changes; each client computes its own
share with the group's AllocateMessageQueueStrategy and drops or adds queues independently.
Kafka: the group coordinator runs a JoinGroup/SyncGroup round; with an eager assignor (range,
roundrobin) every member revokes all its partitions first; cooperative-sticky revokes only the
partitions that move, in a second round."""
from __future__ import annotations

import threading
import time
import uuid

from ..systems import RunningSystem
from .common import DRIVERS, KAFKA, ROCKETMQ, kafka_topic, rmq_topic

STABLE_WINDOW = 3.0


class Deliveries:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, int, str, str]] = []     # (monotonic time, queue, consumer, key)

    def add(self, queue: int, consumer: str, key: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), queue, consumer, key))

    def owners_since(self, since: float) -> dict[int, set[str]]:
        with self.lock:
            out: dict[int, set[str]] = {}
            for t, q, c, _ in self.events:
                if t >= since:
                    out.setdefault(q, set()).add(c)
            return out


def _stable(d: Deliveries, queues: int, members: int, window: float = STABLE_WINDOW) -> bool:
    """Over the last `window` seconds every queue was consumed, each by one consumer, and the expected
    number of members own queues."""
    owners = d.owners_since(time.monotonic() - window)
    if len(owners) < queues or any(len(c) != 1 for c in owners.values()):
        return False
    return len({next(iter(c)) for c in owners.values()}) == min(members, queues)


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def analyse(events: list[tuple[float, int, str, str]], queues: int, members: list[str], t_join: float,
            tick: float) -> dict:
    """The rebalance's figures from the delivery log (pure: the tests feed it made-up logs)."""
    before: dict[int, str] = {}
    after: dict[int, list[tuple[float, str]]] = {q: [] for q in range(queues)}
    keys: dict[str, int] = {}
    for t, q, c, k in events:
        keys[k] = keys.get(k, 0) + 1
        if t < t_join:
            before[q] = c
        else:
            after[q].append((t, c))
    gap_limit = max(3 * tick, 0.5)
    final: dict[int, str] = {}
    paused, max_pause, stable_at = 0, 0.0, t_join
    for q, evs in after.items():
        if not evs:
            continue
        final[q] = evs[-1][1]
        prev, worst, settle = t_join, 0.0, t_join
        handed_over = before.get(q) != final[q]        # settled only once the new owner consumes it
        for t, c in evs:
            gap = t - prev
            worst = max(worst, gap)
            if c != final[q]:                          # a delivery by a consumer that lost the queue
                settle, handed_over = t, True
            elif gap > gap_limit or handed_over:       # the end of a pause, or the new owner's first
                settle, handed_over = t, False
            prev = t
        if worst > gap_limit:
            paused += 1
        max_pause = max(max_pause, worst)
        stable_at = max(stable_at, settle)
    per_member = [sum(1 for c in final.values() if c == m) for m in members]
    newcomer = [t for t, q, c, _ in events if c == members[-1]]
    return {
        "newMemberFirstDeliverySeconds": round(min(newcomer) - t_join, 3) if newcomer else None,
        "timeToStableSeconds": round(stable_at - t_join, 3),
        "queuesPaused": paused,
        "maxPauseSeconds": round(max_pause, 3),
        "queuesMoved": sum(1 for q, c in final.items() if before.get(q) not in (None, c)),
        "duplicates": sum(n - 1 for n in keys.values() if n > 1),
        "assignmentSpread": (max(per_member) - min(per_member)) if per_member else 0,
        "queuesUnowned": queues - len(final),
    }


def run_rebalance(run: RunningSystem, w, params: dict, say) -> dict:
    members = int(params.get("consumers", 3))
    if members < 2:
        raise ValueError("rebalance: params.consumers must be at least 2 (one joins the others)")
    queues = w.partitionsPerTopic
    tick = float(params.get("tickMs", 100)) / 1000
    window = float(params.get("stableWindowSeconds", STABLE_WINDOW))
    if window < 5 * tick:
        raise ValueError(f"rebalance: params.stableWindowSeconds must cover at least 5 ticks ({5 * tick:g} s)")
    topic = f"lab-rebal-{uuid.uuid4().hex[:6]}"
    d = Deliveries()
    stop = threading.Event()
    settings = dict(run.spec.consumer)
    names = [f"c{i}" for i in range(members)]
    if run.spec.system in ROCKETMQ:
        start_consumer, stop_all, produce = _rocketmq(run, topic, queues, d, settings)
    else:
        start_consumer, stop_all, produce = _kafka(run, topic, queues, d, settings, stop)
    producer = threading.Thread(target=produce, args=(stop, tick), daemon=True)
    producer.start()
    try:
        for name in names[:-1]:
            start_consumer(name)
        if not _wait(lambda: _stable(d, queues, members - 1, window), 60):
            raise RuntimeError(f"the first {members - 1} consumers did not settle within 60 s")
        t_join = time.monotonic()
        start_consumer(names[-1])
        say(f"{names[-1]} joined a group of {members - 1} over {queues} queues")
        time.sleep(window)                  # a window that starts after the join
        settled = _wait(lambda: _stable(d, queues, members, window), float(params.get("observeSeconds", 45)))
        time.sleep(1.0)
    finally:
        stop.set()
        producer.join(10)
        stop_all()
    with d.lock:
        events = list(d.events)
    res = analyse(events, queues, names, t_join, tick)
    res["settled"] = settled
    res["strategy"] = settings.get("allocateStrategy") or settings.get("partition.assignment.strategy") or "default"
    return res


def _rocketmq(run: RunningSystem, topic: str, queues: int, d: Deliveries, settings: dict):
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    from rmq.client.rebalance import strategy_by_name
    rmq_topic(run, topic, queues)
    group = f"lab-rebal-{uuid.uuid4().hex[:6]}"
    strategy = str(settings.get("allocateStrategy", "AVG"))
    consumers = []

    def start_consumer(name: str) -> None:
        c = PushConsumer(group, namesrv=[run.namesrv], instance_name=name,
                         allocate_message_queue_strategy=strategy_by_name(strategy),
                         consume_from_where="CONSUME_FROM_LAST_OFFSET")

        def listener(msgs, ctx):
            for m in msgs:
                d.add(m.queue_id, name, m.keys)
            return ConsumeStatus.CONSUME_SUCCESS
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        c.start()
        consumers.append(c)

    def stop_all() -> None:
        for c in consumers:
            c.shutdown()

    def produce(stop: threading.Event, tick: float) -> None:
        p = Producer(f"lab-rebal-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
        p.start()
        seq = 0
        try:
            while not stop.wait(tick):
                for q in range(queues):
                    p.send_orderly(Message(topic, b"x", keys=f"q{q}-{seq}"), lambda mqs, msg, arg: mqs[arg], q)
                seq += 1
        finally:
            p.shutdown()
    return start_consumer, stop_all, produce


def _kafka(run: RunningSystem, topic: str, queues: int, d: Deliveries, settings: dict, stop: threading.Event):
    from confluent_kafka import Consumer, Producer
    kafka_topic(run, topic, queues)
    group = f"lab-rebal-{uuid.uuid4().hex[:6]}"
    threads = []
    halt = threading.Event()

    def start_consumer(name: str) -> None:
        conf = {"bootstrap.servers": run.bootstrap, "group.id": group, "auto.offset.reset": "latest",
                "client.id": name, "fetch.wait.max.ms": 50, **settings}

        def loop() -> None:
            c = Consumer(conf)
            c.subscribe([topic])
            try:
                while not halt.is_set():
                    for m in c.consume(100, 0.05):
                        if m.error() is None:
                            d.add(m.partition(), name, m.key().decode())
            finally:
                c.close()
        th = threading.Thread(target=loop, daemon=True)
        th.start()
        threads.append(th)

    def stop_all() -> None:
        halt.set()
        for th in threads:
            th.join(15)

    def produce(stop: threading.Event, tick: float) -> None:
        p = Producer({"bootstrap.servers": run.bootstrap, "linger.ms": 0})
        seq = 0
        while not stop.wait(tick):
            for q in range(queues):
                p.produce(topic, b"x", key=f"q{q}-{seq}".encode(), partition=q)
            p.poll(0)
            seq += 1
        p.flush(10)
    return start_consumer, stop_all, produce


DRIVERS["rebalance"] = (run_rebalance, ROCKETMQ + KAFKA)
