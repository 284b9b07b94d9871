"""`rmq bench spark`: rows/s of every available Spark source reading the same N records, next to
reading those rows from Parquet in the same run (the upper bound).

The bench starts an embedded broker (or uses --bootstrap/--namesrv), fills one topic with N records
of SIZE bytes through confluent-kafka, then runs kafka_bridge.spark.measure in a child process (one
local[2] SparkSession): `pykafka` and `rocketmq` read that topic (a Kafka topic is a RocketMQ topic
on this broker), Spark's own `kafka` too when SPARK_KAFKA_JARS names its jars, and Parquet a copy.
Medians over --runs, ratios to Parquet. --max-transfer raises the started broker's
maxTransferCountOnMessageInMemory (RocketMQ's per-pull cap, 32 by default), which the `rocketmq`
source's pulls run into; Kafka fetches have no such count cap.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid

import click

from .clients import Progress, _Managed


def _fill(bootstrap: str, topic: str, rows: int, size: int, partitions: int, say) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 200000})
    body = os.urandom(size)
    for i in range(rows):
        while True:
            try:
                p.produce(topic, value=body, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 50_000 == 0 and i:
            say(f"produced {i:,}")
    left = p.flush(120)
    if left:
        raise click.ClickException(f"{left} records not acknowledged by {bootstrap}")


@click.command("spark")
@click.option("--rows", type=int, default=200_000, show_default=True)
@click.option("--size", type=int, default=100, show_default=True, help="Value size in bytes.")
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--runs", type=int, default=3, show_default=True)
@click.option("--bootstrap", default=None, help="Use this broker's Kafka listener (with --namesrv) instead of starting one.")
@click.option("--namesrv", default=None, help="Its NameServer (for the rocketmq source).")
@click.option("--max-transfer", type=click.IntRange(1, 65536), default=None,
              help="The started broker's maxTransferCountOnMessageInMemory, the most messages one pull "
                   "answer carries (default: RocketMQ's 32). Not with --namesrv (that broker's own applies).")
@click.option("--json", "as_json", is_flag=True)
def bench_spark(rows, size, partitions, runs, bootstrap, namesrv, max_transfer, as_json) -> None:
    """Spark sources reading the same records: rows/s each, and their ratio to Parquet."""
    if rows <= 0 or size <= 0 or partitions <= 0 or runs <= 0:
        raise click.BadParameter("--rows, --size, --partitions and --runs must be positive")
    if bool(bootstrap) != bool(namesrv):
        raise click.BadParameter("give both --bootstrap and --namesrv, or neither (a broker is started)")
    if max_transfer is not None and namesrv:
        raise click.BadParameter("--max-transfer sets the broker the bench starts; with --namesrv the running "
                                 "broker's own maxTransferCountOnMessageInMemory applies")
    import importlib.util
    if importlib.util.find_spec("pyspark") is None:      # Spark itself runs in the child process
        from rmq.extras import MissingExtra
        raise MissingExtra("pyspark", "`rmq bench spark`")
    say = Progress()
    managed = None
    try:
        if not bootstrap:
            managed = _Managed("rmq", {"maxTransferCountOnMessageInMemory": max_transfer} if max_transfer else None)
            bootstrap = managed.start()
            with open(os.path.join(managed.tmp, "ready.json"), encoding="utf-8") as fh:
                namesrv = json.load(fh)["namesrv"]
            say(f"broker up: kafka {bootstrap}, namesrv {namesrv}")
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        _fill(bootstrap, topic, rows, size, partitions, say)
        say(f"{rows:,} records of {size} B in {topic} ({partitions} partitions); starting Spark")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        proc = subprocess.run([sys.executable, "-P", "-m", "kafka_bridge.spark.measure", "--bootstrap", bootstrap,
                               "--namesrv", namesrv, "--topic", topic, "--rows", str(rows), "--runs", str(runs)],
                              stdout=subprocess.PIPE, stderr=None if not as_json else subprocess.DEVNULL,
                              env=env, text=True, timeout=3600)
        if proc.returncode != 0:
            raise click.ClickException(f"the Spark measurement failed (exit code {proc.returncode})")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        if managed is not None:
            managed.stop()
    med = {k: rows / statistics.median(v) for k, v in res["seconds"].items()}
    top = med.get("parquet (upper bound)")
    out = {"rows": rows, "size": size, "partitions": partitions, "runs": runs,
           "max_transfer": max_transfer if max_transfer else (None if managed is None else 32),
           "rows_per_s": {k: round(v) for k, v in med.items()},
           "ratio_to_parquet": {k: round(v / top, 3) for k, v in med.items()} if top else {}}
    if as_json:
        click.echo(json.dumps(out))
        return
    cap = f", broker pull cap {out['max_transfer']}" if out["max_transfer"] else ""
    click.echo(f"{rows:,} records x {size} B, {partitions} partitions{cap}, local[2], median of {runs} runs")
    w = max(len(k) for k in med)
    click.echo(f"{'source'.ljust(w)}  {'rows/s':>10}  {'x parquet':>9}")
    for k, v in med.items():
        click.echo(f"{k.ljust(w)}  {v:>10,.0f}  {out['ratio_to_parquet'].get(k, 0):>9.3f}")
