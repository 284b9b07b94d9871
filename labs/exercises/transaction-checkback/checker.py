"""Hidden cases for transaction-checkback, then the listener in a live transactional producer."""
from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace

from labs.exercises.kit import Once, expect, rule


class Timeout(Exception):
    pass


class OrdersDB:
    """The service's database: some inserts time out (written or not), some are still running."""
    Timeout = Timeout

    def __init__(self, timeout_written=(), timeout_lost=(), pending=()):
        self.lock = threading.Lock()
        self.rows: dict[str, int] = {}
        self.timeout_written, self.timeout_lost = set(timeout_written), set(timeout_lost)
        self.pending_ids = set(pending)
        self.pending_until: dict[str, float] = {}

    def insert(self, order_id, amount):
        with self.lock:
            if order_id in self.timeout_written:
                self.rows[order_id] = amount
                raise Timeout(f"insert {order_id}: no answer (the row was written)")
            if order_id in self.timeout_lost:
                raise Timeout(f"insert {order_id}: no answer (the row was not written)")
            self.rows[order_id] = amount

    def exists(self, order_id):
        with self.lock:
            return order_id in self.rows

    def pending(self, order_id):
        with self.lock:
            until = self.pending_until.get(order_id)
            if order_id in self.pending_ids and (until is None or time.monotonic() < until):
                return True
            return False


def _state(v):
    name = getattr(v, "name", None) or getattr(v, "value", None) or v
    return str(name).split(".")[-1]


def _msg(order_id):
    return SimpleNamespace(keys=order_id, body=b"order", topic="Orders", properties={"KEYS": order_id})


def offline(sol):
    def ex(order_id, amount, db):
        return _state(sol.OrderTransactions(db).execute_local_transaction(_msg(order_id), {"amount": amount}))

    yield "execute: a valid order is inserted and committed", lambda: (
        lambda db: expect((ex("o1", 30, db), db.exists("o1")), ("COMMIT_MESSAGE", True)))(OrdersDB())
    yield "execute: an invalid order (amount 0) is rolled back and not inserted", lambda: (
        lambda db: expect((ex("o2", 0, db), db.exists("o2")), ("ROLLBACK_MESSAGE", False)))(OrdersDB())
    yield "execute: the insert timed out (row written): the outcome is unknown", lambda: expect(
        ex("o3", 10, OrdersDB(timeout_written={"o3"})), "UNKNOW",
        "after db.Timeout you cannot know: answer UNKNOW and let the check-back look")
    yield "execute: the insert timed out (row not written): the outcome is unknown", lambda: expect(
        ex("o4", 10, OrdersDB(timeout_lost={"o4"})), "UNKNOW")

    def chk(order_id, db):
        return _state(sol.OrderTransactions(db).check_local_transaction(_msg(order_id)))
    db = OrdersDB()
    db.rows["o5"] = 10
    yield "check: the order is in the database", lambda: expect(chk("o5", db), "COMMIT_MESSAGE")
    yield "check: the order is not in the database (and no insert is running)", lambda: expect(
        chk("o6", OrdersDB()), "ROLLBACK_MESSAGE", "no row and nothing running: it will never exist, roll back")
    yield "check: the insert is still running", lambda: expect(
        chk("o7", OrdersDB(pending={"o7"})), "UNKNOW", "do not guess while db.pending(order_id): answer UNKNOW")


def broker_config(sol):
    return {"transactionTimeout": 1000, "transactionCheckInterval": 1000}


def live(sol, broker):
    run = Once(lambda: _live_run(sol, broker))

    def exactly():
        seen, db = run()
        return expect(sorted(seen, key=lambda k: int(k[1:])), sorted(db.rows, key=lambda k: int(k[1:])),
                      "commit what was written, roll back what was not, and wait (UNKNOW) while you cannot tell")
    yield "live: consumers see exactly the orders the database holds", exactly

    def checked_back():
        seen, _db = run()
        return rule({"o3", "o9", "o11"} <= seen, "o3, o9 and o11 delivered",
                    f"delivered of them: {sorted({'o3', 'o9', 'o11'} & seen)}")
    yield "live: the timed-out orders that were written reached the consumers through check-back", checked_back


def _live_run(sol, broker):
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.push_consumer import PushConsumer
    from rmq.client.transaction import TransactionProducer
    topic = f"Orders{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 2)
    orders = {f"o{i}": (0 if i % 5 == 0 else 10 + i) for i in range(1, 21)}
    db = OrdersDB(timeout_written={"o3", "o9"}, timeout_lost={"o7", "o13"}, pending={"o11"})
    db.timeout_written.add("o11")                # o11: written, but its insert stays "running" for 2.5 s
    db.pending_until["o11"] = time.monotonic() + 2.5
    seen: set[str] = set()
    lock = threading.Lock()
    c = PushConsumer(f"cg_orders_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv],
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET")

    def listener(msgs, ctx):
        with lock:
            seen.update(m.keys for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    p = TransactionProducer(f"pg_orders_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv],
                            transaction_listener=sol.OrderTransactions(db))
    p.start()
    try:
        for oid, amount in orders.items():
            p.send_message_in_transaction(Message(topic, f"order {oid}", keys=oid), arg={"amount": amount})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if seen >= set(db.rows):
                    break
            time.sleep(0.2)
        time.sleep(2.5)                # two more check rounds: anything wrongly committed shows up
    finally:
        p.shutdown()
        c.shutdown()
    return seen, db
