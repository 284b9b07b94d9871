LEDGER = {"brokerRole": "SYNC_MASTER"}
FEED = {"brokerRole": "ASYNC_MASTER"}


def on_slave(broker_role, send_status):
    return broker_role == "SYNC_MASTER" and send_status == "SEND_OK"
