"""ConsumeMessageOrderlyService — the push consumer's orderly consume service (SPEC §4 "Orderly
listener: queue locked on the broker (expires after 30 s; client renews every 20 s); one thread
per queue; on failure the queue is suspended (1000 ms) and retried", §7 for the dead letters).

What it does, as RocketMQ 4.x's client does:

* In CLUSTERING mode a queue is consumed only while this client holds its lock on the broker
  (LOCK_BATCH_MQ).  The rebalance locks a queue before it starts pulling it; this service renews
  every lock every ``rebalance_lock_interval`` (20 s) and trusts a lock for
  ``rebalance_lock_max_live_time`` (30 s) after it was last granted — shorter than the broker's
  rebalanceLockMaxLiveTime (60 s), so a client stops before the broker lets another one in.
  A queue rebalanced away is unlocked (UNLOCK_BATCH_MQ) once its in-flight listener call is
  over; a crashed client's locks simply expire on the broker.
* One consume request per queue at a time: messages are taken in queue-offset order
  (``consume_message_batch_max_size`` at once), the listener runs on the consume thread pool
  (or is awaited if it is a coroutine function) under the queue's consume lock.
* ConsumeOrderlyStatus.SUCCESS commits the taken messages (the offset after the last one);
  SUSPEND_CURRENT_QUEUE_A_MOMENT (also returned for None or an exception) puts them back and
  retries the same messages after ``suspend_current_queue_time_millis`` (1000 ms, or the
  context's value).  A message that failed ``max_reconsume_times`` times (unbounded by default,
  Integer.MAX_VALUE) is sent to ``%RETRY%group`` with RECONSUME_TIME = MAX_RECONSUME_TIMES, which
  the broker stores to ``%DLQ%group``, and consumption moves on.  With ``auto_commit = False``
  the listener commits itself (COMMIT / ROLLBACK), as in Java.
* Offsets are committed only for consumed prefixes of a queue: ``ProcessQueue.commit`` returns
  the offset after the last consumed message, and the pull loop does not move an orderly
  queue's offset while messages of it are cached.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from rmq.common.message import (
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
)
from rmq.remoting import MessageQueue, SendMessageRequestHeaderV2

from .consume_service import ListenerConsumeService, PushConsumerView
from .message import ConsumeStatus, MessageExt, MessageModel
from .process_queue import REBALANCE_LOCK_INTERVAL, REBALANCE_LOCK_MAX_LIVE_TIME, ProcessQueue
from .route import retry_topic


log = logging.getLogger("rmq.client.consume")

__all__ = ["ConsumeOrderlyStatus", "ConsumeOrderlyContext", "MessageListenerOrderly",
           "ConsumeMessageOrderlyService", "CLIENT_INNER_PRODUCER_GROUP"]

_INT_MAX = (1 << 31) - 1
#: MixAll.CLIENT_INNER_PRODUCER_GROUP: the group of the client's own sends (dead letters).
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns (ConsumeOrderlyStatus)."""
    SUCCESS = "SUCCESS"
    #: deprecated in Java; only meaningful with ``context.auto_commit = False``
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeOrderlyContext:
    """Passed to an orderly listener: the queue, ``auto_commit`` (True: SUCCESS commits) and
    ``suspend_current_queue_time_millis`` (-1: the consumer's setting) for this suspension."""
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


class MessageListenerOrderly:
    """Base class for an orderly listener object: override ``consume_message(msgs, context)``
    and return a ConsumeOrderlyStatus.  ``register_message_listener`` recognises subclasses;
    plain callables go through ``register_message_listener_orderly``."""

    def consume_message(self, msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        raise NotImplementedError


OrderlyListenerLike = Union[MessageListenerOrderly, Callable[..., Any]]


def _as_orderly_status(value: Any) -> ConsumeOrderlyStatus:
    """None, an unknown value or RECONSUME_LATER mean SUSPEND_CURRENT_QUEUE_A_MOMENT (as Java
    treats a null status); CONSUME_SUCCESS is accepted as SUCCESS."""
    if isinstance(value, ConsumeOrderlyStatus):
        return value
    if value is ConsumeStatus.CONSUME_SUCCESS:
        return ConsumeOrderlyStatus.SUCCESS
    if isinstance(value, str):
        try:
            return ConsumeOrderlyStatus(value)
        except ValueError:
            if value == ConsumeStatus.CONSUME_SUCCESS.value:
                return ConsumeOrderlyStatus.SUCCESS
    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


_DROPPED = object()


class ConsumeMessageOrderlyService(ListenerConsumeService):
    """Orderly consumption: one request per queue at a time, under the broker's queue lock."""

    #: rocketmq.client.maxTimeConsumeContinuously: a queue yields its thread after 60 s.
    MAX_TIME_CONSUME_CONTINUOUSLY = 60.0

    def __init__(self, consumer: PushConsumerView, listener: OrderlyListenerLike, *,
                 consume_thread_nums: int = 20, consume_message_batch_max_size: int = 1,
                 suspend_current_queue_time_millis: int = 1000,
                 rebalance_lock_interval: float = REBALANCE_LOCK_INTERVAL,
                 rebalance_lock_max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> None:
        super().__init__(consumer, listener, consume_thread_nums, consume_message_batch_max_size)
        self.suspend_ms = suspend_current_queue_time_millis
        self.lock_interval = rebalance_lock_interval
        self.lock_max_live = rebalance_lock_max_live_time
        self._mq_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._lock_task: asyncio.Task | None = None
        self.stopped = False
        self.sent_to_dlq = 0

    # ------------------------------------------------------------------ lifecycle
    @property
    def clustering(self) -> bool:
        return self.consumer.message_model is MessageModel.CLUSTERING

    def start(self) -> None:
        super().start()
        if self.clustering:
            self._lock_task = asyncio.ensure_future(self._lock_mq_periodically())

    async def shutdown(self, await_termination: float = 1.0) -> None:
        """Stop renewing locks and let running listener calls finish (up to ``await_termination``).
        The consumer unlocks every queue after it has committed the offsets."""
        self.stopped = True
        if self._lock_task is not None:
            self._lock_task.cancel()
        await super().shutdown(await_termination)

    def stats(self) -> dict[str, Any]:
        return {"consumeOrderly": True, **super().stats(), "sentToDLQ": self.sent_to_dlq}

    async def _lock_mq_periodically(self) -> None:
        """lockMQPeriodically: first after 1 s, then every rebalance_lock_interval."""
        await asyncio.sleep(min(1.0, self.lock_interval))
        while not self.stopped:
            try:
                await self.consumer.lock_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lockAll of %s failed: %s", self.consumer.group, exc)
            await asyncio.sleep(self.lock_interval)

    # ------------------------------------------------------------------ requests
    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        if dispatch_to_consume:
            self._spawn(self._consume_request(pq, mq))

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_ms: int) -> None:
        ms = self.suspend_ms if suspend_ms == -1 else suspend_ms
        ms = min(max(ms, 10), 30_000)

        async def later() -> None:
            await asyncio.sleep(ms / 1000)
            if not self.stopped and not pq.dropped:
                self.submit_consume_request([], pq, mq, True)
        self._spawn(later())

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            if self.stopped or pq.dropped:
                return   # given up meanwhile: locking it again would keep its new owner waiting
            ok = await self.consumer.lock_mq(mq)
            self.submit_consume_request_later(pq, mq, 10 if ok else 3000)
        self._spawn(later())

    def _lock_ok(self, pq: ProcessQueue) -> bool:
        return pq.locked and not pq.is_lock_expired(self.lock_max_live)

    async def _consume_request(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest.run: consume the queue's cached messages in order until none is left,
        the lock is gone, the listener asks to wait, or MAX_TIME_CONSUME_CONTINUOUSLY passed."""
        if pq.dropped:
            return
        lock = self._mq_locks.setdefault(mq, asyncio.Lock())
        async with lock:
            clustering = self.clustering
            if clustering and not self._lock_ok(pq):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, 100)
                return
            begin = time.monotonic()
            group_retry = retry_topic(self.consumer.group)
            while True:
                if pq.dropped or self.stopped:
                    break
                if clustering and not pq.locked:
                    log.warning("the message queue not locked, so consume later, %s", mq)
                    self.try_lock_later_and_reconsume(mq, pq, 10)
                    break
                if clustering and pq.is_lock_expired(self.lock_max_live):
                    log.warning("the message queue lock expired, so consume later, %s", mq)
                    self.try_lock_later_and_reconsume(mq, pq, 10)
                    break
                if time.monotonic() - begin > self.MAX_TIME_CONSUME_CONTINUOUSLY:
                    self.submit_consume_request_later(pq, mq, 10)
                    break
                msgs = pq.take_messages(self.batch_max)
                if not msgs:
                    break
                now_ms = str(int(time.time() * 1000))
                for m in msgs:
                    real = m.properties.get(PROPERTY_RETRY_TOPIC)
                    if real and m.topic == group_retry:
                        m.topic = real
                    m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = now_ms
                ctx = ConsumeOrderlyContext(mq)
                t0 = time.perf_counter()
                if self.is_coro:
                    status = await self._call_async(msgs, ctx, pq, mq)
                else:
                    status = await asyncio.get_running_loop().run_in_executor(
                        self.executor, self._call_in_thread, msgs, ctx, pq, mq)
                if status is _DROPPED:
                    log.warning("consumeMessage, the message queue not be able to consume, because it's dropped. %s", mq)
                    break
                self.consume_rt_total += time.perf_counter() - t0
                if not await self.process_consume_result(msgs, status, ctx, pq, mq):
                    break

    def _call_in_thread(self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext, pq: ProcessQueue,
                        mq: MessageQueue) -> Any:
        with pq.consume_lock:
            if pq.dropped:
                return _DROPPED
            try:
                return _as_orderly_status(self.listener(msgs, ctx))
            except Exception as exc:
                log.warning("consumeMessage exception: %r Group: %s Msgs: %d MQ: %s", exc,
                            self.consumer.group, len(msgs), mq)
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _call_async(self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext, pq: ProcessQueue,
                          mq: MessageQueue) -> Any:
        # the loop thread must not block: a removal holding the lock means the queue is going away
        if not pq.consume_lock.acquire(blocking=False):
            return _DROPPED
        try:
            if pq.dropped:
                return _DROPPED
            try:
                return _as_orderly_status(await self.listener(msgs, ctx))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("consumeMessage exception: %r Group: %s Msgs: %d MQ: %s", exc,
                            self.consumer.group, len(msgs), mq)
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        finally:
            pq.consume_lock.release()

    # ------------------------------------------------------------------ results
    async def process_consume_result(self, msgs: list[MessageExt], status: ConsumeOrderlyStatus,
                                     ctx: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        """ConsumeMessageOrderlyService.processConsumeResult; returns whether to go on consuming."""
        S = ConsumeOrderlyStatus
        go_on = True
        commit_offset = -1
        if status is not S.SUCCESS:
            log.warning("consumeMessage Orderly return not OK (%s), Group: %s Msgs: %d MQ: %s",
                        status.value, self.consumer.group, len(msgs), mq)
        if ctx.auto_commit:
            if status in (S.COMMIT, S.ROLLBACK):
                log.warning("the message queue consume result is illegal, we think you want to ack these message %s", mq)
                status = S.SUCCESS
            if status is S.SUCCESS:
                commit_offset = pq.commit()
                self.consumed_ok += len(msgs)
            else:
                self.consumed_failed += len(msgs)
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                    go_on = False
                else:
                    commit_offset = pq.commit()
        else:
            if status is S.SUCCESS:
                self.consumed_ok += len(msgs)
            elif status is S.COMMIT:
                commit_offset = pq.commit()
            elif status is S.ROLLBACK:
                pq.rollback()
                self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                go_on = False
            else:
                self.consumed_failed += len(msgs)
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                    go_on = False
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, commit_offset, False)
        return go_on

    def max_reconsume_times(self) -> int:
        """-1 (the default) means Integer.MAX_VALUE for an orderly consumer."""
        n = self.consumer.max_reconsume_times
        return _INT_MAX if n == -1 else n

    async def check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True: suspend and retry the batch.  Messages past max_reconsume_times go to the DLQ
        (through %RETRY%group with RECONSUME_TIME >= MAX_RECONSUME_TIMES); in BROADCASTING mode
        they are dropped with a log line (no retry topic there)."""
        suspend = False
        limit = self.max_reconsume_times()
        for m in msgs:
            if m.reconsume_times >= limit:
                if not self.clustering:
                    log.warning("BROADCASTING, the message consume failed %d times, drop it, %s",
                                m.reconsume_times, m.msg_id)
                    continue
                m.properties[PROPERTY_RECONSUME_TIME] = str(m.reconsume_times)
                if not await self.send_message_back(m):
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return suspend

    async def send_message_back(self, msg: MessageExt) -> bool:
        """sendMessageBack: a copy to %RETRY%group with RECONSUME_TIME = reconsumeTimes and
        MAX_RECONSUME_TIMES = the limit, so the broker stores it to %DLQ%group."""
        consumer = self.consumer
        inst = consumer.instance
        if inst is None:
            return False
        group = consumer.group
        topic = retry_topic(group)
        props = {k: v for k, v in msg.properties.items()
                 if k not in (PROPERTY_MIN_OFFSET, PROPERTY_MAX_OFFSET, PROPERTY_DELAY_TIME_LEVEL,
                              PROPERTY_RECONSUME_TIME, PROPERTY_MAX_RECONSUME_TIMES,
                              PROPERTY_CONSUME_START_TIMESTAMP)}
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        props[PROPERTY_RETRY_TOPIC] = msg.topic
        props[PROPERTY_DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        header = SendMessageRequestHeaderV2(
            a=CLIENT_INNER_PRODUCER_GROUP, b=topic, c="TBW102", d=4, e=0, f=0, g=int(time.time() * 1000),
            h=msg.flag, i="".join(f"{k}\x01{v}\x02" for k, v in props.items()),
            j=msg.reconsume_times, k=False, l=self.max_reconsume_times(), m=False)
        try:
            addr = await consumer.broker_master_of(msg.broker_name, topic)
            await inst.api.send_message(addr, msg.broker_name, topic, header, msg.body,
                                        inst.config.mq_client_api_timeout)
        except Exception as exc:
            log.error("sendMessageBack exception, group: %s msg: %s: %s", group, msg.msg_id, exc)
            return False
        self.sent_to_dlq += 1
        log.warning("message %s of %s failed %d times (maxReconsumeTimes %d): sent to %%DLQ%%%s",
                    msg.msg_id, msg.topic, msg.reconsume_times + 1, self.max_reconsume_times(), group)
        return True
