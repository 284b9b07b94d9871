"""MessageStoreConfig: the store's settings with RocketMQ's camelCase names and 4.x defaults (SPEC §2)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_TIME_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """messageDelayLevel ("1s 5s 10s ...") -> delays in milliseconds, level 1 first."""
    out = []
    for i, item in enumerate(text.split()):
        unit = item[-1:]
        if unit not in _TIME_UNITS or not item[:-1].isdigit():
            raise ValueError(f"messageDelayLevel item {i + 1} {item!r}: expected a number followed by s, m, h or d")
        out.append(int(item[:-1]) * _TIME_UNITS[unit])
    if not out:
        raise ValueError("messageDelayLevel: expected at least one level")
    return out


def _is_host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) <= 65535


@dataclass
class MessageStoreConfig:
    """Store settings. Names and defaults follow org.apache.rocketmq.store.config.MessageStoreConfig."""

    storePathRootDir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    maxMessageSize: int = 1024 * 1024 * 4
    flushDiskType: str = "ASYNC_FLUSH"
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 10_000
    flushCommitLogTimed: bool = False  # False: puts wake the ASYNC_FLUSH service; True: it sleeps the interval
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 60_000
    syncFlushTimeout: int = 5000
    brokerRole: str = "ASYNC_MASTER"
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    maxMsgsNumBatch: int = 64
    messageIndexEnable: bool = True
    fileReservedTime: int = 72
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    diskSpaceCleanForciblyRatio: float = 0.85
    diskSpaceWarningLevelRatio: float = 0.90
    cleanResourceInterval: int = 10_000
    deleteCommitLogFilesInterval: int = 100
    deleteFileBatchMax: int = 10
    cleanFileForciblyEnable: bool = True
    checkCRCOnRecover: bool = True
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    # "inline": dispatch to consumequeue/index inside the put; "thread": ReputMessageService thread.
    reputMode: str = "inline"
    reputIntervalMs: int = 1
    # Store host written into every unit (STOREHOST) and into offsetMsgIds.
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    # Master/slave replication (RocketMQ 4.x HAService; rmq/server/ha.py). haListenPort -1: listenPort
    # + 1 (RocketMQ's 10912 beside 10911), or an ephemeral port when listenPort is 0; 0: ephemeral.
    # haMasterAddress "host:port" of the master's HA port on a slave; "" = learned from the NameServer.
    haListenPort: int = -1
    haMasterAddress: str = ""
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20_000
    haTransferBatchSize: int = 32 * 1024
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    # a pull more than this % of physical memory behind the commitlog's end is "consuming slowly":
    # with slaveReadEnable the master suggests the slave (whichBrokerWhenConsumeSlowly) for the next pulls
    accessMessageInMemoryMaxRatio: int = 40
    # most messages / bytes one PULL_MESSAGE answer carries (MessageStoreConfig's
    # maxTransferCountOnMessageInMemory and maxTransferBytesOnMessageInMemory, RocketMQ 4.x
    # defaults); a consumer's pullBatchSize above the count is cut to it
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    # compacted topics (rmq.store.compaction, RocketMQ 5's CompactionStore): how often the
    # CompactionService runs (RocketMQ's default: 15 minutes), and how many dirty consumequeue
    # units one pass reads at most over all queues (its bound on work per pass)
    compactionScheduleInternal: int = 15 * 60 * 1000
    compactionMaxUnitsPerPass: int = 200_000

    _CHOICES = {
        "flushDiskType": ("ASYNC_FLUSH", "SYNC_FLUSH"),
        "brokerRole": ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
        "reputMode": ("inline", "thread"),
    }

    def validate(self) -> None:
        """Raise ValueError naming the key and what was expected."""
        for key, allowed in self._CHOICES.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}: expected one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        positive = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxMessageSize",
                    "flushIntervalCommitLog", "flushIntervalConsumeQueue", "flushConsumeQueueThoroughInterval", "syncFlushTimeout",
                    "maxHashSlotNum", "maxIndexNum", "maxMsgsNumBatch", "cleanResourceInterval",
                    "deleteFileBatchMax", "compactionScheduleInternal", "compactionMaxUnitsPerPass",
                    "maxTransferCountOnMessageInMemory", "maxTransferBytesOnMessageInMemory")
        for key in positive:
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: expected a positive number, got {getattr(self, key)!r}")
        if self.mappedFileSizeConsumeQueue % 20:
            raise ValueError("mappedFileSizeConsumeQueue: expected a multiple of 20 (the consumequeue unit size)")
        if self.mappedFileSizeCommitLog < 4096:
            raise ValueError("mappedFileSizeCommitLog: expected at least 4096 bytes")
        if self.maxMessageSize + 1024 > self.mappedFileSizeCommitLog:
            raise ValueError(f"maxMessageSize: expected at most mappedFileSizeCommitLog - 1024 "
                             f"({self.mappedFileSizeCommitLog - 1024}), got {self.maxMessageSize}")
        if self.fileReservedTime < 0:
            raise ValueError("fileReservedTime: expected hours >= 0")
        for part in self.deleteWhen.split(";"):
            if not (part.isdigit() and 0 <= int(part) <= 23):
                raise ValueError(f"deleteWhen: expected hours 00-23 separated by ';', got {self.deleteWhen!r}")
        if not 10 <= self.diskMaxUsedSpaceRatio <= 95:
            raise ValueError("diskMaxUsedSpaceRatio: expected 10..95 (percent)")
        for key in ("diskSpaceCleanForciblyRatio", "diskSpaceWarningLevelRatio"):
            if not 0.1 <= getattr(self, key) <= 0.99:
                raise ValueError(f"{key}: expected a ratio between 0.1 and 0.99")
        parse_delay_levels(self.messageDelayLevel)
        if not 0 <= self.accessMessageInMemoryMaxRatio <= 100:
            raise ValueError("accessMessageInMemoryMaxRatio: expected a percentage 0..100")
        if not -1 <= self.haListenPort <= 65535:
            raise ValueError("haListenPort: expected a port number 0..65535 (or -1 for listenPort + 1)")
        for key in ("haSendHeartbeatInterval", "haHousekeepingInterval", "haTransferBatchSize", "haSlaveFallbehindMax"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: expected a positive number, got {getattr(self, key)!r}")
        if self.haMasterAddress and not _is_host_port(self.haMasterAddress):
            raise ValueError(f"haMasterAddress: expected host:port, got {self.haMasterAddress!r}")

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.messageDelayLevel)

    @classmethod
    def keys(cls) -> dict[str, type]:
        return {f.name: f.type for f in fields(cls) if not f.name.startswith("_")}
