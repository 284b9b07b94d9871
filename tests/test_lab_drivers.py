"""The pure parts of the lab drivers, on made-up inputs: how the rebalance driver reads a delivery
log, how the ordered driver counts violations, which orders the transactions driver crashes or rolls
back, and the verdict's `against` narrowing. The drivers themselves run in test_labs.py (--quick)."""
from __future__ import annotations

from labs.drivers.ordered import Ledger, violations
from labs.drivers.rebalance import analyse
from labs.drivers.transactions import _plan
from labs.schema import Lab
from labs.verdict import compute_verdict


def test_rebalance_analysis_of_a_move_a_pause_and_a_duplicate():
    tick = 0.1
    ev = []
    # before the join at t=10: c0 owns q0, q1; c1 owns q2
    for i in range(5):
        t = 9.5 + i * tick
        ev += [(t, 0, "c0", f"q0-{i}"), (t, 1, "c0", f"q1-{i}"), (t, 2, "c1", f"q2-{i}")]
    # after: q0 stays with c0 and never stops; q1 moves to c2 at 11.0 after a stop, c2 re-reads q1-4
    for i in range(5, 30):
        t = 9.5 + i * tick
        ev.append((t, 0, "c0", f"q0-{i}"))
        ev.append((t, 2, "c1", f"q2-{i}"))
        if t < 10.3:
            ev.append((t, 1, "c0", f"q1-{i}"))
    ev.append((11.0, 1, "c2", "q1-4"))
    ev += [(11.0 + k * tick, 1, "c2", f"q1-x{k}") for k in range(1, 10)]
    r = analyse(sorted(ev), 3, ["c0", "c1", "c2"], 10.0, tick)
    assert r["queuesMoved"] == 1                     # q1: c0 -> c2
    assert r["queuesPaused"] == 1 and abs(r["maxPauseSeconds"] - 0.8) < 0.01   # 10.2 -> 11.0
    assert abs(r["timeToStableSeconds"] - 1.0) < 0.01
    assert r["duplicates"] == 1 and r["assignmentSpread"] == 0 and r["queuesUnowned"] == 0
    assert r["newMemberFirstDeliverySeconds"] == 1.0


def test_rebalance_analysis_of_a_quiet_join():
    ev = [(9.9, 0, "c0", "a"), (10.05, 0, "c0", "b"), (10.1, 1, "c1", "c")]
    r = analyse(ev, 2, ["c0", "c1"], 10.0, 0.1)
    assert r["timeToStableSeconds"] == 0.1 and r["queuesMoved"] == 0 and r["queuesPaused"] == 0


def test_ordered_violations_and_ledger_failures():
    assert violations([("o1", 0), ("o1", 1), ("o2", 0), ("o1", 2)]) == 0
    assert violations([("o1", 0), ("o1", 2), ("o1", 1), ("o2", 1), ("o2", 0)]) == 2
    led = Ledger(fail_every=7)
    assert led.process("order-0:0") is False            # index 0 fails its first attempt
    assert led.process("order-0:1") is True
    assert led.process("order-0:0") is True              # the retry succeeds
    assert led.done == [("order-0", 1), ("order-0", 0)] and violations(led.done) == 1


def test_transaction_plan():
    plan = _plan(40, rollback_every=10, crash_every=20)
    assert [k for k, o in plan.items() if o == "crash"] == ["order-20", "order-40"]
    assert [k for k, o in plan.items() if o == "rollback"] == ["order-10", "order-30"]
    assert sum(o == "commit" for o in plan.values()) == 36


def _lab(against):
    return Lab.model_validate({
        "name": "x", "title": "x", "question": "q", "source": {"seed": "000", "section": "s"}, "claim": "c",
        "systems": [{"system": "rocketmq", "label": "a"}, {"system": "rocketmq", "label": "b"}, "kafka-bridge"],
        "driver": "ordered", "workload": {}, "verdict": {"metric": "m", "kind": "lower", "expect_best": "a",
                                                         "against": against, "explain": "e"}})


def test_verdict_against_compares_only_the_named_systems():
    rows = [{"system": s, "sweep_key": "k", "sweep_value": 1, "status": "ok", "m": m + r / 100, "repeat": r}
            for r in (1, 2, 3) for s, m in (("a", 0), ("b", 5), ("kafka-bridge", 0))]
    assert compute_verdict(_lab([]), rows)["outcome"] == "inconclusive"   # a ties kafka-bridge
    v = compute_verdict(_lab(["b"]), rows)
    assert v["outcome"] == "holds" and v["holds"] is True
    assert "kafka-bridge" not in v["text"] and "b 5.02 [5.01-5.03]" in v["text"]


def test_every_library_lab_has_its_texts_in_chinese():
    import re

    from click.testing import CliRunner

    from labs.cli import lab as lab_cmd
    from labs.runner import lab_files, load_lab
    for f in lab_files():
        lb = load_lab(str(f))
        for key, text in (("title_zh", lb.title_zh), ("question_zh", lb.question_zh), ("claim_zh", lb.claim_zh),
                          ("verdict.explain_zh", lb.verdict.explain_zh)):
            assert re.search(r"[\u4e00-\u9fff]", text), f"{f.name}: {key} holds no Chinese text"
    res = CliRunner().invoke(lab_cmd, ["show", "transactions", "--lang", "zh"])
    lb = load_lab(str(next(f for f in lab_files() if f.stem == "transactions")))
    assert res.exit_code == 0 and lb.title_zh in res.output and lb.claim_zh.strip() in res.output
    res = CliRunner().invoke(lab_cmd, ["list", "--lang", "zh"])
    assert res.exit_code == 0 and lb.title_zh in res.output


# ---- the OMB driver's autoBatch for the rocketmq system (labs/omb.py) ---------------------------------

class _BatchSink:
    """Stands in for rmq.client's Producer: its own event loop on a thread, and a send_batch coroutine
    that records each batch's bodies and then succeeds or raises `fail`."""

    def __init__(self, fail: Exception | None = None) -> None:
        import asyncio
        import threading
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.impl, self.fail, self.batches = self, fail, []

    async def send_batch(self, msgs):
        self.batches.append([m.body for m in msgs])
        if self.fail is not None:
            raise self.fail
        return "SEND_OK"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def _outcomes():
    """A callback for held sends, and wait(k): the outcomes in call order once there are k of them
    (bounded: after 10 s, whatever came)."""
    import threading
    got, cond = [], threading.Condition()

    def cb(exc):
        with cond:
            got.append(exc)
            cond.notify_all()

    def wait(k):
        with cond:
            cond.wait_for(lambda: len(got) >= k, timeout=10)
            return list(got)
    return cb, wait


def test_omb_autobatch_sends_a_topic_once_its_bodies_reach_batch_max_bytes():
    import threading

    from labs.omb import _AutoBatch
    from rmq.client.message import Message
    sink, gate = _BatchSink(), threading.Semaphore(4)
    try:
        ab = _AutoBatch(sink, gate, max_bytes=100, max_delay=60)
        cb, wait = _outcomes()
        for body in (b"a" * 40, b"b" * 40):
            ab.add(Message("t1", body), cb)
        ab.add(Message("t2", b"x" * 40), cb)      # another topic: a batch of its own
        assert sink.batches == []                 # 80 bytes of t1 held: below batchMaxBytes
        ab.add(Message("t1", b"c" * 40), cb)      # 120 bytes: t1's three go out as one request
        assert wait(3) == [None, None, None]
        assert sink.batches == [[b"a" * 40, b"b" * 40, b"c" * 40]]
        ab.flush(older_than=60)                   # t2 has not waited batchMaxDelayMs: still held
        assert len(sink.batches) == 1
        ab.flush()                                # the end of a phase sends whatever is held
        assert wait(4) == [None] * 4 and sink.batches[1] == [b"x" * 40]
        assert all(gate.acquire(timeout=5) for _ in range(4))   # one permit per batch, each given back
    finally:
        sink.close()


def test_omb_autobatch_a_send_also_sends_what_has_waited_batch_max_delay():
    import threading

    from labs.omb import _AutoBatch
    from rmq.client.message import Message
    sink = _BatchSink()
    try:
        ab = _AutoBatch(sink, threading.Semaphore(4), max_bytes=1000, max_delay=0.5)
        cb, wait = _outcomes()
        ab.add(Message("quiet", b"q"), cb)
        ab._held["quiet"][3] -= 1.0                # as if held for a second already ...
        ab._looked -= 1.0                           # ... and not looked at since
        ab.add(Message("busy", b"b"), lambda exc: None)
        assert wait(1) == [None] and sink.batches == [[b"q"]]     # the stale batch went; "busy" is held
        assert list(ab._held) == ["busy"]
    finally:
        sink.close()


def test_omb_autobatch_failure_reaches_every_held_send():
    import threading

    from labs.omb import _AutoBatch
    from rmq.client.message import Message
    sink, gate = _BatchSink(fail=RuntimeError("broker said no")), threading.Semaphore(1)
    try:
        ab = _AutoBatch(sink, gate, max_bytes=10, max_delay=60, max_messages=3)
        cb, wait = _outcomes()
        for _ in range(3):                         # max_messages closes the batch before max_bytes
            ab.add(Message("t", b"1"), cb)
        got = wait(3)
        assert len(got) == 3 and all(isinstance(e, RuntimeError) and "broker said no" in str(e) for e in got)
        assert gate.acquire(timeout=5)              # the failed batch gave its permit back
        ab.GATE_WAIT = 0.05                         # no permit free: the batch fails, it does not hang
        cb2, wait2 = _outcomes()
        for _ in range(3):
            ab.add(Message("t", b"1"), cb2)
        assert [type(e) for e in wait2(3)] == [TimeoutError] * 3 and len(sink.batches) == 1
    finally:
        sink.close()


def test_omb_rocketmq_producer_settings_are_omb_driver_keys():
    import pytest

    from labs.omb import RocketMQClients, WorkloadError
    c = RocketMQClients("127.0.0.1:1", "127.0.0.1:2")
    assert (c.auto_batch, c.batch_max_bytes, c.batch_max_delay, c.inflight_max) == (True, 32 * 1024, 0.010, 1024)
    assert c.label == "rocketmq (rmq.client, autoBatch)"
    off = RocketMQClients("127.0.0.1:1", "127.0.0.1:2", producer_conf={"autoBatch": False})
    assert (off.auto_batch, off.inflight_max, off.label) == (False, 2000, "rocketmq (rmq.client)")
    cpp = RocketMQClients("a", "b", cpp=True)                   # the C++ client 0.4.4 has no autoBatch
    assert (cpp.auto_batch, cpp.inflight_max) == (False, 2000)
    with pytest.raises(WorkloadError, match="the C\\+\\+ client \\(rocketmq 0.4.4\\) has no auto batching"):
        RocketMQClients("a", "b", cpp=True, producer_conf={"batchMaxBytes": 1024})
    with pytest.raises(WorkloadError, match="producer setting 'linger.ms': not one the RocketMQ clients take"):
        RocketMQClients("a", "b", producer_conf={"linger.ms": 5})
    with pytest.raises(WorkloadError, match="producer setting batchMaxBytes: expected a positive integer"):
        RocketMQClients("a", "b", producer_conf={"batchMaxBytes": 0})
    with pytest.raises(WorkloadError, match="producer setting autoBatch: expected true or false"):
        RocketMQClients("a", "b", producer_conf={"autoBatch": "yes"})
