"""Exercise idempotent-consumer: fill in PaymentConsumer (see task.md)."""
import json
import threading


class PaymentConsumer:
    def __init__(self, ledger):
        """ledger.apply(account, amount) books a payment (it may raise: then nothing was booked)."""
        self.ledger = ledger

    def on_message(self, msg) -> bool:
        """Called for every delivery, possibly from several threads at once.

        msg.keys:   the payment id (the business key, the same when the producer re-sends)
        msg.msg_id: the id of this stored message (a re-sent payment gets a new one)
        msg.body:   JSON bytes {"account": str, "amount": int}

        Book each payment id exactly once. Return True when the payment is booked (or was booked
        before); return False (or raise) when it could not be booked, so it is delivered again."""
        raise NotImplementedError
