"""Fixtures for the Kafka-bridge integration tests (SPEC §11): `rmq up` as a real subprocess on
127.0.0.1 with ephemeral ports and a temporary --data dir, and a small raw Kafka client built on
kafka_bridge.protocol (encode_request / decode_response) for tests that need exact bytes.

The broker is started with `sys.executable -m rmq.cli up ... --ready-file F`; the fixture waits
for F (bounded), yields a RunningBroker (bootstrap address, data dir, config path, log) and on
teardown sends SIGTERM, then SIGKILL if it has not exited within a bound.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from kafka_bridge import protocol as kp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0

# Small files and short group timeouts so a test broker is light and rebalances are quick.
# kafkaGroupMinSessionTimeoutMs is lowered so clients may use short session timeouts.
TEST_BROKER_CONFIG = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 300_000 * 20 // 100,
    "maxHashSlotNum": 10_000,
    "maxIndexNum": 40_000,
    "kafkaGroupInitialRebalanceDelayMs": 100,
    "kafkaGroupMinSessionTimeoutMs": 1000,
    "kafkaRetentionCheckIntervalMs": 200,
}


@dataclass
class RunningBroker:
    proc: subprocess.Popen
    bootstrap: str
    data_dir: str
    config_path: str
    log_path: str
    workdir: str
    listeners: dict = field(default_factory=dict)
    stop_requested: bool = False

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        self.stop_requested = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def write_config(path: str, extra: dict | None = None) -> str:
    cfg = dict(TEST_BROKER_CONFIG)
    cfg.update(extra or {})
    with open(path, "w", encoding="utf-8") as fh:
        for k, v in cfg.items():
            fh.write(f"{k}: {json.dumps(v)}\n")
    return path


def start_broker(workdir: str, extra_config: dict | None = None) -> RunningBroker:
    """Start `rmq up` in `workdir` (data under workdir/data) and wait for its ready file."""
    os.makedirs(workdir, exist_ok=True)
    data_dir = os.path.join(workdir, "data")
    ready = os.path.join(workdir, "ready.json")
    log_path = os.path.join(workdir, "broker.log")
    config_path = write_config(os.path.join(workdir, "broker.yaml"), extra_config)
    if os.path.exists(ready):
        os.unlink(ready)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("RMQ_LOG", "INFO")
    cmd = [sys.executable, "-m", "rmq.cli", "up", "--config", config_path, "--data", data_dir,
           "--kafka-port", "0", "--namesrv-port", "0", "--remoting-port", "0", "--host", "127.0.0.1",
           "--ready-file", ready]
    logf = open(log_path, "wb")
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=logf, stderr=subprocess.STDOUT, env=env)
    logf.close()
    broker = RunningBroker(proc, "", data_dir, config_path, log_path, workdir)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if os.path.exists(ready):
            with open(ready, encoding="utf-8") as fh:
                broker.listeners = json.load(fh)
            broker.bootstrap = broker.listeners["kafka"]
            return broker
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    broker.stop(5)
    raise RuntimeError(f"rmq up did not become ready within {READY_TIMEOUT}s "
                       f"(exit code {proc.returncode}); log:\n{broker.log_text()[-4000:]}")


def _broker_fixture(tmp_path_factory, name: str):
    broker = start_broker(str(tmp_path_factory.mktemp(name)))
    try:
        yield broker
    finally:
        alive = broker.alive() or broker.stop_requested  # a test may stop its own broker
        code = broker.stop()
        text = broker.log_text()
        # A handler bug is logged with a traceback even though the listener survives it.
        assert alive, f"the broker process died during the tests; log tail:\n{text[-4000:]}"
        assert code == 0, f"rmq up exited with {code} on SIGTERM; log tail:\n{text[-4000:]}"
        assert "Traceback" not in text, f"the broker logged an exception:\n{text[-6000:]}"


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """One `rmq up` per test module; tests use their own topic and group names."""
    yield from _broker_fixture(tmp_path_factory, "rmq-up")


@pytest.fixture
def own_broker(tmp_path_factory):
    """A broker for one test (the test may stop it and open its store)."""
    yield from _broker_fixture(tmp_path_factory, "rmq-up-own")


_counter = [0]


def unique(prefix: str) -> str:
    """A topic/group name no other test uses (legal for Kafka and RocketMQ)."""
    _counter[0] += 1
    return f"{prefix}-{os.getpid()}-{_counter[0]}-{int(time.time() * 1000) % 1_000_000}"


# ---------------------------------------------------------------------------------------------
# A raw Kafka client over our own sans-IO codec.

class RawClient:
    """One blocking TCP connection; request() sends one request and decodes its answer."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str | None = "raw-test"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.client_id = client_id

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.send_raw(kp.encode_request(api_key, version, self.corr, body, client_id=self.client_id))
        corr, resp = kp.decode_response(api_key, version, self.read_frame())
        assert corr == self.corr, f"correlation id {corr}, expected {self.corr}"
        return resp

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False


def api_versions_ok(bootstrap: str) -> bool:
    """A fresh connection gets a normal ApiVersions v3 answer."""
    with RawClient(bootstrap) as c:
        r = c.request(kp.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        return r["error_code"] == 0 and any(k["api_key"] == kp.PRODUCE for k in r["api_keys"])


def create_topic_raw(bootstrap: str, name: str, partitions: int) -> int:
    with RawClient(bootstrap) as c:
        r = c.request(kp.CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                        "replication_factor": 1, "assignments": [],
                                                        "configs": []}],
                                            "timeout_ms": 10_000, "validate_only": False})
        return r["topics"][0]["error_code"]


def wait_until(pred, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `pred` until it returns a truthy value (returned) or `timeout` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
