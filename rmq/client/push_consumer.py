"""Push consumers (SPEC §4): AsyncPushConsumer and the blocking PushConsumer, like
DefaultMQPushConsumer — a long-polling pull loop per assigned queue (batch 32, flow control),
a pluggable consume service (concurrent, or orderly with broker queue locks:
``register_message_listener_orderly``), rebalance every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED
(RebalancePushImpl with the chosen allocation strategy; an orderly consumer locks a queue with
LOCK_BATCH_MQ before it pulls it and unlocks it with UNLOCK_BATCH_MQ when it gives it up),
ConsumeFromWhere as computePullFromWhere, clustering offsets on the broker and broadcasting
offsets in a local file, committed every 5 s and at shutdown."""
from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import time
from typing import Any, Iterable

from rmq.common.filter import EXPRESSION_TYPE_TAG
from rmq.remoting import LockBatchRequestBody, MessageQueue, SubscriptionData, UnlockBatchRequestBody

from .api import build_pull_sys_flag
from .consume_orderly import ConsumeMessageOrderlyService, MessageListenerOrderly, OrderlyListenerLike
from .consume_service import ConsumeMessageConcurrentlyService, ConsumeMessageService, ListenerLike
from .consumer_base import ConsumerCore, build_subscription_data
from .errors import MQClientError
from .instance import ClientConfig
from .loop import BlockingFacade, LoopThread
from .message import ConsumeFromWhere, MessageModel, PullStatus
from .offset_store import ReadOffsetType
from .process_queue import REBALANCE_LOCK_INTERVAL, REBALANCE_LOCK_MAX_LIVE_TIME, ProcessQueue
from .rebalance import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from .remoting import wait_timeout
from .route import DEFAULT_CONSUMER_GROUP, RETRY_GROUP_TOPIC_PREFIX, mq_sort_key, retry_topic

log = logging.getLogger("rmq.client.push")

__all__ = ["AsyncPushConsumer", "PushConsumer", "parse_consume_timestamp"]


def parse_consume_timestamp(value: str) -> int:
    """``yyyyMMddHHmmss`` (local time, UtilAll.parseDate) -> epoch ms."""
    try:
        return int(_dt.datetime.strptime(value, "%Y%m%d%H%M%S").timestamp() * 1000)
    except ValueError:
        raise MQClientError(f"consumeTimestamp {value!r} is not yyyyMMddHHmmss") from None


def _default_consume_timestamp() -> str:
    """Half an hour ago, as DefaultMQPushConsumer's default consumeTimestamp."""
    return _dt.datetime.fromtimestamp(time.time() - 1800).strftime("%Y%m%d%H%M%S")


class AsyncPushConsumer(ConsumerCore):
    """DefaultMQPushConsumer on asyncio.  ``subscribe``, ``register_message_listener``,
    ``await start()``; the listener gets ``(msgs, context)`` (or just ``msgs``) and returns
    ConsumeStatus.CONSUME_SUCCESS or RECONSUME_LATER.  Times are in seconds."""

    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, group: str = DEFAULT_CONSUMER_GROUP, namesrv: str | Iterable[str] | None = None, *,
                 config: ClientConfig | None = None, instance_name: str | None = None,
                 message_model: MessageModel | str = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | None = None,
                 allocate_message_queue_strategy: AllocateMessageQueueStrategy | None = None,
                 consume_thread_nums: int = 20, consume_message_batch_max_size: int = 1,
                 pull_batch_size: int = 32, pull_interval: float = 0.0,
                 pull_threshold_for_queue: int = 1000, pull_threshold_size_for_queue_mb: int = 100,
                 consume_concurrently_max_span: int = 2000, max_reconsume_times: int = -1,
                 post_subscription_when_pull: bool = True, broker_suspend_max_time: float = 15.0,
                 consumer_timeout_when_suspend: float = 30.0, pull_time_delay_when_exception: float = 3.0,
                 offset_store_dir: str | None = None, await_termination_when_shutdown: float = 1.0,
                 consume_message_service: ConsumeMessageService | None = None,
                 suspend_current_queue_time_millis: int = 1000,
                 rebalance_lock_interval: float = REBALANCE_LOCK_INTERVAL,
                 rebalance_lock_max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME,
                 unlock_delay_time: float = 20.0) -> None:
        cfw = ConsumeFromWhere(consume_from_where) if isinstance(consume_from_where, str) else consume_from_where
        mm = MessageModel(message_model) if isinstance(message_model, str) else message_model
        super().__init__(group, namesrv, config=config, instance_name=instance_name, message_model=mm,
                         offset_store_dir=offset_store_dir, consume_from_where=cfw.value,
                         max_reconsume_times=max_reconsume_times)
        self.consume_from_where = cfw
        self.consume_timestamp = consume_timestamp or _default_consume_timestamp()
        parse_consume_timestamp(self.consume_timestamp)
        self.allocate_strategy: AllocateMessageQueueStrategy = (allocate_message_queue_strategy
                                                                or AllocateMessageQueueAveragely())
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise MQClientError("consumeMessageBatchMaxSize Out of range [1, 1024]")
        if not 1 <= pull_batch_size <= 1024:
            raise MQClientError("pullBatchSize Out of range [1, 1024]")
        self.consume_thread_nums = consume_thread_nums
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_interval = pull_interval
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue_mb * 1024 * 1024
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.post_subscription_when_pull = post_subscription_when_pull
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self.pull_time_delay_when_exception = pull_time_delay_when_exception
        self.await_termination_when_shutdown = await_termination_when_shutdown
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self._listener: ListenerLike | None = None
        self._orderly_listener: OrderlyListenerLike | None = None
        self.consume_service: ConsumeMessageService | None = consume_message_service
        #: DefaultMQPushConsumer.suspendCurrentQueueTimeMillis (orderly: wait before a retry)
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        #: rocketmq.client.rebalance.lockInterval / lockMaxLiveTime / unlockDelayTimeMills (seconds)
        self.rebalance_lock_interval = rebalance_lock_interval
        self.rebalance_lock_max_live_time = rebalance_lock_max_live_time
        self.unlock_delay_time = unlock_delay_time
        self._delayed_unlocks: dict[MessageQueue, asyncio.TimerHandle] = {}
        self._rebalance_lock: asyncio.Lock | None = None
        self.rebalance_count = 0
        self.pull_count = 0
        self._route_retry_at: dict[str, float] = {}
        self._missing_route_backoff = 0.5
        self._route_retry_handle: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = EXPRESSION_TYPE_TAG) -> None:
        """Subscribe ``topic`` with a tag expression (or SQL92).  Before or after start."""
        self.subscription_inner[topic] = build_subscription_data(topic, expression, expression_type)
        if self._running and self.instance is not None:
            asyncio.ensure_future(self._after_subscription_change(topic))

    def unsubscribe(self, topic: str) -> None:
        self.subscription_inner.pop(topic, None)
        self.topic_subscribe_info.pop(topic, None)

    def register_message_listener(self, listener: ListenerLike | MessageListenerOrderly) -> None:
        """The concurrent listener: ``fn(msgs)`` / ``fn(msgs, context)`` (sync: run on the
        consume thread pool; ``async def``: awaited on the client loop).  A MessageListenerOrderly
        instance registers an orderly listener instead."""
        if isinstance(listener, MessageListenerOrderly):
            self.register_message_listener_orderly(listener)
            return
        self._listener = listener
        self._orderly_listener = None

    def register_message_listener_orderly(self, listener: OrderlyListenerLike) -> None:
        """The orderly listener (MessageListenerOrderly): ``fn(msgs)`` / ``fn(msgs, context)``
        returning ConsumeOrderlyStatus.SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT.  Each queue is
        consumed by one thread at a time in queue-offset order, while this client holds the
        queue's lock on the broker (CLUSTERING)."""
        self._orderly_listener = listener
        self._listener = None

    @property
    def consume_orderly(self) -> bool:
        return isinstance(self.consume_service, ConsumeMessageOrderlyService) or (
            self.consume_service is None and self._orderly_listener is not None)

    async def _after_subscription_change(self, topic: str) -> None:
        inst = self._check_running()
        await inst.update_topic_route(topic)
        await inst.send_heartbeat_to_all_brokers()
        inst.rebalance_immediately()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._running:
            return
        if self.consume_service is None:
            if self._orderly_listener is not None:
                self.consume_service = ConsumeMessageOrderlyService(
                    self, self._orderly_listener, consume_thread_nums=self.consume_thread_nums,
                    consume_message_batch_max_size=self.consume_message_batch_max_size,
                    suspend_current_queue_time_millis=self.suspend_current_queue_time_millis,
                    rebalance_lock_interval=self.rebalance_lock_interval,
                    rebalance_lock_max_live_time=self.rebalance_lock_max_live_time)
            elif self._listener is None:
                raise MQClientError("messageListener is null: call register_message_listener() first")
            else:
                self.consume_service = ConsumeMessageConcurrentlyService(
                    self, self._listener, consume_thread_nums=self.consume_thread_nums,
                    consume_message_batch_max_size=self.consume_message_batch_max_size)
        if self.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(self.group)
            self.subscription_inner.setdefault(rt, build_subscription_data(rt, "*"))
        inst = self._make_instance()
        self._rebalance_lock = asyncio.Lock()
        await self.offset_store.load()
        self.consume_service.start()
        self._running = True
        await inst.start()
        for topic in list(self.subscription_inner):
            await inst.update_topic_route(topic)
        await inst.send_heartbeat_to_all_brokers()
        inst.rebalance_immediately()

    async def shutdown(self) -> None:
        """Stop pulling, let in-flight consumes finish (await_termination_when_shutdown),
        commit offsets synchronously, unlock an orderly consumer's queues on the broker (after
        the commit, so the next owner starts where this one stopped), unregister and close."""
        if not self._running or self.instance is None:
            return
        self._running = False
        if self._route_retry_handle is not None:
            self._route_retry_handle.cancel()
        tasks = list(self._pull_tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pull_tasks.clear()
        if self.consume_service is not None:
            await self.consume_service.shutdown(self.await_termination_when_shutdown)
        for pq in self.process_queue_table.values():
            pq.dropped = True
        try:
            await self._persist_offsets_sync(set(self.process_queue_table))
        except Exception as exc:
            log.warning("persisting offsets at shutdown failed: %s", exc)
        for h in self._delayed_unlocks.values():
            h.cancel()
        self._delayed_unlocks.clear()
        if self.consume_orderly and self.message_model is MessageModel.CLUSTERING:
            try:
                await self.unlock_all(oneway=False)
            except Exception as exc:
                log.warning("unlocking the queues at shutdown failed: %s", exc)
        try:
            await wait_timeout(self.instance.unregister_client(None, self.group), 3.0)
        except (asyncio.TimeoutError, Exception) as exc:
            log.debug("unregister failed: %s", exc)
        self.instance.unregister_consumer(self.group)
        await self.instance.shutdown()

    async def _persist_offsets_sync(self, mqs: set[MessageQueue]) -> None:
        if self.message_model is MessageModel.BROADCASTING:
            await self.offset_store.persist_all(mqs)
        else:
            await asyncio.gather(*(self.offset_store.persist(mq) for mq in mqs), return_exceptions=True)

    async def __aenter__(self) -> "AsyncPushConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    def _persist_set(self) -> set[MessageQueue]:
        return set(self.process_queue_table)

    # ------------------------------------------------------------------ introspection
    def assigned_message_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """Queues this consumer currently pulls (sorted), optionally of one topic."""
        return sorted((mq for mq, pq in self.process_queue_table.items()
                       if not pq.dropped and (topic is None or mq.topic == topic)), key=mq_sort_key)

    def running_info(self) -> dict[str, Any]:
        """A small ConsumerRunningInfo for GET_CONSUMER_RUNNING_INFO."""
        return {"properties": {"consumeType": self.consume_type, "messageModel": self.message_model.value,
                               "consumeFromWhere": self.consume_from_where.value,
                               "allocateMessageQueueStrategy": self.allocate_strategy.name},
                "subscriptionSet": [s.to_json() for s in self.subscription_inner.values()],
                "mqTable": [{"mq": mq.to_json(), "cachedMsgCount": pq.msg_count,
                             "commitOffset": self.offset_store.offset_table.get(mq, -1)}
                            for mq, pq in self.process_queue_table.items()],
                "statusTable": self.consume_service.stats() if self.consume_service else {}}

    # ------------------------------------------------------------------ rebalance
    async def do_rebalance(self) -> None:
        """RebalanceImpl.doRebalance for every subscribed topic, then drop queues of topics
        no longer subscribed."""
        if not self._running:
            return
        assert self._rebalance_lock is not None
        async with self._rebalance_lock:
            self.rebalance_count += 1
            changed_any = False
            for topic in list(self.subscription_inner):
                try:
                    changed_any |= await self._rebalance_by_topic(topic)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                        log.warning("rebalance of %s failed: %s", topic, exc)
            for mq, pq in list(self.process_queue_table.items()):
                if mq.topic not in self.subscription_inner:
                    pq.dropped = True
                    self.process_queue_table.pop(mq, None)
                    log.info("doRebalance, %s, truncateMessageQueueNotMyTopic remove unnecessary mq, %s",
                             self.group, mq)
            if changed_any and self.instance is not None:
                await self.instance.send_heartbeat_to_all_brokers()
            self._schedule_route_retry()

    def _schedule_route_retry(self) -> None:
        """While a subscribed topic has no route yet (a topic about to be auto-created, or
        %RETRY%group right after the broker made it on our heartbeat) rebalance again soon,
        backing off 0.5 s, 1 s, 2 s ... up to the rebalance interval, instead of waiting 20 s."""
        missing = [t for t in self.subscription_inner if not self.topic_subscribe_info.get(t)]
        if not missing or self.instance is None or not self._running:
            self._missing_route_backoff = 0.5
            return
        if self._route_retry_handle is not None and not self._route_retry_handle.cancelled():
            self._route_retry_handle.cancel()
        delay = self._missing_route_backoff
        self._missing_route_backoff = min(delay * 2, self.instance.config.rebalance_interval)
        self._route_retry_handle = asyncio.get_running_loop().call_later(delay, self.instance.rebalance_immediately)

    async def _rebalance_by_topic(self, topic: str) -> bool:
        inst = self._check_running()
        mq_set = self.topic_subscribe_info.get(topic)
        if not mq_set and time.monotonic() - self._route_retry_at.get(topic, 0.0) >= 0.4:
            # e.g. %RETRY%group, which the broker creates on our first heartbeat: fetch the route
            # now instead of waiting for the 30 s route poll
            self._route_retry_at[topic] = time.monotonic()
            await inst.update_topic_route(topic)
            mq_set = self.topic_subscribe_info.get(topic)
        if not mq_set:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("doRebalance, %s, but the topic[%s] not exist.", self.group, topic)
            return False
        if self.message_model is MessageModel.BROADCASTING:
            return await self._update_process_queue_table(topic, set(mq_set))
        cid_all = await inst.find_consumer_id_list(topic, self.group)
        if not cid_all:
            log.warning("doRebalance, %s %s, get consumer id list failed", self.group, topic)
            return False
        mq_all = sorted(mq_set, key=mq_sort_key)
        cid_all = sorted(cid_all)
        try:
            allocated = self.allocate_strategy.allocate(self.group, inst.client_id, mq_all, cid_all)
        except Exception as exc:
            log.error("AllocateMessageQueueStrategy.allocate Exception. allocateMessageQueueStrategyName=%s: %s",
                      self.allocate_strategy.name, exc)
            return False
        changed = await self._update_process_queue_table(topic, set(allocated or []))
        if changed:
            log.info("rebalanced result changed. allocateMessageQueueStrategyName=%s, group=%s, topic=%s, "
                     "clientId=%s, mqAllSize=%d, cidAllSize=%d, rebalanceResultSize=%d, rebalanceResultSet=%s",
                     self.allocate_strategy.name, self.group, topic, inst.client_id, len(mq_all), len(cid_all),
                     len(allocated), sorted(allocated, key=mq_sort_key))
        return changed

    async def _update_process_queue_table(self, topic: str, mq_set: set[MessageQueue]) -> bool:
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self._remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.info("doRebalance, %s, remove unnecessary mq, %s", self.group, mq)
            elif pq.is_pull_expired():
                pq.dropped = True
                if await self._remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.error("[BUG]doRebalance, %s, remove unnecessary mq, %s, because pull is pause, so try to fixed it",
                              self.group, mq)
        lock_first = self.consume_orderly and self.message_model is MessageModel.CLUSTERING
        for mq in sorted(mq_set, key=mq_sort_key):
            old = self.process_queue_table.get(mq)
            if old is not None:
                if not old.dropped:
                    continue
                # given up earlier but not removed (its listener was busy): finish that first
                if not await self._remove_unnecessary_message_queue(mq, old):
                    continue
                self.process_queue_table.pop(mq, None)
            if lock_first:
                handle = self._delayed_unlocks.pop(mq, None)
                if handle is not None:
                    handle.cancel()
                if not await self.lock_mq(mq):
                    log.warning("doRebalance, %s, add a new mq failed, %s, because lock failed", self.group, mq)
                    continue
            self.offset_store.remove_offset(mq)          # removeDirtyOffset
            next_offset = await self.compute_pull_from_where(mq)
            if next_offset < 0:
                log.warning("doRebalance, %s, add new mq failed, %s", self.group, mq)
                continue
            pq = ProcessQueue()
            if lock_first:
                pq.locked = True
                pq.last_lock_timestamp = time.monotonic()
            self.process_queue_table[mq] = pq
            self._start_pull(mq, pq, next_offset)
            changed = True
            log.info("doRebalance, %s, add a new mq, %s, next offset %d", self.group, mq, next_offset)
        return changed

    async def _remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """RebalancePushImpl.removeUnnecessaryMessageQueue.  An orderly (clustering) consumer
        first waits up to 1 s for the queue's running listener call, then commits the offset and
        unlocks the queue on the broker — at once, or after unlock_delay_time when pulled
        messages were left unconsumed; False (try again next rebalance) if the listener is busy."""
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        if not (self.consume_orderly and self.message_model is MessageModel.CLUSTERING):
            await self.offset_store.persist(mq)
            self.offset_store.remove_offset(mq)
            return True
        deadline = time.monotonic() + 1.0
        while not pq.consume_lock.acquire(blocking=False):
            if time.monotonic() >= deadline:
                pq.try_unlock_times += 1
                log.warning("[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged for a while, %d",
                            mq, pq.try_unlock_times)
                return False
            await asyncio.sleep(0.01)
        try:
            await self.offset_store.persist(mq)
            self.offset_store.remove_offset(mq)
            if pq.has_temp_message() and self.unlock_delay_time > 0:
                log.info("unlockDelay %.1fs, %s", self.unlock_delay_time, mq)
                old = self._delayed_unlocks.pop(mq, None)
                if old is not None:
                    old.cancel()

                def fire(m: MessageQueue = mq) -> None:
                    self._delayed_unlocks.pop(m, None)
                    if self._running:
                        asyncio.ensure_future(self.unlock_mq(m, oneway=True))
                self._delayed_unlocks[mq] = asyncio.get_running_loop().call_later(self.unlock_delay_time, fire)
            else:
                await self.unlock_mq(mq, oneway=True)
        finally:
            pq.consume_lock.release()
        return True

    # ------------------------------------------------------------------ queue locks (RebalanceImpl)
    async def broker_master_of(self, broker_name: str, topic: str) -> str:
        """The master address of ``broker_name`` (routes of ``topic`` fetched when unknown)."""
        return await self._broker_master(MessageQueue(topic, broker_name, 0))

    def _lock_addr(self, broker_name: str) -> str | None:
        found = self.instance.find_broker_address_in_subscribe(broker_name, 0, True) if self.instance else None
        return found[0] if found else None

    async def lock_mq(self, mq: MessageQueue) -> bool:
        """RebalanceImpl.lock: LOCK_BATCH_MQ for one queue on its master broker."""
        inst = self.instance
        addr = self._lock_addr(mq.brokerName)
        if inst is None or addr is None:
            return False
        try:
            locked = await inst.api.lock_batch_mq(addr, LockBatchRequestBody(self.group, inst.client_id, [mq]), 1.0)
        except Exception as exc:
            log.error("lockBatchMQ exception, %s: %s", mq, exc)
            return False
        now = time.monotonic()
        for m in locked:
            pq = self.process_queue_table.get(m)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = now
        ok = mq in locked
        log.info("the message queue lock %s, %s %s", "OK" if ok else "Failed", self.group, mq)
        return ok

    def _queues_by_broker(self) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in self.process_queue_table:
            out.setdefault(mq.brokerName, []).append(mq)
        return out

    async def lock_all(self) -> None:
        """RebalanceImpl.lockAll: renew the locks of every queue this consumer holds."""
        inst = self.instance
        if inst is None:
            return
        for broker_name, mqs in self._queues_by_broker().items():
            addr = self._lock_addr(broker_name)
            if addr is None:
                continue
            try:
                locked = set(await inst.api.lock_batch_mq(addr, LockBatchRequestBody(self.group, inst.client_id,
                                                                                     mqs), 1.0))
            except Exception as exc:
                log.error("lockBatchMQ exception, %s: %s", mqs, exc)
                continue
            now = time.monotonic()
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    if not pq.locked:
                        log.info("the message queue locked OK, Group: %s %s", self.group, mq)
                    pq.locked = True
                    pq.last_lock_timestamp = now
                else:
                    if pq.locked:
                        log.warning("the message queue locked Failed, Group: %s %s", self.group, mq)
                    pq.locked = False

    async def unlock_mq(self, mq: MessageQueue, oneway: bool = True) -> None:
        inst = self.instance
        addr = self._lock_addr(mq.brokerName)
        if inst is None or addr is None:
            return
        try:
            await inst.api.unlock_batch_mq(addr, UnlockBatchRequestBody(self.group, inst.client_id, [mq]),
                                           oneway=oneway, timeout=1.0)
            log.info("unlock messageQueue. group:%s, clientId:%s, mq:%s", self.group, inst.client_id, mq)
        except Exception as exc:
            log.error("unlockBatchMQ exception, %s: %s", mq, exc)

    async def unlock_all(self, oneway: bool = False) -> None:
        """RebalanceImpl.unlockAll (at shutdown)."""
        inst = self.instance
        if inst is None:
            return
        for broker_name, mqs in self._queues_by_broker().items():
            addr = self._lock_addr(broker_name)
            if addr is None:
                continue
            try:
                await inst.api.unlock_batch_mq(addr, UnlockBatchRequestBody(self.group, inst.client_id, mqs),
                                               oneway=oneway, timeout=1.0)
            except Exception as exc:
                log.error("unlockBatchMQ exception, %s: %s", mqs, exc)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.locked = False

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """RebalancePushImpl.computePullFromWhere: the stored offset if there is one; otherwise
        the max offset (LAST), 0 (FIRST), or the offset at consume_timestamp (TIMESTAMP); a
        retry topic starts at 0 (LAST) or its max (TIMESTAMP).  -1 on a read error."""
        last = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last != -1:
            return -1
        retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        try:
            if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
                return 0 if retry else await self.max_offset(mq)
            if retry:
                return await self.max_offset(mq)
            return await self.search_offset(mq, parse_consume_timestamp(self.consume_timestamp))
        except Exception as exc:
            log.warning("computePullFromWhere for %s failed: %s", mq, exc)
            return -1

    # ------------------------------------------------------------------ pulling
    def _start_pull(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        old = self._pull_tasks.pop(mq, None)
        if old is not None:
            old.cancel()
        task = asyncio.ensure_future(self._pull_loop(mq, pq, next_offset))
        self._pull_tasks[mq] = task
        task.add_done_callback(lambda t, m=mq: self._pull_tasks.pop(m, None) if self._pull_tasks.get(m) is t else None)

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """DefaultMQPushConsumerImpl.pullMessage + PullCallback, as one loop per queue."""
        clustering = self.message_model is MessageModel.CLUSTERING
        orderly = self.consume_orderly
        previously_locked = False
        flow_logged = 0
        while self._running and not pq.dropped:
            pq.last_pull_timestamp = time.monotonic()
            if orderly and clustering:
                if not pq.locked:
                    # pull only what this client may consume (DefaultMQPushConsumerImpl.pullMessage)
                    await asyncio.sleep(self.pull_time_delay_when_exception)
                    continue
                if not previously_locked:
                    # first pull under the lock: the previous owner may have committed meanwhile
                    fixed = await self.compute_pull_from_where(mq)
                    previously_locked = True
                    if fixed >= 0:
                        if fixed < next_offset:
                            log.info("the first time to pull message, so fix offset from broker. "
                                     "pullRequest: %s NewOffset: %d brokerBusy: true", mq, fixed)
                        next_offset = fixed
            if (pq.msg_count > self.pull_threshold_for_queue or pq.msg_size > self.pull_threshold_size_for_queue
                    or (not orderly and pq.max_span() > self.consume_concurrently_max_span)):
                flow_logged += 1
                if flow_logged % 1000 == 1:
                    log.warning("the cached message count/size/span of %s exceeds the threshold "
                                "(count %d, size %d, span %d), so do flow control", mq, pq.msg_count,
                                pq.msg_size, pq.max_span())
                await asyncio.sleep(0.05)
                continue
            sd: SubscriptionData | None = self.subscription_inner.get(mq.topic)
            if sd is None:
                await asyncio.sleep(self.pull_time_delay_when_exception)
                continue
            commit_offset = 0
            if clustering:
                commit_offset = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            sys_flag = build_pull_sys_flag(clustering and commit_offset > 0, True,
                                           self.post_subscription_when_pull, False)
            begin = time.monotonic()
            try:
                result = await self.pull_kernel(mq, sd, next_offset, self.pull_batch_size, sys_flag,
                                                max(commit_offset, 0), int(self.broker_suspend_max_time * 1000),
                                                self.consumer_timeout_when_suspend, self.post_subscription_when_pull)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._running and not pq.dropped:
                    log.warning("execute the pull request of %s exception: %s", mq, exc)
                    await asyncio.sleep(self.pull_time_delay_when_exception)
                continue
            self.pull_count += 1
            if pq.dropped or not self._running:
                break
            status = result.pull_status
            if status is PullStatus.FOUND:
                next_offset = result.next_begin_offset
                msgs = result.msg_found_list
                if msgs:
                    dispatch = pq.put_messages(msgs)
                    self.consume_service.submit_consume_request(msgs, pq, mq, dispatch)  # type: ignore[union-attr]
                if self.pull_interval > 0:
                    await asyncio.sleep(self.pull_interval)
            elif status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                next_offset = result.next_begin_offset
                if pq.msg_count == 0:                       # correctTagsOffset
                    self.offset_store.update_offset(mq, next_offset, True)
                if time.monotonic() - begin < 0.005 and status is PullStatus.NO_NEW_MSG:
                    # a broker that does not hold pulls: avoid a busy loop
                    await asyncio.sleep(0.2)
            elif status is PullStatus.OFFSET_ILLEGAL:
                log.warning("the pull request offset illegal, %s next offset %d (min %d max %d)", mq,
                            result.next_begin_offset, result.min_offset, result.max_offset)
                next_offset = result.next_begin_offset
                pq.dropped = True
                await asyncio.sleep(10)
                self.offset_store.update_offset(mq, next_offset, False)
                await self.offset_store.persist(mq)
                if self.process_queue_table.get(mq) is pq:
                    del self.process_queue_table[mq]
                log.warning("fix the pull request offset, %s", mq)
                break


class PushConsumer(BlockingFacade):
    """Blocking-world push consumer: AsyncPushConsumer on the shared background loop; a plain
    (non-async) listener runs on the consumer's thread pool.

    >>> c = PushConsumer("cg", namesrv="127.0.0.1:9876")
    >>> c.subscribe("TopicTest", "TagA || TagB")
    >>> c.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    >>> c.start(); ...; c.shutdown()
    """

    _shutdown_timeout = 20.0

    def __init__(self, group: str = DEFAULT_CONSUMER_GROUP, namesrv: str | Iterable[str] | None = None,
                 **options: Any) -> None:
        self._impl = AsyncPushConsumer(group, namesrv, **options)
        self._lt: LoopThread | None = None

    @property
    def impl(self) -> AsyncPushConsumer:
        return self._impl

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    def subscribe(self, topic: str, expression: str = "*", expression_type: str = EXPRESSION_TYPE_TAG) -> None:
        if self._lt is not None:
            self._lt.run(_call(self._impl.subscribe, topic, expression, expression_type))
        else:
            self._impl.subscribe(topic, expression, expression_type)

    def register_message_listener(self, listener: ListenerLike | MessageListenerOrderly) -> None:
        self._impl.register_message_listener(listener)

    def register_message_listener_orderly(self, listener: OrderlyListenerLike) -> None:
        """Consume each queue in order under the broker's queue lock (MessageListenerOrderly)."""
        self._impl.register_message_listener_orderly(listener)


    def assigned_message_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """Queues this consumer currently pulls (read on the client loop)."""
        if self._lt is None:
            return []
        return self._lt.run(_call(self._impl.assigned_message_queues, topic))

    def rebalance_now(self) -> None:
        """Run a rebalance immediately and wait for it."""
        if self._lt is not None:
            self._lt.run(self._impl.do_rebalance())

    def committed_offsets(self) -> dict[MessageQueue, int]:
        """The in-memory offset table (what the next commit will write)."""
        if self._lt is None:
            return {}
        return self._lt.run(_call(self._impl.offset_store.clone_offset_table))

    def persist_offsets(self) -> None:
        """Commit the offset of every assigned queue now (synchronously)."""
        if self._lt is not None:
            self._lt.run(self._impl._persist_offsets_sync(set(self._impl.process_queue_table)))


async def _call(fn, *args):  # noqa: ANN001, ANN202
    return fn(*args)
