"""MessageClientIDSetter: the client-side message id (UNIQ_KEY property) every sent message
carries (SPEC §1 "msgId (client)").

Layout, 16 bytes shown as 32 upper-case hex characters:
``ip (4) | pid low 16 bits (2) | classloader hash (4) | ms since the start of this month (4) |
counter (2)``.  The first 10 bytes are fixed per process (FIX_STRING); the last 6 change per id.
Python has no class loader, so a random 32-bit value chosen once per process stands in for
``MessageClientIDSetter.class.getClassLoader().hashCode()``.
"""
from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import struct
import threading
import time

from rmq.common.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

__all__ = ["create_uniq_id", "set_uniq_id", "get_uniq_id", "fix_string", "local_ip",
           "ip_from_id", "nearly_time_from_id", "pid_from_id", "build_fix_bytes"]

_PREFIX = struct.Struct(">4sHi")     # ip, pid (low 16 bits), classloader hash
_SUFFIX = struct.Struct(">iH")       # ms since month start (int, wraps), counter (short, wraps)


def local_ip() -> str:
    """The host's primary IPv4 address (RemotingUtil.getLocalAddress), 127.0.0.1 if none.

    A UDP socket "connected" to a public address reveals the outgoing interface without
    sending anything."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def build_fix_bytes(ip: str, pid: int, loader_hash: int) -> bytes:
    """The 10 fixed bytes: ip, low 16 bits of pid, 32-bit class loader hash."""
    try:
        ip_bytes = socket.inet_aton(ip)
    except OSError:
        # createFakeIP: the low 4 bytes of the current time in ms.
        ip_bytes = struct.pack(">q", int(time.time() * 1000))[4:]
    return _PREFIX.pack(ip_bytes, pid & 0xFFFF, _to_int32(loader_hash))


def _to_int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def _month_bounds(now_ms: int) -> tuple[int, int]:
    """(start of this month, start of next month) in epoch ms, local time like Calendar."""
    now = _dt.datetime.fromtimestamp(now_ms / 1000.0)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start.replace(year=start.year + 1, month=1) if start.month == 12
           else start.replace(month=start.month + 1))
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class _IdState:
    def __init__(self) -> None:
        self.fix = build_fix_bytes(local_ip(), os.getpid(), random.getrandbits(32))
        self.fix_hex = self.fix.hex().upper()
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.start, self.next_start = _month_bounds(int(time.time() * 1000))


_state = _IdState()


def fix_string() -> str:
    """FIX_STRING: the 20 hex characters every id of this process starts with."""
    return _state.fix_hex


def create_uniq_id(now_ms: int | None = None) -> str:
    """MessageClientIDSetter.createUniqID: a new 32-character upper-case hex id."""
    st = _state
    current = int(time.time() * 1000) if now_ms is None else now_ms
    if current >= st.next_start:
        with st.lock:
            if current >= st.next_start:
                st.start, st.next_start = _month_bounds(current)
    span = _to_int32(current - st.start)
    suffix = _SUFFIX.pack(span, next(st.counter) & 0xFFFF)
    return st.fix_hex + suffix.hex().upper()


def set_uniq_id(properties: dict[str, str]) -> str:
    """Put a UNIQ_KEY into ``properties`` unless one is there; return the message's id."""
    uid = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uid is None:
        uid = create_uniq_id()
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uid
    return uid


def get_uniq_id(properties: dict[str, str]) -> str | None:
    return properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


def ip_from_id(msg_id: str) -> str:
    """MessageClientIDSetter.getIPStrFromID: the dotted IPv4 in the first 4 bytes."""
    return socket.inet_ntoa(bytes.fromhex(msg_id)[:4])


def pid_from_id(msg_id: str) -> int:
    """The low 16 bits of the producing process id (bytes 4..5)."""
    return struct.unpack_from(">H", bytes.fromhex(msg_id), 4)[0]


def nearly_time_from_id(msg_id: str, now_ms: int | None = None) -> int:
    """MessageClientIDSetter.getNearlyTimeFromID: approximate creation time in epoch ms.

    The id stores ms since the start of the month it was made in; if that lands in the
    future relative to this month, the id is from last month."""
    span = struct.unpack_from(">I", bytes.fromhex(msg_id), 10)[0]
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start, _ = _month_bounds(now)
    if start + span > now:   # Java uses >=, which misreads an id made in the same ms
        prev = _dt.datetime.fromtimestamp(start / 1000.0)
        prev = (prev.replace(year=prev.year - 1, month=12) if prev.month == 1
                else prev.replace(month=prev.month - 1))
        start = int(prev.timestamp() * 1000)
    return start + span
