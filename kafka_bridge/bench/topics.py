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


def _runtime_info(m: _Managed) -> dict:
    """The rmq child's GET_BROKER_RUNTIME_INFO table, through `rmq admin brokerStatus`."""
    try:
        with open(os.path.join(m.tmp, "ready.json")) as fh:
            ready = json.load(fh)
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


def _produce(bootstrap: str, names: list[str], partitions: int, size: int, count: int) -> tuple[float, float]:
    """Send `count` records of `size` bytes round-robin over every (topic, partition); (msgs/s,
    CPU seconds this process, the client, spent doing it: librdkafka's threads included)."""
    from confluent_kafka import Producer
    prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": max(100_000, count), "batch.num.messages": 10_000})
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
    return count / elapsed, client_cpu


def run_topics_bench(topic_counts: list[int], partitions: int, size: int, count: int, vs: str | None,
                     say: Progress) -> dict:
    rows = []
    kinds = ["rmq"] + (["tansu"] if vs == "tansu" else [])
    for n in topic_counts:
        row: dict = {"topics": n, "partitions": partitions, "queues": n * partitions}
        for kind in kinds:
            say.label = ""
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
                    before = _mechanism(m) if kind == "rmq" else {}
                    say(f"{phase} pass: {count:,} x {size} B over {n * partitions} partitions")
                    rate, client_cpu = _produce(bootstrap, names, partitions, size, count)
                    res[phase] = {"msgs_per_s": rate, "client_cpu_s": round(client_cpu, 2)}
                    if kind == "rmq":
                        res[phase]["mechanism"] = _delta(_mechanism(m), before)
                    say(f"{phase} pass: {rate:,.0f} msgs/s")
                row[kind] = res
            finally:
                m.stop()
        rows.append(row)
    base = rows[0]["rmq"]["first"]["msgs_per_s"] if rows else 0
    for row in rows:
        row["rmq_first_vs_smallest"] = row["rmq"]["first"]["msgs_per_s"] / base if base else None
        if "tansu" in row:
            row["rmq_vs_tansu_first"] = row["rmq"]["first"]["msgs_per_s"] / row["tansu"]["first"]["msgs_per_s"]
            row["rmq_vs_tansu_warm"] = row["rmq"]["warm"]["msgs_per_s"] / row["tansu"]["warm"]["msgs_per_s"]
    return {"rows": rows, "size": size, "count": count, "partitions": partitions, "client": "confluent-kafka",
            "acks": "all", "linger_ms": 5}


def _parse_counts(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated positive integers, got {value!r}", param_hint="--topics")
    if not out or any(v <= 0 for v in out):
        raise click.BadParameter(f"expected comma-separated positive integers, got {value!r}", param_hint="--topics")
    return out


@click.command("topics")
@click.option("--topics", "topics_arg", default="8,64,256", show_default=True,
              help="Comma-separated topic counts, one fresh broker per count.")
@click.option("--partitions", type=int, default=8, show_default=True, help="Partitions (queues) per topic.")
@click.option("--size", type=int, default=1024, show_default=True, help="Record value size in bytes.")
@click.option("--count", type=int, default=200_000, show_default=True, help="Records per pass.")
@click.option("--vs", type=click.Choice(["tansu"]), default=None, help="Run the same rows against Tansu too.")
@click.option("--json", "as_json", is_flag=True)
def bench_topics(topics_arg, partitions, size, count, vs, as_json) -> None:
    """Produce throughput against N topics x P partitions (first pass and warm pass), with the
    store's mechanism figures (files created, fdatasync calls, page faults) per pass."""
    counts = _parse_counts(topics_arg)
    if partitions <= 0 or size <= 0 or count <= 0:
        raise click.BadParameter("--partitions, --size and --count must be positive")
    res = run_topics_bench(counts, partitions, size, count, vs, Progress())
    if as_json:
        click.echo(json.dumps(res, indent=1))
        return
    click.echo(f"confluent-kafka, acks=all, linger 5 ms, {count:,} x {size} B records per pass, "
               f"round-robin over every partition; a fresh broker per row")
    head = ["topics x parts", "rmq first", "rmq warm", "first vs row 1"]
    if vs:
        head += ["tansu first", "tansu warm", "rmq/tansu first", "rmq/tansu warm"]
    head += ["files made", "fdatasync", "minor faults", "broker cpu s", "client cpu s"]
    table = [head]
    for r in res["rows"]:
        a = r["rmq"]
        mech = a["first"]["mechanism"]
        cells = [f"{r['topics']} x {r['partitions']}", f"{a['first']['msgs_per_s']:,.0f}",
                 f"{a['warm']['msgs_per_s']:,.0f}", f"{r['rmq_first_vs_smallest']:.2f}"]
        if vs:
            t = r["tansu"]
            cells += [f"{t['first']['msgs_per_s']:,.0f}", f"{t['warm']['msgs_per_s']:,.0f}",
                      f"{r['rmq_vs_tansu_first']:.2f}", f"{r['rmq_vs_tansu_warm']:.2f}"]
        cells += [str(mech["files_created"]), str(mech["fdatasync_calls"]), f"{mech['minflt']:,}",
                  f"{mech['cpu_s']:.2f}", f"{a['first']['client_cpu_s']:.2f}"]
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    click.echo("(files made, fdatasync, minor faults, broker cpu: the rmq broker process during the first pass; "
               "client cpu: the producing process, librdkafka included, during the rmq first pass)")
