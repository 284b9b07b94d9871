# marks the payment as done before booking it: a booking that fails is never retried
import json
import threading


class PaymentConsumer:
    def __init__(self, ledger):
        self.ledger = ledger
        self.booked = set()
        self.lock = threading.Lock()

    def on_message(self, msg):
        with self.lock:
            if msg.keys in self.booked:
                return True
            self.booked.add(msg.keys)
        p = json.loads(msg.body)
        self.ledger.apply(p["account"], p["amount"])
        return True
