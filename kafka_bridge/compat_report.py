"""Observe which Kafka APIs and versions each stock client really uses against the bridge, and
print docs/kafka-compat.md from what was seen (`python -m kafka_bridge.compat_report [--write]`).

An embedded broker runs in this process; each client (kafka-python, confluent-kafka, aiokafka)
runs the same workload: admin (create, describe, partitions, configs, groups, delete), idempotent
and transactional produce, a consumer group with commits, offsets by timestamp, and SASL/PLAIN on a
second listener. Every request is counted by (client software, API key, version).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
import uuid

from . import protocol as kp


class _Embedded:
    def __init__(self, overrides: dict):
        from rmq.config import load_config
        from rmq.server.app import EmbeddedServer
        root = tempfile.mkdtemp(prefix="compat-")
        base = {"storePathRootDir": os.path.join(root, "store"), "kafkaPort": 0, "mappedFileSizeCommitLog": 16 << 20,
                "namesrvPort": 0, "listenPort": 0, "kafkaGroupMinSessionTimeoutMs": 1000,
                "kafkaShareAutoOffsetReset": "earliest", "kafkaConsumerGroupHeartbeatIntervalMs": 500}
        base.update(overrides)
        self.srv = EmbeddedServer(load_config(None, base))
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("embedded broker did not start")

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.listeners = self.loop.run_until_complete(self.srv.start())
        self.ready.set()
        self.loop.run_forever()

    @property
    def bootstrap(self) -> str:
        return self.listeners["kafka"]

    def usage(self) -> dict:
        for s in self.srv._servers:
            b = getattr(s, "bridge", None)
            if b is not None:
                return dict(b.api_usage)
        return {}

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.srv.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _n(p):
    return f"{p}{uuid.uuid4().hex[:8]}"


def workload_kafka_python(bs: str, sasl: str | None = None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic, ConfigResource, ConfigResourceType
    kw = {}
    if sasl:
        kw = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="alice",
                  sasl_plain_password="secret")
        p = KafkaProducer(bootstrap_servers=bs, **kw)
        p.send(_n("sasl"), b"x").get(10)
        p.close()
        return
    t = _n("kp")
    a = KafkaAdminClient(bootstrap_servers=bs)
    a.create_topics([NewTopic(t, 2, 1)])
    a.create_partitions({t: NewPartitions(3)})
    a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t)])
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs={"retention.ms": "3600000"})])
    p = KafkaProducer(bootstrap_servers=bs, enable_idempotence=True, compression_type="gzip")
    for i in range(10):
        p.send(t, key=b"k%d" % i, value=b"v", headers=[("h", b"1")])
    p.flush()
    p.close()
    tp = KafkaProducer(bootstrap_servers=bs, transactional_id=_n("tid"))
    tp.init_transactions()
    tp.begin_transaction()
    tp.send(t, b"tx")
    tp.commit_transaction()
    tp.close()
    g = _n("g")
    c = KafkaConsumer(t, bootstrap_servers=bs, group_id=g, auto_offset_reset="earliest", enable_auto_commit=False)
    got, deadline = 0, time.time() + 15
    while got < 11 and time.time() < deadline:
        got += sum(len(v) for v in c.poll(200).values())
    c.commit()
    c.committed(TopicPartition(t, 0))
    c.offsets_for_times({TopicPartition(t, 0): int(time.time() * 1000) - 60_000})
    c.close()
    a.list_groups()
    a.describe_groups([g])
    a.list_group_offsets(g)
    a.describe_cluster()
    # the operations admin APIs (issue 11): each call is what kafka-python's admin sends
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
    from kafka.admin import ResourceType as KRT
    a.delete_records({TopicPartition(t, 0): 1})
    a.describe_log_dirs()
    a.list_partition_reassignments()
    a.describe_producers([TopicPartition(t, 0)])
    a.list_transactions()
    try:
        a.describe_transactions([_n("nope")])
    except Exception:  # TRANSACTIONAL_ID_NOT_FOUND, as asked
        pass
    a.delete_group_offsets(g, [TopicPartition(t, 0)])
    a.delete_groups([g])
    try:
        a.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                  ResourcePatternFilter(KRT.ANY, None, ACLResourcePatternType.ANY)))
    except Exception:  # SECURITY_DISABLED: no authorizer, as expected
        pass
    a.delete_topics([t])
    a.close()


def workload_confluent(bs: str, sasl: str | None = None) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    if sasl:
        p = Producer({"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                      "sasl.username": "alice", "sasl.password": "secret"})
        p.produce(_n("sasl"), b"x")
        p.flush(10)
        return
    t = _n("ck")
    a = AdminClient({"bootstrap.servers": bs})
    a.create_topics([NewTopic(t, 2, 1)])[t].result(10)
    a.create_partitions([NewPartitions(t, 3)])[t].result(10)
    for f in a.describe_configs([ConfigResource("topic", t)]).values():
        f.result(10)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    for f in a.incremental_alter_configs([ConfigResource("topic", t, incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(10)
    for f in a.alter_configs([ConfigResource("topic", t, set_config={"retention.ms": "7200000"})]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "compression.type": "zstd"})
    for i in range(10):
        p.produce(t, key=b"k%d" % i, value=b"v", headers=[("h", b"1")])
    p.flush(10)
    tp = Producer({"bootstrap.servers": bs, "transactional.id": _n("tid")})
    tp.init_transactions(10)
    tp.begin_transaction()
    tp.produce(t, b"tx")
    tp.commit_transaction(10)
    g = _n("g")
    c = Consumer({"bootstrap.servers": bs, "group.id": g, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([t])
    got, deadline = 0, time.time() + 15
    while got < 11 and time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    c.commit(asynchronous=False)
    c.committed([TopicPartition(t, 0)], 10)
    c.offsets_for_times([TopicPartition(t, 0, int(time.time() * 1000) - 60_000)], 10)
    tp.begin_transaction()  # consume-transform-produce: offsets committed with the transaction
    tp.produce(t, b"tx2")
    tp.send_offsets_to_transaction([TopicPartition(t, 0, 1)], c.consumer_group_metadata(), 10)
    tp.commit_transaction(10)
    c.close()
    a.list_consumer_groups().result(10)
    for f in a.describe_consumer_groups([g]).values():
        f.result(10)
    a.describe_cluster().result(10)
    _kafka4_groups(bs, a, t)
    # the operations admin APIs (issue 11): DeleteRecords, ElectLeaders, DeleteGroups, the ACL APIs
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    for f in a.delete_records([TopicPartition(t, 0, 1)]).values():
        f.result(10)
    try:
        a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, 0)]).result(10)
    except Exception:  # ELECTION_NOT_NEEDED
        pass
    for f in a.delete_consumer_groups([g]).values():
        f.result(10)
    binding = AclBinding(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    for call in (lambda: a.create_acls([binding])[binding].result(10), lambda: a.describe_acls(flt).result(10),
                 lambda: a.delete_acls([flt])[flt].result(10)):
        try:
            call()
        except Exception:  # SECURITY_DISABLED: no authorizer, as expected
            pass
    a.delete_topics([t])[t].result(10)


def _kafka4_groups(bs: str, a, t: str) -> None:
    """Kafka 4's group protocols (issue 28): a KIP-848 consumer (group.protocol=consumer) and its
    describe, and a KIP-932 ShareConsumer that reads the topic and acknowledges."""
    from confluent_kafka import Consumer
    g = _n("g848")
    c = Consumer({"bootstrap.servers": bs, "group.id": g, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([t])
    got, deadline = 0, time.time() + 15
    while got < 1 and time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    c.commit(asynchronous=False)
    for f in a.describe_consumer_groups([g]).values():
        f.result(10)
    c.close()
    import confluent_kafka
    if hasattr(confluent_kafka, "ShareConsumer"):  # confluent-kafka 2.16+
        sc = confluent_kafka.ShareConsumer({"bootstrap.servers": bs, "group.id": _n("share")})
        sc.subscribe([t])
        deadline = time.time() + 5
        while time.time() < deadline and not [m for m in sc.poll(0.2) if m.error() is None]:
            pass
        sc.close()


def workload_aiokafka(bs: str, sasl: str | None = None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run():
        if sasl:
            p = AIOKafkaProducer(bootstrap_servers=bs, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                 sasl_plain_username="alice", sasl_plain_password="secret")
            await p.start()
            await p.send_and_wait(_n("sasl"), b"x")
            await p.stop()
            return
        t = _n("ak")
        a = AIOKafkaAdminClient(bootstrap_servers=bs)
        await a.start()
        await a.create_topics([NewTopic(t, 2, 1)])
        p = AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True, compression_type="lz4")
        await p.start()
        for i in range(10):
            await p.send(t, b"v", key=b"k%d" % i, headers=[("h", b"1")])
        await p.flush()
        await p.stop()
        tp = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=_n("tid"))
        await tp.start()
        async with tp.transaction():
            await tp.send(t, b"tx")
        await tp.stop()
        g = _n("g")
        c = AIOKafkaConsumer(t, bootstrap_servers=bs, group_id=g, auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got, deadline = 0, time.time() + 15
        while got < 11 and time.time() < deadline:
            r = await c.getmany(timeout_ms=200)
            got += sum(len(v) for v in r.values())
        await c.commit()
        await c.committed(TopicPartition(t, 0))
        await c.offsets_for_times({TopicPartition(t, 0): int(time.time() * 1000) - 60_000})
        await c.stop()
        await a.list_consumer_groups()
        await a.describe_consumer_groups([g])
        await a.delete_topics([t])
        await a.close()

    asyncio.run(run())


WORKLOADS = {"kafka-python": workload_kafka_python, "confluent-kafka": workload_confluent, "aiokafka": workload_aiokafka}


def observe() -> dict[str, dict[int, set[int]]]:
    seen: dict[str, dict[int, set[int]]] = {}
    for sasl in (False, True):
        emb = _Embedded({"kafkaSaslEnable": sasl, "kafkaSaslUsers": "alice:secret"} if sasl else {})
        try:
            for name, fn in WORKLOADS.items():
                before = emb.usage()
                try:
                    fn(emb.bootstrap, "PLAIN" if sasl else None)
                except Exception as exc:  # report, keep going with the other clients
                    print(f"{name}{' (SASL)' if sasl else ''} workload failed: {exc!r}")
                after = emb.usage()
                for (soft, api, ver), cnt in after.items():
                    if cnt > before.get((soft, api, ver), 0):
                        seen.setdefault(name, {}).setdefault(api, set()).add(ver)
        finally:
            emb.stop()
    return seen


def render(seen: dict[str, dict[int, set[int]]]) -> str:
    from .handlers.metadata import advertised_versions
    adv = advertised_versions()
    clients = list(WORKLOADS)
    lines = ["# Kafka API coverage", "",
             "Generated by `python -m kafka_bridge.compat_report --write` from the requests each stock client",
             "really sent to the bridge while running the same workload (admin, idempotent and transactional",
             "produce with compression and headers, a consumer group with commits, offsets by timestamp, SASL/PLAIN).",
             "`versions seen` lists the versions each client negotiated; `-` means that client did not use the API",
             "in the workload. The Java client (inside Spark's Kafka connector) cannot run on this machine",
             "(no Maven Central); the ranges below are what ApiVersions advertises to it.", "",
             "| key | API | advertised | " + " | ".join(clients) + " |",
             "|---|---|---|" + "---|" * len(clients)]
    for key in sorted(adv):
        lo, hi = adv[key]
        cells = []
        for c in clients:
            vs = sorted(seen.get(c, {}).get(key, ()))
            cells.append(", ".join(f"v{v}" for v in vs) if vs else "-")
        lines.append(f"| {key} | {kp.API_NAMES[key]} | v{lo}-v{hi} | " + " | ".join(cells) + " |")
    lines += ["", "Requests for an API key not in this table close the connection (what a Kafka broker does);",
              "ApiVersions with an unsupported version is answered with UNSUPPORTED_VERSION and the list above.",
              "Fetch sessions (KIP-227) are declined with session id 0, which the protocol allows.", ""]
    from .topic_configs import DOCS_BEGIN, docs_pages
    with open(docs_pages()[0], encoding="utf-8") as fh:  # the topic-config section, as topic_configs wrote it
        text = fh.read()
    cut = text.rfind("\n## ", 0, text.find(DOCS_BEGIN)) if DOCS_BEGIN in text else -1
    lines.append(text[cut + 1:].rstrip("\n") if cut >= 0 else "")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="write docs/kafka-compat.md")
    args = ap.parse_args(argv)
    text = render(observe())
    if args.write:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "kafka-compat.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {path}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
