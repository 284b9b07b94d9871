"""The RocketMQ-protocol half of `rmq bench topics` (kafka_bridge.bench.topics): many producers
over many topics.

Each producer is its own process holding a stock C++ producer (PyPI rocketmq 0.4.4, send_sync:
one message per request, answered after the store took it). Every producer sends to every topic
in turn, so each one looks up every topic's route on its first send to it and the broker writes
the first unit of every queue during the first pass; the warm pass repeats the sends with the
routes known and the queues written. Topics are made with UPDATE_AND_CREATE_TOPIC beforehand.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import time
import uuid
from typing import Callable

PASSES = ("first", "warm")


def create_topics(namesrv: str, broker_addr: str, names: list[str], queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC for each name on one broker (as `rmq admin updateTopic -b`)."""
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv, timeout=30) as admin:
        for name in names:
            admin.create_topic(name, broker_addr=broker_addr, read_queue_nums=queues, write_queue_nums=queues)


def _producer(namesrv: str, names: list[str], size: int, count: int, first: int, ready, go, reports) -> None:
    """One producer process: `count` sends per pass round-robin over `names` (starting at index
    `first`, so producers do not move in step), both passes; reports (pass, sent, failed, seconds,
    cpu seconds) after each. Waits on `go` before each pass."""
    try:
        from rocketmq.client import Message, Producer, SendStatus
    except Exception as exc:  # noqa: BLE001 - ImportError or a missing shared library
        ready.put(f"C++ client unavailable: {exc}")
        return
    body = os.urandom(size // 2 + 1).hex()[:size].encode()
    p = Producer(f"bench_topics_{uuid.uuid4().hex[:8]}")
    p.set_namesrv_addr(namesrv)
    p.start()
    ready.put("ok")
    try:
        for phase in PASSES:
            go[phase].wait(600)
            failed = 0
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(count):
                m = Message(names[(first + i) % len(names)])
                m.set_body(body)
                try:
                    if p.send_sync(m).status != SendStatus.OK:
                        failed += 1
                except Exception:  # noqa: BLE001 - the C++ client raises on a refused or timed-out send
                    failed += 1
            reports.put((phase, count, failed, time.perf_counter() - t0, time.process_time() - c0))
    finally:
        p.shutdown()


def _get(q, procs: list, timeout: float):
    """q.get, bounded in time, failing early when a producer process died."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=0.5)
        except queue.Empty:
            dead = [pr.exitcode for pr in procs if pr.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a producer process exited with code {dead[0]}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"no word from the producer processes within {timeout:.0f} s") from None


def produce(namesrv: str, names: list[str], size: int, count: int, producers: int,
            between: Callable[[str], None]) -> dict:
    """Run both passes with `producers` processes sharing `count` sends per pass. `between(phase)`
    is called before each pass starts and after it ends ("first", "first-done", "warm",
    "warm-done"), for the caller's mechanism snapshots. Returns {pass: {msgs_per_s, failed,
    client_cpu_s}}; msgs/s is every producer's sends over the slowest producer's time."""
    ctx = multiprocessing.get_context("spawn")
    ready, reports = ctx.Queue(), ctx.Queue()
    go = {phase: ctx.Event() for phase in PASSES}
    share = [count // producers + (1 if i < count % producers else 0) for i in range(producers)]
    procs = [ctx.Process(target=_producer, args=(namesrv, names, size, n, i * len(names) // producers, ready, go,
                                                 reports), daemon=True)
             for i, n in enumerate(share) if n]
    for pr in procs:
        pr.start()
    out: dict = {}
    try:
        for _ in procs:
            msg = _get(ready, procs, 120)
            if msg != "ok":
                raise RuntimeError(msg)
        for phase in PASSES:
            between(phase)
            go[phase].set()
            got = [_get(reports, procs, 600) for _ in procs]
            between(f"{phase}-done")
            sent = sum(g[1] for g in got)
            failed = sum(g[2] for g in got)
            slowest = max(g[3] for g in got)
            out[phase] = {"msgs_per_s": (sent - failed) / slowest if slowest > 0 else 0.0, "failed": failed,
                          "client_cpu_s": round(sum(g[4] for g in got), 2)}
    finally:
        for pr in procs:
            pr.join(30)
            if pr.is_alive():
                pr.kill()
                pr.join(5)
    return out


__all__ = ["create_topics", "produce"]
