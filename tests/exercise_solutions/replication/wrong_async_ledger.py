# the ledger on an ASYNC_MASTER (the default): SEND_OK before the slave has the message
LEDGER = {"brokerRole": "ASYNC_MASTER", "flushDiskType": "SYNC_FLUSH"}
FEED = {"brokerRole": "ASYNC_MASTER"}


def on_slave(broker_role, send_status):
    return send_status == "SEND_OK"
