"""BrokerConfig: broker-level settings with RocketMQ's camelCase names and defaults (broker.conf)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class BrokerConfig:
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    namesrvAddr: str = ""
    brokerPermission: int = 6
    autoCreateTopicEnable: bool = True
    defaultTopicQueueNums: int = 4
    autoCreateSubscriptionGroup: bool = True
    enablePropertyFilter: bool = False
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    registerBrokerTimeoutMills: int = 6000
    registerNameServerPeriod: int = 30_000
    # ms between a slave's copies of its master's topics, offsets, delay offsets and groups
    # (SlaveSynchronize; RocketMQ 4.x runs it every 10 s)
    slaveSynchronizeInterval: int = 10_000
    # ms between two writes of config/consumerOffset.json (RocketMQ's flushConsumerOffsetInterval):
    # RocketMQ clients' commits wait in memory until then; a Kafka commit is journaled before its answer
    flushConsumerOffsetInterval: int = 5000
    # a master tells a consumer that is far behind (accessMessageInMemoryMaxRatio) to pull from the
    # slave whichBrokerWhenConsumeSlowly, else from its group's brokerId (RocketMQ 4.x; off by default)
    slaveReadEnable: bool = False
    # Transactions (SPEC §8): RocketMQ 4.x BrokerConfig defaults. transactionTimeout is RocketMQ's
    # transactionTimeOut (that spelling is accepted too): 6 s before a half message is first
    # checked (the SPEC's "60 s" is not RocketMQ's default; RocketMQ wins).
    transactionTimeout: int = 6000
    transactionCheckInterval: int = 60_000
    transactionCheckMax: int = 15
    # ms an orderly consumer's queue lock lives without renewal (rocketmq.broker.rebalance.lockMaxLiveTime)
    rebalanceLockMaxLiveTime: int = 60_000
    clientChannelMaxIdleTimeSeconds: int = 120
    rejectTransactionMessage: bool = False  # true: prepared (half) messages get NO_PERMISSION
    # Connection limits of the listeners (bad or slow clients, DESIGN "Quality bar"). Remoting:
    # NettyServerConfig.serverChannelMaxIdleTimeSeconds (a connection with no complete request and
    # none in progress for this long is closed, as RocketMQ's IdleStateHandler does; 0 = never),
    # com.rocketmq.remoting.frameMaxLength (the length field's limit) and a cap on open connections
    # (RocketMQ has none; 0 = no cap). Kafka: connections.max.idle.ms, socket.request.max.bytes,
    # max.connections (0 = no cap).
    serverChannelMaxIdleTimeSeconds: int = 120
    remotingFrameMaxLength: int = 17 * 1024 * 1024
    serverMaxConnections: int = 10000
    kafkaConnectionsMaxIdleMs: int = 600_000
    kafkaSocketRequestMaxBytes: int = 100 * 1024 * 1024
    kafkaMaxConnections: int = 10000
    # Listeners hosted by the broker process (0 = pick an ephemeral port).
    namesrvPort: int = 9876
    kafkaPort: int = 9092
    kafkaEnable: bool = True
    # The web console and /metrics (rmq/console): 0 = off, -1 = an ephemeral port. Off unless set:
    # `rmq up` opens it on --console-port, else this key, else RMQ_CONSOLE_PORT, else 8080; `rmq
    # broker` and brokers started from Python only when this key says so. consoleLabsDir: the
    # directory of `rmq lab run` reports the console's Labs page shows.
    consolePort: int = 0
    consoleLabsDir: str = "labs-out"
    kafkaAutoCreateTopics: bool = True
    kafkaSaslEnable: bool = False
    kafkaSaslUsers: str = ""
    # Access control (RocketMQ 4.x plain ACL): aclEnable checks every remoting request against the
    # accounts of aclFile (plain_acl.yml; RocketMQ reads conf/plain_acl.yml) and makes the Kafka
    # listener require SASL (PLAIN, SCRAM-SHA-256/512) with the same accounts and permissions.
    aclEnable: bool = False
    aclFile: str = "conf/plain_acl.yml"
    # A slave's account for its master's HA port and SlaveSynchronize requests when the master has
    # aclEnable (beyond RocketMQ 4.x, whose HA port has no authentication): an admin account of the
    # master's plain_acl.yml; the slave answers the master's challenge with an HMAC-SHA256 keyed by
    # the secret (rmq/server/ha.py). Unused on a master, and towards a master without aclEnable.
    haAccessKey: str = ""
    haSecretKey: str = ""
    # SCRAM iterations the Kafka listener announces (RFC 7677: at least 4096)
    kafkaSaslScramIterations: int = 4096
    # Kafka ACLs (CreateAcls; kept in config/kafkaAdmin.json): kafkaAclEnable makes the Kafka listener
    # check them (Kafka's StandardAuthorizer) instead of plain_acl.yml; kafkaSuperUsers is Kafka's
    # super.users ("User:alice;User:bob"), kafkaAllowEveryoneIfNoAclFound its allow.everyone.if.no.acl.found
    kafkaAclEnable: bool = False
    kafkaSuperUsers: str = ""
    kafkaAllowEveryoneIfNoAclFound: bool = False
    # group.initial.rebalance.delay.ms (Kafka's default is 3000; a short delay gets a new group
    # its first message sooner) and group.min.session.timeout.ms
    kafkaGroupInitialRebalanceDelayMs: int = 100
    # a Kafka OffsetCommit is journaled before its answer (consumerOffset.journal), as Kafka writes
    # __consumer_offsets first; false: kept until the next flushConsumerOffsetInterval persist, as
    # RocketMQ clients' commits are (the behaviour before issue 27; `rmq bench kafka-commits` compares)
    kafkaOffsetCommitJournal: bool = True
    # idempotent producers' sequence state journaled before each Produce answer
    # (kafkaProducerState.journal), so a retry after kill -9 is not stored twice; false: memory only
    kafkaProducerStateJournal: bool = True
    kafkaGroupMinSessionTimeoutMs: int = 6000
    # KIP-848 consumer groups (group.protocol=consumer): Kafka's group.consumer.heartbeat.interval.ms,
    # group.consumer.session.timeout.ms and the default server-side assignor (uniform or range)
    kafkaConsumerGroupHeartbeatIntervalMs: int = 5000
    kafkaConsumerGroupSessionTimeoutMs: int = 45000
    kafkaConsumerGroupAssignor: str = "uniform"
    # KIP-932 share groups: group.share.heartbeat.interval.ms, group.share.session.timeout.ms,
    # group.share.record.lock.duration.ms, group.share.delivery.count.limit, the default
    # share.auto.offset.reset (latest or earliest), and whether records rejected or past the
    # delivery limit go to the group's %DLQ% topic as well as being archived (Kafka only archives)
    kafkaShareHeartbeatIntervalMs: int = 5000
    kafkaShareSessionTimeoutMs: int = 45000
    kafkaShareRecordLockDurationMs: int = 30000
    kafkaShareDeliveryCountLimit: int = 5
    kafkaShareAutoOffsetReset: str = "latest"
    kafkaShareDlqEnable: bool = False
    # how often the Kafka topic configs retention.ms / retention.bytes move topics' log starts
    kafkaRetentionCheckIntervalMs: int = 30000
    # Where the Kafka listener keeps Kafka topics: "commitlog" (this broker's RocketMQ store: one
    # commitlog, consumequeues) or "kafka-log" (Kafka's own design, a log directory per partition;
    # kafka_bridge/kafka_log, the peer the labs compare against). The kafkaLog* keys are Kafka's
    # log.* broker settings, with Kafka's defaults (flushing left to the page cache).
    kafkaStorage: str = "commitlog"
    kafkaLogDir: str = ""                                   # "" = <storePathRootDir>/kafka-logs
    kafkaLogSegmentBytes: int = 1 << 30                     # log.segment.bytes
    kafkaLogIndexIntervalBytes: int = 4096                  # log.index.interval.bytes
    kafkaLogFlushIntervalMessages: int = (1 << 63) - 1      # log.flush.interval.messages
    kafkaLogFlushIntervalMs: int = (1 << 63) - 1            # log.flush.interval.ms
    kafkaLogRetentionMs: int = 7 * 24 * 3600 * 1000         # log.retention.ms
    kafkaLogRetentionBytes: int = -1                        # log.retention.bytes
    kafkaLogRetentionCheckIntervalMs: int = 300_000         # log.retention.check.interval.ms
    kafkaLogCleanerBackoffMs: int = 15_000                  # log.cleaner.backoff.ms (a compacted topic's cleaner)

    def validate(self) -> None:
        if self.brokerPermission not in (2, 4, 6):
            raise ValueError("brokerPermission: expected 2 (write), 4 (read) or 6 (both)")
        if self.brokerId < 0:
            raise ValueError("brokerId: expected 0 (master) or a positive slave id")
        if not 1 <= self.defaultTopicQueueNums <= 1024:
            raise ValueError("defaultTopicQueueNums: expected 1..1024")
        for key in ("namesrvPort", "kafkaPort"):
            if not 0 <= getattr(self, key) <= 65535:
                raise ValueError(f"{key}: expected a port number 0..65535")
        if not -1 <= self.consolePort <= 65535:
            raise ValueError("consolePort: expected a port number 1..65535, 0 (off) or -1 (ephemeral)")
        if self.kafkaStorage not in ("commitlog", "kafka-log"):
            raise ValueError(f"kafkaStorage: expected commitlog or kafka-log, got {self.kafkaStorage!r}")
        if self.kafkaConsumerGroupAssignor not in ("uniform", "range"):
            raise ValueError(f"kafkaConsumerGroupAssignor: expected uniform or range, got "
                             f"{self.kafkaConsumerGroupAssignor!r}")
        if self.kafkaShareAutoOffsetReset not in ("latest", "earliest"):
            raise ValueError(f"kafkaShareAutoOffsetReset: expected latest or earliest, got "
                             f"{self.kafkaShareAutoOffsetReset!r}")
        for key in ("kafkaConsumerGroupHeartbeatIntervalMs", "kafkaConsumerGroupSessionTimeoutMs",
                    "kafkaShareHeartbeatIntervalMs", "kafkaShareSessionTimeoutMs",
                    "kafkaShareRecordLockDurationMs", "kafkaShareDeliveryCountLimit"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: expected a positive number, got {getattr(self, key)!r}")
        if self.kafkaLogSegmentBytes < 14 or self.kafkaLogIndexIntervalBytes < 0:
            raise ValueError("kafkaLogSegmentBytes: expected at least 14; kafkaLogIndexIntervalBytes: at least 0")
        for key in ("serverChannelMaxIdleTimeSeconds", "serverMaxConnections", "kafkaConnectionsMaxIdleMs",
                    "kafkaMaxConnections"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: expected 0 (no limit) or a positive number")
        for key in ("remotingFrameMaxLength", "kafkaSocketRequestMaxBytes"):
            if not 1024 <= getattr(self, key) <= 0x7FFFFFFF:
                raise ValueError(f"{key}: expected a size in bytes from 1024 to 2147483647")
        for p in (self.kafkaSuperUsers or "").split(";"):
            if p.strip() and (":" not in p.strip() or p.strip().endswith(":")):
                raise ValueError(f"kafkaSuperUsers: expected principals like User:alice separated by ';', got {p.strip()!r}")
        if self.kafkaSaslScramIterations < 4096:
            raise ValueError("kafkaSaslScramIterations: expected at least 4096 (RFC 7677)")
        if bool(self.haAccessKey) != bool(self.haSecretKey):
            raise ValueError("haAccessKey and haSecretKey: expected both (an admin account of the master's "
                             "plain_acl.yml) or neither")
        if self.transactionCheckMax < 1:
            raise ValueError("transactionCheckMax: expected a positive number")

    @classmethod
    def keys(cls) -> dict[str, type]:
        return {f.name: f.type for f in fields(cls)}
