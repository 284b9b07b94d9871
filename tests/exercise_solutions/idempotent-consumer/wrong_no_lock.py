# checks and books without a lock: two threads with the same payment both book it
import json


class PaymentConsumer:
    def __init__(self, ledger):
        self.ledger = ledger
        self.booked = set()

    def on_message(self, msg):
        if msg.keys in self.booked:
            return True
        p = json.loads(msg.body)
        self.ledger.apply(p["account"], p["amount"])
        self.booked.add(msg.keys)
        return True
