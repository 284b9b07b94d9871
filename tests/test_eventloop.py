"""The broker's event loop choice (rmq/server/eventloop.py, issue 24): RMQ_LOOP picks uvloop or asyncio,
a bad value or a missing uvloop is one clear sentence, and a whole `rmq up` on uvloop serves the
RocketMQ remoting listener (the project's client), the Kafka listener (kafka-python) and the web
console's /metrics over the same store."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from rmq.server import eventloop
from rmq.server.eventloop import LoopChoiceError, chosen, run, running_loop_name

uvloop = pytest.importorskip("uvloop")


def test_choice_follows_rmq_loop(monkeypatch):
    monkeypatch.delenv("RMQ_LOOP", raising=False)
    assert chosen() == "asyncio"  # the default: uvloop is opt-in
    for raw, want in (("asyncio", "asyncio"), ("uvloop", "uvloop"), (" UVLOOP ", "uvloop"), ("auto", "uvloop"),
                      ("", "asyncio")):
        monkeypatch.setenv("RMQ_LOOP", raw)
        assert chosen() == want, raw
    assert chosen("asyncio") == "asyncio"  # an explicit name wins over the environment


def test_bad_choice_and_missing_uvloop_are_one_sentence(monkeypatch):
    with pytest.raises(LoopChoiceError, match=r"RMQ_LOOP: expected one of auto, uvloop, asyncio, got 'tokio'"):
        chosen("tokio")
    monkeypatch.setattr(eventloop, "_uvloop", lambda: None)
    assert chosen("auto") == "asyncio"  # the fallback when uvloop cannot be imported
    with pytest.raises(LoopChoiceError, match="the uvloop package is not installed"):
        chosen("uvloop")

    async def never() -> None:  # pragma: no cover - must not run
        raise AssertionError
    coro = never()
    with pytest.raises(LoopChoiceError):
        run(coro, name="uvloop")
    assert coro.cr_frame is None  # closed, not left unawaited


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_uses_the_chosen_loop(name):
    async def which() -> tuple[str, str]:
        await asyncio.sleep(0)
        return running_loop_name(), type(asyncio.get_running_loop()).__module__
    got, module = run(which(), name=name)
    assert got == name
    assert module.startswith("uvloop") == (name == "uvloop")


def test_rmq_up_on_uvloop_serves_remoting_kafka_and_console(tmp_path):
    """One `rmq up` with RMQ_LOOP=uvloop: messages sent by rmq.client come back to a Kafka consumer,
    /metrics answers, and SIGTERM ends it cleanly."""
    from tests.kafka_fixtures import start_broker, unique
    os.environ["RMQ_LOOP"] = "uvloop"
    try:
        broker = start_broker(str(tmp_path / "up"), {"consolePort": -1})
    finally:
        del os.environ["RMQ_LOOP"]
    try:
        assert "runs on the uvloop event loop" in broker.log_text()
        from kafka import KafkaConsumer

        from rmq.client import Message, Producer
        topic = unique("UvTopic")
        p = Producer(unique("uv_pg"), broker.listeners["namesrv"])
        p.start()
        try:
            sent = [p.send(Message(topic, f"m{i}".encode())) for i in range(5)]
        finally:
            p.shutdown()
        assert all(r.send_status.name == "SEND_OK" for r in sent)
        c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                          enable_auto_commit=False, consumer_timeout_ms=15000)
        try:
            got = []
            for rec in c:
                got.append(rec.value)
                if len(got) == 5:
                    break
        finally:
            c.close()
        assert sorted(got) == [f"m{i}".encode() for i in range(5)]
        with urllib.request.urlopen(f"http://{broker.listeners['console']}/metrics", timeout=10) as resp:
            assert resp.status == 200 and b"rocketmq_" in resp.read()
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()[-3000:]
    assert "Traceback" not in broker.log_text()


def test_rmq_up_names_a_bad_rmq_loop(tmp_path):
    env = dict(os.environ, RMQ_LOOP="tokio", PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    out = subprocess.run([sys.executable, "-m", "rmq.cli", "up", "--data", str(tmp_path / "d"), "--kafka-port", "0",
                          "--namesrv-port", "0", "--remoting-port", "0"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "RMQ_LOOP: expected one of auto, uvloop, asyncio, got 'tokio'" in out.stderr
    assert "Traceback" not in out.stderr


def test_bench_compares_loops_in_one_run(tmp_path):
    """`rmq bench rmq --loop asyncio,uvloop` starts one server per loop and reports both."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    out = subprocess.run([sys.executable, "-m", "rmq.cli", "bench", "rmq", "--client", "python", "--count", "50",
                          "--size", "64", "--loop", "asyncio,uvloop", "--json"], env=env, capture_output=True,
                         text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert [r["loop"] for r in report["runs"]] == ["asyncio", "uvloop"]
    for r in report["runs"]:
        res = r["results"]["python"]
        assert res["sent"] == 50 and res["consumed"] == 51 and "send_errors" not in res
    assert set(report["medians"]) == {"asyncio", "uvloop"}
    assert report["medians"]["uvloop"]["python"]["send_msgs_per_s"] > 0
