"""RocketMQ JSON command bodies (RemotingSerializable subclasses) written the way fastjson
writes them and read tolerantly (standard JSON, fastjson bare integer keys, the C++ client's
jsoncpp output with numbers as strings and empty arrays left out).

Every class has ``encode() -> bytes`` and ``decode(data) -> instance``; ``to_json()`` /
``from_json()`` work on the parsed Python object.  Properties are written in alphabetical
order and null properties left out, as fastjson does for Java beans.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

from . import fastjson
from .errors import BodyDecodeError

T = TypeVar("T")

_INT_TEXT = re.compile(r"[+-]?[0-9]+")


# ------------------------------------------------------------------------------ reading
class _Obj:
    """Typed access to one JSON object with error messages that name the path."""

    __slots__ = ("d", "path")

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise BodyDecodeError(f"{path}: expected a JSON object, got {_kind(value)}")
        self.d = value
        self.path = path

    def _missing(self, key: str) -> BodyDecodeError:
        return BodyDecodeError(f"{self.path}.{key}: required property is missing")

    def get_str(self, key: str, default: Any = None, required: bool = False) -> Any:
        v = self.d.get(key)
        if v is None:
            if required:
                raise self._missing(key)
            return default
        if isinstance(v, str):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        raise BodyDecodeError(f"{self.path}.{key}: expected a string, got {_kind(v)}")

    def get_int(self, key: str, default: Any = 0, required: bool = False) -> Any:
        v = self.d.get(key)
        if v is None:
            if required:
                raise self._missing(key)
            return default
        return _as_int(v, f"{self.path}.{key}")

    def get_bool(self, key: str, default: bool = False) -> bool:
        v = self.d.get(key)
        if v is None:
            return default
        return _as_bool(v, f"{self.path}.{key}")

    def get_list(self, key: str, item: Callable[[Any, str], T], required: bool = False) -> list[T]:
        v = self.d.get(key)
        if v is None:
            if required:
                raise self._missing(key)
            return []
        p = f"{self.path}.{key}"
        if not isinstance(v, list):
            raise BodyDecodeError(f"{p}: expected a JSON array, got {_kind(v)}")
        return [item(x, f"{p}[{i}]") for i, x in enumerate(v)]

    def get_map(self, key: str, value: Callable[[Any, str], T], keys: Callable[[str, str], Any] = None,
            required: bool = False) -> dict:
        v = self.d.get(key)
        if v is None:
            if required:
                raise self._missing(key)
            return {}
        p = f"{self.path}.{key}"
        if not isinstance(v, dict):
            raise BodyDecodeError(f"{p}: expected a JSON object, got {_kind(v)}")
        out = {}
        for k, x in v.items():
            kk = keys(k, p) if keys else k
            out[kk] = value(x, f"{p}[{k!r}]")
        return out


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def _as_int(v: Any, path: str) -> int:
    if isinstance(v, bool):
        raise BodyDecodeError(f"{path}: expected an integer, got a boolean")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
        return int(v)
    raise BodyDecodeError(f"{path}: expected an integer, got {_kind(v)} {v!r:.40}")


def _as_bool(v: Any, path: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise BodyDecodeError(f"{path}: expected a boolean, got {_kind(v)} {v!r:.40}")


def _str_item(v: Any, path: str) -> str:
    if isinstance(v, str):
        return v
    raise BodyDecodeError(f"{path}: expected a string, got {_kind(v)}")


def _int_item(v: Any, path: str) -> int:
    return _as_int(v, path)


def _str_list(v: Any, path: str) -> list[str]:
    if not isinstance(v, list):
        raise BodyDecodeError(f"{path}: expected a JSON array, got {_kind(v)}")
    return [_str_item(x, f"{path}[{i}]") for i, x in enumerate(v)]


def _long_key(k: str, path: str) -> int:
    try:
        return int(k)
    except ValueError:
        raise BodyDecodeError(f"{path}: key {k!r} is not an integer (broker id)") from None


def _parse(cls: type, data: Any, what: str):
    obj = fastjson.loads(data, what=what)
    return cls.from_json(obj)


class _Body:
    """encode()/decode() on top of to_json()/from_json()."""

    #: Write integer map keys bare (fastjson) unless a subclass or caller asks otherwise.
    def encode(self, *, quote_int_keys: bool = False) -> bytes:
        return fastjson.dumpb(self.to_json(), quote_int_keys=quote_int_keys)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str):
        if data is None or len(data) == 0:
            raise BodyDecodeError(f"{cls.__name__}: body is empty")
        return _parse(cls, data, cls.__name__)

    def to_json(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def from_json(cls, obj: Any, path: str | None = None):  # pragma: no cover - abstract
        raise NotImplementedError


def _sorted_set(items) -> list:
    try:
        return sorted(items)
    except TypeError:
        return list(items)


# ------------------------------------------------------------------------------ route data
@dataclass
class QueueData(_Body):
    """Queues of one topic on one broker (brokerName)."""
    brokerName: str
    readQueueNums: int = 0
    writeQueueNums: int = 0
    perm: int = 6
    topicSynFlag: int = 0   # 4.x spelling ("topicSysFlag" in 5.x; both are read)

    def to_json(self) -> dict:
        return {"brokerName": self.brokerName, "perm": self.perm,
                "readQueueNums": self.readQueueNums, "topicSynFlag": self.topicSynFlag,
                "writeQueueNums": self.writeQueueNums}

    @classmethod
    def from_json(cls, obj: Any, path: str = "QueueData") -> "QueueData":
        o = _Obj(obj, path)
        syn = o.get_int("topicSynFlag", None)
        if syn is None:
            syn = o.get_int("topicSysFlag", 0)
        return cls(brokerName=o.get_str("brokerName", required=True),
                   readQueueNums=o.get_int("readQueueNums"), writeQueueNums=o.get_int("writeQueueNums"),
                   perm=o.get_int("perm"), topicSynFlag=syn)


@dataclass
class BrokerData(_Body):
    """One broker group: its cluster, name and {brokerId: "ip:port"} (0 = master)."""
    cluster: Optional[str]
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"brokerAddrs": {int(k): v for k, v in sorted(self.brokerAddrs.items())},
                               "brokerName": self.brokerName}
        if self.cluster is not None:
            out["cluster"] = self.cluster
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = "BrokerData") -> "BrokerData":
        o = _Obj(obj, path)
        return cls(cluster=o.get_str("cluster"), brokerName=o.get_str("brokerName", required=True),
                   brokerAddrs=o.get_map("brokerAddrs", _str_item, keys=_long_key))


@dataclass
class TopicRouteData(_Body):
    """GET_ROUTEINFO_BY_TOPIC response body."""
    queueDatas: list[QueueData] = field(default_factory=list)
    brokerDatas: list[BrokerData] = field(default_factory=list)
    orderTopicConf: Optional[str] = None
    filterServerTable: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.brokerDatas],
                               "filterServerTable": {k: list(v) for k, v in self.filterServerTable.items()}}
        if self.orderTopicConf is not None:
            out["orderTopicConf"] = self.orderTopicConf
        out["queueDatas"] = [q.to_json() for q in self.queueDatas]
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = "TopicRouteData") -> "TopicRouteData":
        o = _Obj(obj, path)
        return cls(queueDatas=o.get_list("queueDatas", QueueData.from_json),
                   brokerDatas=o.get_list("brokerDatas", BrokerData.from_json),
                   orderTopicConf=o.get_str("orderTopicConf"),
                   filterServerTable=o.get_map("filterServerTable",
                                           _str_list))


@dataclass
class ClusterInfo(_Body):
    """GET_BROKER_CLUSTER_INFO response body."""
    brokerAddrTable: dict[str, BrokerData] = field(default_factory=dict)
    clusterAddrTable: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"brokerAddrTable": {k: v.to_json() for k, v in self.brokerAddrTable.items()},
                "clusterAddrTable": {k: _sorted_set(v) for k, v in self.clusterAddrTable.items()}}

    @classmethod
    def from_json(cls, obj: Any, path: str = "ClusterInfo") -> "ClusterInfo":
        o = _Obj(obj, path)
        return cls(brokerAddrTable=o.get_map("brokerAddrTable", BrokerData.from_json),
                   clusterAddrTable=o.get_map("clusterAddrTable",
                                          _str_list))


@dataclass
class TopicList(_Body):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER / GET_TOPICS_BY_CLUSTER / GET_SYSTEM_TOPIC_LIST body."""
    topicList: list[str] = field(default_factory=list)
    brokerAddr: Optional[str] = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.brokerAddr is not None:
            out["brokerAddr"] = self.brokerAddr
        out["topicList"] = _sorted_set(self.topicList)
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = "TopicList") -> "TopicList":
        o = _Obj(obj, path)
        return cls(topicList=o.get_list("topicList", _str_item), brokerAddr=o.get_str("brokerAddr"))


# ------------------------------------------------------------------------------ heartbeat
@dataclass
class SubscriptionData(_Body):
    topic: str
    subString: str = "*"
    tagsSet: list[str] = field(default_factory=list)
    codeSet: list[int] = field(default_factory=list)
    subVersion: int = 0
    expressionType: Optional[str] = "TAG"
    classFilterMode: bool = False

    def to_json(self) -> dict:
        out: dict[str, Any] = {"classFilterMode": self.classFilterMode,
                               "codeSet": list(self.codeSet)}
        if self.expressionType is not None:
            out["expressionType"] = self.expressionType
        out.update({"subString": self.subString, "subVersion": self.subVersion,
                    "tagsSet": list(self.tagsSet), "topic": self.topic})
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = "SubscriptionData") -> "SubscriptionData":
        o = _Obj(obj, path)
        return cls(topic=o.get_str("topic", required=True), subString=o.get_str("subString", "*"),
                   tagsSet=o.get_list("tagsSet", _str_item), codeSet=o.get_list("codeSet", _int_item),
                   subVersion=o.get_int("subVersion"),
                   # The C++ client sends no expressionType: RocketMQ treats that as TAG.
                   expressionType=o.get_str("expressionType", "TAG"),
                   classFilterMode=o.get_bool("classFilterMode"))


@dataclass
class ProducerData(_Body):
    groupName: str

    def to_json(self) -> dict:
        return {"groupName": self.groupName}

    @classmethod
    def from_json(cls, obj: Any, path: str = "ProducerData") -> "ProducerData":
        return cls(groupName=_Obj(obj, path).get_str("groupName", required=True))


@dataclass
class ConsumerData(_Body):
    groupName: str
    consumeType: Optional[str] = "CONSUME_PASSIVELY"        # or CONSUME_ACTIVELY (pull)
    messageModel: Optional[str] = "CLUSTERING"              # or BROADCASTING
    consumeFromWhere: Optional[str] = "CONSUME_FROM_LAST_OFFSET"
    subscriptionDataSet: list[SubscriptionData] = field(default_factory=list)
    unitMode: bool = False

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.consumeFromWhere is not None:
            out["consumeFromWhere"] = self.consumeFromWhere
        if self.consumeType is not None:
            out["consumeType"] = self.consumeType
        out["groupName"] = self.groupName
        if self.messageModel is not None:
            out["messageModel"] = self.messageModel
        out["subscriptionDataSet"] = [s.to_json() for s in self.subscriptionDataSet]
        out["unitMode"] = self.unitMode
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = "ConsumerData") -> "ConsumerData":
        o = _Obj(obj, path)
        return cls(groupName=o.get_str("groupName", required=True),
                   consumeType=o.get_str("consumeType"), messageModel=o.get_str("messageModel"),
                   consumeFromWhere=o.get_str("consumeFromWhere"),
                   subscriptionDataSet=o.get_list("subscriptionDataSet", SubscriptionData.from_json),
                   unitMode=o.get_bool("unitMode"))


@dataclass
class HeartbeatData(_Body):
    """HEART_BEAT (34) request body."""
    clientID: str
    producerDataSet: list[ProducerData] = field(default_factory=list)
    consumerDataSet: list[ConsumerData] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"clientID": self.clientID,
                "consumerDataSet": [c.to_json() for c in self.consumerDataSet],
                "producerDataSet": [p.to_json() for p in self.producerDataSet]}

    @classmethod
    def from_json(cls, obj: Any, path: str = "HeartbeatData") -> "HeartbeatData":
        o = _Obj(obj, path)
        return cls(clientID=o.get_str("clientID", required=True),
                   producerDataSet=o.get_list("producerDataSet", ProducerData.from_json),
                   consumerDataSet=o.get_list("consumerDataSet", ConsumerData.from_json))


# ------------------------------------------------------------------------------ queue locks
@dataclass(frozen=True)
class MessageQueue(_Body):
    topic: str
    brokerName: str
    queueId: int

    def to_json(self) -> dict:
        return {"brokerName": self.brokerName, "queueId": self.queueId, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: Any, path: str = "MessageQueue") -> "MessageQueue":
        o = _Obj(obj, path)
        return cls(topic=o.get_str("topic", required=True), brokerName=o.get_str("brokerName", required=True),
                   queueId=o.get_int("queueId", required=True))


def _mq_list(mqs) -> list:
    return [m.to_json() for m in sorted(mqs, key=lambda m: (m.topic, m.brokerName, m.queueId))]


@dataclass
class LockBatchRequestBody(_Body):
    """LOCK_BATCH_MQ (41) request body."""
    consumerGroup: str
    clientId: str
    mqSet: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"clientId": self.clientId, "consumerGroup": self.consumerGroup,
                "mqSet": _mq_list(self.mqSet)}

    @classmethod
    def from_json(cls, obj: Any, path: str | None = None):
        o = _Obj(obj, path or cls.__name__)
        return cls(consumerGroup=o.get_str("consumerGroup", required=True),
                   clientId=o.get_str("clientId", required=True),
                   mqSet=o.get_list("mqSet", MessageQueue.from_json))


@dataclass
class UnlockBatchRequestBody(LockBatchRequestBody):
    """UNLOCK_BATCH_MQ (42) request body (same shape as LockBatchRequestBody)."""


@dataclass
class LockBatchResponseBody(_Body):
    """LOCK_BATCH_MQ response body: the queues this client now holds."""
    lockOKMQSet: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"lockOKMQSet": _mq_list(self.lockOKMQSet)}

    @classmethod
    def from_json(cls, obj: Any, path: str = "LockBatchResponseBody") -> "LockBatchResponseBody":
        return cls(lockOKMQSet=_Obj(obj, path).get_list("lockOKMQSet", MessageQueue.from_json))


@dataclass
class GetConsumerListByGroupResponseBody(_Body):
    """GET_CONSUMER_LIST_BY_GROUP (38) response body."""
    consumerIdList: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"consumerIdList": list(self.consumerIdList)}

    @classmethod
    def from_json(cls, obj: Any, path: str = "GetConsumerListByGroupResponseBody"):
        return cls(consumerIdList=_Obj(obj, path).get_list("consumerIdList", _str_item))


ConsumerListByGroupResponseBody = GetConsumerListByGroupResponseBody


# ------------------------------------------------------------------------------ broker registration
@dataclass
class TopicConfig(_Body):
    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False

    def to_json(self) -> dict:
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.readQueueNums,
                "topicFilterType": self.topicFilterType, "topicName": self.topicName,
                "topicSysFlag": self.topicSysFlag, "writeQueueNums": self.writeQueueNums}

    @classmethod
    def from_json(cls, obj: Any, path: str = "TopicConfig") -> "TopicConfig":
        o = _Obj(obj, path)
        return cls(topicName=o.get_str("topicName", required=True),
                   readQueueNums=o.get_int("readQueueNums", 16), writeQueueNums=o.get_int("writeQueueNums", 16),
                   perm=o.get_int("perm", 6), topicFilterType=o.get_str("topicFilterType", "SINGLE_TAG"),
                   topicSysFlag=o.get_int("topicSysFlag"), order=o.get_bool("order"))


@dataclass
class DataVersion(_Body):
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def to_json(self) -> dict:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any, path: str = "DataVersion") -> "DataVersion":
        o = _Obj(obj, path)
        return cls(timestamp=o.get_int("timestamp"), counter=o.get_int("counter"))

    def next_version(self) -> None:
        """DataVersion.nextVersion(): new timestamp, counter + 1."""
        self.timestamp = int(time.time() * 1000)
        self.counter += 1


@dataclass
class TopicConfigSerializeWrapper(_Body):
    topicConfigTable: dict[str, TopicConfig] = field(default_factory=dict)
    dataVersion: DataVersion = field(default_factory=DataVersion)

    def to_json(self) -> dict:
        return {"dataVersion": self.dataVersion.to_json(),
                "topicConfigTable": {k: v.to_json() for k, v in self.topicConfigTable.items()}}

    @classmethod
    def from_json(cls, obj: Any, path: str = "TopicConfigSerializeWrapper"):
        o = _Obj(obj, path)
        dv = o.d.get("dataVersion")
        return cls(topicConfigTable=o.get_map("topicConfigTable", TopicConfig.from_json),
                   dataVersion=DataVersion.from_json(dv, f"{path}.dataVersion")
                   if dv is not None else DataVersion(0, 0))


@dataclass
class RegisterBrokerBody(_Body):
    """REGISTER_BROKER (103) request body, uncompressed JSON form.

    (RocketMQ 4.2+ brokers with ``compressedRegister=true`` send a deflated binary form
    instead, flagged by the header's ``compressed``; that form is not handled here.)
    """
    topicConfigSerializeWrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper)
    filterServerList: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"filterServerList": list(self.filterServerList),
                "topicConfigSerializeWrapper": self.topicConfigSerializeWrapper.to_json()}

    @classmethod
    def from_json(cls, obj: Any, path: str = "RegisterBrokerBody") -> "RegisterBrokerBody":
        o = _Obj(obj, path)
        w = o.d.get("topicConfigSerializeWrapper")
        return cls(topicConfigSerializeWrapper=TopicConfigSerializeWrapper.from_json(
                       w, f"{path}.topicConfigSerializeWrapper")
                   if w is not None else TopicConfigSerializeWrapper(),
                   filterServerList=o.get_list("filterServerList", _str_item))


@dataclass
class KVTable(_Body):
    """GET_KVLIST_BY_NAMESPACE response body (also REGISTER_BROKER's response body)."""
    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"table": dict(self.table)}

    @classmethod
    def from_json(cls, obj: Any, path: str = "KVTable") -> "KVTable":
        return cls(table=_Obj(obj, path).get_map("table", _str_item))


__all__ = [
    "QueueData", "BrokerData", "TopicRouteData", "ClusterInfo", "TopicList",
    "SubscriptionData", "ProducerData", "ConsumerData", "HeartbeatData",
    "MessageQueue", "LockBatchRequestBody", "UnlockBatchRequestBody", "LockBatchResponseBody",
    "GetConsumerListByGroupResponseBody", "ConsumerListByGroupResponseBody",
    "TopicConfig", "DataVersion", "TopicConfigSerializeWrapper", "RegisterBrokerBody", "KVTable",
]
