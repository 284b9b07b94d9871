"""``rmq bench ha``: send throughput and latency of a SYNC_MASTER (a send is answered once its slave
has the bytes) beside an ASYNC_MASTER (answered at once, the slave follows), each with one slave,
from one run (SPEC §9, rmq/server/ha.py). Each pair runs as real `rmq namesrv` / `rmq broker`
processes on 127.0.0.1 with ephemeral ports; the Python client (rmq.client.Producer) sends."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import click
import yaml

from rmq.bench.client import _percentiles

__all__ = ["bench_ha", "run_ha_pair"]


def _spawn(args: list[str], log_path: str) -> subprocess.Popen:
    fh = open(log_path, "w")
    return subprocess.Popen([sys.executable, "-m", "rmq.cli", *args], stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ, RMQ_LOG=os.environ.get("RMQ_LOG", "WARNING")))


def _wait_ready(path: str, proc: subprocess.Popen, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as fh:
                return json.load(fh)
        if proc.poll() is not None:
            raise click.ClickException(f"a bench process exited with {proc.returncode} (see {path[:-5]}.log)")
        time.sleep(0.05)
    raise click.ClickException(f"{path} did not appear within {timeout:.0f} s")


def _runtime_max_offset(addr: str) -> int:
    """GET_BROKER_RUNTIME_INFO's commitLogMaxOffset, over a plain socket (-1 when unreachable)."""
    import socket

    from rmq.remoting import KVTable, RemotingCommand, RequestCode
    host, _, port = addr.rpartition(":")
    req = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    try:
        with socket.create_connection((host, int(port)), 3) as s:
            s.sendall(req.encode())
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                chunk = s.recv(65536)
                if not chunk:
                    return -1
                buf += chunk
    except OSError:
        return -1
    resp = RemotingCommand.decode(buf[4:4 + int.from_bytes(buf[:4], "big")])
    return int(KVTable.decode(resp.body).table["commitLogMaxOffset"])


def run_ha_pair(role: str, work: str, count: int, size: int, concurrency: int) -> dict:
    """Start a NameServer, a `role` master and its slave; send `count` messages of `size` bytes with
    `concurrency` threads; return throughput, latency percentiles and how long the slave took to
    hold everything after the last answer."""
    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.message import SendStatus
    procs: list[subprocess.Popen] = []
    name = f"bench-{role.lower()}"
    try:
        nsr = os.path.join(work, f"{name}-ns.json")
        procs.append(_spawn(["namesrv", "--port", "0", "--ready-file", nsr], nsr[:-5] + ".log"))
        ns = _wait_ready(nsr, procs[-1])["namesrv"]
        out = {}
        for tag, conf in (("m", {"brokerId": 0, "brokerRole": role, "kafkaEnable": False}),
                          ("s", {"brokerId": 1, "brokerRole": "SLAVE", "kafkaEnable": False})):
            base = {"brokerClusterName": "BenchHA", "brokerName": name, "namesrvAddr": ns, "brokerIP1": "127.0.0.1",
                    "listenPort": 0, "storePathRootDir": os.path.join(work, f"{name}-{tag}"),
                    "mappedFileSizeCommitLog": 256 * 1024 * 1024, "registerNameServerPeriod": 1000}
            base.update(conf)
            path = os.path.join(work, f"{name}-{tag}.yaml")
            with open(path, "w") as fh:
                yaml.safe_dump(base, fh)
            ready = os.path.join(work, f"{name}-{tag}.json")
            procs.append(_spawn(["broker", "-c", path, "--ready-file", ready], ready[:-5] + ".log"))
            out[tag] = _wait_ready(ready, procs[-1])
        master, slave = out["m"]["brokerAddr"], out["s"]["brokerAddr"]
        deadline = time.monotonic() + 15  # the slave learns the master's HA port from the NameServer
        while _runtime_max_offset(slave) < 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        topic = f"BenchHA_{uuid.uuid4().hex[:6]}"
        body = os.urandom(size // 2 + 1).hex()[:size].encode()
        p = Producer(f"bench_ha_pg_{role}", ns, config=ClientConfig(client_ip="127.0.0.1",
                                                                    instance_name=f"bench_ha_{role}"))
        p.start()
        try:
            deadline = time.monotonic() + 15
            while True:  # warm up until the slave is connected (a SYNC_MASTER answers SEND_OK then)
                r = p.send(Message(topic, body, tags="warmup"))
                if r.send_status is SendStatus.SEND_OK or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            lat: list[list[float]] = [[] for _ in range(concurrency)]
            statuses: dict[str, int] = {}
            lock = threading.Lock()
            per = count // concurrency

            def sender(k: int) -> None:
                mine = lat[k]
                for _ in range(per):
                    s = time.perf_counter()
                    res = p.send(Message(topic, body, tags="bench"))
                    mine.append(time.perf_counter() - s)
                    with lock:
                        statuses[res.send_status.name] = statuses.get(res.send_status.name, 0) + 1
            threads = [threading.Thread(target=sender, args=(k,)) for k in range(concurrency)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            send_s = time.perf_counter() - t0
        finally:
            p.shutdown()
        top = _runtime_max_offset(master)
        t1 = time.perf_counter()
        deadline = time.monotonic() + 30
        while _runtime_max_offset(slave) < top and time.monotonic() < deadline:
            time.sleep(0.005)
        lag_ms = (time.perf_counter() - t1) * 1000
        flat = [x for xs in lat for x in xs]
        return {"role": role, "sent": len(flat), "statuses": statuses, "msgs_per_s": round(len(flat) / send_s, 1),
                "MB_per_s": round(len(flat) * size / send_s / 1e6, 2), **_percentiles(flat),
                "slave_caught_up_after_ms": round(lag_ms, 1)}
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.terminate()
        for pr in procs:
            try:
                pr.wait(10)
            except subprocess.TimeoutExpired:
                pr.kill()


@click.command("ha")
@click.option("--count", default=2000, show_default=True, help="Messages per role.")
@click.option("--size", default=1024, show_default=True, help="Body bytes.")
@click.option("--concurrency", default=1, show_default=True, help="Sender threads sharing one Producer.")
@click.option("--data", type=click.Path(file_okay=False), help="Work directory (default: a temporary one, removed).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_ha(count, size, concurrency, data, as_json) -> None:
    """SYNC_MASTER vs ASYNC_MASTER (each with one slave): send msgs/s and latency side by side."""
    if count < 1 or size < 1 or concurrency < 1:
        raise click.BadParameter("expected positive numbers", param_hint="--count/--size/--concurrency")
    work = data or tempfile.mkdtemp(prefix="rmq-bench-ha-")
    os.makedirs(work, exist_ok=True)
    try:
        results = []
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            if not as_json:
                click.echo(f"{role}: {count} x {size} B, {concurrency} sender(s) ...", err=True)
            results.append(run_ha_pair(role, work, count, size, concurrency))
    finally:
        if not data:
            shutil.rmtree(work, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    rows = [("msgs/s", "msgs_per_s"), ("MB/s", "MB_per_s"), ("p50 ms", "p50_ms"), ("p90 ms", "p90_ms"),
            ("p99 ms", "p99_ms"), ("max ms", "max_ms"), ("slave caught up after (ms)", "slave_caught_up_after_ms")]
    click.echo(f"{'':28}{results[0]['role']:>16}{results[1]['role']:>16}")
    for label, key in rows:
        click.echo(f"{label:28}{results[0][key]:>16}{results[1][key]:>16}")
    click.echo(f"{'send statuses':28}{_fmt(results[0]['statuses']):>16}{_fmt(results[1]['statuses']):>16}")
    a, s = results
    if a["msgs_per_s"]:
        click.echo(f"SYNC_MASTER / ASYNC_MASTER: {s['msgs_per_s'] / a['msgs_per_s']:.2f}x msgs/s, "
                   f"p50 {s['p50_ms'] - a['p50_ms']:+.3f} ms")


def _fmt(statuses: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(statuses.items()))
