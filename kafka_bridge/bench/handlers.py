"""`rmq bench kafka-handlers`: the Kafka produce and fetch handlers in-process, no sockets, with the
C extension (rmq._native) and with the Python reference side by side (SPEC §11, §12).

produce_partition takes ready RecordBatch bytes (as a Produce request carries them) into a real
broker's store; read_partition then reads every partition back as a Fetch would. This isolates the
per-record work of mapping, store and encoding from the network and the client. Also home of the
Kafka-batch encoder `rmq bench store --kafka-batches` uses.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time

import click

from kafka_bridge.mapping import batch_to_units
from kafka_bridge.records import RecordBatch, encode_batch
from rmq import native

TS = 1_700_000_000_000


def store_batch_encoder(store, size: int, body: bytes, topic: str, born_host=("127.0.0.1", 40000)):
    """For `rmq bench store --kafka-batches`: encoder(queue_id, n) -> EncodedUnits of n records of
    `body`, doing what the broker does per produced batch (header + CRC check, C mapping). The
    batch bytes themselves are built once per n (the client's work, not timed)."""
    if native.ext is None:
        raise click.ClickException("--kafka-batches needs the C extension rmq._native (built by pip install -e .)")
    raws: dict[int, bytes] = {}

    def encode(queue_id: int, n: int):
        raw = raws.get(n)
        if raw is None:
            raw = raws[n] = encode_batch([(None, body, None, TS + i) for i in range(n)])
        enc = batch_to_units(RecordBatch.from_buffer(raw), topic, queue_id, born_host, store.commitlog.store_v6,
                             store.config.maxMessageSize)
        if enc is None:
            raise RuntimeError("the C mapping declined a plain batch")
        return enc
    return encode


def run_handlers_bench(count: int, size: int, batch: int, partitions: int, use_native: bool,
                       fetch_max_bytes: int = 10 << 20) -> dict:
    from kafka_bridge.bridge import KafkaBridge
    from kafka_bridge.handlers.fetch import read_partition
    from kafka_bridge.handlers.produce import produce_partition
    from rmq.broker.controller import BrokerController
    from rmq.config import load_config

    saved = native.ext
    if not use_native:
        native.ext = None
    root = tempfile.mkdtemp(prefix="rmq-handlers-bench-")
    ctl = BrokerController(load_config(None, {"storePathRootDir": root}))
    ctl.start()
    try:
        ctl.create_topic("HB", partitions)
        bridge = KafkaBridge(ctl, "127.0.0.1", 0)
        payload = os.urandom(size)
        raw = encode_batch([(None, payload, [], TS + i) for i in range(batch)])

        class Conn:
            peer = ("127.0.0.1", 40000)

        async def produce() -> float:
            t0 = time.perf_counter()
            sent = i = 0
            while sent < count:
                out = await produce_partition(bridge, Conn, "HB", i % partitions, raw, 1, None)
                if out["error_code"]:
                    raise RuntimeError(f"produce failed: {out}")
                sent += batch
                i += 1
            return time.perf_counter() - t0

        produce_s = asyncio.run(produce())
        produced = (count + batch - 1) // batch * batch
        t0 = time.perf_counter()
        fetched = fetched_bytes = 0
        for p in range(partitions):
            off = 0
            while True:
                entry, n = read_partition(bridge, "HB", p, off, fetch_max_bytes, 0)
                if not n:
                    break
                recs = entry["records"]
                c = RecordBatch(recs).records_count  # header only: what a client's first look costs
                off += c
                fetched += c
                fetched_bytes += n
        fetch_s = time.perf_counter() - t0
        if fetched != produced:
            raise RuntimeError(f"fetched {fetched} of {produced} records")
        return {"native": use_native, "records": produced, "size": size, "batch": batch, "partitions": partitions,
                "produce_s": round(produce_s, 4), "produce_records_per_s": round(produced / produce_s),
                "fetch_s": round(fetch_s, 4), "fetch_records_per_s": round(fetched / fetch_s),
                "fetch_mb_per_s": round(fetched_bytes / fetch_s / 1e6, 1)}
    finally:
        native.ext = saved
        ctl.shutdown()
        shutil.rmtree(root, ignore_errors=True)


@click.command("kafka-handlers")
@click.option("--count", type=int, default=100_000, show_default=True, help="Records to produce (then fetch).")
@click.option("--size", type=int, default=100, show_default=True, help="Value size in bytes.")
@click.option("--batch", type=int, default=1000, show_default=True, help="Records per produced RecordBatch.")
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--mode", type=click.Choice(["both", "native", "python"]), default="both", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def bench_kafka_handlers(count, size, batch, partitions, mode, as_json) -> None:
    """produce_partition / read_partition in-process: records/s with rmq._native and with the Python path."""
    if count <= 0 or size < 0 or batch <= 0 or partitions <= 0:
        raise click.BadParameter("--count, --batch and --partitions must be positive")
    modes = {"both": [True, False], "native": [True], "python": [False]}[mode]
    if True in modes and native.ext is None:
        if mode == "native":
            raise click.ClickException("rmq._native is not available (not built, or RMQ_NO_NATIVE=1)")
        modes = [False]
    results = [run_handlers_bench(count, size, batch, partitions, m) for m in modes]
    if as_json:
        click.echo(json.dumps(results))
        return
    click.echo(f"handlers in-process: {results[0]['records']} x {size} B records, batches of {batch}, "
               f"{partitions} partitions")
    click.echo(f"  {'path':8} {'produce rec/s':>14} {'fetch rec/s':>14} {'fetch MB/s':>11}")
    for r in results:
        click.echo(f"  {'C' if r['native'] else 'Python':8} {r['produce_records_per_s']:>14,} "
                   f"{r['fetch_records_per_s']:>14,} {r['fetch_mb_per_s']:>11}")
    if len(results) == 2:
        a, b = results
        click.echo(f"  {'C/Python':8} {a['produce_records_per_s'] / b['produce_records_per_s']:>14.1f} "
                   f"{a['fetch_records_per_s'] / b['fetch_records_per_s']:>14.1f}")
