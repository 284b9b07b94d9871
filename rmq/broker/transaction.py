"""TransactionalMessageService: half messages, commit/rollback, and the check-back loop (SPEC §8).

prepare: the message is stored in RMQ_SYS_TRANS_HALF_TOPIC (queue 0) with REAL_TOPIC / REAL_QID,
invisible to consumers. end(commit): a copy goes to the real topic and an op message (tag "d",
body = the half message's queue offset) to RMQ_SYS_TRANS_OP_HALF_TOPIC; end(rollback): only the
op message. The check service scans half messages that have no op message: younger than
transactionTimeout (or CHECK_IMMUNITY_TIME_IN_SECONDS) it waits; otherwise it asks the producer
group (CHECK_TRANSACTION_STATE through the injected `checker`) up to transactionCheckMax times,
then discards the message with a log line. Follows TransactionalMessageServiceImpl of 4.x.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from rmq.common.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExt,
    decode_message,
)

from ..store import Message, PutMessageResult
from .topic_config import PERM_READ, PERM_WRITE, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC

log = logging.getLogger("rmq.broker.transaction")
REMOVE_TAG = "d"
HALF_CONSUMER_GROUP = "CID_RMQ_SYS_TRANS"
TRANSACTION_ID = "__transactionId__"


@dataclass
class EndResult:
    ok: bool
    code: str  # SUCCESS, SYSTEM_ERROR
    remark: str = ""
    put: PutMessageResult | None = None


class TransactionalMessageService:
    def __init__(self, controller, *, clock=None, checker=None):
        self.controller = controller
        self.store = controller.store
        self.cfg = controller.broker_config
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        # checker(producer_group, half MessageExt) -> bool (sent); the remoting layer provides it
        self.checker = checker
        self.discarded: list[MessageExt] = []
        self.checks_sent = 0
        self._done: dict[int, set[int]] = {}  # half queue id -> half queue offsets with an op message
        self._op_offset: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ topics
    def _ensure_topics(self) -> None:
        tcm = self.controller.topic_config_manager
        tcm.create_if_absent(RMQ_SYS_TRANS_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        tcm.create_if_absent(RMQ_SYS_TRANS_OP_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)

    # ------------------------------------------------------------------ prepare / end
    def prepare(self, msg: Message) -> PutMessageResult:
        """Store a prepared message as a half message (TransactionalMessageBridge.parseHalfMessageInner)."""
        self._ensure_topics()
        props = dict(msg.properties)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        half = Message(RMQ_SYS_TRANS_HALF_TOPIC, msg.body, queue_id=0, flag=msg.flag, properties=props,
                       sys_flag=(msg.sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | TRANSACTION_NOT_TYPE,
                       born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                       reconsume_times=msg.reconsume_times)
        return self.store.put_messages([half])

    def half_message(self, commit_log_offset: int) -> MessageExt | None:
        ext = self.store.look_message_by_offset(commit_log_offset)
        if ext is None or ext.topic != RMQ_SYS_TRANS_HALF_TOPIC:
            return None
        return ext

    def end(self, commit_log_offset: int, commit_or_rollback: int, *, producer_group: str | None = None,
            tran_state_table_offset: int | None = None) -> EndResult:
        """END_TRANSACTION: TRANSACTION_COMMIT_TYPE (8) or TRANSACTION_ROLLBACK_TYPE (12); NOT_TYPE is ignored."""
        if commit_or_rollback == TRANSACTION_NOT_TYPE:
            return EndResult(True, "SUCCESS", "unknown state: left for check-back")
        ext = self.half_message(commit_log_offset)
        if ext is None:
            return EndResult(False, "SYSTEM_ERROR", f"no half message at commitlog offset {commit_log_offset}")
        if producer_group is not None and ext.properties.get(PROPERTY_PRODUCER_GROUP) not in (None, producer_group):
            return EndResult(False, "SYSTEM_ERROR", "the producer group does not match the half message")
        if tran_state_table_offset is not None and tran_state_table_offset != ext.queue_offset:
            return EndResult(False, "SYSTEM_ERROR", "the transaction state table offset does not match")
        with self._lock:
            if ext.queue_offset in self._done.get(ext.queue_id, set()):
                return EndResult(True, "SUCCESS", "already ended")
            put = None
            if commit_or_rollback == TRANSACTION_COMMIT_TYPE:
                real = self._real_message(ext, TRANSACTION_COMMIT_TYPE)
                put = self.store.put_messages([real])
                if not put.ok:
                    return EndResult(False, "SYSTEM_ERROR", f"{put.status.value}: {put.remark}", put)
            elif commit_or_rollback != TRANSACTION_ROLLBACK_TYPE:
                return EndResult(False, "SYSTEM_ERROR", f"commitOrRollback {commit_or_rollback} is not 0, 8 or 12")
            self._put_op(ext)
        return EndResult(True, "SUCCESS", "", put)

    def _real_message(self, ext: MessageExt, tran_type: int) -> Message:
        props = dict(ext.properties)
        topic = props.pop(PROPERTY_REAL_TOPIC, ext.topic)
        qid = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(ext.queue_offset)
        sys_flag = (ext.sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | tran_type
        return Message(topic, ext.body, queue_id=qid, flag=ext.flag, properties=props, sys_flag=sys_flag,
                       born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                       reconsume_times=ext.reconsume_times, prepared_transaction_offset=ext.commit_log_offset)

    def _put_op(self, ext: MessageExt) -> None:
        self._ensure_topics()
        op = Message(RMQ_SYS_TRANS_OP_HALF_TOPIC, str(ext.queue_offset).encode(), queue_id=ext.queue_id,
                     properties={"TAGS": REMOVE_TAG})
        res = self.store.put_messages([op])
        if res.ok:
            self._done.setdefault(ext.queue_id, set()).add(ext.queue_offset)
        else:
            log.error("writing the op message for half offset %d failed: %s", ext.queue_offset, res.remark)

    # ------------------------------------------------------------------ check-back
    def _load_ops(self, qid: int) -> set[int]:
        """Read op messages not seen yet (they record which half offsets are finished)."""
        done = self._done.setdefault(qid, set())
        store = self.store
        off = self._op_offset.get(qid, store.get_min_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, qid))
        while True:
            res = store.get_message(HALF_CONSUMER_GROUP, RMQ_SYS_TRANS_OP_HALF_TOPIC, qid, off, 1000, max_bytes=8 << 20)
            if not res.messages:
                if res.next_begin_offset > off and res.status.name in ("OFFSET_TOO_SMALL", "NO_MATCHED_MESSAGE"):
                    off = res.next_begin_offset
                    continue
                break
            for raw in res.messages:
                m = decode_message(raw)
                if m.tags == REMOVE_TAG and m.body.isdigit():
                    done.add(int(m.body))
            off = res.next_begin_offset
        self._op_offset[qid] = off
        return done

    def check(self) -> int:
        """One TransactionalMessageCheckService round. Returns how many check-backs were sent."""
        store = self.store
        cq = store.get_consume_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        if cq is None:
            return 0
        now = self.clock()
        timeout = self.cfg.transactionTimeout
        check_max = self.cfg.transactionCheckMax
        sent = 0
        with self._lock:
            done = self._load_ops(0)
            om = self.controller.offset_manager
            start = max(om.query_offset(HALF_CONSUMER_GROUP, RMQ_SYS_TRANS_HALF_TOPIC, 0), cq.min_offset)
            off = start
            max_off = cq.max_offset
            while off < max_off:
                if off in done:
                    start = off + 1
                    off += 1
                    continue
                res = store.get_message(HALF_CONSUMER_GROUP, RMQ_SYS_TRANS_HALF_TOPIC, 0, off, 1)
                if not res.messages:
                    off += 1
                    continue
                ext = decode_message(res.messages[0])
                age = now - ext.born_timestamp if ext.born_timestamp else now - ext.store_timestamp
                immunity = ext.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
                wait_ms = int(immunity) * 1000 if immunity and immunity.isdigit() else timeout
                times = int(ext.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0") or 0)
                if age < wait_ms:
                    break  # this and later half messages are too young (they are in store order)
                if times >= check_max:
                    log.warning("half message %s discarded after %d checks (transactionCheckMax)", ext.msg_id, times)
                    self.discarded.append(ext)
                    self._put_op(ext)
                    start = off + 1
                    off += 1
                    continue
                # Re-put with the check count raised (so a restart continues counting), retire the old one.
                props = dict(ext.properties)
                props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times + 1)
                again = Message(RMQ_SYS_TRANS_HALF_TOPIC, ext.body, queue_id=0, flag=ext.flag, properties=props,
                                sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp, born_host=ext.born_host)
                res2 = store.put_messages([again])
                if not res2.ok:
                    break
                self._put_op(ext)
                new_ext = store.look_message_by_offset(res2.result.wrote_offset)
                group = props.get(PROPERTY_PRODUCER_GROUP, "")
                if self.checker is not None and new_ext is not None:
                    try:
                        if self.checker(group, new_ext):
                            sent += 1
                    except Exception:
                        log.exception("check-back to %s failed", group)
                start = off + 1
                off += 1
            om.commit_offset(HALF_CONSUMER_GROUP, RMQ_SYS_TRANS_HALF_TOPIC, 0, start)
        self.checks_sent += sent
        return sent

    def start(self, interval_ms: int | None = None) -> None:
        interval = (interval_ms if interval_ms is not None else self.cfg.transactionCheckInterval) / 1000

        def loop():
            while not self._stop.wait(interval):
                try:
                    self.check()
                except Exception:
                    log.exception("transaction check failed")
        self._thread = threading.Thread(target=loop, name="TransactionalMessageCheckService", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
