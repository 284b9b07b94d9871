"""Hidden cases for sql92-routing: the broker's own SQL92 filter on hidden orders, then live
subscriptions with the student's expressions."""
from __future__ import annotations

import threading
import time
import uuid

from labs.exercises.kit import Once, expect, rule
from rmq.common.filter import SqlParseError, compile_sql


def _num(p):
    return float(p["amount"])


RULES = {
    "EU_LARGE": lambda p: p.get("region") == "EU" and _num(p) >= 100,
    "AUDIT": lambda p: (p.get("vip") == "yes" or _num(p) > 10000) and p.get("test") != "yes",
    "REGIONAL": lambda p: p.get("region") in ("EU", "UK", "CH") and 10 <= _num(p) <= 500,
}

ORDERS = [
    {"region": "EU", "amount": "100"}, {"region": "EU", "amount": "99"}, {"region": "US", "amount": "5000"},
    {"region": "EU", "amount": "20000", "test": "yes"}, {"region": "US", "amount": "20000"},
    {"region": "UK", "amount": "10", "vip": "yes"}, {"region": "CH", "amount": "500"}, {"region": "CH", "amount": "501"},
    {"region": "EU", "amount": "9.5", "vip": "no"}, {"region": "US", "amount": "10", "vip": "yes", "test": "yes"},
    {"region": "UK", "amount": "250", "test": "no"}, {"region": "FR", "amount": "300", "vip": "yes"},
    {"region": "EU", "amount": "10000"}, {"region": "US", "amount": "10001", "vip": "no", "test": "no"},
]


def _compile(sol, name):
    expr = getattr(sol, name, "")
    if not isinstance(expr, str) or not expr.strip():
        return None, f"{name} is empty"
    try:
        return compile_sql(expr), ""
    except SqlParseError as exc:
        return None, f"{name} does not parse: {exc}"


def offline(sol):
    for name, want in RULES.items():
        def parses(name=name):
            f, err = _compile(sol, name)
            return rule(f is not None, "a SQL92 expression the broker accepts", err or "ok")
        yield f"{name} parses", parses

        def decides(name=name, want=want):
            f, err = _compile(sol, name)
            if f is None:
                return rule(False, "a SQL92 expression the broker accepts", err)
            for i, props in enumerate(ORDERS):
                if bool(f.matches(props)) != want(props):
                    return expect(f"order {i} {props}: delivered={bool(f.matches(props))}",
                                  f"order {i} {props}: delivered={want(props)}",
                                  "this order has no test or no vip property: a comparison with it is unknown, "
                                  "and NOT unknown is unknown (use IS NULL)"
                                  if name == "AUDIT" and not {"vip", "test"} <= set(props) else
                                  "check the boundaries (>= or >, BETWEEN includes both ends) and that AND binds "
                                  "tighter than OR")
            return rule(True, "every order decided as the rule says", "all orders right")
        yield f"{name} decides every hidden order as the rule says", decides


def broker_config(sol):
    return {"enablePropertyFilter": True}


def live(sol, broker):
    run = Once(lambda: _live_run(sol, broker))
    for name in RULES:
        def exactly(name=name):
            got, want = run()
            return expect(sorted(got[name]), sorted(want[name]))
        yield f"live: a subscription with {name} receives exactly the orders the rule wants", exactly


def _live_run(sol, broker):
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    topic = f"Orders{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 2)
    got: dict[str, set[int]] = {n: set() for n in RULES}
    lock = threading.Lock()
    consumers = []
    for name in RULES:
        c = PushConsumer(f"cg_{name.lower()}_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv],
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")

        def listener(msgs, ctx, name=name):
            with lock:
                got[name].update(int(m.keys) for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS
        c.subscribe(topic, getattr(sol, name), "SQL92")
        c.register_message_listener(listener)
        c.start()
        consumers.append(c)
    try:
        p = Producer(f"pg_orders_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
        p.start()
        for i, props in enumerate(ORDERS):
            p.send(Message(topic, f"order {i}", keys=str(i), properties=dict(props)))
        p.shutdown()
        want = {n: {i for i, props in enumerate(ORDERS) if r(props)} for n, r in RULES.items()}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with lock:
                if all(got[n] >= want[n] for n in RULES):
                    break
            time.sleep(0.1)
        time.sleep(1.0)                 # anything extra the broker would let through arrives too
    finally:
        for c in consumers:
            c.shutdown()
    return got, want
