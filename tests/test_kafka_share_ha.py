"""Share-group state across a failover to the slave (kafka_bridge/share.py, rmq/server/ha.py
SlaveSynchronize): real `rmq namesrv` / `rmq broker -c` processes on 127.0.0.1, a SYNC_MASTER and its
SLAVE, both with a Kafka listener.

A confluent-kafka ShareConsumer on the master accepts the first two records of a 1-partition topic
and releases the other two; SlaveSynchronize copies the share-group state (the broker config table
kafkaShareGroups) to the slave beside the consumer offsets. After SIGKILL of the master, a share
consumer of the same group on the slave gets only the two released records, with their delivery
counts raised: nothing accepted on the master is delivered again, nothing released is lost.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer (2.16+)", allow_module_level=True)
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

from kafka_bridge.peers import stop_process  # noqa: E402
from rmq.remoting import RequestCode, ResponseCode  # noqa: E402
from tests.kafka_fixtures import wait_until  # noqa: E402
from tests.remoting_harness import SyncClient  # noqa: E402
from tests.test_ha import create_topic, start_namesrv, start_sync_pair, wait_caught_up  # noqa: E402

pytestmark = [pytest.mark.timeout(120)]

TOPIC = "hs-jobs"
GROUP = "hs-workers"
SHARE = {"kafkaEnable": True, "kafkaPort": 0, "kafkaShareHeartbeatIntervalMs": 300,
         "kafkaShareAutoOffsetReset": "earliest", "kafkaShareSessionTimeoutMs": 6000}


def _share_state(addr: str) -> dict:
    c = SyncClient(addr)
    try:
        r = c.request(RequestCode.GET_CONFIG_TABLE_EXT, {"name": "kafkaShareGroups"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        return json.loads(r.body)
    finally:
        c.close()


def _poll(c, want: int, ack, timeout: float = 30.0) -> list:
    """Poll until `want` records (explicit mode: each acknowledged with ack(record) before the next poll)."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for m in c.poll(0.2):
            if m.error() is None:
                out.append(m)
                c.acknowledge(m, ack(m))
    return out


def test_share_group_state_survives_failover_to_slave(tmp_path):
    started: list = []
    try:
        ns = start_namesrv(started, tmp_path)
        pm, ps, m, s = start_sync_pair(started, tmp_path, ns, **SHARE)
        create_topic(m["brokerAddr"], TOPIC, 1)
        prod = Producer({"bootstrap.servers": m["kafka"], "acks": "all", "message.timeout.ms": 15000})
        for i in range(4):
            prod.produce(TOPIC, f"job-{i}".encode(), partition=0)
        assert prod.flush(15) == 0

        c = ShareConsumer({"bootstrap.servers": m["kafka"], "group.id": GROUP,
                           "share.acknowledgement.mode": "explicit"})
        try:
            c.subscribe([TOPIC])
            got = _poll(c, 4, lambda x: AcknowledgeType.ACCEPT if x.offset() < 2 else AcknowledgeType.RELEASE)
            c.commit_sync()
            assert sorted(x.value() for x in got) == [f"job-{i}".encode() for i in range(4)]
        finally:
            c.close()
        # the master's state: start offset 2, records 2 and 3 available after one delivery
        want = {"start": 2, "next": 4, "records": {"2": [0, 1], "3": [0, 1]}}
        assert _share_state(m["brokerAddr"])["groups"][GROUP]["partitions"][f"{TOPIC}:0"] == want

        def synced() -> bool:
            g = _share_state(s["brokerAddr"])["groups"].get(GROUP)
            return g is not None and g["partitions"].get(f"{TOPIC}:0") == want
        wait_until(synced, 15, 0.1, what="the share-group state to reach the slave")
        wait_caught_up(m["brokerAddr"], s["brokerAddr"])
        os.kill(pm.pid, signal.SIGKILL)
        pm.wait(10)

        # the slave coordinates the group now: only the released records come back, delivery count 2
        c = ShareConsumer({"bootstrap.servers": s["kafka"], "group.id": GROUP,
                           "share.acknowledgement.mode": "explicit"})
        try:
            c.subscribe([TOPIC])
            got = _poll(c, 2, lambda x: AcknowledgeType.ACCEPT, timeout=45)
            extra = _poll(c, 1, lambda x: AcknowledgeType.ACCEPT, timeout=1.5)  # nothing else arrives
            c.commit_sync()
        finally:
            c.close()
        assert sorted((x.offset(), x.value(), x.delivery_count()) for x in got) == [
            (2, b"job-2", 2), (3, b"job-3", 2)]
        assert extra == []
        assert ps.poll() is None, "the slave died"
        assert "Traceback" not in (tmp_path / "s.log").read_text(errors="replace")
    finally:
        for p in reversed(started):
            stop_process(p, 10)
