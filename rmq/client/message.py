"""Client-side message types: the Message a producer sends, the MessageExt a consumer receives,
SendResult / PullResult and the status enums, and MessageDecoder.encodeMessages for batches
(SPEC §1, §3 "Batch send", §4)."""
from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from rmq.common.message import (
    COMPRESSED_FLAG,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    CorruptMessage,
    create_message_id,
    decode_message,
    decode_units_native,
    encode_batch_element,
    properties_to_bytes,
)
from rmq.common.message import MessageExt as StoreMessageExt
from rmq.remoting import MessageQueue

__all__ = ["Message", "MessageExt", "MessageQueue", "SendStatus", "SendResult", "PullStatus",
           "PullResult", "ConsumeStatus", "ConsumeFromWhere", "MessageModel",
           "encode_message", "encode_messages", "decode_messages", "MAX_MESSAGE_SIZE"]

#: DefaultMQProducer.maxMessageSize: 4 MiB.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024



class Message:
    """A message to send: topic, body, flag and properties (TAGS, KEYS, DELAY, WAIT and user
    properties all live in ``properties`` as in org.apache.rocketmq.common.message.Message).

    Like Java's constructors, every new message carries ``WAIT=true`` (waitStoreMsgOK)."""

    __slots__ = ("topic", "body", "flag", "properties", "transaction_id")

    def __init__(self, topic: str, body: bytes | str = b"", *, tags: str | None = None,
                 keys: str | Iterable[str] | None = None, flag: int = 0,
                 properties: dict[str, str] | None = None, delay_time_level: int = 0,
                 wait_store_msg_ok: bool = True) -> None:
        self.topic = topic
        self.body = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        self.transaction_id: str | None = None
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys  # type: ignore[assignment]
        if delay_time_level:
            self.delay_time_level = delay_time_level
        self.properties.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true" if wait_store_msg_ok else "false")

    # -- well-known properties
    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value is None:
            self.properties.pop(PROPERTY_TAGS, None)
        else:
            self.properties[PROPERTY_TAGS] = value

    @property
    def keys(self) -> str | None:
        """KEYS: several keys are joined by a space (MessageConst.KEY_SEPARATOR)."""
        return self.properties.get(PROPERTY_KEYS)

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if value is None:
            self.properties.pop(PROPERTY_KEYS, None)
        elif isinstance(value, str):
            self.properties[PROPERTY_KEYS] = value
        else:
            self.properties[PROPERTY_KEYS] = " ".join(value)

    @property
    def delay_time_level(self) -> int:
        return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0") or 0)

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self.properties[PROPERTY_DELAY_TIME_LEVEL] = str(int(level))

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"

    @property
    def uniq_key(self) -> str | None:
        """The client msgId (UNIQ_KEY), set when the message is sent."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def put_user_property(self, name: str, value: str) -> None:
        """A user property; names and values must not contain \\x01 or \\x02."""
        if not name or value is None:
            raise ValueError("user property name and value must be non-empty")
        self.properties[name] = str(value)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def __repr__(self) -> str:
        return (f"Message(topic={self.topic!r}, flag={self.flag}, properties={self.properties!r}, "
                f"body={len(self.body)}B)")


@dataclass(slots=True)
class MessageExt(StoreMessageExt):
    """A received message: the stored unit's fields (see rmq.common.message.MessageExt) plus the
    broker it came from.  ``msg_id`` is the client id (UNIQ_KEY) when present, like Java's
    MessageClientExt; ``offset_msg_id`` is the broker's store-host + commitlog-offset id."""

    broker_name: str = ""
    #: set on a half message handed to a transaction check (its UNIQ_KEY), as Java does
    transaction_id: str | None = None

    @property
    def offset_msg_id(self) -> str:
        return create_message_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:  # type: ignore[override]
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)


def decode_messages(body: bytes | memoryview, broker_name: str = "", *,
                    decompress: bool = True, min_offset: int | None = None,
                    max_offset: int | None = None) -> list[MessageExt]:
    """MessageDecoder.decodes: the message units a PULL / QUERY_MESSAGE / VIEW_MESSAGE_BY_ID
    response body holds, back to back.  COMPRESSED bodies are inflated (zlib).  With
    ``min_offset``/``max_offset`` the MIN_OFFSET/MAX_OFFSET properties are set as
    PullAPIWrapper.processPullResult does.  Raises CorruptMessage on a bad unit."""
    mn = str(min_offset) if min_offset is not None else None
    mx = str(max_offset) if max_offset is not None else None
    if decompress:   # the whole body in one C call (rmq.common.message.decode_units_native)
        extra = ((PROPERTY_MIN_OFFSET, mn),) if mn is not None else ()
        if mx is not None:
            extra += ((PROPERTY_MAX_OFFSET, mx),)
        fast = decode_units_native(body, MessageExt, broker_name, extra)
        if fast is not None:
            return fast
    out: list[MessageExt] = []
    n = len(body)
    pos = 0
    while pos < n:
        m = decode_message(body, pos)
        pos += m.store_size
        b = m.body
        if decompress and m.sys_flag & COMPRESSED_FLAG and b:
            try:
                b = zlib.decompress(b)
            except zlib.error as exc:
                raise CorruptMessage(f"compressed body of {m.topic}@{m.queue_offset} does not inflate: {exc}") from None
        props = m.properties
        if mn is not None:
            props[PROPERTY_MIN_OFFSET] = mn
        if mx is not None:
            props[PROPERTY_MAX_OFFSET] = mx
        out.append(MessageExt(m.topic, b, m.queue_id, m.flag, props, m.sys_flag, m.born_timestamp,
                              m.born_host, m.store_timestamp, m.store_host, m.reconsume_times,
                              m.prepared_transaction_offset, m.queue_offset, m.commit_log_offset,
                              m.store_size, m.body_crc, broker_name))
    return out


def encode_message(msg: Message) -> bytes:
    """MessageDecoder.encodeMessage: one batch element —
    TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0) | FLAG 4 | BODY 4+n | PROPERTIES 2+n."""
    props = properties_to_bytes(msg.properties)
    if len(props) > 0x7FFF:
        raise ValueError(f"properties of {len(props)} bytes exceed 32767")
    return encode_batch_element(msg.flag, msg.body, props)


def encode_messages(msgs: Sequence[Message]) -> bytes:
    """MessageDecoder.encodeMessages: the elements back to back (the SEND_BATCH_MESSAGE body)."""
    return b"".join(encode_message(m) for m in msgs)


class SendStatus(enum.Enum):
    """SendStatus: SEND_OK, or stored but flush/replication did not finish in time."""
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass
class SendResult:
    """What a send returns: status, the client msgId (UNIQ_KEY; comma-joined for a batch), the
    queue and queue offset it was stored at, and the broker's offsetMsgId."""
    send_status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str | None = None
    transaction_id: str | None = None
    region_id: str | None = None
    trace_on: bool = True


class PullStatus(enum.Enum):
    """PullStatus: from PULL_MESSAGE codes SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED."""
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass
class PullResult:
    """PULL_MESSAGE outcome: status, the next offset to pull, the queue's min/max offsets and
    the messages found (already tag-filtered on the client)."""
    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


class ConsumeStatus(enum.Enum):
    """ConsumeConcurrentlyStatus."""
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeFromWhere(enum.Enum):
    """Where a group with no stored offset starts (RebalancePushImpl.computePullFromWhere)."""
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    """CLUSTERING: a group shares the queues (offsets on the broker); BROADCASTING: every member
    reads everything (offsets in a local file)."""
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"
