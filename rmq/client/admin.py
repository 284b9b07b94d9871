"""The admin API behind ``rmq admin`` (mqadmin's DefaultMQAdminExt, SPEC §3 "created by admin in
cluster or broker mode", §7 "resend is an admin action", §9, §10 "lag must be visible per queue
and group"): topics, routes, clusters, broker runtime info, topic status, consumer progress,
message lookup, subscription groups and resending a group's dead letters."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable

from rmq.common.message import decode_message_id
from rmq.remoting import ClusterInfo, MessageQueue, RequestCode, ResponseCode, TopicRouteData, fastjson

from .api import build_pull_sys_flag
from .consumer_base import build_subscription_data
from .errors import MQBrokerError, MQClientError
from .instance import ClientConfig, ClientInstance
from .loop import LoopThread
from .message import MessageExt, PullResult
from .route import MASTER_ID, TOOLS_CONSUMER_GROUP, dlq_topic, mq_sort_key, retry_topic, route_to_subscribe_info

log = logging.getLogger("rmq.client.admin")

__all__ = ["AsyncMQAdmin", "MQAdmin", "QueueProgress", "QueueStatus"]

_LONG_MAX = (1 << 63) - 1


@dataclass
class QueueStatus:
    """One row of topicStatus."""
    mq: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass
class QueueProgress:
    """One row of consumerProgress: lag = broker_offset - consumer_offset."""
    mq: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0) if self.consumer_offset >= 0 else self.broker_offset


class AsyncMQAdmin:
    """Administrative requests to the NameServer and brokers (no background tasks)."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, *, timeout: float = 5.0,
                 config: ClientConfig | None = None) -> None:
        cfg = config or ClientConfig()
        if namesrv is not None:
            cfg.namesrv_addr = namesrv if isinstance(namesrv, str) else list(namesrv)
        if cfg.instance_name == "DEFAULT":
            cfg.instance_name = "admin"
        cfg.mq_client_api_timeout = timeout
        cfg.connect_timeout = min(cfg.connect_timeout, timeout)
        self.timeout = timeout
        self.instance = ClientInstance(cfg)
        self.api = self.instance.api

    async def close(self) -> None:
        await self.instance.remoting.close()

    async def __aenter__(self) -> "AsyncMQAdmin":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------ NameServer views
    async def cluster_info(self) -> ClusterInfo:
        return await self.instance.invoke_namesrv(lambda a: self.api.get_cluster_info(a, self.timeout))

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        if cluster:
            return await self.instance.invoke_namesrv(lambda a: self.api.get_topics_by_cluster(a, cluster, self.timeout))
        return await self.instance.invoke_namesrv(lambda a: self.api.get_all_topic_list(a, self.timeout))

    async def topic_route(self, topic: str) -> TopicRouteData:
        route = await self.instance.fetch_topic_route(topic)
        self.instance.install_route(topic, route)
        return route

    async def master_addrs(self, cluster: str) -> list[str]:
        """CommandUtil.fetchMasterAddrByClusterName."""
        ci = await self.cluster_info()
        names = ci.clusterAddrTable.get(cluster)
        if names is None:
            raise MQClientError(f"cluster {cluster!r} not found (known: {', '.join(sorted(ci.clusterAddrTable)) or 'none'})")
        out = []
        for name in sorted(names):
            bd = ci.brokerAddrTable.get(name)
            if bd is not None and MASTER_ID in bd.brokerAddrs:
                out.append(bd.brokerAddrs[MASTER_ID])
        return out

    # ------------------------------------------------------------------ topics
    async def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = 6,
                           order: bool = False) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on one broker or on every master of a cluster; returns the
        broker addresses updated."""
        if not broker_addr and not cluster:
            raise MQClientError("give a broker address (-b) or a cluster name (-c)")
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)  # type: ignore[arg-type]
        for addr in addrs:
            await self.api.create_topic(addr, topic, read_queue_nums, write_queue_nums, perm, order=order,
                                        timeout=self.timeout)
        return addrs

    async def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on every master of ``cluster``, then DELETE_TOPIC_IN_NAMESRV on
        every NameServer."""
        addrs = await self.master_addrs(cluster)
        for addr in addrs:
            await self.api.delete_topic_in_broker(addr, topic, self.timeout)
        for ns in self.instance.namesrv_list:
            try:
                await self.api.delete_topic_in_namesrv(ns, topic, self.timeout)
            except MQClientError as exc:
                log.warning("delete %s in NameServer %s failed: %s", topic, ns, exc)
        return addrs

    async def delete_kv_config(self, namespace: str, key: str) -> list[str]:
        """DELETE_KV_CONFIG on every NameServer (mqadmin deleteKvConfig); the NameServers that did it."""
        done = []
        for ns in self.instance.namesrv_list:
            await self.api.delete_kv_config(ns, namespace, key, self.timeout)
            done.append(ns)
        return done

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Min/max offset and last update time of every queue (GET_TOPIC_STATS_INFO per broker,
        or GET_MIN/MAX_OFFSET when a broker does not offer it)."""
        route = await self.topic_route(topic)
        rows: list[QueueStatus] = []
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is None:
                continue
            try:
                stats = await self.api.get_topic_stats_info(addr, topic, self.timeout)
                rows += [QueueStatus(mq, t.min_offset, t.max_offset, t.last_update_timestamp) for mq, t in stats.items()]
                continue
            except MQBrokerError as exc:
                if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    raise
            for mq in route_to_subscribe_info(topic, route):
                if mq.brokerName != bd.brokerName:
                    continue
                mn = await self.api.get_min_offset(addr, topic, mq.queueId, self.timeout)
                mx = await self.api.get_max_offset(addr, topic, mq.queueId, self.timeout)
                rows.append(QueueStatus(mq, mn, mx, 0))
        return sorted(rows, key=lambda r: mq_sort_key(r.mq))

    # ------------------------------------------------------------------ brokers
    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return await self.api.get_broker_runtime_info(broker_addr, self.timeout)

    async def config_tables(self, name: str, broker_addr: str | None = None) -> list[tuple[str, str, bytes]]:
        """A plugin config table (GET_CONFIG_TABLE_EXT) from one broker, or from every broker
        group of the NameServer's clusters (the master, or its lowest slave while the master is
        down): [(brokerName, address, JSON bytes)]; brokers without the table are left out."""
        if broker_addr:
            return [("", broker_addr, await self.api.get_config_table(broker_addr, name, self.timeout))]
        ci = await self.cluster_info()
        out = []
        for bname, bd in sorted(ci.brokerAddrTable.items()):
            if not bd.brokerAddrs:
                continue
            addr = bd.brokerAddrs[min(bd.brokerAddrs)]
            try:
                out.append((bname, addr, await self.api.get_config_table(addr, name, self.timeout)))
            except MQBrokerError as exc:
                log.debug("broker %s has no config table %s: %s", bname, name, exc)
        return out

    # ------------------------------------------------------------------ consumers
    async def consumer_progress(self, group: str, topic: str | None = None) -> tuple[list[QueueProgress], float]:
        """Per-queue broker offset, consumer offset and lag.  Uses GET_CONSUME_STATS on every
        broker serving the group (found through %RETRY%group or ``topic``; without either, every
        master of the NameServer's clusters, as for a Kafka-only group); with ``topic``
        and a broker without GET_CONSUME_STATS, QUERY_CONSUMER_OFFSET + GET_MAX_OFFSET."""
        routes: list[tuple[str, TopicRouteData]] = []
        for t in ([topic] if topic else []) + [retry_topic(group)]:
            try:
                routes.append((t, await self.topic_route(t)))
            except MQClientError as exc:
                log.debug("no route for %s: %s", t, exc)
        addrs = sorted({bd.brokerAddrs[MASTER_ID] for _, r in routes for bd in r.brokerDatas
                        if MASTER_ID in bd.brokerAddrs})
        if not addrs and not topic:
            # a group without %RETRY%group (a Kafka consumer group commits offsets only): ask every
            # master; each answers for the topics the group has offsets for (GET_CONSUME_STATS)
            ci = await self.cluster_info()
            addrs = sorted({bd.brokerAddrs[MASTER_ID] for bd in ci.brokerAddrTable.values()
                            if MASTER_ID in bd.brokerAddrs})
        if not addrs:
            raise MQClientError(f"no broker found for consumer group {group!r}"
                                + (f" and topic {topic!r}" if topic else " (give -t TOPIC)"))
        rows: list[QueueProgress] = []
        tps = 0.0
        unsupported = False
        for addr in addrs:
            try:
                table, t = await self.api.get_consume_stats(addr, group, topic, self.timeout)
            except MQBrokerError as exc:
                if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    unsupported = True
                    continue
                if exc.code in (ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST):
                    continue
                raise
            tps += t
            rows += [QueueProgress(mq, w.broker_offset, w.consumer_offset, w.last_timestamp)
                     for mq, w in table.items() if topic is None or mq.topic == topic]
        if unsupported:
            if not topic:
                raise MQClientError("the broker does not offer GET_CONSUME_STATS; give -t TOPIC")
            route = dict(routes)[topic]
            for mq in route_to_subscribe_info(topic, route):
                addr = self.instance.find_broker_address_in_publish(mq.brokerName)
                if addr is None:
                    continue
                mx = await self.api.get_max_offset(addr, topic, mq.queueId, self.timeout)
                try:
                    co = await self.api.query_consumer_offset(addr, group, topic, mq.queueId, self.timeout)
                except MQBrokerError:
                    co = -1
                rows.append(QueueProgress(mq, mx, co, 0))
        rows.sort(key=lambda r: mq_sort_key(r.mq))
        return rows, tps

    # ------------------------------------------------------------------ messages
    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                               end_ms: int = _LONG_MAX) -> list[MessageExt]:
        """QUERY_MESSAGE on every master of ``topic``; only messages whose KEYS hold ``key``."""
        route = await self.topic_route(topic)
        out: list[MessageExt] = []
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is None:
                continue
            msgs = await self.api.query_message(addr, topic, key, max_num, begin_ms, end_ms, self.timeout)
            for m in msgs:
                m.broker_name = bd.brokerName
                if m.topic == topic and key in (m.properties.get("KEYS") or "").split(" "):
                    out.append(m)
        out.sort(key=lambda m: m.store_timestamp, reverse=True)
        return out[:max_num]

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By client msgId (UNIQ_KEY, QUERY_MESSAGE with the unique-key flag) when ``topic`` is
        given, else (or if that finds nothing) by offsetMsgId (store host + commitlog offset,
        VIEW_MESSAGE_BY_ID on that broker)."""
        if topic is not None:
            route = await self.topic_route(topic)
            for bd in route.brokerDatas:
                addr = bd.brokerAddrs.get(MASTER_ID)
                if addr is None:
                    continue
                msgs = await self.api.query_message(addr, topic, msg_id, 32, 0, _LONG_MAX, self.timeout,
                                                    uniq_key=True)
                for m in msgs:
                    if m.properties.get("UNIQ_KEY") == msg_id:
                        m.broker_name = bd.brokerName
                        return m
        try:
            (host, port), offset = decode_message_id(msg_id)
        except ValueError:
            host, port, offset = None, 0, 0
        if host is None or not 0 < port <= 65535:
            where = f" in topic {topic}" if topic else " (a client msgId needs -t TOPIC)"
            raise MQClientError(f"message {msg_id} not found{where}", ResponseCode.QUERY_NOT_FOUND)
        try:
            return await self.api.view_message(f"{host}:{port}", offset, self.timeout)
        except MQClientError as exc:
            hint = "" if topic else "; if it is a client msgId, give -t TOPIC"
            raise MQClientError(f"message {msg_id} not found: {exc}{hint}", ResponseCode.QUERY_NOT_FOUND) from None

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*",
                   group: str = TOOLS_CONSUMER_GROUP, expression_type: str = "TAG",
                   broker_addr: str | None = None) -> PullResult:
        """A one-off PULL_MESSAGE (no commit, no suspend) as the TOOLS_CONSUMER group; the
        expression is a tag expression or, with ``expression_type="SQL92"``, a SQL92 filter
        the broker evaluates (enablePropertyFilter=true). ``broker_addr`` pulls from that broker
        (a slave, say) instead of the one the route names."""
        if broker_addr:
            addr = broker_addr
        else:
            if self.instance.find_broker_address_in_publish(mq.brokerName) is None:
                await self.topic_route(mq.topic)
            found = self.instance.find_broker_address_in_subscribe(mq.brokerName, MASTER_ID, False)
            if found is None:
                raise MQClientError(f"The broker[{mq.brokerName}] not exist")
            addr = found[0]
        from rmq.remoting import PullMessageRequestHeader
        sd = build_subscription_data(mq.topic, expression, expression_type)
        header = PullMessageRequestHeader(consumerGroup=group, topic=mq.topic, queueId=mq.queueId,
                                          queueOffset=offset, maxMsgNums=max_nums,
                                          sysFlag=build_pull_sys_flag(False, False, True), commitOffset=0,
                                          suspendTimeoutMillis=0, subscription=sd.subString,
                                          subVersion=sd.subVersion, expressionType=sd.expressionType)
        raw = await self.api.pull_message(addr, header, self.timeout)
        result = raw.decode(mq.brokerName)
        if sd.tagsSet:
            result.msg_found_list = [m for m in result.msg_found_list if m.properties.get("TAGS") in sd.tagsSet]
        return result

    async def query_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int) -> int:
        """QUERY_CONSUMER_OFFSET on one broker (a master, or a slave's synced copy); -1 when it
        holds no offset for the group and queue."""
        try:
            return await self.api.query_consumer_offset(broker_addr, group, topic, queue_id, self.timeout)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return -1
            raise

    async def query_msg_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageExt | None:
        r = await self.pull(MessageQueue(topic, broker_name, queue_id), offset, 1)
        return r.msg_found_list[0] if r.msg_found_list else None

    # ------------------------------------------------------------------ groups and dead letters
    async def create_subscription_group(self, group: str, *, cluster: str | None = None,
                                        broker_addr: str | None = None, retry_max_times: int = 16,
                                        retry_queue_nums: int = 1, consume_broadcast_enable: bool = True,
                                        consume_enable: bool = True) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (mqadmin updateSubGroup): e.g. retryMaxTimes, the
        retry limit the broker applies when a client does not send one."""
        if not broker_addr and not cluster:
            raise MQClientError("give a broker address (-b) or a cluster name (-c)")
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)  # type: ignore[arg-type]
        body = fastjson.dumpb({"groupName": group, "consumeEnable": consume_enable,
                               "consumeFromMinEnable": True, "consumeBroadcastEnable": consume_broadcast_enable,
                               "retryQueueNums": retry_queue_nums, "retryMaxTimes": retry_max_times,
                               "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                               "notifyConsumerIdsChangedEnable": True})
        for addr in addrs:
            await self.api.call_ok(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body,
                                   timeout=self.timeout)
        return addrs

    async def resend_dlq(self, group: str, topic: str | None = None, max_count: int = 1000) -> list[dict]:
        """Resend the dead letters of ``group`` (RESEND_DLQ_MESSAGE_EXT, this project's admin
        request) on every master broker holding %DLQ%group: to %RETRY%group by default (only
        this group consumes them again), or to ``topic``.  One dict per broker."""
        dlq = dlq_topic(group)
        try:
            route = await self.topic_route(dlq)
        except MQClientError as exc:
            raise MQClientError(f"no dead letters for group {group!r}: {dlq} has no route ({exc})") from None
        out = []
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is None:
                continue
            ext = {"consumerGroup": group, "maxCount": str(max_count)}
            if topic:
                ext["topic"] = topic
            resp = await self.api.call_ok(addr, RequestCode.RESEND_DLQ_MESSAGE_EXT, ext, timeout=self.timeout)
            info = fastjson.loads(resp.body, what="resendDLQ") if resp.body else {}
            out.append({"brokerName": bd.brokerName, "brokerAddr": addr, "dlqTopic": dlq,
                        "destination": info.get("destination", topic or retry_topic(group)),
                        "resent": int(resp.ext_fields.get("resent", info.get("resent", 0)))})
        return out

    async def wait_for_route(self, topic: str, *, queues: int | None = None, timeout: float = 10.0) -> TopicRouteData:
        """Poll the NameServer until ``topic`` has a route (with ``queues`` readable queues)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                route = await self.instance.fetch_topic_route(topic)
                if queues is None or len(route_to_subscribe_info(topic, route)) >= queues:
                    return route
            except MQClientError as exc:
                last = exc
            await asyncio.sleep(0.05)
        raise MQClientError(f"topic {topic} has no route after {timeout}s: {last}")


class MQAdmin:
    """Blocking AsyncMQAdmin: every coroutine method becomes a plain call."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, **options: Any) -> None:
        self._lt = LoopThread.acquire()
        self._impl = AsyncMQAdmin(namesrv, **options)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._impl, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._lt.run(attr(*args, **kwargs))
        call.__doc__ = attr.__doc__
        call.__name__ = name
        return call

    def close(self) -> None:
        if self._lt is not None:
            try:
                self._lt.run(self._impl.close(), timeout=10)
            finally:
                self._lt.release()
                self._lt = None  # type: ignore[assignment]

    def __enter__(self) -> "MQAdmin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
