"""The Kafka producer of `rmq drill kill` (issue 16): confluent-kafka with acks=all, plugged into
rmq/drill/kill.py through the plugin's `drill_producers` (rmq never imports kafka_bridge).

A record counts as acknowledged only when its delivery report has no error. Retries and
idempotence are off, so a record whose answer was lost to the kill is never sent again under
the same id (a retry would be a second copy of it, which the drill would count as duplicated)."""
from __future__ import annotations

import threading
import time


def kafka_producer(listeners: dict, topic: str, prefix: str, stop: threading.Event, log):
    """Produce to `topic` (its partitions are the RocketMQ queues) until `stop`; returns a closer."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": listeners["kafka"], "acks": "all", "enable.idempotence": False,
                  "message.send.max.retries": 0, "retries": 0, "linger.ms": 2, "message.timeout.ms": 10000,
                  "socket.timeout.ms": 5000, "log_level": 2, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})

    def report(err, msg):
        if err is None:
            log.ack(msg.value().decode(), msg.partition(), msg.offset())
        else:
            log.fail()

    def run():
        n = 0
        while not stop.is_set():
            mid = f"{prefix}-{n}"
            try:
                p.produce(topic, mid.encode(), key=mid.encode(), on_delivery=report)
                n += 1
            except BufferError:
                p.poll(0.05)
                continue
            if n % 16 == 0:
                p.poll(0)
                time.sleep(0.001)
    t = threading.Thread(target=run, name=f"drill-{prefix}", daemon=True)
    t.start()

    def close():
        t.join(timeout=30)
        p.flush(15)  # delivery reports of what was in flight at the kill: errors, or acks from the restarted broker
    return close


drill_producers = {"kafka": kafka_producer}
