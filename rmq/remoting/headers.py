"""Typed RocketMQ custom headers (the CommandCustomHeader classes) and their conversion to and
from a RemotingCommand's extFields string map.

Field names are RocketMQ's own camelCase wire names.  A field declared required matches a
``@CFNotNull`` field in the Java class, except where a stock client is known to leave it
out (then it is optional with the Java default, as noted).  Decoding a missing required
field raises MissingHeaderField; an unparsable value raises BadHeaderField; both name the
field and carry the response code and remark a server should answer with.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Mapping, Optional

from .errors import BadHeaderField, MissingHeaderField
from .request_code import SEND_V2_CODES, RequestCode

STR, INT, LONG, BOOL = "str", "int", "long", "bool"

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_RANGES = {INT: (-(1 << 31), (1 << 31) - 1), LONG: (-(1 << 63), (1 << 63) - 1)}
_EXPECTED = {INT: "int32", LONG: "int64", BOOL: "boolean (true/false)", STR: "string"}


def hfield(kind: str, required: bool = False, default: Any = None, *, label: str | None = None) -> Any:
    """Declare a header field: its wire type, whether it must be present, its default.
    ``label`` is shown in error messages instead of the wire name (used by the V2 header)."""
    return dataclasses.field(default=default,
                             metadata={"kind": kind, "required": required, "label": label})


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    required: bool
    default: Any
    label: str


def parse_value(header: str, spec: FieldSpec, raw: str) -> Any:
    """Convert one extFields string to the field's Python type (like Java's parseInt,
    parseLong and parseBoolean, but rejecting garbage instead of guessing)."""
    kind = spec.kind
    if kind == STR:
        return raw
    if kind in (INT, LONG):
        digits = raw[1:] if raw[:1] in ("+", "-") else raw
        if not (digits.isascii() and digits.isdigit()):   # _INT_TEXT, without the regex engine
            raise BadHeaderField(header, spec.label, raw, _EXPECTED[kind])
        value = int(raw)
        lo, hi = _RANGES[kind]
        if not lo <= value <= hi:
            raise BadHeaderField(header, spec.label, raw, _EXPECTED[kind])
        return value
    if kind == BOOL:
        low = raw.strip().lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0", ""):
            return False
        raise BadHeaderField(header, spec.label, raw, _EXPECTED[kind])
    raise AssertionError(f"unknown field kind {kind}")


def format_value(value: Any) -> str:
    """Python value -> extFields string, as Java's ``String.valueOf`` writes it."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


class CommandHeader:
    """Base of all header classes: ``from_ext_fields`` / ``to_ext_fields`` driven by the
    dataclass fields declared with ``hfield``."""

    _specs: ClassVar[tuple[FieldSpec, ...]]

    @classmethod
    def field_specs(cls) -> tuple[FieldSpec, ...]:
        specs = cls.__dict__.get("_specs")
        if specs is None:
            specs = tuple(
                FieldSpec(f.name, f.metadata["kind"], f.metadata["required"], f.default,
                          f.metadata["label"] or f.name)
                for f in dataclasses.fields(cls))  # type: ignore[arg-type]
            cls._specs = specs
        return specs

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str] | None):
        """Build the header from an extFields map; raise MissingHeaderField/BadHeaderField."""
        ext = ext_fields or {}
        name = cls.__name__
        values: dict[str, Any] = {}
        for spec in cls.field_specs():
            raw = ext.get(spec.name)
            if raw is None:
                if spec.required:
                    raise MissingHeaderField(name, spec.label)
                values[spec.name] = spec.default
            else:
                values[spec.name] = parse_value(name, spec, raw)
        obj = cls(**values)
        obj.check_fields()
        return obj

    @classmethod
    def from_command(cls, cmd: Any):
        """``from_ext_fields(cmd.ext_fields)``."""
        return cls.from_ext_fields(cmd.ext_fields)

    def to_ext_fields(self, *, check: bool = True) -> dict[str, str]:
        """extFields for this header; fields that are None are left out.  With ``check``, a
        required field left None raises MissingHeaderField."""
        out: dict[str, str] = {}
        for spec in self.field_specs():
            value = getattr(self, spec.name)
            if value is None:
                if check and spec.required:
                    raise MissingHeaderField(type(self).__name__, spec.label)
                continue
            out[spec.name] = format_value(value)
        return out

    def check_fields(self) -> None:
        """Cross-field validation hook (CommandCustomHeader.checkFields)."""


def _header(cls):
    return dataclasses.dataclass(cls)


# =============================================================================== producer
@_header
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) header; also the V1 form SEND_MESSAGE_V2 headers convert to."""
    producerGroup: Optional[str] = hfield(STR, True)
    topic: Optional[str] = hfield(STR, True)
    defaultTopic: Optional[str] = hfield(STR, True)
    defaultTopicQueueNums: Optional[int] = hfield(INT, True)
    queueId: Optional[int] = hfield(INT, True)
    sysFlag: Optional[int] = hfield(INT, True)
    bornTimestamp: Optional[int] = hfield(LONG, True)
    flag: Optional[int] = hfield(INT, True)
    properties: Optional[str] = hfield(STR)
    reconsumeTimes: Optional[int] = hfield(INT)
    unitMode: bool = hfield(BOOL, default=False)
    batch: bool = hfield(BOOL, default=False)
    maxReconsumeTimes: Optional[int] = hfield(INT)

    def to_v2(self) -> "SendMessageRequestHeaderV2":
        return SendMessageRequestHeaderV2(
            a=self.producerGroup, b=self.topic, c=self.defaultTopic, d=self.defaultTopicQueueNums,
            e=self.queueId, f=self.sysFlag, g=self.bornTimestamp, h=self.flag, i=self.properties,
            j=self.reconsumeTimes, k=self.unitMode, l=self.maxReconsumeTimes, m=self.batch)


# V2 letter -> V1 name (SendMessageRequestHeaderV2.java).  "n" (brokerName) is newer than 4.x.
V2_FIELD_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    "n": "brokerName",
}


def _v2(kind: str, letter: str, required: bool = False, default: Any = None) -> Any:
    return hfield(kind, required, default, label=f"{letter} ({V2_FIELD_NAMES[letter]})")


@_header
class SendMessageRequestHeaderV2(CommandHeader):
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) header with one-letter field names."""
    a: Optional[str] = _v2(STR, "a", True)
    b: Optional[str] = _v2(STR, "b", True)
    c: Optional[str] = _v2(STR, "c", True)
    d: Optional[int] = _v2(INT, "d", True)
    e: Optional[int] = _v2(INT, "e", True)
    f: Optional[int] = _v2(INT, "f", True)
    g: Optional[int] = _v2(LONG, "g", True)
    h: Optional[int] = _v2(INT, "h", True)
    i: Optional[str] = _v2(STR, "i")
    j: Optional[int] = _v2(INT, "j")
    k: bool = _v2(BOOL, "k", default=False)
    l: Optional[int] = _v2(INT, "l")  # noqa: E741 - RocketMQ's name
    m: bool = _v2(BOOL, "m", default=False)
    n: Optional[str] = _v2(STR, "n")

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producerGroup=self.a, topic=self.b, defaultTopic=self.c, defaultTopicQueueNums=self.d,
            queueId=self.e, sysFlag=self.f, bornTimestamp=self.g, flag=self.h, properties=self.i,
            reconsumeTimes=self.j, unitMode=self.k, maxReconsumeTimes=self.l, batch=self.m)

    @classmethod
    def from_v1(cls, v1: SendMessageRequestHeader) -> "SendMessageRequestHeaderV2":
        return v1.to_v2()


@_header
class SendMessageResponseHeader(CommandHeader):
    msgId: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)
    queueOffset: Optional[int] = hfield(LONG, True)
    transactionId: Optional[str] = hfield(STR)


def decode_send_message_header(cmd: Any) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE /
    SEND_REPLY_MESSAGE(_V2) request, always in V1 form."""
    if cmd.code in SEND_V2_CODES:
        return SendMessageRequestHeaderV2.from_ext_fields(cmd.ext_fields).to_v1()
    return SendMessageRequestHeader.from_ext_fields(cmd.ext_fields)


# MessageSysFlag transaction types carried in EndTransactionRequestHeader.commitOrRollback.
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 1 << 2
TRANSACTION_COMMIT_TYPE = 2 << 2
TRANSACTION_ROLLBACK_TYPE = 3 << 2


@_header
class EndTransactionRequestHeader(CommandHeader):
    producerGroup: Optional[str] = hfield(STR, True)
    tranStateTableOffset: Optional[int] = hfield(LONG, True)
    commitLogOffset: Optional[int] = hfield(LONG, True)
    commitOrRollback: Optional[int] = hfield(INT, True)
    fromTransactionCheck: bool = hfield(BOOL, default=False)
    msgId: Optional[str] = hfield(STR, True)
    transactionId: Optional[str] = hfield(STR)

    def check_fields(self) -> None:
        if self.commitOrRollback not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE,
                                         TRANSACTION_ROLLBACK_TYPE):
            raise BadHeaderField(type(self).__name__, "commitOrRollback", self.commitOrRollback,
                                 "transaction type (0 none, 8 commit, 12 rollback)")


@_header
class CheckTransactionStateRequestHeader(CommandHeader):
    """Broker -> producer CHECK_TRANSACTION_STATE (39)."""
    tranStateTableOffset: Optional[int] = hfield(LONG, True)
    commitLogOffset: Optional[int] = hfield(LONG, True)
    msgId: Optional[str] = hfield(STR)
    transactionId: Optional[str] = hfield(STR)
    offsetMsgId: Optional[str] = hfield(STR)


# =============================================================================== consumer
@_header
class PullMessageRequestHeader(CommandHeader):
    consumerGroup: Optional[str] = hfield(STR, True)
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)
    queueOffset: Optional[int] = hfield(LONG, True)
    maxMsgNums: Optional[int] = hfield(INT, True)
    sysFlag: Optional[int] = hfield(INT, True)
    commitOffset: Optional[int] = hfield(LONG, True)
    suspendTimeoutMillis: Optional[int] = hfield(LONG, True)
    subscription: Optional[str] = hfield(STR)
    subVersion: Optional[int] = hfield(LONG, True)
    expressionType: Optional[str] = hfield(STR)
    maxMsgBytes: Optional[int] = hfield(INT)  # newer than 4.x; optional


@_header
class PullMessageResponseHeader(CommandHeader):
    suggestWhichBrokerId: Optional[int] = hfield(LONG, True)
    nextBeginOffset: Optional[int] = hfield(LONG, True)
    minOffset: Optional[int] = hfield(LONG, True)
    maxOffset: Optional[int] = hfield(LONG, True)


@_header
class QueryConsumerOffsetRequestHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET (14). ``setZeroIfNotFound`` (RocketMQ 5): false asks for
    QUERY_NOT_FOUND instead of offset 0 when the group has no offset for the queue."""
    consumerGroup: Optional[str] = hfield(STR, True)
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)
    setZeroIfNotFound: Optional[bool] = hfield(BOOL)


@_header
class QueryConsumerOffsetResponseHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)


@_header
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumerGroup: Optional[str] = hfield(STR, True)
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)
    commitOffset: Optional[int] = hfield(LONG, True)


@_header
class GetMaxOffsetRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)


@_header
class GetMaxOffsetResponseHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)


@_header
class GetMinOffsetRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)


@_header
class GetMinOffsetResponseHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)


@_header
class SearchOffsetRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)
    timestamp: Optional[int] = hfield(LONG, True)


@_header
class SearchOffsetResponseHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)


@_header
class GetEarliestMsgStoretimeRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    queueId: Optional[int] = hfield(INT, True)


@_header
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: Optional[int] = hfield(LONG, True)


@_header
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)
    group: Optional[str] = hfield(STR, True)
    delayLevel: Optional[int] = hfield(INT, True)
    originMsgId: Optional[str] = hfield(STR)
    originTopic: Optional[str] = hfield(STR)
    unitMode: bool = hfield(BOOL, default=False)
    maxReconsumeTimes: Optional[int] = hfield(INT)


@_header
class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumerGroup: Optional[str] = hfield(STR, True)


@_header
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    """Broker -> consumer NOTIFY_CONSUMER_IDS_CHANGED (40)."""
    consumerGroup: Optional[str] = hfield(STR, True)


@_header
class UnregisterClientRequestHeader(CommandHeader):
    clientID: Optional[str] = hfield(STR, True)
    producerGroup: Optional[str] = hfield(STR)
    consumerGroup: Optional[str] = hfield(STR)


@_header
class QueryMessageRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    key: Optional[str] = hfield(STR, True)
    maxNum: Optional[int] = hfield(INT, True)
    beginTimestamp: Optional[int] = hfield(LONG, True)
    endTimestamp: Optional[int] = hfield(LONG, True)


@_header
class QueryMessageResponseHeader(CommandHeader):
    indexLastUpdateTimestamp: Optional[int] = hfield(LONG, True)
    indexLastUpdatePhyoffset: Optional[int] = hfield(LONG, True)


@_header
class ViewMessageRequestHeader(CommandHeader):
    offset: Optional[int] = hfield(LONG, True)


@_header
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    """Broker/admin -> client GET_CONSUMER_RUNNING_INFO (307)."""
    consumerGroup: Optional[str] = hfield(STR, True)
    clientId: Optional[str] = hfield(STR, True)
    jstackEnable: bool = hfield(BOOL, default=False)


@_header
class ResetOffsetRequestHeader(CommandHeader):
    """Broker -> client RESET_CONSUMER_CLIENT_OFFSET (220) and INVOKE_BROKER_TO_RESET_OFFSET."""
    topic: Optional[str] = hfield(STR, True)
    group: Optional[str] = hfield(STR, True)
    timestamp: Optional[int] = hfield(LONG, True)
    isForce: Optional[bool] = hfield(BOOL, True)


# =============================================================================== admin
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


@_header
class CreateTopicRequestHeader(CommandHeader):
    """UPDATE_AND_CREATE_TOPIC (17).  ``order`` is @CFNotNull in Java but the C++ client
    does not send it, so it is optional here (default false, as in Java)."""
    topic: Optional[str] = hfield(STR, True)
    defaultTopic: Optional[str] = hfield(STR, True)
    readQueueNums: Optional[int] = hfield(INT, True)
    writeQueueNums: Optional[int] = hfield(INT, True)
    perm: Optional[int] = hfield(INT, True)
    topicFilterType: Optional[str] = hfield(STR, True)
    topicSysFlag: Optional[int] = hfield(INT)
    order: bool = hfield(BOOL, default=False)

    def check_fields(self) -> None:
        if self.topicFilterType not in TOPIC_FILTER_TYPES:
            raise BadHeaderField(type(self).__name__, "topicFilterType", self.topicFilterType,
                                 "topic filter type (SINGLE_TAG or MULTI_TAG)")


@_header
class DeleteTopicRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)


@_header
class GetTopicStatsInfoRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)


@_header
class GetConsumeStatsRequestHeader(CommandHeader):
    consumerGroup: Optional[str] = hfield(STR, True)
    topic: Optional[str] = hfield(STR)


@_header
class GetConsumerConnectionListRequestHeader(CommandHeader):
    consumerGroup: Optional[str] = hfield(STR, True)


@_header
class GetProducerConnectionListRequestHeader(CommandHeader):
    producerGroup: Optional[str] = hfield(STR, True)


@_header
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    groupName: Optional[str] = hfield(STR, True)
    removeOffset: bool = hfield(BOOL, default=False)


@_header
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: Optional[str] = hfield(STR, True)


# =============================================================================== NameServer
@_header
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103).  ``compressed``/``bodyCrc32`` exist since 4.2 (defaults false/0)."""
    brokerName: Optional[str] = hfield(STR, True)
    brokerAddr: Optional[str] = hfield(STR, True)
    clusterName: Optional[str] = hfield(STR, True)
    haServerAddr: Optional[str] = hfield(STR, True)
    brokerId: Optional[int] = hfield(LONG, True)
    compressed: bool = hfield(BOOL, default=False)
    bodyCrc32: int = hfield(INT, default=0)


@_header
class RegisterBrokerResponseHeader(CommandHeader):
    haServerAddr: Optional[str] = hfield(STR)
    masterAddr: Optional[str] = hfield(STR)


@_header
class UnRegisterBrokerRequestHeader(CommandHeader):
    brokerName: Optional[str] = hfield(STR, True)
    brokerAddr: Optional[str] = hfield(STR, True)
    clusterName: Optional[str] = hfield(STR, True)
    brokerId: Optional[int] = hfield(LONG, True)


@_header
class GetRouteInfoRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)
    acceptStandardJsonOnly: Optional[bool] = hfield(BOOL)  # newer than 4.x; optional


@_header
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    brokerName: Optional[str] = hfield(STR, True)


@_header
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipeTopicCount: Optional[int] = hfield(INT, True)


@_header
class DeleteTopicInNamesrvRequestHeader(CommandHeader):
    topic: Optional[str] = hfield(STR, True)


@_header
class PutKVConfigRequestHeader(CommandHeader):
    namespace: Optional[str] = hfield(STR, True)
    key: Optional[str] = hfield(STR, True)
    value: Optional[str] = hfield(STR, True)


@_header
class GetKVConfigRequestHeader(CommandHeader):
    namespace: Optional[str] = hfield(STR, True)
    key: Optional[str] = hfield(STR, True)


@_header
class GetKVConfigResponseHeader(CommandHeader):
    value: Optional[str] = hfield(STR)


@_header
class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: Optional[str] = hfield(STR, True)
    key: Optional[str] = hfield(STR, True)


@_header
class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: Optional[str] = hfield(STR, True)


# =============================================================================== registry
#: Request code -> header class of the request (V1 form for the send family; use
#: decode_request_header, which reads V2 letters where the code calls for them).
REQUEST_HEADERS: dict[int, type[CommandHeader]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RequestCode.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    RequestCode.GET_KV_CONFIG: GetKVConfigRequestHeader,
    RequestCode.DELETE_KV_CONFIG: DeleteKVConfigRequestHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerRequestHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicInNamesrvRequestHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RequestCode.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterRequestHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
}

#: Request code -> header class of its (successful) response, where it has one.
RESPONSE_HEADERS: dict[int, type[CommandHeader]] = {
    RequestCode.SEND_MESSAGE: SendMessageResponseHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageResponseHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
    RequestCode.PULL_MESSAGE: PullMessageResponseHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageResponseHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerResponseHeader,
    RequestCode.GET_KV_CONFIG: GetKVConfigResponseHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerResponseHeader,
}


def decode_request_header(cmd: Any) -> CommandHeader | None:
    """The typed request header for ``cmd.code`` (V2 send headers converted to V1), or None
    when the code carries no header here.  Raises MissingHeaderField / BadHeaderField."""
    if cmd.code in SEND_V2_CODES:
        return SendMessageRequestHeaderV2.from_ext_fields(cmd.ext_fields).to_v1()
    cls = REQUEST_HEADERS.get(cmd.code)
    if cls is None:
        return None
    return cls.from_ext_fields(cmd.ext_fields)


__all__ = sorted(
    [name for name, obj in list(globals().items())
     if isinstance(obj, type) and issubclass(obj, CommandHeader)]
    + ["REQUEST_HEADERS", "RESPONSE_HEADERS", "decode_request_header",
       "decode_send_message_header", "V2_FIELD_NAMES", "TRANSACTION_NOT_TYPE",
       "TRANSACTION_PREPARED_TYPE", "TRANSACTION_COMMIT_TYPE", "TRANSACTION_ROLLBACK_TYPE",
       "hfield", "STR", "INT", "LONG", "BOOL"])
