"""Hidden cases for commitlog-decode: units written by the store's own encoder, and damaged ones
(a torn tail, a wrong magic code, a body whose CRC no longer matches, a length that overruns its
unit) that a decoder must refuse with ValueError instead of returning made-up fields."""
from __future__ import annotations

import socket
import struct

from labs.exercises.kit import expect, rule
from rmq.common.message import Message, decode_message
from rmq.store.unit import PreparedMessage


def _host(h):
    ip, port = h
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _expected(buf, pos):
    m = decode_message(buf, pos)
    return {"totalSize": m.store_size, "magicCode": 0xdaa320a7 - 2**32, "bodyCRC": m.body_crc, "queueId": m.queue_id,
            "flag": m.flag, "queueOffset": m.queue_offset, "physicalOffset": m.commit_log_offset,
            "sysFlag": m.sys_flag, "bornTimestamp": m.born_timestamp, "bornHost": _host(m.born_host),
            "storeTimestamp": m.store_timestamp, "storeHost": _host(m.store_host),
            "reconsumeTimes": m.reconsume_times, "preparedTransactionOffset": m.prepared_transaction_offset,
            "body": m.body, "topic": m.topic, "properties": m.properties}


def _unit(msg, store, queue_offset, phy):
    ip, port = store
    v6 = ":" in ip
    addr = socket.inet_pton(socket.AF_INET6 if v6 else socket.AF_INET, ip)
    return PreparedMessage(msg, v6).encode(queue_offset, phy, 1_732_000_000_123, addr, port)


MESSAGES = [
    ("plain", Message("TopicTest", b"Hello RocketMQ", queue_id=3, properties={"TAGS": "TagA", "KEYS": "order-1"},
                      born_timestamp=1_732_000_000_000, born_host=("10.0.0.7", 51000)), ("192.168.1.5", 10911), 0, 0),
    ("empty body, no properties", Message("T", b"", born_host=("127.0.0.1", 1)), ("127.0.0.1", 10911), 5, 4096),
    ("binary body, big offsets, flag and reconsumeTimes",
     Message("%RETRY%cg_orders", bytes(range(256)) * 3, queue_id=0, flag=7, reconsume_times=3,
             properties={"REAL_TOPIC": "Orders", "DELAY": "3"}, born_timestamp=1, born_host=("172.16.0.9", 65535)),
     ("10.1.2.3", 10911), 2**40 + 17, 2**45 + 1024),
    ("a Chinese topic and property", Message("订单主题", "支付成功".encode(), properties={"TAGS": "已支付", "区域": "华东"},
                                             born_host=("10.0.0.1", 40000)), ("10.0.0.2", 10911), 9, 77),
    ("IPv6 born and store hosts", Message("T6", b"v6", born_host=("fe80::1", 4242)), ("2001:db8::5", 10911), 1, 2),
]


def _units(sol):
    buf = b""
    starts = []
    for title, msg, store, qo, phy in MESSAGES:
        starts.append((title, len(buf)))
        buf += _unit(msg, store, qo, phy)
    whole = bytes(buf)
    for title, pos in starts:
        want = _expected(whole, pos)
        for key in ("totalSize", "queueId", "queueOffset", "physicalOffset", "sysFlag", "bornHost", "storeHost",
                    "body", "topic", "properties"):
            yield (f"{title} (at position {pos}): {key}",
                   lambda pos=pos, key=key, want=want: expect((sol.decode(whole, pos) or {}).get(key), want[key]))
        yield (f"{title}: every field", lambda pos=pos, want=want: expect(
            {k: v for k, v in (sol.decode(whole, pos) or {}).items() if k in want and k != "magicCode"},
            {k: v for k, v in want.items() if k != "magicCode"}))


def _refused(fn) -> object:
    """A case that passes when fn() raises ValueError."""
    try:
        got = fn()
    except ValueError as exc:
        return rule(True, "ValueError", f"ValueError: {exc}")
    except Exception as exc:  # noqa: BLE001 - any other error is the student's decoder failing differently
        return rule(False, "ValueError (a damaged unit is refused)", f"{type(exc).__name__}: {exc}",
                    "check the unit before reading it and raise ValueError, not another error")
    return rule(False, "ValueError (a damaged unit is refused)", got,
                "a decoder without checks returns fields read from damaged bytes: validate totalSize, magicCode, "
                "bodyCRC and the lengths")


def _damaged():
    """(title, buffer, pos) of units a store could meet after a crash or a bad write."""
    title, msg, store, qo, phy = MESSAGES[0]
    unit = bytes(_unit(msg, store, qo, phy))
    head = bytes(_unit(*MESSAGES[1][1:]))                    # a good unit first, so pos is not 0
    pos = len(head)
    body_at = unit.index(b"Hello RocketMQ")
    topic_len_at = body_at + len(b"Hello RocketMQ")         # the topic's 1-byte length follows the body
    out = [("a torn tail: the buffer ends inside the unit", head + unit[:len(unit) // 2], pos)]
    bad = bytearray(unit)
    struct.pack_into(">I", bad, 4, 0xcbd43194)              # BLANK_MAGIC_CODE: the end-of-file filler, not a message
    out.append(("the end-of-file blank magic code instead of a message's", head + bytes(bad), pos))
    bad = bytearray(unit)
    bad[body_at] ^= 0x20                                     # one bit of the body flipped on disk
    out.append(("a body whose bodyCRC no longer matches", head + bytes(bad), pos))
    bad = bytearray(unit)
    bad[topic_len_at] = 0xff                                 # a topic length running past totalSize
    out.append(("a topic length that runs past the unit's totalSize", head + bytes(bad) + bytes(300), pos))
    bad = bytearray(unit)
    struct.pack_into(">i", bad, 0, 20)                       # a totalSize smaller than the fixed fields
    out.append(("a totalSize smaller than the fixed fields", head + bytes(bad), pos))
    bad = bytearray(unit)
    struct.pack_into(">I", bad, 4, 0x12345678)               # neither a message's nor the blank's magic code
    out.append(("a magic code that is neither a message's nor the blank's", head + bytes(bad), pos))
    bad = bytearray(unit)
    struct.pack_into(">i", bad, body_at - 4, len(unit))      # a bodyLength running past the unit's end
    out.append(("a bodyLength that runs past the unit's totalSize", head + bytes(bad) + bytes(len(unit)), pos))
    out.append(("zeros: the preallocated rest of a mapped file, after its last unit", head + bytes(4096), pos))
    big = bytearray(unit)
    struct.pack_into(">i", big, 0, 1 << 30)                  # a totalSize past the end of the file
    out.append(("a totalSize that points past the end of the file", head + bytes(big), pos))
    return out


def offline(sol):
    """The store's own units, then the damaged ones."""
    yield from _units(sol)
    for title, buf, pos in _damaged():
        yield (f"damaged: {title} (at position {pos})", lambda buf=buf, pos=pos: _refused(lambda: sol.decode(buf, pos)))
