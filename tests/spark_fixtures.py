"""The two Python data sources behind one face, so one test runs against both: `pykafka` (Kafka
topics through the bridge's Kafka listener, produced with confluent-kafka) and `rocketmq` (RocketMQ
topics through the NameServer, produced with rmq.client). A partition is a Kafka partition or a
queue of broker-a."""
from __future__ import annotations

import json
from tests.kafka_fixtures import unique

BROKER = "broker-a"


class KafkaSide:
    fmt = "pykafka"

    def __init__(self, broker) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap

    def options(self, **kw) -> dict:
        out = {"kafka.bootstrap.servers": self.bootstrap}
        for k, v in kw.items():
            out[{"topic": "subscribe", "topics": "subscribe"}.get(k, k)] = v
        return out

    def pkey(self, p: int) -> str:
        return str(p)

    def write_options(self, topic: str) -> dict:
        return {"kafka.bootstrap.servers": self.bootstrap, "topic": topic}

    def create(self, prefix: str, partitions: int) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic
        t = unique(prefix)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(t, partitions, 1)])[t].result(30)
        return t

    def produce(self, topic: str, records: list[tuple[int, bytes, bytes | None]]) -> None:
        """records: (partition, value, key)."""
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for part, value, key in records:
            p.produce(topic, value=value, key=key, partition=part)
        assert p.flush(30) == 0


class RocketSide:
    fmt = "rocketmq"

    def __init__(self, broker) -> None:
        self.broker = broker
        self.namesrv = broker.listeners["namesrv"]

    def options(self, **kw) -> dict:
        out = {"namesrv": self.namesrv}
        out.update(kw)
        return out

    def pkey(self, p: int) -> str:
        return f"{BROKER}:{p}"

    def write_options(self, topic: str) -> dict:
        return {"namesrv": self.namesrv, "topic": topic}

    def create(self, prefix: str, partitions: int) -> str:
        from rmq.client.admin import MQAdmin
        t = unique(prefix)
        with MQAdmin(namesrv=[self.namesrv]) as admin:
            admin.create_topic(t, broker_addr=self.broker.listeners["remoting"], read_queue_nums=partitions,
                               write_queue_nums=partitions)
            admin.wait_for_route(t, queues=partitions, timeout=20)
        return t

    def produce(self, topic: str, records, tags=None, properties=None) -> None:
        from rmq.client.message import Message
        from rmq.client.producer import Producer
        from rmq.remoting import MessageQueue
        p = Producer(unique("spark-test-pg"), namesrv=[self.namesrv])
        p.start()
        try:
            for i, (part, value, key) in enumerate(records):
                m = Message(topic, value, keys=key.decode() if key else None,
                            tags=tags[i] if tags else None, properties=properties[i] if properties else None)
                p.send_to_queue(m, MessageQueue(topic, BROKER, part))
        finally:
            p.shutdown()


def offsets_json(topic: str, by_key: dict[str, int]) -> str:
    return json.dumps({topic: by_key})
