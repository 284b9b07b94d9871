"""Hidden cases for retry-schedule, then a live broker with short delay levels."""
from __future__ import annotations

import threading
import time
import uuid

from labs.exercises.kit import Once, expect, rule

DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LIVE_LEVELS = "1s 1s 1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"
LIVE_MAX = 2


def _levels(s):
    return [float(x[:-1]) * SECONDS[x[-1]] for x in s.split()]


def _ref(rt, max_rt=16, levels=DEFAULT):
    if rt >= max_rt:
        return ("DLQ", None)
    lv = _levels(levels)
    return ("RETRY", lv[min(3 + rt, len(lv)) - 1])


def offline(sol):
    yield "parse_levels(default)", lambda: expect([float(x) for x in sol.parse_levels(DEFAULT)], _levels(DEFAULT))
    yield "parse_levels('2s 3m 1h 1d')", lambda: expect([float(x) for x in sol.parse_levels("2s 3m 1h 1d")],
                                                        [2.0, 180.0, 3600.0, 86400.0])
    for rt in [0, 1, 2, 5, 13, 14, 15, 16, 20]:
        yield f"next_step({rt}) with the defaults", lambda rt=rt: expect(
            tuple(sol.next_step(rt)), _ref(rt), "level 3 + reconsumeTimes; %DLQ% once reconsumeTimes >= max")
    for rt, mx in [(0, 0), (1, 1), (2, 3), (3, 3)]:
        yield f"next_step({rt}, max_reconsume_times={mx})", lambda rt=rt, mx=mx: expect(
            tuple(sol.next_step(rt, mx)), _ref(rt, mx))
    short = "1s 2s 3s 4s"
    for rt in [0, 1, 3]:
        yield f"next_step({rt}, 16, {short!r}): past the last level", lambda rt=rt: expect(
            tuple(sol.next_step(rt, 16, short)), _ref(rt, 16, short), "a level past the last one is the last one")


def broker_config(sol):
    return {"messageDelayLevel": LIVE_LEVELS}


def live(sol, broker):
    run = Once(lambda: _live_run(sol, broker))

    def predicted():
        steps = []
        rt = 0
        while len(steps) < 10:
            step = tuple(sol.next_step(rt, LIVE_MAX, LIVE_LEVELS))
            steps.append(step)
            if step[0] == "DLQ":
                break
            rt += 1
        return steps

    def deliveries():
        seen, _dlq_at = run()
        return expect(len(seen), len(predicted()), "1 first delivery + one per RETRY step your next_step gave")
    yield (f"live (levels {LIVE_LEVELS[:11]}..., maxReconsumeTimes {LIVE_MAX}): deliveries before %DLQ%", deliveries)

    def gaps_match():
        seen, _dlq_at = run()
        gaps = [round(b - a, 2) for a, b in zip(seen, seen[1:])]
        want = [s[1] for s in predicted() if s[0] == "RETRY"]
        return rule(len(gaps) == len(want) and all(w - 0.3 <= g <= w + 1.5 for g, w in zip(gaps, want)),
                    f"gaps close to {want}", f"gaps {gaps}")
    yield "live: the gaps between deliveries match your predicted delays (within -0.3 s / +1.5 s)", gaps_match

    def in_dlq():
        seen, dlq_at = run()
        return rule(dlq_at is not None and seen and dlq_at >= seen[-1], "a message in %DLQ%<group>",
                    "in %DLQ%" if dlq_at else "nothing in %DLQ% after 25 s")
    yield "live: the message reached %DLQ% after the last failure", in_dlq


def _live_run(sol, broker):
    from rmq.client.admin import MQAdmin
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    topic, group = f"Retry{uuid.uuid4().hex[:6]}", f"cg_retry_{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 1)
    seen: list[float] = []
    lock = threading.Lock()
    c = PushConsumer(group, namesrv=[broker.namesrv], consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     max_reconsume_times=LIVE_MAX)

    def listener(msgs, ctx):
        with lock:
            seen.append(time.monotonic())
        return ConsumeStatus.RECONSUME_LATER
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    dlq_at = None
    try:
        p = Producer(f"pg_retry_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
        p.start()
        p.send(Message(topic, b"always fails", keys="k1"))
        p.shutdown()
        deadline = time.monotonic() + 25
        with MQAdmin(namesrv=[broker.namesrv]) as admin:
            while time.monotonic() < deadline and dlq_at is None:
                try:
                    if sum(q.max_offset for q in admin.topic_status(f"%DLQ%{group}")) > 0:
                        dlq_at = time.monotonic()
                except Exception:  # the DLQ topic exists only once the first message is parked
                    pass
                time.sleep(0.1)
    finally:
        c.shutdown()
    return seen, dlq_at
