"""Pull consumers (SPEC §4 "Pull"): AsyncPullConsumer and the blocking PullConsumer, like
DefaultMQPullConsumer — the application picks queues and offsets, ``pull`` returns a
PullResult (FOUND / NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL) of decoded, decompressed,
tag-checked messages, and offsets are stored on request."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from rmq.common.filter import EXPRESSION_TYPE_TAG
from rmq.remoting import MessageQueue

from .api import RawPullResult, build_pull_sys_flag
from .consumer_base import ConsumerCore, build_subscription_data
from .errors import MQClientError
from .instance import ClientConfig
from .loop import BlockingFacade, LoopThread
from .message import MessageExt, MessageModel, PullResult
from .offset_store import ReadOffsetType
from .remoting import wait_timeout
from .route import DEFAULT_CONSUMER_GROUP

log = logging.getLogger("rmq.client.pull")

__all__ = ["AsyncPullConsumer", "PullConsumer"]


class AsyncPullConsumer(ConsumerCore):
    """DefaultMQPullConsumer on asyncio."""

    consume_type = "CONSUME_ACTIVELY"

    def __init__(self, group: str = DEFAULT_CONSUMER_GROUP, namesrv: str | Iterable[str] | None = None, *,
                 config: ClientConfig | None = None, instance_name: str | None = None,
                 message_model: MessageModel | str = MessageModel.CLUSTERING,
                 offset_store_dir: str | None = None, consumer_pull_timeout: float = 10.0,
                 broker_suspend_max_time: float = 20.0, consumer_timeout_when_suspend: float = 30.0) -> None:
        super().__init__(group, namesrv, config=config, instance_name=instance_name,
                         message_model=MessageModel(message_model) if isinstance(message_model, str) else message_model,
                         offset_store_dir=offset_store_dir)
        self.consumer_pull_timeout = consumer_pull_timeout
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend

    async def start(self) -> None:
        if self._running:
            return
        inst = self._make_instance()
        await self.offset_store.load()
        await inst.start()
        self._running = True

    async def shutdown(self) -> None:
        if not self._running or self.instance is None:
            return
        try:
            await self.persist_consumer_offset()
        except Exception as exc:
            log.warning("persisting offsets at shutdown failed: %s", exc)
        self._running = False
        try:
            await wait_timeout(self.instance.unregister_client(None, self.group), 3.0)
        except (asyncio.TimeoutError, Exception) as exc:
            log.debug("unregister failed: %s", exc)
        self.instance.unregister_consumer(self.group)
        await self.instance.shutdown()

    async def __aenter__(self) -> "AsyncPullConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    def _subscription_automatically(self, topic: str) -> None:
        if topic not in self.subscription_inner:
            self.subscription_inner[topic] = build_subscription_data(topic, "*")

    async def pull(self, mq: MessageQueue, expression: str | None, offset: int, max_nums: int = 32,
                   timeout: float | None = None, *, expression_type: str = EXPRESSION_TYPE_TAG) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset`` matching ``expression``
        (``"*"``, ``"TagA || TagB"``, or SQL92 with ``expression_type="SQL92"``)."""
        return await self._pull(mq, expression, offset, max_nums, False, timeout, expression_type)

    async def pull_raw(self, mq: MessageQueue, expression: str | None, offset: int, max_nums: int = 32,
                       timeout: float | None = None, *, expression_type: str = EXPRESSION_TYPE_TAG) -> RawPullResult:
        """``pull`` without decoding: the broker's answer with its units as bytes, for a caller that
        decodes them in bulk (the Spark source); the client-side TAG re-check is the caller's."""
        sd = self._pull_subscription(mq, expression, offset, max_nums, expression_type)
        sys_flag = build_pull_sys_flag(False, False, True, False)
        return await self.pull_kernel_raw(mq, sd, offset, max_nums, sys_flag, 0,
                                          int(self.broker_suspend_max_time * 1000),
                                          timeout or self.consumer_pull_timeout)

    async def pull_block_if_not_found(self, mq: MessageQueue, expression: str | None, offset: int,
                                      max_nums: int = 32, *,
                                      expression_type: str = EXPRESSION_TYPE_TAG) -> PullResult:
        """Like ``pull`` but the broker holds the request (long polling) until a message arrives
        or broker_suspend_max_time passes."""
        return await self._pull(mq, expression, offset, max_nums, True, None, expression_type)

    def _pull_subscription(self, mq: MessageQueue, expression: str | None, offset: int, max_nums: int,
                           expression_type: str):
        """A pull's argument checks (as DefaultMQPullConsumer's) and its subscription data."""
        self._check_running()
        if mq is None:
            raise MQClientError("mq is null")
        if offset < 0:
            raise MQClientError("offset < 0")
        if max_nums <= 0:
            raise MQClientError("maxNums <= 0")
        self._subscription_automatically(mq.topic)
        return build_subscription_data(mq.topic, expression, expression_type)

    async def _pull(self, mq: MessageQueue, expression: str | None, offset: int, max_nums: int,
                    block: bool, timeout: float | None, expression_type: str) -> PullResult:
        sd = self._pull_subscription(mq, expression, offset, max_nums, expression_type)
        sys_flag = build_pull_sys_flag(False, block, True, False)
        t = self.consumer_timeout_when_suspend if block else (timeout or self.consumer_pull_timeout)
        return await self.pull_kernel(mq, sd, offset, max_nums, sys_flag, 0,
                                      int(self.broker_suspend_max_time * 1000), t)

    async def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Remember ``offset`` as consumed (persisted every 5 s and at shutdown)."""
        self._check_running()
        self.offset_store.update_offset(mq, offset, False)

    async def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        """The committed offset (-1 when the group has none for ``mq``)."""
        self._check_running()
        kind = ReadOffsetType.READ_FROM_STORE if from_store else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        return await self.offset_store.read_offset(mq, kind)

    async def commit_offsets(self) -> None:
        """Persist every remembered offset now (synchronously on the broker)."""
        self._check_running()
        for mq in list(self.offset_store.offset_table):
            await self.offset_store.persist(mq)
        if self.message_model is MessageModel.BROADCASTING:
            await self.offset_store.persist_all(list(self.offset_store.offset_table))


class PullConsumer(BlockingFacade):
    """Blocking pull consumer (AsyncPullConsumer on the shared background loop).

    >>> c = PullConsumer("cg", namesrv="127.0.0.1:9876"); c.start()
    >>> for mq in c.fetch_subscribe_message_queues("TopicTest"):
    ...     r = c.pull(mq, "*", 0, 32)
    """

    _shutdown_timeout = 15.0

    def __init__(self, group: str = DEFAULT_CONSUMER_GROUP, namesrv: str | Iterable[str] | None = None,
                 **options: Any) -> None:
        self._impl = AsyncPullConsumer(group, namesrv, **options)
        self._lt: LoopThread | None = None

    @property
    def impl(self) -> AsyncPullConsumer:
        return self._impl

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    def _run(self, coro):  # noqa: ANN001, ANN202
        if self._lt is None:
            coro.close()
            raise MQClientError("The consumer is not started (call start())")
        return self._lt.run(coro)


    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._impl.fetch_subscribe_message_queues(topic))

    def pull(self, mq: MessageQueue, expression: str | None, offset: int, max_nums: int = 32,
             timeout: float | None = None, *, expression_type: str = EXPRESSION_TYPE_TAG) -> PullResult:
        return self._run(self._impl.pull(mq, expression, offset, max_nums, timeout,
                                         expression_type=expression_type))

    def pull_block_if_not_found(self, mq: MessageQueue, expression: str | None, offset: int,
                                max_nums: int = 32) -> PullResult:
        return self._run(self._impl.pull_block_if_not_found(mq, expression, offset, max_nums))

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._impl.update_consume_offset(mq, offset))

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        return self._run(self._impl.fetch_consume_offset(mq, from_store))

    def commit_offsets(self) -> None:
        self._run(self._impl.commit_offsets())

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self._impl.search_offset(mq, timestamp_ms))

    def send_message_back(self, msg: MessageExt, delay_level: int = 0) -> bool:
        return self._run(self._impl.send_message_back(msg, delay_level))
