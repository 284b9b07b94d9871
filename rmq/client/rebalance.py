"""Queue allocation strategies for clustering consumers (SPEC §4 "Rebalance ... strategies"):
AllocateMessageQueueAveragely, AllocateMessageQueueAveragelyByCircle,
AllocateMessageQueueConsistentHash (MD5 ring with virtual nodes, as ConsistentHashRouter) and
AllocateMachineRoomNearby, with the same results as RocketMQ's Java classes.

Every strategy expects ``mq_all`` and ``cid_all`` sorted the way RebalanceImpl sorts them
(queues by topic, brokerName, queueId; client ids as strings) and returns the queues of
``current_cid``.  A consumer that is not in ``cid_all`` gets nothing.
"""
from __future__ import annotations

import bisect
import hashlib
import logging
from typing import Callable, Protocol, Sequence, runtime_checkable

from rmq.remoting import MessageQueue

__all__ = ["AllocateMessageQueueStrategy", "AllocateMessageQueueAveragely",
           "AllocateMessageQueueAveragelyByCircle", "AllocateMessageQueueConsistentHash",
           "AllocateMachineRoomNearby", "MachineRoomResolver", "PrefixMachineRoomResolver",
           "FunctionMachineRoomResolver", "ConsistentHashRouter", "md5_hash", "mq_to_string",
           "strategy_by_name"]

log = logging.getLogger("rmq.client.rebalance")


@runtime_checkable
class AllocateMessageQueueStrategy(Protocol):
    """``allocate(group, current_cid, mq_all, cid_all) -> queues of current_cid``; ``name``."""
    name: str

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _check(consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
           cid_all: Sequence[str]) -> bool:
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        log.info("[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s",
                 consumer_group, current_cid, list(cid_all))
        return False
    return True


class AllocateMessageQueueAveragely:
    """Contiguous blocks: the first ``len(mq) % len(cid)`` consumers get one queue more."""
    name = "AVG"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        n_mq, n_cid = len(mq_all), len(cid_all)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            average = 1
        elif mod > 0 and index < mod:
            average = n_mq // n_cid + 1
        else:
            average = n_mq // n_cid
        start = index * average if (mod > 0 and index < mod) else index * average + mod
        rng = min(average, n_mq - start)
        return [mq_all[(start + i) % n_mq] for i in range(rng)]


class AllocateMessageQueueAveragelyByCircle:
    """Dealt like cards: queue ``i`` goes to consumer ``i % len(cid)``."""
    name = "AVG_BY_CIRCLE"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        n = len(cid_all)
        return [mq_all[i] for i in range(index, len(mq_all)) if i % n == index]


def md5_hash(key: str) -> int:
    """ConsistentHashRouter.MD5Hash: the first 4 bytes of MD5(key) as an unsigned number."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def mq_to_string(mq: MessageQueue) -> str:
    """MessageQueue.toString(), the key the consistent-hash ring routes."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.brokerName}, queueId={mq.queueId}]"


class ConsistentHashRouter:
    """A hash ring of ``vnode_count`` virtual nodes per physical node (key ``"<node>-<i>"``);
    a key routes to the first virtual node at or after its hash, wrapping around."""

    def __init__(self, nodes: Sequence[str], vnode_count: int,
                 hash_function: Callable[[str], int] = md5_hash) -> None:
        if vnode_count < 0:
            raise ValueError(f"illegal virtual node counts :{vnode_count}")
        self.hash_function = hash_function
        self.ring: dict[int, str] = {}
        for node in nodes:
            existing = sum(1 for v in self.ring.values() if v == node)
            for i in range(vnode_count):
                # A later virtual node with the same hash replaces the earlier (TreeMap.put).
                self.ring[hash_function(f"{node}-{i + existing}")] = node
        self._keys = sorted(self.ring)

    def route_node(self, object_key: str) -> str | None:
        if not self._keys:
            return None
        h = self.hash_function(object_key)
        i = bisect.bisect_left(self._keys, h)
        return self.ring[self._keys[i if i < len(self._keys) else 0]]


class AllocateMessageQueueConsistentHash:
    """Each queue (by its Java toString) goes to the consumer its hash routes to on the ring."""
    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_cnt: int = 10,
                 hash_function: Callable[[str], int] | None = None) -> None:
        if virtual_node_cnt < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
        self.virtual_node_cnt = virtual_node_cnt
        self.hash_function = hash_function or md5_hash

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        router = ConsistentHashRouter(cid_all, self.virtual_node_cnt, self.hash_function)
        return [mq for mq in mq_all if router.route_node(mq_to_string(mq)) == current_cid]


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Which machine room a broker's queue and a consumer are deployed in (never empty)."""

    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class FunctionMachineRoomResolver:
    """A resolver from two functions: ``broker(mq) -> room`` and ``consumer(client_id) -> room``."""

    def __init__(self, broker: Callable[[MessageQueue], str], consumer: Callable[[str], str]) -> None:
        self._broker = broker
        self._consumer = consumer

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return self._broker(mq)

    def consumer_deploy_in(self, client_id: str) -> str:
        return self._consumer(client_id)


class PrefixMachineRoomResolver:
    """The room is the part of the broker name / client id before ``separator`` — the
    convention of RocketMQ's own AllocateMachineRoomNearby test ("IDC1-broker-a",
    "IDC1-127.0.0.1@c1")."""

    def __init__(self, separator: str = "-") -> None:
        self.separator = separator

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.brokerName.split(self.separator)[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split(self.separator)[0]


class AllocateMachineRoomNearby:
    """Queues of a room go to that room's consumers (allocated by the wrapped strategy); queues
    of a room with no live consumer are shared by all consumers."""

    def __init__(self, strategy: AllocateMessageQueueStrategy, resolver: MachineRoomResolver) -> None:
        if strategy is None:
            raise ValueError("allocateMessageQueueStrategy is null")
        if resolver is None:
            raise ValueError("machineRoomResolver is null")
        self.strategy = strategy
        self.resolver = resolver
        self.name = "MACHINE_ROOM_NEARBY-" + strategy.name

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        mr2mq: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"Machine room is null for mq {mq_to_string(mq)}")
            mr2mq.setdefault(room, []).append(mq)
        mr2c: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"Machine room is null for consumer id {cid}")
            mr2c.setdefault(room, []).append(cid)
        result: list[MessageQueue] = []
        current_room = self.resolver.consumer_deploy_in(current_cid)
        mine = mr2mq.pop(current_room, None)
        if mine:
            result.extend(self.strategy.allocate(consumer_group, current_cid, mine, mr2c[current_room]))
        for room in sorted(mr2mq):            # TreeMap iteration order
            if room not in mr2c:
                result.extend(self.strategy.allocate(consumer_group, current_cid, mr2mq[room], cid_all))
        return result


def strategy_by_name(name: str) -> AllocateMessageQueueStrategy:
    """``"AVG"``, ``"AVG_BY_CIRCLE"`` or ``"CONSISTENT_HASH"`` (also the Python class names)."""
    key = name.strip().upper()
    table = {
        "AVG": AllocateMessageQueueAveragely, "AVERAGE": AllocateMessageQueueAveragely,
        "ALLOCATEMESSAGEQUEUEAVERAGELY": AllocateMessageQueueAveragely,
        "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
        "ALLOCATEMESSAGEQUEUEAVERAGELYBYCIRCLE": AllocateMessageQueueAveragelyByCircle,
        "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
        "ALLOCATEMESSAGEQUEUECONSISTENTHASH": AllocateMessageQueueConsistentHash,
    }
    if key not in table:
        raise ValueError(f"unknown allocation strategy {name!r} (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH)")
    return table[key]()
