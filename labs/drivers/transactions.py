"""Half-message transactions vs Kafka transactions: an order service that writes its database and
publishes an "order created" event, and sometimes dies between the two.

Every transaction is one order: the local transaction writes the order to the service's database
(a dict here) or rolls back; a crash happens after the database commit and before the broker hears
the outcome. RocketMQ: the half message waits in RMQ_SYS_TRANS_HALF_TOPIC, the broker checks back
with the producer group, the group's check listener finds the order in the database and commits.
Kafka: the producer's transaction is still open when it dies; the next producer with the same
transactional.id fences it and the coordinator aborts it, so the event of an order the database
kept never reaches a read_committed consumer unless the application re-sends it (an outbox)."""
from __future__ import annotations

import threading
import time
import uuid

from ..systems import RunningSystem
from .common import DRIVERS, KAFKA, ROCKETMQ, kafka_topic, rmq_topic

SETTLE_SECONDS = 3.0     # after every expected event is visible, how long to keep reading for strays


def _plan(n: int, rollback_every: int, crash_every: int) -> dict[str, str]:
    """order id -> commit | rollback | crash (database committed, broker not told)."""
    plan = {}
    for i in range(1, n + 1):
        if crash_every and i % crash_every == 0:
            plan[f"order-{i}"] = "crash"
        elif rollback_every and i % rollback_every == 0:
            plan[f"order-{i}"] = "rollback"
        else:
            plan[f"order-{i}"] = "commit"
    return plan


def _rocketmq(run: RunningSystem, topic: str, plan: dict[str, str], seen: dict, lock, say) -> dict:
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.push_consumer import PushConsumer
    from rmq.client.transaction import LocalTransactionState, TransactionListener, TransactionProducer
    rmq_topic(run, topic, 4)
    database: set[str] = set()
    checks = [0]

    class OrderService(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            outcome = plan[msg.keys]
            if outcome == "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE
            database.add(msg.keys)
            if outcome == "crash":          # the database committed; the broker is never told
                return LocalTransactionState.UNKNOW
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg):
            with lock:
                checks[0] += 1
            return (LocalTransactionState.COMMIT_MESSAGE if msg.keys in database
                    else LocalTransactionState.ROLLBACK_MESSAGE)

    c = PushConsumer(f"lab-tx-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv],
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET")

    def listener(msgs, ctx):
        now = time.monotonic()
        with lock:
            for m in msgs:
                seen.setdefault(m.keys, []).append(now)
        return ConsumeStatus.CONSUME_SUCCESS
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    p = TransactionProducer(f"lab-tx-{uuid.uuid4().hex[:6]}", namesrv=[run.namesrv], transaction_listener=OrderService())
    p.start()
    try:
        t0 = time.monotonic()
        for key in plan:
            p.send_message_in_transaction(Message(topic, f'{{"order": "{key}"}}', keys=key))
        produce_secs = time.monotonic() - t0
        say(f"{len(plan)} transactions in {produce_secs:.1f}s; waiting for check-backs to settle the unknown ones")
        stats = _await(seen, lock, {k for k in plan if k in database}, t0)
    finally:
        c.shutdown()
        p.shutdown()
    return {"produceSeconds": produce_secs, "checkBacks": checks[0], "database": database, **stats}


def _kafka(run: RunningSystem, topic: str, plan: dict[str, str], seen: dict, lock, say) -> dict:
    from confluent_kafka import Consumer, Producer
    kafka_topic(run, topic, 4)
    database: set[str] = set()
    txid = f"lab-orders-{uuid.uuid4().hex[:6]}"

    def producer():
        p = Producer({"bootstrap.servers": run.bootstrap, "transactional.id": txid, "linger.ms": 0})
        p.init_transactions(30)
        return p
    stop = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": run.bootstrap, "group.id": f"{txid}-reader", "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                for m in c.consume(100, 0.1):
                    if m.error() is None:
                        now = time.monotonic()
                        with lock:
                            seen.setdefault(m.key().decode(), []).append(now)
        finally:
            c.close()
    th = threading.Thread(target=consume, daemon=True)
    th.start()
    crashes = 0
    p = producer()
    try:
        t0 = time.monotonic()
        for key in plan:
            outcome = plan[key]
            p.begin_transaction()
            p.produce(topic, f'{{"order": "{key}"}}'.encode(), key=key.encode())
            if outcome == "rollback":
                p.abort_transaction(30)
                continue
            database.add(key)
            if outcome == "crash":
                # The process dies with its transaction open (records flushed to the broker, no EndTxn).
                # Its replacement starts with the same transactional.id: InitProducerId fences the old
                # producer and the coordinator aborts what it left open.
                p.flush(30)
                crashes += 1
                p = producer()
                continue
            p.commit_transaction(30)
        produce_secs = time.monotonic() - t0
        say(f"{len(plan)} transactions in {produce_secs:.1f}s ({crashes} producer restarts)")
        stats = _await(seen, lock, {k for k, o in plan.items() if o == "commit"}, t0)
    finally:
        stop.set()
        th.join(15)
    return {"produceSeconds": produce_secs, "checkBacks": 0, "database": database, **stats}


def _await(seen: dict, lock, expected: set[str], t0: float, timeout: float = 90.0) -> dict:
    """Wait until every expected event is visible (or the timeout), then a little longer for strays."""
    deadline = t0 + timeout
    done_at = None
    while time.monotonic() < deadline:
        with lock:
            have = expected <= set(seen)
        if have:
            done_at = time.monotonic()
            break
        time.sleep(0.1)
    time.sleep(SETTLE_SECONDS)
    return {"allVisibleSeconds": round(done_at - t0, 3) if done_at else None}


def run_transactions(run: RunningSystem, w, params: dict, say) -> dict:
    n = int(params.get("transactions", 200))
    plan = _plan(n, int(params.get("rollbackEvery", 10)), int(params.get("crashEvery", 20)))
    topic = f"lab-tx-{uuid.uuid4().hex[:6]}"
    seen: dict[str, list[float]] = {}
    lock = threading.Lock()
    if run.spec.system in ROCKETMQ:
        res = _rocketmq(run, topic, plan, seen, lock, say)
    else:
        res = _kafka(run, topic, plan, seen, lock, say)
    database = res.pop("database")
    visible = set(seen)
    crashed = [k for k, o in plan.items() if o == "crash"]
    return {
        "transactions": n,
        "transactionsPerSecond": round(n / res["produceSeconds"], 1) if res["produceSeconds"] else 0.0,
        # the consistency the pattern exists for: an event for every order the database kept, none for the others
        "committedMissing": len(database - visible),
        "rolledBackVisible": len(visible - database),
        "crashedTransactions": len(crashed),
        "crashedRecovered": sum(1 for k in crashed if k in visible),
        "duplicateDeliveries": sum(len(v) - 1 for v in seen.values()),
        "checkBacks": res["checkBacks"],
        "allVisibleSeconds": res["allVisibleSeconds"],
    }


DRIVERS["transactions"] = (run_transactions, ROCKETMQ + tuple(s for s in KAFKA if s != "kafka-log"))
