"""Kafka transactions carried on RocketMQ half messages (SPEC §8, §11).

InitProducerId(transactional.id) gives the producer id and a new epoch (fencing the previous
instance and aborting its open transaction). Records of a transactional batch are stored as half
messages in RMQ_SYS_TRANS_HALF_TOPIC (REAL_TOPIC / REAL_QID kept), so no consumer sees them.
EndTxn(commit) re-puts each to its partition and writes the op messages, and applies the offsets
buffered by TxnOffsetCommit; EndTxn(abort) only writes the op messages. A transaction open longer
than its transaction.timeout.ms is aborted and its producer fenced, as Kafka's coordinator does.

Consequences a learner should know: the real partitions only ever hold committed records, so
read_committed and read_uncommitted consumers see the same thing, the last stable offset equals
the high watermark, no control records are written, and committed records take their offsets at
commit time (after records produced meanwhile by others) — RocketMQ's semantics, not Kafka's.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from rmq.common.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, Message
from rmq.store import PutMessageResult, PutMessageStatus

from . import protocol as kp
from .protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.txn")

EMPTY, ONGOING = "Empty", "Ongoing"
#: Kafka's transactional.id.expiration.ms: a transactional id with no transaction for this long is
#: forgotten, with its producer id (transactional ids are what clients send).
TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000


@dataclass
class _Txn:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    started: float = 0.0
    partitions: set = field(default_factory=set)
    groups: set = field(default_factory=set)
    half_offsets: list = field(default_factory=list)  # commitlog offsets of this transaction's half messages
    offsets: dict = field(default_factory=dict)  # group -> {(topic, partition): (offset, metadata)}
    touched: float = field(default_factory=time.monotonic)  # its last InitProducerId, begin or end


class KafkaTransactionManager:
    def __init__(self, bridge):
        self.bridge = bridge
        self.service = bridge.controller.transaction_service
        self.txns: dict[str, _Txn] = {}
        self._reaper: asyncio.Task | None = None
        self.expiration_s = TRANSACTIONAL_ID_EXPIRATION_MS / 1000.0

    # ------------------------------------------------------------------ helpers
    def _get(self, txn_id: str, pid: int, epoch: int) -> tuple[int, _Txn | None]:
        t = self.txns.get(txn_id)
        if t is None or t.producer_id != pid:
            return ec.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != t.epoch:
            return ec.INVALID_PRODUCER_EPOCH, None
        return ec.NONE, t

    def _begin(self, t: _Txn) -> None:
        if t.state == EMPTY:
            t.state = ONGOING
            t.started = t.touched = time.monotonic()

    def _finish(self, t: _Txn, commit: bool) -> int:
        end = TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE
        err = ec.NONE
        for off in t.half_offsets:
            r = self.service.end(off, end)
            if not r.ok:
                log.error("ending half message at %d for %s failed: %s", off, t.transactional_id, r.remark)
                err = ec.KAFKA_STORAGE_ERROR
        if commit:
            for group, offs in t.offsets.items():
                rows = [(tp[0], tp[1], o, md) for tp, (o, md) in offs.items()]
                self.bridge.coordinator.commit_offsets_unchecked(group, rows)
        t.state, t.partitions, t.groups, t.half_offsets, t.offsets = EMPTY, set(), set(), [], {}
        t.touched = time.monotonic()
        return err

    # ------------------------------------------------------------------ hooks used by produce
    def check_produce(self, txn_id: str | None, pid: int, epoch: int, topic: str, partition: int) -> int:
        if txn_id is None:
            return ec.INVALID_TXN_STATE
        err, t = self._get(txn_id, pid, epoch)
        if err:
            return err
        if (topic, partition) not in t.partitions:
            return ec.INVALID_TXN_STATE
        return ec.NONE

    def put_transactional(self, txn_id: str, pid: int, epoch: int, msgs: list[Message]) -> PutMessageResult:
        t = self.txns[txn_id]
        results = []
        for m in msgs:
            m.properties["KAFKA_TXN_ID"] = txn_id
            m.properties["KAFKA_PID"] = str(pid)
            m.properties["KAFKA_EPOCH"] = str(epoch)
            r = self.service.prepare(m)
            if not r.ok:
                return r
            t.half_offsets.append(r.result.wrote_offset)
            results.extend(r.results)
        # The records' partition offsets are only known at commit: report -1 as the base offset.
        for r in results:
            r.queue_offset = -1
        return PutMessageResult(PutMessageStatus.PUT_OK, results)

    def last_stable_offset(self, topic: str, partition: int, high_watermark: int) -> int:
        return high_watermark  # partitions hold committed records only

    # ------------------------------------------------------------------ API handlers
    async def init_producer_id(self, txn_id: str, timeout_ms: int, pid: int, epoch: int) -> dict:
        if timeout_ms <= 0 or timeout_ms > 900_000:
            return {"throttle_time_ms": 0, "error_code": ec.INVALID_TRANSACTION_TIMEOUT, "producer_id": -1,
                    "producer_epoch": -1}
        old = self.txns.get(txn_id)
        if old is not None and old.state == ONGOING:
            self._finish(old, commit=False)  # a new instance fences the old one and aborts its transaction
        err, new_pid, new_epoch = self.bridge.producers.init_producer(txn_id, timeout_ms, pid, epoch)
        if err == ec.NONE:
            self.txns[txn_id] = _Txn(txn_id, new_pid, new_epoch, timeout_ms)
            self._ensure_reaper()
        return {"throttle_time_ms": 0, "error_code": err, "producer_id": new_pid, "producer_epoch": new_epoch}

    async def add_partitions(self, conn, version: int, body: dict) -> dict:
        txn_id = body["v3_and_below_transactional_id"]
        err, t = self._get(txn_id, body["v3_and_below_producer_id"], body["v3_and_below_producer_epoch"])
        out = []
        for topic in body["v3_and_below_topics"]:
            rs = []
            tc = self.bridge.topic(topic["name"])
            for p in topic["partitions"]:
                e = err
                if e == ec.NONE and (tc is None or not self.bridge.writeable(tc, p)):
                    e = ec.UNKNOWN_TOPIC_OR_PARTITION
                rs.append({"partition_index": p, "partition_error_code": e})
            out.append({"name": topic["name"], "results_by_partition": rs})
        if err == ec.NONE and all(r["partition_error_code"] == ec.NONE for x in out for r in x["results_by_partition"]):
            self._begin(t)
            for topic in body["v3_and_below_topics"]:
                for p in topic["partitions"]:
                    t.partitions.add((topic["name"], p))
        elif err == ec.NONE:
            for x in out:  # Kafka answers the partitions that were fine with OPERATION_NOT_ATTEMPTED
                for r in x["results_by_partition"]:
                    if r["partition_error_code"] == ec.NONE:
                        r["partition_error_code"] = ec.OPERATION_NOT_ATTEMPTED
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": out}

    async def add_offsets(self, conn, version: int, body: dict) -> dict:
        err, t = self._get(body["transactional_id"], body["producer_id"], body["producer_epoch"])
        if err == ec.NONE:
            self._begin(t)
            t.groups.add(body["group_id"])
        return {"throttle_time_ms": 0, "error_code": err}

    async def txn_offset_commit(self, conn, version: int, body: dict) -> dict:
        err, t = self._get(body["transactional_id"], body["producer_id"], body["producer_epoch"])
        if err == ec.NONE and body["group_id"] not in t.groups:
            err = ec.INVALID_TXN_STATE
        if err == ec.NONE and version >= 3 and body.get("member_id"):
            err = self.bridge.coordinator.validate_txn_offset_commit(
                body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id"))
        topics = []
        for topic in body["topics"]:
            parts = []
            for p in topic["partitions"]:
                if err == ec.NONE:
                    t.offsets.setdefault(body["group_id"], {})[(topic["name"], p["partition_index"])] = (
                        p["committed_offset"], p.get("committed_metadata"))
                parts.append({"partition_index": p["partition_index"], "error_code": err})
            topics.append({"name": topic["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    async def end_txn(self, conn, version: int, body: dict) -> dict:
        err, t = self._get(body["transactional_id"], body["producer_id"], body["producer_epoch"])
        if err == ec.NONE:
            if t.state != ONGOING:
                err = ec.NONE if t.state == EMPTY and not t.half_offsets else ec.INVALID_TXN_STATE
            else:
                err = self._finish(t, bool(body["committed"]))
                store = self.bridge.coordinator.offset_store
                if body["committed"] and hasattr(store, "take_pending"):
                    # offsets of other brokers' partitions: answered once those brokers journaled them
                    failed = await store.settle(store.take_pending())
                    for (topic, partition), code in failed.items():
                        log.warning("transaction %s: the offset of %s-%d was not committed (error %d)",
                                    t.transactional_id, topic, partition, code)
        return {"throttle_time_ms": 0, "error_code": err}

    # ------------------------------------------------------------------ timeouts
    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            try:
                self._reaper = asyncio.get_running_loop().create_task(self._reap())
            except RuntimeError:
                self._reaper = None

    async def _reap(self) -> None:
        while self.txns:
            await asyncio.sleep(1.0)
            self._reap_once(time.monotonic())

    def _reap_once(self, now: float) -> None:
        """Aborts the transactions open longer than their timeout, and forgets the transactional ids
        idle for transactional.id.expiration.ms."""
        for t in list(self.txns.values()):
            if t.state == ONGOING and (now - t.started) * 1000 > t.timeout_ms:
                log.warning("transaction %s timed out after %d ms: aborted, producer fenced",
                            t.transactional_id, t.timeout_ms)
                self._finish(t, commit=False)
                # fence: bump the epoch so the old producer gets INVALID_PRODUCER_EPOCH
                err, pid, epoch = self.bridge.producers.init_producer(t.transactional_id, t.timeout_ms,
                                                                      t.producer_id, t.epoch)
                if err == ec.NONE:
                    t.producer_id, t.epoch = pid, epoch
            elif t.state == EMPTY and now - t.touched > self.expiration_s:
                log.info("transactional id %s expired (no transaction for %d ms)", t.transactional_id,
                         self.expiration_s * 1000)
                del self.txns[t.transactional_id]
                self.bridge.producers.forget_transactional(t.transactional_id)

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()


def attach(bridge) -> None:
    """Enable Kafka transactions on `bridge` (the listener routes the APIs of TXN_HANDLERS to it)."""
    bridge.txn = KafkaTransactionManager(bridge)


async def _add_partitions(b, conn, version, body):
    return await b.txn.add_partitions(conn, version, body)


async def _add_offsets(b, conn, version, body):
    return await b.txn.add_offsets(conn, version, body)


async def _txn_offset_commit(b, conn, version, body):
    return await b.txn.txn_offset_commit(conn, version, body)


async def _end_txn(b, conn, version, body):
    return await b.txn.end_txn(conn, version, body)


#: The transaction APIs and their handlers, for the listener's handler table.
TXN_HANDLERS = {
    kp.ADD_PARTITIONS_TO_TXN: _add_partitions,
    kp.ADD_OFFSETS_TO_TXN: _add_offsets,
    kp.TXN_OFFSET_COMMIT: _txn_offset_commit,
    kp.END_TXN: _end_txn,
}
