"""Demo data for the tags pipeline: N shop events through the RocketMQ client, tagged in turn
created, paid, shipped, refunded, with a `region` property (eu, us, apac) for SQL92 filters."""
from __future__ import annotations

TAGS = ("created", "paid", "shipped", "refunded")
REGIONS = ("eu", "us", "apac")


def events(n: int) -> list[dict]:
    return [{"key": f"order-{i:05d}", "tag": TAGS[i % len(TAGS)], "region": REGIONS[i % len(REGIONS)],
             "body": f"event {i} of order-{i:05d}"} for i in range(n)]


def seed(addresses: dict, config: dict, n: int, say) -> None:
    from rmq.client.admin import MQAdmin
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    topic = config.get("rmq.topic", "shop-events")
    with MQAdmin(namesrv=[addresses["namesrv"]]) as admin:
        admin.create_topic(topic, broker_addr=addresses["remoting"], read_queue_nums=4, write_queue_nums=4)
        admin.wait_for_route(topic, queues=4, timeout=20)
    p = Producer("pipeline-seed", namesrv=[addresses["namesrv"]])
    p.start()
    try:
        for e in events(n):
            p.send(Message(topic, e["body"], tags=e["tag"], keys=e["key"], properties={"region": e["region"]}))
    finally:
        p.shutdown()
    say(f"seeded {n} events to RocketMQ topic {topic} (tags {', '.join(TAGS)})")
