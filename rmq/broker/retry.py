"""Consumer retry and dead letters: CONSUMER_SEND_MSG_BACK (SPEC §7).

A message a consumer failed is stored again in %RETRY%<group> through the delay mechanism at
level 3 + reconsumeTimes (10s, 30s, 1m, 2m ...); once reconsumeTimes reaches maxReconsumeTimes
(16 by default, per group or per request) it goes to %DLQ%<group>, a write-only topic that
normal consumers do not read. Follows SendMessageProcessor.consumerSendMsgBack of RocketMQ 4.x.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from rmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    create_message_id,
    decode_message,
)

from ..store import Message, PutMessageResult, PutMessageStatus
from .topic_config import DLQ_GROUP_TOPIC_PREFIX, PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX, TopicConfig

log = logging.getLogger("rmq.broker.retry")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass
class SendBackResult:
    ok: bool
    code: str  # "SUCCESS", "SUBSCRIPTION_GROUP_NOT_EXIST", "NO_PERMISSION", "SYSTEM_ERROR"
    remark: str = ""
    topic: str = ""
    put: PutMessageResult | None = None


def consumer_send_msg_back(controller, *, offset: int, group: str, delay_level: int,
                           origin_msg_id: str | None = None, origin_topic: str | None = None,
                           max_reconsume_times: int | None = None) -> SendBackResult:
    sg = controller.subscription_group_manager.find(group)
    if sg is None:
        return SendBackResult(False, "SUBSCRIPTION_GROUP_NOT_EXIST", f"subscription group not exist, {group}")
    if not controller.broker_config.brokerPermission & PERM_WRITE:
        return SendBackResult(False, "NO_PERMISSION", "the broker is not writeable")
    if sg.retryQueueNums <= 0:
        return SendBackResult(True, "SUCCESS", "retry disabled for this group (retryQueueNums 0)")
    store = controller.store
    ext = store.look_message_by_offset(offset)
    if ext is None:
        return SendBackResult(False, "SYSTEM_ERROR", f"look message by offset failed, {offset}")
    props = dict(ext.properties)
    if PROPERTY_RETRY_TOPIC not in props:
        props[PROPERTY_RETRY_TOPIC] = ext.topic
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    max_times = max_reconsume_times if max_reconsume_times is not None and max_reconsume_times >= 0 else sg.retryMaxTimes
    if ext.reconsume_times >= max_times or delay_level < 0:
        topic = dlq_topic(group)
        tc = _ensure_topic(controller, topic, 1, PERM_WRITE)  # DLQ: write-only, invisible to consumers
        queue_id = random.randrange(tc.writeQueueNums)
    else:
        topic = retry_topic(group)
        tc = _ensure_topic(controller, topic, sg.retryQueueNums, PERM_READ | PERM_WRITE)
        queue_id = random.randrange(tc.writeQueueNums)
        if delay_level == 0:
            delay_level = 3 + ext.reconsume_times
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    props[PROPERTY_ORIGIN_MESSAGE_ID] = origin_msg_id or props.get(PROPERTY_ORIGIN_MESSAGE_ID) or ext.msg_id
    msg = Message(topic, ext.body, queue_id=queue_id, flag=ext.flag, properties=props, sys_flag=ext.sys_flag,
                  born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                  reconsume_times=ext.reconsume_times + 1)
    res = store.put_messages([msg])
    if not res.ok:
        return SendBackResult(False, "SYSTEM_ERROR", f"{res.status.value}: {res.remark}", topic, res)
    log.debug("message %s of group %s sent back to %s (reconsumeTimes %d)", create_message_id(store.store_host, offset),
              group, topic, ext.reconsume_times + 1)
    return SendBackResult(True, "SUCCESS", "", topic, res)


def _ensure_topic(controller, topic: str, queues: int, perm: int) -> TopicConfig:
    tc = controller.get_topic(topic)
    if tc is None:
        tc = controller.topic_config_manager.create_if_absent(topic, queues, perm)
    return tc


def resend_from_dlq(controller, group: str, *, max_count: int = 1000, target_topic: str | None = None) -> int:
    """Admin action: put the messages of %DLQ%<group> not resent yet back to ``target_topic``
    (default: each message's original topic, RETRY_TOPIC) with reconsumeTimes reset; at most
    ``max_count``. Returns how many were resent. The DLQ's read position is kept in the offset
    table under the group "DLQ_RESEND", so a message is resent once. A message whose destination
    topic does not exist stops the scan there (nothing is skipped)."""
    store = controller.store
    topic = dlq_topic(group)
    tc = controller.get_topic(topic)
    if tc is None:
        return 0
    sent = 0
    om = controller.offset_manager
    for qid in range(max(tc.writeQueueNums, tc.readQueueNums)):
        pos = max(om.query_offset("DLQ_RESEND", topic, qid), store.get_min_offset_in_queue(topic, qid), 0)
        end = store.get_max_offset_in_queue(topic, qid)
        blocked = False
        while pos < end and sent < max_count and not blocked:
            res = store.get_message("DLQ_RESEND", topic, qid, pos, min(32, max_count - sent), max_bytes=8 << 20)
            if not res.messages:
                if res.next_begin_offset > pos:
                    pos = res.next_begin_offset
                    continue
                break
            for raw, qoff in zip(res.messages, res.queue_offsets):
                ext = decode_message(raw)
                props = dict(ext.properties)
                dest = target_topic or props.get(PROPERTY_RETRY_TOPIC) or ext.topic
                props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
                dtc = controller.get_topic(dest)
                if dtc is None or dtc.writeQueueNums <= 0:
                    log.warning("resend from %s: destination topic %s does not exist; stopped at offset %d",
                                topic, dest, qoff)
                    blocked = True
                    break
                m = Message(dest, ext.body, queue_id=random.randrange(dtc.writeQueueNums), flag=ext.flag,
                            properties=props, sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp,
                            born_host=ext.born_host)
                if store.put_messages([m]).status is not PutMessageStatus.PUT_OK:
                    blocked = True
                    break
                sent += 1
                pos = qoff + 1
            else:
                pos = max(pos, res.next_begin_offset)
        om.commit_offset("DLQ_RESEND", topic, qid, pos)
    return sent
