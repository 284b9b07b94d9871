"""What pull and push consumers share (SPEC §4, §5): subscriptions built like
FilterAPI.buildSubscriptionData, subscribe-side routes, the pull kernel (PullAPIWrapper:
broker choice by suggestWhichBrokerId, decode, client-side exact tag match), queue offset
queries and CONSUMER_SEND_MSG_BACK."""
from __future__ import annotations

import logging
import time
from typing import Iterable

from rmq.common.filter import EXPRESSION_TYPE_TAG, is_tag_type, parse_tags
from rmq.remoting import (
    ConsumerData,
    MessageQueue,
    PullMessageRequestHeader,
    ResponseCode,
    SubscriptionData,
    TopicRouteData,
)

from .api import RawPullResult
from .errors import MQBrokerError, MQClientError
from .instance import ClientConfig, ClientInstance
from .message import MessageExt, MessageModel, PullResult, PullStatus
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from .route import MASTER_ID, route_to_subscribe_info

log = logging.getLogger("rmq.client.consumer")

__all__ = ["build_subscription_data", "ConsumerCore"]


def build_subscription_data(topic: str, expression: str | None,
                            expression_type: str | None = EXPRESSION_TYPE_TAG) -> SubscriptionData:
    """FilterAPI.build: ``*``/empty subscribes all; ``A || B`` gives tagsSet and codeSet (Java
    hashCode of each tag); SQL92 keeps the expression for the broker.  subVersion = now (ms)."""
    sd = SubscriptionData(topic=topic, subVersion=int(time.time() * 1000),
                          expressionType=expression_type or EXPRESSION_TYPE_TAG)
    if not is_tag_type(expression_type):
        sd.subString = expression or ""
        return sd
    try:
        sub_all, tags, codes = parse_tags(expression)
    except ValueError as exc:
        raise MQClientError(f"subscription exception: {exc}") from None
    if sub_all:
        sd.subString = "*"
    else:
        sd.subString = expression or "*"
        sd.tagsSet = sorted(tags)
        sd.codeSet = sorted(codes)
    return sd


class ConsumerCore:
    """State and requests common to AsyncPullConsumer and AsyncPushConsumer."""

    consume_type = "CONSUME_ACTIVELY"

    def __init__(self, group: str, namesrv: str | Iterable[str] | None, *,
                 config: ClientConfig | None, instance_name: str | None,
                 message_model: MessageModel, offset_store_dir: str | None,
                 consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
                 max_reconsume_times: int = -1) -> None:
        if not group:
            raise MQClientError("consumerGroup can not be empty")
        self.group = group
        cfg = config or ClientConfig()
        if namesrv is not None:
            cfg.namesrv_addr = namesrv if isinstance(namesrv, str) else list(namesrv)
        if instance_name is not None:
            cfg.instance_name = instance_name
        self.config = cfg
        self.message_model = MessageModel(message_model) if not isinstance(message_model, MessageModel) else message_model
        self.offset_store_dir = offset_store_dir
        self.consume_from_where_name = consume_from_where
        self.max_reconsume_times = max_reconsume_times
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.topic_subscribe_info: dict[str, list[MessageQueue]] = {}
        self.pull_from_which_node: dict[MessageQueue, int] = {}
        self.instance: ClientInstance | None = None
        self.offset_store: OffsetStore | None = None  # type: ignore[assignment]
        self._running = False

    # ------------------------------------------------------------------ lifecycle pieces
    def _make_instance(self) -> ClientInstance:
        inst = ClientInstance(self.config)
        self.instance = inst
        if self.message_model is MessageModel.BROADCASTING:
            self.offset_store = LocalFileOffsetStore(inst.client_id, self.group, self.offset_store_dir)
        else:
            self.offset_store = RemoteBrokerOffsetStore(inst, self.group)
        inst.register_consumer(self.group, self)
        return inst

    @property
    def client_id(self) -> str:
        if self.instance is None:
            raise MQClientError("consumer not started")
        return self.instance.client_id

    def _check_running(self) -> ClientInstance:
        if not self._running or self.instance is None:
            raise MQClientError("The consumer service state not OK, maybe started once, or not started (call start())")
        return self.instance

    # ------------------------------------------------------------------ ClientInstance hooks
    def topics(self) -> set[str]:
        return set(self.subscription_inner)

    def update_topic_subscribe_info(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.subscription_inner:
            self.topic_subscribe_info[topic] = route_to_subscribe_info(topic, route)

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(groupName=self.group, consumeType=self.consume_type,
                            messageModel=self.message_model.value,
                            consumeFromWhere=self.consume_from_where_name,
                            subscriptionDataSet=list(self.subscription_inner.values()), unitMode=False)

    async def do_rebalance(self) -> None:
        """Push consumers rebalance; a pull consumer chooses its queues itself."""

    async def persist_consumer_offset(self) -> None:
        if self.offset_store is not None:
            await self.offset_store.persist_all(self._persist_set())

    def _persist_set(self) -> set[MessageQueue]:
        return set(self.offset_store.offset_table) if self.offset_store else set()

    # ------------------------------------------------------------------ routes
    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """MQAdminImpl.fetchSubscribeMessageQueues: the readable queues of ``topic`` (sorted)."""
        inst = self._check_running()
        route = await inst.fetch_topic_route(topic)
        inst.install_route(topic, route)
        mqs = route_to_subscribe_info(topic, route)
        if not mqs:
            raise MQClientError(f"Can not find Message Queue for this topic, {topic} Namesrv return empty")
        return sorted(mqs, key=lambda m: (m.topic, m.brokerName, m.queueId))

    async def _broker_for_pull(self, mq: MessageQueue) -> tuple[str, bool]:
        inst = self._check_running()
        which = self.pull_from_which_node.get(mq, MASTER_ID)
        found = inst.find_broker_address_in_subscribe(mq.brokerName, which, False)
        if found is None:
            await inst.update_topic_route(mq.topic)
            found = inst.find_broker_address_in_subscribe(mq.brokerName, which, False)
        if found is None:
            raise MQClientError(f"The broker[{mq.brokerName}] not exist")
        return found

    async def _broker_master(self, mq: MessageQueue) -> str:
        inst = self._check_running()
        addr = inst.find_broker_address_in_publish(mq.brokerName)
        if addr is None:
            await inst.update_topic_route(mq.topic)
            addr = inst.find_broker_address_in_publish(mq.brokerName)
        if addr is None:
            raise MQClientError(f"The broker[{mq.brokerName}] not exist")
        return addr

    # ------------------------------------------------------------------ pulling
    async def pull_kernel(self, mq: MessageQueue, sd: SubscriptionData, offset: int, max_nums: int,
                          sys_flag: int, commit_offset: int, suspend_ms: int, timeout: float,
                          post_subscription: bool = True) -> PullResult:
        """PullAPIWrapper.pullKernelImpl + processPullResult."""
        raw = await self.pull_kernel_raw(mq, sd, offset, max_nums, sys_flag, commit_offset, suspend_ms, timeout,
                                         post_subscription)
        return self.process_pull_result(mq, raw, sd)

    async def pull_kernel_raw(self, mq: MessageQueue, sd: SubscriptionData, offset: int, max_nums: int,
                              sys_flag: int, commit_offset: int, suspend_ms: int, timeout: float,
                              post_subscription: bool = True) -> RawPullResult:
        """PullAPIWrapper.pullKernelImpl: the response before decoding (the suggested broker id is
        remembered); process_pull_result decodes it."""
        addr, is_slave = await self._broker_for_pull(mq)
        if is_slave:
            sys_flag &= ~0x1   # clearCommitOffsetFlag: a slave does not take commits
        header = PullMessageRequestHeader(
            consumerGroup=self.group, topic=mq.topic, queueId=mq.queueId, queueOffset=offset,
            maxMsgNums=max_nums, sysFlag=sys_flag, commitOffset=commit_offset,
            suspendTimeoutMillis=suspend_ms, subscription=sd.subString if post_subscription else None,
            subVersion=sd.subVersion, expressionType=sd.expressionType)
        raw = await self.instance.api.pull_message(addr, header, timeout)  # type: ignore[union-attr]
        self.pull_from_which_node[mq] = raw.suggest_which_broker_id
        return raw

    def process_pull_result(self, mq: MessageQueue, raw: RawPullResult, sd: SubscriptionData) -> PullResult:
        """Remember the suggested broker id, decode the units and keep only messages whose TAGS
        is in the subscription's tag set (the broker only compared hash codes)."""
        self.pull_from_which_node[mq] = raw.suggest_which_broker_id
        result = raw.decode(mq.brokerName)
        if result.pull_status is PullStatus.FOUND and sd.tagsSet and not sd.classFilterMode:
            tags = set(sd.tagsSet)
            result.msg_found_list = [m for m in result.msg_found_list
                                     if m.properties.get("TAGS") is not None and m.properties["TAGS"] in tags]
        return result

    # ------------------------------------------------------------------ offsets of a queue
    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._check_running().api.get_min_offset(await self._broker_master(mq), mq.topic, mq.queueId)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._check_running().api.get_max_offset(await self._broker_master(mq), mq.topic, mq.queueId)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._check_running().api.search_offset(await self._broker_master(mq), mq.topic,
                                                             mq.queueId, timestamp_ms)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self._check_running().api.get_earliest_msg_storetime(await self._broker_master(mq),
                                                                          mq.topic, mq.queueId)

    # ------------------------------------------------------------------ retry
    async def send_message_back(self, msg: MessageExt, delay_level: int = 0) -> bool:
        """CONSUMER_SEND_MSG_BACK to the broker the message came from.  Returns True when the
        broker took it, or when it does not support the request (then the failure is only
        logged: an old broker); False to re-consume it locally later."""
        inst = self._check_running()
        try:
            addr = await self._broker_master(MessageQueue(msg.topic, msg.broker_name, msg.queue_id)) \
                if msg.broker_name else str(msg.store_host[0]) + ":" + str(msg.store_host[1])
            max_times = 16 if self.max_reconsume_times == -1 else self.max_reconsume_times
            await inst.api.consumer_send_message_back(addr, msg, self.group, delay_level, max_times)
            return True
        except MQBrokerError as exc:
            if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                log.warning("RECONSUME_LATER for %s: broker does not support CONSUMER_SEND_MSG_BACK; "
                            "message dropped (logged only)", msg.msg_id)
                return True
            log.warning("sendMessageBack of %s failed: %s", msg.msg_id, exc)
            return False
        except Exception as exc:
            log.warning("sendMessageBack of %s failed: %s", msg.msg_id, exc)
            return False
