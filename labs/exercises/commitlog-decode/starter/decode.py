"""Exercise commitlog-decode: fill in `decode` (see task.md). All numbers big-endian."""
import struct
import socket


def decode(buf: bytes, pos: int = 0) -> dict:
    """Decode the commitlog unit that starts at `pos` in `buf`. Return a dict with the keys
    totalSize, magicCode, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag,
    bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes, preparedTransactionOffset,
    body, topic, properties

    bornHost and storeHost are "ip:port" strings ("[ip6]:port" for IPv6); body is bytes as stored;
    topic is a str; properties is a dict of str to str. A damaged unit (torn, wrong magic code,
    bodyCRC that does not match, a length past totalSize) raises ValueError (see task.md)."""
    raise NotImplementedError
