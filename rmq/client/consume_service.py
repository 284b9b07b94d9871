"""Consume services for the push consumer (SPEC §4 "Concurrent listener in batches"):
ConsumeMessageService is the pluggable interface; ConsumeMessageConcurrentlyService runs the
listener on a thread pool (or awaits it if it is a coroutine function) in batches of
consumeMessageBatchMaxSize, sends RECONSUME_LATER messages back to the broker, and commits
the minimum in-flight offset.  The orderly service (broker queue locks, SPEC §4) is
rmq.client.consume_orderly.ConsumeMessageOrderlyService."""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generator, Protocol, Union

from rmq.common.message import PROPERTY_CONSUME_START_TIMESTAMP, PROPERTY_RETRY_TOPIC
from rmq.remoting import MessageQueue

from .message import ConsumeStatus, MessageExt, MessageModel
from .process_queue import ProcessQueue
from .route import retry_topic

log = logging.getLogger("rmq.client.consume")

__all__ = ["PushConsumerView", "ConsumeConcurrentlyContext", "MessageListenerConcurrently", "ConsumeMessageService",
           "ConsumeMessageConcurrentlyService", "ListenerConsumeService", "adapt_listener"]

_INT_MAX = (1 << 31) - 1


class PushConsumerView(Protocol):
    """What a consume service needs of its push consumer (AsyncPushConsumer provides it). Declared
    here so the services and the consumer do not import each other."""
    group: str
    message_model: MessageModel
    offset_store: Any
    instance: Any
    max_reconsume_times: int

    async def send_message_back(self, msg: MessageExt, delay_level: int) -> bool: ...
    async def lock_all(self) -> None: ...
    async def lock_mq(self, mq: MessageQueue) -> bool: ...
    async def broker_master_of(self, broker_name: str, topic: str) -> str: ...


@dataclass
class ConsumeConcurrentlyContext:
    """Passed to the listener: the queue, and two knobs it may set — ``delay_level_when_next_consume``
    (0 = broker decides, -1 = straight to DLQ) and ``ack_index`` (messages after it failed)."""
    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = _INT_MAX


class MessageListenerConcurrently(Protocol):
    """An object listener: ``consume_message(msgs, context) -> ConsumeStatus``."""
    def consume_message(self, msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeStatus: ...


ListenerLike = Union[MessageListenerConcurrently,
                     Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any],
                     Callable[[list[MessageExt]], Any]]


def adapt_listener(listener: ListenerLike) -> tuple[Callable[..., Any], bool]:
    """Return ``(fn(msgs, ctx), is_coroutine_function)`` for an object with
    ``consume_message`` or a callable taking ``(msgs)`` or ``(msgs, context)``."""
    fn = getattr(listener, "consume_message", listener)
    if not callable(fn):
        raise TypeError("listener must be callable or have consume_message(msgs, context)")
    is_coro = inspect.iscoroutinefunction(fn)
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_ctx = len(params) >= 2 or any(p.kind is p.VAR_POSITIONAL
                                            for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        takes_ctx = True
    if takes_ctx:
        return fn, is_coro
    if is_coro:
        async def one_arg_async(msgs, ctx):  # noqa: ANN001
            return await fn(msgs)
        return one_arg_async, True
    return (lambda msgs, ctx: fn(msgs)), False


class _Raised:
    """What a listener raised, sent into ConsumeMessageConcurrentlyService._batch_steps."""
    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def _as_status(value: Any) -> ConsumeStatus:
    """A listener's return value; anything but CONSUME_SUCCESS counts as RECONSUME_LATER (SPEC §7)."""
    if isinstance(value, ConsumeStatus):
        return value
    if isinstance(value, str) and value == ConsumeStatus.CONSUME_SUCCESS.value:
        return ConsumeStatus.CONSUME_SUCCESS
    return ConsumeStatus.RECONSUME_LATER


class ConsumeMessageService:
    """What the push consumer hands pulled messages to.  Implementations own their threads."""

    def start(self) -> None:
        pass

    async def shutdown(self, await_termination: float = 1.0) -> None:
        pass

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        return {}


class ListenerConsumeService(ConsumeMessageService):
    """What both built-in services share: the adapted listener, a pool of consume threads (none
    for a coroutine listener), the in-flight request tasks and the counters behind stats()."""

    def __init__(self, consumer: PushConsumerView, listener: Any, consume_thread_nums: int,
                 consume_message_batch_max_size: int) -> None:
        self.consumer = consumer
        self.listener, self.is_coro = adapt_listener(listener)
        self.batch_max = max(1, consume_message_batch_max_size)
        self.thread_nums = max(1, consume_thread_nums)
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task] = set()
        self.consumed_ok = 0
        self.consumed_failed = 0
        self.consume_rt_total = 0.0

    def start(self) -> None:
        if not self.is_coro:
            self.executor = concurrent.futures.ThreadPoolExecutor(
                self.thread_nums, thread_name_prefix=f"ConsumeMessageThread_{self.consumer.group}")

    async def shutdown(self, await_termination: float = 1.0) -> None:
        """Let running requests finish (up to ``await_termination``), cancel the rest."""
        if self._tasks and await_termination > 0:
            await asyncio.wait(list(self._tasks), timeout=await_termination)
        for t in list(self._tasks):
            t.cancel()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stats(self) -> dict[str, Any]:
        n = self.consumed_ok + self.consumed_failed
        return {"consumeOK": self.consumed_ok, "consumeFailed": self.consumed_failed,
                "consumeRTAvgMs": round(self.consume_rt_total * 1000 / n, 3) if n else 0.0,
                "inFlightRequests": len(self._tasks)}


class ConsumeMessageConcurrentlyService(ListenerConsumeService):
    """Many threads, any order: each batch runs as soon as a thread is free."""

    def __init__(self, consumer: PushConsumerView, listener: ListenerLike, *,
                 consume_thread_nums: int = 20, consume_message_batch_max_size: int = 1) -> None:
        super().__init__(consumer, listener, consume_thread_nums, consume_message_batch_max_size)
        self._sem: asyncio.Semaphore | None = None
        self._rt_ewma = 0.0
        # a plain listener's jobs: consume threads take them from _jobs and hand the results back
        # in _done, drained on the loop in bunches (one loop wake-up for all the jobs that finished
        # while it was busy, no Future or Task per job)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: collections.deque = collections.deque()
        self._done_wake = False
        self._threads: list[threading.Thread] = []
        self._jobs_in_flight = 0          # queued or running thread jobs whose results are not settled
        self._idle_waiters: list[asyncio.Future] = []
        self._stopping = False

    def start(self) -> None:
        # no ThreadPoolExecutor: the consume threads below (started as jobs need them)
        self._sem = asyncio.Semaphore(self.thread_nums)
        self._loop = asyncio.get_running_loop()

    async def shutdown(self, await_termination: float = 1.0) -> None:
        """Let running requests finish (up to ``await_termination``), then drop queued jobs and
        stop the consume threads (a listener call in progress finishes on its own)."""
        if self._jobs_in_flight and await_termination > 0:
            w = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(w)
            await asyncio.wait({w}, timeout=await_termination)
        self._stopping = True
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
        await super().shutdown(await_termination)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["inFlightRequests"] += self._jobs_in_flight
        return out

    #: A pool job runs consecutive consume batches until about this much listener time is
    #: used: a fast listener then costs one thread hand-off per pull (up to 1024 batches, the
    #: largest pullBatchSize), a slow one (>= 2 ms a batch) still gets one batch per job and
    #: full thread parallelism.
    JOB_TARGET_SECONDS = 0.002
    MAX_BATCHES_PER_JOB = 1024

    def _batches_per_job(self) -> int:
        rt = self._rt_ewma
        if rt <= 0:
            return 1
        return max(1, min(self.MAX_BATCHES_PER_JOB, int(self.JOB_TARGET_SECONDS / rt)))

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        step = self.batch_max * self._batches_per_job()     # messages per pool job
        chunks = [msgs] if len(msgs) <= step else [msgs[a:a + step] for a in range(0, len(msgs), step)]
        for chunk in chunks:
            if self.is_coro:
                self._spawn(self._consume(chunk, pq, mq))
            else:
                self._enqueue(chunk, pq, mq)

    def _enqueue(self, chunk: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """A thread job (on the loop): stamped, queued, and a consume thread started when every
        thread so far has a job (at most consumeThreadMax)."""
        if pq.dropped or self._stopping:
            return
        self._stamp(chunk, mq)
        self._jobs_in_flight += 1
        self._jobs.put((chunk, pq, mq))
        if self._jobs_in_flight > len(self._threads) and len(self._threads) < self.thread_nums:
            t = threading.Thread(target=self._thread_main, daemon=True,
                                 name=f"ConsumeMessageThread_{self.consumer.group}_{len(self._threads) + 1}")
            self._threads.append(t)
            t.start()

    def _thread_main(self) -> None:
        """A consume thread: run jobs until the None that shutdown queues."""
        jobs, done = self._jobs, self._done
        while True:
            job = jobs.get()
            if job is None or self._stopping:
                return
            chunk, pq, mq = job
            try:
                elapsed, results = self._run_batches(chunk, mq, pq)
            except BaseException as exc:   # noqa: BLE001 - _batch_steps catches the listener's; this is a bug
                log.exception("consume job of %s failed", mq)
                elapsed, results = 0.0, exc
            done.append((chunk, pq, mq, elapsed, results))
            if not self._done_wake:
                self._done_wake = True
                try:
                    self._loop.call_soon_threadsafe(self._drain_done)   # type: ignore[union-attr]
                except RuntimeError:      # the loop is closed: the consumer is gone
                    return

    def _drain_done(self) -> None:
        """On the loop: settle every finished thread job (the wake flag is cleared first, so a
        job finishing meanwhile schedules another drain)."""
        self._done_wake = False
        done = self._done
        while done:
            chunk, pq, mq, elapsed, results = done.popleft()
            self._jobs_in_flight -= 1
            if isinstance(results, BaseException):
                continue
            pending = self._settle(chunk, pq, mq, elapsed, results)
            if pending is not None:
                self._spawn(pending)
        if not self._jobs_in_flight:
            for w in self._idle_waiters:
                if not w.done():
                    w.set_result(None)
            self._idle_waiters.clear()

    def _split(self, chunk: list[MessageExt]) -> list[list[MessageExt]]:
        """A job's messages as the listener's batches (consumeMessageBatchMaxSize each)."""
        bm = self.batch_max
        return [chunk] if len(chunk) <= bm else [chunk[i:i + bm] for i in range(0, len(chunk), bm)]

    def _submit_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float = 5.0) -> None:
        async def later() -> None:
            await asyncio.sleep(delay)
            if not pq.dropped:
                self.submit_consume_request(msgs, pq, mq, True)
        self._spawn(later())

    def _batch_steps(self, chunk: list[MessageExt], mq: MessageQueue,
                     pq: ProcessQueue) -> Generator[tuple[list[MessageExt], ConsumeConcurrentlyContext], Any,
                                                    tuple[float, list | None]]:
        """One job's listener calls (ConsumeRequest.run for each batch of ``chunk``; the split is
        done here, off the event loop), shared by the thread and the coroutine drivers below:
        yields ``(msgs, context)`` for each call the driver makes, and is sent back what the
        listener returned (a _Raised when it raised). Returns the listener time of the job and
        None when every batch came back CONSUME_SUCCESS with the context untouched (the common
        case, settled without a result per batch), else one (status, context) per batch,
        status None for a batch skipped because the queue was dropped."""
        success = ConsumeStatus.CONSUME_SUCCESS
        ctx_cls = ConsumeConcurrentlyContext
        out: list | None = None
        t = time.perf_counter()
        for i, msgs in enumerate(self._split(chunk)):
            ctx = ctx_cls(mq)
            if pq.dropped:
                status = None
            else:
                status = yield msgs, ctx
                if status.__class__ is _Raised:
                    log.warning("consumeMessage exception: %r, Group: %s Msgs: %d MQ: %s", status.exc,
                                self.consumer.group, len(msgs), mq)
                    status = ConsumeStatus.RECONSUME_LATER
                elif status is not success:
                    status = _as_status(status)
            if out is None:
                if status is success and ctx.ack_index >= len(msgs) - 1:
                    continue
                out = [(success, ctx_cls(mq)) for _ in range(i)]
            out.append((status, ctx))
        return time.perf_counter() - t, out

    def _run_batches(self, chunk: list[MessageExt], mq: MessageQueue,
                     pq: ProcessQueue) -> tuple[float, list | None]:
        """On a consume thread: _batch_steps with the (plain) listener called for each step."""
        listener = self.listener
        steps = self._batch_steps(chunk, mq, pq)
        try:
            call = next(steps)
            while True:
                try:
                    ret = listener(*call)
                except Exception as exc:
                    ret = _Raised(exc)
                call = steps.send(ret)
        except StopIteration as stop:
            return stop.value

    async def _run_batches_async(self, chunk: list[MessageExt], mq: MessageQueue,
                                 pq: ProcessQueue) -> tuple[float, list | None]:
        """On the client loop: _batch_steps with the coroutine listener awaited for each step."""
        listener = self.listener
        steps = self._batch_steps(chunk, mq, pq)
        try:
            call = next(steps)
            while True:
                try:
                    ret = await listener(*call)
                except asyncio.CancelledError:
                    steps.close()
                    raise
                except Exception as exc:
                    ret = _Raised(exc)
                call = steps.send(ret)
        except StopIteration as stop:
            return stop.value

    def _stamp(self, chunk: list[MessageExt], mq: MessageQueue) -> None:
        """CONSUME_START_TIME on every message of a job; a message of %RETRY%group shows its
        original topic (resetRetryAndNamespace)."""
        now_ms = str(int(time.time() * 1000))
        group_retry = retry_topic(self.consumer.group)
        if mq.topic == group_retry:
            for m in chunk:
                real = m.properties.get(PROPERTY_RETRY_TOPIC)
                if real and m.topic == group_retry:
                    m.topic = real
                m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = now_ms
        else:
            for m in chunk:
                m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = now_ms

    async def _consume(self, chunk: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """One job of a coroutine listener: ``chunk``, consecutive messages of one queue, in
        listener batches, at most consumeThreadMax jobs at a time."""
        if pq.dropped:
            return
        self._stamp(chunk, mq)
        assert self._sem is not None
        async with self._sem:
            if pq.dropped:
                return
            elapsed, results = await self._run_batches_async(chunk, mq, pq)
        pending = self._settle(chunk, pq, mq, elapsed, results)
        if pending is not None:
            await pending

    def _settle(self, chunk: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, elapsed: float,
                results: list | None) -> Awaitable[None] | None:
        """On the loop, after a job: counters, process-queue removal and the offset. A job whose
        batches all succeeded is settled here at once (the same counters, removal and offset as
        batch after batch); otherwise the coroutine that settles batch by batch is returned."""
        n = -(-len(chunk) // self.batch_max)             # listener batches in the job
        rt = elapsed / n                                 # listener time per batch (consumeRT)
        if results is None:
            self.consume_rt_total += elapsed
            self._rt_ewma = rt if self._rt_ewma <= 0 else self._rt_ewma * 0.9 + rt * 0.1
            if pq.dropped:
                log.info("processQueue is dropped without process consume result. messageQueue=%s", mq)
                return None
            self.consumed_ok += len(chunk)
            offset = pq.remove_messages(chunk)
            if offset >= 0 and not pq.dropped:
                self.consumer.offset_store.update_offset(mq, offset, True)
            return None
        return self._settle_batches(chunk, pq, mq, rt, results)

    async def _settle_batches(self, chunk: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, rt: float,
                              results: list) -> None:
        for msgs, (status, ctx) in zip(self._split(chunk), results):
            if status is None:
                continue
            self.consume_rt_total += rt
            self._rt_ewma = rt if self._rt_ewma <= 0 else self._rt_ewma * 0.9 + rt * 0.1
            if pq.dropped:
                log.info("processQueue is dropped without process consume result. messageQueue=%s", mq)
                return
            await self.process_consume_result(status, ctx, msgs, pq, mq)

    async def process_consume_result(self, status: ConsumeStatus, ctx: ConsumeConcurrentlyContext,
                                     msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeMessageConcurrentlyService.processConsumeResult."""
        consumer = self.consumer
        if not msgs:
            return
        if status is ConsumeStatus.CONSUME_SUCCESS:
            ack = min(ctx.ack_index, len(msgs) - 1)
            self.consumed_ok += ack + 1
            self.consumed_failed += len(msgs) - ack - 1
        else:
            ack = -1
            self.consumed_failed += len(msgs)
        failed = msgs[ack + 1:]
        if failed:
            if consumer.message_model is MessageModel.BROADCASTING:
                for m in failed:
                    log.warning("BROADCASTING, the message consume failed, drop it, %s", m.msg_id)
            else:
                again: list[MessageExt] = []
                for m in failed:
                    if not await consumer.send_message_back(m, ctx.delay_level_when_next_consume):
                        m.reconsume_times += 1
                        again.append(m)
                if again:
                    ids = {id(m) for m in again}
                    msgs = [m for m in msgs if id(m) not in ids]
                    self._submit_later(again, pq, mq)
        offset = pq.remove_messages(msgs)
        if offset >= 0 and not pq.dropped:
            consumer.offset_store.update_offset(mq, offset, True)
