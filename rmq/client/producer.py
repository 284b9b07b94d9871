"""Producers (SPEC §3): AsyncProducer (asyncio) and Producer (blocking facade over a background
loop) with DefaultMQProducer's behaviour — routes from the NameServer with TBW102 auto-create,
round-robin or latency-fault-tolerant queue choice, sync/async/oneway/batch/orderly sends,
RocketMQ's retry rules, zlib compression over 4 KiB and a UNIQ_KEY on every message."""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import enum
import logging
import re
import threading
import time
import zlib
from typing import Any, Callable, Iterable, Sequence

from rmq.common.message import (
    _BATCH_HEAD,
    COMPRESSED_FLAG,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    TRANSACTION_PREPARED_TYPE,
)
from rmq.common.message import SHORT as _SHORT
from rmq.remoting import MessageQueue, ResponseCode, SendMessageRequestHeaderV2, TopicRouteData

from .errors import (
    ClientErrorCode,
    MQBrokerError,
    MQClientError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from .fault import MQFaultStrategy
from .instance import ClientConfig, ClientInstance
from .loop import BlockingFacade, LoopThread
from .message import MAX_MESSAGE_SIZE, Message, SendResult, SendStatus
from .remoting import wait_timeout
from .route import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DEFAULT_PRODUCER_GROUP,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicPublishInfo,
    route_to_publish_info,
)
from .selector import SelectorLike, as_selector
from .uniq_id import create_uniq_id, set_uniq_id

log = logging.getLogger("rmq.client.producer")

__all__ = ["AsyncProducer", "Producer", "CommunicationMode", "SendCallback", "validate_topic"]

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9._-]+$")   # RocketMQ's, plus '.' as Kafka names use it
TOPIC_MAX_LENGTH = 127
#: Broker codes after which a sync send tries again (DefaultMQProducerImpl.sendDefaultImpl).
_RETRY_RESPONSE_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                                   ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION,
                                   ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT})

#: ``callback(result, error)``: exactly one of the two is None.
SendCallback = Callable[[SendResult | None, BaseException | None], None]


class CommunicationMode(enum.Enum):
    """How a send waits: SYNC (answer, retries on another broker), ASYNC (resends to the same
    broker), ONEWAY (no answer, no retry)."""
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


def validate_topic(topic: str) -> None:
    """Validators.checkTopic plus the TBW102 clash check; raises MQClientError."""
    if not topic or not topic.strip():
        raise MQClientError("The specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MQClientError(f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.")
    if not _TOPIC_RE.match(topic):
        raise MQClientError(f"The specified topic[{topic}] contains illegal characters, "
                            f"allowing only ^[%|a-zA-Z0-9._-]+$")
    if topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
        raise MQClientError(f"The topic[{topic}] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC.")


def _properties_string(props: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


class _MessageBatch(Message):
    """MessageBatch.generateFromList: several messages of one topic sent as one body."""

    __slots__ = ("messages",)

    def __init__(self, messages: list[Message]) -> None:
        first = messages[0]
        super().__init__(first.topic, b"", wait_store_msg_ok=first.wait_store_msg_ok)
        self.messages = messages


class AsyncProducer:
    """DefaultMQProducer on asyncio.  Create, ``await start()``, send, ``await shutdown()``.

    Options keep RocketMQ's names in snake_case and its defaults; times are in seconds.
    """

    def __init__(self, group: str = DEFAULT_PRODUCER_GROUP, namesrv: str | Iterable[str] | None = None, *,
                 config: ClientConfig | None = None, instance_name: str | None = None,
                 send_msg_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 retry_times_when_send_async_failed: int = 2,
                 compress_msg_body_over_howmuch: int = 4096, compress_level: int = 5,
                 max_message_size: int = MAX_MESSAGE_SIZE, send_latency_fault_enable: bool = False,
                 retry_another_broker_when_not_store_ok: bool = False, default_topic_queue_nums: int = 4,
                 create_topic_key: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
                 back_pressure_for_async_send_num: int = 10000) -> None:
        if not group:
            raise MQClientError("producerGroup can not be empty")
        self.group = group
        cfg = config or ClientConfig()
        if namesrv is not None:
            cfg.namesrv_addr = namesrv if isinstance(namesrv, str) else list(namesrv)
        if instance_name is not None:
            cfg.instance_name = instance_name
        self.config = cfg
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.default_topic_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        if back_pressure_for_async_send_num < 1:
            raise MQClientError("backPressureForAsyncSendNum must be at least 1")
        #: DefaultMQProducer.backPressureForAsyncSendNum: async sends in flight at most (the blocking
        #: Producer.send_async waits for a slot, up to send_msg_timeout)
        self.back_pressure_for_async_send_num = back_pressure_for_async_send_num
        self.fault_strategy = MQFaultStrategy(send_latency_fault_enable)
        self.topic_publish_info_table: dict[str, TopicPublishInfo] = {}
        self.instance: ClientInstance | None = None
        self._running = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def client_id(self) -> str:
        return self.instance.client_id if self.instance else self.config.build_client_id()

    async def start(self) -> None:
        """Create the client instance and its background tasks (no network traffic yet)."""
        if self._running:
            return
        self.instance = ClientInstance(self.config)
        self.instance.register_producer(self.group, self)
        await self.instance.start()
        self._running = True

    async def shutdown(self) -> None:
        """Unregister from the brokers and close every connection."""
        if not self._running or self.instance is None:
            return
        self._running = False
        try:
            await wait_timeout(self.instance.unregister_client(self.group, None), 3.0)
        except (asyncio.TimeoutError, Exception) as exc:
            log.debug("unregister failed: %s", exc)
        self.instance.unregister_producer(self.group)
        await self.instance.shutdown()

    async def __aenter__(self) -> "AsyncProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    def _check_running(self) -> ClientInstance:
        if not self._running or self.instance is None:
            raise MQClientError("The producer service state not OK, maybe started once, or not started (call start())")
        return self.instance

    # ------------------------------------------------------------------ ClientInstance hooks
    def topics(self) -> set[str]:
        return set(self.topic_publish_info_table)

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.topic_publish_info_table:
            self.topic_publish_info_table[topic] = route_to_publish_info(topic, route)

    # ------------------------------------------------------------------ routes
    async def find_topic_publish_info(self, topic: str) -> TopicPublishInfo:
        """tryToFindTopicPublishInfo: the cached route, else the NameServer's, else TBW102's
        (so the broker auto-creates the topic on the first send)."""
        inst = self._check_running()
        tp = self.topic_publish_info_table.get(topic)
        if tp is None or not tp.ok():
            self.topic_publish_info_table.setdefault(topic, TopicPublishInfo())
            await inst.update_topic_route(topic)
            tp = self.topic_publish_info_table[topic]
        if tp.have_topic_router_info or tp.ok():
            return tp
        await inst.update_topic_route(topic, is_default=True,
                                      default_topic_queue_nums=self.default_topic_queue_nums,
                                      default_topic=self.create_topic_key)
        return self.topic_publish_info_table[topic]

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues a send to ``topic`` chooses from."""
        tp = await self.find_topic_publish_info(topic)
        return list(tp.message_queue_list)

    # ------------------------------------------------------------------ checks
    def _check_message(self, msg: Message) -> None:
        if msg is None:
            raise MQClientError("the message is null", ResponseCode.MESSAGE_ILLEGAL)
        validate_topic(msg.topic)
        if not msg.body:
            raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
        if len(msg.body) > self.max_message_size:
            raise MQClientError(f"the message body size over max value, MAX: {self.max_message_size}",
                                ResponseCode.MESSAGE_ILLEGAL)

    # ------------------------------------------------------------------ sending
    async def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Synchronous-mode send: up to 1 + retry_times_when_send_failed attempts, switching
        broker after a failure when there is another one."""
        return await self._send_default(msg, CommunicationMode.SYNC, timeout)

    async def send_async_mode(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Asynchronous-mode send: one queue choice, then up to retry_times_when_send_async_failed
        resends to the same broker after transport failures (SPEC §3)."""
        return await self._send_default(msg, CommunicationMode.ASYNC, timeout)

    def send_async(self, msg: Message, callback: SendCallback | None = None,
                   timeout: float | None = None) -> "asyncio.Task[SendResult]":
        """Start an async-mode send and return its task; ``callback(result, error)`` is called
        on the event loop when it completes."""
        task = asyncio.ensure_future(self.send_async_mode(msg, timeout))
        if callback is not None:
            def done(t: "asyncio.Task[SendResult]") -> None:
                exc = asyncio.CancelledError() if t.cancelled() else t.exception()
                _run_callback(callback, None if exc is not None else t.result(), exc)
            task.add_done_callback(done)
        return task

    async def send_oneway(self, msg: Message) -> None:
        """Fire and forget: no response, no retry."""
        await self._send_default(msg, CommunicationMode.ONEWAY, None)

    async def send_to_queue(self, msg: Message, mq: MessageQueue, timeout: float | None = None) -> SendResult:
        """Send to exactly ``mq`` (no retry)."""
        self._check_message(msg)
        if mq.topic != msg.topic:
            raise MQClientError(f"message's topic {msg.topic} is not the queue's topic {mq.topic}")
        tp = await self.find_topic_publish_info(msg.topic)
        result = await self._send_kernel(msg, mq, CommunicationMode.SYNC, tp, timeout or self.send_msg_timeout)
        assert result is not None
        return result

    async def send_orderly(self, msg: Message, selector: SelectorLike, arg: Any,
                           timeout: float | None = None) -> SendResult:
        """sendSelectImpl: ``selector.select(queues, msg, arg)`` picks the queue; no retry, so
        messages with the same ``arg`` keep their order on one queue."""
        self._check_running()
        self._check_message(msg)
        timeout = timeout or self.send_msg_timeout
        begin = time.monotonic()
        tp = await self.find_topic_publish_info(msg.topic)
        if not tp.ok():
            raise self._no_route_error(msg.topic)
        mq = as_selector(selector).select(list(tp.message_queue_list), msg, arg)
        if mq is None:
            raise MQClientError("select message queue return null.")
        cost = time.monotonic() - begin
        if cost >= timeout:
            raise RemotingTimeoutError("sendSelectImpl call timeout")
        result = await self._send_kernel(msg, mq, CommunicationMode.SYNC, tp, timeout - cost)
        assert result is not None
        return result

    async def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE: messages of one topic, none delayed or to a retry topic, encoded
        as MessageDecoder.encodeMessages, at most max_message_size (4 MiB) in all."""
        batch = self._build_batch(msgs)
        return await self._send_default(batch, CommunicationMode.SYNC, timeout)

    def _build_batch(self, msgs: Sequence[Message]) -> _MessageBatch:
        """The checks of MessageBatch.generateFromList and validateMessage for every message, a
        UNIQ_KEY put into each, and the body encoded as encode_messages does, in one pass (a batch of
        1 KiB messages costs about a third less client CPU per message than check, id and encode done
        one after the other)."""
        msgs = list(msgs)
        if not msgs:
            raise MQClientError("batch must hold at least one message")
        first = msgs[0]
        topic, wait = first.topic, first.wait_store_msg_ok
        max_size = self.max_message_size
        head, short, new_id = _BATCH_HEAD.pack, _SHORT.pack, create_uniq_id
        parts: list[bytes] = []
        add = parts.extend
        checked_topic = None
        for m in msgs:
            props = m.properties
            if props.get(PROPERTY_DELAY_TIME_LEVEL) and m.delay_time_level > 0:
                raise MQClientError("TimeDelayLevel is not supported for batching")
            t = m.topic
            if t.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError("Retry Group is not supported for batching")
            if t != topic:
                raise MQClientError("The topic of the messages in one batch should be the same")
            if (props.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false") != wait:
                raise MQClientError("The waitStoreMsgOK of the messages in one batch should the same")
            if checked_topic is None:           # every message has the first one's topic
                validate_topic(t)
                checked_topic = t
            body = m.body
            if not body:
                raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
            if len(body) > max_size:
                raise MQClientError(f"the message body size over max value, MAX: {max_size}",
                                    ResponseCode.MESSAGE_ILLEGAL)
            if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
                props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = new_id()
            pb = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode("utf-8")
            if len(pb) > 0x7FFF:
                raise ValueError(f"properties of {len(pb)} bytes exceed 32767")
            add((head(22 + len(body) + len(pb), 0, 0, m.flag, len(body)), body, short(len(pb)), pb))
        batch = _MessageBatch(msgs)
        batch.body = b"".join(parts)
        if len(batch.body) > self.max_message_size:
            raise MQClientError(f"the message body size over max value, MAX: {self.max_message_size} "
                                f"(batch of {len(msgs)} encodes to {len(batch.body)} bytes)",
                                ResponseCode.MESSAGE_ILLEGAL)
        return batch

    def _no_route_error(self, topic: str) -> MQClientError:
        inst = self.instance
        if inst is not None and not inst.namesrv_list:
            return MQClientError("No name server address, please set it.", ClientErrorCode.NO_NAME_SERVER_EXCEPTION)
        return MQClientError(f"No route info of this topic, {topic}", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION)

    async def _send_default(self, msg: Message, mode: CommunicationMode,
                            timeout: float | None) -> SendResult | None:
        self._check_running()
        if not isinstance(msg, _MessageBatch):
            self._check_message(msg)
        timeout = timeout or self.send_msg_timeout
        begin = time.monotonic()
        tp = await self.find_topic_publish_info(msg.topic)
        if not tp.ok():
            raise self._no_route_error(msg.topic)
        times_total = 1 + self.retry_times_when_send_failed if mode is CommunicationMode.SYNC else 1
        mq: MessageQueue | None = None
        result: SendResult | None = None
        error: Exception | None = None
        brokers_sent: list[str] = []
        times = 0
        while times < times_total:
            last_broker = mq.brokerName if mq is not None else None
            chosen = self.fault_strategy.select_one_message_queue(tp, last_broker)
            if chosen is None:
                break
            mq = chosen
            brokers_sent.append(mq.brokerName)
            times += 1
            start = time.monotonic()
            spent = start - begin
            if spent >= timeout:
                raise RemotingTimeoutError(f"sendDefaultImpl call timeout after {int(spent * 1000)}ms")
            try:
                result = await self._send_kernel(msg, mq, mode, tp, timeout - spent)
                self.fault_strategy.update_fault_item(mq.brokerName, _ms_since(start), False)
                if mode is not CommunicationMode.SYNC:
                    return result
                assert result is not None
                if result.send_status is not SendStatus.SEND_OK and self.retry_another_broker_when_not_store_ok:
                    continue
                return result
            except MQBrokerError as exc:
                self.fault_strategy.update_fault_item(mq.brokerName, _ms_since(start), True)
                log.warning("send to %s failed (%s), %s", mq, exc, "retrying" if times < times_total else "giving up")
                error = exc
                if exc.code in _RETRY_RESPONSE_CODES:
                    continue
                if result is not None:
                    return result
                raise
            except MQClientError as exc:   # RemotingError included
                self.fault_strategy.update_fault_item(mq.brokerName, _ms_since(start), True)
                log.warning("send to %s failed (%s), %s", mq, exc, "retrying" if times < times_total else "giving up")
                error = exc
                continue
        if result is not None:
            return result
        info = (f"Send [{times}] times, still failed, cost [{_ms_since(begin)}]ms, Topic: {msg.topic}, "
                f"BrokersSent: {brokers_sent}: {error}")
        code: int | None = None
        if isinstance(error, MQBrokerError):
            code = error.code
        elif isinstance(error, RemotingConnectError):
            code = ClientErrorCode.CONNECT_BROKER_EXCEPTION
        elif isinstance(error, RemotingTimeoutError):
            code = ClientErrorCode.ACCESS_BROKER_TIMEOUT
        elif isinstance(error, MQClientError):
            code = ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION
        raise MQClientError(info, code, error)

    async def _send_kernel(self, msg: Message, mq: MessageQueue, mode: CommunicationMode,
                           tp: TopicPublishInfo, timeout: float) -> SendResult | None:
        inst = self._check_running()
        addr = inst.find_broker_address_in_publish(mq.brokerName)
        if addr is None:
            await self.find_topic_publish_info(mq.topic)
            addr = inst.find_broker_address_in_publish(mq.brokerName)
        if addr is None:
            raise MQClientError(f"The broker[{mq.brokerName}] not exist", ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        is_batch = isinstance(msg, _MessageBatch)
        if is_batch:
            uniq = ",".join(m.properties.get("UNIQ_KEY", "") for m in msg.messages)  # type: ignore[attr-defined]
        else:
            uniq = set_uniq_id(msg.properties)
        body = msg.body
        sys_flag = 0
        if not is_batch and len(body) >= self.compress_msg_body_over_howmuch:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= COMPRESSED_FLAG
        if msg.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            sys_flag |= TRANSACTION_PREPARED_TYPE
        props = msg.properties
        reconsume_times = 0
        max_reconsume: int | None = None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props = dict(props)
            rt = props.pop(PROPERTY_RECONSUME_TIME, None)
            if rt is not None:
                reconsume_times = int(rt)
            mr = props.pop(PROPERTY_MAX_RECONSUME_TIMES, None)
            if mr is not None:
                max_reconsume = int(mr)
        header = SendMessageRequestHeaderV2(
            a=self.group, b=msg.topic, c=self.create_topic_key, d=self.default_topic_queue_nums,
            e=mq.queueId, f=sys_flag, g=int(time.time() * 1000), h=msg.flag,
            i=_properties_string(props), j=reconsume_times, k=False, l=max_reconsume, m=is_batch)
        api = inst.api
        if mode is CommunicationMode.ONEWAY:
            await api.send_message_oneway(addr, header, body, timeout, batch=is_batch)
            return None
        if mode is CommunicationMode.ASYNC:
            return await self._send_async_retrying(addr, mq, msg.topic, header, body, timeout, is_batch, uniq, tp)
        return await api.send_message(addr, mq.brokerName, msg.topic, header, body, timeout,
                                      batch=is_batch, uniq_msg_id=uniq)

    async def _send_async_retrying(self, addr: str, mq: MessageQueue, topic: str,
                                   header: SendMessageRequestHeaderV2, body: bytes, timeout: float,
                                   is_batch: bool, uniq: str, tp: TopicPublishInfo) -> SendResult:
        """MQClientAPIImpl.sendMessageAsync + onExceptionImpl: a transport failure resends the
        same request to the same broker (another one only with latency fault tolerance on)."""
        inst = self._check_running()
        broker_name = mq.brokerName
        begin = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            start = time.monotonic()
            try:
                return await inst.api.send_message(addr, broker_name, topic, header, body,
                                                   max(timeout - (start - begin), 0.001),
                                                   batch=is_batch, uniq_msg_id=uniq)
            except RemotingError as exc:
                self.fault_strategy.update_fault_item(broker_name, _ms_since(start), True)
                if attempt > self.retry_times_when_send_async_failed or time.monotonic() - begin >= timeout:
                    raise
                if self.fault_strategy.send_latency_fault_enable:
                    other = self.fault_strategy.select_one_message_queue(tp, broker_name)
                    if other is not None:
                        broker_name = other.brokerName
                new_addr = inst.find_broker_address_in_publish(broker_name)
                if new_addr is None:
                    raise
                addr = new_addr
                log.info("async send to %s failed (%s); resend %d", broker_name, exc, attempt)


def _ms_since(t: float) -> int:
    return int((time.monotonic() - t) * 1000)


class Producer(BlockingFacade):
    """Blocking producer: the AsyncProducer running on a shared background event loop.

    >>> p = Producer("pg", namesrv="127.0.0.1:9876"); p.start()
    >>> p.send(Message("TopicTest", b"hello", tags="TagA"))
    >>> p.shutdown()
    """

    _shutdown_timeout = 10.0

    def __init__(self, group: str = DEFAULT_PRODUCER_GROUP, namesrv: str | Iterable[str] | None = None,
                 **options: Any) -> None:
        self._impl = AsyncProducer(group, namesrv, **options)
        self._lt: LoopThread | None = None
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None
        self._in_flight = threading.BoundedSemaphore(self._impl.back_pressure_for_async_send_num)
        self._to_send: collections.deque = collections.deque()
        self._send_wake = False
        self._cb_queue: collections.deque = collections.deque()
        self._cb_wake = False

    @property
    def impl(self) -> AsyncProducer:
        """The AsyncProducer underneath (its coroutines run on ``loop``)."""
        return self._impl

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop_thread().loop

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    def _loop_thread(self) -> LoopThread:
        if self._lt is None:
            raise MQClientError("The producer is not started (call start())")
        return self._lt

    def _after_shutdown(self) -> None:
        if self._callbacks is not None:
            self._callbacks.shutdown(wait=False)

    def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer (sync mode with retries)."""
        return self._loop_thread().run(self._impl.send(msg, timeout))

    def send_async(self, msg: Message, callback: SendCallback | None = None,
                   timeout: float | None = None) -> "concurrent.futures.Future[SendResult]":
        """Send without blocking (async mode: resends go to the same broker).  Returns a
        concurrent Future (``asyncio.wrap_future`` makes it awaitable); ``callback(result,
        error)`` runs on a callback thread when the send completes.  At most
        ``back_pressure_for_async_send_num`` sends are in flight: past that this call waits for
        one to complete, up to the send timeout (then MQClientError, as RocketMQ's
        "send message tryAcquire semaphoreAsyncNum timeout")."""
        lt = self._loop_thread()
        wait = timeout or self._impl.send_msg_timeout
        if not self._in_flight.acquire(timeout=wait):
            raise MQClientError(f"send message tryAcquire semaphoreAsyncNum timeout, {wait:.3f}s: "
                                f"{self._impl.back_pressure_for_async_send_num} async sends in flight")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.add_done_callback(lambda _f: self._in_flight.release())
        if callback is not None:
            fut.add_done_callback(lambda f: self._queue_callback(callback, f))
        # Sends queued here are started on the loop in bunches: one wake-up of the loop thread for
        # every send made while it was busy, rather than one run_coroutine_threadsafe each.
        self._to_send.append((msg, timeout, fut))
        if not self._send_wake:
            self._send_wake = True
            try:
                lt.loop.call_soon_threadsafe(self._start_queued)
            except RuntimeError as exc:   # the loop is closed (shutdown raced this call)
                self._send_wake = False
                self._to_send.clear()
                if not fut.done():
                    fut.set_exception(MQClientError(f"The producer is shut down: {exc}"))
        return fut

    def _start_queued(self) -> None:
        """On the loop thread: start every send queued by send_async (the wake flag is cleared
        before the queue is emptied, so a send queued meanwhile schedules another wake-up)."""
        self._send_wake = False
        q = self._to_send
        impl = self._impl
        while q:
            msg, timeout, fut = q.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            task = asyncio.ensure_future(impl.send_async_mode(msg, timeout))
            task.add_done_callback(functools.partial(_settle, fut))

    def _queue_callback(self, callback: SendCallback, f: concurrent.futures.Future) -> None:
        """Callbacks run on the callback thread, drained in bunches like the sends."""
        exc = f.exception() if not f.cancelled() else concurrent.futures.CancelledError()
        res = None if exc is not None else f.result()
        self._cb_queue.append((callback, res, exc))
        if self._cb_wake:
            return
        if self._callbacks is None:
            self._callbacks = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rmq-send-callback")
        self._cb_wake = True
        try:
            self._callbacks.submit(self._run_queued_callbacks)
        except RuntimeError:   # pool shut down: run them here
            self._run_queued_callbacks()

    def _run_queued_callbacks(self) -> None:
        self._cb_wake = False
        q = self._cb_queue
        while q:
            cb, res, exc = q.popleft()
            _run_callback(cb, res, exc)

    def send_oneway(self, msg: Message) -> None:
        """Write the message and return; no answer, no retry."""
        self._loop_thread().run(self._impl.send_oneway(msg))

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        return self._loop_thread().run(self._impl.send_batch(msgs, timeout))

    def send_orderly(self, msg: Message, selector: SelectorLike, arg: Any,
                     timeout: float | None = None) -> SendResult:
        return self._loop_thread().run(self._impl.send_orderly(msg, selector, arg, timeout))

    def send_to_queue(self, msg: Message, mq: MessageQueue, timeout: float | None = None) -> SendResult:
        return self._loop_thread().run(self._impl.send_to_queue(msg, mq, timeout))

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop_thread().run(self._impl.fetch_publish_message_queues(topic))


def _settle(fut: concurrent.futures.Future, task: "asyncio.Task[SendResult]") -> None:
    """Copy a finished send task's outcome into the Future send_async returned."""
    if fut.done():
        return
    if task.cancelled():
        fut.set_exception(concurrent.futures.CancelledError())
    elif task.exception() is not None:
        fut.set_exception(task.exception())
    else:
        fut.set_result(task.result())


def _run_callback(cb: SendCallback, res: SendResult | None, exc: BaseException | None) -> None:
    try:
        cb(res, exc)
    except Exception:
        log.exception("send callback raised")
