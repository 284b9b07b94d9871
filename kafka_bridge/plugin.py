"""The Kafka bridge as an `rmq` plugin (entry point group "rmq.plugins"): the Kafka listener for
`rmq up` and `rmq broker`, and the `rmq bench kafka` / `rmq bench kafka-handlers` / `rmq bench kafka-load` / `rmq bench topics` / `rmq bench spark` / `rmq bench kafka-groups` commands."""
from __future__ import annotations

from kafka_bridge.bench.clients import bench_kafka
from kafka_bridge.bench.fuzz import fuzz_protocols
from kafka_bridge.bench.groups import bench_kafka_groups
from kafka_bridge.bench.handlers import bench_kafka_handlers, store_batch_encoder
from kafka_bridge.bench.load import bench_kafka_load
from kafka_bridge.bench.spark import bench_spark
from kafka_bridge.bench.topics import bench_topics
from kafka_bridge.drill import drill_producers
from kafka_bridge.kafka_log.dump import kafka_log as kafka_log_commands
from kafka_bridge.pipelines import pipeline as pipeline_commands

bench_commands = [bench_kafka, bench_kafka_handlers, bench_kafka_load, bench_topics, bench_spark, bench_kafka_groups]
commands = [kafka_log_commands, pipeline_commands]
__all__ = ["bench_commands", "commands", "drill_producers", "fuzz_protocols", "listener_factory",
           "store_batch_encoder"]


def listener_factory(server):
    """(name, factory) for a broker process (`rmq up` or `rmq broker`), or None when kafkaEnable
    is false. A broker with namesrvAddr set joins the Kafka cluster of its brokerClusterName
    (kafka_bridge.cluster), a slave as a follower of its master; otherwise it answers as a single
    broker."""
    b = server.cfg.broker
    if not b.kafkaEnable:
        return None
    if server.cfg.store.brokerRole == "SLAVE" and b.kafkaStorage == "kafka-log":
        import click
        raise click.ClickException("kafkaStorage kafka-log keeps Kafka topics outside the commitlog, which HA does "
                                   "not copy: a SLAVE's Kafka listener needs kafkaStorage commitlog (or kafkaEnable "
                                   "false)")
    from .server import start_kafka_listener
    cluster = bool(b.namesrvAddr.strip())
    advertised = getattr(server, "advertised_host", None)
    return "kafka", lambda: start_kafka_listener(server.controller, server.host, b.kafkaPort, advertised,
                                                 cluster=cluster)
