"""What the lab drivers share: the registry, the system families and the topic and send helpers for
both protocols."""
from __future__ import annotations

import uuid

from ..systems import RunningSystem

ROCKETMQ = ("rocketmq",)
KAFKA = ("kafka-bridge", "kafka-log", "tansu", "docker-kafka")

#: driver name -> (function(run, workload, params, say) -> figures, the systems it runs against)
DRIVERS: dict = {}


def rmq_topic(run: RunningSystem, topic: str, queues: int) -> None:
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv=[run.namesrv]) as admin:
        admin.create_topic(topic, broker_addr=run.extra["remoting"], read_queue_nums=queues, write_queue_nums=queues)
        admin.wait_for_route(topic, queues=queues, timeout=30)


def kafka_topic(run: RunningSystem, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": run.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def rmq_send(run: RunningSystem, messages) -> None:
    """messages: (topic, body, tags, keys, properties) tuples, sent in batches of 64 per topic."""
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    p = Producer(f"lab-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv])
    p.start()
    try:
        batches: dict[str, list] = {}
        for topic, body, tags, keys, props in messages:
            batch = batches.setdefault(topic, [])
            batch.append(Message(topic, body, tags=tags, keys=keys, properties=props))
            if len(batch) == 64:
                p.send_batch(batch)
                batches[topic] = []
        for batch in batches.values():
            if batch:
                p.send_batch(batch)
    finally:
        p.shutdown()


def kafka_send(run: RunningSystem, records) -> None:
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
