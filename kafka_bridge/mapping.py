"""How a Kafka record and a RocketMQ message map onto each other (SPEC §11, docs/kafka-mapping.md).

Produce: one Kafka record -> one ordinary commitlog unit. key -> KEYS (indexed), value -> body,
headers -> user properties, record timestamp -> BORNTIMESTAMP, reserved headers set RocketMQ
features (rocketmq.tags -> TAGS, rocketmq.keys -> more KEYS, rocketmq.delay -> DELAY level).
Fetch: stored units (from either protocol) -> records of one RecordBatch; TAGS is exposed as the
header rocketmq.tags. What a property cannot hold exactly (non-UTF-8 bytes, null values,
separators, repeated header names, names of system properties) travels base64-encoded in one
reserved property, so Kafka -> store -> Kafka is lossless, header order included.
"""
from __future__ import annotations

import base64
import struct
import zlib

from rmq import native
from rmq.common.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    MESSAGE_MAGIC_CODE,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    Message,
    pack_host,
)
from rmq.store.message_store import QueueUnitsView
from rmq.store.unit import EncodedUnits

from .records import RecordBatch
from .records.batch import CONTROL_MASK, TRANSACTIONAL_MASK

HDR_TAGS = "rocketmq.tags"
HDR_KEYS = "rocketmq.keys"
HDR_DELAY = "rocketmq.delay"
RESERVED_HEADERS = (HDR_TAGS, HDR_KEYS, HDR_DELAY)

PROP_KEY_B64 = "KAFKA_KEY_B64"          # the record key when KEYS cannot hold it exactly
PROP_NULL_VALUE = "KAFKA_NULL_VALUE"    # "1" when the record value was null
PROP_HEADERS_B64 = "KAFKA_HEADERS_B64"  # headers a property cannot hold, base64 of a length-prefixed list
PROP_ENVELOPE = "KAFKA_ENVELOPE"        # "<key length>,<headers length>": key and headers lead the body

# A unit's properties are at most Short.MAX_VALUE bytes (RocketMQ's 2-byte PROPERTIES length).
# A record whose key and headers would not fit (a 100 KB key, thousands of headers) keeps them in
# the body instead, ahead of the value: the "envelope". The store adds its own properties to a
# Kafka record (none today, WAIT or UNIQ_KEY tomorrow), hence the margin.
PROPERTIES_MAX = 32767
PROPERTIES_BUDGET = PROPERTIES_MAX - 1024
KEY_DIGEST_PREFIX = "sha256:"           # KEYS of an enveloped key: its digest, so the index finds it

# MessageConst.STRING_HASH_SET: properties RocketMQ reserves; never taken from Kafka header names,
# never shown to Kafka consumers as headers (TAGS is shown as rocketmq.tags).
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MESSAGE_TYPE", "SHARDING_KEY", "__STARTDELIVERTIME",
    PROP_KEY_B64, PROP_NULL_VALUE, PROP_HEADERS_B64, PROP_ENVELOPE,
    # Kafka transaction bookkeeping (kafka_bridge.txn)
    "KAFKA_PID", "KAFKA_EPOCH", "KAFKA_TXN_ID",
})

_LEN = struct.Struct(">i")


class MappingError(ValueError):
    """A reserved header with a value the broker cannot use (e.g. a bad delay level)."""


def _clean_text(b) -> str | None:
    """bytes -> str when it is UTF-8 without the property separators \\x01 \\x02."""
    try:
        s = bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x01" in s or "\x02" in s:
        return None
    return s


_ALL_HEADERS = _LEN.pack(-2)  # leads a KAFKA_HEADERS_B64 that holds every header, in order


def _pack_headers(headers: list[tuple[str, bytes | None]], every: bool = False) -> str:
    """every=True: the list is all of the record's headers (the user properties are copies)."""
    parts = [_ALL_HEADERS] if every else []
    for name, value in headers:
        nb = name.encode("utf-8")
        parts.append(_LEN.pack(len(nb)) + nb)
        parts.append(_LEN.pack(-1) if value is None else _LEN.pack(len(value)) + bytes(value))
    return base64.b64encode(b"".join(parts)).decode("ascii")


def _unpack_headers(text: str) -> tuple[list[tuple[str, bytes | None]], bool]:
    """(headers, True when they are every header of the record) from KAFKA_HEADERS_B64."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        return [], False
    every = raw[:4] == _ALL_HEADERS
    out, p, n = [], 4 if every else 0, len(raw)
    while p + 4 <= n:
        (ln,) = _LEN.unpack_from(raw, p)
        p += 4
        if ln < 0 or p + ln > n:
            break
        name = raw[p:p + ln].decode("utf-8", errors="replace")
        p += ln
        if p + 4 > n:
            break
        (vl,) = _LEN.unpack_from(raw, p)
        p += 4
        if vl < 0:
            out.append((name, None))
            continue
        if p + vl > n:
            break
        out.append((name, raw[p:p + vl]))
        p += vl
    return out, every


def record_to_message(topic: str, partition: int, key, value, headers, timestamp: int,
                      born_host: tuple[str, int], max_delay_level: int) -> Message:
    """One Kafka record -> a Message for the store. Raises MappingError on a bad reserved header."""
    props: dict[str, str] = {}
    keys: list[str] = []
    if key is not None:
        k = _clean_text(key)
        if k is not None and " " not in k:
            keys.append(k)
        else:
            # keep the exact bytes; the text form (if any) still goes to KEYS so the index finds it
            props[PROP_KEY_B64] = base64.b64encode(bytes(key)).decode("ascii")
            if k:
                keys.append(k)
    awkward: list[tuple[str, bytes | None]] = []
    ordered: list[tuple[str, bytes | None]] = []  # every non-reserved header, in order
    reordered = False  # a property header follows an awkward one: Fetch would change their order
    for name, hv in headers:
        if name == HDR_TAGS and hv is not None:
            t = _clean_text(hv)
            if t is None:
                raise MappingError("header rocketmq.tags: expected UTF-8 text")
            props["TAGS"] = t
            continue
        if name == HDR_KEYS and hv is not None:
            t = _clean_text(hv)
            if t is None:
                raise MappingError("header rocketmq.keys: expected UTF-8 text")
            keys.extend(x for x in t.split(" ") if x)
            continue
        if name == HDR_DELAY and hv is not None:
            t = _clean_text(hv)
            if t is None or not t.strip().isdigit() or not 1 <= int(t) <= max_delay_level:
                raise MappingError(f"header rocketmq.delay: expected a delay level 1..{max_delay_level}, got {hv!r}")
            props["DELAY"] = str(int(t))
            continue
        ordered.append((name, None if hv is None else bytes(hv)))
        if hv is not None and name not in SYSTEM_PROPERTIES and name not in props and "\x01" not in name \
                and "\x02" not in name and name:
            t = _clean_text(hv)
            if t is not None:
                props[name] = t
                reordered = reordered or bool(awkward)
                continue
        awkward.append(ordered[-1])
    if keys:
        props["KEYS"] = " ".join(keys)
        if PROP_KEY_B64 not in props and (key is None or keys[0] != props["KEYS"]):
            # rocketmq.keys added index keys: keep the record key itself exactly ("-" = null)
            props[PROP_KEY_B64] = "-" if key is None else base64.b64encode(bytes(key)).decode("ascii")
    if awkward:
        # Fetch gives property headers first, then these; when that is not the original order,
        # keep the whole list (the properties stay, for RocketMQ consumers and filters)
        props[PROP_HEADERS_B64] = _pack_headers(ordered, every=True) if reordered else _pack_headers(awkward)
    if value is None:
        props[PROP_NULL_VALUE] = "1"
        body = b""
    else:
        body = bytes(value)
    if _props_size(props) > PROPERTIES_BUDGET:
        props, body = _envelope(props, key, ordered, keys, body)
    return Message(topic, body, queue_id=partition, properties=props, born_timestamp=timestamp,
                   born_host=born_host)


def _props_size(props: dict[str, str]) -> int:
    return sum(len(k.encode("utf-8")) + len(v.encode("utf-8")) + 2 for k, v in props.items())


def _envelope(props: dict[str, str], key, ordered: list[tuple[str, bytes | None]], keys: list[str],
              body: bytes) -> tuple[dict[str, str], bytes]:
    """Move the record key, and if that is not enough every header, from the properties to the front
    of the body: KAFKA_ENVELOPE = "<key length or -1>,<headers length>". The key stays findable
    through the index as KEYS "sha256:<hex digest>"; keys from rocketmq.keys stay as they were."""
    import hashlib
    key_bytes = None if key is None else bytes(key)
    out = dict(props)
    out.pop(PROP_KEY_B64, None)
    index_keys = [k for k in keys if key_bytes is None or k.encode("utf-8", "surrogatepass") != key_bytes]
    if key_bytes is not None:
        index_keys.insert(0, KEY_DIGEST_PREFIX + hashlib.sha256(key_bytes).hexdigest())
    if index_keys:
        out["KEYS"] = " ".join(index_keys)
    else:
        out.pop("KEYS", None)
    headers = b""
    if _props_size(out) > PROPERTIES_BUDGET:
        # the headers too: every one of them, in order (properties made from them are dropped)
        out = {k: v for k, v in out.items() if k in SYSTEM_PROPERTIES}
        out.pop(PROP_HEADERS_B64, None)
        headers = base64.b64decode(_pack_headers(ordered, every=True)) if ordered else b""
        if _props_size(out) > PROPERTIES_BUDGET:
            raise MappingError(f"the record's reserved headers need {_props_size(out)} bytes of properties "
                               f"(at most {PROPERTIES_BUDGET})")
    klen = -1 if key_bytes is None else len(key_bytes)
    out[PROP_ENVELOPE] = f"{klen},{len(headers)}"
    return out, (key_bytes or b"") + headers + body


# ------------------------------------------------------------------------------- fetch side
_FIXED = {}
for _b6 in (False, True):
    for _s6 in (False, True):
        _FIXED[(_b6, _s6)] = struct.Struct(
            ">iiiiiqqiq" + ("16si" if _b6 else "4si") + "q" + ("16si" if _s6 else "4si") + "iqi")
_SYSFLAG = struct.Struct(">i")
_H = struct.Struct(">H")


def unit_to_record(raw: bytes, log_append_time: bool = False):
    """A stored commitlog unit -> (key, value, headers, timestamp, properties) for a RecordBatch."""
    sys_flag = _SYSFLAG.unpack_from(raw, 36)[0]
    fixed = _FIXED[(bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))]
    f = fixed.unpack_from(raw, 0)
    body_len = f[16]
    p = fixed.size
    body = raw[p:p + body_len]
    p += body_len
    tl = raw[p]
    p += 1 + tl
    (pl,) = _H.unpack_from(raw, p)
    p += 2
    props = {}
    if pl:
        for item in raw[p:p + pl].decode("utf-8", errors="replace").split("\x02"):
            if item:
                k, _, v = item.partition("\x01")
                props[k] = v
    if sys_flag & COMPRESSED_FLAG:
        try:
            body = zlib.decompress(body)
        except zlib.error:
            pass
    env = props.get(PROP_ENVELOPE)
    env_headers = None
    key_from_env = False
    if env is not None:
        klen_s, _, hlen_s = env.partition(",")
        klen, hlen = int(klen_s), int(hlen_s or 0)
        kl = max(klen, 0)
        key = bytes(body[:kl]) if klen >= 0 else None
        key_from_env = True
        env_headers = bytes(body[kl:kl + hlen]) if hlen else None
        body = body[kl + hlen:]
    value = None if props.get(PROP_NULL_VALUE) == "1" else body
    kb64 = props.get(PROP_KEY_B64)
    if key_from_env:
        pass
    elif kb64 is not None:
        key = None if kb64 == "-" else base64.b64decode(kb64)
    else:
        keys = props.get("KEYS")
        key = keys.encode("utf-8") if keys is not None else None
    hb = props.get(PROP_HEADERS_B64)
    if env_headers is not None:
        hb = base64.b64encode(env_headers).decode("ascii")
    extra, every = _unpack_headers(hb) if hb else ([], False)
    headers = []
    if not every:
        for name, v in props.items():
            if name not in SYSTEM_PROPERTIES:
                headers.append((name, v.encode("utf-8")))
    tags = props.get("TAGS")
    if tags is not None:
        headers.append((HDR_TAGS, tags.encode("utf-8")))
    headers.extend(extra)
    ts = f[11] if log_append_time else f[8]  # STORETIMESTAMP or BORNTIMESTAMP
    return key, value, headers, ts, props


def compaction_key(raw: bytes) -> tuple[bytes | None, bool]:
    """What the store's compaction (rmq.store.compaction) keys a unit by: the Kafka record key (for a
    RocketMQ message, its KEYS), and whether it is a tombstone (a null value)."""
    key, value = unit_to_record(raw)[:2]
    return (bytes(key) if key is not None else None), value is None


_BORN_TS = struct.Struct(">q")
_BORN_TS_POS = 40  # TOTALSIZE MAGICCODE BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG, then BORNTIMESTAMP


def record_timestamp(raw: bytes) -> int:
    """The Kafka record timestamp (CreateTime = BORNTIMESTAMP) of a stored unit, without decoding it."""
    return _BORN_TS.unpack_from(raw, _BORN_TS_POS)[0]


def is_message_unit(raw: bytes) -> bool:
    return len(raw) >= 8 and struct.unpack_from(">i", raw, 4)[0] == MESSAGE_MAGIC_CODE


# ------------------------------------------------------------------------------- C fast paths
# rmq._native (rmq/_native.c) maps a whole batch at once, byte for byte as the functions above do
# one record or unit at a time, and leaves to them whatever it would not map identically.
# tests/test_native.py checks both give the same bytes; RMQ_NO_NATIVE=1 runs only the Python.

def _configure_native() -> None:
    if native.ext is not None:
        native.ext.configure_kafka_mapping(
            tuple(sorted(n.encode() for n in SYSTEM_PROPERTIES)), HDR_TAGS.encode(),
            (HDR_KEYS.encode(), HDR_DELAY.encode()),
            (PROP_KEY_B64.encode(), PROP_NULL_VALUE.encode(), PROP_HEADERS_B64.encode(), PROP_ENVELOPE.encode()))


_configure_native()


def batch_to_units(batch, topic: str, partition: int, born_host: tuple[str, int], store_v6: bool,
                   max_message_size: int) -> EncodedUnits | None:
    """record_to_message for every record of a produced RecordBatch v2, encoded by C straight into
    commitlog units (for DefaultMessageStore.put_encoded), the records' checks included.

    None means "use record_to_message": no C extension, a legacy, transactional or control batch,
    SCHEDULE_TOPIC_XXXX, or any record the C code does not map exactly as record_to_message does
    (null value; key, header name or value that is not UTF-8 text without \\x01 \\x02; a key with
    spaces; repeated or system-property header names; rocketmq.keys / rocketmq.delay) or that the
    Python checks reject (they then report it)."""
    ext = native.ext
    if (ext is None or type(batch) is not RecordBatch or batch.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK)
            or batch.records_count <= 0 or batch.last_offset_delta != batch.records_count - 1
            or topic == SCHEDULE_TOPIC):
        return None
    buf, start, end = batch.records_section()
    addr, port, _ = pack_host(born_host)
    out = ext.kafka_records_to_units(buf, start, end, batch.records_count, batch.base_timestamp,
                                     batch.append_timestamp, topic.encode("utf-8"), partition, addr, port,
                                     store_v6, max_message_size)
    if out is None:
        return None
    units, tags_codes, index_hashes, index_units, max_size = out
    return EncodedUnits(topic, partition, units, batch.records_count, max_size, store_v6, tags_codes,
                        index_hashes, index_units)


def entry_mapper(born_host: tuple[str, int], store_v6: bool, max_message_size: int, max_batch_size: int):
    """For a Produce request of many partition entries: a function (records, topic, topic as UTF-8,
    partition) -> (producer_id, producer_epoch, base_sequence, EncodedUnits) when the entry is
    exactly one plain RecordBatch v2 that C maps whole (header, CRC and records in one call), else
    None, and the entry goes through iter_batches and batch_to_units, which also report what is wrong
    with it. None instead of a function without the C extension."""
    ext = native.ext
    if ext is None:
        return None
    addr, port, _ = pack_host(born_host)
    to_units = ext.kafka_batch_to_units

    def mapper(records, topic: str, topic_b: bytes, partition: int):
        if topic == SCHEDULE_TOPIC:
            return None
        out = to_units(records, topic_b, partition, addr, port, store_v6, max_message_size, max_batch_size)
        if out is None:
            return None
        pid, epoch, seq, count, units, tags_codes, index_hashes, index_units, max_size = out
        return pid, epoch, seq, EncodedUnits(topic, partition, units, count, max_size, store_v6, tags_codes,
                                             index_hashes, index_units)
    return mapper


def _record_of_unit(raw: bytes):
    return unit_to_record(raw)[:4]


def units_to_batch(view: QueueUnitsView, max_bytes: int, max_count: int) -> tuple[bytes, int] | None:
    """What the Python fetch does with get_message + unit_to_record + encode_batch, in C: the units
    get_message would return (max_bytes, max_count) as one RecordBatch (partition leader epoch 0)
    and how many records it holds; None when there are none. Units needing unit_to_record's slow
    paths (compressed body, KAFKA_* properties, invalid UTF-8) are passed to it one by one."""
    return native.ext.kafka_fetch_batch(view.cq_buffer, view.start, view.end, view.queue_offset,
                                        view.commitlog_files, view.file_size, view.commitlog_min,
                                        max_bytes, max_count, _record_of_unit, 0)
