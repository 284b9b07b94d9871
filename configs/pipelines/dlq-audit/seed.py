"""Demo data for the DLQ audit: N payments and N/2 shipments through the RocketMQ client, each
consumed by a push consumer that fails every delivery (`rmq admin pushConsume --fail always`), with
maxReconsumeTimes 2 for group cg_pay and 1 for cg_ship, until all of them are dead letters; then the
write-only DLQ topics are made readable, as an operator does before auditing them."""
from __future__ import annotations

import os
import subprocess
import sys
import time

GROUPS = {"payments": ("cg_pay", 2), "shipments": ("cg_ship", 1)}


def counts(n: int) -> dict[str, int]:
    return {"payments": n, "shipments": max(1, n // 2)}


def seed(addresses: dict, config: dict, n: int, say) -> None:
    from rmq.client.admin import MQAdmin
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    ns = addresses["namesrv"]
    p = Producer("pipeline-seed", namesrv=[ns])
    with MQAdmin(namesrv=[ns]) as admin:
        for topic in GROUPS:
            admin.create_topic(topic, broker_addr=addresses["remoting"], read_queue_nums=2, write_queue_nums=2)
            admin.wait_for_route(topic, queues=2, timeout=20)
    p.start()
    try:
        for topic, k in counts(n).items():
            for i in range(k):
                p.send(Message(topic, f"{topic} {i}", tags="seed", keys=f"{topic[:4]}-{i:04d}"))
    finally:
        p.shutdown()
    say(f"seeded {n} payments and {counts(n)['shipments']} shipments; failing consumers are retrying them")
    procs = []
    for topic, (group, times) in GROUPS.items():
        procs.append(subprocess.Popen(
            [sys.executable, "-P", "-m", "rmq.cli", "admin", "pushConsume", "-n", ns, "-t", topic, "-g", group,
             "--fail", "always", "--max-reconsume-times", str(times), "--duration", "95"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ)))
    deadline = time.monotonic() + 100
    want = {f"%DLQ%{GROUPS[t][0]}": k for t, k in counts(n).items()}
    try:
        with MQAdmin(namesrv=[ns]) as admin:
            while True:
                have = {}
                for dlq in want:
                    try:
                        have[dlq] = sum(q.max_offset - q.min_offset for q in admin.topic_status(dlq))
                    except Exception:
                        have[dlq] = 0
                if all(have[d] >= k for d, k in want.items()):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dead letters after 100 s: {have}, expected {want}")
                time.sleep(1)
    finally:
        for pr in procs:
            pr.terminate()
            try:
                pr.wait(20)
            except subprocess.TimeoutExpired:
                pr.kill()
    # RocketMQ creates %DLQ% topics write-only (perm 2): nobody consumes them by accident. Auditing is
    # reading them on purpose, so make them readable, as `rmq admin updateTopic -t %DLQ%cg_pay -p 6
    # -r 1 -w 1 -c DefaultCluster` would
    with MQAdmin(namesrv=[ns]) as admin:
        for dlq in want:
            admin.create_topic(dlq, broker_addr=addresses["remoting"], read_queue_nums=1, write_queue_nums=1, perm=6)
            admin.wait_for_route(dlq, queues=1, timeout=20)
    say("every seeded message is a dead letter: " + ", ".join(f"{d}={k}" for d, k in want.items()) +
        "; the DLQ topics are made readable (perm 6)")
