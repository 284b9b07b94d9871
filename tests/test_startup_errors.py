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


@pytest.mark.parametrize("data, reason", [
    ("afile/sub", "{tmp}/afile is a file, not a directory"),
    ("afile", "it is a file, not a directory"),
    ("/proc/nope", "cannot create it: No such file or directory"),
])
def test_unusable_data_directory_is_one_sentence(tmp_path, data, reason):
    (tmp_path / "afile").write_text("not a directory")
    from rmq.broker.controller import BrokerController
    from rmq.config import load_config
    from rmq.store.mapped_file import StoreDirError
    cfg = load_config(None, {"storePathRootDir": data if data.startswith("/") else str(tmp_path / data)})
    with pytest.raises(StoreDirError) as info:
        BrokerController(cfg).start()
    root = data if data.startswith("/") else str(tmp_path / data)
    assert str(info.value) == (f"cannot use {root} as the store directory: {reason.format(tmp=tmp_path)}; "
                               "choose another with --data, or storePathRootDir in the --config file")


def test_rmq_up_with_a_file_in_the_data_path_exits_1_without_traceback(tmp_path):
    (tmp_path / "afile").write_text("x")
    proc = subprocess.run(RMQ + ["up", "--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0",
                                 "--data", "afile/sub"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"Error: cannot use {tmp_path}/afile/sub as the store directory: {tmp_path}/afile is a file, not a "
        "directory; choose another with --data, or storePathRootDir in the --config file")
    assert "Traceback" not in proc.stderr


def test_rmq_up_runs_the_ha_service_for_a_sync_master_and_names_its_port_when_taken(tmp_path):
    """A SYNC_MASTER started by `rmq up` listens for its slave (the ready file lists "ha"); an HA
    port in use is one sentence naming it and haListenPort. An ASYNC_MASTER on the defaults opens
    no HA port."""
    import json
    import signal
    import time
    cfg = tmp_path / "sync.yaml"
    cfg.write_text("brokerRole: SYNC_MASTER\n")
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(RMQ + ["up", "--config", str(cfg), "--namesrv-port", "0", "--remoting-port", "0",
                                   "--kafka-port", "0", "--data", str(tmp_path / "store"), "--ready-file", str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        listeners = json.loads(ready.read_text())
        host, _, port = listeners["ha"].rpartition(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    cfg.write_text(f"brokerRole: SYNC_MASTER\nhaListenPort: {taken}\n")
    try:
        proc = subprocess.run(RMQ + ["up", "--config", str(cfg), "--namesrv-port", "0", "--remoting-port", "0",
                                     "--kafka-port", "0", "--data", str(tmp_path / "store2")],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        holder.close()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert errors == [f"Error: cannot start the ha listener: 127.0.0.1:{taken} is already in use (choose another "
                      "port with haListenPort in the --config file; 0 picks a free one)"], proc.stderr[-2000:]
    assert not (tmp_path / "store2" / "abort").exists()
    from rmq.config import load_config
    from rmq.server.app import EmbeddedServer
    assert not EmbeddedServer(load_config(None, {"storePathRootDir": str(tmp_path / "s3")})).wants_ha()
