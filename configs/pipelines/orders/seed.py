"""Demo data for the orders pipeline: `rmq pipeline run orders --seed N` sends N JSON orders to the
topic through a Kafka client, one second apart in event time from 10:00:00 on 2026-01-01, and sends
every tenth order a second time (as a retrying producer would): the pipeline drops those copies."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

START = dt.datetime(2026, 1, 1, 10, 0, 0)


def orders(n: int) -> list[dict]:
    return [{"order_id": f"o-{i:06d}", "customer": f"c{i % 7}", "amount": str(Decimal(10 + i % 50) + Decimal("0.25")),
             "ts": (START + dt.timedelta(seconds=i)).isoformat()} for i in range(n)]


def expected_revenue(n: int) -> dict[dt.datetime, tuple[Decimal, int]]:
    """{window start: (revenue, orders)} the pipeline must find, duplicates not counted twice."""
    out: dict[dt.datetime, tuple[Decimal, int]] = {}
    for o in orders(n):
        ts = dt.datetime.fromisoformat(o["ts"])
        w = ts.replace(second=0)
        rev, cnt = out.get(w, (Decimal(0), 0))
        out[w] = (rev + Decimal(o["amount"]), cnt + 1)
    return out


def seed(addresses: dict, config: dict, n: int, say) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = config.get("rmq.topic", "orders")
    admin = AdminClient({"bootstrap.servers": addresses["kafka"]})
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    except Exception as exc:            # an existing topic is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    p = Producer({"bootstrap.servers": addresses["kafka"], "linger.ms": 5})
    sent = 0
    for i, o in enumerate(orders(n)):
        value = json.dumps(o).encode()
        p.produce(topic, key=o["order_id"].encode(), value=value)
        sent += 1
        if i % 10 == 0:
            p.produce(topic, key=o["order_id"].encode(), value=value)       # a producer retry's copy
            sent += 1
    if p.flush(60):
        raise RuntimeError(f"not every order was acknowledged by {addresses['kafka']}")
    say(f"seeded {n} orders ({sent - n} duplicates) to Kafka topic {topic}")
