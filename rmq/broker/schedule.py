"""ScheduleMessageService: delivers delayed messages when their level's time has passed (SPEC §6).

A delayed message sits in SCHEDULE_TOPIC_XXXX, queueId = level - 1, and its consumequeue tag
field holds its delivery time. For each level this service walks that queue from its saved
offset (delayOffset.json); a due message is re-put to its REAL_TOPIC / REAL_QID without the
DELAY property, so it becomes an ordinary message. One thread serves all levels and sleeps until
the earliest next delivery (at most 100 ms, as RocketMQ's DELAY_FOR_A_WHILE).
"""
from __future__ import annotations

import logging
import threading
import time

from rmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    Message,
)

from .config_manager import ConfigManager

log = logging.getLogger("rmq.broker.schedule")
DELAY_FOR_A_WHILE_MS = 100
DELAY_FOR_A_PERIOD_MS = 10_000


class DelayOffsetManager(ConfigManager):
    """config/delayOffset.json: {"offsetTable": {level: next consumequeue offset}}."""

    file_name = "delayOffset.json"

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.offset_table: dict[int, int] = {}

    def encode(self) -> dict:
        return {"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}}

    def decode(self, data: dict) -> None:
        for k, v in (data.get("offsetTable") or {}).items():
            self.offset_table[int(k)] = int(v)


class ScheduleMessageService:
    def __init__(self, controller, *, clock=None):
        self.controller = controller
        self.store = controller.store
        self.offsets = DelayOffsetManager(controller.config_dir)
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.delay_levels_ms = self.store.delay_levels_ms
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_persist = time.monotonic()
        self.delivered = 0

    @property
    def max_level(self) -> int:
        return len(self.delay_levels_ms)

    def start(self) -> None:
        self.offsets.load()
        self._thread = threading.Thread(target=self._run, name="ScheduleMessageService", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.offsets.persist()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait_ms = self.deliver_due()
            except Exception:
                log.exception("schedule delivery failed")
                wait_ms = 1000
            if time.monotonic() - self._last_persist >= DELAY_FOR_A_PERIOD_MS / 1000:
                self._last_persist = time.monotonic()
                try:
                    self.offsets.persist()
                except OSError:
                    log.exception("persisting delayOffset.json failed")
            self._wake.wait(max(wait_ms, 1) / 1000)
            self._wake.clear()

    def deliver_due(self, budget: int = 2000) -> int:
        """Deliver every due message of every level (at most `budget`); returns ms until the next
        known delivery, capped at DELAY_FOR_A_WHILE."""
        next_wait = DELAY_FOR_A_WHILE_MS
        now = self.clock()
        for level in range(1, self.max_level + 1):
            qid = level - 1
            cq = self.store.get_consume_queue(SCHEDULE_TOPIC, qid)
            if cq is None:
                continue
            offset = max(self.offsets.offset_table.get(level, 0), cq.min_offset)
            while offset < cq.max_offset and budget > 0:
                unit = cq.get_unit(offset)
                if unit is None:
                    break
                phy, size, deliver_ts = unit
                deliver_ts = self._correct(deliver_ts, now, level)
                if deliver_ts > now:
                    next_wait = min(next_wait, deliver_ts - now)
                    break
                if not self._deliver(phy, size):
                    next_wait = min(next_wait, 1000)  # put refused (e.g. disk full): retry later
                    break
                offset += 1
                budget -= 1
                self.offsets.offset_table[level] = offset
        return next_wait

    def _correct(self, deliver_ts: int, now: int, level: int) -> int:
        """correctDeliverTimestamp: never later than now + the level's delay."""
        max_ts = now + self.delay_levels_ms[level - 1]
        return min(deliver_ts, max_ts)

    def _deliver(self, phy: int, size: int) -> bool:
        ext = self.store.look_message_by_offset(phy)
        if ext is None:
            return True  # removed by cleanup: skip it
        props = dict(ext.properties)
        real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
        real_qid = props.pop(PROPERTY_REAL_QUEUE_ID, None)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        if real_topic is None:
            log.warning("delayed message at %d has no REAL_TOPIC; dropped", phy)
            return True
        try:
            qid = int(real_qid or 0)
        except ValueError:
            qid = 0
        msg = Message(real_topic, ext.body, queue_id=qid, flag=ext.flag, properties=props,
                      sys_flag=ext.sys_flag,
                      born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                      reconsume_times=ext.reconsume_times,
                      prepared_transaction_offset=ext.prepared_transaction_offset)
        if self.controller.get_topic(real_topic) is None:
            self.controller.auto_create_topic(real_topic)  # e.g. a %RETRY% topic deleted meanwhile
        res = self.store.put_messages([msg])
        if not res.ok:
            log.warning("delivering delayed message to %s failed: %s %s", real_topic, res.status, res.remark)
            return False
        self.delivered += 1
        return True
