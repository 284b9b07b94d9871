"""TopicConfigManager: topics with read/write queue numbers and perm, persisted to config/topics.json (SPEC §3)."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from .config_manager import ConfigManager

PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1 << 0

def topic_collision(topic: str, names) -> str | None:
    """Kafka's Topic.hasCollision over `names`: the reason ("Topic 'a.b' collides with existing
    topics: a_b") or None."""
    flat = topic.replace(".", "_")
    clash = sorted(n for n in names if n != topic and n.replace(".", "_") == flat)
    return f"Topic '{topic}' collides with existing topics: {', '.join(clash)}" if clash else None


AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def perm_to_string(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")


def is_system_topic(topic: str) -> bool:
    return topic in (AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT,
                     SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC) or topic.startswith("rmq_sys_")


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    # RocketMQ 5's TopicConfig.attributes: per-topic settings; the Kafka bridge keeps Kafka's topic
    # configs here (retention.ms, cleanup.policy ...), so they are persisted with the topic
    attributes: dict = field(default_factory=dict)

    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicConfigManager(ConfigManager):
    file_name = "topics.json"

    def __init__(self, config_dir: str, broker_config, cluster_name: str = "DefaultCluster"):
        super().__init__(config_dir)
        self.broker_config = broker_config
        self.on_created = None  # fn(TopicConfig) for a topic new to the table (the store prepares its queues)
        self.table: dict[str, TopicConfig] = {}
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": 0}
        b = broker_config
        for name, q, perm in (
            (SELF_TEST_TOPIC, 1, PERM_READ | PERM_WRITE),
            (BENCHMARK_TOPIC, 1024, PERM_READ | PERM_WRITE),
            (b.brokerClusterName, 16, PERM_READ | PERM_WRITE | (PERM_INHERIT if False else 0)),
            (b.brokerName, 1, PERM_READ | PERM_WRITE),
            (OFFSET_MOVED_EVENT, 1, PERM_READ | PERM_WRITE),
            (RMQ_SYS_TRANS_HALF_TOPIC, 1, PERM_READ | PERM_WRITE),
        ):
            self.table[name] = TopicConfig(name, q, q, perm)
        if b.autoCreateTopicEnable:
            self.table[AUTO_CREATE_TOPIC_KEY_TOPIC] = TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC, b.defaultTopicQueueNums, b.defaultTopicQueueNums,
                PERM_INHERIT | PERM_READ | PERM_WRITE)

    def encode(self) -> dict:
        return {"dataVersion": self.data_version,
                "topicConfigTable": {k: asdict(v) for k, v in self.table.items()}}

    def decode(self, data: dict) -> None:
        table = data.get("topicConfigTable") or {}
        for name, tc in table.items():
            if isinstance(tc, dict):
                fields = {k: tc[k] for k in ("readQueueNums", "writeQueueNums", "perm", "topicFilterType",
                                             "topicSysFlag", "order") if k in tc}
                if isinstance(tc.get("attributes"), dict):
                    fields["attributes"] = {str(k): str(v) for k, v in tc["attributes"].items()}
                self.table[name] = TopicConfig(name, **fields)
        if isinstance(data.get("dataVersion"), dict):
            self.data_version = data["dataVersion"]

    def _bump(self) -> None:
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": self.data_version.get("counter", 0) + 1}

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def collision(self, topic: str) -> str | None:
        """Kafka's rule on every path that creates a topic: a name that differs from an existing
        topic's only by '.' against '_' is refused (Kafka's metric names would collide). The reason
        in Kafka's words, or None."""
        return topic_collision(topic, self.table)

    def update(self, tc: TopicConfig) -> TopicConfig:
        with self.lock:
            old = self.table.get(tc.topicName)
            self.table[tc.topicName] = tc
            self._bump()
        self.persist()
        if self.on_created is not None and (old is None or max(old.readQueueNums, old.writeQueueNums)
                                            < max(tc.readQueueNums, tc.writeQueueNums)):
            self.on_created(tc)
        return tc

    def create_if_absent(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE,
                         sys_flag: int = 0) -> TopicConfig:
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        with self.lock:
            tc = self.table.get(topic)
            if tc is None:
                tc = TopicConfig(topic, queue_nums, queue_nums, perm, topicSysFlag=sys_flag)
                self.table[topic] = tc
                self._bump()
            else:
                return tc
        self.persist()
        if self.on_created is not None:
            self.on_created(tc)
        return tc

    def delete(self, topic: str) -> bool:
        with self.lock:
            gone = self.table.pop(topic, None)
            if gone:
                self._bump()
        if gone:
            self.persist()
        return gone is not None
