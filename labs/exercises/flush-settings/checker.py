"""Hidden cases for flush-settings (the keys as `rmq up` validates them, the policy they choose),
then each config on a running broker: flushed vs written offsets after every acknowledgement, how
soon the flush catches up, and what survives a `kill -9` of the broker process right after the last
acknowledgement (it is started again on the same store and the recovered queue is counted)."""
from __future__ import annotations

import time
import uuid

from labs.exercises.kit import Broker, Once, load_broker_dict, rule

WINDOW_S = 1.5          # "about one second", with room for a loaded machine


def offline(sol):
    for name in ("PAYMENTS", "CLICKS"):
        def valid(name=name):
            cfg, err = load_broker_dict(getattr(sol, name, None))
            return rule(cfg is not None, "broker config keys `rmq up` accepts", err or "accepted")
        yield f"{name}: the keys are valid broker config", valid

    def payments():
        cfg, err = load_broker_dict(sol.PAYMENTS)
        return rule(cfg is not None and cfg.store.flushDiskType == "SYNC_FLUSH",
                    "a policy where the acknowledgement waits for the disk",
                    err or f"flushDiskType {cfg.store.flushDiskType}")
    yield "PAYMENTS: acknowledgements wait for the flush", payments

    def clicks():
        cfg, err = load_broker_dict(sol.CLICKS)
        if cfg is None:
            return rule(False, "valid config", err)
        s = cfg.store
        if s.flushDiskType != "ASYNC_FLUSH":
            return rule(False, "acknowledgements that do not wait for the disk", f"flushDiskType {s.flushDiskType}")
        worst = s.flushCommitLogThoroughInterval if s.flushCommitLogLeastPages > 0 else s.flushIntervalCommitLog
        return rule(worst <= 1000 and s.flushIntervalCommitLog <= 1000,
                    "dirty data flushed within about 1 s once writes stop",
                    f"up to {worst} ms (flushCommitLogLeastPages {s.flushCommitLogLeastPages}, "
                    f"flushCommitLogThoroughInterval {s.flushCommitLogThoroughInterval}, flushIntervalCommitLog "
                    f"{s.flushIntervalCommitLog})",
                    "with fewer than flushCommitLogLeastPages dirty pages, only the thorough flush writes them")
    yield "CLICKS: asynchronous, and nothing left unflushed for more than about a second", clicks


def _send(broker: Broker, topic: str, n: int, admin) -> tuple[int, int]:
    """n messages one by one; after each acknowledgement, was it already flushed? Returns (sent, unflushed)."""
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    p = Producer(f"pg_flush_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
    p.start()
    unflushed_acks = 0
    try:
        for i in range(n):
            p.send(Message(topic, b"x" * 200, keys=f"k{i}"))
            info = admin.broker_runtime_info(broker.remoting)
            if int(info["commitLogFlushedOffset"]) < int(info["commitLogMaxOffset"]):
                unflushed_acks += 1
    finally:
        p.shutdown()
    return n, unflushed_acks


def _kill_and_count(broker: Broker, topic: str) -> dict:
    """kill -9 the broker right after the last acknowledgement, start it again on the same store, and
    count what the recovered consume queue holds."""
    from rmq.client.admin import MQAdmin
    broker.kill9()
    broker.restart()
    with MQAdmin(namesrv=[broker.namesrv]) as admin:
        deadline = time.monotonic() + 15
        while True:
            try:
                return {"survived": sum(q.max_offset for q in admin.topic_status(topic))}
            except Exception:  # noqa: BLE001 - the route appears once the restarted broker registers
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _run(broker: Broker, catch_up: bool, n: int = 120) -> dict:
    """Send n messages; with catch_up, wait for the flushed offset to reach the end once sending stops
    and then send n more; then kill -9 right after the last acknowledgement and count the survivors."""
    from rmq.client.admin import MQAdmin
    topic = f"Flush{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 1)
    out = {"sent": 0, "unflushed_acks": 0, "catch_up_s": None}
    with MQAdmin(namesrv=[broker.namesrv]) as admin:
        sent, unflushed = _send(broker, topic, n, admin)
        out["sent"] += sent
        out["unflushed_acks"] += unflushed
        if catch_up:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 15:
                info = admin.broker_runtime_info(broker.remoting)
                if int(info["commitLogFlushedOffset"]) >= int(info["commitLogMaxOffset"]):
                    out["catch_up_s"] = time.monotonic() - t0
                    break
                time.sleep(0.05)
            sent, unflushed = _send(broker, topic, n, admin)    # a second burst, killed right after it
            out["sent"] += sent
        info = admin.broker_runtime_info(broker.remoting)
        out["unflushed_at_kill"] = int(info["commitLogMaxOffset"]) - int(info["commitLogFlushedOffset"])
    out.update(_kill_and_count(broker, topic))
    return out


def broker_config(sol):
    return dict(sol.PAYMENTS)


def live(sol, broker):
    pay = Once(lambda: _run(broker, catch_up=False))

    def clicks_run():
        with Broker(config=dict(sol.CLICKS)) as b2:
            return _run(b2, catch_up=True)
    clicks = Once(clicks_run)

    def pay_flushed():
        r = pay()
        return rule(r["unflushed_acks"] == 0, "0 of the acknowledged messages unflushed at acknowledgement",
                    f"{r['unflushed_acks']} of {r['sent']}")
    yield "live PAYMENTS: no acknowledged message was unflushed when its answer came", pay_flushed

    def survived(r):
        return rule(r["survived"] == r["sent"], f"all {r['sent']} acknowledged messages in the recovered store",
                    f"{r['survived']} of {r['sent']} after the restart ({r['unflushed_at_kill']} bytes were not yet "
                    f"flushed when it was killed)",
                    "the page cache belongs to the kernel: a crashed process loses nothing it had written")
    yield "live PAYMENTS: broker killed with kill -9 right after the last acknowledgement, then restarted: " \
          "every acknowledged message is there", lambda: survived(pay())

    def clicks_async():
        r = clicks()
        return rule(r["unflushed_acks"] > 0, "some acknowledgements before their flush",
                    f"{r['unflushed_acks']} of {r['sent'] // 2} acknowledged before the flush")
    yield "live CLICKS: acknowledgements did not wait for the disk", clicks_async

    def clicks_window():
        r = clicks()
        return rule(r["catch_up_s"] is not None and r["catch_up_s"] <= WINDOW_S, f"caught up within {WINDOW_S} s",
                    "not caught up within 15 s" if r["catch_up_s"] is None else f"caught up after {r['catch_up_s']:.2f} s")
    yield f"live CLICKS: everything on disk within {WINDOW_S} s of the last send", clicks_window
    yield "live CLICKS: broker killed with kill -9 right after the last acknowledgement of a second burst, then " \
          "restarted: every acknowledged message is there", lambda: survived(clicks())
