"""TransactionProducer (TransactionMQProducer) — half-message transactions on the client side
(SPEC §8 "Transactions").

``send_message_in_transaction(msg, local_executor, arg)`` does what
DefaultMQProducerImpl.sendMessageInTransaction does:

1. the message is sent synchronously with TRAN_MSG=true and PGROUP=<producer group> (the broker
   stores it to RMQ_SYS_TRANS_HALF_TOPIC, invisible to consumers; a DELAY level is removed —
   transactional messages cannot be delayed);
2. on SEND_OK the local transaction runs (``local_executor(msg, arg)`` or the listener's
   ``execute_local_transaction``) and answers a LocalTransactionState: COMMIT_MESSAGE,
   ROLLBACK_MESSAGE or UNKNOW (None or an exception count as UNKNOW); a send that is not
   SEND_OK skips it and rolls back;
3. END_TRANSACTION goes to the broker *oneway* with commitOrRollback 8 (commit), 12 (rollback)
   or 0 (unknown: the broker will ask later), the half message's commitlog offset (from the
   offsetMsgId) and its queue offset (tranStateTableOffset).

When the outcome stayed unknown or the END_TRANSACTION was lost, the broker sends
CHECK_TRANSACTION_STATE to a connection of the producer group; ``check_transaction_state`` runs
``TransactionListener.check_local_transaction(msg)`` on the check thread pool and answers with
END_TRANSACTION (fromTransactionCheck=true).  After transactionCheckMax unanswered checks the
broker discards the half message.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Union

from rmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_message_id,
)
from rmq.remoting import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)

from .errors import MQClientError
from .message import Message, MessageExt, SendResult, SendStatus
from .producer import AsyncProducer, Producer
from .route import DEFAULT_PRODUCER_GROUP

log = logging.getLogger("rmq.client.transaction")

__all__ = ["LocalTransactionState", "TransactionListener", "TransactionSendResult",
           "AsyncTransactionProducer", "TransactionProducer", "TransactionMQProducer"]

#: MessageConst.PROPERTY_TRANSACTION_ID ("__transactionId__")
PROPERTY_TRANSACTION_ID = "__transactionId__"


class LocalTransactionState(enum.Enum):
    """The local transaction's outcome (RocketMQ keeps the spelling UNKNOW)."""
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


_COMMIT_OR_ROLLBACK = {LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
                       LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
                       LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE}


class TransactionListener:
    """Override both methods (plain or ``async def``): ``execute_local_transaction(msg, arg)``
    runs the local transaction after the half message is stored; ``check_local_transaction(msg)``
    answers the broker's check-back for a half message whose outcome it does not know."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW


LocalExecutor = Union[Callable[[Message, Any], Any], TransactionListener]


@dataclass
class TransactionSendResult(SendResult):
    """SendResult of the half message plus the local transaction's state."""
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


def _as_state(value: Any) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    if isinstance(value, str):
        try:
            return LocalTransactionState(value)
        except ValueError:
            pass
    return LocalTransactionState.UNKNOW


def _executor_fn(local_executor: LocalExecutor | None, listener: TransactionListener | None) -> Callable[..., Any]:
    if local_executor is not None:
        return getattr(local_executor, "execute_local_transaction", local_executor)
    if listener is not None:
        return listener.execute_local_transaction
    raise MQClientError("TransactionListener is null: give local_executor or set a transaction_listener")


class AsyncTransactionProducer(AsyncProducer):
    """TransactionMQProducer on asyncio.  ``check_thread_pool_nums`` threads run the
    check-backs (checkThreadPoolMinSize/MaxSize, 1 by default)."""

    def __init__(self, group: str = DEFAULT_PRODUCER_GROUP, namesrv: str | Iterable[str] | None = None, *,
                 transaction_listener: TransactionListener | None = None, check_thread_pool_nums: int = 1,
                 **options: Any) -> None:
        super().__init__(group, namesrv, **options)
        self.transaction_listener = transaction_listener
        self.check_thread_pool_nums = max(1, check_thread_pool_nums)
        self._check_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._announced: set[str] = set()
        self.checks_answered = 0

    def set_transaction_listener(self, listener: TransactionListener) -> None:
        self.transaction_listener = listener

    async def start(self) -> None:
        if self._running:
            return
        self._check_executor = concurrent.futures.ThreadPoolExecutor(
            self.check_thread_pool_nums, thread_name_prefix=f"TransactionCheck_{self.group}")
        await super().start()

    async def shutdown(self) -> None:
        await super().shutdown()
        if self._check_executor is not None:
            self._check_executor.shutdown(wait=False, cancel_futures=True)
            self._check_executor = None

    # ------------------------------------------------------------------ the three steps
    async def send_half_message(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Step 1: store ``msg`` as a half message (sync send with retries)."""
        self._check_running()
        self._check_message(msg)
        if msg.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None) is not None:
            log.info("a transactional message cannot be delayed: DELAY property ignored")
        msg.properties[PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[PROPERTY_PRODUCER_GROUP] = self.group
        result = await self.send(msg, timeout)
        if result.send_status is SendStatus.SEND_OK:
            if result.transaction_id is not None:
                msg.properties[PROPERTY_TRANSACTION_ID] = result.transaction_id
            uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if uniq:
                msg.transaction_id = uniq
            await self._announce(result)
        return result

    async def _announce(self, result: SendResult) -> None:
        """Make sure the broker knows this producer group before it may need to check back
        (the regular heartbeat runs only every 30 s)."""
        inst = self._check_running()
        addr = inst.find_broker_address_in_publish(result.message_queue.brokerName)
        if addr and addr not in self._announced:
            try:
                await inst.send_heartbeat_to_all_brokers()
                self._announced.add(addr)
            except Exception as exc:  # the 30 s heartbeat will do it
                log.debug("heartbeat after the first half message failed: %s", exc)

    async def end_transaction(self, msg: Message, send_result: SendResult, state: LocalTransactionState,
                              local_exception: BaseException | None = None) -> None:
        """Step 3: END_TRANSACTION, oneway, to the broker that stored the half message."""
        inst = self._check_running()
        msg_id = send_result.offset_msg_id or send_result.msg_id
        _, offset = decode_message_id(msg_id)
        broker_name = send_result.message_queue.brokerName
        addr = inst.find_broker_address_in_publish(broker_name)
        if addr is None:
            await self.find_topic_publish_info(send_result.message_queue.topic)
            addr = inst.find_broker_address_in_publish(broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{broker_name}] not exist")
        header = EndTransactionRequestHeader(
            producerGroup=self.group, tranStateTableOffset=send_result.queue_offset, commitLogOffset=offset,
            commitOrRollback=_COMMIT_OR_ROLLBACK[state], fromTransactionCheck=False, msgId=send_result.msg_id,
            transactionId=send_result.transaction_id or msg.transaction_id)
        remark = f"executeLocalTransactionBranch exception: {local_exception!r}" if local_exception else None
        await inst.api.end_transaction_oneway(addr, header, remark, self.send_msg_timeout)

    async def send_message_in_transaction(self, msg: Message, local_executor: LocalExecutor | None = None,
                                          arg: Any = None) -> TransactionSendResult:
        """Half message, local transaction (a plain function runs in a worker thread here; the
        blocking TransactionProducer runs it in the caller's thread), END_TRANSACTION."""
        fn = _executor_fn(local_executor, self.transaction_listener)
        result = await self.send_half_message(msg)
        state, exc = LocalTransactionState.UNKNOW, None
        if result.send_status is SendStatus.SEND_OK:
            try:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(msg, arg)
                else:
                    value = await asyncio.get_running_loop().run_in_executor(None, fn, msg, arg)
                state = _as_state(value)
                if value is None:
                    log.info("executeLocalTransactionBranch return null, msg: %s", msg)
            except Exception as e:  # noqa: BLE001 - the broker will check back
                log.info("executeLocalTransactionBranch exception: %r", e)
                exc = e
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        return await self.finish_transaction(msg, result, state, exc)

    async def finish_transaction(self, msg: Message, result: SendResult, state: LocalTransactionState,
                                 exc: BaseException | None = None) -> TransactionSendResult:
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            log.info("executeLocalTransactionBranch return %s, %s", state.value, msg.transaction_id)
        try:
            await self.end_transaction(msg, result, state, exc)
        except Exception as e:  # noqa: BLE001 - the check-back resolves it
            log.warning("local transaction execute %s, but end broker transaction failed: %s", state.value, e)
        return TransactionSendResult(result.send_status, result.msg_id, result.message_queue, result.queue_offset,
                                     offset_msg_id=result.offset_msg_id,
                                     transaction_id=msg.transaction_id or result.transaction_id,
                                     region_id=result.region_id, trace_on=result.trace_on,
                                     local_transaction_state=state)

    # ------------------------------------------------------------------ check-back
    async def check_transaction_state(self, addr: str, msg: MessageExt,
                                      header: CheckTransactionStateRequestHeader) -> None:
        """The ClientInstance hook for CHECK_TRANSACTION_STATE: ask the listener on a check
        thread, then END_TRANSACTION oneway with fromTransactionCheck=true."""
        listener = self.transaction_listener
        if listener is None:
            log.warning("CheckTransactionState, pick transactionListener by group[%s] failed", self.group)
            return
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq:
            msg.transaction_id = uniq
        fn = listener.check_local_transaction
        state, exc = LocalTransactionState.UNKNOW, None
        try:
            if inspect.iscoroutinefunction(fn):
                state = _as_state(await fn(msg))
            else:
                state = _as_state(await asyncio.get_running_loop().run_in_executor(self._check_executor, fn, msg))
        except Exception as e:  # noqa: BLE001
            log.error("Broker call checkTransactionState, but checkLocalTransactionState exception: %r", e)
            exc = e
        inst = self.instance
        if inst is None:
            return
        end = EndTransactionRequestHeader(
            producerGroup=self.group, tranStateTableOffset=header.tranStateTableOffset,
            commitLogOffset=header.commitLogOffset, commitOrRollback=_COMMIT_OR_ROLLBACK[state],
            fromTransactionCheck=True, msgId=uniq or msg.msg_id, transactionId=header.transactionId)
        remark = f"checkLocalTransactionState Exception: {exc!r}" if exc else None
        try:
            await inst.api.end_transaction_oneway(addr, end, remark, 3.0)
            self.checks_answered += 1
        except Exception as e:  # noqa: BLE001
            log.error("endTransactionOneway exception: %s", e)


class TransactionProducer(Producer):
    """Blocking TransactionMQProducer.  The local transaction runs in the caller's thread, as
    in Java; check-backs run on the producer's check thread pool.

    >>> class Orders(TransactionListener):
    ...     def execute_local_transaction(self, msg, arg): ...; return LocalTransactionState.COMMIT_MESSAGE
    ...     def check_local_transaction(self, msg): return LocalTransactionState.COMMIT_MESSAGE
    >>> p = TransactionProducer("pg_tx", namesrv="127.0.0.1:9876", transaction_listener=Orders()).start()
    >>> p.send_message_in_transaction(Message("Orders", b"order 42"), arg=42)
    """

    def __init__(self, group: str = DEFAULT_PRODUCER_GROUP, namesrv: str | Iterable[str] | None = None, *,
                 transaction_listener: TransactionListener | None = None, check_thread_pool_nums: int = 1,
                 **options: Any) -> None:
        self._impl = AsyncTransactionProducer(group, namesrv, transaction_listener=transaction_listener,
                                              check_thread_pool_nums=check_thread_pool_nums, **options)
        self._lt = None
        self._callbacks = None

    @property
    def impl(self) -> AsyncTransactionProducer:  # type: ignore[override]
        return self._impl  # type: ignore[return-value]

    def set_transaction_listener(self, listener: TransactionListener) -> None:
        self._impl.set_transaction_listener(listener)  # type: ignore[attr-defined]

    def send_message_in_transaction(self, msg: Message, local_executor: LocalExecutor | None = None,
                                    arg: Any = None) -> TransactionSendResult:
        impl: AsyncTransactionProducer = self._impl  # type: ignore[assignment]
        fn = _executor_fn(local_executor, impl.transaction_listener)
        lt = self._loop_thread()
        result = lt.run(impl.send_half_message(msg))
        state, exc = LocalTransactionState.UNKNOW, None
        if result.send_status is SendStatus.SEND_OK:
            try:
                value = lt.run(fn(msg, arg)) if inspect.iscoroutinefunction(fn) else fn(msg, arg)
                state = _as_state(value)
            except Exception as e:  # noqa: BLE001
                log.info("executeLocalTransactionBranch exception: %r", e)
                exc = e
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        return lt.run(impl.finish_transaction(msg, result, state, exc))


#: RocketMQ's class name.
TransactionMQProducer = TransactionProducer
