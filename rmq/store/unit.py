"""The store's write side of a commitlog unit (CommitLog.DefaultAppendMessageCallback): a message
encoded except for its offsets, pre-encoded unit batches, batch input and the END_OF_FILE blank unit
(seeds 000, 001). The unit layout itself and MessageDecoder are rmq.common.message.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import struct

from rmq.common.message import (BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, SHORT,
                                STOREHOSTADDRESS_V6_FLAG, UNIT_FIXED_PARTS, UNIT_FIXED_V4, Message, body_crc,
                                pack_host, properties_to_bytes)

_BLANK = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE of the END_OF_FILE unit


@functools.lru_cache(maxsize=65536)
def _topic_bytes(topic: str) -> bytes:
    return topic.encode("utf-8")


class PreparedMessage:
    """A message encoded except for its offsets: everything outside the put lock is done here.

    Holds the unit's `size` and the byte forms of topic, properties and born host; write_into puts
    the unit into the mapped file by struct packing (the reference for rmq._native.write_unit).
    put_messages also records the consumequeue tag code and index keys.
    """

    __slots__ = ("msg", "size", "topic_bytes", "props_bytes", "born_addr", "born_port", "tags_code",
                 "keys", "uniq_key")

    def __init__(self, msg: Message, store_addr_v6: bool):
        topic_bytes = _topic_bytes(msg.topic)
        props = msg.properties
        props_bytes = properties_to_bytes(props) if props else b""
        born_addr, born_port, born_v6 = pack_host(msg.born_host)
        sys_flag = msg.sys_flag
        sys_flag = (sys_flag | BORNHOST_V6_FLAG) if born_v6 else (sys_flag & ~BORNHOST_V6_FLAG)
        msg.sys_flag = (sys_flag | STOREHOSTADDRESS_V6_FLAG) if store_addr_v6 else (sys_flag & ~STOREHOSTADDRESS_V6_FLAG)
        self.msg = msg
        self.topic_bytes = topic_bytes
        self.props_bytes = props_bytes
        self.born_addr = born_addr
        self.born_port = born_port
        self.size = (UNIT_FIXED_V4.size + (12 if born_v6 else 0) + (12 if store_addr_v6 else 0) + len(msg.body) + 3
                     + len(topic_bytes) + len(props_bytes))

    def _parts(self, queue_offset: int, phy_offset: int, store_ts: int, store_addr: bytes, store_port: int):
        m = self.msg
        body = m.body
        fixed = UNIT_FIXED_PARTS[(len(self.born_addr) == 16, len(store_addr) == 16)]
        head = fixed.pack(self.size, MESSAGE_MAGIC_CODE, body_crc(body), m.queue_id, m.flag, queue_offset,
                          phy_offset, m.sys_flag, m.born_timestamp, self.born_addr, self.born_port, store_ts,
                          store_addr, store_port, m.reconsume_times, m.prepared_transaction_offset, len(body))
        tb, pb = self.topic_bytes, self.props_bytes
        return head, body, b"".join((bytes((len(tb),)), tb, SHORT.pack(len(pb)), pb))

    def encode(self, queue_offset: int, phy_offset: int, store_ts: int,
               store_addr: bytes, store_port: int) -> bytes:
        """The whole unit as bytes (the reference encoding; write_into writes the same bytes)."""
        return b"".join(self._parts(queue_offset, phy_offset, store_ts, store_addr, store_port))

    def write_into(self, buf, pos: int, queue_offset: int, phy_offset: int, store_ts: int,
                   store_addr: bytes, store_port: int) -> None:
        """Encode straight into `buf` at `pos` (CommitLog.append calls rmq._native.write_unit
        instead when the extension is built: the same bytes)."""
        head, body, tail = self._parts(queue_offset, phy_offset, store_ts, store_addr, store_port)
        p = pos + len(head)
        e = p + len(body)
        buf[pos:p] = head
        buf[p:e] = body
        buf[e:e + len(tail)] = tail


@dataclass(slots=True)
class EncodedUnits:
    """Units of one topic/queue encoded except for their offsets, as PreparedMessage.write_into would
    write them with QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and STOREHOST left zero.

    Made in one go by a codec in C (kafka_bridge.mapping.batch_to_units for Kafka batches,
    rmq._native.batch_body_to_units for SEND_BATCH_MESSAGE bodies); appended in one go by
    DefaultMessageStore.put_encoded. `units` is bytes, or a view of the commitlog's staging buffer
    when put_batch encoded into it. `tags_codes` holds one native int64 consumequeue tag code per
    unit (None: all 0). Each index key is listed in `index_units` (the native int32 index of its
    unit; a unit's keys are consecutive, UNIQ_KEY first as build_index puts them) with the
    IndexFile hash of "topic#key" in `index_hashes`.
    """

    topic: str
    queue_id: int
    units: bytes | memoryview
    count: int
    max_size: int
    store_v6: bool
    tags_codes: bytes | None = None
    index_hashes: bytes | None = None
    index_units: bytes | None = None


@dataclass(slots=True)
class EncodedEntries:
    """Units of many topic/queue entries encoded in one go, as EncodedUnits each (rmq._native.
    kafka_produce_map: every partition entry of a Kafka Produce request). `table` holds one entry
    per topic/queue run of units (the pentry layout of rmq/_native_produce.h: topic number into
    `names`, queue id, unit count, where its units, tag codes and index keys are in `units`, `tags`,
    `hashes` / `iunits`, and the put's results); `unit_count` is the number of units of all of them,
    the slots of the consumequeue buffer a put fills. Appended by DefaultMessageStore.put_entries,
    which takes the entries named by a selection (native int32 entry numbers)."""

    names: list[str]
    table: bytearray
    units: bytes
    tags: bytes
    hashes: bytes
    iunits: bytes
    unit_count: int
    store_v6: bool


@dataclass(slots=True)
class MessageBatch:
    """What the broker hands the store for SEND_BATCH_MESSAGE (MessageExtBatch): one topic and queue,
    the body as MessageDecoder.encodeMessages wrote it, and what every element shares: the request's
    properties (an element's own properties win), sysFlag, born time and host, reconsume times."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0


def blank_unit(size: int) -> bytes:
    """The END_OF_FILE filler: TOTALSIZE = remaining bytes, BLANK magic; the rest left as is."""
    return _BLANK.pack(size, BLANK_MAGIC_CODE)
