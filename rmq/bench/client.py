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

__all__ = ["bench_rmq", "EmbeddedRocketMQ", "run_client_bench", "run_python_bench", "run_cpp_bench", "run_kafka_bench"]


# ---------------------------------------------------------------------------------- servers
def _serve_forever(store_dir: str, host: str, ready: Any, stop: Any, max_transfer: int = 32,
                   loop_name: str | None = None, broker_set: dict | None = None) -> None:
    """Child-process body: the embedded server of `rmq up` (NameServer, broker remoting and the
    plugin listeners, Kafka among them) on ephemeral ports, on the event loop `loop_name` (None:
    RMQ_LOOP's choice, rmq.server.eventloop); reports its listeners, pid and loop, waits."""
    import asyncio

    from rmq.config import load_config
    from rmq.server.app import EmbeddedServer
    from rmq.server.eventloop import run, running_loop_name
    for name in ("rmq.broker", "rmq.namesrv", "rmq.store", "kafka_bridge"):   # auto-create warnings
        logging.getLogger(name).setLevel(logging.ERROR)

    async def main() -> None:
        cfg = load_config(None, {"storePathRootDir": os.path.join(store_dir, "broker-a"), "namesrvPort": 0,
                                 "listenPort": 0, "kafkaPort": 0, "brokerIP1": host,
                                 "mappedFileSizeCommitLog": 256 * 1024 * 1024,
                                 "maxTransferCountOnMessageInMemory": max_transfer, **(broker_set or {})})
        srv = EmbeddedServer(cfg, host)
        try:
            listeners = await srv.start()
            ready.put(dict(listeners, pid=os.getpid(), loop=running_loop_name()))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, stop.wait)
        finally:
            await srv.stop()
    try:
        run(main(), name=loop_name)
    except BaseException as exc:  # report start failures to the parent
        ready.put(f"ERROR {type(exc).__name__}: {exc}")


class EmbeddedRocketMQ:
    """A NameServer and one broker (rmq.namesrv / rmq.server.broker_listener over a
    BrokerController on a temporary store) on ephemeral ports in a background event loop.
    ``mode="process"`` runs them in a child process instead (no GIL shared with clients)."""

    def __init__(self, *, store_dir: str | None = None, host: str = "127.0.0.1", mode: str = "inproc",
                 max_transfer: int = 32, loop_name: str | None = None, broker_set: dict | None = None) -> None:
        self.host = host
        #: broker and store settings over the embedded broker's own (camelCase keys, as in its YAML)
        self.broker_set = dict(broker_set or {})
        #: mode="process": the child's event loop (rmq.server.eventloop: auto, uvloop, asyncio; None:
        #: RMQ_LOOP's choice); `loop` is the kind it runs once started
        self.loop_name = loop_name
        self.loop = "asyncio"
        #: the broker's maxTransferCountOnMessageInMemory (most messages one pull answer carries)
        self.max_transfer = max_transfer
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
        self.kafka_addr = ""      # the Kafka listener (mode="process" only)
        self.pid = os.getpid()    # the process whose CPU is the broker's (and, inproc, the clients')

    def start(self, timeout: float = 30.0) -> str:
        if self.mode == "process":
            ctx = multiprocessing.get_context("spawn")
            ready = ctx.Queue()
            self._stop_evt = ctx.Event()
            self._proc = ctx.Process(target=_serve_forever, args=(self.store_dir, self.host, ready, self._stop_evt,
                                                                      self.max_transfer, self.loop_name,
                                                                      self.broker_set),
                                     name="rmq-bench-server", daemon=True)
            self._proc.start()
            got = ready.get(timeout=timeout)
            if isinstance(got, str):
                raise RuntimeError(f"embedded server failed: {got[6:]}")
            self.namesrv_addr, self.broker_addr = got["namesrv"], got["remoting"]
            self.kafka_addr, self.pid, self.loop = got.get("kafka", ""), got["pid"], got["loop"]
            return self.namesrv_addr
        from rmq.broker.controller import BrokerController
        from rmq.client.loop import LoopThread
        from rmq.config import load_config
        from rmq.namesrv import start_namesrv_listener
        from rmq.server.broker_listener import start_remoting_listener
        self._lt = LoopThread(name="rmq-embedded-server")
        self._ns, self.namesrv_addr = self._lt.run(start_namesrv_listener(self.host, 0), timeout)
        cfg = load_config(None, {"storePathRootDir": os.path.join(self.store_dir, "broker-a"),
                                 "namesrvAddr": self.namesrv_addr, "listenPort": 0, "brokerIP1": self.host,
                                 "mappedFileSizeCommitLog": 256 * 1024 * 1024,
                                 "maxTransferCountOnMessageInMemory": self.max_transfer, **self.broker_set})
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

    def hit_many(self, k: int) -> None:
        now = time.perf_counter()
        with self.lock:
            if self.n == 0:
                self.first = now
            self.n += k
            self.last = now
            if self.n >= self.expected:
                self.done.set()


def _consume_figures(c: _Counter, started: float, count: int) -> dict[str, Any]:
    span = c.last - c.first
    return {"consumed": c.n, "consume_msgs_per_s": round((c.n - 1) / span, 1) if c.n > 1 and span > 0 else 0.0,
            "consume_startup_ms": round((c.first - started) * 1000, 1) if c.n else None,
            "consume_total_s": round(c.last - started, 3) if c.n else None,
            "consume_complete": c.n >= count, "consume_expected": count}


def _body(size: int) -> bytes:
    return (os.urandom(size // 2 + 1).hex()[:size]).encode()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (psutil)."""
    import psutil
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _sys_s(pid: int) -> float:
    """System (kernel) CPU seconds of a process so far: its share of the broker's CPU is the sockets,
    the commitlog writes and the wake-ups."""
    import psutil
    return psutil.Process(pid).cpu_times().system


class _Shares:
    """Splits `count` messages into `parts` near-equal shares."""

    @staticmethod
    def split(count: int, parts: int) -> list[int]:
        return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


def _py_send_worker(namesrv: str, topic: str, count: int, size: int, threads: int, batch: int,
                    window: int) -> dict[str, Any]:
    """One sending process with this package's Producer: `threads` threads share one Producer; each
    sends its share one at a time (sync), in SEND_BATCH_MESSAGE batches of `batch`, or (window > 0)
    async with at most `window` sends in flight. Returns latencies (per call), wall time, CPU."""
    from rmq.client import Message, Producer
    body = _body(size)
    run = uuid.uuid4().hex[:8]
    p = Producer(f"bench_py_pg_{run}", namesrv, instance_name=f"bench_py_p_{run}",
                 back_pressure_for_async_send_num=max(1, window))
    p.start()
    lat: list[float] = []
    errors: list[str] = []
    sent_ok: list[int] = []
    try:
        # creates the topic (TBW102), fills caches; one attempt with a long timeout (a retry after a
        # timeout could store it twice, and a loaded machine can stretch the first send past 3 s)
        p.send(Message(topic, body, tags="warmup"), timeout=15)

        def work(n: int) -> None:
            mine: list[float] = []
            done = 0                       # sends the broker confirmed
            try:
                if window > 0:
                    pending = threading.Semaphore(0)
                    fails: list[BaseException] = []

                    def cb(res, exc) -> None:
                        if exc is not None:
                            fails.append(exc)
                        pending.release()
                    started = 0
                    try:
                        for _ in range(n):
                            p.send_async(Message(topic, body, tags="bench"), cb)   # blocks at the window
                            started += 1
                    finally:
                        for _ in range(started):     # the started ones complete (or fail) either way
                            if not pending.acquire(timeout=60):
                                raise TimeoutError("async sends did not complete within 60 s")
                        done = started - len(fails)
                    if fails:
                        raise fails[0]
                elif batch > 1:
                    left = n
                    while left > 0:
                        k = min(batch, left)
                        s = time.perf_counter()
                        p.send_batch([Message(topic, body, tags="bench") for _ in range(k)])
                        mine.append(time.perf_counter() - s)
                        done += k
                        left -= k
                else:
                    for _ in range(n):
                        s = time.perf_counter()
                        p.send(Message(topic, body, tags="bench"))
                        mine.append(time.perf_counter() - s)
                        done += 1
            except Exception as exc:  # noqa: BLE001 - reported, not raised from a thread
                errors.append(f"{type(exc).__name__}: {exc}")
            lat.extend(mine)
            sent_ok.append(done)
        out = _run_send_threads(work, count, threads)
    finally:
        p.shutdown()
    return {"lat": lat, "errors": errors, "sent": sum(sent_ok), **out}


def _run_send_threads(work, count: int, threads: int) -> dict[str, float]:
    """Split `count` sends over `threads` threads running work(n); the wall and process CPU seconds."""
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    ths = [threading.Thread(target=work, args=(n,), name=f"bench-send-{i}")
           for i, n in enumerate(_Shares.split(count, threads))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - cpu0}


def _cpp_send_worker(namesrv: str, topic: str, count: int, size: int, threads: int, batch: int,
                     window: int) -> dict[str, Any]:
    """The same with the stock C++ client (send_sync per message; its 0.4.4 binding has no batch
    or async send, so those are refused before this runs)."""
    from rocketmq.client import Message as CMessage
    from rocketmq.client import Producer as CProducer
    body = _body(size)
    run = uuid.uuid4().hex[:8]
    p = CProducer(f"bench_cpp_pg_{run}")
    p.set_namesrv_addr(namesrv)
    p.start()
    lat: list[float] = []
    errors: list[str] = []

    def mk(tag: str) -> Any:
        m = CMessage(topic)
        m.set_tags(tag)
        m.set_body(body)
        return m
    try:
        p.send_sync(mk("warmup"))

        def work(n: int) -> None:
            mine = []
            try:
                for _ in range(n):
                    m = mk("bench")
                    s = time.perf_counter()
                    p.send_sync(m)
                    mine.append(time.perf_counter() - s)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{type(exc).__name__}: {exc}")
            lat.extend(mine)
        out = _run_send_threads(work, count, threads)
        out["sent"] = len(lat)
    finally:
        p.shutdown()
    return {"lat": lat, "errors": errors, **out}


def _worker_entry(args: tuple) -> dict[str, Any]:
    fn = _py_send_worker if args[0] == "python" else _cpp_send_worker
    return fn(*args[1:])


def _send_phase(which: str, namesrv: str, topic: str, count: int, size: int, threads: int, processes: int,
                batch: int, window: int) -> dict[str, Any]:
    """Runs the senders (in this process, or in `processes` child processes) and sums them up:
    messages per second over the longest sender's wall time, client CPU per message."""
    shares = _Shares.split(count, processes)
    jobs = [(which, namesrv, topic, n, size, threads, batch, window) for n in shares if n > 0]
    t0 = time.perf_counter()
    if processes == 1:
        outs = [_worker_entry(jobs[0])]
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(len(jobs)) as pool:
            outs = pool.map(_worker_entry, jobs)
    span = time.perf_counter() - t0
    wall = max(o["wall"] for o in outs)
    lat = [x for o in outs for x in o["lat"]]
    errors = [e for o in outs for e in o["errors"]]
    sent = sum(o["sent"] for o in outs)    # confirmed by the broker; the rates count only these
    out = {"sent": sent, "send_msgs_per_s": round(sent / wall, 1) if wall > 0 else 0.0,
           "send_mb_per_s": round(sent * size / wall / 1e6, 3) if wall > 0 else 0.0,
           "client_cpu_us_per_send": round(sum(o["cpu"] for o in outs) / max(1, sent) * 1e6, 1),
           "send_phase_s": round(span, 3)}
    out.update(_percentiles(lat))
    if errors:
        out["send_errors"] = errors[:5]
    return out


def _py_consumer(namesrv: str, topic: str, counter: _Counter, pull_batch_size: int = 32,
                 consume_batch: int = 1) -> Any:
    from rmq.client import ConsumeFromWhere, ConsumeStatus, PushConsumer
    run = uuid.uuid4().hex[:8]

    def listener(msgs: list) -> ConsumeStatus:
        counter.hit_many(len(msgs))
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(f"bench_py_cg_{run}", namesrv, instance_name=f"bench_py_c_{run}",
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     pull_batch_size=pull_batch_size, consume_message_batch_max_size=consume_batch)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    return c


def _cpp_consumer(namesrv: str, topic: str, counter: _Counter) -> Any:
    from rocketmq.client import PushConsumer as CPushConsumer
    run = uuid.uuid4().hex[:8]

    def callback(msg: Any) -> None:
        counter.hit()
    c = CPushConsumer(f"bench_cpp_cg_{run}")
    c.set_namesrv_addr(namesrv)
    c.set_instance_name(f"bench_cpp_c_{run}")
    c.subscribe(topic, callback, "*")
    return c


def run_client_bench(which: str, namesrv: str, topic: str, count: int, size: int, consume_timeout: float, *,
                     threads: int = 1, processes: int = 1, batch: int = 1, window: int = 0,
                     broker_pid: int | None = None, pull_batch_size: int = 32,
                     consume_batch: int = 1) -> dict[str, Any]:
    """Sends COUNT messages (threads x processes senders; sync, batched or async), then one push
    consumer (CONSUME_FROM_FIRST_OFFSET) reads them back; broker CPU per message of each phase
    when the broker's pid is known."""
    label = "python (rmq.client)" if which == "python" else "cpp (rocketmq 0.4.4)"
    if which == "cpp":
        try:
            import rocketmq.client  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - ImportError or a missing shared library
            return {"client": label, "error": f"C++ client unavailable: {exc}"}
        if batch > 1 or window > 0:
            return {"client": label, "error": "the C++ client's Python binding (0.4.4) has no batch or async send"}
    b0 = _cpu_s(broker_pid) if broker_pid else None
    s0 = _sys_s(broker_pid) if broker_pid else None
    out: dict[str, Any] = {"client": label}
    out.update(_send_phase(which, namesrv, topic, count, size, threads, processes, batch, window))
    b1 = _cpu_s(broker_pid) if broker_pid else None
    s1 = _sys_s(broker_pid) if broker_pid else None
    counter = _Counter(count + 1)                      # + the warm-up message of each sender process
    sent = out["sent"]                                  # a failed send is not waited for
    counter.expected = sent + min(processes, count)
    if which == "python":
        consumer = _py_consumer(namesrv, topic, counter, pull_batch_size, consume_batch)
    else:
        consumer = _cpp_consumer(namesrv, topic, counter)
    c0 = time.process_time()
    started = time.perf_counter()
    consumer.start()
    try:
        counter.done.wait(consume_timeout)
    finally:
        consumer.shutdown()
    c1 = time.process_time()
    b2 = _cpu_s(broker_pid) if broker_pid else None
    out.update(_consume_figures(counter, started, counter.expected))
    if broker_pid:
        out["broker_cpu_us_per_send"] = round((b1 - b0) / max(1, sent) * 1e6, 1)
        out["broker_sys_us_per_send"] = round((s1 - s0) / max(1, sent) * 1e6, 1)
        out["broker_cpu_us_per_consumed"] = round((b2 - b1) / max(1, counter.n) * 1e6, 2)
    if counter.n:
        out["client_cpu_us_per_consumed"] = round((c1 - c0) / counter.n * 1e6, 2)
    return out


def run_python_bench(namesrv: str, topic: str, count: int, size: int, consume_timeout: float,
                     progress: Callable[[str, int], None] | None = None, **kw: Any) -> dict[str, Any]:
    """Sync sends with this package's Producer, then a PushConsumer reading them back."""
    return run_client_bench("python", namesrv, topic, count, size, consume_timeout, **kw)


def run_cpp_bench(namesrv: str, topic: str, count: int, size: int, consume_timeout: float,
                  progress: Callable[[str, int], None] | None = None, **kw: Any) -> dict[str, Any]:
    """The same workload through the stock C++ client (PyPI ``rocketmq``: send_sync, PushConsumer)."""
    return run_client_bench("cpp", namesrv, topic, count, size, consume_timeout, **kw)


def run_kafka_bench(bootstrap: str, topic: str, count: int, size: int, consume_timeout: float,
                    broker_pid: int | None = None) -> dict[str, Any]:
    """The Kafka path of the same broker: confluent-kafka produces COUNT records of SIZE bytes
    (acks=all, librdkafka's batching), then a group consumer reads them from the beginning."""
    label = "kafka (confluent-kafka)"
    try:
        import confluent_kafka
    except ImportError as exc:
        return {"client": label, "error": f"confluent-kafka unavailable: {exc}"}
    body = _body(size)
    out: dict[str, Any] = {"client": label, "sent": count}
    b0 = _cpu_s(broker_pid) if broker_pid else None
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "queue.buffering.max.messages": max(100_000, count)})
    errors: list[str] = []

    def dr(err, _msg) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, body, on_delivery=dr)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(60)
    wall = time.perf_counter() - t0
    out.update({"send_msgs_per_s": round(count / wall, 1), "send_mb_per_s": round(count * size / wall / 1e6, 3),
                "client_cpu_us_per_send": round((time.process_time() - cpu0) / count * 1e6, 1)})
    if errors or left:
        out["send_errors"] = errors + ([f"{left} records undelivered after 60 s"] if left else [])
    b1 = _cpu_s(broker_pid) if broker_pid else None
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench_kafka_{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    n = 0
    first = last = 0.0
    started = time.perf_counter()
    c0 = time.process_time()
    deadline = time.monotonic() + consume_timeout
    try:
        while n < count and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    now = time.perf_counter()
                    if n == 0:
                        first = now
                    n += 1
                    last = now
    finally:
        c.close()
    c1 = time.process_time()
    b2 = _cpu_s(broker_pid) if broker_pid else None
    span = last - first
    out.update({"consumed": n, "consume_msgs_per_s": round((n - 1) / span, 1) if n > 1 and span > 0 else 0.0,
                "consume_startup_ms": round((first - started) * 1000, 1) if n else None,
                "consume_complete": n >= count, "consume_expected": count})
    if n:
        out["client_cpu_us_per_consumed"] = round((c1 - c0) / n * 1e6, 2)
    if broker_pid:
        out["broker_cpu_us_per_send"] = round((b1 - b0) / count * 1e6, 1)
        out["broker_cpu_us_per_consumed"] = round((b2 - b1) / max(1, n) * 1e6, 2)
    return out


_ROWS = [("send msgs/s", "send_msgs_per_s"), ("send MB/s", "send_mb_per_s"), ("send p50 ms", "p50_ms"),
         ("send p99 ms", "p99_ms"), ("send max ms", "max_ms"),
         ("broker CPU us/send", "broker_cpu_us_per_send"), ("  of which kernel us/send", "broker_sys_us_per_send"),
         ("client CPU us/send", "client_cpu_us_per_send"),
         ("consume msgs/s", "consume_msgs_per_s"), ("broker CPU us/consumed", "broker_cpu_us_per_consumed"),
         ("client CPU us/consumed", "client_cpu_us_per_consumed"),
         ("consume startup ms", "consume_startup_ms"), ("consumed", "consumed")]


def _broker_settings(pairs, namesrv) -> dict:
    """--broker-set KEY=VALUE pairs as config overrides, checked as the broker's YAML is (a wrong key
    or type is a click error naming it)."""
    if not pairs:
        return {}
    if namesrv:
        raise click.BadParameter("sets the embedded broker's settings: not with --namesrv", param_hint="--broker-set")
    import yaml

    from rmq.config import ConfigError, load_config
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--broker-set")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise click.BadParameter(f"{key.strip()}: value {raw!r} is not a YAML scalar", param_hint="--broker-set")
    try:
        load_config(None, out)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-set")
    return out


@click.command("rmq")
@click.option("--namesrv", help="NameServer address; without it an embedded NameServer + broker is started.")
@click.option("--broker-pid", type=int, help="With --namesrv: the broker's process id, to print its CPU per message.")
@click.option("--count", type=int, default=10_000, show_default=True, help="Messages per client.")
@click.option("--size", type=int, default=128, show_default=True, help="Body size in bytes.")
@click.option("--topic", default="BenchRmq", show_default=True,
              help="Topic prefix; each client and run gets its own fresh topic <prefix>_<client>_<run>.")
@click.option("--client", "which", type=click.Choice(["python", "cpp", "both"]), default="both", show_default=True)
@click.option("--threads", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Sender threads per sending process (sharing one producer).")
@click.option("--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Sending processes (each with its own producer and --threads threads).")
@click.option("--batch", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Messages per SEND_BATCH_MESSAGE (1: one SEND_MESSAGE each; Python client only).")
@click.option("--async", "async_window", type=click.IntRange(0, 100_000), default=0, show_default=True,
              help="Async sends with at most this many in flight per producer (0: sync; Python client only).")
@click.option("--vs-kafka", is_flag=True,
              help="Also produce and consume the same count and size through the broker's Kafka listener "
                   "(confluent-kafka), in the same run.")
@click.option("--server", "server_mode", type=click.Choice(["inproc", "process"]), default="process",
              show_default=True,
              help="Embedded server in a child process (its CPU is the broker's) or in this process "
                   "(the CPU then includes the clients'; no Kafka listener). Ignored with --namesrv.")
@click.option("--pull-batch-size", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="The Python push consumer's pullBatchSize; the embedded broker's "
                   "maxTransferCountOnMessageInMemory is raised to match (with --namesrv the broker's own "
                   "setting caps it).")
@click.option("--consume-batch", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="The Python push consumer's consumeMessageBatchMaxSize (messages per listener call).")
@click.option("--consume-timeout", type=float, default=120.0, show_default=True,
              help="Give up consuming after this many seconds.")
@click.option("--loop", "loops", default="auto", show_default=True,
              help="The embedded server's event loop (rmq.server.eventloop): auto, uvloop or asyncio; a comma "
                   "list (asyncio,uvloop) runs each in turn, a fresh server each, in one report.")
@click.option("--repeat", type=click.IntRange(1, 50), default=1, show_default=True,
              help="Runs per loop, interleaved (the loop order alternates); the table shows medians and ranges.")
@click.option("--broker-set", "broker_sets", multiple=True, metavar="KEY=VALUE",
              help="A broker or store setting of the embedded broker (camelCase, as in its YAML file; the value "
                   "read as YAML), e.g. flushCommitLogTimed=true; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_rmq(namesrv, broker_pid, count, size, topic, which, threads, processes, batch, async_window, vs_kafka,
              server_mode, pull_batch_size, consume_batch, consume_timeout, loops, repeat, broker_sets,
              as_json) -> None:
    """Send COUNT messages of SIZE bytes, then consume them with a push consumer; Python client and
    C++ client (and with --vs-kafka the Kafka path of the same broker) side by side, with the
    broker's CPU per message."""
    from rmq.client.producer import validate_topic
    if count <= 0 or size <= 0:
        raise click.BadParameter("--count and --size must be positive")
    if size > 4 * 1024 * 1024:
        raise click.BadParameter("bodies over 4 MiB are refused (maxMessageSize)", param_hint="--size")
    if batch > 1 and async_window:
        raise click.BadParameter("choose --batch or --async, not both", param_hint="--batch")
    if batch * (size + 200) > 4 * 1024 * 1024:
        raise click.BadParameter("a batch must encode to at most 4 MiB (maxMessageSize)", param_hint="--batch")
    if vs_kafka and namesrv:
        raise click.BadParameter("--vs-kafka needs the embedded server (no --namesrv)", param_hint="--vs-kafka")
    if vs_kafka and server_mode == "inproc":
        raise click.BadParameter("--vs-kafka needs --server process (the Kafka listener runs there)",
                                 param_hint="--vs-kafka")
    validate_topic(topic)
    broker_set = _broker_settings(broker_sets, namesrv)
    from rmq.server.eventloop import CHOICES, LoopChoiceError, chosen
    loop_names = [x.strip().lower() for x in loops.split(",") if x.strip()]
    for x in loop_names or [loops]:
        if x not in CHOICES:
            raise click.BadParameter(f"expected {', '.join(CHOICES)} or a comma list of them, got {x!r}",
                                     param_hint="--loop")
        try:
            chosen(x)
        except LoopChoiceError as exc:
            raise click.BadParameter(str(exc), param_hint="--loop")
    if server_mode == "inproc" and not namesrv and "uvloop" in loop_names:
        raise click.BadParameter("--server inproc runs the broker on the bench's own asyncio loop thread; "
                                 "uvloop needs --server process", param_hint="--loop")
    if (len(loop_names) > 1 or repeat > 1) and (namesrv or server_mode == "inproc"):
        raise click.BadParameter("several loops or --repeat need the embedded server in a child process "
                                 "(no --namesrv, --server process)", param_hint="--loop")
    logging.basicConfig(level=os.environ.get("RMQ_LOG", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if "RMQ_LOG" not in os.environ:
        for name in ("rmq.broker", "rmq.namesrv", "rmq.store"):   # auto-create warnings are expected
            logging.getLogger(name).setLevel(logging.ERROR)
    server = None
    if broker_pid is not None:
        import psutil
        if not namesrv:
            raise click.BadParameter("--broker-pid goes with --namesrv", param_hint="--broker-pid")
        if not psutil.pid_exists(broker_pid):
            raise click.BadParameter(f"no process {broker_pid}", param_hint="--broker-pid")
    shape = {"threads": threads, "processes": processes, "batch": batch, "window": async_window}
    run_kw = dict(which=which, count=count, size=size, topic=topic, shape=shape, pull_batch_size=pull_batch_size,
                  consume_batch=consume_batch, consume_timeout=consume_timeout, vs_kafka=vs_kafka, as_json=as_json)
    if namesrv:
        runs = [_one_run(None, namesrv, broker_pid, **run_kw)]
    else:
        runs = []
        for r in range(repeat):
            for name in (loop_names if r % 2 == 0 else loop_names[::-1]):
                server = EmbeddedRocketMQ(mode=server_mode, max_transfer=max(32, pull_batch_size), loop_name=name,
                                          broker_set=broker_set)
                try:
                    addr = server.start()
                except Exception as exc:
                    server.stop()
                    raise click.ClickException(f"could not start the embedded NameServer + broker: {exc}")
                if not as_json:
                    click.echo(f"embedded NameServer {addr} ({server_mode}, pid {server.pid}, loop {server.loop}); "
                               f"store {server.store_dir}", err=True)
                try:
                    runs.append(_one_run(server, addr, server.pid, **run_kw))
                finally:
                    server.stop()
    first = runs[0]
    report = {"namesrv": first["namesrv"], "embedded": first["loop"] != "external",
              "server": server_mode if first["loop"] != "external" else "external",
              "broker_pid": first["broker_pid"], "count": count, "size": size, **shape,
              "pull_batch_size": pull_batch_size, "consume_batch": consume_batch, "loop": first["loop"],
              "broker_set": broker_set, "results": first["results"]}
    if len(runs) > 1:
        report["runs"] = [{"loop": r["loop"], "broker_pid": r["broker_pid"], "results": r["results"]} for r in runs]
        report["medians"] = _medians(runs)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    from rich.console import Console
    from rich.table import Table
    how = (f"batches of {batch}" if batch > 1 else f"async, window {async_window}" if async_window else "sync")
    where = f"NameServer {namesrv}" if namesrv else f"embedded {server_mode}"
    title = (f"rmq bench rmq: {count} x {size} B, {how} send ({processes} process(es) x {threads} "
             f"thread(s)) then push consume (Python: pullBatchSize {pull_batch_size}, consumeMessageBatchMaxSize "
             f"{consume_batch}; {where}"
             + "".join(f", {k}={v}" for k, v in broker_set.items()))
    table = Table(title=title + (f", medians of {repeat} interleaved run(s) per loop [min-max])" if len(runs) > 1
                                 else f", loop {first['loop']})"))
    table.add_column("metric")
    if len(runs) > 1:
        cols = [(f"{res.get('client', n)} @ {lp}", res) for lp, per in report["medians"].items()
                for n, res in per.items()]
    else:
        cols = [(res.get("client", n), res) for n, res in first["results"].items()]
    for label, _ in cols:
        table.add_column(label, justify="right")
    for label, key in _ROWS:
        table.add_row(label, *[_cell(res, key) for _, res in cols])
    Console().print(table)
    if first["loop"] != "external" and server_mode == "inproc":
        click.echo("(inproc: the broker CPU figures include the clients' CPU; --server process separates them)",
                   err=True)
    for run_ in runs:
        for n, r in run_["results"].items():
            if "error" in r:
                click.echo(f"{n}: {r['error']}", err=True)
                continue
            for e in r.get("send_errors", []):
                click.echo(f"{n}: send error: {e}", err=True)
            if not r.get("consume_complete"):
                click.echo(f"{n}: consumed only {r['consumed']} of {r.get('consume_expected', count)} "
                           f"within {consume_timeout}s", err=True)


def _one_run(server: "EmbeddedRocketMQ | None", namesrv: str, broker_pid: int | None, *, which: str, count: int,
             size: int, topic: str, shape: dict, pull_batch_size: int, consume_batch: int, consume_timeout: float,
             vs_kafka: bool, as_json: bool) -> dict[str, Any]:
    """One pass of the chosen clients (and the Kafka path) against one server."""
    from rmq.client.errors import MQClientError
    run = time.strftime("%H%M%S") + uuid.uuid4().hex[:4]
    results: dict[str, Any] = {}
    for name in ("python", "cpp"):
        if which not in (name, "both"):
            continue
        t = f"{topic}_{name}_{run}"
        if not as_json:
            click.echo(f"{name}: {count} x {size} B to {t} ...", err=True)
        try:
            results[name] = run_client_bench(name, namesrv, t, count, size, consume_timeout,
                                             broker_pid=broker_pid, pull_batch_size=pull_batch_size,
                                             consume_batch=consume_batch, **shape)
        except MQClientError as exc:
            results[name] = {"error": str(exc)}
    if vs_kafka and server is not None:
        t = f"{topic}_kafka_{run}"
        if not as_json:
            click.echo(f"kafka: {count} x {size} B to {t} via {server.kafka_addr} ...", err=True)
        results["kafka"] = run_kafka_bench(server.kafka_addr, t, count, size, consume_timeout, broker_pid)
    return {"loop": server.loop if server is not None else "external", "namesrv": namesrv,
            "broker_pid": broker_pid, "results": results}


def _medians(runs: list[dict]) -> dict[str, dict[str, dict[str, Any]]]:
    """loop -> client -> {metric: median, metric_range: [min, max]} over the runs of that loop."""
    import statistics
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        for client, res in r["results"].items():
            out.setdefault(r["loop"], {}).setdefault(client, {"client": res.get("client", client), "_runs": []})
            out[r["loop"]][client]["_runs"].append(res)
    for per in out.values():
        for agg in per.values():
            rs = agg.pop("_runs")
            agg["runs"] = len(rs)
            errs = [x["error"] for x in rs if "error" in x]
            if errs:
                agg["error"] = errs[0]
            for _, key in _ROWS:
                xs = [x[key] for x in rs if isinstance(x.get(key), (int, float)) and not isinstance(x.get(key), bool)]
                if xs:
                    agg[key] = round(statistics.median(xs), 2)
                    agg[key + "_range"] = [min(xs), max(xs)]
    return out


def _cell(res: dict, key: str) -> str:
    v = res.get(key, res.get("error", "-"))
    rng = res.get(key + "_range")
    if rng and rng[0] != rng[1]:
        return f"{v} [{rng[0]}-{rng[1]}]"
    return str(v)
