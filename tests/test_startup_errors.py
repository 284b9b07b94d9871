"""`rmq up` start-up failures: one sentence naming the port and the option, exit code 1, no abort file."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

RMQ = [sys.executable, "-c", "from rmq.cli import main; main()"]


@pytest.mark.parametrize("which", ["namesrv", "remoting", "kafka"])
def test_port_in_use_is_one_sentence(tmp_path, which):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        ports = {"namesrv": "0", "remoting": "0", "kafka": "0"}
        ports[which] = str(port)
        data = tmp_path / "store"
        proc = subprocess.run(RMQ + ["up", "--namesrv-port", ports["namesrv"], "--remoting-port", ports["remoting"],
                                     "--kafka-port", ports["kafka"], "--data", str(data)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        holder.close()
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert errors == [f"Error: cannot start the {which} listener: 127.0.0.1:{port} is already in use "
                      f"(choose another port with --{which}-port, or "
                      f"{ {'namesrv': 'namesrvPort', 'remoting': 'listenPort', 'kafka': 'kafkaPort'}[which] } "
                      f"in the --config file; 0 picks a free one)"]
    assert "Traceback" not in proc.stderr
    assert not (data / "abort").exists()
