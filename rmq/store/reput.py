"""ReputMessageService: dispatches commitlog units to the consumequeue and the indexfile (SPEC §2).

The put path appends to the commitlog; dispatch then writes each unit's 20-byte consumequeue
entry and its index keys. It runs inline (inside the put) or as its own thread that follows the
commitlog from `reput_from_offset`, as RocketMQ's does; either way `reput_from_offset` says how
far the log has been dispatched.

A consumequeue or index write that fails for want of space (ENOSPC) leaves reput_from_offset at
the first unit not wholly dispatched; dispatching again from there is harmless (units already in a
consumequeue or the index are skipped), so the store retries until space returns
(DefaultMessageStore._dispatch_failed), never skipping a unit.
"""
from __future__ import annotations

import struct
import threading
from typing import NamedTuple

from rmq.common.jhash import java_string_hash
from rmq.common.message import (
    BORNHOST_V6_FLAG,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SCHEDULE_TOPIC,
    SHORT,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POS,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    UNIT_FIXED_PARTS,
    properties_from_bytes,
)

from .. import native
from .consume_queue import CQ_UNIT
from .mapped_file import is_disk_full


class DispatchRequest(NamedTuple):
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


def tags_code_for(topic: str, props: dict[str, str], store_ts: int, delay_levels_ms: list[int]) -> int:
    """The consumequeue tag field: the TAGS hashcode, or for SCHEDULE_TOPIC_XXXX the delivery time
    (CommitLog.checkMessageAndReturnSize / ScheduleMessageService.computeDeliverTimestamp)."""
    if topic == SCHEDULE_TOPIC:
        level = props.get(PROPERTY_DELAY_TIME_LEVEL)
        if level and level.lstrip("-").isdigit():
            lv = int(level)
            if lv > len(delay_levels_ms):
                lv = len(delay_levels_ms)
            if lv >= 1:
                return store_ts + delay_levels_ms[lv - 1]
            return store_ts + 1000
    tags = props.get(PROPERTY_TAGS)
    return java_string_hash(tags) if tags else 0


def request_from_message(msg, delay_levels_ms) -> DispatchRequest:
    """Build a DispatchRequest from a decoded MessageExt (the thread mode and recovery path)."""
    props = msg.properties
    return DispatchRequest(
        msg.topic, msg.queue_id, msg.commit_log_offset, msg.store_size,
        tags_code_for(msg.topic, props, msg.store_timestamp, delay_levels_ms),
        msg.store_timestamp, msg.queue_offset, props.get(PROPERTY_KEYS),
        props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), msg.sys_flag)


_SYS_FLAG = struct.Struct(">i")
_WALK_BYTES = 8 << 20  # the log one C walk of do_reput covers at most (its unit list is kept whole)


def request_at(buf, pos: int, delay_levels_ms) -> DispatchRequest:
    """request_from_message(decode_message(buf, pos)) for a unit already checked (recovery's walk
    in C, rmq._native.scan_units): the fields a dispatch needs, without the hosts, the body or a
    MessageExt."""
    sys_flag = _SYS_FLAG.unpack_from(buf, pos + SYSFLAG_POS)[0]
    fixed = UNIT_FIXED_PARTS[(bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))]
    (total, _, _, queue_id, _, queue_offset, phy_offset, _, _, _, _, store_ts, _, _, _, _,
     body_len) = fixed.unpack_from(buf, pos)
    p = pos + fixed.size + body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1:p + 1 + topic_len]).decode("utf-8", errors="replace")
    p += 1 + topic_len
    props = properties_from_bytes(buf[p + 2:p + 2 + SHORT.unpack_from(buf, p)[0]])
    return DispatchRequest(topic, queue_id, phy_offset, total, tags_code_for(topic, props, store_ts, delay_levels_ms),
                           store_ts, queue_offset, props.get(PROPERTY_KEYS),
                           props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag)


class ReputMessageService:
    """Dispatcher shared by both modes. `dispatch` is called with requests in commitlog order."""

    def __init__(self, store):
        self.store = store
        self.reput_from_offset = 0
        self.dispatched_count = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        # True: do_reput walks the log in C (scan_native) and reads each unit's dispatch fields
        # without decoding the message (request_at). Off by default: tests/test_disk_full.py's
        # thread-mode resume lost or doubled an acknowledged message once in 11 runs with it (never
        # with the Python walk, the reference) and the cause is not found yet; its gain is small
        # (about 9 -> 7 us of CPU per 1 KB unit). tests/test_reput_native.py keeps it equal to the
        # Python walk file for file.
        self.native_walk = False

    def dispatch(self, reqs: list) -> None:
        """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex for units in
        commitlog order: DispatchRequests, or plain tuples of the same fields. Prepared and
        rollback transaction units get no consumequeue unit, rollback ones no index entry."""
        store = self.store
        find_cq = store.find_consume_queue
        touched: dict[tuple[str, int], int] = {}
        for topic, queue_id, phy, size, code, store_ts, queue_offset, keys, uniq_key, sys_flag in reqs:
            if not sys_flag & TRANSACTION_PREPARED_TYPE:  # prepared 0b01.., rollback 0b11..
                find_cq(topic, queue_id).put_unit(queue_offset, phy, size, code)
                touched[(topic, queue_id)] = queue_offset + 1
            if keys or uniq_key:
                self._index(topic, phy, store_ts, keys, uniq_key, sys_flag)
        if reqs:
            last = reqs[-1]
            self._dispatched(last[2] + last[3], len(reqs), last[5], touched)

    def dispatch_one(self, pm, r, notify: bool = True) -> None:
        """dispatch() for a unit put_message has just appended (inline mode): what a DispatchRequest
        would carry comes from the PreparedMessage and its AppendResult. `notify`: tell the
        message-arriving listener (long polling)."""
        m = pm.msg
        store = self.store
        if not m.sys_flag & TRANSACTION_PREPARED_TYPE:
            code = pm.tags_code
            if code is None:
                code = tags_code_for(m.topic, m.properties, r.store_timestamp, store.delay_levels_ms)
            store.find_consume_queue(m.topic, m.queue_id).put_unit(r.queue_offset, r.wrote_offset, r.wrote_bytes, code)
        if pm.keys or pm.uniq_key:
            self._index(m.topic, r.wrote_offset, r.store_timestamp, pm.keys, pm.uniq_key, m.sys_flag)
        self.reput_from_offset = r.wrote_offset + r.wrote_bytes
        self.dispatched_count += 1
        store.last_dispatched_timestamp = r.store_timestamp
        listener = store.message_arriving_listener
        if listener is not None and notify and not m.sys_flag & TRANSACTION_PREPARED_TYPE:
            listener(m.topic, m.queue_id, r.queue_offset + 1)

    def dispatch_appended(self, prepared: list, results: list) -> None:
        """dispatch_one for the units put_messages has just appended, one arrival notice per queue."""
        for pm, r in zip(prepared, results):
            self.dispatch_one(pm, r, False)
        listener = self.store.message_arriving_listener
        if listener is not None:
            touched = {}
            for pm, r in zip(prepared, results):
                if not pm.msg.sys_flag & TRANSACTION_PREPARED_TYPE:
                    touched[(pm.msg.topic, pm.msg.queue_id)] = r.queue_offset + 1
            for (topic, qid), next_offset in touched.items():
                listener(topic, qid, next_offset)

    def _index(self, topic: str, phy: int, store_ts: int, keys: str | None, uniq_key: str | None,
               sys_flag: int) -> None:
        store = self.store
        if sys_flag & TRANSACTION_ROLLBACK_TYPE != TRANSACTION_ROLLBACK_TYPE and store.config.messageIndexEnable:
            store.index_service.build_index(topic, phy, store_ts, keys, uniq_key)

    def _dispatched(self, end: int, count: int, store_ts: int, touched: dict) -> None:
        store = self.store
        self.reput_from_offset = end
        self.dispatched_count += count
        store.last_dispatched_timestamp = store_ts
        listener = store.message_arriving_listener
        if listener is not None:
            for (topic, qid), next_offset in touched.items():
                listener(topic, qid, next_offset)

    def dispatch_units(self, batch, queue_offset: int, cq_units: bytes, store_timestamp: int) -> None:
        """dispatch() for one contiguous run of units of one queue (EncodedUnits) whose consumequeue
        units are already encoded (DefaultMessageStore.put_encoded)."""
        self.dispatch_units_many([batch], [(0, queue_offset, store_timestamp)], [cq_units])

    def dispatch_units_many(self, batches: list, appended: list, cq_units: list) -> None:
        """dispatch_units for each (k, queue_offset, store_timestamp) of `appended`: batches[k]'s
        units cq_units[k], in commitlog order (DefaultMessageStore.put_encoded_many). One pass,
        one arrival notice per queue and one progress update for all of them."""
        store = self.store
        table = store.consume_queue_table
        find = store.find_consume_queue
        index = store.index_service if store.config.messageIndexEnable else None
        unit = CQ_UNIT.size
        unpack = CQ_UNIT.unpack_from
        touched = {}
        end = count = store_ts = 0
        for k, queue_offset, store_ts in appended:
            batch, units = batches[k], cq_units[k]
            topic, queue_id = batch.topic, batch.queue_id
            n = len(units) // unit
            last_phy, last_size, tags_code = unpack(units, len(units) - unit)
            end = last_phy + last_size
            qs = table.get(topic)
            cq = qs.get(queue_id) if qs else None
            if cq is None:
                cq = find(topic, queue_id)
            if n == 1:
                cq.put_unit(queue_offset, last_phy, last_size, tags_code)
            else:
                cq.put_units(queue_offset, units, end)
            if index is not None and batch.index_hashes:
                index.build_index_hashed(batch.index_hashes, batch.index_units, units, store_ts)
            touched[(topic, queue_id)] = queue_offset + n
            count += n
        if appended:
            self._dispatched(end, count, store_ts, touched)

    def dispatch_entries(self, entries, selection: bytes, cq_units: bytearray, end: int, count: int,
                         store_ts: int) -> None:
        """dispatch_units_many for the entries DefaultMessageStore.put_entries appended, in C
        (rmq._native.produce_dispatch): consumequeue units, arrival notices, index keys; each
        entry's queue log start offset is left in its table row."""
        store = self.store
        listener = store.message_arriving_listener
        n, hashes, iunits = native.ext.produce_dispatch(entries.table, selection, cq_units, entries.names,
                                                        store.consume_queue_table, store.find_consume_queue,
                                                        listener, entries.hashes, entries.iunits)
        if hashes and store.config.messageIndexEnable:
            store.index_service.build_index_hashed(hashes, iunits, cq_units, store_ts)
        self._dispatched(end, n, store_ts, {})

    # ------------------------------------------------------------ thread mode
    def start_thread(self, interval_ms: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(interval_ms / 1000,),
                                        name="ReputMessageService", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def _run(self, interval: float) -> None:
        store = self.store
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            try:
                self.do_reput()
            except OSError as exc:
                if not is_disk_full(exc):
                    store.log.exception("reput failed")
                    continue
                # No room for a consumequeue or index block: stop at this unit, retry every 50 ms.
                store._dispatch_failed(exc)
                self._stop.wait(0.05)
                continue
            except Exception:
                store.log.exception("reput failed")
                continue
            if store.dispatch_stalled_at >= 0:
                store._dispatch_resumed()

    def do_reput(self, limit: int = 4096) -> int:
        """Dispatch what the commitlog holds beyond reput_from_offset. Returns units dispatched."""
        if self.native_walk and native.ext is not None:
            return self._do_reput_native(limit)
        store = self.store
        cl = store.commitlog
        total = 0
        while self.reput_from_offset < cl.max_offset and not self._stop.is_set():
            reqs = []
            levels = store.delay_levels_ms
            for _off, _size, msg in cl.iter_units(self.reput_from_offset, check_crc=False, end=cl.max_offset):
                reqs.append(request_from_message(msg, levels))
                if len(reqs) >= limit:
                    break
            if not reqs:
                # hop a blank unit at a file's end
                if cl.scan_end > self.reput_from_offset:
                    self.reput_from_offset = cl.scan_end
                    continue
                break
            with store.dispatch_lock:
                self.dispatch(reqs)
            total += len(reqs)
        return total

    def _do_reput_native(self, limit: int) -> int:
        """do_reput with the walk in C: rmq._native.scan_units lists the units from
        reput_from_offset (at most `limit` at a time, and no more than _WALK_BYTES of log), and
        request_at reads what dispatch needs from each in place, without a MessageExt, its body
        or its hosts. Prepared transaction units without index keys need nothing and are not
        listed; the walk's end and unit count still move past them as the Python walk does."""
        store = self.store
        cl = store.commitlog
        levels = store.delay_levels_ms
        total = 0
        while self.reput_from_offset < cl.max_offset and not self._stop.is_set():
            start = self.reput_from_offset
            end = cl.max_offset
            if end - start > _WALK_BYTES:
                end = start + _WALK_BYTES
            scanned = cl.scan_native(start, check_crc=False, end=end, queue_max={}, index_from=0)
            units, last_ts, todo = scanned
            if not units and end < cl.max_offset and cl.scan_end == start:
                # one unit larger than _WALK_BYTES: walk to the log's end instead
                units, last_ts, todo = cl.scan_native(start, check_crc=False, end=cl.max_offset, queue_max={},
                                                      index_from=0)
            walked_to = cl.scan_end
            if not units:
                if walked_to > start:  # hop a blank unit at a file's end
                    self.reput_from_offset = walked_to
                    continue
                break
            for i in range(0, len(todo), limit):
                reqs = [request_at(mf.mm, pos, levels) for mf, pos in todo[i:i + limit]]
                with store.dispatch_lock:
                    self.dispatch(reqs)
            with store.dispatch_lock:
                self.dispatched_count += units - len(todo)
                self.reput_from_offset = walked_to
                store.last_dispatched_timestamp = last_ts
            total += units
        return total

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
