"""KafkaBridge: the state the Kafka handlers share — broker services, topic ids, producer state,
the group coordinator (SPEC §11). One instance per broker process, on the asyncio loop."""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
import zlib
from dataclasses import dataclass, field

from rmq.broker.controller import BrokerController
from rmq.broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT, PERM_READ, PERM_WRITE,
    RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, SCHEDULE_TOPIC, SELF_TEST_TOPIC, TopicConfig,
)

from .idempotence import ProducerStateManager

log = logging.getLogger("kafka_bridge")

_TOPIC_NS = uuid.UUID("6f1d3c52-8a51-4c1e-9a3e-52b0c1a0e7d1")
INTERNAL_TOPICS = frozenset({SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, OFFSET_MOVED_EVENT})
HIDDEN_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC, BENCHMARK_TOPIC})
# name -> uuid5 id: Metadata and CreateTopics answer ids for names, 3 us of hashing each otherwise
_ID_MEMO: dict[str, uuid.UUID] = {}
_ID_MEMO_MAX = 100_000


@dataclass
class Connection:
    """Per-connection state the handlers may read or set."""

    peer: tuple[str, int]
    client_id: str | None = None
    authenticated: bool = True
    sasl_mechanism: str | None = None
    sasl_v0_pending: bool = False
    principal: str | None = None
    software: str | None = None  # ApiVersions v3+ client_software_name
    extra: dict = field(default_factory=dict)


class KafkaBridge:
    """With `cluster` (a broker with namesrvAddr set) the bridge also keeps a view of the other
    brokers' Kafka listeners (kafka_bridge.cluster): when there are several, they answer as one
    Kafka cluster; a master alone answers as a single broker. A slave (brokerRole SLAVE) is a
    follower: it serves reads from its HA copy and refuses produce (docs/ha.md)."""

    def __init__(self, controller: BrokerController, advertised_host: str, advertised_port: int,
                 *, cluster: bool = False):
        from .group_coordinator import GroupCoordinator
        self.controller = controller
        self.store = controller.store
        self.config = controller.broker_config
        self.host = advertised_host
        self.port = advertised_port
        self.node_id = self.config.brokerId
        self.is_slave = controller.cfg.store.brokerRole == "SLAVE"
        self.cluster_id = f"rmq-{self.config.brokerClusterName}"
        self.cluster = None
        offset_store = controller.offset_manager
        first_producer_id = None
        if cluster:
            from .cluster import ClusterOffsetStore, KafkaCluster
            self.cluster = KafkaCluster(self.config, advertised_host, advertised_port, in_sync=self.ha_in_sync)
            offset_store = ClusterOffsetStore(controller.offset_manager, self.cluster)
            tcm = controller.topic_config_manager
            self.cluster.topics_version = lambda: tcm.data_version
            self.cluster.topic_counts = self._configured_queue_counts
            # Producer ids from different brokers of one cluster must not collide: 10 bits from
            # the brokerName (brokerName@brokerId on a slave) above the clock-based 40 bits.
            first_producer_id = ((zlib.crc32(self.cluster.key.encode()) & 0x3FF) << 40
                                 | int(time.time() * 1000) % (1 << 40))
        self.producers = ProducerStateManager(first_producer_id)
        if getattr(self.config, "kafkaProducerStateJournal", True):
            self.producers.open_journal(
                getattr(controller, "config_dir", None) or os.path.join(self.store.config.storePathRootDir, "config"),
                fsync=getattr(self.store.config, "flushDiskType", "ASYNC_FLUSH") == "SYNC_FLUSH")
        self.coordinator = GroupCoordinator(
            offset_store,
            initial_rebalance_delay_ms=getattr(self.config, "kafkaGroupInitialRebalanceDelayMs", 100),
            min_session_timeout_ms=getattr(self.config, "kafkaGroupMinSessionTimeoutMs", 6000),
            durable_commits=getattr(self.config, "kafkaOffsetCommitJournal", True),
            # several brokers: a group's coordinator moves when its broker dies or returns; the
            # members that arrive with their generation are taken over (issue 27)
            adopt_moved_members=(lambda: self.cluster.active) if self.cluster is not None else False)
        if self.cluster is not None:
            # Kafka's coordinator unloads the groups of an offsets partition it no longer leads; so
            # does this one when the view changes, so that its stale state (members that went on at
            # the other coordinator) is not used when the group comes back here
            cl, gc = self.cluster, self.coordinator
            # (only while the cluster view is active: a lone broker, or an empty view, keeps its groups)
            cl.on_view_change.append(lambda: cl.active and gc.unload_groups(lambda gid: not cl.is_coordinator(gid)))
        self.sasl_users = self._parse_users(self.config.kafkaSaslUsers)
        from rmq.server.acl import acl_validator
        self.acl = acl_validator(controller)  # aclEnable: plain_acl.yml accounts for SASL and ACL checks
        self.loop: asyncio.AbstractEventLoop | None = None
        self.delay_levels = len(self.store.delay_levels_ms)
        self.txn = None  # set by kafka_bridge.txn when transactions are enabled
        self.klog = None  # a KafkaLogManager when kafkaStorage is kafka-log (Kafka topics in Kafka's design)
        from .mapping import compaction_key
        self.store.compaction.key_of = compaction_key  # a compacted topic's key: the Kafka record key
        if getattr(self.config, "kafkaStorage", "commitlog") == "kafka-log":
            self.klog = self._open_kafka_log()
        # (client software or client id, api key, version) -> requests seen: docs/kafka-compat.md
        self.api_usage: dict[tuple[str, int, int], int] = {}
        self.api_latency: dict = {}  # (api key, version) -> LatencyHistogram (kafka_bridge.server)
        # topic_by_id's map and its inverse, the visible names and the all-topics Metadata entries,
        # all kept in step with the topic table (sync_topics)
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._names_by_raw_id: dict[bytes, str] = {}  # the same, keyed by the id's 16 bytes (fetch_frame)
        self._ids_by_name: dict[str, uuid.UUID] = {}
        self._topics_seen: tuple | None = None  # (table, data_version) the maps were built from
        self._visible: list[str] | None = None
        self.metadata_cache: dict = {}  # kafka_bridge.handlers.metadata's, emptied on every topic change
        self.topic_syncs = 0  # how many times the maps were brought up to date (tests)
        # the share-group state (kafkaShareGroups.json) as a broker config table: `rmq admin
        # shareGroupProgress` reads it, and a slave copies it from its master with the consumer offsets
        if hasattr(controller, "register_config_table"):
            from .handlers.share import share_groups
            controller.register_config_table("kafkaShareGroups", lambda: share_groups(self).dump(),
                                             lambda body: share_groups(self).replace_from(body))
            # Kafka ACLs, dynamic broker and group configs, SCRAM credentials (kafkaAdmin.json)
            from .admin_state import admin_state
            controller.register_config_table("kafkaAdmin", lambda: admin_state(self).dump(),
                                             lambda body: admin_state(self).replace_from(body))

    def _configured_queue_counts(self) -> dict[str, tuple[int, int]]:
        """{topic: (queues, perm)} of this broker's topics a Kafka client can name, as they are
        registered with the NameServer (queues = max(read, write); the broker's permission when it
        is not read-write)."""
        from rmq.broker.topic_config import is_system_topic
        from .cluster import _LEGAL_KAFKA_TOPIC
        bperm = self.config.brokerPermission
        out = {}
        for name, tc in list(self.controller.topic_config_manager.table.items()):
            if is_system_topic(name) or not _LEGAL_KAFKA_TOPIC.match(name):
                continue
            out[name] = (max(tc.readQueueNums, tc.writeQueueNums), tc.perm if bperm & 6 == 6 else bperm)
        return out

    def ha_in_sync(self) -> bool | None:
        """This broker's HA view of its master/slave pair (HAService.replica_in_sync); None without HA."""
        ha = getattr(self.controller, "ha_service", None)
        return ha.replica_in_sync() if ha is not None else None

    @staticmethod
    def _parse_users(spec: str) -> dict[str, str]:
        users = {}
        for item in (spec or "").split(","):
            item = item.strip()
            if item:
                name, _, pw = item.partition(":")
                users[name] = pw
        return users

    # ------------------------------------------------------------------ topics
    @staticmethod
    def topic_id(name: str) -> uuid.UUID:
        """A stable topic id derived from the name (Kafka's topic ids, Metadata v10+/Fetch v13+)."""
        tid = _ID_MEMO.get(name)
        if tid is None:
            if len(_ID_MEMO) >= _ID_MEMO_MAX:
                _ID_MEMO.clear()
            tid = _ID_MEMO[name] = uuid.uuid5(_TOPIC_NS, name)
        return tid

    def sync_topics(self) -> None:
        """Bring the id maps (and the caches below) up to date with the topic table. The TopicConfigManager replaces its
        data_version on every change (create, update, delete, an HA slave's sync), so an unchanged
        table costs two identity checks; a changed one costs one pass over the names, once per
        change, whatever the number of requests."""
        tcm = self.controller.topic_config_manager
        table, version = tcm.table, tcm.data_version
        seen = self._topics_seen
        if seen is not None and seen[0] is table and seen[1] is version:
            return
        known = self._ids_by_name
        for gone in known.keys() - table.keys():
            i = known.pop(gone)
            self._names_by_id.pop(i, None)
            self._names_by_raw_id.pop(i.bytes, None)
        for new in table.keys() - known.keys():
            known[new] = i = self.topic_id(new)
            self._names_by_id[i] = new
            self._names_by_raw_id[i.bytes] = new
        self._visible = None
        self.metadata_cache.clear()
        self._topics_seen = (table, version)
        self.topic_syncs += 1

    def topic_by_id(self, tid: uuid.UUID) -> str | None:
        """The topic whose id is `tid`: a dict lookup whatever the number of topics, for a known id
        and an unknown one alike (a client fetching a deleted topic's id does not scan the table)."""
        self.sync_topics()
        name = self._names_by_id.get(tid)
        # a topic removed from the table without a new data_version is still not answered
        return name if name is not None and name in self.controller.topic_config_manager.table else None

    def topic_by_raw_id(self, raw: bytes) -> str | None:
        """topic_by_id for the id's 16 bytes as they are on the wire (no UUID object made)."""
        self.sync_topics()
        name = self._names_by_raw_id.get(raw)
        return name if name is not None and name in self.controller.topic_config_manager.table else None

    def topic(self, name: str) -> TopicConfig | None:
        return self.controller.get_topic(name)

    @staticmethod
    def partition_count(tc: TopicConfig) -> int:
        return max(tc.readQueueNums, tc.writeQueueNums)

    def visible_topics(self) -> list[str]:
        """The topics a Kafka client sees, sorted; rebuilt only after the topic table changed."""
        self.sync_topics()
        if self._visible is None:
            b = self.config
            hidden = HIDDEN_TOPICS | {b.brokerClusterName, b.brokerName}
            self._visible = sorted(t for t in self.controller.topic_config_manager.table if t not in hidden)
        return list(self._visible)

    def is_internal(self, name: str) -> bool:
        return name in INTERNAL_TOPICS

    def readable(self, tc: TopicConfig, partition: int) -> bool:
        return bool(tc.perm & PERM_READ) and 0 <= partition < tc.readQueueNums

    def writeable(self, tc: TopicConfig, partition: int) -> bool:
        return bool(tc.perm & PERM_WRITE) and 0 <= partition < tc.writeQueueNums

    def _open_kafka_log(self):
        from .kafka_log import KafkaLogManager, LogConfig
        b = self.config
        root = b.kafkaLogDir or os.path.join(self.store.config.storePathRootDir, "kafka-logs")
        cfg = LogConfig(segment_bytes=b.kafkaLogSegmentBytes, index_interval_bytes=b.kafkaLogIndexIntervalBytes,
                        flush_messages=b.kafkaLogFlushIntervalMessages, flush_ms=b.kafkaLogFlushIntervalMs,
                        retention_ms=b.kafkaLogRetentionMs, retention_bytes=b.kafkaLogRetentionBytes)
        klog = KafkaLogManager(root, cfg, retention_check_interval_ms=b.kafkaLogRetentionCheckIntervalMs,
                               node_id=self.node_id, cluster_id=self.cluster_id,
                               cleaner_backoff_ms=b.kafkaLogCleanerBackoffMs)

        def attributes_of(topic: str):
            tc = self.controller.get_topic(topic)
            return tc.attributes if tc is not None else None
        klog.attributes_of = attributes_of
        klog.start()
        log.info("Kafka topics are stored in Kafka's log design under %s", root)
        return klog

    def partition_log(self, topic: str, partition: int, tc: TopicConfig):
        """The kafka-log partition, created on first use, with the topic's Kafka configs over the
        broker's log settings (segment.*, retention.*, flush.*, message.timestamp.type, cleanup.policy
        and the compaction settings), taken again whenever the topic's configs change."""
        plog = self.klog.get(topic, partition)
        if plog is None:
            plog = self.klog.get_or_create(topic, partition)
        self.klog.refresh_config(plog)
        return plog

    def close(self) -> None:
        self.producers.close_journal()
        if self.klog is not None:
            self.klog.close()
        self.coordinator.close()
        if self.txn is not None:
            self.txn.close()
