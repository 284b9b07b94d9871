"""The message model both sides of the wire share (rocketmq-common's message package): Message,
MessageExt, MessageConst property names, MessageSysFlag, the msgId codec, properties encoding,
the SEND_BATCH_MESSAGE body codec and MessageDecoder for commitlog units (seeds 000, 001).

A unit is TOTALSIZE, MAGICCODE, BODYCRC ... PROPERTIES, big-endian, with IPv4/IPv6 host forms
chosen by SYSFLAG, exactly as CommitLog.DefaultAppendMessageCallback writes it (the store's write
side is rmq.store.unit) and as a PULL_MESSAGE response carries it to the client.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import socket
import struct
import types
import zlib

try:  # ISA-L's crc32 is the same CRC-32 as java.util.zip.CRC32, several times faster than zlib's
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _crc32 = zlib.crc32
from dataclasses import dataclass, field

from rmq import native

# Magic codes (CommitLog.MESSAGE_MAGIC_CODE / BLANK_MAGIC_CODE in RocketMQ 4.x).
MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x1 << 1
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysFlag (MessageSysFlag.getTransactionValue)."""
    return sys_flag & TRANSACTION_ROLLBACK_TYPE


# MessageConst property names a learner meets in RocketMQ's code.
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
KEY_SEPARATOR = " "

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# Fixed part of a unit with IPv4 hosts: 88 bytes up to and including BODY's length field.
UNIT_FIXED_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
UNIT_FIXED_PARTS = {}  # (born_v6, store_v6) -> Struct of the fixed part for those host forms
for _b6 in (False, True):
    for _s6 in (False, True):
        UNIT_FIXED_PARTS[(_b6, _s6)] = struct.Struct(
            ">iiiiiqqiq" + ("16si" if _b6 else "4si") + "q" + ("16si" if _s6 else "4si") + "iqi"
        )
_TOTAL_MAGIC = struct.Struct(">ii")
_INT = struct.Struct(">i")
SHORT = struct.Struct(">H")
# Offsets of QUEUEOFFSET / PHYSICALOFFSET / STORETIMESTAMP within a unit (IPv4 born host).
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
SYSFLAG_POS = 36
BORN_TIMESTAMP_POS = 40


def properties_to_bytes(props: dict[str, str] | None) -> bytes:
    """MessageDecoder.messageProperties2String: name\\x01value\\x02 for every entry."""
    if not props:
        return b""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode("utf-8")


def properties_from_bytes(data: bytes | memoryview) -> dict[str, str]:
    """MessageDecoder.string2messageProperties; tolerant of a missing trailing separator."""
    if not data:
        return {}
    text = bytes(data).decode("utf-8", errors="replace")
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[k] = v
    return out


def body_crc(body: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 masked to a non-negative int."""
    return _crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=4096)
def pack_host(host: tuple[str, int]) -> tuple[bytes, int, bool]:
    """(ip, port) -> (address bytes, port, is_v6)."""
    ip, port = host
    if ":" in ip:
        return socket.inet_pton(socket.AF_INET6, ip), port, True
    return socket.inet_aton(ip), port, False


def unpack_host(addr: bytes, port: int) -> tuple[str, int]:
    if len(addr) == 16:
        return socket.inet_ntop(socket.AF_INET6, addr), port
    return socket.inet_ntoa(addr), port


def create_message_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """MessageDecoder.createMessageId: store ip + port + commitlog offset as upper-case hex
    (16 bytes, 32 chars, for IPv4; 28 bytes for IPv6)."""
    addr, port, _ = pack_host(store_host)
    return (addr + struct.pack(">iq", port, commit_log_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """MessageDecoder.decodeMessageId: returns (store host, commitlog offset)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise ValueError(f"message id {msg_id!r} is not hexadecimal") from exc
    if len(raw) not in (16, 28):
        raise ValueError(f"message id {msg_id!r} must be 32 (IPv4) or 56 (IPv6) hex chars")
    ip_len = len(raw) - 12
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    return unpack_host(raw[:ip_len], port), offset


def calc_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """CommitLog.calMsgLength."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + body_len + 1 + topic_len + 2 + props_len


@dataclass(slots=True)
class Message:
    """What a producer hands the store (MessageExtBrokerInner): the broker fills hosts and queue.

    `properties` holds every property, TAGS and KEYS included, as RocketMQ does.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(slots=True)
class MessageExt:
    """A stored message as read back from the commitlog (MessageExt in RocketMQ)."""

    topic: str
    body: bytes
    queue_id: int
    flag: int
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body_crc: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: store host + physical offset."""
        return create_message_id(self.store_host, self.commit_log_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY length


def encode_batch_element(flag: int, body: bytes, props: bytes) -> bytes:
    """MessageDecoder.encodeMessage: one element of a SEND_BATCH_MESSAGE body (MAGICCODE and BODYCRC
    are 0: the broker computes the CRC when it stores the unit)."""
    return b"".join((_BATCH_HEAD.pack(22 + len(body) + len(props), 0, 0, flag, len(body)), body,
                     SHORT.pack(len(props)), props))


class BatchDecodeError(ValueError):
    """A SEND_BATCH_MESSAGE body that is not MessageDecoder.encodeMessages output."""


def decode_batch_body(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """MessageDecoder.decodeMessages: (flag, body, properties) for each message of a batch body, as
    encodeMessages writes them: TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, FLAG 4, BODY 4+n, PROPERTIES 2+n."""
    out = []
    mv = memoryview(body)
    n = len(mv)
    pos = 0
    while pos < n:
        if n - pos < _BATCH_HEAD.size + 2:
            raise BatchDecodeError(f"batch body truncated at byte {pos}: {n - pos} bytes left")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(mv, pos)
        if total < _BATCH_HEAD.size + 2 or total > n - pos:
            raise BatchDecodeError(f"batch message at byte {pos}: TOTALSIZE {total} does not fit the "
                                   f"{n - pos} bytes left")
        if body_len < 0 or _BATCH_HEAD.size + body_len + 2 > total:
            raise BatchDecodeError(f"batch message at byte {pos}: body length {body_len} exceeds TOTALSIZE {total}")
        p = pos + _BATCH_HEAD.size
        msg_body = mv[p:p + body_len].tobytes()
        p += body_len
        (props_len,) = SHORT.unpack_from(mv, p)
        p += 2
        if p + props_len != pos + total:
            raise BatchDecodeError(f"batch message at byte {pos}: properties length {props_len} does not "
                                   f"match TOTALSIZE {total}")
        out.append((flag, msg_body, properties_from_bytes(mv[p:p + props_len])))
        pos += total
    return out


class CorruptMessage(ValueError):
    """A unit that cannot be decoded: bad magic, size, CRC or truncated."""


def read_total_and_magic(buf, pos: int) -> tuple[int, int]:
    return _TOTAL_MAGIC.unpack_from(buf, pos)


def decode_message(buf, pos: int = 0, *, check_crc: bool = False, read_body: bool = True) -> MessageExt:
    """Decode one MESSAGE unit at `pos` (MessageDecoder.decode). Raises CorruptMessage."""
    avail = len(buf) - pos
    if avail < 8:
        raise CorruptMessage(f"truncated unit at {pos}: {avail} bytes left")
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptMessage(f"bad magic code {magic & 0xFFFFFFFF:#010x} at {pos}")
    if total < UNIT_FIXED_V4.size + 3 or total > avail:
        raise CorruptMessage(f"bad total size {total} at {pos} ({avail} bytes left)")
    sys_flag = _INT.unpack_from(buf, pos + SYSFLAG_POS)[0]
    fixed = UNIT_FIXED_PARTS[(bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))]
    if total < fixed.size + 3:
        raise CorruptMessage(f"bad total size {total} at {pos}")
    (_, _, crc, queue_id, flag, queue_offset, phy_offset, sys_flag, born_ts, born_addr, born_port,
     store_ts, store_addr, store_port, reconsume, prepared, body_len) = fixed.unpack_from(buf, pos)
    p = pos + fixed.size
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end:
        raise CorruptMessage(f"bad body length {body_len} at {pos}")
    body = bytes(buf[p:p + body_len]) if read_body else b""
    if check_crc:
        actual = _crc32(buf[p:p + body_len]) & 0x7FFFFFFF
        if actual != crc:
            raise CorruptMessage(f"body CRC mismatch at {pos}: stored {crc}, computed {actual}")
    p += body_len
    topic_len = buf[p]
    p += 1
    if p + topic_len + 2 > end:
        raise CorruptMessage(f"bad topic length {topic_len} at {pos}")
    topic = bytes(buf[p:p + topic_len]).decode("utf-8", errors="replace")
    p += topic_len
    props_len = SHORT.unpack_from(buf, p)[0]
    p += 2
    if p + props_len != end:
        raise CorruptMessage(f"unit at {pos}: lengths add to {p + props_len - pos}, TOTALSIZE says {total}")
    props = properties_from_bytes(buf[p:p + props_len])
    return MessageExt(
        topic=topic, body=body, queue_id=queue_id, flag=flag, properties=props, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=unpack_host(born_addr, born_port),
        store_timestamp=store_ts, store_host=unpack_host(store_addr, store_port),
        reconsume_times=reconsume, prepared_transaction_offset=prepared, queue_offset=queue_offset,
        commit_log_offset=phy_offset, store_size=total, body_crc=crc)


#: The first 17 fields of a class decode_units builds, in the order it passes them.
_DECODED_FIELDS = ("topic", "body", "queue_id", "flag", "properties", "sys_flag", "born_timestamp", "born_host",
                   "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
                   "queue_offset", "commit_log_offset", "store_size", "body_crc", "broker_name")
_layouts: dict[type, tuple | None] = {}


def _slot_layout(cls) -> tuple | None:
    """(member descriptors, defaults) of a slotted dataclass whose fields are _DECODED_FIELDS
    followed by fields with plain defaults, and whose __init__ only stores them: decode_units then
    fills its instances in place, as cls(...) would. None for any other class (cls is called)."""
    try:
        return _layouts[cls]
    except KeyError:
        pass
    layout = None
    fields = getattr(cls, "__dataclass_fields__", None)
    params = getattr(cls, "__dataclass_params__", None)
    init_code = getattr(getattr(cls, "__init__", None), "__code__", None)
    if (fields is not None and params is not None and params.init and "__slots__" in cls.__dict__
            and not hasattr(cls, "__post_init__") and getattr(cls, "__dictoffset__", 1) == 0
            and init_code is not None and init_code.co_filename == "<string>"):   # dataclasses' own __init__
        fs = [f for f in fields.values() if f._field_type is dataclasses._FIELD]   # noqa: SLF001
        names = tuple(f.name for f in fs)
        rest = fs[len(_DECODED_FIELDS):]
        if (names[:len(_DECODED_FIELDS)] == _DECODED_FIELDS and all(f.init for f in fs)
                and all(f.default is not dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                        and isinstance(f.default, (type(None), str, int, bool)) for f in rest)):
            descrs = tuple(inspect.getattr_static(cls, n, None) for n in names)
            if all(isinstance(d, types.MemberDescriptorType) for d in descrs):
                layout = (descrs, tuple(f.default for f in rest))
    _layouts[cls] = layout
    return layout


def decode_units_native(body, cls, broker_name: str, extra: tuple = ()) -> list | None:
    """Every unit of a PULL_MESSAGE body as cls(topic, body, ..., body_crc, broker_name) in one C
    call (rmq._native.decode_units), with the (name, value) pairs of `extra` added to each
    message's properties. None when the C extension is not loaded, or a unit is malformed or
    COMPRESSED: the caller then decodes with decode_message, the reference (which raises or
    inflates). A slotted dataclass such as rmq.client.message.MessageExt is filled in place
    (_slot_layout), without a Python __init__ call per message."""
    ext = native.ext
    if ext is None:
        return None
    return ext.decode_units(body, cls, broker_name, extra, _slot_layout(cls))


def store_timestamp_of(buf, pos: int) -> int:
    """The STORETIMESTAMP of the unit at `pos` (CommitLog.pickupStoreTimestamp)."""
    sys_flag = _INT.unpack_from(buf, pos + SYSFLAG_POS)[0]
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    return struct.unpack_from(">q", buf, pos + 48 + born)[0]
