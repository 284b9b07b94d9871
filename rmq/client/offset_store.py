"""Consumer offset stores (SPEC §4 "Clustering ... broadcasting"): RemoteBrokerOffsetStore keeps
a clustering group's offsets on the broker (UPDATE_CONSUMER_OFFSET / QUERY_CONSUMER_OFFSET);
LocalFileOffsetStore keeps a broadcasting consumer's offsets in
``<base>/<clientId>/<group>/offsets.json`` (base ``~/.rocketmq_offsets`` by default)."""
from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
from typing import TYPE_CHECKING, Iterable

from rmq.remoting import MessageQueue, ResponseCode

from . import lenient_json
from .errors import MQBrokerError, MQClientError
from .route import MASTER_ID

if TYPE_CHECKING:
    from .instance import ClientInstance

log = logging.getLogger("rmq.client.offset")

__all__ = ["ReadOffsetType", "OffsetStore", "RemoteBrokerOffsetStore", "LocalFileOffsetStore",
           "default_local_offset_dir"]


class ReadOffsetType(enum.Enum):
    """Where read_offset looks: the memory table, the store (broker or file), or memory then store."""
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


def default_local_offset_dir() -> str:
    """``rocketmq.client.localOffsetStoreDir`` in Java; here RMQ_OFFSETS_DIR or ~/.rocketmq_offsets."""
    return os.environ.get("RMQ_OFFSETS_DIR") or os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")


class OffsetStore:
    """The in-memory offset table every store has; subclasses add where offsets persist."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.offset_table: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        """Read persisted offsets at start (only the local store has any)."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        old = self.offset_table.get(mq)
        if old is None or not increase_only or offset > old:
            self.offset_table[mq] = offset

    async def read_offset(self, mq: MessageQueue, kind: ReadOffsetType) -> int:
        """The offset to resume ``mq`` from; -1 when none is stored, -2 on a read error."""
        raise NotImplementedError

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.offset_table.items() if topic is None or mq.topic == topic}


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets on the broker that hosts each queue (clustering)."""

    def __init__(self, instance: "ClientInstance", group: str) -> None:
        super().__init__(group)
        self.instance = instance

    async def _broker_addr(self, mq: MessageQueue) -> str:
        inst = self.instance
        found = inst.find_broker_address_in_subscribe(mq.brokerName, MASTER_ID, True)
        if found is None:
            await inst.update_topic_route(mq.topic)
            found = inst.find_broker_address_in_subscribe(mq.brokerName, MASTER_ID, False)
        if found is None:
            raise MQClientError(f"The broker[{mq.brokerName}] not exist")
        return found[0]

    async def read_offset(self, mq: MessageQueue, kind: ReadOffsetType) -> int:
        if kind in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if kind is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            addr = await self._broker_addr(mq)
            off = await self.instance.api.query_consumer_offset(
                addr, self.group, mq.topic, mq.queueId, self.instance.config.mq_client_api_timeout)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return -1
            log.warning("fetch offset of %s failed: %s", mq, exc)
            return -1
        except Exception as exc:
            log.warning("fetch offset of %s failed: %s", mq, exc)
            return -2
        self.update_offset(mq, off, False)
        return off

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool) -> None:
        addr = await self._broker_addr(mq)
        await self.instance.api.update_consumer_offset(addr, self.group, mq.topic, mq.queueId, offset,
                                                       oneway=oneway,
                                                       timeout=self.instance.config.mq_client_api_timeout)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        wanted = set(mqs)
        for mq, off in list(self.offset_table.items()):
            if mq in wanted:
                try:
                    await self.update_consume_offset_to_broker(mq, off, oneway=True)
                except Exception as exc:
                    log.info("updateConsumeOffsetToBroker %s failed: %s", mq, exc)
        for mq in [m for m in self.offset_table if m not in wanted]:
            del self.offset_table[mq]

    async def persist(self, mq: MessageQueue) -> None:
        off = self.offset_table.get(mq)
        if off is not None:
            try:
                await self.update_consume_offset_to_broker(mq, off, oneway=False)
            except Exception as exc:
                log.warning("updateConsumeOffsetToBroker %s failed: %s", mq, exc)


class LocalFileOffsetStore(OffsetStore):
    """Offsets in a local JSON file (broadcasting): every consumer keeps its own progress.

    The file is ``{"offsetTable": [{"topic":..,"brokerName":..,"queueId":..,"offset":..}, ...]}``
    (standard JSON; Java's fastjson object-keyed form is read too).  Writes go to a temp file
    then replace the old one, which is kept as ``offsets.json.bak``."""

    def __init__(self, client_id: str, group: str, base_dir: str | None = None) -> None:
        super().__init__(group)
        self.base_dir = base_dir or default_local_offset_dir()
        self.path = os.path.join(self.base_dir, client_id, group, "offsets.json")

    def _read_file(self) -> dict[MessageQueue, int]:
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot read %s: %s", path, exc)
                continue
            if not text.strip():
                continue
            try:
                return _parse_offsets(text)
            except Exception as exc:
                log.warning("cannot parse %s: %s", path, exc)
        return {}

    async def load(self) -> None:
        for mq, off in self._read_file().items():
            self.offset_table[mq] = off

    async def read_offset(self, mq: MessageQueue, kind: ReadOffsetType) -> int:
        if kind in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if kind is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        off = self._read_file().get(mq)
        if off is None:
            return -1
        self.update_offset(mq, off, False)
        return off

    def _write(self, table: dict[MessageQueue, int]) -> None:
        entries = [{"brokerName": mq.brokerName, "offset": off, "queueId": mq.queueId, "topic": mq.topic}
                   for mq, off in sorted(table.items(), key=lambda kv: (kv[0].topic, kv[0].brokerName, kv[0].queueId))]
        data = json.dumps({"offsetTable": entries}, indent=1)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
        if os.path.exists(self.path):
            try:
                os.replace(self.path, self.path + ".bak")
            except OSError:
                pass
        os.replace(tmp, self.path)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        wanted = set(mqs)
        table = {mq: off for mq, off in self.offset_table.items() if mq in wanted}
        if not table:
            return
        await asyncio.get_running_loop().run_in_executor(None, self._write, table)

    async def persist(self, mq: MessageQueue) -> None:
        """MixAll.string2File on every persist would be costly; persist_all covers it."""


def _parse_offsets(text: str) -> dict[MessageQueue, int]:
    obj = lenient_json.loads(text)
    raw = obj.get("offsetTable") if isinstance(obj, dict) else None
    out: dict[MessageQueue, int] = {}
    if isinstance(raw, list):
        for e in raw:
            mq = lenient_json.to_message_queue(e)
            if mq is not None and "offset" in e:
                out[mq] = int(e["offset"])
    elif isinstance(raw, dict):
        for k, v in raw.items():
            mq = lenient_json.to_message_queue(k)
            if mq is not None:
                out[mq] = int(v)
    return out
