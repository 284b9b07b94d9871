"""ConsumerOffsetManager: committed offsets per `topic@group` and queueId, persisted to
config/consumerOffset.json (SPEC §4). Kafka groups and RocketMQ groups share this one table."""
from __future__ import annotations

import time
from collections import deque

from .config_manager import ConfigManager

TOPIC_GROUP_SEPARATOR = "@"
#: consume TPS is the messages a group committed past over this many seconds, per second
CONSUME_TPS_WINDOW_S = 10.0


class ConsumerOffsetManager(ConfigManager):
    file_name = "consumerOffset.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.offset_table: dict[str, dict[int, int]] = {}
        self.dirty = False
        self._consumed: dict[str, deque] = {}  # group -> (monotonic time, messages committed past)

    def encode(self) -> dict:
        return {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}}

    def decode(self, data: dict) -> None:
        for key, queues in (data.get("offsetTable") or {}).items():
            if isinstance(queues, dict):
                self.offset_table[key] = {int(q): int(o) for q, o in queues.items()}

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self.lock:
            queues = self.offset_table.setdefault(key, {})
            old = queues.get(queue_id, -1)
            queues[queue_id] = offset
            self.dirty = True
            if 0 <= old < offset:
                self._count_consumed(group, offset - old)

    def _count_consumed(self, group: str, n: int) -> None:
        now = time.monotonic()
        dq = self._consumed.get(group)
        if dq is None:
            if len(self._consumed) >= 100_000:
                return
            dq = self._consumed[group] = deque()
        dq.append((now, n))
        while dq and dq[0][0] < now - CONSUME_TPS_WINDOW_S:
            dq.popleft()

    def consume_tps(self, group: str) -> float:
        """Messages per second the group committed past over the last CONSUME_TPS_WINDOW_S seconds
        (GET_CONSUME_STATS's consumeTps, the console's consume TPS)."""
        dq = self._consumed.get(group)
        if not dq:
            return 0.0
        since = time.monotonic() - CONSUME_TPS_WINDOW_S
        return sum(n for t, n in list(dq) if t >= since) / CONSUME_TPS_WINDOW_S

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """-1 when the group has no committed offset for that queue."""
        q = self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if q is None:
            return -1
        return q.get(queue_id, -1)

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in list(self.offset_table):
            t, _, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if t == topic:
                out.add(g)
        return out

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in list(self.offset_table):
            t, _, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if g == group:
                out.add(t)
        return out

    def all_groups(self) -> set[str]:
        return {k.partition(TOPIC_GROUP_SEPARATOR)[2] for k in list(self.offset_table)}

    def remove_topic(self, topic: str) -> None:
        with self.lock:
            for key in [k for k in self.offset_table if k.partition(TOPIC_GROUP_SEPARATOR)[0] == topic]:
                del self.offset_table[key]
            self.dirty = True

    def flush_if_dirty(self) -> None:
        if self.dirty:
            self.dirty = False
            self.persist()
