"""BrokerController: the broker services every listener calls — store, topics, offsets, groups,
long polling (SPEC §3-§4). Knows no wire format."""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable

from ..config import RmqConfig
from ..store import (
    DefaultMessageStore, EncodedUnits, Message, MessageBatch, PutBatchResult, PutMessageResult, PutMessageStatus,
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


@dataclass
class ConfigTable:
    """A plugin's config table: JSON bytes out (dump) and in (load, on a slave)."""
    name: str
    dump: Callable[[], bytes]
    load: Callable[[bytes], None]


class BrokerController:
    def __init__(self, cfg: RmqConfig, *, store: DefaultMessageStore | None = None):
        self.cfg = cfg
        self.broker_config = cfg.broker
        self.store = store or DefaultMessageStore(cfg.store)
        config_dir = os.path.join(self.store.root, "config")
        self.config_dir = config_dir
        self.topic_config_manager = TopicConfigManager(config_dir, cfg.broker)
        # a new topic's queue files are made by the store's allocator thread, not by its first puts
        self.topic_config_manager.on_created = lambda tc: self.store.prepare_consume_queues(
            tc.topicName, range(max(tc.readQueueNums, tc.writeQueueNums)))
        self.offset_manager = ConsumerOffsetManager(config_dir, journal_fsync=cfg.store.flushDiskType == "SYNC_FLUSH")
        self.subscription_group_manager = SubscriptionGroupManager(config_dir, cfg.broker.autoCreateSubscriptionGroup)
        self.arrival_hub = MessageArrivalHub(self.store.get_max_offset_in_queue)
        self.store.message_arriving_listener = self.arrival_hub.notify
        self.store.compaction.policy_of = self.compaction_policy
        self._stop = threading.Event()
        self._persist_thread: threading.Thread | None = None
        self.started = False
        from .schedule import ScheduleMessageService
        from .transaction import TransactionalMessageService
        self.schedule_service = ScheduleMessageService(self)
        self.transaction_service = TransactionalMessageService(self)
        # name -> ConfigTable: state a plugin keeps beside consumerOffset.json (the Kafka bridge's
        # share groups); served by GET_CONFIG_TABLE_EXT and copied to a slave by SlaveSynchronize
        self.config_tables: dict[str, ConfigTable] = {}

    def register_config_table(self, name: str, dump, load) -> None:
        """`dump()` returns the table as JSON bytes (on the master, for admin tools and slaves);
        `load(body)` replaces this broker's copy with the master's (on a slave)."""
        self.config_tables[name] = ConfigTable(name, dump, load)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.store.load()
        self.topic_config_manager.load()
        self.offset_manager.load()
        self.subscription_group_manager.load()
        self.topic_config_manager.persist()
        self.store.start()
        if self.cfg.store.brokerRole != "SLAVE":
            # a slave's SCHEDULE_TOPIC and half topic are the master's copies: the master delivers
            # and checks (BrokerController starts these services only on a master)
            self.schedule_service.start()
            self.transaction_service.start()
        else:
            self.schedule_service.offsets.load()
        self._persist_thread = threading.Thread(target=self._persist_loop, name="ConsumerOffsetPersist", daemon=True)
        self._persist_thread.start()
        self.started = True

    def _persist_loop(self) -> None:
        interval = max(0.01, self.broker_config.flushConsumerOffsetInterval / 1000.0)
        while not self._stop.wait(interval):
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

    def flush_for_exit(self) -> None:
        """Before a forced exit (rmq.server.shutdown, any thread): the commitlog, consumequeues and
        consumer offsets to disk. The checkpoint and abort file are left as they are, so the next
        start recovers as after a crash. Nothing to do once the store's own shutdown has begun."""
        store = self.store
        if store.shutdown_done:
            log.warning("the store's own shutdown is under way; not flushing it a second time")
            return
        store.commitlog.flush(0)
        store.flush_logics()
        if self.started:
            self.offset_manager.persist()

    # ------------------------------------------------------------------ topics
    def get_topic(self, topic: str) -> TopicConfig | None:
        return self.topic_config_manager.get(topic)

    def create_topic(self, topic: str, queue_nums: int | None = None, *, read_queue_nums: int | None = None,
                     perm: int = PERM_READ | PERM_WRITE, order: bool = False,
                     attributes: dict[str, str] | None = None) -> TopicConfig:
        """Create or update a topic; an update keeps the topic's attributes unless new ones are given."""
        reason = validate_topic(topic)
        old = self.topic_config_manager.get(topic)
        if not reason and old is None:
            reason = self.topic_config_manager.collision(topic)
        if reason:
            raise TopicError("INVALID_TOPIC", reason)
        q = queue_nums or self.broker_config.defaultTopicQueueNums
        attrs = dict(attributes) if attributes is not None else dict(old.attributes) if old is not None else {}
        tc = TopicConfig(topic, read_queue_nums or q, q, perm, order=order, attributes=attrs)
        return self.topic_config_manager.update(tc)

    def compaction_policy(self, topic: str):
        """A compacted topic's settings, from its attributes: Kafka's cleanup.policy=compact (or
        compact,delete) or RocketMQ 5's cleanup.policy=COMPACTION; None for any other topic."""
        from ..store.compaction import CompactionPolicy
        tc = self.topic_config_manager.get(topic)
        a = tc.attributes if tc is not None else None
        if not a:
            return None
        policy = a.get("cleanup.policy") or a.get("+cleanup.policy") or ""
        if "compact" not in policy.lower():
            return None
        pol = CompactionPolicy()
        for key, name, kind in (("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", float),
                                ("min.compaction.lag.ms", "min_compaction_lag_ms", int),
                                ("max.compaction.lag.ms", "max_compaction_lag_ms", int),
                                ("delete.retention.ms", "delete_retention_ms", int)):
            if key in a:
                try:
                    setattr(pol, name, kind(a[key]))
                except ValueError:
                    pass                  # validated when set; a bad stored value keeps the default
        return pol

    def set_topic_attributes(self, topic: str, attributes: dict[str, str]) -> TopicConfig:
        """Replace a topic's attributes (the Kafka bridge's topic configs); persisted in topics.json."""
        from dataclasses import replace
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            raise TopicError("TOPIC_NOT_EXIST", f"topic {topic} does not exist")
        return self.topic_config_manager.update(replace(tc, attributes=dict(attributes)))

    def auto_create_topic(self, topic: str, queue_nums: int | None = None) -> TopicConfig | None:
        """Topic auto-creation as a send to an unknown topic drives it (TBW102 inheritance)."""
        tc = self.topic_config_manager.get(topic)
        if tc is not None:
            return tc
        if not self.broker_config.autoCreateTopicEnable:
            return None
        if validate_topic(topic) or self.topic_config_manager.collision(topic):
            return None
        return self.topic_config_manager.create_if_absent(topic, queue_nums or self.broker_config.defaultTopicQueueNums)

    def delete_topic(self, topic: str) -> bool:
        existed = self.topic_config_manager.delete(topic)
        self.store.delete_topic(topic)
        self.offset_manager.remove_topic(topic)
        return existed

    # ------------------------------------------------------------------ messages
    def _write_refusal(self, topic: str, queue_ids, check_perm: bool) -> tuple[PutMessageStatus, str] | None:
        """Why the broker does not take writes to these queues of `topic` (None: it does)."""
        tc = self.topic_config_manager.get(topic)
        if tc is None:
            return PutMessageStatus.MESSAGE_ILLEGAL, f"topic {topic} not exist"
        if check_perm and not (tc.perm & PERM_WRITE and self.broker_config.brokerPermission & PERM_WRITE):
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, f"topic {topic} is not writeable"
        for qid in queue_ids:
            if not 0 <= qid < max(tc.writeQueueNums, tc.readQueueNums):
                return PutMessageStatus.MESSAGE_ILLEGAL, f"queueId {qid} out of range [0, {tc.writeQueueNums}) for {topic}"
        return None

    def put_messages(self, msgs: list[Message], *, check_perm: bool = True, wait_flush: bool = True) -> PutMessageResult:
        refused = self._write_refusal(msgs[0].topic, dict.fromkeys(m.queue_id for m in msgs), check_perm)
        if refused is not None:
            return PutMessageResult(refused[0], remark=refused[1])
        return self.store.put_messages(msgs, wait_flush=wait_flush)

    def put_batch(self, batch: MessageBatch, *, check_perm: bool = True, wait_flush: bool = True) -> PutBatchResult:
        """put_messages for a SEND_BATCH_MESSAGE body (DefaultMessageStore.put_batch)."""
        refused = self._write_refusal(batch.topic, (batch.queue_id,), check_perm)
        if refused is not None:
            return PutBatchResult(refused[0], remark=refused[1])
        return self.store.put_batch(batch, wait_flush=wait_flush)

    def put_encoded(self, batch: EncodedUnits, *, check_perm: bool = True, wait_flush: bool = True) -> PutBatchResult:
        """put_messages for a batch of units encoded in one go (the Kafka produce fast path)."""
        refused = self._write_refusal(batch.topic, (batch.queue_id,), check_perm)
        if refused is not None:
            return PutBatchResult(refused[0], remark=refused[1])
        return self.store.put_encoded(batch, wait_flush=wait_flush)

    def put_encoded_many(self, batches: list[EncodedUnits], *, check_perm: bool = True,
                         wait_flush: bool = True) -> list[PutBatchResult]:
        """put_encoded for each of `batches` (any topics and queues) in one store call
        (DefaultMessageStore.put_encoded_many); one result per batch, in order."""
        results: list = [None] * len(batches)
        todo, idx = [], []
        queues: dict = {}  # topic -> its queue count when it takes writes, else 0 (_write_refusal's rules)
        for i, b in enumerate(batches):
            n = queues.get(b.topic)
            if n is None:
                tc = self.topic_config_manager.get(b.topic)
                n = queues[b.topic] = 0 if tc is None or self._write_refusal(b.topic, (), check_perm) else \
                    max(tc.writeQueueNums, tc.readQueueNums)
            if 0 <= b.queue_id < n:
                todo.append(b)
                idx.append(i)
            else:
                refused = self._write_refusal(b.topic, (b.queue_id,), check_perm)
                results[i] = PutBatchResult(refused[0], remark=refused[1])
        if todo:
            for i, res in zip(idx, self.store.put_encoded_many(todo, wait_flush=wait_flush)):
                results[i] = res
        return results
