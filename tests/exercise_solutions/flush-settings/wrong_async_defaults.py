# payments on asynchronous flush; clicks on the defaults, whose thorough flush comes every 10 s
PAYMENTS = {"flushDiskType": "ASYNC_FLUSH"}
CLICKS = {"flushDiskType": "ASYNC_FLUSH"}
