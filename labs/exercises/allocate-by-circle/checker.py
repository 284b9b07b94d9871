"""Hidden cases for allocate-by-circle, then the student's function as the allocation strategy of a
real push consumer group."""
from __future__ import annotations

import threading
import time
import uuid

from labs.exercises.kit import Once, expect, rule, shutdown_within
from rmq.client.rebalance import AllocateMessageQueueAveragelyByCircle
from rmq.remoting.bodies import MessageQueue

REF = AllocateMessageQueueAveragelyByCircle()


def _mqs(n, broker="broker-a"):
    return [MessageQueue(topic="T", brokerName=broker, queueId=i) for i in range(n)]


def _names(qs):
    return [f"{q.brokerName}:q{q.queueId}" for q in qs]


def offline(sol):
    for n_mq, n_cid in [(8, 3), (8, 1), (4, 4), (3, 5), (12, 5), (7, 2), (1, 3)]:
        mqs = _mqs(n_mq)
        cids = [f"10.0.0.{i}@c{i}" for i in range(n_cid)]
        for cid in cids:
            def one(cid=cid, mqs=mqs, cids=cids):
                got = sol.allocate("g", cid, list(mqs), list(cids))
                return expect(_names(got), _names(REF.allocate("g", cid, mqs, cids)),
                              "queue i belongs to the consumer at index i % len(cid_all)")
            yield f"{n_mq} queues, {n_cid} consumers: the share of {cid}", one

        def cover(mqs=mqs, cids=cids):
            seen = [q for cid in cids for q in sol.allocate("g", cid, list(mqs), list(cids))]
            dup = sorted({n for n in _names(seen) if _names(seen).count(n) > 1})
            missing = sorted(set(_names(mqs)) - set(_names(seen)))
            return rule(not dup and not missing, "every queue in exactly one member's share",
                        f"missing {missing}, given twice {dup}")
        yield f"{n_mq} queues, {n_cid} consumers: the shares cover every queue once", cover
    two = _mqs(3, "broker-a") + _mqs(3, "broker-b")
    cids = ["a@1", "b@2"]
    yield "two brokers' queues (6), 2 consumers: the share of a@1", \
        lambda: expect(_names(sol.allocate("g", "a@1", list(two), cids)), _names(REF.allocate("g", "a@1", two, cids)))
    yield "a consumer id not in cid_all gets nothing", \
        lambda: expect(_names(sol.allocate("g", "ghost@9", _mqs(4), ["a@1", "b@2"])), [],
                       "return [] when current_cid is not one of cid_all")


class _Strategy:
    """The student's function as an AllocateMessageQueueStrategy."""
    name = "STUDENT_CIRCLE"

    def __init__(self, fn):
        self.fn = fn

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return list(self.fn(consumer_group, current_cid, list(mq_all), list(cid_all)))


def live(sol, broker):
    run = Once(lambda: _live_run(sol, broker))
    for name in ("c0", "c1", "c2"):
        def share(name=name):
            got, cids, by_instance, group = run()
            cid = next(c for c, n in by_instance.items() if n == name)
            want = sorted(q.queueId for q in REF.allocate(group, cid, _mqs(8), cids))
            return expect(sorted(got.get(name, set())), want,
                          "the consumer reads the queues your allocate returned for it")
        yield f"live group of 3 over 8 queues: {name} consumed its own share", share

    def every():
        got = run()[0]
        return expect(sorted(set().union(*got.values())) if got else [], list(range(8)))
    yield "live: every queue's message was consumed", every


def _live_run(sol, broker):
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    topic, group = f"Circle{uuid.uuid4().hex[:6]}", f"cg_circle_{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 8)
    got: dict[str, set[int]] = {}
    lock = threading.Lock()
    consumers = []
    for name in ("c0", "c1", "c2"):
        c = PushConsumer(group, namesrv=[broker.namesrv], instance_name=name,
                         allocate_message_queue_strategy=_Strategy(sol.allocate),
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")

        def listener(msgs, ctx, name=name):
            with lock:
                got.setdefault(name, set()).update(m.queue_id for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS
        c.subscribe(topic, "*")
        c.register_message_listener(listener)
        consumers.append(c)
    try:
        for c in consumers:
            c.start()
        time.sleep(2)          # the three members see each other and rebalance
        p = Producer(f"pg_circle_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
        p.start()
        for q in range(8):
            p.send_orderly(Message(topic, f"to q{q}", keys=f"q{q}"), lambda mqs, msg, arg: mqs[arg], q)
        p.shutdown()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with lock:
                if sum(len(v) for v in got.values()) >= 8:
                    break
            time.sleep(0.1)
        cids = sorted(c.client_id for c in consumers)
        by_instance = {c.client_id: n for c, n in zip(consumers, ("c0", "c1", "c2"))}
    finally:
        shutdown_within(consumers)      # bounded: the student's allocate may hold the clients' event loop
    return got, cids, by_instance, group
