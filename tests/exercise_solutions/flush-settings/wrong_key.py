# a key RocketMQ does not have (the flush type key is flushDiskType)
PAYMENTS = {"flushType": "SYNC_FLUSH"}
CLICKS = {"flushDiskType": "ASYNC_FLUSH", "flushCommitLogLeastPages": 0}
