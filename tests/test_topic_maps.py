"""The Kafka bridge's per-topic maps and caches (issue 24): topic ids, the visible topic list and
Metadata entries follow the topic table (create, update, delete, an HA slave's whole-table sync)
while an unchanged table is never walked again, whatever the requests ask for."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_bridge.bridge import Connection
from kafka_bridge.handlers import metadata
from kafka_bridge.protocol import error_codes as ec

from .test_native import _bridge, scratch  # noqa: F401 - scratch is a fixture


@pytest.fixture
def bridged(scratch):  # noqa: F811
    c, bridge = _bridge(scratch(), None)
    loop = asyncio.new_event_loop()
    yield c, bridge, loop
    loop.close()
    bridge.close()
    c.shutdown()


def _meta(loop, bridge, topics, version=12):
    body = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False}
    res = loop.run_until_complete(metadata.handle_metadata(bridge, Connection(("127.0.0.1", 1)), version, body))
    return {t["name"]: (t["error_code"], len(t["partitions"]), t["topic_id"]) for t in res["topics"]}


def test_unknown_ids_do_not_walk_the_table_and_changes_do_once(bridged):
    c, bridge, _loop = bridged
    for i in range(200):
        c.create_topic(f"T{i}", 1)
    assert bridge.topic_by_id(bridge.topic_id("T5")) == "T5"
    syncs = bridge.topic_syncs
    for _ in range(100):  # a client fetching an id no topic has (a deleted topic, a bad id)
        assert bridge.topic_by_id(uuid.uuid4()) is None
        assert bridge.topic_by_id(bridge.topic_id("T199")) == "T199"
    assert bridge.topic_syncs == syncs
    c.delete_topic("T5")
    assert bridge.topic_by_id(bridge.topic_id("T5")) is None
    assert bridge.topic_by_id(bridge.topic_id("T6")) == "T6"
    assert bridge.topic_syncs == syncs + 1
    c.create_topic("T5", 2)
    assert bridge.topic_by_id(bridge.topic_id("T5")) == "T5"
    assert bridge.topic_syncs == syncs + 2


def test_topic_ids_are_uuid5_of_the_name(bridged):
    _c, bridge, _loop = bridged
    ns = uuid.UUID("6f1d3c52-8a51-4c1e-9a3e-52b0c1a0e7d1")
    for name in ("K", "orders", "ü-topic"):
        assert bridge.topic_id(name) == uuid.uuid5(ns, name)
        assert bridge.topic_id(name) == bridge.topic_id(name)


def test_metadata_follows_create_update_and_delete(bridged):
    c, bridge, loop = bridged
    c.create_topic("A", 2)
    c.create_topic("B", 3)
    every = _meta(loop, bridge, None)
    assert every["A"][:2] == (ec.NONE, 2) and every["B"][:2] == (ec.NONE, 3) and every["A"][2] == bridge.topic_id("A")
    assert _meta(loop, bridge, None) == every  # from the cache, the same answer
    c.create_topic("C", 1)
    assert _meta(loop, bridge, None)["C"][:2] == (ec.NONE, 1)
    assert _meta(loop, bridge, ["C"])["C"][:2] == (ec.NONE, 1)
    c.create_topic("A", 5)  # more partitions: the cached entry must not survive
    assert _meta(loop, bridge, ["A"])["A"][:2] == (ec.NONE, 5)
    assert _meta(loop, bridge, None)["A"][:2] == (ec.NONE, 5)
    c.delete_topic("B")
    assert "B" not in _meta(loop, bridge, None)
    assert _meta(loop, bridge, ["B"])["B"][0] == ec.UNKNOWN_TOPIC_OR_PARTITION
    assert "B" not in bridge.visible_topics() and "C" in bridge.visible_topics()


def test_metadata_answers_are_not_shared_lists(bridged):
    """A response's topic list is the caller's: filtering it (the authorizer does) leaves the cache whole."""
    c, bridge, loop = bridged
    c.create_topic("A", 1)
    body = {"topics": None, "allow_auto_topic_creation": False}
    conn = Connection(("127.0.0.1", 1))
    first = loop.run_until_complete(metadata.handle_metadata(bridge, conn, 12, body))
    first["topics"].clear()
    again = loop.run_until_complete(metadata.handle_metadata(bridge, conn, 12, body))
    assert "A" in {t["name"] for t in again["topics"]}
    assert bridge.visible_topics() is not bridge.visible_topics()


def test_a_whole_table_replacement_is_followed(bridged):
    """An HA slave replaces the table and its dataVersion from the master's (rmq/server/ha.py)."""
    c, bridge, loop = bridged
    c.create_topic("Old", 1)
    assert bridge.topic_by_id(bridge.topic_id("Old")) == "Old"
    assert "Old" in _meta(loop, bridge, None)
    tcm = c.topic_config_manager
    from rmq.broker.topic_config import TopicConfig
    with tcm.lock:
        tcm.table = {n: tc for n, tc in tcm.table.items() if n != "Old"} | {"New": TopicConfig("New", 4, 4)}
        tcm.data_version = {"timestamp": 1, "counter": 99}
    assert bridge.topic_by_id(bridge.topic_id("Old")) is None
    assert bridge.topic_by_id(bridge.topic_id("New")) == "New"
    every = _meta(loop, bridge, None)
    assert "Old" not in every and every["New"][:2] == (ec.NONE, 4)


def test_consumequeue_flush_round_skips_only_queues_with_nothing_to_flush(bridged):
    """flush_logics walks every queue of every topic each second; an idle queue is passed over,
    a written one is flushed (least_pages 0: whatever it holds)."""
    from rmq.store import Message
    c, _bridge_, _loop = bridged
    store = c.store
    for i in range(30):
        c.create_topic(f"Idle{i}", 2)
    c.create_topic("Busy", 2)
    store._allocator.barrier().wait(30)
    for i in range(10):
        assert store.put_message(Message("Busy", b"m%d" % i, queue_id=i % 2)).ok
    assert store.wait_dispatched(5)
    busy = [store.find_consume_queue("Busy", q).mfq.files[-1] for q in (0, 1)]
    assert all(f.wrote_position > f.flushed_position for f in busy)
    store.flush_logics(0)
    assert all(f.wrote_position == f.flushed_position > 0 for f in busy)
    idle = store.find_consume_queue("Idle3", 1).mfq.files
    assert idle and idle[-1].wrote_position == idle[-1].flushed_position == 0
