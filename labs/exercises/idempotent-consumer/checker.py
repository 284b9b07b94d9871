"""Hidden cases for idempotent-consumer, then the class as a live push consumer's listener."""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass

from labs.exercises.kit import Once, expect, rule


class Ledger:
    def __init__(self, fail_ids=(), slow: float = 0.0):
        self.lock = threading.Lock()
        self.balances: dict[str, int] = {}
        self.bookings = 0
        self.fail_once = set(fail_ids)
        self.slow = slow
        self.local = threading.local()       # the payment id being delivered in this thread

    def deliver(self, consumer, m) -> bool:
        self.local.current = m.keys
        try:
            return bool(consumer.on_message(m))
        except Exception:
            return False

    def apply(self, account: str, amount: int) -> None:
        if self.slow:
            time.sleep(self.slow)          # a booking takes a while: room for a race
        with self.lock:
            current = getattr(self.local, "current", None)
            if current in self.fail_once:
                self.fail_once.discard(current)
                raise RuntimeError("ledger unavailable, try again")
            self.balances[account] = self.balances.get(account, 0) + amount
            self.bookings += 1


@dataclass
class Msg:
    keys: str
    msg_id: str
    body: bytes


def _msg(pid, account, amount, msg_id=None):
    return Msg(pid, msg_id or uuid.uuid4().hex.upper(), json.dumps({"account": account, "amount": amount}).encode())


def _deliver(consumer, ledger, m):
    return ledger.deliver(consumer, m)


def offline(sol):
    def same_message_twice():
        led = Ledger()
        c = sol.PaymentConsumer(led)
        m = _msg("pay-1", "alice", 30)
        r = [_deliver(c, led, m), _deliver(c, led, m)]
        return expect((led.balances, r), ({"alice": 30}, [True, True]),
                      "book once; the second delivery is acknowledged (True) without booking")
    yield "the same message delivered twice", same_message_twice

    def resent_by_producer():
        led = Ledger()
        c = sol.PaymentConsumer(led)
        _deliver(c, led, _msg("pay-2", "bob", 50))
        _deliver(c, led, _msg("pay-2", "bob", 50))        # a new msg_id: the producer sent it again
        return expect(led.balances, {"bob": 50}, "deduplicate on the payment id (msg.keys), not on msg_id")
    yield "a payment the producer sent twice (new msg_id, same key)", resent_by_producer

    def different_payments():
        led = Ledger()
        c = sol.PaymentConsumer(led)
        for i in range(5):
            _deliver(c, led, _msg(f"pay-x{i}", "carol", 10))
        return expect(led.balances, {"carol": 50}, "different payment ids are all booked")
    yield "five different payments to one account", different_payments

    def failure_then_retry():
        led = Ledger(fail_ids={"pay-3"})
        c = sol.PaymentConsumer(led)
        m = _msg("pay-3", "dave", 70)
        first = _deliver(c, led, m)
        second = _deliver(c, led, m)
        return expect((first, second, led.balances), (False, True, {"dave": 70}),
                      "a failed booking returns False (or raises) and is booked when it comes back")
    yield "the ledger fails once, the message comes back", failure_then_retry

    def concurrent():
        led = Ledger(slow=0.05)
        c = sol.PaymentConsumer(led)
        m = _msg("pay-4", "erin", 25)
        ths = [threading.Thread(target=_deliver, args=(c, led, m)) for _ in range(4)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(10)
        return expect(led.balances, {"erin": 25}, "two threads with the same payment must not both book it "
                                                  "(hold a lock, or claim the key atomically before booking)")
    yield "four threads deliver the same payment at once", concurrent


def broker_config(sol):
    return {"messageDelayLevel": " ".join(["1s"] * 18)}


def live(sol, broker):
    run = Once(lambda: _live_run(sol, broker))
    n = 30

    def acknowledged():
        done = run()[0]
        return rule(len(done) == n, f"{n} payments done", f"{len(done)} done")
    yield "live: every payment acknowledged (failed bookings came back through %RETRY%)", acknowledged

    def balances():
        _done, led, want = run()
        return expect(dict(sorted(led.balances.items())), dict(sorted(want.items())))
    yield "live: balances equal the payments made (no double booking, none lost)", balances


def _live_run(sol, broker):
    from rmq.client.message import ConsumeStatus, Message
    from rmq.client.producer import Producer
    from rmq.client.push_consumer import PushConsumer
    topic, group = f"Pay{uuid.uuid4().hex[:6]}", f"cg_pay_{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 4)
    payments = [(f"p{i}", f"acct-{i % 3}", 10 + i) for i in range(30)]
    failing = {f"p{i}" for i in range(0, 30, 7)}
    led = Ledger(fail_ids=failing)
    student = sol.PaymentConsumer(led)
    done: set[str] = set()
    lock = threading.Lock()

    def listener(msgs, ctx):
        for m in msgs:
            if not led.deliver(student, Msg(m.keys, m.msg_id, m.body)):
                return ConsumeStatus.RECONSUME_LATER
            with lock:
                done.add(m.keys)
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, namesrv=[broker.namesrv], consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     consume_thread_nums=4)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    try:
        p = Producer(f"pg_pay_{uuid.uuid4().hex[:6]}", namesrv=[broker.namesrv])
        p.start()
        for pid, acct, amount in payments:
            body = json.dumps({"account": acct, "amount": amount})
            p.send(Message(topic, body, keys=pid))
            if int(pid[1:]) % 4 == 0:                       # the producer timed out and sent it again
                p.send(Message(topic, body, keys=pid))
        p.shutdown()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(done) >= len(payments):
                    break
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        c.shutdown()
    want: dict[str, int] = {}
    for _pid, acct, amount in payments:
        want[acct] = want.get(acct, 0) + amount
    return done, led, want
