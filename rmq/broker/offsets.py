"""ConsumerOffsetManager: committed offsets per `topic@group` and queueId, persisted to
config/consumerOffset.json (SPEC §4). Kafka groups and RocketMQ groups share this one table.

RocketMQ's own commits (UPDATE_CONSUMER_OFFSET from its clients) stay in memory until the next
persist, every flushConsumerOffsetInterval (5 s), as in Apache RocketMQ: a kill -9 loses up to 5 s
of them and the group re-reads. A Kafka OffsetCommit is durable once acknowledged (Kafka writes it to
__consumer_offsets before the reply), so those commits (`durable=True`, then `journal_sync()` before
the answer) are also appended to an offsets journal, config/consumerOffset.journal.<generation>: one
line per commit, ``crc32 JSON``, written with write(2) (the page cache survives a kill -9 of the
broker) and fdatasync'ed under flushDiskType SYNC_FLUSH. Each persist starts a new generation and
records in consumerOffset.json the last generation it covers; the covered journals are then deleted.
On load, the journals of later generations are replayed in order over the file."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque

from ..store import offset_journal as journal
from .config_manager import ConfigManager

log = logging.getLogger("rmq.broker")

TOPIC_GROUP_SEPARATOR = "@"
#: consume TPS is the messages a group committed past over this many seconds, per second
CONSUME_TPS_WINDOW_S = 10.0


class ConsumerOffsetManager(ConfigManager):
    file_name = "consumerOffset.json"

    def __init__(self, config_dir: str, *, journal_fsync: bool = False):
        super().__init__(config_dir)
        self.offset_table: dict[str, dict[int, int]] = {}
        self.dirty = False
        self._consumed: dict[str, deque] = {}  # group -> (monotonic time, messages committed past)
        #: fdatasync the journal in journal_sync (flushDiskType SYNC_FLUSH)
        self.journal_fsync = journal_fsync
        self._covered = 0  # the last journal generation consumerOffset.json includes
        self._gen = 1  # the generation durable commits are appended to
        self._fd: int | None = None
        self._buf: list[bytes] = []  # journal lines not written yet (journal_sync writes them)
        self._unsynced = False
        self.journal_lines = 0  # lines appended since start
        self._persist_lock = threading.Lock()  # one persist at a time: the file and the journals it deletes

    def encode(self) -> dict:
        return {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()},
                "journalGeneration": self._covered}

    def decode(self, data: dict) -> None:
        for key, queues in (data.get("offsetTable") or {}).items():
            if isinstance(queues, dict):
                self.offset_table[key] = {int(q): int(o) for q, o in queues.items()}
        gen = data.get("journalGeneration", 0)
        self._covered = gen if isinstance(gen, int) and gen >= 0 else 0

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, durable: bool = False) -> None:
        """Set the offset. `durable` (a Kafka commit): also journal it; the caller must call
        journal_sync() before acknowledging."""
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self.lock:
            queues = self.offset_table.setdefault(key, {})
            old = queues.get(queue_id, -1)
            queues[queue_id] = offset
            self.dirty = True
            if durable:
                self._buf.append(journal.encode_line([key, int(queue_id), int(offset)]))
            if 0 <= old < offset:
                self._count_consumed(group, offset - old)

    # ------------------------------------------------------------------ journal
    def journal_sync(self) -> None:
        """Write the journal lines of durable commits (one write(2)), and fdatasync them when
        journal_fsync; raises OSError when that fails (the commit must not be acknowledged)."""
        with self.lock:
            if self._buf:
                data = b"".join(self._buf)
                self._buf.clear()
                if self._fd is None:
                    os.makedirs(self.config_dir, exist_ok=True)
                    self._fd = os.open(journal.journal_path(self.config_dir, self._gen),
                                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                self.journal_lines += data.count(b"\n")
                self._unsynced = True
            if self._unsynced and self.journal_fsync and self._fd is not None:
                os.fdatasync(self._fd)
            self._unsynced = False

    def persist(self) -> None:
        """Write consumerOffset.json with every commit so far (the journals it covers are deleted after)."""
        with self._persist_lock:
            self._persist()

    def _persist(self) -> None:
        with self.lock:
            if self._buf:
                try:
                    self.journal_sync()
                except OSError:
                    log.exception("writing the consumer offset journal failed")
                    self._buf.clear()
            covered = self._gen - 1
            if self._fd is not None:  # later durable commits go to the next generation
                os.close(self._fd)
                self._fd = None
                covered = self._gen
                self._gen += 1
            self._covered = max(self._covered, covered)
            text = json.dumps(self.encode(), indent=4, sort_keys=False)
            upto = self._covered
        self.write_text(text)
        for gen, path in journal.journals(self.config_dir):
            if gen <= upto:
                try:
                    os.unlink(path)
                except OSError as exc:
                    log.warning("%s: not deleted (%s)", path, exc)

    def load(self) -> None:
        """consumerOffset.json (or its .bak), then the journals written after it, in order."""
        super().load()
        with self.lock:
            replayed = journal.replay(self.config_dir, self.offset_table, self._covered)
            self._gen = max([self._covered] + [g for g, _ in journal.journals(self.config_dir)]) + 1
        if replayed:
            self.dirty = True
            log.info("consumer offsets: %d journaled commits replayed", replayed)

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
            self._drop_topic(topic)
            self.dirty = True
            self._buf.append(journal.encode_line([topic]))  # journaled commits of the topic must not come back
            try:
                self.journal_sync()
            except OSError:
                log.exception("journaling the removal of %s's offsets failed", topic)

    def _drop_topic(self, topic: str) -> None:
        journal.apply(self.offset_table, [topic])

    def flush_if_dirty(self) -> None:
        if self.dirty:
            self.dirty = False
            self.persist()

