"""Logs that a flood cannot multiply (issue 22, rmq.common.log_limit): unit tests of RateLimitedLog with
an injected clock, and a real ACL broker hammered with wrong-secret requests whose log stays short."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rmq.common.log_limit import RateLimitedLog, host_of, reason_of

pytestmark = pytest.mark.timeout(240)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def lim():
    logger = logging.getLogger("test.log_limit." + str(id(object())))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    cap = Capture()
    logger.addHandler(cap)
    clock = Clock()
    r = RateLimitedLog(logger, "refusals", prefix="ACL: ", burst=5, interval=10.0, max_keys=3, clock=clock)
    return r, cap.lines, clock


def test_first_lines_in_full_then_one_summary_per_interval(lim):
    r, lines, clock = lim
    for i in range(12_350):
        r.warning("127.0.0.1", "wrong signature", "refused request %d", i)
        clock.now += 0.0005                                  # 12,350 lines in about 6 s
    assert lines == [f"refused request {i}" for i in range(5)]
    assert r.pending() == 12_345 and r.flush() == 0          # the interval has not ended yet
    clock.now += 4.0
    r.warning("127.0.0.1", "wrong signature", "refused request %d", 99)  # past the interval: the summary comes
    assert lines[5:] == ["ACL: 12,345 more refusals from 127.0.0.1 (wrong signature) in the last 10 s"]
    assert r.pending() == 1 and r.suppressed_total == 12_346


def test_a_continuing_flood_gets_one_line_per_interval_and_a_quiet_key_starts_over(lim):
    r, lines, clock = lim
    for _ in range(5):
        r.warning("h", "bad frame", "full")
    for second in range(60):                                 # 100 a second for a minute
        for _ in range(100):
            r.warning("h", "bad frame", "full")
        clock.now += 1.0
    assert lines.count("full") == 5
    assert 5 <= sum("more refusals" in ln for ln in lines) <= 6   # one per 10 s
    assert r.flush(force=True) <= 1                               # what the last interval held
    counts = [int(re.search(r"([\d,]+) more", s).group(1).replace(",", "")) for s in lines if "more refusals" in s]
    assert sum(counts) == 6000 and r.pending() == 0               # every suppressed line is counted once
    clock.now += 30                                           # a quiet interval ...
    lines.clear()
    for _ in range(7):
        r.warning("h", "bad frame", "again")
    assert lines == ["again"] * 5                             # ... and the next episode is logged in full again


def test_keys_are_separate_and_bounded(lim):
    r, lines, clock = lim
    for host in ("a", "b"):
        for _ in range(8):
            r.warning(host, "x", "from %s", host)
    assert lines == ["from a"] * 5 + ["from b"] * 5
    r.warning("a", "other reason", "other")                  # another reason is another key
    assert lines[-1] == "other"
    r.warning("c", "x", "from c")                            # a 4th key: the oldest ("b", "x"? no: "a","x") goes
    assert len(r._keys) == 3
    assert lines[-2:] == ["ACL: 3 more refusals from a (x) in the last 0 s", "from c"]
    assert r.pending() == 3                                  # b's three are still counted
    assert r.flush(force=True) == 1 and lines[-1] == "ACL: 3 more refusals from b (x) in the last 0 s"


def test_disabled_level_costs_nothing_and_bad_parameters_are_refused(lim):
    r, lines, clock = lim
    for _ in range(10):
        assert r.log(logging.DEBUG, "h", "r", "debug") is False
    assert lines == [] and r.pending() == 0
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("x"), interval=0)


def test_reason_of_keeps_the_category_not_the_numbers():
    assert reason_of("frame of 70000 bytes exceeds 65536") == "frame of N bytes exceeds N"
    assert len(reason_of("x" * 500)) == 60


def test_host_of_a_connection_drops_the_port():
    from types import SimpleNamespace
    assert host_of(SimpleNamespace(remote_host=("10.0.0.7", 40001), remote_addr="10.0.0.7:40001")) == "10.0.0.7"
    assert host_of(SimpleNamespace(remote_addr="10.0.0.8:5")) == "10.0.0.8"
    assert host_of(object()) == "?"


def test_on_an_asyncio_loop_a_timer_writes_the_last_summary():
    logger = logging.getLogger("test.log_limit.timer")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    cap = Capture()
    logger.addHandler(cap)
    r = RateLimitedLog(logger, burst=1, interval=0.05)       # a real clock, a short interval

    async def main():
        for _ in range(10):
            r.warning("h", "r", "line")
        for _ in range(200):                                 # bounded wait for the timer
            if len(cap.lines) > 1:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert cap.lines[0] == "line"
    assert re.fullmatch(r"9 more refusals from h \(r\) in the last \d+ s", cap.lines[1]), cap.lines


# ------------------------------------------------------------------------------ a real broker
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ACL_YML = """\
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def test_a_wrong_secret_flood_leaves_a_short_log(tmp_path):
    """2,000 SEND_MESSAGE requests signed with a wrong secret from one client: each is refused with
    NO_PERMISSION, the broker logs the first 5 and then one summary line with the count."""
    import json

    from rmq.common.acl import sign_ext_fields
    from rmq.remoting import RequestCode, ResponseCode
    from tests.remoting_harness import SyncClient

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    cfg = tmp_path / "broker.yaml"
    cfg.write_text(f"aclEnable: true\naclFile: {json.dumps(str(acl))}\nmappedFileSizeCommitLog: 16777216\n")
    ready = tmp_path / "ready.json"
    log_path = tmp_path / "broker.log"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), RMQ_LOG="INFO")
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", "up", "--config", str(cfg), "--data",
                                 str(tmp_path / "store"), "--namesrv-port", "0", "--remoting-port", "0",
                                 "--kafka-port", "0", "--ready-file", str(ready)], cwd=tmp_path, stdout=logf,
                                stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), log_path.read_text()
        addr = json.loads(ready.read_text())["remoting"]
        c = SyncClient(addr)
        codes = []
        try:
            for i in range(2000):
                ext = {"producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                       "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
                       "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
                signed = sign_ext_fields(ext, b"x", "RocketMQ", "wrong-secret")
                codes.append(c.request(RequestCode.SEND_MESSAGE, signed, b"x").code)
        finally:
            c.close()
        assert codes == [ResponseCode.NO_PERMISSION] * 2000
        # the summary comes at the end of the 10 s interval (a timer on the broker's loop): wait for it
        summary = re.compile(r"ACL: ([\d,]+) more refusals from 127\.0\.0\.1 \(Check signature failed\) in the last")
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not summary.search(log_path.read_text()):
            time.sleep(0.2)
        text = log_path.read_text()
        refusal_lines = [ln for ln in text.splitlines() if "ACL refused" in ln]
        summaries = [ln for ln in text.splitlines() if summary.search(ln)]
        assert len(refusal_lines) == 5, refusal_lines[:10]
        assert summaries, text[-3000:]
        assert len(summaries) <= 3                                # one per 10 s of flood
        assert sum(int(summary.search(ln).group(1).replace(",", "")) for ln in summaries) == 1995
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0
