"""An OpenMessaging Benchmark workload run through Kafka clients (confluent-kafka) or RocketMQ clients
(this project's Python client or the stock C++ client), with OMB's meaning for each workload key and
OMB's result fields.

Scaled for one small machine: producers are `producersPerTopic` per topic but at most MAX_CLIENTS
client instances (each sends round-robin over its topics' partitions); each subscription is one
consumer group of `consumerPerSubscription` consumers (at most MAX_CLIENTS) subscribed to every
topic. Rates are counted per second; latencies in milliseconds.
"""
from __future__ import annotations

import os
import random
import statistics
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field

import psutil

from .schema import KeyDistributor, Workload

MAX_CLIENTS = 4
class _Stamp:
    """The first 32 bytes of every payload: the send time (end-to-end latency) and the send's sequence
    number, so that a record delivered twice to one subscription (a redelivery after a rebalance:
    at-least-once) counts once in messagesReceived and once in messagesRedelivered. Written as hex
    digits: the C++ client's Python binding (rocketmq 0.4.4) hands bodies over as C strings, cut at
    the first NUL byte, which a binary stamp would contain."""
    size = 32
    _bits = struct.Struct(">d")

    def pack_into(self, buf: bytearray, t: float, seq: int) -> None:
        buf[0:32] = b"%016x%016x" % (int.from_bytes(self._bits.pack(t), "big"), seq)

    def unpack(self, v: bytes):
        """(send time, sequence), or (None, None) for a body that does not start with a stamp."""
        try:
            head = bytes(v[:32])
            return self._bits.unpack(int(head[:16], 16).to_bytes(8, "big"))[0], int(head[16:], 16)
        except (ValueError, TypeError):
            return None, None


_STAMP = _Stamp()


class WorkloadError(RuntimeError):
    """The workload cannot run against this system; the message says why."""


@dataclass
class Series:
    """Counts per one-second window from the start of the measured phase."""
    t0: float
    counts: list[int] = field(default_factory=list)

    def add(self, n: int = 1, now: float | None = None) -> None:
        i = int(((now or time.monotonic()) - self.t0))
        if i < 0:
            return
        while len(self.counts) <= i:
            self.counts.append(0)
        self.counts[i] += n


def _pct(vals: list[float], q: float) -> float:
    if not vals:
        return 0.0
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(q * len(vals)))]


def payloads(w: Workload, base_dir: str | None) -> list[bytes]:
    size = max(w.messageSize, _STAMP.size)
    if w.payloadFile and base_dir and os.path.exists(os.path.join(base_dir, w.payloadFile)):
        with open(os.path.join(base_dir, w.payloadFile), "rb") as fh:
            data = fh.read()
        return [data if len(data) >= _STAMP.size else data.ljust(_STAMP.size, b"0")]
    # OMB reads payloadFile from its own tree; a workload copied here without it gets random bytes
    # of messageSize, as useRandomizedPayloads would
    n = max(1, w.randomizedPayloadPoolSize) if w.useRandomizedPayloads else 1
    rnd = random.Random(42)
    return [bytes(rnd.getrandbits(8) for _ in range(size)) for _ in range(n)]


class KafkaClients:
    """OMB's Kafka driver, through confluent-kafka (librdkafka)."""
    label = "kafka (confluent-kafka)"

    def __init__(self, bootstrap: str, producer_conf: dict | None = None) -> None:
        self.bootstrap = bootstrap
        self.conf = {"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all",
                     "queue.buffering.max.messages": 100_000, **(producer_conf or {})}

    def create_topics(self, topics: list[str], partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 10000})
        for i in range(0, len(topics), 64):
            futs = admin.create_topics([NewTopic(t, partitions, 1) for t in topics[i:i + 64]], operation_timeout=60)
            for t, f in futs.items():
                try:
                    f.result(90)
                except Exception as exc:
                    raise WorkloadError(f"creating topic {t}: {exc}") from None

    def producer(self):
        from confluent_kafka import Producer
        return Producer(self.conf)

    def send(self, prod, topic: str, part: int, key: bytes | None, value: bytes, done) -> None:
        while True:
            try:
                prod.produce(topic, value=value, key=key, partition=-1 if key else part,
                             on_delivery=lambda err, msg: done(err))
                return
            except BufferError:
                prod.poll(0.01)

    def poll(self, prod) -> None:
        prod.poll(0)

    def flush(self, prod) -> None:
        prod.flush(60)

    def close(self, prod) -> None:
        prod.flush(10)

    def consume(self, group: str, topics: list[str], on_value, stop: threading.Event, on_loop: bool = False) -> None:
        """A consumer of `group` on `topics` until `stop`, each value to `on_value` (on_loop: no
        meaning here, librdkafka's threads fetch and this thread polls either way)."""
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "fetch.wait.max.ms": 100})
        c.subscribe(topics)
        try:
            while not stop.is_set():
                for m in c.consume(500, 0.2):
                    if m.error() is None:
                        on_value(m.value())
        finally:
            c.close()


class _AutoBatch:
    """RocketMQ 5's producer `autoBatch` (its ProduceAccumulator), which OMB's RocketMQ driver turns on
    (`autoBatch: true` in driver-rocketmq/rocketmq.yaml), for this project's Python client: async sends
    of one topic are held until their bodies make `max_bytes` (the client's batchMaxBytes, 32 KiB) or
    the oldest has waited `max_delay` (batchMaxDelayMs, 10 ms), then go out as one SEND_BATCH_MESSAGE;
    every held message's callback runs with the batch's outcome. As in RocketMQ's client, the in-flight
    window (`gate`, backPressureForAsyncSendNum) counts send requests, so one batch takes one permit.
    A batch also closes at `max_messages` (256), so one of tiny bodies stays a bounded request.

    Used from the one thread that sends (the runner's), so the hot path takes no lock. RocketMQ's guard
    thread, which sends what has waited long enough, is done by that thread: add() looks for such
    batches once per `max_delay`, and so does the runner's poll() (run_omb calls it while it waits for
    the next send at a set rate)."""

    GATE_WAIT = 60.0        # a batch that finds no free permit for this long fails (counted as publish errors)
    MAX_MESSAGES = 256

    def __init__(self, producer, gate: threading.Semaphore, max_bytes: int = 32 * 1024, max_delay: float = 0.010,
                 max_messages: int = MAX_MESSAGES) -> None:
        self.producer, self.gate = producer, gate
        self.max_bytes, self.max_delay, self.max_messages = max_bytes, max_delay, max_messages
        self._held: dict[str, list] = {}          # topic -> [messages, callbacks, body bytes, first held at]
        self._looked = time.monotonic()           # when held batches were last looked at for their age

    def add(self, msg, done) -> None:
        now = time.monotonic()
        if now - self._looked >= self.max_delay:
            self.flush(self.max_delay)
        h = self._held.get(msg.topic)
        if h is None:
            h = self._held[msg.topic] = [[], [], 0, now]
        h[0].append(msg)
        h[1].append(done)
        h[2] += len(msg.body)
        if h[2] >= self.max_bytes or len(h[0]) >= self.max_messages:
            del self._held[msg.topic]
            self._send(h[0], h[1])

    def _send(self, msgs: list, dones: list) -> None:
        import asyncio
        if not self.gate.acquire(timeout=self.GATE_WAIT):
            exc = TimeoutError(f"no free in-flight permit for a batch of {len(msgs)} within {self.GATE_WAIT:.0f}s")
            for d in dones:
                d(exc)
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self.producer.impl.send_batch(msgs), self.producer.loop)
        except Exception as exc:  # the producer's loop is gone (shut down): every held send failed
            self.gate.release()
            for d in dones:
                d(exc)
            return

        def finished(f) -> None:
            self.gate.release()
            exc = f.exception() if not f.cancelled() else RuntimeError("batch send cancelled")
            for d in dones:
                d(exc)
        fut.add_done_callback(finished)

    def flush(self, older_than: float = 0.0) -> None:
        """Send every held batch whose first message has waited at least `older_than` seconds."""
        now = self._looked = time.monotonic()
        if not self._held:
            return
        for t in [t for t, h in self._held.items() if now - h[3] >= older_than]:
            h = self._held.pop(t)
            self._send(h[0], h[1])


class RocketMQClients:
    """The same workload through the RocketMQ protocol: this project's Python client (async sends,
    push consumers) or, with cpp=True, the stock C++ client (PyPI rocketmq 0.4.4: send_async, push
    consumers). Each topic gets partitionsPerTopic queues; a producer picks queues round robin.

    The Python client's producer is set up as OMB's RocketMQ driver sets up its own (the keys of its
    driver-rocketmq/rocketmq.yaml, which a system's `producer:` settings may override): `autoBatch`
    on (async sends of a topic go out together, up to `batchMaxBytes` 32 KiB or `batchMaxDelayMs`
    10 ms: see _AutoBatch) and at most `backpressureConcurrency` (1024) send requests in flight, a
    batch being one request. The C++ client 0.4.4 has no auto batching: it sends one request per
    message, at most 2,000 in flight (as the Python client with autoBatch off)."""

    SETTINGS = {"autoBatch": bool, "batchMaxBytes": int, "batchMaxDelayMs": int, "backpressureConcurrency": int}

    def __init__(self, namesrv: str, broker: str, cpp: bool = False, producer_conf: dict | None = None) -> None:
        self.namesrv, self.broker, self.cpp = namesrv, broker, cpp
        conf = dict(producer_conf or {})
        for k, v in conf.items():
            want = self.SETTINGS.get(k)
            if want is None:
                raise WorkloadError(f"producer setting {k!r}: not one the RocketMQ clients take "
                                    f"(expected one of {', '.join(self.SETTINGS)})")
            if type(v) is not want or (want is int and v < 1):
                raise WorkloadError(f"producer setting {k}: expected "
                                    f"{'true or false' if want is bool else 'a positive integer'} (got {v!r})")
        if cpp and (conf.get("autoBatch") or "batchMaxBytes" in conf or "batchMaxDelayMs" in conf):
            raise WorkloadError("producer settings autoBatch, batchMaxBytes, batchMaxDelayMs: the C++ client "
                                "(rocketmq 0.4.4) has no auto batching (it takes backpressureConcurrency only)")
        self.auto_batch = conf.get("autoBatch", True) and not cpp
        self.batch_max_bytes = conf.get("batchMaxBytes", 32 * 1024)
        self.batch_max_delay = conf.get("batchMaxDelayMs", 10) / 1000
        self.inflight_max = conf.get("backpressureConcurrency", 1024 if self.auto_batch else 2000)
        client = "rocketmq 0.4.4 C++ client" if cpp else "rmq.client" + (", autoBatch" if self.auto_batch else "")
        self.label = f"rocketmq ({client})"

    def create_topics(self, topics: list[str], partitions: int) -> None:
        from rmq.client.admin import MQAdmin
        with MQAdmin(namesrv=[self.namesrv]) as admin:
            for t in topics:
                admin.create_topic(t, broker_addr=self.broker, read_queue_nums=partitions, write_queue_nums=partitions)
            for t in topics:
                admin.wait_for_route(t, queues=partitions, timeout=60)

    def producer(self):
        group = f"omb-{uuid.uuid4().hex[:6]}"
        if self.cpp:
            from rocketmq.client import Producer as CProducer
            p = CProducer(group)
            p.set_namesrv_addr(self.namesrv)
            p.start()
            return {"p": p, "inflight": threading.Semaphore(self.inflight_max), "batch": None}
        from rmq.client.producer import Producer
        p = Producer(group, namesrv=[self.namesrv])
        p.start()
        gate = threading.Semaphore(self.inflight_max)
        batch = _AutoBatch(p, gate, self.batch_max_bytes, self.batch_max_delay) if self.auto_batch else None
        from rmq.client.message import Message
        return {"p": p, "inflight": gate, "batch": batch, "msg": Message}

    def send(self, prod, topic: str, part: int, key: bytes | None, value: bytes, done) -> None:
        if prod["batch"] is not None:             # held, then sent in a batch that takes one permit
            prod["batch"].add(prod["msg"](topic, value, keys=key.decode() if key else None), done)
            return
        gate = prod["inflight"]
        gate.acquire()
        if self.cpp:
            from rocketmq.client import Message as CMessage
            m = CMessage(topic)
            m.set_body(value)
            if key:
                m.set_keys(key)

            def ok(_result):
                gate.release()
                done(None)

            def failed(exc):
                gate.release()
                done(exc)
            prod["p"].send_async(m, ok, failed)
            return
        from rmq.client.message import Message
        fut = prod["p"].send_async(Message(topic, value, keys=key.decode() if key else None))

        def finished(f):
            gate.release()
            done(f.exception())
        fut.add_done_callback(finished)

    def poll(self, prod) -> None:
        if prod["batch"] is not None:
            prod["batch"].flush(self.batch_max_delay)

    def sends_on_loop(self, prod) -> bool:
        """Whether a producer process sends from the client's event loop (send_for): the Python client
        with autoBatch. The C++ client and autoBatch off send from the process's thread (send)."""
        return prod.get("batch") is not None

    def send_for(self, prod, seconds: float, rate: float, make, done) -> int:
        """A producer process's phase run on the client's event loop, which the process's own thread
        waits for: `seconds` of sends at `rate` per second (0: as fast as the window allows), each
        record `make(n)` (topic, partition, payload) and its outcome reported to `done(err, sent_at)`;
        returns the count sent. The sends are batched as _AutoBatch batches them (batchMaxBytes,
        batchMaxDelayMs, at most 256 messages, backpressureConcurrency batches in flight), but with
        no hop between threads per batch and no second thread taking the interpreter lock in turns
        with the loop's."""
        import asyncio
        return asyncio.run_coroutine_threadsafe(self._send_for(prod, seconds, rate, make, done),
                                                prod["p"].loop).result()

    async def _send_for(self, prod, seconds: float, rate: float, make, done) -> int:
        import asyncio
        from rmq.client.message import Message
        impl = prod["p"].impl
        window = asyncio.Semaphore(self.inflight_max)
        pending: set = set()
        held: dict[str, list] = {}          # topic -> [messages, callbacks, body bytes, first held at]
        max_bytes, max_delay, max_msgs = self.batch_max_bytes, self.batch_max_delay, _AutoBatch.MAX_MESSAGES

        def settle(task, dones: list) -> None:
            window.release()
            pending.discard(task)
            exc = RuntimeError("batch send cancelled") if task.cancelled() else task.exception()
            for d in dones:
                d(exc)

        async def send(msgs: list, dones: list) -> None:
            await window.acquire()
            task = asyncio.ensure_future(impl.send_batch(msgs))
            pending.add(task)
            task.add_done_callback(lambda t, d=dones: settle(t, d))

        async def flush(older_than: float) -> None:
            now = time.monotonic()
            for t in [t for t, h in held.items() if now - h[3] >= older_than]:
                h = held.pop(t)
                await send(h[0], h[1])

        t0 = looked = time.monotonic()
        n = 0
        while True:
            now = time.monotonic()
            if now - t0 >= seconds:
                break
            if now - looked >= max_delay:
                looked = now
                await flush(max_delay)
            if rate > 0 and n >= rate * (now - t0):
                await asyncio.sleep(0.0005)
                continue
            topic, _, value = make(n)
            n += 1
            h = held.get(topic)
            if h is None:
                h = held[topic] = [[], [], 0, now]
            h[0].append(Message(topic, value))
            h[1].append(lambda e, s=now: done(e, s))
            h[2] += len(value)
            if h[2] >= max_bytes or len(h[0]) >= max_msgs:
                del held[topic]
                await send(h[0], h[1])
                await asyncio.sleep(0)          # the batch starts out and responses come in
        await flush(0.0)
        if pending:
            await asyncio.wait(set(pending))
        return n

    def flush(self, prod) -> None:
        if prod["batch"] is not None:
            prod["batch"].flush()
        gate = prod["inflight"]
        deadline = time.monotonic() + 60
        taken = 0
        while taken < self.inflight_max and time.monotonic() < deadline:   # every permit back: nothing in flight
            if gate.acquire(timeout=0.1):
                taken += 1
        for _ in range(taken):
            gate.release()

    def close(self, prod) -> None:
        self.flush(prod)
        prod["p"].shutdown()

    def consume(self, group: str, topics: list[str], on_value, stop: threading.Event, on_loop: bool = False) -> None:
        """A push consumer of `group` on `topics` until `stop`, each body to `on_value`. on_loop (a
        consumer process, the Python client): the listener is a coroutine run on the client's event
        loop instead of a sync one on the consume thread pool, so the process's interpreter lock
        does not pass between the loop and up to 20 consume threads per pulled batch."""
        if self.cpp:
            from rocketmq.client import PushConsumer as CPushConsumer
            c = CPushConsumer(group)
            c.set_namesrv_addr(self.namesrv)
            c.set_instance_name(f"{group}-{uuid.uuid4().hex[:4]}")
            for t in topics:
                c.subscribe(t, lambda msg: on_value(msg.body), "*")
        else:
            from rmq.client.message import ConsumeStatus
            from rmq.client.push_consumer import PushConsumer
            c = PushConsumer(group, namesrv=[self.namesrv], consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             instance_name=f"{group}-{uuid.uuid4().hex[:4]}")

            if on_loop:
                async def listener(msgs, ctx):          # awaited on the client's loop: no consume threads
                    for m in msgs:
                        on_value(m.body)
                    return ConsumeStatus.CONSUME_SUCCESS
            else:
                def listener(msgs, ctx):
                    for m in msgs:
                        on_value(m.body)
                    return ConsumeStatus.CONSUME_SUCCESS
            for t in topics:
                c.subscribe(t, "*")
            c.register_message_listener(listener)
        c.start()
        try:
            stop.wait()
        finally:
            c.shutdown()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (psutil; None when it cannot be read)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return t.user + t.system


def thread_waits_ns(pid: int) -> dict[str, int] | None:
    """{thread id: nanoseconds it has spent runnable but waiting for a CPU} for the live threads of
    one process (the second field of /proc/PID/task/TID/schedstat); None when it cannot be read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as fh:
                out[tid] = int(fh.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue                            # a thread that ended in between
    return out


def run_queue_seconds(pid: int) -> float | None:
    """Seconds the threads of one process have spent runnable but waiting for a CPU (thread_waits_ns
    summed over the live threads); None when it cannot be read. On a shared machine this is what a
    client or broker loses to other processes: a rate that dips while this grows and the process's
    CPU does not was starved, not stalled."""
    waits = thread_waits_ns(pid)
    return None if waits is None else sum(waits.values()) / 1e9


def machine_cpu() -> tuple[int, int] | None:
    """(all, idle) CPU ticks of the whole machine from /proc/stat (idle counts iowait); None when it
    cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        return sum(f), f[3] + f[4]
    except (OSError, ValueError, IndexError):
        return None


def machine_busy_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """How busy the machine's CPUs were between two machine_cpu() readings, in % of all of them."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return round(100 * (1 - (after[1] - before[1]) / (after[0] - before[0])), 1)


def _producer_process(clients, parts: list, pool: list, warm: float, duration: float, rate: float,
                      go, out, seq_first: int = 0, seq_step: int = 1) -> None:
    """One producer process of a run with `producerProcesses` (spawned): its own producer of `clients`
    (KafkaClients or RocketMQClients, the same settings as in the runner) over its share of the
    partitions; warm-up, then (when the runner sets `go`, once every process has warmed up) the
    measured phase; puts its counts, per-second series, latency samples and the CPU it used in the
    measured phase on `out`."""
    prod = clients.producer()
    # the payload stamp's sequence numbers: seq_first, seq_first + seq_step, ... over warm-up and
    # measured phase alike, so that the processes' numbers never meet (the consumers count repeats)
    st = {"acked": 0, "errors": 0, "measuring": False, "seq": seq_first}
    lat: list[float] = []
    series = Series(0.0)
    lock = threading.Lock()        # the RocketMQ clients call back from their own thread

    def done(err, sent_at):
        now = time.monotonic()
        with lock:
            if err is not None:
                st["errors"] += 1
                return
            if st["measuring"]:
                st["acked"] += 1
                lat.append((now - sent_at) * 1000)
                series.add(1, now)

    def make(n: int) -> tuple[str, int, bytes]:
        """The n-th record of this process: topic, partition and the stamped payload."""
        t, p = parts[n % len(parts)]
        v = bytearray(pool[n % len(pool)])
        _STAMP.pack_into(v, time.time(), st["seq"])
        st["seq"] += seq_step
        return t, p, bytes(v)

    def run_for(seconds: float) -> int:
        if getattr(clients, "sends_on_loop", None) and clients.sends_on_loop(prod):
            return clients.send_for(prod, seconds, rate, make, done)
        t0 = time.monotonic()
        n = 0
        while True:
            now = time.monotonic()
            if now - t0 >= seconds:
                return n
            if rate > 0 and n >= rate * (now - t0):
                clients.poll(prod)
                time.sleep(0.0005)
                continue
            t, p, v = make(n)
            sent_at = time.monotonic()
            clients.send(prod, t, p, None, v, lambda e, s=sent_at: done(e, s))
            n += 1
            if n % 256 == 0:
                clients.poll(prod)

    try:
        if warm > 0:
            run_for(warm)
        clients.flush(prod)
        out.put("warm")
        if not go.wait(300):                   # every process and the runner start measuring together
            return
        cpu0 = time.process_time()
        wait0 = run_queue_seconds(os.getpid())
        series.t0 = time.monotonic()
        with lock:
            st["measuring"] = True
        sent = run_for(duration)
        clients.flush(prod)
        t_pub = time.monotonic() - series.t0
        with lock:
            st["measuring"] = False
        cpu = time.process_time() - cpu0
        wait1 = run_queue_seconds(os.getpid())
        wait = wait1 - wait0 if wait0 is not None and wait1 is not None else None
    finally:
        clients.close(prod)
    out.put({"sent": sent, "acked": st["acked"], "errors": st["errors"], "t0": series.t0, "t_pub": t_pub,
             "counts": series.counts, "lat": lat, "cpu": cpu, "wait": wait})


def _sum_or_none(vals) -> float | None:
    vals = list(vals)
    return None if not vals or any(v is None for v in vals) else sum(vals)


def _run_producer_processes(w: Workload, clients, parts: list, pool: list, n: int, on_measure, say) -> dict:
    """The warm-up and measured phase sent from `n` spawned processes (producerProcesses), each with
    the partitions of its share of the topics (topic i goes to process i mod n; with fewer topics than
    processes, the partitions are dealt out instead)."""
    import multiprocessing as mp
    topics = sorted({t for t, _ in parts})
    if len(topics) >= n:
        shares = [[tp for tp in parts if topics.index(tp[0]) % n == i] for i in range(n)]
    else:
        shares = [parts[i::n] for i in range(n)]
    shares = [s for s in shares if s]
    if isinstance(clients, KafkaClients) and clients.conf.get("queue.buffering.max.messages") == 100_000:
        # a bounded client queue: what is still queued when the phase ends is drained (at most 60 s), and
        # on a slow system a deep queue would make that drain longer than the phase itself
        clients = KafkaClients(clients.bootstrap, {**clients.conf, "queue.buffering.max.messages": 20_000})
    import queue
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    rate = w.producerRate / len(shares) if w.producerRate else 0
    procs = [ctx.Process(target=_producer_process, args=(clients, share, pool, w.warmupDurationMinutes * 60,
                                                         w.testDurationMinutes * 60, rate, go, out, i, len(shares)),
                         daemon=True) for i, share in enumerate(shares)]

    def collect(what: str, limit: float) -> list:
        got: list = []
        deadline = time.monotonic() + limit
        while len(got) < len(procs):
            try:
                got.append(out.get(timeout=0.5))
            except queue.Empty:
                dead = [p.exitcode for p in procs if not p.is_alive() and p.exitcode]
                if dead or time.monotonic() > deadline:
                    raise WorkloadError(f"a producer process {'exited with ' + str(dead[0]) if dead else 'hung'} "
                                        f"before {what}") from None
        return got

    for p in procs:
        p.start()
    try:
        say(f"{len(procs)} producer process{'es' if len(procs) > 1 else ''}")
        collect("the end of its warm-up", w.warmupDurationMinutes * 60 + 180)
        on_measure()
        go.set()
        parts_out = collect("the end of the measured phase", w.testDurationMinutes * 60 + 180)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    return {"sent": sum(r["sent"] for r in parts_out), "acked": sum(r["acked"] for r in parts_out),
            "errors": sum(r["errors"] for r in parts_out), "t_pub": max(r["t_pub"] for r in parts_out),
            "t0": min(r["t0"] for r in parts_out), "lat": [x for r in parts_out for x in r["lat"]],
            "series": [r["counts"] for r in parts_out], "cpu": sum(r["cpu"] for r in parts_out),
            "wait": _sum_or_none(r.get("wait") for r in parts_out)}


class _Reader:
    """What one subscription has read: records counted once per sequence number (a repeat is a
    redelivery), the measured phase's records apart from warm-up ones, end-to-end latency from the
    payload's stamp. Used by the runner's consumer threads and by a consumer process alike."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen = bytearray()         # a bitmap of the sequence numbers read
        self.received = self.received_measured = self.redelivered = 0
        self.measuring = False
        self.measure_wall = 0.0         # time.time() when the measured phase began
        self.drain_target: int | None = None     # a backlog workload: received count at which it is read
        self.drained_at: float | None = None
        self.series = Series(0.0)
        self.lat: list[float] = []

    def begin(self, t0: float, wall: float) -> None:
        with self.lock:
            self.series.t0, self.measure_wall, self.measuring = t0, wall, True

    def end(self) -> None:
        with self.lock:
            self.measuring = False

    def on_value(self, v: bytes) -> None:
        now = time.monotonic()
        stamp, seq = _STAMP.unpack(v) if v and len(v) >= _STAMP.size else (None, None)
        with self.lock:
            if seq is not None:
                bits = self.seen
                i, m = seq >> 3, 1 << (seq & 7)
                if i >= len(bits):
                    bits.extend(bytes(i - len(bits) + 4096))
                if bits[i] & m:
                    self.redelivered += 1
                    return
                bits[i] |= m
            self.received += 1
            if self.drain_target is not None and self.drained_at is None and self.received >= self.drain_target:
                self.drained_at = now
            if self.measuring:
                self.series.add(1, now)
                # a record sent during warm-up (or into the backlog) and read now is not one of the
                # measured phase's: messagesReceived counts only those sent after it began
                if stamp is None or stamp >= self.measure_wall or self.drain_target is not None:
                    self.received_measured += 1
                if stamp is not None:
                    self.lat.append((time.time() - stamp) * 1000)


def _consumer_process(clients, group: str, topics: list, n: int, ctl, out, counts) -> None:
    """One subscription's `n` consumers (threads of `clients.consume`) in a spawned process of their
    own (consumerProcesses), so that they share no interpreter lock with the producers or the runner.
    Takes ("begin", t0, wall), ("end",) and ("stop",) from `ctl`; keeps `counts` (received, received
    in the measured phase) current for the runner; on "stop" puts what it read, and the CPU it used
    from "begin" on, on `out`."""
    import queue
    r = _Reader()
    stop = threading.Event()

    def on_value(v: bytes) -> None:
        r.on_value(v)
        counts[0], counts[1] = r.received, r.received_measured

    threads = [threading.Thread(target=clients.consume, args=(group, topics, on_value, stop, True), daemon=True)
               for _ in range(n)]
    for th in threads:
        th.start()
    cpu0 = time.process_time()
    wait0 = run_queue_seconds(os.getpid())
    deadline = time.monotonic() + 6 * 3600     # a runner that never says stop (it died): give up
    try:
        while time.monotonic() < deadline:
            try:
                msg = ctl.get(timeout=1.0)
            except queue.Empty:
                continue
            if msg[0] == "begin":
                cpu0 = time.process_time()
                wait0 = run_queue_seconds(os.getpid())
                r.begin(msg[1], msg[2])
            elif msg[0] == "end":
                r.end()
            elif msg[0] == "stop":
                break
    finally:
        r.end()
        cpu = time.process_time() - cpu0
        wait1 = run_queue_seconds(os.getpid())
        wait = wait1 - wait0 if wait0 is not None and wait1 is not None else None
        stop.set()
        for th in threads:
            th.join(15)
        out.put({"received": r.received, "received_measured": r.received_measured, "redelivered": r.redelivered,
                 "counts": r.series.counts, "lat": r.lat, "cpu": cpu, "wait": wait})


class _ConsumerProcesses:
    """The runner's side of consumerProcesses: one spawned process per subscription (_consumer_process)."""

    def __init__(self, clients, groups: list[str], topics: list[str], n: int) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        self.procs, self.ctls, self.counts = [], [], []
        for g in groups:
            ctl, counts = ctx.Queue(), ctx.Array("q", 2, lock=False)
            self.procs.append(ctx.Process(target=_consumer_process, args=(clients, g, topics, n, ctl, self.out, counts),
                                          daemon=True))
            self.ctls.append(ctl)
            self.counts.append(counts)
        for p in self.procs:
            p.start()

    def send(self, *msg) -> None:
        for q in self.ctls:
            q.put(msg)

    def received(self) -> tuple[int, int]:
        """(records read, of which sent in the measured phase), over every subscription."""
        return sum(c[0] for c in self.counts), sum(c[1] for c in self.counts)

    def dead(self) -> int | None:
        return next((p.exitcode for p in self.procs if not p.is_alive() and p.exitcode), None)

    def stop(self) -> list[dict]:
        """Stop every process and return what each read ([] for one that died or hung)."""
        import queue
        self.send("stop")
        got: list[dict] = []
        deadline = time.monotonic() + 30
        while len(got) < len(self.procs) and time.monotonic() < deadline:
            try:
                got.append(self.out.get(timeout=0.5))
            except queue.Empty:
                if all(not p.is_alive() for p in self.procs) and self.out.empty():
                    break
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        return got


def run_omb(w: Workload, clients, *, base_dir: str | None = None, max_messages: int | None = None,
            progress=None, producer_processes: int = 0, consumer_processes: bool = False,
            broker_pid: int | None = None) -> dict:
    """Create the topics, warm up, then run the measured phase through `clients` (KafkaClients or
    RocketMQClients); returns OMB's result fields. producer_processes > 0 sends from that many
    spawned processes instead of the runner's own thread; consumer_processes reads each subscription
    in a spawned process of its own instead of the runner's threads (neither with a backlog phase).
    With broker_pid, the result's `cpu` gives the CPU seconds the broker and each kind of client
    process used in the measured phase (the consumers' until they caught up)."""
    say = progress or (lambda *_: None)
    if (producer_processes or consumer_processes) and w.consumerBacklogSizeGB > 0:
        what = "producerProcesses" if producer_processes else "consumerProcesses"
        raise WorkloadError(f"{what}: a workload with consumerBacklogSizeGB runs its clients in the runner "
                            f"(set {what} to {'0' if producer_processes else 'false'})")
    prefix = f"omb-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}-{i:04d}" for i in range(w.topics)]
    clients.create_topics(topics, w.partitionsPerTopic)
    say(f"{len(topics)} topics x {w.partitionsPerTopic} partitions created")
    pool = payloads(w, base_dir)
    parts = [(t, p) for t in topics for p in range(w.partitionsPerTopic)]
    n_prod = max(1, min(MAX_CLIENTS, w.topics * w.producersPerTopic))
    producers = [] if producer_processes else [clients.producer() for _ in range(n_prod)]
    pub_lat: list[float] = []
    errors = [0]
    measuring = [False]
    state = {"sent": 0, "acked": 0}
    lock = threading.Lock()
    pub_series = Series(0.0)
    groups = [f"{prefix}-sub-{s}" for s in range(w.subscriptionsPerTopic)]
    readers = {g: _Reader() for g in groups}          # the subscriptions read in the runner's threads
    n_cons = max(0, min(MAX_CLIENTS, w.consumerPerSubscription))
    stop_consumers = threading.Event()
    consumer_threads: list[threading.Thread] = []
    cprocs: list = []                                  # [_ConsumerProcesses] with consumer_processes
    cpu = {"broker": cpu_seconds(broker_pid) if broker_pid else None, "runner": time.process_time()}

    def on_delivery(err, sent_at):
        now = time.monotonic()
        with lock:
            if err is not None:
                errors[0] += 1
                return
            if measuring[0]:
                pub_lat.append((now - sent_at) * 1000)
                pub_series.add(1, now)
            state["acked"] += 1

    def start_consumers():
        if not groups or not n_cons:
            return
        if consumer_processes:
            cprocs.append(_ConsumerProcesses(clients, groups, topics, n_cons))
            say(f"{len(groups)} consumer process{'es' if len(groups) > 1 else ''}")
            return
        for g in groups:
            for _ in range(n_cons):
                th = threading.Thread(target=clients.consume, daemon=True,
                                      args=(g, topics, readers[g].on_value, stop_consumers))
                th.start()
                consumer_threads.append(th)

    def received() -> tuple[int, int]:
        if cprocs:
            return cprocs[0].received()
        return sum(r.received for r in readers.values()), sum(r.received_measured for r in readers.values())

    def begin_measuring() -> float:
        t0 = time.monotonic()
        wall = time.time()
        pub_series.t0 = t0
        with lock:
            measuring[0] = True
        for r in readers.values():
            r.begin(t0, wall)
        if cprocs:
            cprocs[0].send("begin", t0, wall)
        cpu["broker"] = cpu_seconds(broker_pid) if broker_pid else None
        cpu["broker_wait"] = run_queue_seconds(broker_pid) if broker_pid else None
        cpu["runner_wait"] = run_queue_seconds(os.getpid())
        cpu["machine"] = machine_cpu()
        cpu["runner"] = time.process_time()
        return t0

    def wait_for_consumers(want: int, limit: float, measured: bool) -> None:
        """Until the subscriptions have read `want` records (of the measured phase's with `measured`),
        bounded by `limit` seconds."""
        deadline = time.monotonic() + limit
        while w.subscriptionsPerTopic > 0 and (consumer_threads or cprocs) and received()[measured] < want \
                and time.monotonic() < deadline:
            if cprocs and cprocs[0].dead() is not None:
                raise WorkloadError(f"a consumer process exited with {cprocs[0].dead()}")
            time.sleep(0.05)

    def end_measuring() -> dict:
        with lock:
            measuring[0] = False
        for r in readers.values():
            r.end()
        out = {"runner": time.process_time() - cpu["runner"]}
        b = cpu_seconds(broker_pid) if broker_pid else None
        if b is not None and cpu["broker"] is not None:
            out["broker"] = b - cpu["broker"]
        bw = run_queue_seconds(broker_pid) if broker_pid else None
        if bw is not None and cpu.get("broker_wait") is not None:
            out["broker_wait"] = bw - cpu["broker_wait"]
        rw = run_queue_seconds(os.getpid())
        if rw is not None and cpu.get("runner_wait") is not None:
            out["runner_wait"] = max(0.0, rw - cpu["runner_wait"])
        out["machine_busy"] = machine_busy_pct(cpu.get("machine"), machine_cpu())
        return out

    def stop_all_consumers() -> dict:
        """Stop the consumers; what they read, over every subscription."""
        stop_consumers.set()
        for th in consumer_threads:
            th.join(15)
        con_series = Series(pub_series.t0)
        got = {"received": sum(r.received for r in readers.values()),
               "received_measured": sum(r.received_measured for r in readers.values()),
               "redelivered": sum(r.redelivered for r in readers.values()),
               "lat": [x for r in readers.values() for x in r.lat], "cpu": None, "wait": None, "series": con_series}
        series = [r.series.counts for r in readers.values()]
        if cprocs:
            res = cprocs.pop().stop()
            if len(res) < len(groups):
                raise WorkloadError(f"{len(groups) - len(res)} consumer process(es) did not report what they read")
            for k in ("received", "received_measured", "redelivered"):
                got[k] = sum(r[k] for r in res)
            got["lat"] = [x for r in res for x in r["lat"]]
            got["cpu"] = sum(r["cpu"] for r in res)
            got["wait"] = _sum_or_none(r.get("wait") for r in res)
            series = [r["counts"] for r in res]
        for counts in series:
            for i, c in enumerate(counts):
                con_series.add(c, con_series.t0 + i + 0.5)
        return got

    def wait_figures(ends: dict, producers_wait: float | None, consumers_wait: float | None) -> dict:
        """Run-queue wait of the measured phase (seconds runnable but not on a CPU), by process kind."""
        out = {k: v for k, v in (("broker", ends.get("broker_wait")), ("runner", ends.get("runner_wait")),
                                 ("producers", producers_wait), ("consumers", consumers_wait)) if v is not None}
        return {k: round(v, 3) for k, v in out.items()}

    def cpu_figures(ends: dict, producers_cpu: float | None, consumers_cpu: float | None) -> dict:
        out = {"runner": ends["runner"]}
        if "broker" in ends:
            out["broker"] = ends["broker"]
        if producers_cpu is not None:
            out["producers"] = producers_cpu
        if consumers_cpu is not None:
            out["consumers"] = consumers_cpu
        return {k: round(v, 3) for k, v in out.items()}

    keys = None
    if w.keyDistributor is KeyDistributor.KEY_ROUND_ROBIN:
        keys = [b"key-%d" % i for i in range(10_000)]
    rnd = random.Random(7)

    def send(i: int) -> None:
        t, p = parts[i % len(parts)]
        v = bytearray(pool[i % len(pool)])
        _STAMP.pack_into(v, time.time(), i)
        key = keys[i % len(keys)] if keys else (b"%d" % rnd.getrandbits(48)
                                                if w.keyDistributor is KeyDistributor.RANDOM_NANO else None)
        prod = producers[i % n_prod]
        sent_at = time.monotonic()
        clients.send(prod, t, p, key, bytes(v), lambda err, s=sent_at: on_delivery(err, s))
        state["sent"] += 1
        if i % 256 < n_prod:            # each producer's callbacks (and held batches) once per 256 sends
            clients.poll(prod)

    def produce_for(seconds: float, rate: int, limit: int | None) -> int:
        start = time.monotonic()
        n = 0
        while True:
            now = time.monotonic()
            if now - start >= seconds or (limit is not None and n >= limit):
                break
            if rate > 0 and n >= rate * (now - start):
                for p_ in producers:
                    clients.poll(p_)
                time.sleep(0.0005)
                continue
            send(state["sent"])
            n += 1
        return n

    label = clients.label + (f", {producer_processes} producer process{'es' if producer_processes > 1 else ''}"
                             if producer_processes else "") + (", consumer processes" if consumer_processes else "")
    if producer_processes:
        t_box = [0.0]

        def on_measure():
            t_box[0] = begin_measuring()
            say(f"measuring for {w.testDurationMinutes * 60:.0f}s")
        try:
            if w.subscriptionsPerTopic > 0:
                start_consumers()
            r = _run_producer_processes(w, clients, parts, pool, producer_processes, on_measure, say)
            t0 = t_box[0]
            pub_lat.extend(r["lat"])
            for counts in r["series"]:
                for i, c in enumerate(counts):
                    pub_series.add(c, t0 + i + 0.5)
            errors[0] += r["errors"]
            state["sent"] = r["sent"]
            want = r["sent"] * len(groups)
            wait_for_consumers(want, max(10.0, w.testDurationMinutes * 60), True)
            t_all = time.monotonic() - t0
            ends = end_measuring()
        finally:
            got = stop_all_consumers()
        received = got["received_measured"]
        backlog = max(0, want - received) if (consumer_threads or consumer_processes) else r["sent"]
        return omb_result(w, label, pub_series, got["series"], pub_lat, got["lat"], errors[0],
                          sent=r["sent"], acked=r["acked"], received=received, t_pub=r["t_pub"], t_all=t_all,
                          backlog=backlog, drain_target=None, drain=None, redelivered=got["redelivered"],
                          cpu=cpu_figures(ends, r["cpu"], got["cpu"]),
                          wait=wait_figures(ends, r.get("wait"), got["wait"]), machine_busy=ends["machine_busy"])
    got = None
    try:
        backlog_bytes = int(w.consumerBacklogSizeGB * (1 << 30))
        if backlog_bytes <= 0 and w.subscriptionsPerTopic > 0:
            start_consumers()
        warm = w.warmupDurationMinutes * 60
        if warm > 0:
            say(f"warm-up {warm:.0f}s")
            produce_for(warm, w.producerRate, None if max_messages is None else max_messages // 5)
        if backlog_bytes > 0:
            say(f"building a backlog of {backlog_bytes:,} bytes")
            produce_for(3600, 0, max(1, backlog_bytes // max(w.messageSize, 1)))
        for p_ in producers:           # warm-up acks must not count in the measured phase
            clients.flush(p_)
        duration = w.testDurationMinutes * 60
        with lock:
            acked_before = state["acked"]
        drain_target = None
        if backlog_bytes > 0:
            drain_target = state["sent"]        # the backlog, read to its end (per subscription)
            for r in readers.values():
                r.drain_target = drain_target
        t0 = begin_measuring()
        if backlog_bytes > 0:
            start_consumers()
        say(f"measuring for {duration:.0f}s" + (f" (at most {max_messages:,} messages)" if max_messages else ""))
        sent = produce_for(duration, w.producerRate, max_messages)
        for p_ in producers:
            clients.flush(p_)
        t_pub = time.monotonic() - t0
        # let consumers catch up on what was sent (bounded)
        want = state["sent"] * len(groups)
        wait_for_consumers(want, max(10.0, duration), False)
        t_all = time.monotonic() - t0
        ends = end_measuring()
    finally:
        try:
            got = stop_all_consumers()
        finally:
            for p_ in producers:
                clients.close(p_)
    acked = state["acked"] - acked_before
    received = got["received_measured"]
    backlog = max(0, want - got["received"]) if (consumer_threads or consumer_processes) else state["sent"]
    drain = None
    drained = [r.drained_at for r in readers.values()]
    if drain_target and drained and all(d is not None for d in drained):
        drain = max(drained) - t0
    return omb_result(w, label, pub_series, got["series"], pub_lat, got["lat"], errors[0],
                      sent=sent, acked=acked, received=received, t_pub=t_pub, t_all=t_all, backlog=backlog,
                      drain_target=drain_target * len(groups) if drain_target else None, drain=drain,
                      redelivered=got["redelivered"], cpu=cpu_figures(ends, None, got["cpu"]),
                      wait=wait_figures(ends, None, got["wait"]), machine_busy=ends["machine_busy"])


def omb_result(w: Workload, driver: str, pub_series: Series, con_series: Series, pub_lat: list[float],
               e2e_lat: list[float], errors: int, *, sent: int, acked: int, received: int, t_pub: float,
               t_all: float, backlog: int, drain_target: int | None, drain: float | None,
               redelivered: int = 0, cpu: dict | None = None, wait: dict | None = None,
               machine_busy: float | None = None) -> dict:
    """OMB's result fields (TestResult: rates per second, latency percentiles in ms) and ours beside them.
    `cpu`: CPU seconds of the measured phase by process (broker, runner, producers, consumers), also
    given per acknowledged message in microseconds. `wait`: seconds the broker, runner, producer and consumer
    processes spent runnable but waiting for a CPU in the measured phase, and `machine_busy` how busy
    the machine's CPUs were (%, every process on it): a run whose rates dip while these are high was
    starved by other work on the machine, and its latencies say little about the system."""
    cpu = cpu or {}
    return {
        "workload": w.name, "driver": driver, "messageSize": w.messageSize,
        "topics": w.topics, "partitions": w.partitionsPerTopic, "producersPerTopic": w.producersPerTopic,
        "consumersPerTopic": w.consumerPerSubscription,
        "publishRate": pub_series.counts, "consumeRate": con_series.counts, "backlog": [backlog],
        "publishErrorRate": [errors],
        "aggregatedPublishLatencyAvg": statistics.fmean(pub_lat) if pub_lat else 0.0,
        "aggregatedPublishLatency50pct": _pct(pub_lat, 0.5), "aggregatedPublishLatency95pct": _pct(pub_lat, 0.95),
        "aggregatedPublishLatency99pct": _pct(pub_lat, 0.99), "aggregatedPublishLatency999pct": _pct(pub_lat, 0.999),
        "aggregatedPublishLatencyMax": max(pub_lat, default=0.0),
        "aggregatedEndToEndLatencyAvg": statistics.fmean(e2e_lat) if e2e_lat else 0.0,
        "aggregatedEndToEndLatency50pct": _pct(e2e_lat, 0.5), "aggregatedEndToEndLatency95pct": _pct(e2e_lat, 0.95),
        "aggregatedEndToEndLatency99pct": _pct(e2e_lat, 0.99), "aggregatedEndToEndLatencyMax": max(e2e_lat, default=0.0),
        # ours, next to OMB's: whole-phase figures
        "messagesSent": sent, "messagesAcked": acked, "messagesReceived": received,
        "messagesRedelivered": redelivered,     # a second (third ...) delivery of a record to one subscription
        "measuredSeconds": round(t_pub, 2),
        "publishRateAvg": acked / t_pub if t_pub > 0 else 0.0,
        "consumeRateAvg": received / t_all if t_all > 0 and received else 0.0,
        "publishErrors": errors,
        # consumerBacklogSizeGB > 0: how long the consumers took to read the backlog that built up before
        # they started (while producers went on at producerRate), and the rate that makes
        "backlogMessages": drain_target or 0,
        "backlogDrainSeconds": round(drain, 3) if drain is not None else None,
        "backlogDrainRate": (drain_target / drain) if drain else 0.0,
        "cpuSeconds": cpu,
        "cpuMicrosPerMessage": {k: round(v / acked * 1e6, 1) for k, v in cpu.items()} if acked else {},
        "cpuWaitSeconds": wait or {},
        "machineBusyPct": machine_busy,
    }
