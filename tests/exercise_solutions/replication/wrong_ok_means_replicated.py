# the roles are right, but SEND_OK is taken to mean "on the slave" whatever the master's role
LEDGER = {"brokerRole": "SYNC_MASTER"}
FEED = {"brokerRole": "ASYNC_MASTER"}


def on_slave(broker_role, send_status):
    return send_status == "SEND_OK"
