"""The Kafka producer of `rmq drill kill` (issue 16): confluent-kafka with acks=all, plugged into
rmq/drill/kill.py through the plugin's `drill_producers` (rmq never imports kafka_bridge).

A record counts as acknowledged only when its delivery report has no error. Retries and
idempotence are off, so a record whose answer was lost to the kill is never sent again under
the same id (a retry would be a second copy of it, which the drill would count as duplicated)."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq.drill.kill import ProducerRun

#: after the kill, delivery reports the client already holds are served until none comes for this long
REPORTS_IDLE_S = 0.05
REPORTS_MAX_S = 1.0


def kafka_producer(listeners: dict, topic: str, prefix: str, stop: threading.Event, log) -> ProducerRun:
    """Produce to `topic` (its partitions are the RocketMQ queues) until `stop`."""
    from confluent_kafka import Producer

    from rmq.drill.kill import ProducerRun, join_sender  # here: a broker loads this plugin, not the drill
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

    def settle():
        join_sender(t, "Kafka")
        deadline = time.monotonic() + REPORTS_MAX_S  # answers that arrived before the kill, not yet reported
        while p.poll(REPORTS_IDLE_S) and time.monotonic() < deadline:
            pass

    def close():
        join_sender(t, "Kafka")
        p.flush(15)  # delivery reports of what was in flight at the kill: errors, or acks from the restarted broker
    return ProducerRun(settle=settle, close=close)


drill_producers = {"kafka": kafka_producer}
