"""`rmq bench topics`: throughput as the number of topics (and so queues) grows.

RocketMQ's headline claim for its store is that one commitlog keeps writes sequential however many
queues there are, where a log per partition does not. This bench produces the same records, spread
evenly over every partition of N topics, through a stock Kafka client (confluent-kafka, acks=all,
linger 5 ms), against a fresh broker per row: a first pass (every queue new) and a warm pass (the
same queues again), and beside it the mechanism figures of the rmq broker process: queues, files
created, fdatasync calls and page faults during each pass (from /proc/<pid>/stat and the broker's
runtime info). With --vs tansu the same rows run against Tansu in the same run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import click

from .clients import Progress, _Managed


def _proc_stat(pid: int) -> dict:
    """minflt, majflt, utime+stime (s) of a process, from /proc/<pid>/stat (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    # fields[0] is field 3 (state): minflt is field 10, majflt 12, utime 14, stime 15
    return {"minflt": int(fields[7]), "majflt": int(fields[9]), "cpu_s": (int(fields[11]) + int(fields[12])) / tick}


def _ready(m: _Managed) -> dict:
    """The listeners the rmq child wrote to its ready file (`rmq up --ready-file`)."""
    with open(os.path.join(m.tmp, "ready.json")) as fh:
        return json.load(fh)


def _runtime_info(m: _Managed) -> dict:
    """The rmq child's GET_BROKER_RUNTIME_INFO table, through `rmq admin brokerStatus`."""
    try:
        ready = _ready(m)
    except (OSError, ValueError):
        return {}
    out = subprocess.run([sys.executable, "-P", "-m", "rmq.cli", "admin", "brokerStatus", "-n", ready["namesrv"],
                          "-b", ready["remoting"], "--json"], capture_output=True, text=True, timeout=60,
                         cwd=m.tmp)
    if out.returncode != 0:
        return {}
    return json.loads(out.stdout)


def _mechanism(m: _Managed) -> dict:
    info = _runtime_info(m)
    st = _proc_stat(m.proc.pid) if m.proc else {}
    return {"minflt": st.get("minflt", 0), "majflt": st.get("majflt", 0), "cpu_s": st.get("cpu_s", 0.0),
            "files_created": int(info.get("mappedFilesCreated", 0)),
            "fdatasync_calls": int(info.get("fdatasyncCalls", 0)),
            "queues": int(info.get("consumeQueueCount", 0)),
            "cq_files": int(info.get("consumeQueueFiles", 0)),
            "commitlog_max_offset": int(info.get("commitLogMaxOffset", 0))}


def _delta(after: dict, before: dict) -> dict:
    d = {k: after[k] - before.get(k, 0) for k in ("minflt", "majflt", "files_created", "fdatasync_calls")}
    d["cpu_s"] = round(after["cpu_s"] - before.get("cpu_s", 0.0), 2)
    d["queues"], d["cq_files"] = after["queues"], after["cq_files"]
    return d


def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(names), 64):
        futs = admin.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + 64]], request_timeout=60)
        for f in futs.values():
            f.result(120)


def _produce(bootstrap: str, names: list[str], partitions: int, size: int, count: int) -> tuple[float, float, int]:
    """Send `count` records of `size` bytes round-robin over every (topic, partition); (msgs/s,
    CPU seconds this process, the client, spent doing it: librdkafka's threads included, and the
    Produce requests the client sent, from librdkafka's statistics)."""
    from confluent_kafka import Producer
    requests = [0]

    def on_stats(raw: str) -> None:  # cumulative per broker connection; the bootstrap one sends no Produce
        stats = json.loads(raw)
        requests[0] = max(requests[0], sum(b.get("req", {}).get("Produce", 0) for b in stats.get("brokers", {}).values()))

    prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": max(100_000, count), "batch.num.messages": 10_000,
                     "statistics.interval.ms": 200, "stats_cb": on_stats})
    payload = os.urandom(size)
    targets = [(n, p) for n in names for p in range(partitions)]
    failed = []

    def on_delivery(err, _msg):
        if err is not None:
            failed.append(err)

    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(count):
        topic, part = targets[i % len(targets)]
        while True:
            try:
                prod.produce(topic, payload, partition=part, on_delivery=on_delivery)
                break
            except BufferError:
                prod.poll(0.01)
        if i % 1000 == 0:
            prod.poll(0)
    left = prod.flush(300)
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - c0
    if left or failed:
        raise click.ClickException(f"{left} record(s) not delivered, {len(failed)} failed"
                                   + (f" (first: {failed[0]})" if failed else ""))
    seen, deadline = requests[0], time.monotonic() + 2
    while time.monotonic() < deadline:  # statistics taken after the last request was answered
        prod.poll(0.25)
        if requests[0] != seen:
            break
    return count / elapsed, client_cpu, requests[0]


def _kafka_row(kind: str, n: int, partitions: int, size: int, count: int, say: Progress) -> dict:
    """Both passes through confluent-kafka against a fresh `kind` broker."""
    say(f"{n} topics x {partitions} partitions: starting a fresh {kind}")
    m = _Managed(kind)
    try:
        bootstrap = m.start()
        names = [f"t{uuid.uuid4().hex[:6]}_{i}" for i in range(n)]
        say.label = f"{kind} {n}x{partitions}"
        say(f"creating {n} topics")
        _create_topics(bootstrap, names, partitions)
        res: dict = {}
        for phase in ("first", "warm"):
            before = _mechanism(m) if kind == "rmq" else _proc_stat(m.proc.pid)
            say(f"{phase} pass: {count:,} x {size} B over {n * partitions} partitions")
            rate, client_cpu, requests = _produce(bootstrap, names, partitions, size, count)
            res[phase] = {"msgs_per_s": rate, "client_cpu_s": round(client_cpu, 2), "produce_requests": requests}
            if kind == "rmq":
                res[phase]["mechanism"] = _delta(_mechanism(m), before)
            else:
                res[phase]["broker_cpu_s"] = round(_proc_stat(m.proc.pid).get("cpu_s", 0.0) - before.get("cpu_s", 0.0), 2)
            say(f"{phase} pass: {rate:,.0f} msgs/s")
        return res
    finally:
        say.label = ""
        m.stop()


def _remoting_row(n: int, partitions: int, size: int, count: int, producers: int, say: Progress) -> dict:
    """Both passes through the RocketMQ protocol: `producers` stock C++ producers, send_sync."""
    from . import topics_remoting
    say(f"{n} topics x {partitions} queues: starting a fresh rmq for the RocketMQ protocol")
    m = _Managed("rmq")
    try:
        m.start()
        ready = _ready(m)
        names = [f"r{uuid.uuid4().hex[:6]}_{i}" for i in range(n)]
        say.label = f"rocketmq {n}x{partitions}"
        say(f"creating {n} topics (UPDATE_AND_CREATE_TOPIC)")
        topics_remoting.create_topics(ready["namesrv"], ready["remoting"], names, partitions)
        marks: dict = {}

        def between(phase: str) -> None:
            marks[phase] = _mechanism(m)
            if not phase.endswith("-done"):
                say(f"{phase} pass: {count:,} x {size} B from {producers} producers over {n * partitions} queues")
        res = topics_remoting.produce(ready["namesrv"], names, size, count, producers, between)
        for phase, r in res.items():
            r["mechanism"] = _delta(marks[f"{phase}-done"], marks[phase])
            say(f"{phase} pass: {r['msgs_per_s']:,.0f} msgs/s" + (f", {r['failed']} failed" if r["failed"] else ""))
        return res
    finally:
        say.label = ""
        m.stop()


def run_topics_bench(topic_counts: list[int], partitions: int, size: int, count: int, vs: str | None,
                     say: Progress, protocol: str = "kafka", producers: int = 4,
                     remoting_count: int | None = None) -> dict:
    """Rows per topic count: "rmq" and "tansu" through Kafka (protocol kafka or both), "rocketmq"
    through the RocketMQ protocol (rocketmq or both; `remoting_count` sends per pass)."""
    rows = []
    for n in topic_counts:
        row: dict = {"topics": n, "partitions": partitions, "queues": n * partitions}
        if protocol in ("kafka", "both"):
            for kind in ["rmq"] + (["tansu"] if vs == "tansu" else []):
                row[kind] = _kafka_row(kind, n, partitions, size, count, say)
        if protocol in ("rocketmq", "both"):
            row["rocketmq"] = _remoting_row(n, partitions, size, remoting_count or count, producers, say)
        rows.append(row)
    for kind in ("rmq", "rocketmq"):
        base = rows[0][kind]["first"]["msgs_per_s"] if rows and kind in rows[0] else 0
        for row in rows:
            if kind in row:
                row[f"{kind}_first_vs_smallest"] = row[kind]["first"]["msgs_per_s"] / base if base else None
    for row in rows:
        if "tansu" in row:
            row["rmq_vs_tansu_first"] = row["rmq"]["first"]["msgs_per_s"] / row["tansu"]["first"]["msgs_per_s"]
            row["rmq_vs_tansu_warm"] = row["rmq"]["warm"]["msgs_per_s"] / row["tansu"]["warm"]["msgs_per_s"]
    return {"rows": rows, "size": size, "count": count, "partitions": partitions, "client": "confluent-kafka",
            "acks": "all", "linger_ms": 5, "protocol": protocol, "rocketmq_producers": producers,
            "rocketmq_count": remoting_count or count}


def _parse_counts(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated positive integers, got {value!r}", param_hint="--topics")
    if not out or any(v <= 0 for v in out):
        raise click.BadParameter(f"expected comma-separated positive integers, got {value!r}", param_hint="--topics")
    return out


def _echo_table(table: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def _mech_cells(r: dict) -> list[str]:
    mech = r["first"]["mechanism"]
    return [str(mech["files_created"]), str(mech["fdatasync_calls"]), f"{mech['minflt']:,}", f"{mech['cpu_s']:.2f}",
            f"{r['first']['client_cpu_s']:.2f}"]


_MECH_HEAD = ["files made", "fdatasync", "minor faults", "broker cpu s", "client cpu s"]


def _echo_report(res: dict, vs: str | None) -> None:
    rows = res["rows"]
    if "rmq" in rows[0]:
        click.echo(f"Kafka protocol: confluent-kafka, acks=all, linger 5 ms, {res['count']:,} x {res['size']} B "
                   "records per pass, round-robin over every partition; a fresh broker per row")
        head = ["topics x parts", "rmq first", "rmq warm", "first vs row 1"]
        if vs:
            head += ["tansu first", "tansu warm", "rmq/tansu first", "rmq/tansu warm"]
        table = [head + _MECH_HEAD]
        for r in rows:
            a = r["rmq"]
            cells = [f"{r['topics']} x {r['partitions']}", f"{a['first']['msgs_per_s']:,.0f}",
                     f"{a['warm']['msgs_per_s']:,.0f}", f"{r['rmq_first_vs_smallest']:.2f}"]
            if vs:
                t = r["tansu"]
                cells += [f"{t['first']['msgs_per_s']:,.0f}", f"{t['warm']['msgs_per_s']:,.0f}",
                          f"{r['rmq_vs_tansu_first']:.2f}", f"{r['rmq_vs_tansu_warm']:.2f}"]
            table.append(cells + _mech_cells(a))
        _echo_table(table)
        click.echo("First pass, where the time goes: the Produce requests the client sent (librdkafka's statistics; "
                   "it sends one partition per request) and the CPU of each side")
        head = ["topics x parts", "rmq requests", "records/request", "rmq cpu s", "client cpu s"]
        if vs:
            head += ["tansu requests", "tansu cpu s", "client cpu s (tansu)"]
        table = [head]
        for r in rows:
            a = r["rmq"]["first"]
            reqs = a.get("produce_requests", 0)
            cells = [f"{r['topics']} x {r['partitions']}", f"{reqs:,}", f"{res['count'] / reqs:.1f}" if reqs else "-",
                     f"{a['mechanism']['cpu_s']:.2f}", f"{a['client_cpu_s']:.2f}"]
            if vs:
                t = r["tansu"]["first"]
                cells += [f"{t.get('produce_requests', 0):,}", f"{t.get('broker_cpu_s', 0.0):.2f}", f"{t['client_cpu_s']:.2f}"]
            table.append(cells)
        _echo_table(table)
    if "rocketmq" in rows[0]:
        click.echo(f"RocketMQ protocol: {res['rocketmq_producers']} stock C++ producers (rocketmq 0.4.4, send_sync), "
                   f"{res['rocketmq_count']:,} x {res['size']} B messages per pass, each producer round-robin over "
                   "every topic; a fresh broker per row")
        table = [["topics x queues", "first", "warm", "first vs row 1", "failed"] + _MECH_HEAD]
        for r in rows:
            a = r["rocketmq"]
            table.append([f"{r['topics']} x {r['partitions']}", f"{a['first']['msgs_per_s']:,.0f}",
                          f"{a['warm']['msgs_per_s']:,.0f}", f"{r['rocketmq_first_vs_smallest']:.2f}",
                          str(a["first"]["failed"] + a["warm"]["failed"])] + _mech_cells(a))
        _echo_table(table)
    click.echo("(files made, fdatasync, minor faults, broker cpu: the rmq broker process during the first pass; "
               "client cpu: the producing processes, client library included, during the first pass)")


@click.command("topics")
@click.option("--topics", "topics_arg", default="8,64,256", show_default=True,
              help="Comma-separated topic counts, one fresh broker per count.")
@click.option("--partitions", type=int, default=8, show_default=True, help="Partitions (queues) per topic.")
@click.option("--size", type=int, default=1024, show_default=True, help="Record value size in bytes.")
@click.option("--count", type=int, default=200_000, show_default=True, help="Records per pass (Kafka protocol).")
@click.option("--vs", type=click.Choice(["tansu"]), default=None, help="Run the Kafka rows against Tansu too.")
@click.option("--protocol", type=click.Choice(["kafka", "rocketmq", "both"]), default="kafka", show_default=True,
              help="Produce through a Kafka client, through stock RocketMQ producers, or both.")
@click.option("--producers", type=int, default=4, show_default=True,
              help="RocketMQ protocol: producer processes (one C++ producer each).")
@click.option("--rocketmq-count", type=int, default=40_000, show_default=True,
              help="RocketMQ protocol: messages per pass, shared by the producers (one request each).")
@click.option("--json", "as_json", is_flag=True)
def bench_topics(topics_arg, partitions, size, count, vs, protocol, producers, rocketmq_count, as_json) -> None:
    """Produce throughput against N topics x P partitions (first pass and warm pass), with the
    store's mechanism figures (files created, fdatasync calls, page faults) per pass; through the
    Kafka protocol (vs Tansu with --vs tansu), the RocketMQ protocol, or both."""
    counts = _parse_counts(topics_arg)
    if min(partitions, size, count, producers, rocketmq_count) <= 0:
        raise click.BadParameter("--partitions, --size, --count, --producers and --rocketmq-count must be positive")
    if vs and protocol == "rocketmq":
        raise click.BadParameter("Tansu speaks only the Kafka protocol: use --protocol kafka or both with --vs tansu",
                                 param_hint="--vs")
    res = run_topics_bench(counts, partitions, size, count, vs, Progress(), protocol=protocol, producers=producers,
                           remoting_count=rocketmq_count)
    if as_json:
        click.echo(json.dumps(res, indent=1))
        return
    _echo_report(res, vs)
