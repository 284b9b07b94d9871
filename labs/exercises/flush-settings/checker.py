"""Hidden cases for flush-settings (the keys as `rmq up` validates them, the policy they choose),
then each config on a running broker: flushed vs written offsets after every acknowledgement."""
from __future__ import annotations

import os
import tempfile
import time
import uuid

import yaml

from labs.exercises.kit import Broker, rule
from rmq.config import ConfigError, load_config

WINDOW_S = 1.5          # "about one second", with room for a loaded machine


def _load(d):
    if not isinstance(d, dict):
        return None, f"expected a dict of broker.yaml keys, got {type(d).__name__}"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(d, fh)
        path = fh.name
    try:
        return load_config(path), ""
    except ConfigError as exc:
        return None, str(exc).replace(path, "the dict")
    finally:
        os.unlink(path)


def offline(sol):
    for name in ("PAYMENTS", "CLICKS"):
        def valid(name=name):
            cfg, err = _load(getattr(sol, name, None))
            return rule(cfg is not None, "broker config keys `rmq up` accepts", err or "accepted")
        yield f"{name}: the keys are valid broker config", valid

    def payments():
        cfg, err = _load(sol.PAYMENTS)
        return rule(cfg is not None and cfg.store.flushDiskType == "SYNC_FLUSH",
                    "a policy where the acknowledgement waits for the disk",
                    err or f"flushDiskType {cfg.store.flushDiskType}")
    yield "PAYMENTS: acknowledgements wait for the flush", payments

    def clicks():
        cfg, err = _load(sol.CLICKS)
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


def _measure(broker: Broker, n: int = 120) -> dict:
    from rmq.client.admin import MQAdmin
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    topic = f"Flush{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 1)
    p = Producer(f"pg_flush_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
    p.start()
    unflushed_acks = 0
    with MQAdmin(namesrv=[broker.namesrv]) as admin:
        try:
            for i in range(n):
                p.send(Message(topic, b"x" * 200, keys=f"k{i}"))
                info = admin.broker_runtime_info(broker.remoting)
                if int(info["commitLogFlushedOffset"]) < int(info["commitLogMaxOffset"]):
                    unflushed_acks += 1
        finally:
            p.shutdown()
        t0 = time.monotonic()
        caught_up = None
        while time.monotonic() - t0 < 15:
            info = admin.broker_runtime_info(broker.remoting)
            if int(info["commitLogFlushedOffset"]) >= int(info["commitLogMaxOffset"]):
                caught_up = time.monotonic() - t0
                break
            time.sleep(0.05)
    return {"sent": n, "unflushed_acks": unflushed_acks, "catch_up_s": caught_up}


def broker_config(sol):
    return dict(sol.PAYMENTS)


def live(sol, broker):
    pay = _measure(broker)
    yield "live PAYMENTS: no acknowledged message was unflushed when its answer came", lambda: rule(
        pay["unflushed_acks"] == 0, "0 of the acknowledged messages unflushed at acknowledgement",
        f"{pay['unflushed_acks']} of {pay['sent']}")
    with Broker(config=dict(sol.CLICKS)) as b2:
        clicks = _measure(b2)
    yield "live CLICKS: acknowledgements did not wait for the disk", lambda: rule(
        clicks["unflushed_acks"] > 0, "some acknowledgements before their flush",
        f"{clicks['unflushed_acks']} of {clicks['sent']} acknowledged before the flush")
    yield f"live CLICKS: everything on disk within {WINDOW_S} s of the last send", lambda: rule(
        clicks["catch_up_s"] is not None and clicks["catch_up_s"] <= WINDOW_S, f"caught up within {WINDOW_S} s",
        "not caught up within 15 s" if clicks["catch_up_s"] is None else f"caught up after {clicks['catch_up_s']:.2f} s")
