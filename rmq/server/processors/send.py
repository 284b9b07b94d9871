"""SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE (checks, topic auto-creation
from TBW102, %RETRY% -> %DLQ%, batch bodies), CONSUMER_SEND_MSG_BACK and END_TRANSACTION (SPEC §3, §7, §8)."""
from __future__ import annotations

import asyncio
import logging
import random

from rmq.broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    SCHEDULE_TOPIC,
)
from rmq.common.log_limit import RateLimitedLog, host_of
from rmq.common.message import (
    MULTI_TAGS_FLAG,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT_STORE_MSG_OK,
    create_message_id,
    properties_from_bytes,
)
from rmq.remoting import (
    TRANSACTION_NOT_TYPE,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageResponseHeader,
    decode_send_message_header,
)
from rmq.server.processors.common import BrokerServices, response
from rmq.server.processors.send_frame import SendFrame
from rmq.store import Message, MessageBatch, PutBatchResult, PutMessageResult, PutMessageStatus
from rmq.store.message_store import validate_topic

log = logging.getLogger("rmq.broker.remoting")
# a producer in a retry loop to a topic that is not there gets 5 lines, then one per 10 s (issue 22)
missing_topic_log = RateLimitedLog(log, "sends to missing topics", prefix="broker: ")

DLQ_NUMS_PER_GROUP = 1
#: TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC,
                                     "TRANS_CHECK_MAX_TIME_TOPIC"})
_OK_STATUSES = {PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
                PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
                PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
                PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE}
_random = random.Random()


class SendMessageProcessor:
    def __init__(self, svc: BrokerServices, *, fast: bool = True) -> None:
        self.svc = svc
        #: the common request with little Python (send_frame.py); None: every request takes process()
        self.fast = SendFrame(self, NOT_ALLOWED_SEND_TOPICS) if fast else None

    def table(self) -> dict:
        return {RequestCode.SEND_MESSAGE: self.process, RequestCode.SEND_MESSAGE_V2: self.process,
                RequestCode.SEND_BATCH_MESSAGE: self.process,
                RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
                RequestCode.END_TRANSACTION: self.end_transaction}

    # ------------------------------------------------------------------ entry
    def process(self, conn, req: RemotingCommand):
        if self.fast is not None:
            resp = self.fast.try_send(conn, req)
            if resp is not None:
                return resp
        h = decode_send_message_header(req)
        svc = self.svc
        err, tc = self._msg_check(conn, req, h)
        if err is not None:
            return err
        batch = bool(h.batch) or req.code == RequestCode.SEND_BATCH_MESSAGE
        body = req.body or b""
        max_size = svc.store_config.maxMessageSize
        if len(body) > max_size:
            return response(req, ResponseCode.MESSAGE_ILLEGAL,
                            f"the message body size {len(body)} exceeds maxMessageSize {max_size}")
        queue_id = h.queueId
        if queue_id is None or queue_id < 0:
            queue_id = _random.randrange(max(1, tc.writeQueueNums))
        sys_flag = h.sysFlag or 0
        if tc.topicFilterType == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        props = properties_from_bytes(h.properties.encode("utf-8")) if h.properties else {}
        born = conn.remote_host if hasattr(conn, "remote_host") else ("127.0.0.1", 0)
        reconsume = h.reconsumeTimes or 0
        topic = h.topic
        if batch:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return response(req, ResponseCode.MESSAGE_ILLEGAL,
                                f"batch request does not support retry group {topic}")
            # The body goes to the store as it came (MessageExtBatch); put_batch refuses delay
            # levels and transaction flags in it, as RocketMQ does.
            return self._put_batch(req, MessageBatch(topic, queue_id, body, props, sys_flag, h.bornTimestamp or 0,
                                                     born, reconsume))
        topic, queue_id, err = self._handle_retry_and_dlq(req, h, topic, queue_id)
        if err is not None:
            return err
        if topic != h.topic and topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            # a dead letter is stored at once, not through the delay levels (msg.setDelayTimeLevel(0))
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        msgs = [Message(topic, body, queue_id, h.flag or 0, props, sys_flag, h.bornTimestamp, born, reconsume)]
        if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            # A half message (SPEC §8): stored invisible until END_TRANSACTION commits it.
            txn = getattr(svc.controller, "transaction_service", None)
            if txn is None or svc.broker_config.rejectTransactionMessage:
                return response(req, ResponseCode.NO_PERMISSION,
                                f"the broker[{svc.broker_ip}] sending transaction message is forbidden")
            return self._put(req, msgs, lambda ms: txn.prepare(ms[0]))
        return self._put(req, msgs)

    # ------------------------------------------------------------------ CONSUMER_SEND_MSG_BACK
    def consumer_send_msg_back(self, conn, req: RemotingCommand):
        """A consumer gives a message back (consume failed): rmq.broker.retry stores a copy to
        %RETRY%<group> through delay level 3 + reconsumeTimes, or to %DLQ%<group> (SPEC §7)."""
        from rmq.broker.retry import consumer_send_msg_back
        h = ConsumerSendMsgBackRequestHeader.from_command(req)
        res = consumer_send_msg_back(self.svc.controller, offset=h.offset, group=h.group, delay_level=h.delayLevel,
                                     origin_msg_id=h.originMsgId, origin_topic=h.originTopic,
                                     max_reconsume_times=h.maxReconsumeTimes)
        if res.ok:
            if res.topic:
                self.svc.topics_changed()  # a new %RETRY% / %DLQ% topic must reach the NameServers
            return response(req)
        code = getattr(ResponseCode, res.code, ResponseCode.SYSTEM_ERROR)
        return response(req, code, res.remark)

    # ------------------------------------------------------------------ END_TRANSACTION
    def end_transaction(self, conn, req: RemotingCommand):
        """EndTransactionProcessor: commit (8) re-puts the half message to its real topic, rollback (12)
        drops it; 0 (unknown) leaves it for the check-back and gets no response."""
        h = EndTransactionRequestHeader.from_command(req)
        svc = self.svc
        if svc.is_slave:
            return response(req, ResponseCode.SLAVE_NOT_AVAILABLE,
                            "Can't commit or rollback a transaction on a slave broker")
        if h.commitOrRollback == TRANSACTION_NOT_TYPE:
            log.warning("END_TRANSACTION with state unknown from %s (%s); the check-back will ask again",
                        conn.remote_addr, "check" if h.fromTransactionCheck else "producer")
            return None
        txn = getattr(svc.controller, "transaction_service", None)
        if txn is None:
            return response(req, ResponseCode.SYSTEM_ERROR, "this broker has no transaction service")
        res = txn.end(h.commitLogOffset, h.commitOrRollback, producer_group=h.producerGroup,
                      tran_state_table_offset=h.tranStateTableOffset)
        if res.ok:
            return response(req)
        return response(req, getattr(ResponseCode, res.code, ResponseCode.SYSTEM_ERROR), res.remark)

    # ------------------------------------------------------------------ checks
    def _msg_check(self, conn, req, h):
        svc = self.svc
        topic = h.topic
        if not svc.broker_writeable():
            return response(req, ResponseCode.NO_PERMISSION,
                            f"the broker[{svc.broker_ip}] sending message is forbidden"), None
        if svc.is_slave:
            return response(req, ResponseCode.SERVICE_NOT_AVAILABLE,
                            "service not available now: this broker is a slave (brokerRole SLAVE)"), None
        if topic == AUTO_CREATE_TOPIC_KEY_TOPIC or topic == svc.broker_config.brokerClusterName:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"the topic[{topic}] is conflict with system reserved words."), None
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return response(req, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."), None
        reason = validate_topic(topic)
        if reason:
            return response(req, ResponseCode.SYSTEM_ERROR, f"the specified topic is illegal: {reason}"), None
        tc = svc.controller.topic_config_manager.get(topic)
        if tc is None:
            missing_topic_log.warning(host_of(conn), "topic does not exist",
                                      "the topic %s not exist, producer: %s", topic, conn.remote_addr)
            tc = svc.create_topic_in_send_message_method(topic, h.defaultTopic, h.defaultTopicQueueNums or 0)
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = svc.create_topic_in_send_message_back_method(topic, 1, PERM_WRITE | PERM_READ)
            if tc is None:
                return response(req, ResponseCode.TOPIC_NOT_EXIST,
                                f"topic[{topic}] not exist, apply first please!"), None
        valid = max(tc.writeQueueNums, tc.readQueueNums)
        if h.queueId is not None and h.queueId >= valid:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"request queueId[{h.queueId}] is illegal, {tc} Producer: {conn.remote_addr}"), None
        if not tc.perm & PERM_WRITE:
            return response(req, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"), None
        return None, tc

    def _handle_retry_and_dlq(self, req, h, topic: str, queue_id: int):
        """A message sent to %RETRY%<group> past maxReconsumeTimes goes to %DLQ%<group>."""
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic, queue_id, None
        svc = self.svc
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        sg = svc.controller.subscription_group_manager.find(group)
        if sg is None:
            return topic, queue_id, response(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                             f"subscription group not exist, {group}")
        max_times = h.maxReconsumeTimes if h.maxReconsumeTimes is not None else sg.retryMaxTimes
        if (h.reconsumeTimes or 0) >= max_times:
            dlq = DLQ_GROUP_TOPIC_PREFIX + group
            svc.create_topic_in_send_message_back_method(dlq, DLQ_NUMS_PER_GROUP, PERM_WRITE)
            log.info("message to %s reached maxReconsumeTimes %d: goes to %s", topic, max_times, dlq)
            return dlq, _random.randrange(DLQ_NUMS_PER_GROUP), None
        return topic, queue_id, None

    # ------------------------------------------------------------------ put and answer
    def _put(self, req, msgs: list[Message], put=None):
        svc = self.svc
        if svc.executor is None:
            res = (put or svc.controller.put_messages)(msgs)
            ha = self._sync_slave(res.ok and res.results, msgs[-1].properties)
            if ha is not None:  # SYNC_MASTER: answer once the slave has the bytes
                return self._await_slave(ha, req, msgs, res)
            return self._answer(req, msgs, res)
        if put is not None:
            return self._put_in_executor(req, msgs, put)
        # SYNC_FLUSH: append on the loop, wait for the group commit's fsync in a thread.
        res = svc.controller.put_messages(msgs, wait_flush=False)
        if res.ok and svc.store.needs_flush_wait(msgs[-1]):
            return self._await_flush(req, msgs, res)
        ha = self._sync_slave(res.ok and res.results, msgs[-1].properties)
        if ha is not None:
            return self._await_slave(ha, req, msgs, res)
        return self._answer(req, msgs, res)

    def _sync_slave(self, ok, props: dict):
        """The HAService to wait on (CommitLog.handleHA): a SYNC_MASTER, a stored message, WAIT not false."""
        ha = getattr(self.svc.controller, "ha_service", None)
        if ok and ha is not None and ha.sync_master and props.get(PROPERTY_WAIT_STORE_MSG_OK) != "false":
            return ha
        return None

    async def _slave_status(self, ha, end_offset: int, status: PutMessageStatus) -> PutMessageStatus:
        replicated = await ha.wait_for_slave(end_offset)
        return status if replicated is PutMessageStatus.PUT_OK else replicated

    async def _await_slave(self, ha, req, msgs, res: PutMessageResult):
        last = res.results[-1]
        res.status = await self._slave_status(ha, last.wrote_offset + last.wrote_bytes, res.status)
        return self._answer(req, msgs, res)

    def _put_batch(self, req, batch: MessageBatch):
        svc = self.svc
        if svc.executor is None:
            res = svc.controller.put_batch(batch)
            ha = self._sync_slave(res.ok, batch.properties)
            if ha is not None:
                return self._await_batch_slave(ha, req, batch, res)
            return self._answer_batch(req, batch, res)
        res = svc.controller.put_batch(batch, wait_flush=False)
        if res.ok and svc.store.needs_flush_wait() and batch.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false":
            return self._await_batch_flush(req, batch, res)
        ha = self._sync_slave(res.ok, batch.properties)
        if ha is not None:
            return self._await_batch_slave(ha, req, batch, res)
        return self._answer_batch(req, batch, res)

    async def _await_batch_slave(self, ha, req, batch: MessageBatch, res: PutBatchResult):
        res.status = await self._slave_status(ha, res.end_offset, res.status)
        return self._answer_batch(req, batch, res)

    async def _await_batch_flush(self, req, batch: MessageBatch, res: PutBatchResult):
        flushed = await asyncio.get_running_loop().run_in_executor(self.svc.executor, self.svc.store.wait_flushed,
                                                                   res.end_offset)
        if not flushed:
            res.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        ha = self._sync_slave(True, batch.properties)
        if ha is not None:
            res.status = await self._slave_status(ha, res.end_offset, res.status)
        return self._answer_batch(req, batch, res)

    async def _await_flush(self, req, msgs, res: PutMessageResult):
        last = res.results[-1]
        flushed = await asyncio.get_running_loop().run_in_executor(
            self.svc.executor, self.svc.store.wait_flushed, last.wrote_offset + last.wrote_bytes)
        if not flushed:
            res = PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, res.results,
                                   remark="not flushed within syncFlushTimeout")
        ha = self._sync_slave(True, msgs[-1].properties)
        if ha is not None:
            res.status = await self._slave_status(ha, last.wrote_offset + last.wrote_bytes, res.status)
        return self._answer(req, msgs, res)

    async def _put_in_executor(self, req, msgs, put):
        # A put that waits for fsync itself (the half-message store): keep it off the event loop.
        res = await asyncio.get_running_loop().run_in_executor(self.svc.executor, put, msgs)
        ha = self._sync_slave(res.ok and res.results, msgs[-1].properties)
        if ha is not None:
            last = res.results[-1]
            res.status = await self._slave_status(ha, last.wrote_offset + last.wrote_bytes, res.status)
        return self._answer(req, msgs, res)

    def _answer(self, req, msgs: list[Message], res: PutMessageResult) -> RemotingCommand:
        if _OK_STATUSES.get(res.status) is None or not res.results:
            return self._refused(req, res.status, res.remark)
        queue_id = msgs[0].queue_id
        if msgs[0].topic in (SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC):
            # a delayed or half message was stored elsewhere: answer with the queue it was sent to
            # (as Java's queueIdInt); the queue offset is the one in the system topic
            real = msgs[0].properties.get("REAL_QID", "")
            queue_id = int(real) if real.lstrip("-").isdigit() else queue_id
        return self._stored(req, res.status, [r.wrote_offset for r in res.results], queue_id, res.results[0].queue_offset)

    def _answer_batch(self, req, batch: MessageBatch, res: PutBatchResult) -> RemotingCommand:
        if _OK_STATUSES.get(res.status) is None or not res.count:
            return self._refused(req, res.status, res.remark)
        return self._stored(req, res.status, res.commit_log_offsets(), batch.queue_id, res.queue_offset)

    def _stored(self, req, status: PutMessageStatus, offsets: list[int], queue_id: int, queue_offset: int):
        """SendMessageResponseHeader: msgId holds the offsetMsgIds of all stored units, comma-joined."""
        store = self.svc.store
        ext = SendMessageResponseHeader(msgId=",".join(create_message_id(store.store_host, o) for o in offsets),
                                        queueId=queue_id, queueOffset=queue_offset).to_ext_fields()
        ext["MSG_REGION"] = "DefaultRegion"
        ext["TRACE_ON"] = "true"
        return response(req, _OK_STATUSES[status], None, ext)

    @staticmethod
    def _refused(req, status: PutMessageStatus, remark: str) -> RemotingCommand:
        if status is PutMessageStatus.CREATE_MAPEDFILE_FAILED:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"create mapped file failed, server is busy or broken. {remark}".strip())
        if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            return response(req, ResponseCode.MESSAGE_ILLEGAL,
                            f"the message is illegal, maybe msg body or properties length not matched: {remark}")
        if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            return response(req, ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"service not available now: {remark or 'the disk may be full or the store shut down'}")
        if status is PutMessageStatus.OS_PAGECACHE_BUSY:
            return response(req, ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while")
        return response(req, ResponseCode.SYSTEM_ERROR, remark or status.value)
