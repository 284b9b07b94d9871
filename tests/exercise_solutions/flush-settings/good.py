PAYMENTS = {"flushDiskType": "SYNC_FLUSH"}
CLICKS = {"flushDiskType": "ASYNC_FLUSH", "flushCommitLogThoroughInterval": 1000}
