"""Exercise replication: master settings for two requirements, and what a send's status promises
(see task.md).

LEDGER and FEED are dicts of broker.yaml keys for the master, as `rmq broker -c` reads them, e.g.
{"brokerRole": "..."}. The checker adds the rest (brokerName, brokerId 0, ports, the slave)."""

# A ledger: a message the master has answered SEND_OK must already be on the slave too, so that losing
# the master's machine (disk and all) loses no acknowledged entry.
LEDGER = {}

# A live feed: the answer must not wait for the slave (latency first); losing the last few messages
# with the master is acceptable.
FEED = {}


def on_slave(broker_role: str, send_status: str) -> bool:
    """Is a message certainly on the slave when its send's answer arrives?

    broker_role: the master's brokerRole ("SYNC_MASTER" or "ASYNC_MASTER");
    send_status: the SendResult's status ("SEND_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE").
    True only when the answer itself proves that the slave has the message."""
    raise NotImplementedError("fill in on_slave")
