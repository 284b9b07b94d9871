"""Exercise transaction-checkback: fill in OrderTransactions (see task.md)."""
from rmq.client.transaction import LocalTransactionState, TransactionListener


class OrderTransactions(TransactionListener):
    def __init__(self, db):
        """db.insert(order_id, amount) writes the order; it may raise db.Timeout, after which you
        cannot tell whether the row was written. db.exists(order_id) -> bool; db.pending(order_id)
        -> bool (an insert of that order is still running)."""
        self.db = db

    def execute_local_transaction(self, msg, arg):
        """After the half message is stored. msg.keys is the order id; arg is {"amount": int}.
        An order with an amount <= 0 is invalid. Return a LocalTransactionState."""
        raise NotImplementedError

    def check_local_transaction(self, msg):
        """The broker asks about a half message whose outcome it does not know. msg.keys is the
        order id. Return a LocalTransactionState."""
        raise NotImplementedError
