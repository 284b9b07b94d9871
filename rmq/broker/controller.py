"""BrokerController: the broker services every listener calls — store, topics, offsets, groups,
long polling (SPEC §3-§4). Knows no wire format."""
from __future__ import annotations

import logging
import os
import threading

from ..config import RmqConfig
from ..store import (
    DefaultMessageStore, EncodedUnits, Message, PutBatchResult, PutMessageResult, PutMessageStatus,
)
from ..store.message_store import validate_topic
from .long_polling import MessageArrivalHub
from .offsets import ConsumerOffsetManager
from .subscription_group import SubscriptionGroupManager
from .topic_config import PERM_READ, PERM_WRITE, TopicConfig, TopicConfigManager

log = logging.getLogger("rmq.broker")


class TopicError(Exception):
    """A put or get that the topic's state refuses; `code` names the reason."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class BrokerController:
    def __init__(self, cfg: RmqConfig, *, store: DefaultMessageStore | None = None):
        self.cfg = cfg
        self.broker_config = cfg.broker
        self.store = store or DefaultMessageStore(cfg.store)
        config_dir = os.path.join(self.store.root, "config")
        self.config_dir = config_dir
        self.topic_config_manager = TopicConfigManager(config_dir, cfg.broker)
        self.offset_manager = ConsumerOffsetManager(config_dir)
        self.subscription_group_manager = SubscriptionGroupManager(config_dir, cfg.broker.autoCreateSubscriptionGroup)
        self.arrival_hub = MessageArrivalHub(self.store.get_max_offset_in_queue)
        self.store.message_arriving_listener = self.arrival_hub.notify
        self._stop = threading.Event()
        self._persist_thread: threading.Thread | None = None
        self.started = False
        from .schedule import ScheduleMessageService
        from .transaction import TransactionalMessageService
        self.schedule_service = ScheduleMessageService(self)
        self.transaction_service = TransactionalMessageService(self)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.store.load()
        self.topic_config_manager.load()
        self.offset_manager.load()
        self.subscription_group_manager.load()
        self.topic_config_manager.persist()
        self.store.start()
        self.schedule_service.start()
        self.transaction_service.start()
        self._persist_thread = threading.Thread(target=self._persist_loop, name="ConsumerOffsetPersist", daemon=True)
        self._persist_thread.start()
        self.started = True

    def _persist_loop(self) -> None:
        while not self._stop.wait(5.0):  # flushConsumerOffsetInterval
            try:
                self.offset_manager.flush_if_dirty()
            except OSError:
                log.exception("persisting consumer offsets failed")

    def shutdown(self) -> None:
        self._stop.set()
        self.transaction_service.shutdown()
        if self.started:
            self.schedule_service.shutdown()
        if self._persist_thread is not None:
            self._persist_thread.join(timeout=5)
        if self.started:
            self.offset_manager.persist()
            self.subscription_group_manager.persist()
            self.topic_config_manager.persist()
        self.store.shutdown()

    # ------------------------------------------------------------------ topics
    def get_topic(self, topic: str) -> TopicConfig | None:
        return self.topic_config_manager.get(topic)

    def create_topic(self, topic: str, queue_nums: int | None = None, *, read_queue_nums: int | None = None,
                     perm: int = PERM_READ | PERM_WRITE, order: bool = False) -> TopicConfig:
        reason = validate_topic(topic)
        if reason:
            raise TopicError("INVALID_TOPIC", reason)
        q = queue_nums or self.broker_config.defaultTopicQueueNums
        tc = TopicConfig(topic, read_queue_nums or q, q, perm, order=order)
        return self.topic_config_manager.update(tc)

    def auto_create_topic(self, topic: str, queue_nums: int | None = None) -> TopicConfig | None:
        """Topic auto-creation as a send to an unknown topic drives it (TBW102 inheritance)."""
        tc = self.topic_config_manager.get(topic)
        if tc is not None:
            return tc
        if not self.broker_config.autoCreateTopicEnable:
            return None
        if validate_topic(topic):
            return None
        return self.topic_config_manager.create_if_absent(topic, queue_nums or self.broker_config.defaultTopicQueueNums)

    def delete_topic(self, topic: str) -> bool:
        existed = self.topic_config_manager.delete(topic)
        self.store.delete_topic(topic)
        self.offset_manager.remove_topic(topic)
        return existed

    # ------------------------------------------------------------------ messages
    def put_messages(self, msgs: list[Message], *, check_perm: bool = True, wait_flush: bool = True) -> PutMessageResult:
        topic = msgs[0].topic
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"topic {topic} not exist")
        if check_perm and not (tc.perm & PERM_WRITE and self.broker_config.brokerPermission & PERM_WRITE):
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=f"topic {topic} is not writeable")
        for m in msgs:
            if not 0 <= m.queue_id < max(tc.writeQueueNums, tc.readQueueNums):
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        remark=f"queueId {m.queue_id} out of range [0, {tc.writeQueueNums}) for {topic}")
        return self.store.put_messages(msgs, wait_flush=wait_flush)

    def put_encoded(self, batch: EncodedUnits, *, check_perm: bool = True, wait_flush: bool = True) -> PutBatchResult:
        """put_messages for a batch of units encoded in one go (the Kafka produce fast path)."""
        tc = self.topic_config_manager.get(batch.topic)
        if tc is None:
            return PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"topic {batch.topic} not exist")
        if check_perm and not (tc.perm & PERM_WRITE and self.broker_config.brokerPermission & PERM_WRITE):
            return PutBatchResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=f"topic {batch.topic} is not writeable")
        if not 0 <= batch.queue_id < max(tc.writeQueueNums, tc.readQueueNums):
            return PutBatchResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                  remark=f"queueId {batch.queue_id} out of range [0, {tc.writeQueueNums}) for {batch.topic}")
        return self.store.put_encoded(batch, wait_flush=wait_flush)
