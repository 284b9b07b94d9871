"""Hidden cases for commitlog-decode: units written by the store's own encoder."""
from __future__ import annotations

import socket

from labs.exercises.kit import expect
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


def offline(sol):
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
