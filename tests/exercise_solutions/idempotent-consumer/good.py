import json
import threading


class PaymentConsumer:
    def __init__(self, ledger):
        self.ledger = ledger
        self.booked = set()
        self.lock = threading.Lock()

    def on_message(self, msg):
        with self.lock:                        # one booking per payment id at a time
            if msg.keys in self.booked:
                return True
            p = json.loads(msg.body)
            self.ledger.apply(p["account"], p["amount"])
            self.booked.add(msg.keys)          # recorded only after the booking succeeded
            return True
