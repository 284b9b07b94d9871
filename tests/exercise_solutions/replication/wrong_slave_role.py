# "the feed should not wait for anyone": a SLAVE role, which refuses sends
LEDGER = {"brokerRole": "SYNC_MASTER"}
FEED = {"brokerRole": "SLAVE"}


def on_slave(broker_role, send_status):
    return broker_role == "SYNC_MASTER" and send_status == "SEND_OK"
