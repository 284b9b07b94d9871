"""ConsumerManageProcessor and the offset queries of AdminBrokerProcessor: QUERY/UPDATE_CONSUMER_OFFSET,
GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME (SPEC §4)."""
from __future__ import annotations

from rmq.remoting import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmq.server.processors.common import BrokerServices, response

#: accessMessageInMemoryMaxRatio: a message this far (in % of RAM) behind the log's end is "on disk".
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 40


class OffsetProcessor:
    def __init__(self, svc: BrokerServices) -> None:
        self.svc = svc

    def table(self) -> dict:
        C = RequestCode
        return {C.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
                C.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
                C.GET_MAX_OFFSET: self.get_max_offset,
                C.GET_MIN_OFFSET: self.get_min_offset,
                C.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
                C.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime}

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        """DefaultMessageStore.checkInDiskByConsumeOffset: is that message so far behind the commitlog's
        end that it is no longer in the page cache (more than 40% of RAM behind)?"""
        store = self.svc.store
        cq = store.get_consume_queue(topic, queue_id)
        unit = cq.get_unit(consume_offset) if cq is not None else None
        if unit is None:
            return False
        diff = store.commitlog.max_offset - unit[0]
        return diff > self.svc.memory_bytes * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO / 100

    def query_consumer_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_command(req)
        ctrl = self.svc.controller
        offset = ctrl.offset_manager.query_offset(h.consumerGroup, h.topic, h.queueId)
        if offset >= 0:
            return response(req, ext_fields=QueryConsumerOffsetResponseHeader(offset).to_ext_fields())
        # No committed offset: RocketMQ answers 0 while the queue still starts at 0 and its first
        # message is in memory (a new group reads from the beginning), else QUERY_NOT_FOUND;
        # a request with setZeroIfNotFound=false (RocketMQ 5) always gets QUERY_NOT_FOUND.
        if h.setZeroIfNotFound is False:
            return response(req, ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first")
        min_offset = self.svc.store.get_min_offset_in_queue(h.topic, h.queueId)
        if min_offset <= 0 and not self.check_in_disk_by_consume_offset(h.topic, h.queueId, 0):
            return response(req, ext_fields=QueryConsumerOffsetResponseHeader(0).to_ext_fields())
        return response(req, ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_consumer_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_command(req)
        om = self.svc.controller.offset_manager
        # A Kafka listener of another broker committing for a Kafka group (its `kafkaDurable` field):
        # journaled before the answer, as Kafka's OffsetCommit. RocketMQ clients never send it: their
        # offsets are persisted every 5 s, as in Apache RocketMQ.
        durable = (req.ext_fields or {}).get("kafkaDurable") == "true"
        om.commit_offset(h.consumerGroup, h.topic, h.queueId, h.commitOffset, durable=durable)
        if durable:
            try:
                om.journal_sync()
            except OSError as exc:
                return response(req, ResponseCode.SYSTEM_ERROR, f"writing the consumer offset journal failed: {exc}")
        return response(req)

    def get_max_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_command(req)
        off = self.svc.store.get_max_offset_in_queue(h.topic, h.queueId)
        return response(req, ext_fields=GetMaxOffsetResponseHeader(off).to_ext_fields())

    def get_min_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_command(req)
        off = self.svc.store.get_min_offset_in_queue(h.topic, h.queueId)
        return response(req, ext_fields=GetMinOffsetResponseHeader(off).to_ext_fields())

    def search_offset_by_timestamp(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_command(req)
        off = self.svc.store.get_offset_in_queue_by_time(h.topic, h.queueId, h.timestamp, nearest=True)
        return response(req, ext_fields=SearchOffsetResponseHeader(off).to_ext_fields())

    def get_earliest_msg_storetime(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_command(req)
        ts = self.svc.store.get_earliest_message_time(h.topic, h.queueId)
        return response(req, ext_fields=GetEarliestMsgStoretimeResponseHeader(ts).to_ext_fields())
