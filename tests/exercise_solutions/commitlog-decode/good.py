import socket
import struct
import zlib

FIXED = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2   # 91: IPv4 hosts, empty fields


def _host(buf, p, v6):
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, buf[p:p + n])
    port = struct.unpack_from(">i", buf, p + n)[0]
    return (f"[{ip}]:{port}" if v6 else f"{ip}:{port}"), p + n + 4


def decode(buf, pos=0):
    d = {}
    if len(buf) - pos < 48:
        raise ValueError(f"only {len(buf) - pos} bytes at {pos}")
    (d["totalSize"], d["magicCode"], d["bodyCRC"], d["queueId"], d["flag"], d["queueOffset"],
     d["physicalOffset"], d["sysFlag"], d["bornTimestamp"]) = struct.unpack_from(">iiiiiqqiq", buf, pos)
    if d["magicCode"] != 0xdaa320a7 - 2**32:
        raise ValueError(f"magic code {d['magicCode'] & 0xffffffff:#x} is not a message's")
    end = pos + d["totalSize"]
    if d["totalSize"] < FIXED or end > len(buf):
        raise ValueError(f"totalSize {d['totalSize']} does not fit between {FIXED} and the {len(buf) - pos} bytes there")
    p = pos + 48
    d["bornHost"], p = _host(buf, p, d["sysFlag"] & 0x10)
    d["storeTimestamp"] = struct.unpack_from(">q", buf, p)[0]
    d["storeHost"], p = _host(buf, p + 8, d["sysFlag"] & 0x20)
    d["reconsumeTimes"], d["preparedTransactionOffset"], n = struct.unpack_from(">iqi", buf, p)
    p += 16
    if n < 0 or p + n > end:
        raise ValueError("the body runs past the unit")
    d["body"] = bytes(buf[p:p + n])
    if zlib.crc32(d["body"]) & 0x7FFFFFFF != d["bodyCRC"]:
        raise ValueError("bodyCRC does not match the body")
    p += n
    t = buf[p]
    if p + 1 + t + 2 > end:
        raise ValueError("the topic runs past the unit")
    d["topic"] = bytes(buf[p + 1:p + 1 + t]).decode()
    p += 1 + t
    n = struct.unpack_from(">h", buf, p)[0]
    if n < 0 or p + 2 + n != end:
        raise ValueError("the properties do not end where totalSize says")
    raw = bytes(buf[p + 2:p + 2 + n]).decode()
    d["properties"] = dict(kv.split("\x01", 1) for kv in raw.split("\x02") if kv)
    return d
