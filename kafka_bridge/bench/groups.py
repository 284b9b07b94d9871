"""`rmq bench kafka-groups`: a classic consumer group, a KIP-848 consumer group and a KIP-932 share
group reading the same records from one fresh `rmq up`, side by side in one run (issue 28).

Two figures per kind, each over --repeats rounds with the kinds interleaved in every round:
- throughput: records per second one confluent-kafka consumer reads a prepared topic, from
  subscribe() to its last record (joining included: librdkafka prefetches a small topic before the
  application polls, so timing from the first record would measure its local queue), and the time
  from subscribe() to the first record;
- redelivery latency: how long a record a consumer gave up on takes to reach a consumer again. For
  the share group the consumer RELEASEs it (explicit acknowledgement) and the time runs until the
  same consumer gets it back; for the two consumer groups the consumer closes without committing
  (what a failed consumer does) and the time runs until a new member of the group has the record
  again (leave, rebalance or assignment, fetch from the committed offset). A share-group record
  whose consumer died instead comes back when its lock expires (--lock-ms, the broker's
  kafkaShareRecordLockDurationMs), which is printed beside the figures and not measured.
Medians with [min-max] over the repeats; a difference inside the spread is inconclusive.
"""
from __future__ import annotations

import time
import uuid

import click

from .embedded import BenchBroker, fmt_median

KINDS = ("classic", "consumer (KIP-848)", "share (KIP-932)")


def _broker(lock_ms: int) -> BenchBroker:
    return BenchBroker("groups", {"kafkaShareRecordLockDurationMs": lock_ms, "kafkaShareAutoOffsetReset": "earliest",
                                  "kafkaShareHeartbeatIntervalMs": 500, "kafkaConsumerGroupHeartbeatIntervalMs": 500,
                                  "kafkaGroupMinSessionTimeoutMs": 1000, "kafkaGroupInitialRebalanceDelayMs": 0},
                       start_timeout=30)


def _topic(bootstrap: str, records: int, size: int) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    name = "bench-groups-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    body = b"x" * size
    for _ in range(records):
        while True:
            try:
                p.produce(name, body)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60):
        raise click.ClickException("records not all produced for the bench")
    return name


def _consumer(bootstrap: str, group: str, kind: str):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "group.protocol": "classic" if kind == "classic" else "consumer",
                     **({"session.timeout.ms": 6000} if kind == "classic" else {})})


def _share(bootstrap: str, group: str, explicit: bool = False):
    from confluent_kafka import ShareConsumer
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(conf)


def _throughput(bootstrap: str, topic: str, kind: str, records: int, timeout: float) -> tuple[float, float]:
    """(records per second from subscribe() to the last record, ms from subscribe() to the first).
    Counting from the first record would flatter the consumer groups: librdkafka prefetches a
    whole small topic while the application has not polled yet."""
    group = "bench-" + uuid.uuid4().hex[:8]
    share = kind.startswith("share")
    c = _share(bootstrap, group) if share else _consumer(bootstrap, group, kind)
    start = time.monotonic()
    c.subscribe([topic])
    got, first, deadline = 0, None, time.monotonic() + timeout
    try:
        while got < records and time.monotonic() < deadline:
            if share:
                n = sum(1 for m in c.poll(0.5) if m.error() is None)
            else:
                n = sum(1 for m in c.consume(500, 0.5) if m.error() is None)
            if n and first is None:
                first = time.monotonic()
            got += n
        end = time.monotonic()
    finally:
        c.close()
    if got < records or first is None:
        raise click.ClickException(f"{kind}: read {got} of {records} records within {timeout:.0f} s")
    return got / max(end - start, 1e-6), (first - start) * 1000


def _redelivery(bootstrap: str, topic: str, kind: str, timeout: float) -> float:
    group = "bench-" + uuid.uuid4().hex[:8]
    deadline = time.monotonic() + timeout
    if kind.startswith("share"):
        from confluent_kafka import AcknowledgeType
        c = _share(bootstrap, group, explicit=True)
        c.subscribe([topic])
        try:
            first = None
            while first is None and time.monotonic() < deadline:
                msgs = [m for m in c.poll(0.5) if m.error() is None]
                for m in msgs:
                    c.acknowledge(m, AcknowledgeType.ACCEPT if first is not None else AcknowledgeType.RELEASE)
                    if first is None:
                        first = m.offset()
            t0 = time.monotonic()
            c.commit_sync()
            while time.monotonic() < deadline:
                msgs = [m for m in c.poll(0.5) if m.error() is None]
                hit = any(m.offset() == first for m in msgs)
                t1 = time.monotonic()
                for m in msgs:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if hit:
                    return (t1 - t0) * 1000
        finally:
            c.close()
        raise click.ClickException("share group: the released record did not come back")
    c = _consumer(bootstrap, group, kind)
    c.subscribe([topic])
    m = None
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            m = None
    if m is None:
        c.close()
        raise click.ClickException(f"{kind}: no record")
    offset = m.offset()
    t0 = time.monotonic()
    c.close()  # gave up on it without committing
    c2 = _consumer(bootstrap, group, kind)
    c2.subscribe([topic])
    try:
        while time.monotonic() < deadline:
            m2 = c2.poll(0.2)
            if m2 is not None and m2.error() is None and m2.offset() == offset:
                return (time.monotonic() - t0) * 1000
    finally:
        c2.close()
    raise click.ClickException(f"{kind}: the record was not delivered again")


@click.command("kafka-groups")
@click.option("--records", type=int, default=20_000, show_default=True, help="Records in the topic each round reads.")
@click.option("--size", type=int, default=100, show_default=True, help="Record value size in bytes.")
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option("--lock-ms", type=int, default=30_000, show_default=True,
              help="The broker's share-group acquisition lock (kafkaShareRecordLockDurationMs).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds one phase may take.")
def bench_kafka_groups(records, size, repeats, lock_ms, timeout) -> None:
    """Classic vs KIP-848 consumer group vs KIP-932 share group: throughput and redelivery latency."""
    try:
        import confluent_kafka
    except ImportError:
        raise click.ClickException("confluent-kafka is needed: pip install 'rmq-bridge[interop]'") from None
    if not hasattr(confluent_kafka, "ShareConsumer"):
        raise click.ClickException("confluent-kafka 2.16+ is needed for its ShareConsumer")
    if records < 2 or repeats < 1:
        raise click.ClickException("--records must be at least 2 and --repeats at least 1")
    broker = _broker(lock_ms)
    tput = {k: [] for k in KINDS}
    join = {k: [] for k in KINDS}
    redel = {k: [] for k in KINDS}
    try:
        bootstrap = broker.start()
        click.echo(f"rmq up at {bootstrap}; {records:,} records of {size} B in a 1-partition topic per round")
        for r in range(repeats):
            topic = _topic(bootstrap, records, size)
            order = KINDS[r % 3:] + KINDS[:r % 3]  # interleave, and rotate who goes first
            for kind in order:
                rate, first_ms = _throughput(bootstrap, topic, kind, records, timeout)
                tput[kind].append(rate)
                join[kind].append(first_ms)
                redel[kind].append(_redelivery(bootstrap, topic, kind, timeout))
            click.echo(f"round {r + 1}/{repeats} done")
    finally:
        broker.stop()
    click.echo("")
    click.echo(f"{'group kind':<22} {'throughput (one consumer)':<30} {'first record after':<24} "
               f"{'redelivery latency':<24}")
    for kind in KINDS:
        click.echo(f"{kind:<22} {fmt_median(tput[kind], 'msgs/s'):<30} {fmt_median(join[kind], 'ms'):<24} "
                   f"{fmt_median(redel[kind], 'ms'):<24}")
    click.echo("throughput: records / time from subscribe() to the last record (joining included); "
               "first record after: subscribe() to the first record.")
    click.echo(f"redelivery: share = RELEASE -> same consumer polls it again; classic/consumer = close without "
               f"commit -> a new member reads it again. A share record whose consumer died returns after the "
               f"lock, {lock_ms:,} ms here. Medians [min-max] of {repeats} interleaved rounds.")
