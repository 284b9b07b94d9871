"""/metrics: the broker's state in Prometheus text format, read at scrape time by a custom
prometheus_client Collector (BrokerCollector), so the put and pull paths pay nothing for it beyond
the few counters the store keeps anyway. Names follow RocketMQ 5's metrics where one exists
(rocketmq_messages_in_total, rocketmq_consumer_lag_messages, ...); docs/console.md lists them all.
"""
from __future__ import annotations

import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..broker.retry import dlq_topic, retry_topic
from ..broker.topic_config import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from ..common.latency import LatencyHistogram
from ..plugins import load_plugins
from ..common.message import SCHEDULE_TOPIC
from ..store.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT

TOPIC_GROUP_SEPARATOR = "@"
#: consumequeue units read per scrape (all queues) to bring the bytes-in counters up to date; queues
#: further behind catch up over the next scrapes (a scrape never reads a whole store)
BYTES_SCAN_UNITS = 500_000


def histogram_family(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def add_histogram(fam: HistogramMetricFamily, label_values: list[str], h: LatencyHistogram) -> None:
    """One LatencyHistogram (rmq.common.latency) as one labelled Prometheus histogram."""
    fam.add_metric(label_values, h.cumulative_seconds(), h.sum_ns / 1e9)


def topic_message_counts(store) -> dict[str, int]:
    """topic -> messages ever stored in it: the sum of its consumequeues' max offsets (queue offsets
    count from 0 and survive file cleanup, so this is a counter)."""
    out: dict[str, int] = {}
    for topic, queues in list(store.consume_queue_table.items()):
        out[topic] = sum(cq.max_offset for cq in list(queues.values()))
    return out


class BytesInTracker:
    """rocketmq_throughput_in_total without a counter on the put path: each scrape reads the
    consumequeue units written since the last one (their size field is the stored unit's size) and
    adds them up, per topic, bounded by BYTES_SCAN_UNITS per queue and scrape."""

    def __init__(self, store):
        self.store = store
        self.seen: dict[tuple[str, int], int] = {}   # (topic, queue) -> queue offset read up to
        self.bytes: dict[str, int] = {}
        self.lock = threading.Lock()

    def update(self) -> dict[str, int]:
        with self.lock:
            budget = BYTES_SCAN_UNITS
            for topic, queues in list(self.store.consume_queue_table.items()):
                for qid, cq in list(queues.items()):
                    key = (topic, qid)
                    start = max(self.seen.get(key, 0), cq.min_offset)
                    end = min(cq.max_offset, start + max(0, budget))
                    budget -= end - start
                    total = 0
                    off = start
                    while off < end:
                        units = cq.get_units(off, min(end - off, 8192))
                        if not units:
                            break
                        n = len(units) // CQ_STORE_UNIT_SIZE
                        total += sum(u[1] for u in CQ_UNIT.iter_unpack(units))  # the size field
                        off += n
                    self.seen[key] = off
                    if total or topic not in self.bytes:
                        self.bytes[topic] = self.bytes.get(topic, 0) + total
            return dict(self.bytes)


class BrokerCollector(Collector):
    """Reads a ConsoleContext (rmq/console/context.py) at scrape time."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.bytes_in = BytesInTracker(ctx.controller.store)

    def collect(self):
        ctx = self.ctx
        ctrl = ctx.controller
        store = ctrl.store
        cluster = ctrl.broker_config.brokerClusterName
        broker = ctrl.broker_config.brokerName
        base = ["cluster", "node_id"]
        node = [cluster, broker]

        counts = topic_message_counts(store)
        m_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored, per topic (every protocol).",
                                   labels=base + ["topic"])
        for topic, n in sorted(counts.items()):
            m_in.add_metric(node + [topic], n)
        yield m_in
        b_in = CounterMetricFamily("rocketmq_throughput_in", "Bytes stored (commitlog unit sizes), per topic.",
                                   labels=base + ["topic"])
        for topic, n in sorted(self.bytes_in.update().items()):
            b_in.add_metric(node + [topic], n)
        yield b_in
        m_out = CounterMetricFamily("rocketmq_messages_out", "Messages handed to consumers, per topic.",
                                    labels=base + ["topic"])
        b_out = CounterMetricFamily("rocketmq_throughput_out", "Bytes handed to consumers, per topic.",
                                    labels=base + ["topic"])
        for topic, (n, nbytes) in sorted(list(store.topic_out.items())):
            m_out.add_metric(node + [topic], n)
            b_out.add_metric(node + [topic], nbytes)
        yield m_out
        yield b_out

        put = histogram_family("rocketmq_put_latency_seconds", "Store put call duration, sampled: the first call and one in 16 (one call may put a batch).",
                               base)
        add_histogram(put, node, store.put_latency)
        yield put

        info = store.runtime_info()
        yield CounterMetricFamily("rocketmq_storage_flush", "fdatasync calls on commitlog and consumequeue files.",
                                  value=info["fdatasyncCalls"] + info["fsyncCalls"])
        yield CounterMetricFamily("rocketmq_storage_group_commit_flushes",
                                  "Group-commit flushes (SYNC_FLUSH's GroupCommitService).",
                                  value=info["groupCommitFlushes"])
        yield GaugeMetricFamily("rocketmq_storage_dispatch_behind_bytes",
                                "Commitlog bytes not yet dispatched to consumequeues and index (reput lag).",
                                value=info["dispatchBehindBytes"])
        yield GaugeMetricFamily("rocketmq_storage_flush_behind_bytes", "Commitlog bytes written but not flushed.",
                                value=max(0, info["commitLogMaxOffset"] - info["commitLogFlushedOffset"]))
        yield GaugeMetricFamily("rocketmq_storage_commitlog_max_offset", "Commitlog end offset.",
                                value=info["commitLogMaxOffset"])
        yield GaugeMetricFamily("rocketmq_storage_disk_ratio", "Used fraction of the store's disk.",
                                value=info["diskRatio"])

        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages",
                                "Messages not yet consumed, per group and queue (max offset - committed offset).",
                                labels=base + ["topic", "consumer_group", "queue_id"])
        retry = CounterMetricFamily("rocketmq_retry_messages", "Messages put in a group's %RETRY% topic.",
                                    labels=base + ["consumer_group"])
        dlq = CounterMetricFamily("rocketmq_dlq_messages", "Messages put in a group's %DLQ% topic.",
                                  labels=base + ["consumer_group"])
        groups = set()
        for key, queues in list(ctrl.offset_manager.offset_table.items()):
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            groups.add(group)
            for qid, off in sorted(list(queues.items())):
                mx = store.get_max_offset_in_queue(topic, qid)
                lag.add_metric(node + [topic, group, str(qid)], max(0, mx - off) if mx >= 0 else 0)
        for group in sorted(groups):
            if group == "DLQ_RESEND" or group.startswith("%"):
                continue
            retry.add_metric(node + [group], counts.get(retry_topic(group), 0))
            dlq.add_metric(node + [group], counts.get(dlq_topic(group), 0))
        yield lag
        yield retry
        yield dlq

        sched = ctrl.schedule_service
        delay = GaugeMetricFamily("rocketmq_delay_backlog_messages",
                                  "Delayed messages not yet delivered, per delay level (SCHEDULE_TOPIC_XXXX).",
                                  labels=base + ["delay_level"])
        for qid, cq in sorted(list(store.consume_queue_table.get(SCHEDULE_TOPIC, {}).items())):
            done = max(sched.offsets.offset_table.get(qid + 1, 0), cq.min_offset)
            delay.add_metric(node + [str(qid + 1)], max(0, cq.max_offset - done))
        yield delay
        yield CounterMetricFamily("rocketmq_half_messages", "Transaction half messages (RMQ_SYS_TRANS_HALF_TOPIC).",
                                  value=counts.get(RMQ_SYS_TRANS_HALF_TOPIC, 0))
        yield CounterMetricFamily("rocketmq_op_messages", "Transaction op messages (RMQ_SYS_TRANS_OP_HALF_TOPIC).",
                                  value=counts.get(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0))

        conns = GaugeMetricFamily("rocketmq_connections", "Open client connections, per protocol.",
                                  labels=base + ["protocol"])
        for proto, n in ctx.connection_counts().items():
            conns.add_metric(node + [proto], n)
        yield conns
        ha = getattr(ctrl, "ha_service", None)
        if ha is not None and not ha.is_slave:
            yield GaugeMetricFamily("rocketmq_replication_lag_bytes",
                                    "Commitlog bytes the slave has not acknowledged (0 when no slave is connected).",
                                    value=max(0, store.commitlog.max_offset - ha.push2slave_max_offset)
                                    if ha.connections else 0)
        for plugin in load_plugins():  # the Kafka bridge's families (kafka_bridge/plugin.py)
            fn = getattr(plugin, "console_metrics", None)
            if fn is not None:
                for obj in ctx.listener_objects.values():
                    yield from fn(obj, node) or ()


def make_registry(ctx) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(ctx))
    return reg
