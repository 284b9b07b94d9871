# treats a timed-out insert as done: the event of an order that was never written goes out
from rmq.client.transaction import LocalTransactionState as S, TransactionListener


class OrderTransactions(TransactionListener):
    def __init__(self, db):
        self.db = db

    def execute_local_transaction(self, msg, arg):
        if arg["amount"] <= 0:
            return S.ROLLBACK_MESSAGE
        try:
            self.db.insert(msg.keys, arg["amount"])
        except self.db.Timeout:
            return S.COMMIT_MESSAGE
        return S.COMMIT_MESSAGE

    def check_local_transaction(self, msg):
        if self.db.pending(msg.keys):
            return S.UNKNOW
        return S.COMMIT_MESSAGE if self.db.exists(msg.keys) else S.ROLLBACK_MESSAGE
