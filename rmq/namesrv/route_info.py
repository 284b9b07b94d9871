"""RouteInfoManager: the NameServer's routing tables — topics to QueueData per broker, broker
addresses, clusters, live brokers with their last heartbeat (SPEC §9). No I/O; the listener calls it."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..remoting import (BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfigSerializeWrapper,
                        TopicList, TopicRouteData)

log = logging.getLogger("rmq.namesrv")

MASTER_ID = 0
#: BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long is removed (RouteInfoManager).
BROKER_CHANNEL_EXPIRED_TIME_MS = 1000 * 60 * 2

PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class BrokerLiveInfo:
    """brokerLiveTable value: when the broker last registered, with which data version, over which
    connection, and its HA address."""
    last_update_timestamp: int
    data_version: DataVersion
    channel: Any
    ha_server_addr: str = ""


@dataclass
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass
class RouteInfoManager:
    """topicQueueTable, brokerAddrTable, clusterAddrTable, brokerLiveTable, filterServerTable.

    All methods run on the listener's event loop (one thread), so no lock is needed."""

    broker_expiry_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS
    clock: Callable[[], int] = _now_ms
    topic_queue_table: dict[str, list[QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ registration
    def register_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, wrapper: TopicConfigSerializeWrapper | None,
                        filter_server_list: list[str] | None, channel: Any) -> RegisterBrokerResult:
        result = RegisterBrokerResult()
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        register_first = False
        bd = self.broker_addr_table.get(broker_name)
        if bd is None:
            register_first = True
            bd = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = bd
        # One ip:port has one record: a slave switched to master first loses its old id.
        for bid, addr in list(bd.brokerAddrs.items()):
            if addr == broker_addr and bid != broker_id:
                del bd.brokerAddrs[bid]
        old_addr = bd.brokerAddrs.get(broker_id)
        bd.brokerAddrs[broker_id] = broker_addr
        register_first = register_first or old_addr is None

        version = wrapper.dataVersion if wrapper is not None else DataVersion(0, 0)
        if wrapper is not None and broker_id == MASTER_ID:
            if self.is_broker_topic_config_changed(broker_addr, version) or register_first:
                for tc in wrapper.topicConfigTable.values():
                    self._create_and_update_queue_data(broker_name, tc)
        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(self.clock(), version, channel, ha_server_addr)
        if prev is None:
            log.info("new broker registered, %s (%s/%s id %d) HAServer: %s", broker_addr, cluster_name,
                     broker_name, broker_id, ha_server_addr)
        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)
        if broker_id != MASTER_ID:
            master_addr = bd.brokerAddrs.get(MASTER_ID)
            if master_addr is not None:
                live = self.broker_live_table.get(master_addr)
                if live is not None:
                    result.ha_server_addr = live.ha_server_addr
                    result.master_addr = master_addr
        return result

    def is_broker_topic_config_changed(self, broker_addr: str, version: DataVersion) -> bool:
        prev = self.broker_live_table.get(broker_addr)
        return prev is None or prev.data_version != version

    def _create_and_update_queue_data(self, broker_name: str, tc) -> None:
        qd = QueueData(brokerName=broker_name, readQueueNums=tc.readQueueNums,
                       writeQueueNums=tc.writeQueueNums, perm=tc.perm, topicSynFlag=tc.topicSysFlag)
        lst = self.topic_queue_table.get(tc.topicName)
        if lst is None:
            self.topic_queue_table[tc.topicName] = [qd]
            log.info("new topic registered, %s %s", tc.topicName, qd)
            return
        add = True
        for old in list(lst):
            if old.brokerName == broker_name:
                if old == qd:
                    add = False
                else:
                    log.info("topic changed, %s OLD: %s NEW: %s", tc.topicName, old, qd)
                    lst.remove(old)
        if add:
            lst.append(qd)

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        live = self.broker_live_table.pop(broker_addr, None)
        log.info("unregisterBroker, remove from brokerLiveTable %s, %s", "OK" if live else "Failed", broker_addr)
        self.filter_server_table.pop(broker_addr, None)
        remove_name = False
        bd = self.broker_addr_table.get(broker_name)
        if bd is not None:
            bd.brokerAddrs.pop(broker_id, None)
            if not bd.brokerAddrs:
                del self.broker_addr_table[broker_name]
                remove_name = True
        if remove_name:
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            self._remove_topic_by_broker_name(broker_name)

    def _remove_topic_by_broker_name(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            lst = [qd for qd in self.topic_queue_table[topic] if qd.brokerName != broker_name]
            if lst:
                self.topic_queue_table[topic] = lst
            else:
                log.info("remove topic[%s] all queue, from topicQueueTable, because channel destroyed", topic)
                del self.topic_queue_table[topic]

    # ------------------------------------------------------------------ liveness
    def scan_not_active_broker(self) -> list[tuple[str, Any]]:
        """Remove brokers whose last registration is older than the expiry; returns (addr, channel)
        pairs so the caller can close those connections."""
        now = self.clock()
        gone = []
        for addr, live in list(self.broker_live_table.items()):
            if live.last_update_timestamp + self.broker_expiry_ms < now:
                log.warning("The broker channel expired, %s %d ms", addr, self.broker_expiry_ms)
                gone.append((addr, live.channel))
                self._destroy(addr)
        return gone

    def on_channel_destroy(self, channel: Any) -> str | None:
        """A connection closed: if a broker registered over it, remove that broker."""
        for addr, live in list(self.broker_live_table.items()):
            if live.channel is channel:
                log.info("the broker's channel destroyed, %s, clean it's data structure at once", addr)
                self._destroy(addr)
                return addr
        return None

    def _destroy(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed_names = set()
        for name, bd in list(self.broker_addr_table.items()):
            for bid, addr in list(bd.brokerAddrs.items()):
                if addr == broker_addr:
                    del bd.brokerAddrs[bid]
                    log.info("remove brokerAddr[%s, %s] from brokerAddrTable, because channel destroyed", bid, addr)
            if not bd.brokerAddrs:
                del self.broker_addr_table[name]
                removed_names.add(name)
        for cluster, names in list(self.cluster_addr_table.items()):
            names.difference_update(removed_names)
            if not names:
                del self.cluster_addr_table[cluster]
        for name in removed_names:
            self._remove_topic_by_broker_name(name)

    # ------------------------------------------------------------------ queries
    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        qds = self.topic_queue_table.get(topic)
        if not qds:
            return None
        route = TopicRouteData(queueDatas=[QueueData(q.brokerName, q.readQueueNums, q.writeQueueNums, q.perm,
                                                     q.topicSynFlag) for q in qds])
        seen = []
        for qd in qds:
            if qd.brokerName not in seen:
                seen.append(qd.brokerName)
        for name in seen:
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            route.brokerDatas.append(BrokerData(bd.cluster, bd.brokerName, dict(bd.brokerAddrs)))
            for addr in bd.brokerAddrs.values():
                servers = self.filter_server_table.get(addr)
                if servers:
                    route.filterServerTable[addr] = list(servers)
        if not route.brokerDatas:
            return None
        return route

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            brokerAddrTable={k: BrokerData(v.cluster, v.brokerName, dict(v.brokerAddrs))
                             for k, v in self.broker_addr_table.items()},
            clusterAddrTable={k: sorted(v) for k, v in self.cluster_addr_table.items()})

    def get_all_topic_list(self) -> TopicList:
        return TopicList(topicList=list(self.topic_queue_table))

    def get_topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList(topicList=[t for t, qds in self.topic_queue_table.items()
                                    if any(q.brokerName in names for q in qds)])

    def get_system_topic_list(self) -> TopicList:
        """Cluster and broker names are topics too (GET_SYSTEM_TOPIC_LIST_FROM_NS)."""
        topics = list(self.cluster_addr_table)
        for names in self.cluster_addr_table.values():
            topics.extend(names)
        broker_addr = None
        for bd in self.broker_addr_table.values():
            for addr in bd.brokerAddrs.values():
                broker_addr = addr
                break
            if broker_addr:
                break
        return TopicList(topicList=topics, brokerAddr=broker_addr)

    def delete_topic(self, topic: str) -> bool:
        return self.topic_queue_table.pop(topic, None) is not None

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        n = 0
        for qds in self.topic_queue_table.values():
            for qd in qds:
                if qd.brokerName == broker_name:
                    qd.perm &= ~PERM_WRITE
                    n += 1
        return n


__all__ = ["RouteInfoManager", "BrokerLiveInfo", "RegisterBrokerResult", "MASTER_ID",
           "BROKER_CHANNEL_EXPIRED_TIME_MS"]
