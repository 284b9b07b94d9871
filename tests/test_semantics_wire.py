"""Issue 5 over the wire with the Python client (SPEC §4-§8, §10): delay levels (also across a
broker restart), retry then one dead letter (and resendDLQ), transactions (commit, rollback,
check-back, discard after transactionCheckMax), tag and SQL92 filters, orderly consumption
(global order with suspend and dead letters; partition order across a rebalance and a consumer
crash) and broadcasting.

Real listeners on 127.0.0.1 with ephemeral ports: a NameServer + broker hosted in this process
(tests/remoting_harness.py) and, for the restart test, a subprocess ``rmq up``.  The broker runs
with a short delay table and short transaction timings so the suite takes about a minute:

    messageDelayLevel        1s 2s 3s 1s 1s ... (18 levels: retries use levels 3, 4, 5 ...)
    transactionTimeout       1000 ms (RocketMQ 4.x: 6000; SPEC: 60 s)
    transactionCheckInterval 500 ms  (RocketMQ: 60 s)
    transactionCheckMax      3       (RocketMQ: 15)
    rebalanceLockMaxLiveTime 3000 ms (RocketMQ: 60 s) — with clients renewing every 0.5 s and
                                     trusting a lock for 2 s, the same ordering as RocketMQ's
                                     20 s renew < 30 s client trust < 60 s broker expiry.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rmq.client import (
    ClientConfig,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageModel,
    MQAdmin,
    Producer,
    PushConsumer,
    SelectMessageQueueByHash,
    TransactionListener,
    TransactionProducer,
)
from rmq.common.message import decode_message_id
from rmq.store.inspect import inspect_store
from tests.remoting_harness import Cluster

pytestmark = pytest.mark.timeout(120)

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELAY_TABLE = "1s 2s 3s " + " ".join(["1s"] * 15)           # 18 levels
DELAY_S = [float(x[:-1]) for x in DELAY_TABLE.split()]      # level n -> DELAY_S[n - 1]
BROKER_CONF = dict(messageDelayLevel=DELAY_TABLE, enablePropertyFilter=True, transactionTimeout=1000,
                   transactionCheckInterval=500, transactionCheckMax=3, rebalanceLockMaxLiveTime=3000)
#: RocketMQ promises "no earlier than the level"; this suite also asks for "within 1 s after it"
LATE_S = 1.0
CLOCK_S = 0.002  # born and store timestamps are whole milliseconds


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout}s (last: {last!r})")


def client_config(name: str) -> ClientConfig:
    """Fast rebalance and offset persistence, a stable client id (127.0.0.1@name)."""
    return ClientConfig(client_ip="127.0.0.1", instance_name=name, rebalance_interval=1.0,
                        persist_consumer_offset_interval=1.0)


class Recorder:
    """Thread-safe list of what a listener saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[dict] = []

    def add(self, **rec) -> None:
        with self.lock:
            self.items.append(rec)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.items)

    def __len__(self) -> int:
        with self.lock:
            return len(self.items)


def record_of(m, who: str = "") -> dict:
    return {"who": who, "t": time.time(), "topic": m.topic, "q": m.queue_id, "o": m.queue_offset,
            "body": m.body.decode(), "rt": m.reconsume_times, "born": m.born_timestamp / 1000.0,
            "stored": m.store_timestamp / 1000.0,
            "props": dict(m.properties), "msg_id": m.msg_id}


def recording_listener(rec: Recorder, who: str = ""):
    def listener(msgs):
        for m in msgs:
            rec.add(**record_of(m, who))
        return ConsumeStatus.CONSUME_SUCCESS
    return listener


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wire")
    cluster = Cluster(tmp / "servers")
    ctrl, srv, addr = cluster.add_broker("broker-a", **BROKER_CONF)
    cluster.wait_registered("broker-a")
    admin = MQAdmin(cluster.namesrv_addr)
    producer = Producer("wire_pg", cluster.namesrv_addr, config=client_config("wire-producer"))
    producer.start()
    yield {"cluster": cluster, "ns": cluster.namesrv_addr, "ctrl": ctrl, "admin": admin, "producer": producer,
           "tmp": tmp, "store_root": ctrl.store.root}
    producer.shutdown()
    admin.close()
    cluster.close()


_seq = iter(range(10_000))


def new_topic(env, prefix: str, queues: int) -> str:
    t = f"{prefix}{next(_seq)}"
    env["admin"].create_topic(t, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
    env["admin"].wait_for_route(t, queues=queues)
    return t


def push_consumer(env, group: str, topic: str, name: str, listener, *, expression: str = "*",
                  expression_type: str = "TAG", orderly: bool = False, **options) -> PushConsumer:
    c = PushConsumer(group, env["ns"], config=client_config(name),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **options)
    c.subscribe(topic, expression, expression_type)
    if orderly:
        c.register_message_listener_orderly(listener)
    else:
        c.register_message_listener(listener)
    c.start()
    return c


# =============================================================================== §6 delay
def test_delay_levels_arrive_no_earlier_than_their_level_and_within_a_second(env):
    topic = new_topic(env, "DelayW", 2)
    rec = Recorder()

    def listener(msgs):
        for m in msgs:
            rec.add(**record_of(m))
        return ConsumeStatus.CONSUME_SUCCESS
    c = push_consumer(env, "cg_delay_w", topic, "delay", listener)
    try:
        wait_until(lambda: len(c.assigned_message_queues(topic)) == 2, 10, "consumer owns the queues")
        sent = {}
        for level in (3, 2, 1, 0):
            before_ms = int(time.time() * 1000)
            r = env["producer"].send(Message(topic, f"L{level}", keys=f"k{level}", delay_time_level=level))
            sent[f"L{level}"] = (level, r, before_ms)
        # before anything is due: the delayed ones sit in SCHEDULE_TOPIC_XXXX, queueId = level - 1,
        # their consumequeue tag field holding the delivery time (rmq store inspect, read-only, live)
        rep = inspect_store(env["store_root"], "consumequeue", topic="SCHEDULE_TOPIC_XXXX", limit=None)
        units = {(q["queueId"], u["commitLogOffset"]): u["tagsCode"]
                 for q in rep["consumequeue"]["queues"] for u in q["units"]}
        for body, (level, r, before_ms) in sent.items():
            if level == 0:
                continue
            _, phy = decode_message_id(r.offset_msg_id)
            due = units.get((level - 1, phy))
            assert due is not None, f"{body} not in SCHEDULE_TOPIC_XXXX queue {level - 1}"
            level_ms = DELAY_S[level - 1] * 1000
            assert level_ms <= due - before_ms <= level_ms + 1000, f"{body}: due {due - before_ms:.0f} ms after send"
        wait_until(lambda: len(rec) >= 4, 10, "4 deliveries")
        time.sleep(0.3)
    finally:
        c.shutdown()
    got = {r["body"]: r for r in rec.snapshot()}
    assert sorted(got) == ["L0", "L1", "L2", "L3"] and len(rec) == 4
    for body, (level, _, _) in sent.items():
        r = got[body]
        # when the broker put it on its own topic (the consumer's receipt adds the client's lag, which
        # a loaded machine stretches): never before its level's time, and not much after
        waited = r["stored"] - r["born"]
        want = DELAY_S[level - 1] if level else 0.0
        assert want - CLOCK_S <= waited <= want + LATE_S, f"{body}: put {waited:.3f}s after send, level wants {want}s"
        assert r["t"] >= r["born"] + want - CLOCK_S
        assert "DELAY" not in r["props"] and r["topic"] == topic and r["props"]["KEYS"] == f"k{level}"


class RmqUp:
    """A subprocess ``rmq up`` on ephemeral ports; ``addrs`` from its ready file."""

    def __init__(self, config: str, data: str, log_path: str) -> None:
        self.config, self.data, self.log_path = config, data, log_path
        self.proc: subprocess.Popen | None = None
        self.addrs: dict = {}

    def start(self, timeout: float = 30.0) -> dict:
        ready = self.data + ".ready.json"
        if os.path.exists(ready):
            os.unlink(ready)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([PY, "-c", "from rmq.cli import main; main()", "up", "--config", self.config,
                                      "--data", self.data, "--namesrv-port", "0", "--remoting-port", "0",
                                      "--kafka-port", "0", "--ready-file", ready],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            assert self.proc.poll() is None, f"rmq up exited: {open(self.log_path).read()[-2000:]}"
            assert time.monotonic() < deadline, "rmq up did not become ready"
            time.sleep(0.05)
        with open(ready) as fh:
            self.addrs = json.load(fh)
        return self.addrs

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        rc = self.proc.returncode
        self.proc = None
        return rc


def test_delay_survives_a_broker_restart(tmp_path):
    """Delayed messages stored, broker stopped (SIGTERM) and restarted on the same --data dir
    before they are due: they still arrive at their level's time, once each."""
    levels = "1s 2s 3s 4s 6s " + " ".join(["1s"] * 13)
    conf = tmp_path / "broker.yaml"
    conf.write_text(f'messageDelayLevel: "{levels}"\n')
    data = str(tmp_path / "data")
    up = RmqUp(str(conf), data, str(tmp_path / "broker.log"))
    up.start()
    p = None
    c = None
    try:
        p = Producer("restart_pg", up.addrs["namesrv"], config=client_config("restart-producer"))
        p.start()
        sent = []
        for level in (4, 5):
            r = p.send(Message("DelayRestart", f"level{level}", keys=f"r{level}", delay_time_level=level))
            sent.append((level, r))
        p.shutdown()
        p = None
        assert up.stop() == 0, open(tmp_path / "broker.log").read()[-2000:]
        with open(os.path.join(data, "config", "delayOffset.json")) as fh:
            before = json.load(fh)["offsetTable"]
        assert before.get("4", 0) == 0 and before.get("5", 0) == 0  # nothing delivered yet
        restarted_at = time.time()
        up.start()
        rec = Recorder()

        def listener(msgs):
            for m in msgs:
                rec.add(**record_of(m))
            return ConsumeStatus.CONSUME_SUCCESS
        c = PushConsumer("restart_cg", up.addrs["namesrv"], config=client_config("restart-consumer"),
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe("DelayRestart", "*")
        c.register_message_listener(listener)
        c.start()
        wait_until(lambda: len(rec) >= 2, 15, "both delayed messages after the restart")
        time.sleep(1.0)  # nothing delivered twice
        got = rec.snapshot()
        assert sorted(r["body"] for r in got) == ["level4", "level5"]
        first_due = min(r["born"] for r in got) + 4.0
        assert restarted_at < first_due, "the restart took longer than the delay: test is void"
        for r in got:
            level = int(r["body"][5:])
            want = DELAY_S_RESTART[level - 1]
            waited = r["stored"] - r["born"]                  # put on its own topic (see test above)
            assert want - CLOCK_S <= waited <= want + LATE_S, f"{r['body']}: put {waited:.3f}s after send, level wants {want}s"
    finally:
        if c is not None:
            c.shutdown()
        if p is not None:
            p.shutdown()
        assert up.stop() == 0
    with open(os.path.join(data, "config", "delayOffset.json")) as fh:
        after = json.load(fh)["offsetTable"]
    assert after["4"] == 1 and after["5"] == 1  # progress kept in delayOffset.json


DELAY_S_RESTART = [1.0, 2.0, 3.0, 4.0, 6.0] + [1.0] * 13


# =============================================================================== §7 retry and DLQ
def test_failing_consumer_sees_exactly_the_retry_sequence_then_one_dlq_entry(env):
    topic = new_topic(env, "RetryW", 1)
    group = "cg_retry_w"
    rec = Recorder()
    succeed = threading.Event()

    def listener(msgs):
        for m in msgs:
            rec.add(**record_of(m))
        return ConsumeStatus.CONSUME_SUCCESS if succeed.is_set() else ConsumeStatus.RECONSUME_LATER
    c = push_consumer(env, group, topic, "retry", listener, max_reconsume_times=3)
    try:
        wait_until(lambda: c.assigned_message_queues(f"%RETRY%{group}"), 10, "retry topic subscribed")
        r = env["producer"].send(Message(topic, "poison", keys="order-13"))
        wait_until(lambda: len(rec) >= 4, 15, "the original delivery and 3 retries")
        time.sleep(2.5)  # levels 6+ are 1 s: a 5th delivery would show up by now
        got = rec.snapshot()
        assert [g["rt"] for g in got] == [0, 1, 2, 3]
        assert {g["msg_id"] for g in got} == {r.msg_id} and {g["topic"] for g in got} == {topic}
        for prev, cur in zip(got, got[1:]):
            level = 3 + prev["rt"]
            gap = cur["t"] - prev["t"]
            assert DELAY_S[level - 1] <= gap <= DELAY_S[level - 1] + 1.5, \
                f"retry {cur['rt']} came {gap:.3f}s after the failure; level {level} is {DELAY_S[level - 1]}s"
        # one dead letter, found through its key in %DLQ%group
        admin = env["admin"]
        status = {s.mq.queueId: s.max_offset for s in admin.topic_status(f"%DLQ%{group}")}
        assert sum(status.values()) == 1
        dead = admin.query_msg_by_key(f"%DLQ%{group}", "order-13")
        assert len(dead) == 1 and dead[0].body == b"poison"
        assert dead[0].properties["RETRY_TOPIC"] == topic and dead[0].reconsume_times == 4
        assert dead[0].properties["ORIGIN_MESSAGE_ID"]
        # resendDLQ: back to %RETRY%group, consumed again (now succeeding), once
        succeed.set()
        rows = admin.resend_dlq(group)
        assert [x["resent"] for x in rows] == [1] and rows[0]["destination"] == f"%RETRY%{group}"
        wait_until(lambda: len(rec) >= 5, 10, "the resent dead letter")
        assert admin.resend_dlq(group)[0]["resent"] == 0
        time.sleep(0.5)
    finally:
        c.shutdown()
    got = rec.snapshot()
    assert len(got) == 5 and got[4]["body"] == "poison" and got[4]["topic"] == topic and got[4]["rt"] == 0


# =============================================================================== §8 transactions
class TxListener(TransactionListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checks: list[tuple[str, float, str | None]] = []
        self.executed: list[tuple[str, str]] = []

    def execute_local_transaction(self, msg, arg):
        with self.lock:
            self.executed.append((msg.body.decode(), threading.current_thread().name))
        return arg

    def check_local_transaction(self, msg):
        body = msg.body.decode()
        with self.lock:
            self.checks.append((body, time.time(), msg.transaction_id))
        return {"check-commit": LocalTransactionState.COMMIT_MESSAGE,
                "check-rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(body, LocalTransactionState.UNKNOW)

    def check_count(self, body: str) -> int:
        with self.lock:
            return sum(1 for b, _, _ in self.checks if b == body)


def test_transaction_commit_rollback_check_back_and_discard(env):
    topic = new_topic(env, "TxW", 2)
    admin = env["admin"]
    half_before = sum(s.max_offset for s in admin.topic_status("RMQ_SYS_TRANS_HALF_TOPIC")) \
        if "RMQ_SYS_TRANS_HALF_TOPIC" in admin.topic_list() else 0
    rec = Recorder()

    def listener(msgs):
        for m in msgs:
            rec.add(**record_of(m))
        return ConsumeStatus.CONSUME_SUCCESS
    c = push_consumer(env, "cg_tx_w", topic, "tx-consumer", listener)
    tl = TxListener()
    tp = TransactionProducer("tx_pg_w", env["ns"], transaction_listener=tl, config=client_config("tx-producer"))
    tp.start()
    try:
        wait_until(lambda: len(c.assigned_message_queues(topic)) == 2, 10, "consumer owns the queues")
        S = LocalTransactionState
        plan = [("commit", S.COMMIT_MESSAGE), ("rollback", S.ROLLBACK_MESSAGE), ("check-commit", S.UNKNOW),
                ("check-rollback", S.UNKNOW), ("never", S.UNKNOW)]
        sent_at = time.time()
        results = {body: tp.send_message_in_transaction(Message(topic, body, keys=body), arg=state)
                   for body, state in plan}
        assert all(r.send_status.value == "SEND_OK" for r in results.values())
        assert {b: r.local_transaction_state for b, r in results.items()} == dict(plan)
        assert all(r.transaction_id == r.msg_id for r in results.values())
        # the local transaction ran in the caller's thread, as TransactionMQProducer does
        assert {t for _, t in tl.executed} == {threading.current_thread().name}
        wait_until(lambda: any(r["body"] == "commit" for r in rec.snapshot()), 5, "the committed message")
        assert "check-commit" not in {r["body"] for r in rec.snapshot()}  # half messages stay invisible
        wait_until(lambda: any(r["body"] == "check-commit" for r in rec.snapshot()), 10,
                   "the message committed by check-back")
        wait_until(lambda: tl.check_count("never") >= 3, 10, "transactionCheckMax check-backs")
        time.sleep(2.0)  # four more check intervals: a discarded half message is not checked again
    finally:
        tp.shutdown()
        c.shutdown()
    assert sorted(r["body"] for r in rec.snapshot()) == ["check-commit", "commit"]
    assert tl.check_count("never") == 3 and tl.check_count("check-commit") == 1 and tl.check_count("check-rollback") == 1
    assert tl.check_count("commit") == 0 and tl.check_count("rollback") == 0
    first_checks = {}
    for body, t, tid in tl.checks:
        first_checks.setdefault(body, t)
        assert tid == results[body].transaction_id
    for body, t in first_checks.items():
        assert t - sent_at >= 1.0, f"{body} checked {t - sent_at:.2f}s after the send (transactionTimeout 1 s)"
    committed = {r["body"]: r for r in rec.snapshot()}
    assert committed["check-commit"]["props"].get("TRAN_PREPARED_QUEUE_OFFSET") is not None
    # every half message (the 5 sent and the re-puts of each check) has its op message: none is pending
    half = sum(s.max_offset for s in admin.topic_status("RMQ_SYS_TRANS_HALF_TOPIC")) - half_before
    assert half == 5 + 5  # 5 sent + 1 re-put per check-back (3 + 1 + 1)
    ops = []
    for s in admin.topic_status("RMQ_SYS_TRANS_OP_HALF_TOPIC"):
        pos = 0
        for _ in range(100):
            pr = admin.pull(s.mq, pos, 32)
            ops += [int(m.body) for m in pr.msg_found_list if m.properties.get("TAGS") == "d"]
            if pr.pull_status.value != "FOUND":
                break
            pos = pr.next_begin_offset
    total_half = sum(st.max_offset for st in admin.topic_status("RMQ_SYS_TRANS_HALF_TOPIC"))
    assert set(range(total_half)) <= set(ops)


# =============================================================================== §5 filters
def test_tag_and_sql92_filters_deliver_exactly_the_matching_set(env):
    topic = new_topic(env, "FilterW", 2)
    msgs = []
    for i in range(30):
        tag = ("TagA", "TagB", "TagC")[i % 3]
        props = {"a": str(i)}
        if i % 4:
            props["color"] = "red" if i % 2 else "blue"
        msgs.append(Message(topic, f"m{i}", tags=tag, properties=props))
    msgs.append(Message(topic, "aa", tags="Aa"))   # "Aa" and "BB" share a Java hashCode:
    msgs.append(Message(topic, "bb", tags="BB"))   # the broker's pre-filter passes both
    for m in msgs:
        env["producer"].send(m)

    def props_of(i):
        return msgs[i].properties
    expect = {
        "tags": ("TAG", "TagA || TagB", {f"m{i}" for i in range(30) if i % 3 in (0, 1)}),
        "collision": ("TAG", "Aa", {"aa"}),
        "sql_range": ("SQL92", "a BETWEEN 5 AND 14 AND color = 'red'",
                      {f"m{i}" for i in range(5, 15) if props_of(i).get("color") == "red"}),
        "sql_null_in": ("SQL92", "color IS NULL OR (color IN ('red', 'green') AND a > 20)",
                        {f"m{i}" for i in range(30) if "color" not in props_of(i)
                         or (props_of(i)["color"] == "red" and i > 20)} | {"aa", "bb"}),
        "sql_not": ("SQL92", "NOT (a < 25) AND color <> 'blue'",
                    {f"m{i}" for i in range(25, 30) if props_of(i).get("color") == "red"}),
    }
    recs = {name: Recorder() for name in expect}
    consumers = {}
    try:
        for name, (etype, expr, _) in expect.items():
            consumers[name] = push_consumer(env, f"cg_filter_{name}", topic, f"filter-{name}",
                                            recording_listener(recs[name]), expression=expr, expression_type=etype)
        # every matching message arrives (the wrong ones would arrive with them: all were sent
        # before the consumers started), then a grace second for anything extra
        wait_until(lambda: all({r["body"] for r in recs[n].snapshot()} >= want for n, (_, _, want) in expect.items()),
                   15, "every group got its matching messages")
        time.sleep(1.0)
    finally:
        for c in consumers.values():
            c.shutdown()
    for name, (_, expr, want) in expect.items():
        got = [r["body"] for r in recs[name].snapshot()]
        assert sorted(got) == sorted(want), f"{name} {expr!r}"  # exactly the matching set, once each


# =============================================================================== §4 orderly
def test_global_order_on_one_queue_with_suspend_and_dead_letter(env):
    """One queue = global order.  Two orderly consumers: one holds the queue's lock and consumes
    in order; SUSPEND_CURRENT_QUEUE_A_MOMENT retries the same message after 1 s before anything
    behind it; a message failing past maxReconsumeTimes goes to %DLQ%group and the queue moves on."""
    topic = new_topic(env, "GlobalW", 1)
    group = "cg_global_w"
    rec = Recorder()

    def make(name):
        def listener(msgs, ctx):
            for m in msgs:
                rec.add(**record_of(m, name))
            body = msgs[0].body.decode()
            if body == "poison" or (body == "m7" and msgs[0].reconsume_times < 2):
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS
        return listener
    cs = [push_consumer(env, group, topic, f"global-{i}", make(f"global-{i}"), orderly=True,
                        max_reconsume_times=2, rebalance_lock_interval=0.5, rebalance_lock_max_live_time=2.0)
          for i in range(2)]
    try:
        wait_until(lambda: sum(len(c.assigned_message_queues(topic)) for c in cs) == 1, 10, "one owner")
        bodies = [f"m{i}" for i in range(20)]
        bodies.insert(12, "poison")
        for b in bodies:
            env["producer"].send(Message(topic, b, keys=b))
        wait_until(lambda: any(r["body"] == "m19" for r in rec.snapshot()), 20, "the last message")
        time.sleep(0.3)
    finally:
        for c in cs:
            c.shutdown()
    got = rec.snapshot()
    assert len({r["who"] for r in got}) == 1  # the lock holder consumed everything
    stream = [r["body"] for r in got]
    assert stream == bodies[:7] + ["m7"] * 3 + bodies[8:12] + ["poison"] * 3 + bodies[13:]
    attempts = [r for r in got if r["body"] == "m7"]
    assert [r["rt"] for r in attempts] == [0, 1, 2]
    assert all(b["t"] - a["t"] >= 0.95 for a, b in zip(attempts, attempts[1:]))  # suspendCurrentQueueTimeMillis
    dead = env["admin"].query_msg_by_key(f"%DLQ%{group}", "poison")
    assert len(dead) == 1 and dead[0].properties["RETRY_TOPIC"] == topic


ORDERLY_CHILD = textwrap.dedent('''
    import json, os, sys, time, threading
    from rmq.client import ClientConfig, ConsumeFromWhere, ConsumeOrderlyStatus, PushConsumer
    ns, group, topic, name, out_path, stop_path = sys.argv[1:7]
    fh = open(out_path, "a", buffering=1)   # line-buffered: every record reaches the OS at once
    lock = threading.Lock()
    def listener(msgs, ctx):
        for m in msgs:
            rec = {"who": name, "t": time.time(), "q": m.queue_id, "o": m.queue_offset, "body": m.body.decode()}
            with lock:
                fh.write(json.dumps(rec) + "\\n")
        time.sleep(0.004)
        return ConsumeOrderlyStatus.SUCCESS
    c = PushConsumer(group, ns, config=ClientConfig(client_ip="127.0.0.1", instance_name=name, rebalance_interval=1.0,
                                                    persist_consumer_offset_interval=1.0),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     rebalance_lock_interval=0.5, rebalance_lock_max_live_time=2.0)
    c.subscribe(topic, "*")
    c.register_message_listener_orderly(listener)
    c.start()
    print("READY", flush=True)
    deadline = time.time() + 90
    while time.time() < deadline and not os.path.exists(stop_path):
        time.sleep(0.05)
    c.shutdown()
    os._exit(0)
''')


def check_queue_order(recs: list[dict], max_offset: int) -> list[str]:
    """Per queue, ordered by consume time: each owner's stretch of the queue is consecutive
    offsets; a new owner starts at most one past the highest offset consumed before (no gap),
    possibly lower — the re-delivery RocketMQ allows after a handover, from the last committed
    offset; the queue ends fully consumed.  Returns the owners in order."""
    runs: list[tuple[str, list[int]]] = []
    for r in sorted(recs, key=lambda r: r["t"]):
        if runs and runs[-1][0] == r["who"]:
            runs[-1][1].append(r["o"])
        else:
            runs.append((r["who"], [r["o"]]))
    high = -1
    for who, offs in runs:
        assert offs == list(range(offs[0], offs[0] + len(offs))), f"{who} consumed out of order: {offs}"
        assert offs[0] <= high + 1, f"{who} skipped offsets {high + 1}..{offs[0] - 1}"
        high = max(high, offs[-1])
    assert high == max_offset - 1, f"consumed up to {high}, queue holds {max_offset}"
    return [who for who, _ in runs]


def test_partition_order_across_a_rebalance_and_a_consumer_crash(env, tmp_path):
    """Keyed sequences (SelectMessageQueueByHash) on 4 queues, orderly consumers in
    subprocesses: A and B start; C joins (rebalance: B hands a queue to C after unlocking it);
    A is killed with SIGKILL (its broker locks stay until rebalanceLockMaxLiveTime, then B takes
    its queues).  Every queue is consumed in offset order by one consumer at a time; after a
    handover the new owner may repeat messages the old one consumed but had not committed yet
    (at-least-once — RocketMQ allows exactly these duplicates), never skip one."""
    topic = new_topic(env, "PartW", 4)
    group = "cg_part_w"
    ctrl = env["ctrl"]
    script = tmp_path / "child.py"
    script.write_text(ORDERLY_CHILD)
    stop = tmp_path / "stop"
    procs: dict[str, subprocess.Popen] = {}
    outs: dict[str, str] = {}

    def spawn(name):
        outs[name] = str(tmp_path / f"{name}.jsonl")
        procs[name] = subprocess.Popen([PY, str(script), env["ns"], group, topic, name, outs[name], str(stop)],
                                       stdout=subprocess.PIPE, stderr=open(tmp_path / f"{name}.err", "w"),
                                       text=True, cwd=ROOT)
        line = procs[name].stdout.readline()
        assert line.strip() == "READY", open(tmp_path / f"{name}.err").read()[-2000:]

    def owners():
        table = ctrl.rebalance_lock_manager.table.get(group, {})
        return {k[2]: e.client_id.split("@")[1] for k, e in list(table.items()) if k[0] == topic}

    n_keys, per_key = 8, 45
    sent: list[tuple[str, int]] = []
    stop_sending = threading.Event()

    def produce():
        p = env["producer"]
        for seq in range(per_key):
            for k in range(n_keys):
                if stop_sending.is_set():
                    return
                p.send_orderly(Message(topic, f"K{k}:{seq}", keys=f"K{k}"), SelectMessageQueueByHash(), k)
                sent.append((f"K{k}", seq))
            time.sleep(0.15)
    sender = threading.Thread(target=produce, name="keyed-producer")
    try:
        spawn("A")
        spawn("B")
        wait_until(lambda: sorted(owners().values()) == ["A", "A", "B", "B"], 15, "A and B lock two queues each")
        sender.start()
        time.sleep(1.5)
        spawn("C")     # averagely over A, B, C: A {0,1}, B {2}, C {3}
        wait_until(lambda: owners() == {0: "A", 1: "A", 2: "B", 3: "C"}, 15, "C took queue 3 from B")
        time.sleep(1.0)
        procs["A"].send_signal(signal.SIGKILL)  # no unlock, no offset commit
        procs["A"].wait(5)
        wait_until(lambda: owners() == {0: "B", 1: "B", 2: "C", 3: "C"}, 20, "B and C took over after the crash")
        sender.join(30)
        assert not sender.is_alive()
        maxes = {s.mq.queueId: s.max_offset for s in env["admin"].topic_status(topic)}

        def consumed_all():
            seen = {}
            for path in outs.values():
                with open(path) as fh:
                    for ln in fh:
                        if ln.strip():
                            r = json.loads(ln)
                            seen[r["q"]] = max(seen.get(r["q"], -1), r["o"])
            return all(seen.get(q, -1) == m - 1 for q, m in maxes.items())
        wait_until(consumed_all, 30, "every queue consumed to its end")
    finally:
        stop_sending.set()
        stop.write_text("stop")
        for name, p in procs.items():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if sender.is_alive():
            sender.join(10)
    assert procs["B"].returncode == 0 and procs["C"].returncode == 0
    recs = []
    for path in outs.values():
        with open(path) as fh:
            recs += [json.loads(ln) for ln in fh if ln.strip()]
    by_queue: dict[int, list] = {}
    for r in recs:
        by_queue.setdefault(r["q"], []).append(r)
    owners_seen = {q: check_queue_order(rs, maxes[q]) for q, rs in by_queue.items()}
    assert owners_seen[3][0] == "B" and owners_seen[3][-1] == "C"          # the rebalance handover
    assert owners_seen[0][0] == "A" and owners_seen[0][-1] == "B"          # the crash takeover
    assert owners_seen[1][0] == "A" and owners_seen[1][-1] == "B"
    assert all(len(o) <= 3 for o in owners_seen.values()), owners_seen    # no back-and-forth
    # per key: every message consumed, and in send order within every owner's stretch
    keyed: dict[str, list] = {}
    for r in sorted(recs, key=lambda r: r["t"]):
        k, seq = r["body"].split(":")
        keyed.setdefault(k, []).append((r["who"], int(seq)))
    for k, seqs in keyed.items():
        assert {s for _, s in seqs} == set(range(per_key)), k
        for (w1, s1), (w2, s2) in zip(seqs, seqs[1:]):
            if w1 == w2:
                assert s2 == s1 + 1, f"{k}: {w1} consumed {s1} then {s2}"
            else:
                assert s2 <= s1 + 1, f"{k}: {w2} skipped from {s1} to {s2}"
    dups = len(recs) - len(sent)
    print("owners", owners_seen, "records", len(recs), "sent", len(sent), "duplicates", dups)
    assert dups >= 0


# =============================================================================== §4 broadcasting
def test_broadcasting_delivers_every_message_to_every_member(env, tmp_path):
    topic = new_topic(env, "BcastW", 4)
    rec = Recorder()
    members = []
    try:
        for i in range(3):
            members.append(push_consumer(env, "cg_bcast_w", topic, f"bcast-{i}", recording_listener(rec, f"m{i}"),
                                         message_model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path)))
        wait_until(lambda: all(len(c.assigned_message_queues(topic)) == 4 for c in members), 10,
                   "every member pulls every queue")
        n = 24
        for i in range(n):
            env["producer"].send(Message(topic, f"b{i}", tags="B"))
        wait_until(lambda: len(rec) >= 3 * n, 15, "every member got every message")
        time.sleep(0.5)
    finally:
        for c in members:
            c.shutdown()
    got = rec.snapshot()
    assert len(got) == 3 * n
    for i in range(3):
        assert sorted(r["body"] for r in got if r["who"] == f"m{i}") == sorted(f"b{j}" for j in range(n))
