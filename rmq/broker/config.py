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
    # Listeners hosted by the broker process (0 = pick an ephemeral port).
    namesrvPort: int = 9876
    kafkaPort: int = 9092
    kafkaEnable: bool = True
    kafkaAutoCreateTopics: bool = True
    kafkaSaslEnable: bool = False
    kafkaSaslUsers: str = ""
    # group.initial.rebalance.delay.ms (Kafka's default is 3000; a short delay gets a new group
    # its first message sooner) and group.min.session.timeout.ms
    kafkaGroupInitialRebalanceDelayMs: int = 100
    kafkaGroupMinSessionTimeoutMs: int = 6000
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
        if self.kafkaStorage not in ("commitlog", "kafka-log"):
            raise ValueError(f"kafkaStorage: expected commitlog or kafka-log, got {self.kafkaStorage!r}")
        if self.kafkaLogSegmentBytes < 14 or self.kafkaLogIndexIntervalBytes < 0:
            raise ValueError("kafkaLogSegmentBytes: expected at least 14; kafkaLogIndexIntervalBytes: at least 0")
        if self.transactionCheckMax < 1:
            raise ValueError("transactionCheckMax: expected a positive number")

    @classmethod
    def keys(cls) -> dict[str, type]:
        return {f.name: f.type for f in fields(cls)}
