"""Topic routes on the client (SPEC §3 "Route from NameServer", §9): MixAll/PermName constants,
TopicPublishInfo with RocketMQ's round-robin queue choice, and the conversions
MQClientInstance.topicRouteData2TopicPublishInfo / topicRouteData2TopicSubscribeInfo."""
from __future__ import annotations

import itertools
import random

from rmq.remoting import MessageQueue, QueueData, TopicRouteData

__all__ = ["AUTO_CREATE_TOPIC_KEY_TOPIC", "MASTER_ID", "RETRY_GROUP_TOPIC_PREFIX",
           "DLQ_GROUP_TOPIC_PREFIX", "TOOLS_CONSUMER_GROUP", "DEFAULT_PRODUCER_GROUP",
           "DEFAULT_CONSUMER_GROUP", "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "PERM_PRIORITY",
           "is_readable", "is_writeable", "retry_topic", "dlq_topic", "mq_sort_key",
           "TopicPublishInfo", "route_to_publish_info", "route_to_subscribe_info",
           "default_topic_route_for"]

#: MixAll.AUTO_CREATE_TOPIC_KEY_TOPIC: the template topic brokers auto-create topics from.
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
MASTER_ID = 0
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"

# PermName
PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1 << 0


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def retry_topic(group: str) -> str:
    """MixAll.getRetryTopic: ``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """MixAll.getDLQTopic: ``%DLQ%<group>``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def mq_sort_key(mq: MessageQueue) -> tuple[str, str, int]:
    """MessageQueue.compareTo: topic, then brokerName, then queueId."""
    return (mq.topic, mq.brokerName, mq.queueId)


class TopicPublishInfo:
    """The writable queues of one topic, in RocketMQ's order, with the sendWhichQueue counter.

    The counter starts at a random value, like ThreadLocalIndex, so several producers do not
    all begin on queue 0."""

    def __init__(self, queues: list[MessageQueue] | None = None, *, order_topic: bool = False,
                 route: TopicRouteData | None = None, have_route: bool = False) -> None:
        self.message_queue_list: list[MessageQueue] = list(queues or [])
        self.order_topic = order_topic
        self.route = route
        self.have_topic_router_info = have_route
        self._which = itertools.count(random.randrange(1 << 16))

    def ok(self) -> bool:
        return bool(self.message_queue_list)

    def next_index(self) -> int:
        """sendWhichQueue.incrementAndGet()."""
        return next(self._which)

    def reset_index(self, value: int = 0) -> None:
        self._which = itertools.count(value)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue | None:
        """TopicPublishInfo.selectOneMessageQueue: round-robin; after a failure on
        ``last_broker_name`` prefer a queue on another broker when there is one."""
        mqs = self.message_queue_list
        if not mqs:
            return None
        n = len(mqs)
        if last_broker_name is not None:
            for _ in range(n):
                mq = mqs[self.next_index() % n]
                if mq.brokerName != last_broker_name:
                    return mq
        return mqs[self.next_index() % n]

    def write_queue_nums_of(self, broker_name: str) -> int:
        """getWriteQueueIdByBroker: the broker's writeQueueNums, -1 if it has no queues."""
        if self.route is None:
            return -1
        for qd in self.route.queueDatas:
            if qd.brokerName == broker_name:
                return qd.writeQueueNums
        return -1

    def __repr__(self) -> str:
        return (f"TopicPublishInfo(order_topic={self.order_topic}, queues={len(self.message_queue_list)}, "
                f"have_route={self.have_topic_router_info})")


def route_to_publish_info(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    """topicRouteData2TopicPublishInfo: ``orderTopicConf`` ("brokerA:4;brokerB:4") wins;
    otherwise every writable QueueData of a broker with a live master contributes
    writeQueueNums queues, brokers taken in brokerName order."""
    conf = route.orderTopicConf
    if conf:
        queues: list[MessageQueue] = []
        for item in conf.split(";"):
            name, _, num = item.partition(":")
            if name and num.strip().isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(num)))
        return TopicPublishInfo(queues, order_topic=True, route=route, have_route=True)
    masters = {bd.brokerName: bd for bd in route.brokerDatas}
    queues = []
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        if not is_writeable(qd.perm):
            continue
        bd = masters.get(qd.brokerName)
        if bd is None or MASTER_ID not in bd.brokerAddrs:
            continue
        queues.extend(MessageQueue(topic, qd.brokerName, i) for i in range(qd.writeQueueNums))
    return TopicPublishInfo(queues, order_topic=False, route=route, have_route=True)


def route_to_subscribe_info(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """topicRouteData2TopicSubscribeInfo: readQueueNums queues of every readable QueueData."""
    out: list[MessageQueue] = []
    for qd in route.queueDatas:
        if is_readable(qd.perm):
            out.extend(MessageQueue(topic, qd.brokerName, i) for i in range(qd.readQueueNums))
    return out


def default_topic_route_for(default_route: TopicRouteData, default_topic_queue_nums: int) -> TopicRouteData:
    """updateTopicRouteInfoFromNameServer(topic, isDefault=true): TBW102's route with each
    broker's queue counts cut to ``min(defaultTopicQueueNums, readQueueNums)``."""
    qds = []
    for qd in default_route.queueDatas:
        n = min(default_topic_queue_nums, qd.readQueueNums)
        qds.append(QueueData(brokerName=qd.brokerName, readQueueNums=n, writeQueueNums=n,
                             perm=qd.perm, topicSynFlag=qd.topicSynFlag))
    return TopicRouteData(queueDatas=qds, brokerDatas=list(default_route.brokerDatas),
                          orderTopicConf=default_route.orderTopicConf,
                          filterServerTable=dict(default_route.filterServerTable))
