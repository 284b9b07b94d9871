# decodes every field right but checks nothing: damaged units come back as made-up fields
import socket
import struct


def _host(buf, p, v6):
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, buf[p:p + n])
    port = struct.unpack_from(">i", buf, p + n)[0]
    return (f"[{ip}]:{port}" if v6 else f"{ip}:{port}"), p + n + 4


def decode(buf, pos=0):
    d = {}
    (d["totalSize"], d["magicCode"], d["bodyCRC"], d["queueId"], d["flag"], d["queueOffset"],
     d["physicalOffset"], d["sysFlag"], d["bornTimestamp"]) = struct.unpack_from(">iiiiiqqiq", buf, pos)
    p = pos + 48
    d["bornHost"], p = _host(buf, p, d["sysFlag"] & 0x10)
    d["storeTimestamp"] = struct.unpack_from(">q", buf, p)[0]
    d["storeHost"], p = _host(buf, p + 8, d["sysFlag"] & 0x20)
    d["reconsumeTimes"], d["preparedTransactionOffset"], n = struct.unpack_from(">iqi", buf, p)
    p += 16
    d["body"] = bytes(buf[p:p + n])
    p += n
    t = buf[p]
    d["topic"] = bytes(buf[p + 1:p + 1 + t]).decode()
    p += 1 + t
    n = struct.unpack_from(">h", buf, p)[0]
    raw = bytes(buf[p + 2:p + 2 + n]).decode()
    d["properties"] = dict(kv.split("\x01", 1) for kv in raw.split("\x02") if kv)
    return d
