# deduplicates on msg_id: a payment the producer sent twice is booked twice
import json
import threading


class PaymentConsumer:
    def __init__(self, ledger):
        self.ledger = ledger
        self.seen = set()
        self.lock = threading.Lock()

    def on_message(self, msg):
        with self.lock:
            if msg.msg_id in self.seen:
                return True
            p = json.loads(msg.body)
            self.ledger.apply(p["account"], p["amount"])
            self.seen.add(msg.msg_id)
            return True
