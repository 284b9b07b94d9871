"""MQClientAPI: one typed coroutine per RocketMQ request the client and admin tools make
(SPEC §3, §4, §9), built on RemotingClient — headers in, typed results out, non-success codes
raised as MQBrokerError."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

from rmq.remoting import (BodyDecodeError, ClusterInfo, ConsumerSendMsgBackRequestHeader,
                          CreateTopicRequestHeader, DeleteKVConfigRequestHeader,
                          DeleteTopicInNamesrvRequestHeader,
                          DeleteTopicRequestHeader, GetConsumeStatsRequestHeader,
                          GetConsumerListByGroupRequestHeader,
                          GetConsumerListByGroupResponseBody, GetEarliestMsgStoretimeRequestHeader,
                          GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
                          GetRouteInfoRequestHeader, GetTopicStatsInfoRequestHeader,
                          HeartbeatData, KVTable, LockBatchRequestBody, LockBatchResponseBody,
                          MessageQueue, PullMessageRequestHeader, PullMessageResponseHeader,
                          QueryConsumerOffsetRequestHeader, QueryMessageRequestHeader,
                          RemotingCommand, RequestCode, ResponseCode,
                          SearchOffsetRequestHeader, SendMessageRequestHeaderV2,
                          SendMessageResponseHeader, TopicList, TopicRouteData,
                          UnlockBatchRequestBody, UnregisterClientRequestHeader,
                          UpdateConsumerOffsetRequestHeader, ViewMessageRequestHeader,
                          EndTransactionRequestHeader, GetConsumerConnectionListRequestHeader,
                          GetTopicsByClusterRequestHeader)
from rmq.remoting.headers import CommandHeader

from . import lenient_json
from .errors import MQBrokerError, MQClientError
from .message import MessageExt, PullResult, PullStatus, SendResult, SendStatus, decode_messages
from .remoting import RemotingClient

log = logging.getLogger("rmq.client.api")

__all__ = ["MQClientAPI", "RawPullResult", "TopicOffset", "OffsetWrapper", "PULL_FLAG_COMMIT_OFFSET",
           "PULL_FLAG_SUSPEND", "PULL_FLAG_SUBSCRIPTION", "PULL_FLAG_CLASS_FILTER",
           "build_pull_sys_flag"]

# PullSysFlag
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x1 << 1
PULL_FLAG_SUBSCRIPTION = 0x1 << 2
PULL_FLAG_CLASS_FILTER = 0x1 << 3


def build_pull_sys_flag(commit_offset: bool, suspend: bool, subscription: bool,
                        class_filter: bool = False) -> int:
    """PullSysFlag.buildSysFlag."""
    flag = 0
    if commit_offset:
        flag |= PULL_FLAG_COMMIT_OFFSET
    if suspend:
        flag |= PULL_FLAG_SUSPEND
    if subscription:
        flag |= PULL_FLAG_SUBSCRIPTION
    if class_filter:
        flag |= PULL_FLAG_CLASS_FILTER
    return flag


_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass
class RawPullResult:
    """A PULL_MESSAGE response before decoding: status, offsets and the raw units."""
    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    body: bytes

    def decode(self, broker_name: str) -> PullResult:
        msgs = (decode_messages(self.body, broker_name, min_offset=self.min_offset,
                                max_offset=self.max_offset)
                if self.pull_status is PullStatus.FOUND and self.body else [])
        return PullResult(self.pull_status, self.next_begin_offset, self.min_offset,
                          self.max_offset, msgs, self.suggest_which_broker_id)


@dataclass
class TopicOffset:
    """One queue of GET_TOPIC_STATS_INFO (TopicOffset)."""
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass
class OffsetWrapper:
    """One queue of GET_CONSUME_STATS (OffsetWrapper)."""
    broker_offset: int
    consumer_offset: int
    last_timestamp: int


def _ext(header: CommandHeader | Mapping[str, Any] | None) -> dict[str, str] | None:
    if header is None:
        return None
    if isinstance(header, CommandHeader):
        return header.to_ext_fields()
    return {k: ("true" if v is True else "false" if v is False else str(v))
            for k, v in header.items() if v is not None}


def _int_field(resp: RemotingCommand, name: str, default: int | None = None) -> int:
    raw = resp.ext_fields.get(name)
    if raw is None:
        if default is not None:
            return default
        raise MQClientError(f"response has no <{name}> header field", resp.code)
    try:
        return int(raw)
    except ValueError:
        raise MQClientError(f"response header field <{name}> = {raw!r} is not a number", resp.code) from None


class MQClientAPI:
    """Typed RocketMQ requests on top of a RemotingClient (MQClientAPIImpl)."""

    def __init__(self, remoting: RemotingClient) -> None:
        self.remoting = remoting

    async def call(self, addr: str, code: int, header: CommandHeader | Mapping[str, Any] | None = None,
                   body: bytes = b"", timeout: float = 3.0) -> RemotingCommand:
        """One request/response; returns the response whatever its code."""
        return await self.remoting.invoke(addr, RemotingCommand.request(code, _ext(header), body), timeout)

    async def call_ok(self, addr: str, code: int, header: CommandHeader | Mapping[str, Any] | None = None,
                      body: bytes = b"", timeout: float = 3.0) -> RemotingCommand:
        """Like ``call`` but raises MQBrokerError unless the response code is SUCCESS."""
        resp = await self.call(addr, code, header, body, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    async def oneway(self, addr: str, code: int, header: CommandHeader | Mapping[str, Any] | None = None,
                     body: bytes = b"", timeout: float = 3.0) -> None:
        await self.remoting.invoke_oneway(addr, RemotingCommand.request(code, _ext(header), body), timeout)

    # ------------------------------------------------------------------ NameServer
    async def get_topic_route(self, namesrv: str, topic: str, timeout: float = 3.0) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; a missing topic raises MQBrokerError(TOPIC_NOT_EXIST)."""
        resp = await self.call_ok(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                  GetRouteInfoRequestHeader(topic=topic), timeout=timeout)
        if not resp.body:
            raise MQBrokerError(ResponseCode.TOPIC_NOT_EXIST, f"no route body for {topic}", namesrv)
        return TopicRouteData.decode(resp.body)

    async def get_cluster_info(self, namesrv: str, timeout: float = 3.0) -> ClusterInfo:
        resp = await self.call_ok(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=timeout)
        return ClusterInfo.decode(resp.body)

    async def delete_kv_config(self, namesrv: str, namespace: str, key: str, timeout: float = 3.0) -> None:
        await self.call_ok(namesrv, RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader(namespace=namespace, key=key),
                           timeout=timeout)

    async def get_all_topic_list(self, namesrv: str, timeout: float = 3.0) -> list[str]:
        resp = await self.call_ok(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout=timeout)
        return TopicList.decode(resp.body).topicList if resp.body else []

    async def get_topics_by_cluster(self, namesrv: str, cluster: str, timeout: float = 3.0) -> list[str]:
        resp = await self.call_ok(namesrv, RequestCode.GET_TOPICS_BY_CLUSTER,
                                  GetTopicsByClusterRequestHeader(cluster=cluster), timeout=timeout)
        return TopicList.decode(resp.body).topicList if resp.body else []

    async def delete_topic_in_namesrv(self, namesrv: str, topic: str, timeout: float = 3.0) -> None:
        await self.call_ok(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                           DeleteTopicInNamesrvRequestHeader(topic=topic), timeout=timeout)

    # ------------------------------------------------------------------ send
    async def send_message(self, addr: str, broker_name: str, topic: str, header: SendMessageRequestHeaderV2,
                           body: bytes, timeout: float, *, batch: bool = False,
                           uniq_msg_id: str = "") -> SendResult:
        """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) and processSendResponse."""
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        resp = await self.call(addr, code, header, body, timeout)
        return self.process_send_response(addr, broker_name, topic, resp, uniq_msg_id)

    async def send_message_oneway(self, addr: str, header: SendMessageRequestHeaderV2, body: bytes,
                                  timeout: float, *, batch: bool = False) -> None:
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        await self.oneway(addr, code, header, body, timeout)

    @staticmethod
    def process_send_response(addr: str, broker_name: str, topic: str, resp: RemotingCommand,
                              uniq_msg_id: str) -> SendResult:
        status = _SEND_STATUS.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        h = SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
        mq = MessageQueue(topic, broker_name, h.queueId)
        ext = resp.ext_fields
        return SendResult(status, uniq_msg_id, mq, h.queueOffset, offset_msg_id=h.msgId,
                          transaction_id=h.transactionId,
                          region_id=ext.get("MSG_REGION") or "DefaultRegion",
                          trace_on=ext.get("TRACE_ON") != "false")

    async def end_transaction_oneway(self, addr: str, header: EndTransactionRequestHeader,
                                     remark: str | None = None, timeout: float = 3.0) -> None:
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
        cmd.remark = remark
        await self.remoting.invoke_oneway(addr, cmd, timeout)

    # ------------------------------------------------------------------ pull and offsets
    async def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout: float) -> RawPullResult:
        """PULL_MESSAGE; FOUND / NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL, else MQBrokerError."""
        resp = await self.call(addr, RequestCode.PULL_MESSAGE, header, timeout=timeout)
        status = _PULL_STATUS.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        h = PullMessageResponseHeader.from_ext_fields(resp.ext_fields)
        return RawPullResult(status, h.nextBeginOffset, h.minOffset, h.maxOffset,
                             h.suggestWhichBrokerId, resp.body)

    async def query_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int,
                                    timeout: float = 3.0) -> int:
        """QUERY_CONSUMER_OFFSET; no stored offset raises MQBrokerError(QUERY_NOT_FOUND)."""
        resp = await self.call_ok(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                                  QueryConsumerOffsetRequestHeader(consumerGroup=group, topic=topic,
                                                                   queueId=queue_id), timeout=timeout)
        return _int_field(resp, "offset")

    async def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int,
                                     offset: int, *, oneway: bool = False, timeout: float = 3.0) -> None:
        header = UpdateConsumerOffsetRequestHeader(consumerGroup=group, topic=topic, queueId=queue_id,
                                                   commitOffset=offset)
        if oneway:
            await self.oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=timeout)
        else:
            await self.call_ok(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=timeout)

    async def get_max_offset(self, addr: str, topic: str, queue_id: int, timeout: float = 3.0) -> int:
        resp = await self.call_ok(addr, RequestCode.GET_MAX_OFFSET,
                                  GetMaxOffsetRequestHeader(topic=topic, queueId=queue_id), timeout=timeout)
        return _int_field(resp, "offset")

    async def get_min_offset(self, addr: str, topic: str, queue_id: int, timeout: float = 3.0) -> int:
        resp = await self.call_ok(addr, RequestCode.GET_MIN_OFFSET,
                                  GetMinOffsetRequestHeader(topic=topic, queueId=queue_id), timeout=timeout)
        return _int_field(resp, "offset")

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int,
                            timeout: float = 3.0) -> int:
        resp = await self.call_ok(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                  SearchOffsetRequestHeader(topic=topic, queueId=queue_id,
                                                            timestamp=timestamp_ms), timeout=timeout)
        return _int_field(resp, "offset")

    async def get_earliest_msg_storetime(self, addr: str, topic: str, queue_id: int,
                                         timeout: float = 3.0) -> int:
        resp = await self.call_ok(addr, RequestCode.GET_EARLIEST_MSG_STORETIME,
                                  GetEarliestMsgStoretimeRequestHeader(topic=topic, queueId=queue_id),
                                  timeout=timeout)
        return _int_field(resp, "timestamp")

    # ------------------------------------------------------------------ clients and groups
    async def send_heartbeat(self, addr: str, data: HeartbeatData, timeout: float = 3.0) -> int:
        """HEART_BEAT; returns the broker's version from the response."""
        resp = await self.call_ok(addr, RequestCode.HEART_BEAT, body=data.encode(), timeout=timeout)
        return resp.version

    async def unregister_client(self, addr: str, client_id: str, producer_group: str | None,
                                consumer_group: str | None, timeout: float = 3.0) -> None:
        await self.call_ok(addr, RequestCode.UNREGISTER_CLIENT,
                           UnregisterClientRequestHeader(clientID=client_id, producerGroup=producer_group,
                                                         consumerGroup=consumer_group), timeout=timeout)

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float = 3.0) -> list[str]:
        resp = await self.call_ok(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                  GetConsumerListByGroupRequestHeader(consumerGroup=group), timeout=timeout)
        if not resp.body:
            return []
        return GetConsumerListByGroupResponseBody.decode(resp.body).consumerIdList

    async def consumer_send_message_back(self, addr: str, msg: MessageExt, group: str, delay_level: int,
                                         max_reconsume_times: int, timeout: float = 5.0) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker re-stores the message to %RETRY%group."""
        header = ConsumerSendMsgBackRequestHeader(offset=msg.commit_log_offset, group=group,
                                                  delayLevel=delay_level, originMsgId=msg.msg_id,
                                                  originTopic=msg.topic, unitMode=False,
                                                  maxReconsumeTimes=max_reconsume_times)
        await self.call_ok(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout=timeout)

    async def lock_batch_mq(self, addr: str, body: LockBatchRequestBody, timeout: float = 3.0) -> list[MessageQueue]:
        resp = await self.call_ok(addr, RequestCode.LOCK_BATCH_MQ, body=body.encode(), timeout=timeout)
        return LockBatchResponseBody.decode(resp.body).lockOKMQSet if resp.body else []

    async def unlock_batch_mq(self, addr: str, body: UnlockBatchRequestBody, *, oneway: bool = False,
                              timeout: float = 3.0) -> None:
        if oneway:
            await self.oneway(addr, RequestCode.UNLOCK_BATCH_MQ, body=body.encode(), timeout=timeout)
        else:
            await self.call_ok(addr, RequestCode.UNLOCK_BATCH_MQ, body=body.encode(), timeout=timeout)

    # ------------------------------------------------------------------ messages by key / id
    async def query_message(self, addr: str, topic: str, key: str, max_num: int, begin_ms: int,
                            end_ms: int, timeout: float = 10.0, *, uniq_key: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE (index lookup); QUERY_NOT_FOUND gives an empty list.  ``uniq_key``
        looks up the client msgId (MixAll.UNIQUE_MSG_QUERY_FLAG)."""
        ext = QueryMessageRequestHeader(topic=topic, key=key, maxNum=max_num, beginTimestamp=begin_ms,
                                        endTimestamp=end_ms).to_ext_fields()
        if uniq_key:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await self.call(addr, RequestCode.QUERY_MESSAGE, ext, timeout=timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return decode_messages(resp.body) if resp.body else []

    async def view_message(self, addr: str, phy_offset: int, timeout: float = 3.0) -> MessageExt:
        resp = await self.call_ok(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                  ViewMessageRequestHeader(offset=phy_offset), timeout=timeout)
        msgs = decode_messages(resp.body) if resp.body else []
        if not msgs:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, "VIEW_MESSAGE_BY_ID returned no message", addr)
        return msgs[0]

    # ------------------------------------------------------------------ admin
    async def create_topic(self, addr: str, topic: str, read_queue_nums: int, write_queue_nums: int,
                           perm: int, *, order: bool = False, topic_filter_type: str = "SINGLE_TAG",
                           topic_sys_flag: int = 0, default_topic: str = "TBW102",
                           timeout: float = 3.0) -> None:
        await self.call_ok(addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                           CreateTopicRequestHeader(topic=topic, defaultTopic=default_topic,
                                                    readQueueNums=read_queue_nums,
                                                    writeQueueNums=write_queue_nums, perm=perm,
                                                    topicFilterType=topic_filter_type,
                                                    topicSysFlag=topic_sys_flag, order=order),
                           timeout=timeout)

    async def delete_topic_in_broker(self, addr: str, topic: str, timeout: float = 3.0) -> None:
        await self.call_ok(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic),
                           timeout=timeout)

    async def get_broker_runtime_info(self, addr: str, timeout: float = 3.0) -> dict[str, str]:
        resp = await self.call_ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=timeout)
        return KVTable.decode(resp.body).table if resp.body else {}

    async def get_config_table(self, addr: str, name: str, timeout: float = 3.0) -> bytes:
        """GET_CONFIG_TABLE_EXT (this project's): a broker plugin's config table, JSON bytes."""
        resp = await self.call_ok(addr, RequestCode.GET_CONFIG_TABLE_EXT, {"name": name}, timeout=timeout)
        return resp.body or b""

    async def get_topic_stats_info(self, addr: str, topic: str, timeout: float = 3.0) -> dict[MessageQueue, TopicOffset]:
        """GET_TOPIC_STATS_INFO -> TopicStatsTable (fastjson writes MessageQueue map keys as objects)."""
        resp = await self.call_ok(addr, RequestCode.GET_TOPIC_STATS_INFO,
                                  GetTopicStatsInfoRequestHeader(topic=topic), timeout=timeout)
        table = _mq_table(resp.body, "offsetTable", "TopicStatsTable")
        return {mq: TopicOffset(int(v.get("minOffset", 0)), int(v.get("maxOffset", 0)),
                                int(v.get("lastUpdateTimestamp", 0))) for mq, v in table.items()}

    async def get_consume_stats(self, addr: str, group: str, topic: str | None = None,
                                timeout: float = 3.0) -> tuple[dict[MessageQueue, OffsetWrapper], float]:
        """GET_CONSUME_STATS -> (ConsumeStats.offsetTable, consumeTps)."""
        resp = await self.call_ok(addr, RequestCode.GET_CONSUME_STATS,
                                  GetConsumeStatsRequestHeader(consumerGroup=group, topic=topic),
                                  timeout=timeout)
        obj = lenient_json.loads(resp.body) if resp.body else {}
        table = _mq_table_obj(obj, "offsetTable", "ConsumeStats")
        tps = float(obj.get("consumeTps", 0) or 0) if isinstance(obj, dict) else 0.0
        return ({mq: OffsetWrapper(int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
                                   int(v.get("lastTimestamp", 0))) for mq, v in table.items()}, tps)

    async def get_consumer_connection_list(self, addr: str, group: str, timeout: float = 3.0) -> dict:
        resp = await self.call_ok(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                  GetConsumerConnectionListRequestHeader(consumerGroup=group), timeout=timeout)
        return lenient_json.loads(resp.body) if resp.body else {}


def _mq_table(body: bytes, key: str, what: str) -> dict[MessageQueue, dict]:
    if not body:
        return {}
    return _mq_table_obj(lenient_json.loads(body), key, what)


def _mq_table_obj(obj: Any, key: str, what: str) -> dict[MessageQueue, dict]:
    if not isinstance(obj, dict):
        raise BodyDecodeError(f"{what}: expected a JSON object")
    raw = obj.get(key) or {}
    out: dict[MessageQueue, dict] = {}
    items = raw.items() if isinstance(raw, dict) else (
        ((e.get("messageQueue") or e.get("mq") or e), e) for e in raw if isinstance(e, dict))
    for k, v in items:
        mq = lenient_json.to_message_queue(k)
        if mq is None or not isinstance(v, dict):
            raise BodyDecodeError(f"{what}.{key}: entry {k!r} is not a MessageQueue -> object pair")
        out[mq] = v
    return out
