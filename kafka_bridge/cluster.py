"""One Kafka cluster over several RocketMQ brokers (SPEC §9, §11, issue 3): how the Kafka
listeners of separate `rmq broker` processes find each other through the NameServers, number the
partitions of a topic across brokers, pick group coordinators and keep committed offsets on the
broker that owns each queue.

- Endpoints: each broker with a Kafka listener publishes it to every NameServer of namesrvAddr
  as KV config (namespace ``KAFKA_BRIDGE``, key = brokerName for a master, brokerName@brokerId
  for a slave, value = "host:port") when the listener starts, again every
  ``registerNameServerPeriod``, and deletes it on a clean shutdown.
- Groups and nodes: the brokerNames of this brokerClusterName that ever had a Kafka listener
  (each records itself, never deleted, under KV namespace ``KAFKA_BRIDGE_MEMBERS``), in brokerName
  order: group index = position in that order, so that node ids do not change when a broker dies
  (issue 27). A group leads with its registered master when that publishes an endpoint, or, while
  the master is not registered (down), with its registered slave; with neither it is offline. Each
  registered broker of a group with an endpoint is a node: node id = brokerId * 1000 + group
  index, so masters are 0, 1, ... and broker-a's slave (brokerId 1) is 1000.
- Replicas (the HA pair as a Kafka partition's replicas, docs/ha.md): replicas = [master, slaves],
  the master leads while it is registered; while it is down, its slave with the lowest brokerId
  leads for reads (it refuses produce: RocketMQ 4.x does not promote a slave) and the master is an
  offline replica. ISR: the master and the slaves that are in step, as far as this node knows
  (the master's and the slave's own HA service; elsewhere: a registered slave, what RocketMQ
  publishes).
- Partitions: a topic's queues (GET_ROUTEINFO_BY_TOPIC) on those groups in brokerName order;
  broker-a's queues 0..n-1 are partitions 0..n-1, broker-b's follow. The group's leader node
  leads the partition; partition p is local queueId p - base on every replica. Followers serve
  Fetch and ListOffsets from their own copy (Kafka's fetch-from-follower). The NameServer drops a
  dead broker's queues from the route, so the queue count of each (topic, brokerName) is kept in
  memory and under KV namespace ``KAFKA_BRIDGE_QUEUES`` (key brokerName/topic): each master records
  its own topics there as configured, when a topic is created, updated or deleted on it (whatever
  created it: Kafka, `rmq admin updateTopic`, a RocketMQ producer's auto-creation) and on start; any
  bridge also records what it sees in a route. An offline group keeps its partitions and their
  numbers (Metadata: leader -1, LEADER_NOT_AVAILABLE;
  Produce and Fetch: NOT_LEADER_OR_FOLLOWER), as a Kafka partition without a live replica does, so
  a committed offset always names the same record.
- Coordinators: a group's coordinator is the leader of group abs(groupId.hashCode()) mod group
  count, Kafka's partitionFor(group) with one "offsets partition" per brokerName: the master,
  or its slave while the master is down; while that group is offline, the next group that has a
  leader (the coordinator keeps no state that the offsets need: they stay on the owning brokers).
- Offsets: ClusterOffsetStore gives the GroupCoordinator the broker-side table RocketMQ uses —
  local partitions go to this broker's ConsumerOffsetManager, the others over RocketMQ remoting
  (UPDATE_CONSUMER_OFFSET / QUERY_CONSUMER_OFFSET) to the broker that owns the queue.

Views are cached for VIEW_TTL_S and refreshed in the background when stale, and at once (rate
limited) when a client names a topic or partition the cached view does not know. With only this
broker in the view, or no NameServer answering, the handlers behave as a single broker.
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from rmq.remoting import (
    ClusterInfo,
    CreateTopicRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicInNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVTable,
    PutKVConfigRequestHeader,
    QueryConsumerOffsetRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicList,
    TopicRouteData,
    UpdateConsumerOffsetRequestHeader,
    fastjson,
)
from rmq.remoting.errors import RemotingError
from rmq.server.remoting_server import RemotingClient, RemotingConnectError, RemotingTimeout

from .protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.cluster")

#: KV config namespace the brokers publish their Kafka endpoints under (key = brokerName).
NAMESPACE = "KAFKA_BRIDGE"
#: brokerName -> brokerClusterName of every broker that ever had a Kafka listener (never deleted)
MEMBERS_NAMESPACE = "KAFKA_BRIDGE_MEMBERS"
#: "brokerName/topic" -> "queues,perm": a topic's queue count per brokerName, as last seen in a route
QUEUES_NAMESPACE = "KAFKA_BRIDGE_QUEUES"
#: UPDATE_CONSUMER_OFFSET's extra field for a Kafka commit (the owning broker journals it before answering)
DURABLE_FIELD = "kafkaDurable"
#: How often a master looks at its own topic table for changes to record under QUEUES_NAMESPACE
TOPIC_WATCH_S = 0.2
#: How long a cached node list, topic route or topic list is used before a background refresh.
VIEW_TTL_S = 2.0
#: how old the view of a broker that thinks it is alone may be (brokers registering after it)
LONE_TTL_S = 0.5
#: An unknown topic or partition is looked up again at most this often.
MISS_RETRY_S = 0.25
NAMESRV_TIMEOUT_S = 2.0
BROKER_TIMEOUT_S = 3.0
MASTER_ID = 0
#: node id = brokerId * NODE_ID_STRIDE + group index: masters 0..n-1, their first slaves 1000..
NODE_ID_STRIDE = 1000
_MAX_ROUTES_CACHED = 4096
_LEGAL_KAFKA_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_NETWORK_ERRORS = (RemotingConnectError, RemotingTimeout, OSError, RemotingError)


class ClusterError(Exception):
    """A NameServer or another broker did not answer, or answered with an error."""

    def __init__(self, message: str, timeout: bool = False, code: int | None = None) -> None:
        super().__init__(message)
        self.timeout = timeout
        self.code = code

    @property
    def error_code(self) -> int:
        if self.code is not None:
            return self.code
        return ec.REQUEST_TIMED_OUT if self.timeout else ec.COORDINATOR_NOT_AVAILABLE


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), as a signed int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_index(key: str, nodes: int) -> int:
    """Kafka's partitionFor(groupId): Utils.abs(hashCode) (= hashCode & 0x7fffffff) mod count."""
    return (java_string_hash(key) & 0x7FFFFFFF) % nodes


def split_partitions(total: int, brokers: int) -> list[int]:
    """num_partitions over brokers in brokerName order: the first total % brokers brokers get
    ceil(total / brokers) queues, the others floor(total / brokers) (possibly 0)."""
    q, r = divmod(total, brokers)
    return [q + 1] * r + [q] * (brokers - r)


def endpoint_key(broker_name: str, broker_id: int) -> str:
    """The KV key a broker publishes its Kafka endpoint under: brokerName, brokerName@brokerId for a slave."""
    return broker_name if broker_id == MASTER_ID else f"{broker_name}@{broker_id}"


@dataclass(frozen=True)
class KafkaNode:
    node_id: int
    broker_name: str
    host: str
    port: int
    broker_addr: str  # this broker's RocketMQ remoting address
    broker_id: int = MASTER_ID

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        role = "" if self.broker_id == MASTER_ID else f" slave {self.broker_id}"
        return f"node {self.node_id} = {self.broker_name}{role} ({self.endpoint})"


@dataclass(frozen=True)
class BrokerGroup:
    """One brokerName's Kafka nodes: its master (None while it is not registered) and its slaves
    with a Kafka listener (followers), at least one of the two."""
    index: int
    broker_name: str
    master: KafkaNode | None
    slaves: tuple[KafkaNode, ...]

    @property
    def master_id(self) -> int:
        """The master's node id, also while it is down (an offline replica then)."""
        return self.index

    @property
    def leader(self) -> KafkaNode | None:
        """The master, its first slave while it is down, None while the group is offline."""
        return self.master if self.master is not None else self.slaves[0] if self.slaves else None

    @property
    def offline(self) -> bool:
        return self.master is None and not self.slaves

    @property
    def members(self) -> tuple[KafkaNode, ...]:
        """The live nodes: the master when it is up, and the slaves."""
        return ((self.master,) if self.master is not None else ()) + self.slaves

    @property
    def replicas(self) -> list[int]:
        return [self.master_id] + [s.node_id for s in self.slaves]


@dataclass(frozen=True)
class Segment:
    """The partitions base .. base+count-1 of a topic: queueIds 0..count-1 on node's broker. An
    offline segment (its brokerName has no live broker) keeps its numbers; its node is a stand-in
    with the master's node id and no address."""
    node: KafkaNode
    base: int
    count: int
    perm: int
    offline: bool = False


@dataclass(frozen=True)
class TopicLayout:
    topic: str
    segments: tuple[Segment, ...]
    total: int
    broker_addrs: tuple[str, ...]  # master addresses of every broker the route lists

    def locate(self, partition: int) -> Segment | None:
        for seg in self.segments:
            if seg.base <= partition < seg.base + seg.count:
                return seg
        return None

    def segment_of(self, broker_name: str) -> Segment | None:
        for seg in self.segments:
            if seg.node.broker_name == broker_name:
                return seg
        return None


def _parse_endpoint(name: str, endpoint: str | None) -> tuple[str, int] | None:
    """(host, port) of a published "host:port", None when absent or malformed (with a log line)."""
    if not endpoint:
        return None
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        log.warning("ignoring malformed Kafka endpoint %r of %s", endpoint, name)
        return None
    return host.strip("[]"), int(port)


def build_groups(names, broker_addr_table: dict, kv: dict[str, str], known=()) -> tuple[BrokerGroup, ...]:
    """The Kafka brokerNames among `names` (GET_BROKER_CLUSTER_INFO's brokerAddrTable: the registered
    brokers by brokerId; kv: the published endpoints) and `known` (every brokerName of the cluster
    that ever had a Kafka listener), in brokerName order, with their nodes; a known brokerName with
    no live Kafka node is an offline group (it keeps its index, so node ids stay)."""
    groups: list[BrokerGroup] = []
    known = set(known)
    for name in sorted(set(names) | known):
        bd = broker_addr_table.get(name)
        index = len(groups)
        if bd is None:
            if name in known:
                groups.append(BrokerGroup(index, name, None, ()))
            continue
        members = []  # the registered brokers of this brokerName that publish a Kafka endpoint
        for bid in sorted(bd.brokerAddrs):
            ep = _parse_endpoint(name, kv.get(endpoint_key(name, bid)))
            if ep is not None:
                members.append(KafkaNode(bid * NODE_ID_STRIDE + index, name, *ep, bd.brokerAddrs[bid], bid))
        master = members[0] if members and members[0].broker_id == MASTER_ID else None
        if not members or (master is None and MASTER_ID in bd.brokerAddrs):
            if name in known:  # a Kafka broker whose listener is not (yet) published: offline
                groups.append(BrokerGroup(index, name, None, ()))
            continue  # no Kafka listener, or a master that is up without one: not a Kafka broker
        groups.append(BrokerGroup(index, name, master, tuple(members[1:] if master else members)))
    return tuple(groups)


def route_counts(route: TopicRouteData) -> dict[str, tuple[int, int]]:
    """brokerName -> (queues, perm) of a route (queues = max(read, write), as partitions count)."""
    counts: dict[str, tuple[int, int]] = {}
    for qd in route.queueDatas:
        if qd.brokerName not in counts:
            counts[qd.brokerName] = (max(qd.readQueueNums, qd.writeQueueNums), qd.perm)
    return counts


def build_layout(topic: str, route: TopicRouteData, nodes: dict[str, KafkaNode],
                 offline: dict[str, tuple[KafkaNode, int, int]] | None = None) -> TopicLayout:
    """The topic's partitions: the route's queues on the live groups (`nodes`: brokerName -> leading
    node) and, for the offline groups, the queue counts last seen (`offline`: brokerName -> (stand-in
    node, queues, perm)), all in brokerName order."""
    counts = {name: c for name, c in route_counts(route).items() if name in nodes}
    lead = dict(nodes)
    for name, (node, count, perm) in (offline or {}).items():
        if name not in counts:
            counts[name] = (count, perm)
            lead[name] = node
    segments, base = [], 0
    for name in sorted(counts):
        count, perm = counts[name]
        if count > 0:
            segments.append(Segment(lead[name], base, count, perm, offline=name not in nodes))
            base += count
    addrs = tuple(bd.brokerAddrs[MASTER_ID] for bd in route.brokerDatas if MASTER_ID in bd.brokerAddrs)
    return TopicLayout(topic, tuple(segments), base, addrs)


class KafkaCluster:
    """This broker's view of the Kafka cluster, read from the NameServers, plus the remoting calls
    to the other brokers that cluster-wide Kafka requests need. Runs on the Kafka listener's loop."""

    def __init__(self, broker_config, host: str, port: int, *, ttl: float = VIEW_TTL_S,
                 in_sync: Callable[[], bool | None] | None = None) -> None:
        from rmq.server.broker_listener import parse_namesrv_addr
        self.cluster_name = broker_config.brokerClusterName
        self.broker_name = broker_config.brokerName
        self.broker_id = broker_config.brokerId
        self.key = endpoint_key(self.broker_name, self.broker_id)
        #: what this broker's HA service knows of its pair: on a master, a slave is in step; on a
        #: slave, it is connected to its master (None: unknown)
        self.in_sync = in_sync
        self.namesrv_addrs = parse_namesrv_addr(broker_config.namesrvAddr)
        self.endpoint = f"{host}:{port}"
        self.period_s = max(1.0, min(broker_config.registerNameServerPeriod, 60_000) / 1000.0)
        self.ttl = ttl
        self.client = RemotingClient("kafka-cluster", connect_timeout=1.0)
        self.groups: tuple[BrokerGroup, ...] = ()
        self.group_of: dict[str, BrokerGroup] = {}
        self.nodes: tuple[KafkaNode, ...] = ()  # every live node, by node id
        self.by_name: dict[str, KafkaNode] = {}  # brokerName -> the node leading its partitions
        self.self_node: KafkaNode | None = None
        self.cluster_brokers: frozenset[str] = frozenset()
        self._nodes_at: float | None = None
        self._nodes_version = 0
        #: called (no arguments) after each change of the view, e.g. to unload the groups this
        #: node no longer coordinates
        self.on_view_change: list = []
        self._routes: dict[str, tuple[float, TopicRouteData | None]] = {}
        self._layouts: dict[str, tuple[int, TopicRouteData, TopicLayout]] = {}
        #: topic -> brokerName -> (queues, perm) last seen in a route or the KV config (0: none)
        self._queue_counts: dict[str, dict[str, tuple[int, int]]] = {}
        self._recorded: dict[tuple[str, str], tuple[int, int]] = {}  # what this process put in the KV config
        self._topics: tuple[float | None, list[str]] = (None, [])
        self._tasks: dict = {}
        self._ns_next = random.randrange(len(self.namesrv_addrs)) if self.namesrv_addrs else 0
        self._publisher: asyncio.Task | None = None
        self._published: dict[str, bool] = {}
        self._warned = False
        #: set by the bridge on a master: () -> a value that changes with the topic table, and
        #: () -> {topic: (queues, perm)} of this broker's topics as configured
        self.topics_version: Callable[[], object] | None = None
        self.topic_counts: Callable[[], dict[str, tuple[int, int]]] | None = None
        self._recorder: asyncio.Task | None = None

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> bool:
        """True when this broker is one of several Kafka brokerNames (live or offline: a broker
        that died keeps its partitions' numbers), or a slave (a follower keeps its node id and
        answers for its master's partitions even alone); else single-broker behaviour."""
        return self.self_node is not None and (len(self.groups) > 1 or len(self.nodes) > 1
                                               or self.broker_id != MASTER_ID)

    @property
    def node_id(self) -> int:
        return self.self_node.node_id if self.self_node is not None else -1

    @property
    def masters(self) -> tuple[KafkaNode, ...]:
        """The registered masters, in brokerName order: the nodes that take writes (topics are created there)."""
        return tuple(g.master for g in self.groups if g.master is not None)

    @property
    def controller_id(self) -> int:
        """Metadata's controller: the first master (admin clients send CreateTopics there)."""
        return (self.masters or self.nodes)[0].node_id

    def _is_self(self, node: KafkaNode) -> bool:
        return node.broker_name == self.broker_name and node.broker_id == self.broker_id

    def is_local(self, seg: Segment) -> bool:
        """This node leads the segment's partitions (their offsets are committed here)."""
        return self._is_self(seg.node)

    def is_replica(self, seg: Segment) -> bool:
        """This node holds a copy of the segment's partitions: the leader, or a follower (same brokerName)."""
        return seg.node.broker_name == self.broker_name

    def takes_writes(self, seg: Segment) -> bool:
        """Records and log starts change on the leader only, and only a master leads for writes."""
        return self.is_local(seg) and self.broker_id == MASTER_ID

    def coordinator_for(self, key: str) -> KafkaNode | None:
        """The group's coordinator: the leader of its group, or while that group is offline the
        leader of the next group that has one (None when none has)."""
        n = len(self.groups)
        first = coordinator_index(key, n)
        for i in range(n):
            leader = self.groups[(first + i) % n].leader
            if leader is not None:
                return leader
        return None

    def is_coordinator(self, key: str) -> bool:
        node = self.coordinator_for(key)
        return node is not None and self._is_self(node)

    def replica_state(self, seg: Segment) -> tuple[list[int], list[int], list[int]]:
        """(replicas, isr, offline replicas) of a segment's partitions. While the master is down its
        slave leads alone (ISR = the leader). Otherwise a slave is in the ISR when this node's HA
        service says the pair is in step (on the master: a slave within haSlaveFallbehindMax, as
        RocketMQ's isSlaveOK; on the slave: connected to its master) and, on any other node, when
        it is registered with the NameServer (RocketMQ publishes no more than brokerAddrs)."""
        group = self.group_of.get(seg.node.broker_name)
        if seg.offline or (group is not None and group.offline):
            return [seg.node.node_id], [], [seg.node.node_id]
        if group is None or group.leader != seg.node:  # a layout older than the view: its leader alone
            return [seg.node.node_id], [seg.node.node_id], []
        if group.master is None:
            return group.replicas, [group.leader.node_id], [group.master_id]
        state = self.in_sync() if self.in_sync is not None else None
        me = self.self_node
        isr = [group.master_id]
        for s in group.slaves:
            if state is False and me in (s, group.master):
                continue  # this pair's own HA service says the slave is not in step
            isr.append(s.node_id)
        return group.replicas, isr, []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Publish the endpoint once (bounded), then keep it fresh every registration period."""
        if not self.namesrv_addrs:
            return
        await self._publish_all()
        loop = asyncio.get_running_loop()
        self._publisher = loop.create_task(self._publish_loop(), name="kafkaEndpointPublisher")
        if self.broker_id == MASTER_ID and self.topics_version is not None and self.topic_counts is not None:
            self._recorder = loop.create_task(self._record_topics_loop(), name="kafkaTopicQueuesRecorder")

    async def close(self) -> None:
        """Stop refreshing and delete this broker's endpoint from every NameServer."""
        for task in (self._publisher, self._recorder):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._publisher = self._recorder = None
        for t in list(self._tasks.values()):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        ext = DeleteKVConfigRequestHeader(namespace=NAMESPACE, key=self.key).to_ext_fields()

        async def one(addr: str) -> None:
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, ext), 1.5)
            except _NETWORK_ERRORS as exc:
                log.info("deleting the Kafka endpoint from NameServer %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
        await self.client.close_async()

    async def _publish_all(self) -> None:
        ext = PutKVConfigRequestHeader(namespace=NAMESPACE, key=self.key, value=self.endpoint).to_ext_fields()
        member = PutKVConfigRequestHeader(namespace=MEMBERS_NAMESPACE, key=self.broker_name,
                                          value=self.cluster_name).to_ext_fields()

        async def one(addr: str) -> None:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, member),
                                                NAMESRV_TIMEOUT_S)
                if resp.code == ResponseCode.SUCCESS:
                    resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, ext),
                                                    NAMESRV_TIMEOUT_S)
                ok, why = resp.code == ResponseCode.SUCCESS, resp.remark
            except _NETWORK_ERRORS as exc:
                self.client.close_connection(addr)
                ok, why = False, str(exc)
            if ok and not self._published.get(addr):
                log.info("Kafka endpoint %s of %s published to NameServer %s", self.endpoint, self.key, addr)
            elif not ok and self._published.get(addr, True):
                log.warning("publishing the Kafka endpoint to NameServer %s failed: %s", addr, why)
            self._published[addr] = ok

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self._publish_all()
            except Exception:  # noqa: BLE001 - keep publishing
                log.exception("publishing the Kafka endpoint failed")

    async def _record_topics_loop(self) -> None:
        """Keep this master's topics, as configured, under QUEUES_NAMESPACE: at start (against what
        the KV config holds) and after every change of the topic table, so that a topic's Kafka
        partitions are numbered from its configured route even when no Kafka client looked at it
        before a broker died (issue 27). A broker alone (no other Kafka brokerName) records nothing
        until another joins, then everything at once."""
        recorded: dict[str, tuple[int, int]] | None = None  # this broker's records in the KV config
        seen = None
        loop = asyncio.get_running_loop()
        next_look = 0.0  # when a broker that thinks it is alone reads the node list again
        while True:
            version = self.topics_version()
            wait = TOPIC_WATCH_S
            if version is not seen and not self.active and loop.time() >= next_look:
                next_look = loop.time() + self.period_s  # the view may be old: no Kafka client asked here
                await self.refresh_nodes()
            if version is not seen and self.active:  # alone, a broker has nothing to number across
                try:
                    if recorded is None:
                        recorded = await self._own_records()
                    recorded, done = await self._record_own_topics(recorded, self.topic_counts())
                    if done:
                        seen = version
                    else:  # a NameServer did not take every record: again after a registration period
                        wait = self.period_s
                except ClusterError as exc:
                    log.debug("the queue counts of %s's topics not recorded yet: %s", self.broker_name, exc)
                    wait = self.period_s
                except Exception:  # noqa: BLE001 - keep watching
                    log.exception("recording the queue counts of %s's topics failed", self.broker_name)
                    seen = version
            await asyncio.sleep(wait)

    async def _own_records(self) -> dict[str, tuple[int, int]]:
        resp = await self._namesrv(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                   GetKVListByNamespaceRequestHeader(namespace=QUEUES_NAMESPACE).to_ext_fields())
        table = KVTable.decode(resp.body).table if resp.code == ResponseCode.SUCCESS and resp.body else {}
        out = {}
        prefix = f"{self.broker_name}/"
        for key, value in table.items():
            if key.startswith(prefix):
                try:
                    count, perm = (int(x) for x in str(value).split(","))
                except ValueError:
                    continue
                out[key[len(prefix):]] = (count, perm)
        return out

    async def _record_own_topics(self, recorded: dict[str, tuple[int, int]], counts: dict[str, tuple[int, int]]
                                 ) -> tuple[dict[str, tuple[int, int]], bool]:
        """Put the counts that differ from `recorded`, delete the records of topics this broker no
        longer has; (the records as they now stand, whether every NameServer took every change)."""
        name = self.broker_name
        out = dict(recorded)
        ok_all = True
        for topic, c in counts.items():
            if c[0] > 0 and recorded.get(topic) != c:
                ok = await self._kv_all(RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader(
                    namespace=QUEUES_NAMESPACE, key=f"{name}/{topic}", value=f"{c[0]},{c[1]}").to_ext_fields())
                if ok:
                    out[topic] = c
                    self._recorded[(name, topic)] = c
                ok_all &= ok
        for topic in [t for t in recorded if t not in counts]:
            ok = await self._kv_all(RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader(
                namespace=QUEUES_NAMESPACE, key=f"{name}/{topic}").to_ext_fields())
            if ok:
                out.pop(topic, None)
                self._recorded.pop((name, topic), None)
            ok_all &= ok
        if not ok_all:
            log.debug("a NameServer of %s did not take every queue record of %s", ";".join(self.namesrv_addrs), name)
        return out, ok_all

    async def _kv_all(self, code: int, ext: dict) -> bool:
        """One KV request to every NameServer; True when all answered SUCCESS."""
        async def one(addr: str) -> bool:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(code, ext), NAMESRV_TIMEOUT_S)
            except _NETWORK_ERRORS:
                self.client.close_connection(addr)
                return False
            return resp.code == ResponseCode.SUCCESS
        return all(await asyncio.gather(*(one(a) for a in self.namesrv_addrs)))

    # ------------------------------------------------------------------ requests
    def _single_flight(self, key, fn: Callable[[], Awaitable]) -> asyncio.Task:
        task = self._tasks.get(key)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(fn())
            self._tasks[key] = task
            task.add_done_callback(lambda t, k=key: self._tasks.pop(k, None) if self._tasks.get(k) is t else None)
        return task

    async def _namesrv(self, code: int, ext: dict | None = None) -> RemotingCommand:
        """One request to a NameServer: the one that answered last, then the others in turn."""
        n = len(self.namesrv_addrs)
        last: Exception | None = None
        for i in range(n):
            idx = (self._ns_next + i) % n
            addr = self.namesrv_addrs[idx]
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(code, ext), NAMESRV_TIMEOUT_S)
            except _NETWORK_ERRORS as exc:
                self.client.close_connection(addr)
                last = exc
                continue
            self._ns_next = idx
            return resp
        raise ClusterError(f"no NameServer of {';'.join(self.namesrv_addrs) or '(none)'} answered: {last}")

    async def _broker(self, addr: str, code: int, ext: dict | None = None) -> RemotingCommand:
        try:
            return await self.client.invoke(addr, RemotingCommand.request(code, ext), BROKER_TIMEOUT_S)
        except RemotingTimeout as exc:
            raise ClusterError(f"broker {addr}: {exc}", timeout=True) from None
        except _NETWORK_ERRORS as exc:
            self.client.close_connection(addr)
            raise ClusterError(f"broker {addr}: {exc}") from None

    # ------------------------------------------------------------------ nodes
    async def ensure_nodes(self) -> None:
        """Refresh the node list when stale: awaited the first time and while this broker thinks it is
        alone (a stale lone view would answer with its own partitions only, and a client that took
        that count refuses the others' partitions) unless the NameServers failed the last time, in
        the background after."""
        if not self.namesrv_addrs:
            return
        now = time.monotonic()
        alone = not self.active
        if self._nodes_at is not None and now - self._nodes_at < (min(self.ttl, LONE_TTL_S) if alone else self.ttl):
            return
        task = self._single_flight("nodes", self._refresh_nodes)
        if self._nodes_at is None or (alone and not self._warned):  # NameServers failing: in the background
            await asyncio.shield(task)

    async def refresh_nodes(self) -> None:
        """Read the node list from the NameServers now (CreateTopics: a broker killed a moment ago
        must not be given queues; the cached view may be up to VIEW_TTL_S old)."""
        if self.namesrv_addrs:
            await asyncio.shield(self._single_flight("nodes", self._refresh_nodes))

    async def _refresh_nodes(self) -> None:
        try:
            ci_resp = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
            kv_resp = await self._namesrv(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                          GetKVListByNamespaceRequestHeader(namespace=NAMESPACE).to_ext_fields())
            ci = ClusterInfo.decode(ci_resp.body) if ci_resp.code == ResponseCode.SUCCESS and ci_resp.body else None
            kv = KVTable.decode(kv_resp.body).table if kv_resp.code == ResponseCode.SUCCESS and kv_resp.body else {}
            mem_resp = await self._namesrv(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                           GetKVListByNamespaceRequestHeader(namespace=MEMBERS_NAMESPACE).to_ext_fields())
            members = (KVTable.decode(mem_resp.body).table
                       if mem_resp.code == ResponseCode.SUCCESS and mem_resp.body else {})
        except (ClusterError, RemotingError) as exc:
            if not self._warned:
                log.warning("Kafka cluster view not refreshed: %s", exc)
                self._warned = True
            self._nodes_at = time.monotonic()
            return
        self._warned = False
        names = set(ci.clusterAddrTable.get(self.cluster_name, ())) if ci is not None else set()
        self._nodes_at = time.monotonic()
        self.cluster_brokers = frozenset(names)
        known = {name for name, cluster in members.items() if cluster == self.cluster_name}
        self.set_groups(build_groups(names, ci.brokerAddrTable if ci is not None else {}, kv, known))

    def set_groups(self, groups: tuple[BrokerGroup, ...]) -> None:
        """Take a new view of the brokerNames and their nodes (layouts are rebuilt when it changed)."""
        if groups == self.groups:
            return
        self.groups = groups
        self.group_of = {g.broker_name: g for g in groups}
        self.nodes = tuple(sorted((n for g in groups for n in g.members), key=lambda n: n.node_id))
        self.by_name = {g.broker_name: g.leader for g in groups if g.leader is not None}
        self.self_node = next((n for n in self.nodes if self._is_self(n)), None)
        self._nodes_version += 1
        log.info("Kafka cluster %s: %s", self.cluster_name, ", ".join(n.describe() for n in self.nodes) or "no nodes")
        for g in groups:
            if g.offline:
                log.info("Kafka cluster %s: %s is down (no live broker): its partitions are offline",
                         self.cluster_name, g.broker_name)
            elif g.master is None:
                log.info("Kafka cluster %s: the master of %s is down; node %d (its slave) leads its partitions "
                         "for reads", self.cluster_name, g.broker_name, g.leader.node_id)
        for callback in list(self.on_view_change):
            try:
                callback()
            except Exception:  # noqa: BLE001 - a listener must not break the view
                log.exception("Kafka cluster %s: view-change listener failed", self.cluster_name)

    # ------------------------------------------------------------------ topics
    def cached_layout(self, topic: str) -> TopicLayout | None:
        entry = self._routes.get(topic)
        if entry is None or entry[1] is None:
            return None
        route = entry[1]
        cached = self._layouts.get(topic)
        if cached is not None and cached[0] == self._nodes_version and cached[1] is route:
            return cached[2]
        layout = build_layout(topic, route, self.by_name, self._missing_counts(topic, route))
        self._layouts[topic] = (self._nodes_version, route, layout)
        return layout

    def _missing_counts(self, topic: str, route: TopicRouteData) -> dict[str, tuple[KafkaNode, int, int]]:
        """brokerName -> (stand-in node, queues, perm) of the topic on each group the layout must
        not take from the route: offline groups, and groups whose queues the route lacks although
        they were seen (the NameServer drops a dead broker's queues before this view may know it is
        dead, and a restarted broker registers before its topics are routed). Their partitions are
        offline; never renumbered."""
        seen = self._queue_counts.get(topic, {})
        routed = route_counts(route)
        out = {}
        for g in self.groups:
            name = g.broker_name
            if (g.offline or name not in routed) and seen.get(name, (0, 0))[0] > 0:
                count, perm = seen[name]
                out[name] = (KafkaNode(g.master_id, name, "", -1, "", MASTER_ID), count, perm)
        return out

    async def layout(self, topic: str, partition: int | None = None, *, refresh: bool = False) -> TopicLayout | None:
        """The topic's partitions across the cluster, or None when no NameServer knows the topic.
        Looked up at once when not cached, when `partition` is beyond the cached layout (both rate
        limited) or with `refresh`; refreshed in the background when older than the TTL."""
        entry = self._routes.get(topic)
        now = time.monotonic()
        lay = self.cached_layout(topic)
        missing = lay is None or (partition is not None and partition >= lay.total)
        if refresh or entry is None or (missing and now - entry[0] >= MISS_RETRY_S):
            await asyncio.shield(self._single_flight(("route", topic), lambda: self._refresh_route(topic)))
            lay = self.cached_layout(topic)
        elif now - entry[0] >= self.ttl:
            self._single_flight(("route", topic), lambda: self._refresh_route(topic))
        return lay

    async def _refresh_route(self, topic: str) -> None:
        try:
            resp = await self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                       GetRouteInfoRequestHeader(topic=topic).to_ext_fields())
            route = TopicRouteData.decode(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else None
        except (ClusterError, RemotingError) as exc:
            log.debug("route of %s not refreshed: %s", topic, exc)
            old = self._routes.get(topic)
            self._routes[topic] = (time.monotonic(), old[1] if old else None)
            return
        if len(self._routes) >= _MAX_ROUTES_CACHED and topic not in self._routes:
            for name in [t for t, (_, r) in self._routes.items() if r is None]:
                del self._routes[name]
                self._queue_counts.pop(name, None)
                for key in [k for k in self._recorded if k[1] == name]:
                    del self._recorded[key]
        if route is not None:
            await self._note_queue_counts(topic, route)
        else:  # no broker routes the topic: deleted (or never created)
            self._queue_counts.pop(topic, None)
        self._routes[topic] = (time.monotonic(), route)

    async def _note_queue_counts(self, topic: str, route: TopicRouteData) -> None:
        """Keep each group's queue count of the topic (in memory, and in the KV config for the other
        bridges and later starts); look up those of offline groups not known yet. A broker registers
        its topics with its registration, so a live group the route does not list has no queues of
        the topic; but the NameServer drops a dead broker's queues at once, before this view may know
        the broker is dead: the view is refreshed first when the route loses a live group's queues."""
        seen = self._queue_counts.setdefault(topic, {})
        counts = route_counts(route)
        if any(not g.offline and counts.get(g.broker_name, (0, 0))[0] == 0 and seen.get(g.broker_name, (0, 0))[0] > 0
               for g in self.groups):
            await asyncio.shield(self._single_flight("nodes", self._refresh_nodes))
        for g in self.groups:
            name = g.broker_name
            c = counts.get(name, (0, 0))
            if g.offline:
                if name not in seen:
                    seen[name] = c if c[0] > 0 else await self._recorded_count(name, topic)
                continue
            seen[name] = c
            if c[0] > 0 and self._recorded.get((name, topic)) != c:
                self._recorded[(name, topic)] = c
                self._single_flight(("record", name, topic), lambda n=name, c=c: self._record_count(n, topic, c))

    async def _record_count(self, name: str, topic: str, c: tuple[int, int]) -> None:
        ext = PutKVConfigRequestHeader(namespace=QUEUES_NAMESPACE, key=f"{name}/{topic}",
                                       value=f"{c[0]},{c[1]}").to_ext_fields()
        for addr in self.namesrv_addrs:
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, ext), NAMESRV_TIMEOUT_S)
            except _NETWORK_ERRORS as exc:
                self._recorded.pop((name, topic), None)  # try again with the next route
                log.debug("recording the queues of %s on %s at NameServer %s failed: %s", topic, name, addr, exc)

    async def _recorded_count(self, name: str, topic: str) -> tuple[int, int]:
        """(queues, perm) of the topic on brokerName `name` from the KV config, (0, 0) when unknown."""
        try:
            resp = await self._namesrv(RequestCode.GET_KV_CONFIG,
                                       GetKVConfigRequestHeader(namespace=QUEUES_NAMESPACE,
                                                                key=f"{name}/{topic}").to_ext_fields())
        except (ClusterError, RemotingError):
            return 0, 0
        value = resp.ext_fields.get("value") if resp.code == ResponseCode.SUCCESS and resp.ext_fields else None
        try:
            count, perm = (int(x) for x in str(value).split(","))
            return count, perm
        except (TypeError, ValueError):
            return 0, 0

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)
        self._layouts.pop(topic, None)
        self._queue_counts.pop(topic, None)

    async def wait_layout(self, topic: str, ready: Callable[[TopicLayout | None], bool],
                          timeout: float) -> TopicLayout | None:
        """Poll the NameServer until `ready(layout)` (a broker registers a topic change at once)."""
        deadline = time.monotonic() + timeout
        while True:
            lay = await self.layout(topic, refresh=True)
            if ready(lay) or time.monotonic() >= deadline:
                return lay
            await asyncio.sleep(0.05)

    async def topic_names(self) -> list[str]:
        """Topics of this cluster (GET_TOPICS_BY_CLUSTER), cached like the routes."""
        at, names = self._topics
        if at is None or time.monotonic() - at >= self.ttl:
            try:
                resp = await self._namesrv(RequestCode.GET_TOPICS_BY_CLUSTER,
                                           GetTopicsByClusterRequestHeader(cluster=self.cluster_name).to_ext_fields())
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    names = sorted(TopicList.decode(resp.body).topicList)
            except (ClusterError, RemotingError) as exc:
                log.debug("topic list not refreshed: %s", exc)
            self._topics = (time.monotonic(), names)
        return list(names)

    def known_topic_names(self) -> list[str]:
        return list(dict.fromkeys(list(self._topics[1]) + [t for t, (_, r) in self._routes.items() if r is not None]))

    # ------------------------------------------------------------------ other brokers
    async def create_topic_on(self, broker_addr: str, topic: str, queues: int, *, perm: int = 6,
                              order: bool = False) -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker (what `mqadmin updateTopic -b` sends)."""
        h = CreateTopicRequestHeader(topic=topic, defaultTopic="TBW102", readQueueNums=queues, writeQueueNums=queues,
                                     perm=perm, topicFilterType="SINGLE_TAG", topicSysFlag=0, order=order)
        resp = await self._broker(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
        if resp.code != ResponseCode.SUCCESS:
            raise ClusterError(f"broker {broker_addr}: creating {topic}: {resp.remark}")

    async def delete_topic_everywhere(self, topic: str, broker_addrs) -> None:
        """DELETE_TOPIC_IN_BROKER on each broker, then DELETE_TOPIC_IN_NAMESRV on each NameServer
        (what `mqadmin deleteTopic -c` does)."""
        ext = DeleteTopicRequestHeader(topic=topic).to_ext_fields()
        for addr in broker_addrs:
            resp = await self._broker(addr, RequestCode.DELETE_TOPIC_IN_BROKER, ext)
            if resp.code != ResponseCode.SUCCESS:
                raise ClusterError(f"broker {addr}: deleting {topic}: {resp.remark}")
        ns_ext = DeleteTopicInNamesrvRequestHeader(topic=topic).to_ext_fields()

        async def one(addr: str) -> None:
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, ns_ext),
                                         NAMESRV_TIMEOUT_S)
            except _NETWORK_ERRORS as exc:
                log.warning("deleting %s from NameServer %s failed: %s", topic, addr, exc)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
        for g in self.groups:  # the queue counts kept for offline groups go with the topic
            key = DeleteKVConfigRequestHeader(namespace=QUEUES_NAMESPACE, key=f"{g.broker_name}/{topic}").to_ext_fields()
            self._recorded.pop((g.broker_name, topic), None)
            for addr in self.namesrv_addrs:
                try:
                    await self.client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, key),
                                             NAMESRV_TIMEOUT_S)
                except _NETWORK_ERRORS as exc:
                    log.debug("deleting the recorded queues of %s at NameServer %s failed: %s", topic, addr, exc)
        self.forget(topic)

    async def update_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int,
                            *, durable: bool = False) -> None:
        """UPDATE_CONSUMER_OFFSET; `durable` adds the `kafkaDurable` field: the owning broker journals
        the commit before it answers (a Kafka commit), instead of keeping it until its next persist."""
        h = UpdateConsumerOffsetRequestHeader(consumerGroup=group, topic=topic, queueId=queue_id, commitOffset=offset)
        ext = h.to_ext_fields()
        if durable:
            ext[DURABLE_FIELD] = "true"
        resp = await self._broker(broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if resp.code != ResponseCode.SUCCESS:
            raise ClusterError(f"broker {broker_addr}: UPDATE_CONSUMER_OFFSET {topic}@{group} q{queue_id}: {resp.remark}")

    async def query_offset(self, broker_addr: str, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when there is none (setZeroIfNotFound=false, as RocketMQ 5 clients
        ask, so a queue without an offset is not reported as 0)."""
        h = QueryConsumerOffsetRequestHeader(consumerGroup=group, topic=topic, queueId=queue_id, setZeroIfNotFound=False)
        resp = await self._broker(broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, h.to_ext_fields())
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if resp.code != ResponseCode.SUCCESS:
            raise ClusterError(f"broker {broker_addr}: QUERY_CONSUMER_OFFSET {topic}@{group} q{queue_id}: {resp.remark}")
        try:
            return int(resp.ext_fields.get("offset", -1))
        except (TypeError, ValueError):
            raise ClusterError(f"broker {broker_addr}: QUERY_CONSUMER_OFFSET answered a bad offset") from None

    async def all_offsets(self, broker_addr: str) -> dict[str, dict[int, int]]:
        """GET_ALL_CONSUMER_OFFSET: that broker's whole consumerOffset table."""
        resp = await self._broker(broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        if resp.code != ResponseCode.SUCCESS:
            raise ClusterError(f"broker {broker_addr}: GET_ALL_CONSUMER_OFFSET: {resp.remark}")
        try:
            obj = fastjson.loads(resp.body or b"{}", what="ConsumerOffsetSerializeWrapper")
            table = obj.get("offsetTable") or {}
            return {str(k): {int(q): int(o) for q, o in (v or {}).items()} for k, v in table.items()}
        except (RemotingError, AttributeError, TypeError, ValueError) as exc:
            raise ClusterError(f"broker {broker_addr}: GET_ALL_CONSUMER_OFFSET body: {exc}") from None


async def cluster_of(bridge) -> KafkaCluster | None:
    """The bridge's cluster view when this broker is one of several Kafka nodes, else None (then
    every handler answers as a single broker, exactly as `rmq up` does)."""
    cl = bridge.cluster
    if cl is None:
        return None
    await cl.ensure_nodes()
    return cl if cl.active else None


async def resolve_partition(cl: KafkaCluster, topic: str, partition: int, *, read: bool = False) -> tuple[int, int]:
    """(error code, local queueId) for a Produce/Fetch/ListOffsets/DeleteRecords partition in cluster
    mode: UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition, NOT_LEADER_OR_FOLLOWER
    when this node does not lead it (a write) or holds no copy of it (a `read`: followers, the
    slaves of the owning brokerName, serve reads from their own store)."""
    lay = await cl.layout(topic, partition)
    seg = lay.locate(partition) if lay is not None else None
    if seg is None:
        return ec.UNKNOWN_TOPIC_OR_PARTITION, -1
    if seg.offline or not (cl.is_replica(seg) if read else cl.takes_writes(seg)):
        return ec.NOT_LEADER_OR_FOLLOWER, -1
    return ec.NONE, partition - seg.base


async def _offline(why: str) -> None:
    raise ClusterError(why, code=ec.NOT_LEADER_OR_FOLLOWER)


def _log_failed_commit(task: asyncio.Task) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("committing an offset on another broker failed: %s", exc)


class ClusterOffsetStore:
    """The GroupCoordinator's offset store when brokers form one Kafka cluster.

    Offsets stay where RocketMQ keeps them, on the broker owning the queue, under the local queueId:
    a partition of this broker goes to the local ConsumerOffsetManager; another broker's goes there
    over UPDATE_CONSUMER_OFFSET. The coordinator calls commit_offset/query_offset synchronously, so
    the handlers do the network part around that call: `prefetch` (QUERY_CONSUMER_OFFSET) before
    an OffsetFetch, and `take_pending` + `settle` (await the UPDATE_CONSUMER_OFFSET answers) after
    an OffsetCommit. When the cluster view is not active, partition = queueId on this broker."""

    def __init__(self, local, cluster: KafkaCluster) -> None:
        self.local = local
        self.cluster = cluster
        self.remote: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> last known offset
        self._pending: list[tuple[str, int, asyncio.Task]] = []

    # what the coordinator reads for ListGroups / DescribeGroups and OffsetFetch(all) in single mode
    @property
    def offset_table(self):
        return self.local.offset_table

    def all_groups(self) -> set[str]:
        return self.local.all_groups()

    def _where(self, topic: str, partition: int) -> tuple[Segment | None, int]:
        cl = self.cluster
        if not cl.active:
            return None, partition
        lay = cl.cached_layout(topic)
        seg = lay.locate(partition) if lay is not None else None
        if seg is None:
            raise LookupError(f"{topic}-{partition} is not a partition of the cluster")
        return (None if cl.is_local(seg) else seg), partition - seg.base

    def commit_offset(self, group: str, topic: str, partition: int, offset: int, *, durable: bool = False) -> None:
        """`durable` (a Kafka commit): journaled before the answer, here (journal_sync) or by the
        owning broker before it answers UPDATE_CONSUMER_OFFSET (its `kafkaDurable` field)."""
        seg, qid = self._where(topic, partition)
        if seg is None:
            self.local.commit_offset(group, topic, qid, offset, durable=durable)
            return
        if seg.offline:  # refused: not remembered either (OffsetFetch answers what the owner has)
            coro = _offline(f"{topic}-{partition} is offline: its offsets are kept by {seg.node.broker_name}")
        else:
            self.remote[(group, topic, partition)] = offset
            coro = self.cluster.update_offset(seg.node.broker_addr, group, topic, qid, offset, durable=durable)
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(_log_failed_commit)
        self._pending.append((topic, partition, task))
        if len(self._pending) > 10_000:  # nobody settles them (e.g. a transaction's offsets)
            self._pending = [p for p in self._pending if not p[2].done()]

    def journal_sync(self) -> None:
        self.local.journal_sync()

    def offline_partitions(self, group: str, partitions) -> set[tuple[str, int]]:
        """Those of the (topic, partition) pairs whose committed offsets are kept by a broker that is
        down (its partitions offline in the cached layout) and not known here: unknown until it
        returns. An offset this coordinator committed or read before is answered from memory; a group
        with no offset known anywhere here is taken as new (no offset: the client's reset policy), so
        that its consumers read the live partitions instead of waiting for the dead broker."""
        cl = self.cluster
        out = set()
        if not cl.active:
            return out
        known_group = None
        for topic, partition in partitions:
            lay = cl.cached_layout(topic)
            seg = lay.locate(partition) if lay is not None else None
            if seg is None or not seg.offline or (group, topic, partition) in self.remote:
                continue
            if known_group is None:
                suffix = f"@{group}"
                known_group = (any(g == group for g, _, _ in self.remote)
                               or any(k.endswith(suffix) for k in list(self.local.offset_table)))
            if known_group:
                out.add((topic, partition))
        return out

    def query_offset(self, group: str, topic: str, partition: int) -> int:
        try:
            seg, qid = self._where(topic, partition)
        except LookupError:
            return -1
        if seg is None:
            return self.local.query_offset(group, topic, qid)
        return self.remote.get((group, topic, partition), -1)

    def take_pending(self) -> list[tuple[str, int, asyncio.Task]]:
        out, self._pending = self._pending, []
        return out

    @staticmethod
    async def settle(pending) -> dict[tuple[str, int], int]:
        """Await remote commits; {(topic, partition): error code} for those that failed."""
        failed = {}
        for topic, partition, task in pending:
            try:
                await task
            except ClusterError as exc:
                failed[(topic, partition)] = exc.error_code
            except Exception:  # noqa: BLE001 - logged by the done callback
                failed[(topic, partition)] = ec.UNKNOWN_SERVER_ERROR
        return failed

    async def prefetch(self, group: str, partitions) -> int:
        """Read other brokers' committed offsets for these partitions; an error code when one failed."""
        cl = self.cluster
        jobs = []
        for topic, partition in partitions:
            lay = await cl.layout(topic, partition)
            seg = lay.locate(partition) if lay is not None else None
            if seg is None or seg.offline or cl.is_local(seg):
                continue
            jobs.append((topic, partition, cl.query_offset(seg.node.broker_addr, group, topic, partition - seg.base)))
        results = await asyncio.gather(*(j[2] for j in jobs), return_exceptions=True)
        err = ec.NONE
        for (topic, partition, _), r in zip(jobs, results):
            if isinstance(r, ClusterError):
                log.warning("group %s: reading the offset of %s-%d failed: %s", group, topic, partition, r)
                err = r.error_code
            elif isinstance(r, BaseException):
                raise r
            else:
                self.remote[(group, topic, partition)] = r
        return err

    async def committed_partitions(self, group: str) -> tuple[int, list[tuple[str, int]]]:
        """Every partition the group has an offset for, on any broker (OffsetFetch for all topics):
        GET_ALL_CONSUMER_OFFSET from the other brokers, translated to partition numbers."""
        cl = self.cluster
        others = [g.leader for g in cl.groups if g.broker_name != cl.broker_name and g.leader is not None]
        results = await asyncio.gather(*(cl.all_offsets(n.broker_addr) for n in others), return_exceptions=True)
        tables = [(cl.self_node, {k: dict(v) for k, v in list(self.local.offset_table.items())})]
        err = ec.NONE
        for node, r in zip(others, results):
            if isinstance(r, ClusterError):
                log.warning("group %s: reading the offsets of %s failed: %s", group, node.broker_name, r)
                err = r.error_code
            elif isinstance(r, BaseException):
                raise r
            else:
                tables.append((node, r))
        out = set()
        for node, table in tables:
            for key, queues in table.items():
                topic, sep, g = key.partition("@")
                if not sep or g != group or not _LEGAL_KAFKA_TOPIC.match(topic):
                    continue
                lay = await cl.layout(topic)
                seg = lay.segment_of(node.broker_name) if lay is not None else None
                if seg is None or seg.offline:
                    continue
                for qid, off in queues.items():
                    if 0 <= qid < seg.count:
                        out.add((topic, seg.base + qid))
                        if node is not cl.self_node:
                            self.remote[(group, topic, seg.base + qid)] = off
        return err, sorted(out)


__all__ = ["KafkaCluster", "KafkaNode", "BrokerGroup", "TopicLayout", "Segment", "ClusterOffsetStore",
           "ClusterError", "cluster_of", "resolve_partition", "split_partitions", "coordinator_index",
           "java_string_hash", "build_groups", "build_layout", "NAMESPACE", "NODE_ID_STRIDE", "endpoint_key"]
