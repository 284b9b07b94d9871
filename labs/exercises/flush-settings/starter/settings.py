"""Exercise flush-settings: broker config keys for two requirements (see task.md).

Each is a dict of broker.yaml keys, as `rmq up --config` reads them, e.g. {"flushDiskType": "..."}.
Keys you leave out keep RocketMQ's defaults."""

# A payments broker: a message the broker has acknowledged must already be on disk, so that not
# even a power cut of the broker's machine can lose it.
PAYMENTS = {}

# A clickstream broker: acknowledgements must not wait for the disk (throughput first), but after
# the producers stop, at most about one second may pass before everything acknowledged is on disk.
CLICKS = {}
