"""ClientConfig and ClientInstance (MQClientInstance): the per-client hub that picks a
NameServer (random, then round-robin on failure), caches topic routes (refreshed every 30 s),
keeps the broker address table, heartbeats brokers every 30 s, persists consumer offsets every
5 s, runs rebalance every 20 s or at once on NOTIFY_CONSUMER_IDS_CHANGED, and answers other
server-initiated requests (SPEC §3, §4, §9)."""
from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Protocol

from rmq.remoting import (CheckTransactionStateRequestHeader, HeartbeatData,
                          NotifyConsumerIdsChangedRequestHeader, ProducerData, RemotingCommand,
                          RequestCode, ResponseCode, TopicRouteData, fastjson)

from .api import MQClientAPI
from .errors import ClientErrorCode, MQBrokerError, MQClientError, RemotingError
from .remoting import RemotingClient, wait_timeout
from .route import AUTO_CREATE_TOPIC_KEY_TOPIC, MASTER_ID, default_topic_route_for
from .uniq_id import local_ip

log = logging.getLogger("rmq.client")

__all__ = ["ClientConfig", "ClientInstance", "parse_namesrv_addr"]

_last_ns = 0


def _unique_ns() -> int:
    """System.nanoTime() stand-in that never repeats within this process."""
    global _last_ns
    now = time.monotonic_ns()
    _last_ns = now if now > _last_ns else _last_ns + 1
    return _last_ns


def parse_namesrv_addr(namesrv: str | Iterable[str] | None) -> list[str]:
    """``"a:9876;b:9876"`` (RocketMQ's separator; commas accepted too) or a list -> addresses.
    Falls back to the NAMESRV_ADDR environment variable like the Java client."""
    if namesrv is None:
        namesrv = os.environ.get("NAMESRV_ADDR", "")
    if isinstance(namesrv, str):
        parts = namesrv.replace(",", ";").split(";")
    else:
        parts = list(namesrv)
    return [p.strip() for p in parts if p and p.strip()]


@dataclass
class ClientConfig:
    """ClientConfig.java: what every producer and consumer shares.  Times in seconds."""
    namesrv_addr: str | list[str] | None = None
    client_ip: str = field(default_factory=local_ip)
    #: "DEFAULT" becomes ``<pid>#<nanotime>`` (as the Java client does) so two clients in one process
    #: get different client ids.
    instance_name: str = "DEFAULT"
    unit_name: str | None = None
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    persist_consumer_offset_interval: float = 5.0
    rebalance_interval: float = 20.0
    mq_client_api_timeout: float = 3.0
    connect_timeout: float = 3.0
    #: SessionCredentials for a broker with aclEnable (AclClientRPCHook signs every request)
    access_key: str | None = None
    secret_key: str | None = None
    security_token: str | None = None

    def build_client_id(self) -> str:
        """ClientConfig.buildMQClientId: ``ip@instanceName[@unitName]``."""
        if self.instance_name == "DEFAULT":
            self.instance_name = f"{os.getpid()}#{_unique_ns()}"
        cid = f"{self.client_ip}@{self.instance_name}"
        if self.unit_name:
            cid += f"@{self.unit_name}"
        return cid


class _Member(Protocol):
    """What a producer or consumer registered with a ClientInstance provides."""
    group: str

    def topics(self) -> set[str]: ...


class ClientInstance:
    """One client's connections, routes and background services.  Used from one event loop."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.build_client_id()
        self.namesrv_list = parse_namesrv_addr(config.namesrv_addr)
        self.remoting = RemotingClient(connect_timeout=config.connect_timeout)
        if config.access_key:
            from .remoting import acl_rpc_hook
            self.remoting.rpc_hook = acl_rpc_hook(config.access_key, config.secret_key or "", config.security_token)
        self.api = MQClientAPI(self.remoting)
        self.topic_route_table: dict[str, TopicRouteData] = {}
        #: brokerName -> {brokerId: addr}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        self.broker_version_table: dict[str, int] = {}
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self._ns_index = random.randrange(1 << 16)
        self._ns_chosen: str | None = None
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task] = []
        self._rebalance_wakeup: asyncio.Event | None = None
        self._heartbeat_lock: asyncio.Lock | None = None
        self._stopping = False
        self.started = False
        self.remoting.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify_ids_changed)
        self.remoting.register_processor(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction_state)
        self.remoting.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_get_running_info)
        self.remoting.register_processor(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        self._rebalance_wakeup = asyncio.Event()
        self._heartbeat_lock = asyncio.Lock()
        cfg = self.config
        self._tasks = [
            asyncio.ensure_future(self._every(cfg.poll_name_server_interval, 0.01, self.update_all_topic_routes,
                                              "route refresh")),
            asyncio.ensure_future(self._every(cfg.heartbeat_broker_interval, 1.0, self._heartbeat_tick,
                                              "heartbeat")),
            asyncio.ensure_future(self._every(cfg.persist_consumer_offset_interval,
                                              cfg.persist_consumer_offset_interval,
                                              self.persist_all_consumer_offsets, "offset persist")),
            asyncio.ensure_future(self._rebalance_service()),
        ]

    async def shutdown(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        self._tasks = []
        await self.remoting.close()
        self.started = False

    async def _every(self, interval: float, first_delay: float, fn: Callable[[], Awaitable[Any]],
                     what: str) -> None:
        await asyncio.sleep(first_delay)
        while not self._stopping:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s failed: %s", what, exc)
            await asyncio.sleep(interval)

    # ------------------------------------------------------------------ members
    def register_producer(self, group: str, producer: Any) -> None:
        self.producers[group] = producer

    def register_consumer(self, group: str, consumer: Any) -> None:
        self.consumers[group] = consumer

    def unregister_producer(self, group: str) -> None:
        self.producers.pop(group, None)

    def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)

    # ------------------------------------------------------------------ NameServer
    async def invoke_namesrv(self, fn: Callable[[str], Awaitable[Any]]) -> Any:
        """Run ``fn(addr)`` on the chosen NameServer; on a transport failure move on to the
        next one (round-robin) until every NameServer has been tried."""
        if not self.namesrv_list:
            raise MQClientError("No name server address, please set it (namesrv=\"host:9876\" or "
                                "the NAMESRV_ADDR environment variable)",
                                ClientErrorCode.NO_NAME_SERVER_EXCEPTION)
        n = len(self.namesrv_list)
        if self._ns_chosen not in self.namesrv_list:
            self._ns_chosen = self.namesrv_list[self._ns_index % n]
        last: Exception | None = None
        addr = self._ns_chosen
        for _ in range(n):
            try:
                result = await fn(addr)
                self._ns_chosen = addr
                return result
            except RemotingError as exc:
                last = exc
                log.debug("NameServer %s failed: %s", addr, exc)
                self._ns_index += 1
                addr = self.namesrv_list[self._ns_index % n]
        tried = ", ".join(self.namesrv_list)
        raise MQClientError(f"no NameServer reachable (tried {tried}): {last}",
                            ClientErrorCode.NO_NAME_SERVER_EXCEPTION, last)

    async def fetch_topic_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC from a NameServer (no caching)."""
        timeout = self.config.mq_client_api_timeout
        return await self.invoke_namesrv(lambda a: self.api.get_topic_route(a, topic, timeout))

    # ------------------------------------------------------------------ routes
    async def update_topic_route(self, topic: str, *, is_default: bool = False,
                                 default_topic_queue_nums: int = 4,
                                 default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC) -> bool:
        """updateTopicRouteInfoFromNameServer: fetch the route (or, with ``is_default``,
        TBW102's route cut to ``default_topic_queue_nums`` queues per broker) and push it to
        every producer and consumer.  Returns True when a route was installed."""
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            try:
                if is_default:
                    route = default_topic_route_for(await self.fetch_topic_route(default_topic),
                                                    default_topic_queue_nums)
                else:
                    route = await self.fetch_topic_route(topic)
            except MQBrokerError as exc:
                if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    log.debug("no route for topic %s", topic)
                else:
                    log.warning("route lookup for %s failed: %s", topic, exc)
                return False
            except MQClientError as exc:
                log.warning("route lookup for %s failed: %s", topic, exc)
                return False
            self.install_route(topic, route)
            return True

    def install_route(self, topic: str, route: TopicRouteData) -> None:
        """Remember ``route`` and hand it to producers (publish info) and consumers (subscribe info)."""
        old = self.topic_route_table.get(topic)
        for bd in route.brokerDatas:
            self.broker_addr_table[bd.brokerName] = dict(bd.brokerAddrs)
        self.topic_route_table[topic] = route
        changed = old is None or old.to_json() != route.to_json()
        for p in list(self.producers.values()):
            p.update_topic_publish_info(topic, route)
        for c in list(self.consumers.values()):
            c.update_topic_subscribe_info(topic, route)
        if changed:
            log.debug("route of %s now %s", topic, route.to_json())

    async def update_all_topic_routes(self) -> None:
        topics: set[str] = set()
        for p in list(self.producers.values()):
            topics |= p.topics()
        for c in list(self.consumers.values()):
            topics |= c.topics()
        for t in topics:
            await self.update_topic_route(t)

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """The master's address, or None."""
        return self.broker_addr_table.get(broker_name, {}).get(MASTER_ID)

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                         only_this_broker: bool = False) -> tuple[str, bool] | None:
        """findBrokerAddressInSubscribe: (addr, is_slave) of ``broker_id`` or, unless
        ``only_this_broker``, any address of the broker (the master first)."""
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if only_this_broker:
            return None
        for bid in sorted(addrs):
            return addrs[bid], bid != MASTER_ID
        return None

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """findBrokerAddrByTopic: an address of a random broker serving ``topic``."""
        route = self.topic_route_table.get(topic)
        if route is None or not route.brokerDatas:
            return None
        bd = random.choice(route.brokerDatas)
        addrs = bd.brokerAddrs
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        return next(iter(addrs.values()), None)

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP to a broker of ``topic``."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_topic_route(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return []
        return await self.api.get_consumer_id_list(addr, group, self.config.mq_client_api_timeout)

    # ------------------------------------------------------------------ heartbeat
    def _heartbeat_data(self) -> HeartbeatData:
        data = HeartbeatData(clientID=self.client_id)
        for group in self.producers:
            data.producerDataSet.append(ProducerData(groupName=group))
        for c in list(self.consumers.values()):
            data.consumerDataSet.append(c.consumer_data())
        return data

    async def _heartbeat_tick(self) -> None:
        await self.send_heartbeat_to_all_brokers()

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every master (and, when consumers exist, every slave) in the broker table."""
        assert self._heartbeat_lock is not None
        async with self._heartbeat_lock:
            data = self._heartbeat_data()
            if not data.producerDataSet and not data.consumerDataSet:
                return
            has_consumers = bool(data.consumerDataSet)
            targets = [(name, bid, addr) for name, addrs in list(self.broker_addr_table.items())
                       for bid, addr in addrs.items() if bid == MASTER_ID or has_consumers]
            timeout = self.config.mq_client_api_timeout
            results = await asyncio.gather(*(self.api.send_heartbeat(addr, data, timeout)
                                             for _, _, addr in targets), return_exceptions=True)
            for (name, bid, addr), res in zip(targets, results):
                if isinstance(res, BaseException):
                    log.info("heartbeat to %s (%s/%d) failed: %s", addr, name, bid, res)
                else:
                    self.broker_version_table[addr] = int(res)

    async def unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        """UNREGISTER_CLIENT to every known broker address (best effort)."""
        addrs = {a for addrs in self.broker_addr_table.values() for a in addrs.values()}
        timeout = self.config.mq_client_api_timeout
        results = await asyncio.gather(*(self.api.unregister_client(a, self.client_id, producer_group,
                                                                     consumer_group, timeout)
                                         for a in addrs), return_exceptions=True)
        for a, r in zip(addrs, results):
            if isinstance(r, BaseException):
                log.debug("unregister from %s failed: %s", a, r)

    # ------------------------------------------------------------------ consumers
    async def persist_all_consumer_offsets(self) -> None:
        for c in list(self.consumers.values()):
            try:
                await c.persist_consumer_offset()
            except Exception as exc:
                log.warning("persisting offsets of %s failed: %s", c.group, exc)

    def rebalance_immediately(self) -> None:
        """Wake the rebalance service (RebalanceService.wakeup)."""
        if self._rebalance_wakeup is not None:
            self._rebalance_wakeup.set()

    async def do_rebalance(self) -> None:
        for c in list(self.consumers.values()):
            try:
                await c.do_rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rebalance of %s failed", c.group)

    async def _rebalance_service(self) -> None:
        assert self._rebalance_wakeup is not None
        while not self._stopping:
            try:
                await wait_timeout(self._rebalance_wakeup.wait(), self.config.rebalance_interval)
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return
            self._rebalance_wakeup.clear()
            await self.do_rebalance()

    # ------------------------------------------------------------------ server-initiated requests
    def _on_notify_ids_changed(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            h = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(cmd.ext_fields)
            group = h.consumerGroup
        except Exception:
            group = "?"
        log.info("receive broker's notification[%s], the consumer group: %s changed, rebalance immediately",
                 addr, group)
        self.rebalance_immediately()
        return None

    def _on_check_transaction_state(self, addr: str, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: hand the half message to the producer group's checker
        (TransactionProducer.check_transaction_state); without one it is logged and ignored."""
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            from .message import decode_messages
            msgs = decode_messages(cmd.body) if cmd.body else []
        except Exception as exc:
            log.warning("bad CHECK_TRANSACTION_STATE from %s: %s", addr, exc)
            return None
        if not msgs:
            return None
        group = msgs[0].properties.get("PGROUP")
        producer = self.producers.get(group) if group else None
        handler = getattr(producer, "check_transaction_state", None)
        if handler is None:
            log.warning("CHECK_TRANSACTION_STATE for group %s but no transaction checker is registered", group)
            return None
        asyncio.ensure_future(handler(addr, msgs[0], header))
        return None

    def _on_get_running_info(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        c = self.consumers.get(group)
        if c is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               f"The Consumer Group <{group}> not exist in this consumer")
        info = c.running_info() if hasattr(c, "running_info") else {}
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, None,
                                           body=fastjson.dumpb(info))

    def _on_reset_offset(self, addr: str, cmd: RemotingCommand) -> None:
        log.info("RESET_CONSUMER_CLIENT_OFFSET from %s is not supported by this client; ignored", addr)
        return None
