"""The Kafka bridge as an `rmq` plugin (entry point group "rmq.plugins"): the Kafka listener for
`rmq up` and `rmq broker`, and the `rmq bench kafka` / `rmq bench kafka-handlers` / `rmq bench kafka-load` /
`rmq bench topics` / `rmq bench spark` / `rmq bench kafka-groups` / `rmq bench kafka-commits` commands."""
from __future__ import annotations

from kafka_bridge.bench.clients import bench_kafka
from kafka_bridge.bench.commits import bench_kafka_commits
from kafka_bridge.bench.fuzz import fuzz_protocols
from kafka_bridge.bench.groups import bench_kafka_groups
from kafka_bridge.bench.handlers import bench_kafka_handlers, store_batch_encoder
from kafka_bridge.bench.load import bench_kafka_load
from kafka_bridge.bench.spark import bench_spark
from kafka_bridge.bench.topics import bench_topics
from kafka_bridge.drill import drill_producers
from kafka_bridge.kafka_log.dump import kafka_log as kafka_log_commands
from kafka_bridge.pipelines import pipeline as pipeline_commands

bench_commands = [bench_kafka, bench_kafka_handlers, bench_kafka_load, bench_topics, bench_spark, bench_kafka_groups,
                  bench_kafka_commits]
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


def console_metrics(listener, node: list[str]):
    """The Kafka listener's families for the console's /metrics (rmq/console/metrics.py): requests
    and their handling time by API key and version. Nothing for other listeners."""
    from .server import KafkaServer
    if not isinstance(listener, KafkaServer) or listener.bridge is None:
        return ()
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    from . import protocol as kp
    bridge = listener.bridge
    labels = ["cluster", "node_id", "api", "api_key", "api_version"]
    reqs = CounterMetricFamily("kafka_requests", "Kafka requests received, by API key and version.", labels=labels)
    per_api: dict = {}
    for (_client, key, ver), n in list(bridge.api_usage.items()):
        per_api[(key, ver)] = per_api.get((key, ver), 0) + n
    for (key, ver), n in sorted(per_api.items()):
        reqs.add_metric(node + [kp.API_NAMES.get(key, str(key)), str(key), str(ver)], n)
    lat = HistogramMetricFamily("kafka_request_latency_seconds",
                                "Kafka request handling time in the broker (decode to response), by API key and version.",
                                labels=labels)
    for (key, ver), h in sorted(list(bridge.api_latency.items())):
        lat.add_metric(node + [kp.API_NAMES.get(key, str(key)), str(key), str(ver)], h.cumulative_seconds(),
                       h.sum_ns / 1e9)
    return [reqs, lat]


def console_connections(listener) -> dict:
    """{"kafka": open connections} for the Kafka listener (the console's rocketmq_connections)."""
    from .server import KafkaServer
    return {"kafka": len(listener.connections)} if isinstance(listener, KafkaServer) else {}


def console_groups(listener) -> dict:
    """Kafka consumer groups the coordinator knows: {group: {"state", "protocol", "members":
    [{"member_id", "client_id", "client_host"}]}} (the console's groups page)."""
    from .server import KafkaServer
    if not isinstance(listener, KafkaServer) or listener.bridge is None:
        return {}
    coord = getattr(listener.bridge, "coordinator", None)
    out = {}
    for gid, g in list(getattr(coord, "_groups", {}).items()):
        out[gid] = {"state": str(g.state), "protocol": g.protocol_name or "",
                    "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host}
                                for m in list(g.members.values())]}
    return out
