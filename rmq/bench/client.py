"""``rmq bench rmq``: send-then-consume throughput and send latency for this project's Python
client and the stock C++ client (PyPI rocketmq 0.4.4) side by side (DESIGN "Speed is measured
by benchmark commands"; SPEC §3, §4).  Without --namesrv an embedded NameServer + broker is
started on ephemeral ports (in this process, or a child process with --server process)."""
from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

import click

log = logging.getLogger("rmq.bench.client")

__all__ = ["bench_rmq", "EmbeddedRocketMQ", "run_python_bench", "run_cpp_bench"]


# ---------------------------------------------------------------------------------- servers
def _serve_forever(store_dir: str, host: str, ready: Any, stop: Any) -> None:
    """Child-process body: start NameServer + broker, report the NameServer address, wait."""
    srv = EmbeddedRocketMQ(store_dir=store_dir, host=host)
    try:
        ready.put(srv.start())
        stop.wait()
    except BaseException as exc:  # report start failures to the parent
        ready.put(f"ERROR {type(exc).__name__}: {exc}")
    finally:
        srv.stop()


class EmbeddedRocketMQ:
    """A NameServer and one broker (rmq.namesrv / rmq.server.broker_listener over a
    BrokerController on a temporary store) on ephemeral ports in a background event loop.
    ``mode="process"`` runs them in a child process instead (no GIL shared with clients)."""

    def __init__(self, *, store_dir: str | None = None, host: str = "127.0.0.1", mode: str = "inproc") -> None:
        self.host = host
        self.mode = mode
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="rmq-bench-")
        self.namesrv_addr = ""
        self.broker_addr = ""
        self._lt = None
        self._ns = None
        self._broker = None
        self._ctrl = None
        self._proc: multiprocessing.Process | None = None
        self._stop_evt: Any = None

    def start(self, timeout: float = 30.0) -> str:
        if self.mode == "process":
            ctx = multiprocessing.get_context("spawn")
            ready = ctx.Queue()
            self._stop_evt = ctx.Event()
            self._proc = ctx.Process(target=_serve_forever, args=(self.store_dir, self.host, ready, self._stop_evt),
                                     name="rmq-bench-server", daemon=True)
            self._proc.start()
            addr = ready.get(timeout=timeout)
            if addr.startswith("ERROR"):
                raise RuntimeError(f"embedded server failed: {addr[6:]}")
            self.namesrv_addr = addr
            return addr
        from rmq.broker.controller import BrokerController
        from rmq.client.loop import LoopThread
        from rmq.config import load_config
        from rmq.namesrv import start_namesrv_listener
        from rmq.server.broker_listener import start_remoting_listener
        self._lt = LoopThread(name="rmq-embedded-server")
        self._ns, self.namesrv_addr = self._lt.run(start_namesrv_listener(self.host, 0), timeout)
        cfg = load_config(None, {"storePathRootDir": os.path.join(self.store_dir, "broker-a"),
                                 "namesrvAddr": self.namesrv_addr, "listenPort": 0, "brokerIP1": self.host,
                                 "mappedFileSizeCommitLog": 256 * 1024 * 1024})
        self._ctrl = BrokerController(cfg)
        self._ctrl.start()
        self._broker, self.broker_addr = self._lt.run(start_remoting_listener(self._ctrl, self.host, 0), timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._lt.run(_has_broker(self._ns)):
                return self.namesrv_addr
            time.sleep(0.02)
        raise RuntimeError("embedded broker did not register with the embedded NameServer")

    def stop(self) -> None:
        if self._proc is not None:
            self._stop_evt.set()
            self._proc.join(15)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(5)
            self._proc = None
        if self._lt is not None:
            try:
                if self._broker is not None:
                    self._lt.run(self._broker.close_async(), 15)
                if self._ns is not None:
                    self._lt.run(self._ns.close_async(), 15)
            finally:
                if self._ctrl is not None:
                    self._ctrl.shutdown()
                self._lt.stop()
                self._lt = None
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedRocketMQ":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


async def _has_broker(ns: Any) -> bool:
    return bool(ns.route_info.broker_addr_table)


# ---------------------------------------------------------------------------------- figures
def _percentiles(lat_s: list[float]) -> dict[str, float]:
    if not lat_s:
        return {"p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0, "max_ms": 0.0, "mean_ms": 0.0}
    xs = sorted(lat_s)
    n = len(xs)

    def pct(p: float) -> float:
        return round(xs[min(n - 1, int(p * n))] * 1000, 3)
    return {"p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "max_ms": round(xs[-1] * 1000, 3), "mean_ms": round(sum(xs) / n * 1000, 3)}


class _Counter:
    """Counts consumed messages of this run; notes first/last arrival times."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.n = 0
        self.first = 0.0
        self.last = 0.0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.e2e: list[float] = []

    def hit(self, born_ms: int | None = None) -> None:
        now = time.perf_counter()
        with self.lock:
            if self.n == 0:
                self.first = now
            self.n += 1
            self.last = now
            if self.n >= self.expected:
                self.done.set()


def _consume_figures(c: _Counter, started: float, count: int) -> dict[str, Any]:
    span = c.last - c.first
    return {"consumed": c.n, "consume_msgs_per_s": round((c.n - 1) / span, 1) if c.n > 1 and span > 0 else 0.0,
            "consume_startup_ms": round((c.first - started) * 1000, 1) if c.n else None,
            "consume_total_s": round(c.last - started, 3) if c.n else None,
            "consume_complete": c.n >= count}


def run_python_bench(namesrv: str, topic: str, count: int, size: int, consume_timeout: float,
                     progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Sync sends (one at a time) with this package's Producer, then a PushConsumer reading the
    same messages back (CONSUME_FROM_FIRST_OFFSET, defaults otherwise)."""
    from rmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
    run = uuid.uuid4().hex[:8]
    body = (os.urandom(size // 2 + 1).hex()[:size]).encode()
    p = Producer(f"bench_py_pg_{run}", namesrv, instance_name=f"bench_py_p_{run}")
    p.start()
    try:
        p.send(Message(topic, body, tags="warmup"))          # creates the topic (TBW102), fills caches
        lat: list[float] = []
        t0 = time.perf_counter()
        for i in range(count):
            s = time.perf_counter()
            p.send(Message(topic, body, tags="bench"))
            lat.append(time.perf_counter() - s)
            if progress and i % 1000 == 0:
                progress("python send", i)
        send_s = time.perf_counter() - t0
    finally:
        p.shutdown()
    counter = _Counter(count + 1)

    def listener(msgs: list) -> ConsumeStatus:
        for _ in msgs:
            counter.hit()
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(f"bench_py_cg_{run}", namesrv, instance_name=f"bench_py_c_{run}",
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    return _consume_and_report(c, counter, consume_timeout, "python (rmq.client)", count, size, send_s, lat)


def _consume_and_report(consumer, counter, consume_timeout: float, label: str, count: int, size: int,
                        send_s: float, lat: list) -> dict[str, Any]:
    """Start the push consumer, wait until it has consumed everything (or the timeout), and
    put the send and consume figures of one client together."""
    started = time.perf_counter()
    consumer.start()
    try:
        counter.done.wait(consume_timeout)
    finally:
        consumer.shutdown()
    out = {"client": label, "sent": count, "send_msgs_per_s": round(count / send_s, 1),
           "send_mb_per_s": round(count * size / send_s / 1e6, 3)}
    out.update(_percentiles(lat))
    out.update(_consume_figures(counter, started, count + 1))
    return out


def run_cpp_bench(namesrv: str, topic: str, count: int, size: int, consume_timeout: float,
                  progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """The same workload through the stock C++ client (PyPI ``rocketmq``: send_sync, PushConsumer)."""
    try:
        from rocketmq.client import Message as CMessage
        from rocketmq.client import Producer as CProducer
        from rocketmq.client import PushConsumer as CPushConsumer
    except Exception as exc:  # noqa: BLE001 - ImportError or a missing shared library
        return {"client": "cpp (rocketmq 0.4.4)", "error": f"C++ client unavailable: {exc}"}
    run = uuid.uuid4().hex[:8]
    body = (os.urandom(size // 2 + 1).hex()[:size]).encode()
    p = CProducer(f"bench_cpp_pg_{run}")
    p.set_namesrv_addr(namesrv)
    p.start()

    def mk() -> Any:
        m = CMessage(topic)
        m.set_tags("bench")
        m.set_body(body)
        return m
    try:
        w = CMessage(topic)
        w.set_tags("warmup")
        w.set_body(body)
        p.send_sync(w)
        lat: list[float] = []
        t0 = time.perf_counter()
        for i in range(count):
            m = mk()
            s = time.perf_counter()
            p.send_sync(m)
            lat.append(time.perf_counter() - s)
            if progress and i % 1000 == 0:
                progress("cpp send", i)
        send_s = time.perf_counter() - t0
    finally:
        p.shutdown()
    counter = _Counter(count + 1)

    def callback(msg: Any) -> None:
        counter.hit()
    c = CPushConsumer(f"bench_cpp_cg_{run}")
    c.set_namesrv_addr(namesrv)
    c.set_instance_name(f"bench_cpp_c_{run}")
    c.subscribe(topic, callback, "*")
    return _consume_and_report(c, counter, consume_timeout, "cpp (rocketmq 0.4.4)", count, size, send_s, lat)


_ROWS = [("send msgs/s", "send_msgs_per_s"), ("send MB/s", "send_mb_per_s"), ("send p50 ms", "p50_ms"),
         ("send p90 ms", "p90_ms"), ("send p99 ms", "p99_ms"), ("send p99.9 ms", "p999_ms"),
         ("send max ms", "max_ms"), ("consume msgs/s", "consume_msgs_per_s"),
         ("consume startup ms", "consume_startup_ms"), ("consumed", "consumed")]


@click.command("rmq")
@click.option("--namesrv", help="NameServer address; without it an embedded NameServer + broker is started.")
@click.option("--count", type=int, default=10_000, show_default=True, help="Messages per client.")
@click.option("--size", type=int, default=128, show_default=True, help="Body size in bytes.")
@click.option("--topic", default="BenchRmq", show_default=True,
              help="Topic prefix; each client and run gets its own fresh topic <prefix>_<client>_<run>.")
@click.option("--client", "which", type=click.Choice(["python", "cpp", "both"]), default="both", show_default=True)
@click.option("--server", "server_mode", type=click.Choice(["inproc", "process"]), default="inproc", show_default=True,
              help="Embedded server in this process or in a child process (ignored with --namesrv).")
@click.option("--consume-timeout", type=float, default=120.0, show_default=True,
              help="Give up consuming after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_rmq(namesrv, count, size, topic, which, server_mode, consume_timeout, as_json) -> None:
    """Send COUNT messages of SIZE bytes (sync, one at a time), then consume them with a push
    consumer; Python client and C++ client side by side."""
    from rmq.client.producer import validate_topic
    if count <= 0 or size <= 0:
        raise click.BadParameter("--count and --size must be positive")
    if size > 4 * 1024 * 1024:
        raise click.BadParameter("bodies over 4 MiB are refused (maxMessageSize)", param_hint="--size")
    validate_topic(topic)
    logging.basicConfig(level=os.environ.get("RMQ_LOG", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if "RMQ_LOG" not in os.environ:
        for name in ("rmq.broker", "rmq.namesrv", "rmq.store"):   # auto-create warnings are expected
            logging.getLogger(name).setLevel(logging.ERROR)
    server = None
    if not namesrv:
        server = EmbeddedRocketMQ(mode=server_mode)
        try:
            namesrv = server.start()
        except Exception as exc:
            server.stop()
            raise click.ClickException(f"could not start the embedded NameServer + broker: {exc}")
        if not as_json:
            click.echo(f"embedded NameServer {namesrv} ({server_mode}); store {server.store_dir}", err=True)
    run = time.strftime("%H%M%S")
    results: dict[str, Any] = {}
    try:
        from rmq.client.errors import MQClientError
        for name, fn in (("python", run_python_bench), ("cpp", run_cpp_bench)):
            if which not in (name, "both"):
                continue
            t = f"{topic}_{name}_{run}"
            if not as_json:
                click.echo(f"{name}: {count} x {size} B to {t} ...", err=True)
            try:
                results[name] = fn(namesrv, t, count, size, consume_timeout)
            except MQClientError as exc:
                results[name] = {"error": str(exc)}
    finally:
        if server is not None:
            server.stop()
    report = {"namesrv": namesrv, "embedded": server is not None, "server": server_mode if server else "external",
              "count": count, "size": size, "results": results}
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"rmq bench rmq: {count} x {size} B, sync send then push consume "
                        f"({'embedded ' + server_mode if server else 'NameServer ' + namesrv})")
    table.add_column("metric")
    names = list(results)
    for n in names:
        table.add_column(results[n].get("client", n), justify="right")
    for label, key in _ROWS:
        table.add_row(label, *[str(results[n].get(key, results[n].get("error", "-"))) for n in names])
    Console().print(table)
    for n in names:
        if "error" in results[n]:
            click.echo(f"{n}: {results[n]['error']}", err=True)
        elif not results[n].get("consume_complete"):
            click.echo(f"{n}: consumed only {results[n]['consumed']} of {count + 1} within {consume_timeout}s", err=True)
