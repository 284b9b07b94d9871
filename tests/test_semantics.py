"""Broker services of issue 5: delay levels, retry/DLQ send-back, half-message transactions."""
from __future__ import annotations

import time

import pytest

from rmq.broker.controller import BrokerController
from rmq.broker.retry import consumer_send_msg_back, resend_from_dlq
from rmq.broker.topic_config import PERM_READ
from rmq.common.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rmq.config import load_config
from rmq.store import Message


def make_controller(root, **extra) -> BrokerController:
    over = {"storePathRootDir": str(root), "mappedFileSizeCommitLog": 1 << 20, "maxMessageSize": 64 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 1000, "maxHashSlotNum": 1000, "maxIndexNum": 4000,
            "messageDelayLevel": "1s 2s 1s 1s 1s 1s 1s 1s 1s"}
    over.update(extra)
    c = BrokerController(load_config(None, over))
    c.start()
    return c


@pytest.fixture
def controller(tmp_path):
    c = make_controller(tmp_path / "store")
    yield c
    c.shutdown()


def _bodies(c, topic, qid=0):
    res = c.store.get_message("t", topic, qid, c.store.get_min_offset_in_queue(topic, qid), 1000, max_bytes=1 << 24)
    return res.decoded()


def _wait_for(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    return pred()


# ------------------------------------------------------------------------------------------- delay
def test_delayed_message_arrives_no_earlier_than_its_level_and_within_a_second(controller):
    c = controller
    c.create_topic("DelayT", 1)
    sent = time.time()
    r = c.put_messages([Message("DelayT", b"later", properties={"DELAY": "2", "TAGS": "TagD"})])
    assert r.ok
    # stored under SCHEDULE_TOPIC_XXXX queue 1 with the real topic kept aside
    sched = _bodies(c, "SCHEDULE_TOPIC_XXXX", 1)
    assert sched[0].properties["REAL_TOPIC"] == "DelayT" and sched[0].properties["REAL_QID"] == "0"
    unit = c.store.get_consume_queue("SCHEDULE_TOPIC_XXXX", 1).get_unit(0)
    assert unit[2] == sched[0].store_timestamp + 2000  # tag field = delivery time
    assert c.store.get_max_offset_in_queue("DelayT", 0) == 0
    got = _wait_for(lambda: _bodies(c, "DelayT"), 4.0)
    arrived = time.time()
    assert [m.body for m in got] == [b"later"]
    assert 2.0 <= got[0].store_timestamp / 1000 - sched[0].store_timestamp / 1000 <= 3.0
    assert arrived - sent <= 3.5
    assert "DELAY" not in got[0].properties and got[0].tags == "TagD"
    assert c.schedule_service.offsets.offset_table[2] == 1


def test_delayed_message_survives_a_broker_restart(tmp_path):
    c = make_controller(tmp_path / "s")
    c.create_topic("DelayR", 1)
    c.put_messages([Message("DelayR", b"across-restart", properties={"DELAY": "2"})])
    stored = _bodies(c, "SCHEDULE_TOPIC_XXXX", 1)[0].store_timestamp
    c.shutdown()
    time.sleep(0.3)
    c2 = make_controller(tmp_path / "s")
    try:
        got = _wait_for(lambda: _bodies(c2, "DelayR"), 5.0)
        assert [m.body for m in got] == [b"across-restart"]
        assert 2000 <= got[0].store_timestamp - stored <= 3000
        # delivered once: the progress is in delayOffset.json
        c2.shutdown()
        c3 = make_controller(tmp_path / "s")
        time.sleep(0.5)
        assert [m.body for m in _bodies(c3, "DelayR")] == [b"across-restart"]
        c3.shutdown()
    finally:
        c2.shutdown()


# ------------------------------------------------------------------------------------------- retry
def test_send_back_walks_the_retry_levels_then_one_dlq_entry(controller):
    c = controller
    c.create_topic("RetryT", 1)
    r = c.put_messages([Message("RetryT", b"poison", properties={"KEYS": "p1"})])
    offset = r.result.wrote_offset
    seen = []
    for expected_times in range(1, 4):
        res = consumer_send_msg_back(c, offset=offset, group="G1", delay_level=0, max_reconsume_times=3)
        assert res.ok and res.topic == "%RETRY%G1"
        sched = _bodies(c, "SCHEDULE_TOPIC_XXXX", 2 + expected_times - 1)  # level 3 + reconsumeTimes
        assert sched[-1].properties["DELAY"] == str(2 + expected_times)
        got = _wait_for(lambda: len(_bodies(c, "%RETRY%G1")) >= expected_times, 3.0)
        assert got
        m = _bodies(c, "%RETRY%G1")[-1]
        assert m.reconsume_times == expected_times and m.properties["RETRY_TOPIC"] == "RetryT"
        seen.append(m.reconsume_times)
        offset = m.commit_log_offset
    assert seen == [1, 2, 3]
    res = consumer_send_msg_back(c, offset=offset, group="G1", delay_level=0, max_reconsume_times=3)
    assert res.ok and res.topic == "%DLQ%G1"
    dlq = _bodies(c, "%DLQ%G1")
    assert [m.body for m in dlq] == [b"poison"] and dlq[0].reconsume_times == 4
    assert not c.get_topic("%DLQ%G1").perm & PERM_READ  # normal consumers cannot read it
    assert "ORIGIN_MESSAGE_ID" in dlq[0].properties
    assert resend_from_dlq(c, "G1") == 1
    assert [m.body for m in _bodies(c, "RetryT")] == [b"poison", b"poison"]
    assert resend_from_dlq(c, "G1") == 0  # resent once


def test_negative_delay_level_goes_straight_to_dlq(controller):
    c = controller
    c.create_topic("RetryN", 1)
    r = c.put_messages([Message("RetryN", b"x")])
    res = consumer_send_msg_back(c, offset=r.result.wrote_offset, group="G2", delay_level=-1)
    assert res.topic == "%DLQ%G2"


# ------------------------------------------------------------------------------------------- transactions
def test_half_messages_commit_rollback_and_stay_invisible(controller):
    c = controller
    c.create_topic("TxT", 2)
    svc = c.transaction_service
    a = svc.prepare(Message("TxT", b"commit-me", queue_id=1, properties={"PGROUP": "PG"}))
    b = svc.prepare(Message("TxT", b"roll-me-back", queue_id=1, properties={"PGROUP": "PG"}))
    assert a.ok and b.ok
    assert c.store.get_max_offset_in_queue("TxT", 1) == 0  # nothing visible yet
    assert svc.end(a.result.wrote_offset, TRANSACTION_COMMIT_TYPE, producer_group="PG").ok
    assert svc.end(b.result.wrote_offset, TRANSACTION_ROLLBACK_TYPE, producer_group="PG").ok
    got = _bodies(c, "TxT", 1)
    assert [m.body for m in got] == [b"commit-me"]
    assert got[0].sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_COMMIT_TYPE
    assert "REAL_TOPIC" not in got[0].properties and "TRAN_MSG" not in got[0].properties
    ops = _bodies(c, "RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert sorted(int(m.body) for m in ops) == [0, 1] and all(m.tags == "d" for m in ops)
    assert svc.end(a.result.wrote_offset, TRANSACTION_COMMIT_TYPE).remark == "already ended"
    assert [m.body for m in _bodies(c, "TxT", 1)] == [b"commit-me"]  # not committed twice
    assert not svc.end(12345678, TRANSACTION_COMMIT_TYPE).ok


def test_unknown_outcome_is_resolved_by_check_back(tmp_path):
    now = [10_000_000]
    c = make_controller(tmp_path / "s", transactionTimeout=6000)
    try:
        c.create_topic("TxC", 1)
        checks = []
        svc = c.transaction_service
        svc.clock = lambda: now[0]
        svc.checker = lambda group, ext: checks.append((group, ext)) or True
        r = svc.prepare(Message("TxC", b"unknown", properties={"PGROUP": "PGC"}, born_timestamp=now[0]))
        assert svc.end(r.result.wrote_offset, TRANSACTION_NOT_TYPE).ok  # UNKNOWN: nothing happens
        assert svc.check() == 0  # younger than transactionTimeout
        now[0] += 7000
        assert svc.check() == 1
        group, ext = checks[0]
        assert group == "PGC" and ext.properties["TRANSACTION_CHECK_TIMES"] == "1"
        # the producer answers the check with COMMIT for the half message it was shown
        assert svc.end(ext.commit_log_offset, TRANSACTION_COMMIT_TYPE, producer_group="PGC").ok
        assert [m.body for m in _bodies(c, "TxC")] == [b"unknown"]
        now[0] += 60_000
        assert svc.check() == 0  # resolved: no more checks
    finally:
        c.shutdown()


def test_half_message_is_discarded_after_transaction_check_max(tmp_path):
    now = [20_000_000]
    c = make_controller(tmp_path / "s", transactionTimeout=1000, transactionCheckMax=3)
    try:
        c.create_topic("TxD", 1)
        svc = c.transaction_service
        svc.clock = lambda: now[0]
        calls = []
        svc.checker = lambda group, ext: calls.append(ext) or True
        svc.prepare(Message("TxD", b"never-answered", properties={"PGROUP": "PGD"}, born_timestamp=now[0]))
        for _ in range(5):
            now[0] += 2000
            svc.check()
        assert len(calls) == 3  # transactionCheckMax check-backs
        assert [m.body for m in svc.discarded] == [b"never-answered"]
        assert c.store.get_max_offset_in_queue("TxD", 0) == 0
    finally:
        c.shutdown()
