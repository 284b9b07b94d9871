"""`rmq bench kafka-commits`: what a durable Kafka OffsetCommit costs (issue 27). Three fresh
`rmq up` brokers, side by side in one run:

- memory: kafkaOffsetCommitJournal=false, the commit waits in memory for the next 5 s persist of
  consumerOffset.json (RocketMQ's flushConsumerOffsetInterval; the behaviour before issue 27);
- journal: the commit is appended to consumerOffset.journal with write(2) before the answer
  (flushDiskType ASYNC_FLUSH: the page cache survives a kill -9 of the broker);
- journal+fdatasync: the same, fdatasync'ed before the answer (flushDiskType SYNC_FLUSH).

Each round, for every broker in turn (interleaved), one confluent-kafka client commits --partitions
offsets synchronously (commit(asynchronous=False): one OffsetCommit round trip) --commits times;
the figure is commits per second. Medians with [min-max] over --repeats rounds; a difference inside
the spread is inconclusive.
"""
from __future__ import annotations

import json
import os
import time
import uuid

import click

from .embedded import BenchBroker, fmt_median

SETUPS = {
    "memory": {"kafkaOffsetCommitJournal": False},
    "journal": {"kafkaOffsetCommitJournal": True, "flushDiskType": "ASYNC_FLUSH"},
    "journal+fdatasync": {"kafkaOffsetCommitJournal": True, "flushDiskType": "SYNC_FLUSH"},
}


class _Broker(BenchBroker):
    def journal_lines(self) -> int:
        """Lines in the journals of the store (what the last commits appended since the last persist)."""
        d = os.path.join(self.tmp, "store", "config")
        n = 0
        for name in os.listdir(d) if os.path.isdir(d) else ():
            if ".journal." in name:
                with open(os.path.join(d, name), "rb") as fh:
                    n += fh.read().count(b"\n")
        return n


def _topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    name = "bench-commits-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _commits_per_s(bootstrap: str, topic: str, partitions: int, commits: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)  # coordinator
        start = time.perf_counter()
        for i in range(1, commits + 1):
            c.commit(offsets=[TopicPartition(topic, p, i) for p in range(partitions)], asynchronous=False)
        elapsed = time.perf_counter() - start
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    if any(tp.offset != commits for tp in got):
        raise click.ClickException(f"{bootstrap}: committed offsets read back {[tp.offset for tp in got]}, "
                                   f"expected {commits}")
    return commits / max(elapsed, 1e-9)


@click.command("kafka-commits")
@click.option("--commits", type=int, default=2000, show_default=True, help="Synchronous commits per round and broker.")
@click.option("--partitions", type=int, default=8, show_default=True, help="Offsets in each commit.")
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_kafka_commits(commits, partitions, repeats, as_json) -> None:
    """Synchronous Kafka OffsetCommits per second with commits in memory until the 5 s persist,
    journaled (write(2)) and journaled with fdatasync, interleaved in one run."""
    brokers = [_Broker(name, conf) for name, conf in SETUPS.items()]
    figures: dict[str, list[float]] = {b.name: [] for b in brokers}
    try:
        topics = {}
        for b in brokers:
            b.start()
            topics[b.name] = _topic(b.bootstrap, partitions)
        for r in range(repeats):
            for b in (brokers if r % 2 == 0 else brokers[::-1]):
                figures[b.name].append(_commits_per_s(b.bootstrap, topics[b.name], partitions, commits))
                click.echo(f"round {r + 1}/{repeats} {b.name}: {figures[b.name][-1]:,.0f} commits/s", err=True)
        journaled = {b.name: b.journal_lines() for b in brokers}
    finally:
        for b in brokers:
            b.stop()
    base = sorted(figures["memory"])[len(figures["memory"]) // 2]
    if as_json:
        click.echo(json.dumps({"commits": commits, "partitions": partitions, "repeats": repeats,
                               "commits_per_s": figures, "journal_lines_at_end": journaled}))
        return
    click.echo(f"{commits} synchronous OffsetCommits of {partitions} partitions, {repeats} rounds interleaved "
               f"(median [min-max]):")
    for name, vals in figures.items():
        med = sorted(vals)[len(vals) // 2]
        click.echo(f"  {name:<18} {fmt_median(vals):>28} commits/s   x{med / base:.2f} of memory   "
                   f"journal lines at the end: {journaled[name]}")
