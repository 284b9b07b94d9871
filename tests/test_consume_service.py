"""ConsumeMessageConcurrentlyService without servers: a job of several listener batches settles
like RocketMQ's processConsumeResult batch by batch (ack_index, RECONSUME_LATER, exceptions,
CONSUME_SUCCESS), the all-success fast path commits the same offsets and counters, and batches of
consumeMessageBatchMaxSize reach the listener in offset order; a coroutine listener (awaited on
the client loop) settles exactly as a plain one (run on the consume threads)."""
from __future__ import annotations

import asyncio

import pytest

from rmq.client.consume_service import ConsumeMessageConcurrentlyService
from rmq.client.message import ConsumeStatus, MessageExt, MessageModel
from rmq.client.process_queue import ProcessQueue
from rmq.remoting import MessageQueue

MQ = MessageQueue("T", "broker-a", 0)


def _msg(off: int) -> MessageExt:
    return MessageExt(topic="T", body=b"x%d" % off, queue_id=0, flag=0, properties={}, sys_flag=0,
                      born_timestamp=0, born_host=("127.0.0.1", 1), store_timestamp=0,
                      store_host=("127.0.0.1", 2), reconsume_times=0, prepared_transaction_offset=0,
                      queue_offset=off, commit_log_offset=off * 100, store_size=100, body_crc=0)


class _Offsets:
    def __init__(self) -> None:
        self.updates: list[int] = []

    def update_offset(self, mq, offset, increase_only) -> None:  # noqa: ANN001
        self.updates.append(offset)


class _Consumer:
    group = "cg"
    message_model = MessageModel.CLUSTERING
    instance = None
    max_reconsume_times = -1

    def __init__(self) -> None:
        self.offset_store = _Offsets()
        self.sent_back: list[tuple[int, int]] = []

    async def send_message_back(self, msg, delay_level) -> bool:  # noqa: ANN001
        self.sent_back.append((msg.queue_offset, delay_level))
        return True


def _as_coroutine(listener):
    """The same listener as a coroutine function of the same arity."""
    if listener.__code__.co_argcount == 1:
        async def one(msgs):
            return listener(msgs)
        return one

    async def two(msgs, ctx):
        return listener(msgs, ctx)
    return two


def _run(listener, n: int, batch: int, coroutine: bool = False):
    if coroutine:
        listener = _as_coroutine(listener)

    async def main():
        consumer = _Consumer()
        svc = ConsumeMessageConcurrentlyService(consumer, listener, consume_thread_nums=2,
                                                consume_message_batch_max_size=batch)
        svc.start()
        pq = ProcessQueue()
        msgs = [_msg(i) for i in range(n)]
        pq.put_messages(msgs)
        svc.submit_consume_request(msgs, pq, MQ, True)
        for _ in range(500):                       # bounded: at most 5 s
            if not svc.stats()["inFlightRequests"]:
                break
            await asyncio.sleep(0.01)
        await svc.shutdown(1.0)
        return consumer, svc, pq
    return asyncio.run(main())


@pytest.mark.parametrize("coroutine", [False, True], ids=["thread", "coroutine"])
def test_all_success_commits_past_the_last_message_in_order(coroutine):
    seen: list[list[int]] = []

    def listener(msgs):
        seen.append([m.queue_offset for m in msgs])
        assert all("CONSUME_START_TIME" in m.properties for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    consumer, svc, pq = _run(listener, 10, 3, coroutine)
    assert seen == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert consumer.offset_store.updates[-1] == 10 and not consumer.sent_back
    assert (svc.consumed_ok, svc.consumed_failed) == (10, 0) and pq.msg_count == 0


@pytest.mark.parametrize("coroutine", [False, True], ids=["thread", "coroutine"])
def test_mixed_results_settle_batch_by_batch(coroutine):
    def listener(msgs, ctx):
        first = msgs[0].queue_offset
        if first == 2:          # second batch: only its first message consumed
            ctx.ack_index = 0
            ctx.delay_level_when_next_consume = 3
            return ConsumeStatus.CONSUME_SUCCESS
        if first == 4:
            return ConsumeStatus.RECONSUME_LATER
        if first == 6:
            raise RuntimeError("listener failed")
        return ConsumeStatus.CONSUME_SUCCESS
    consumer, svc, pq = _run(listener, 8, 2, coroutine)
    assert consumer.sent_back == [(3, 3), (4, 0), (5, 0), (6, 0), (7, 0)]
    assert (svc.consumed_ok, svc.consumed_failed) == (3, 5)
    # every message settled (consumed or sent back): the offset moves past the last one
    assert consumer.offset_store.updates[-1] == 8 and pq.msg_count == 0


def test_send_keep_gil_sends_or_declines():
    """rmq._native.send_keep_gil, used by the client's connections: all of a small write, 0 when
    the socket would block or the data is over 256 KiB (the transport takes it then), OSError on
    a descriptor that is not a socket, ValueError on a negative one."""
    import socket

    import pytest

    from rmq import native
    if native.ext is None:
        pytest.skip("needs the C extension rmq._native")
    send = native.ext.send_keep_gil
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        assert send(a.fileno(), b"hello") == 5 and b.recv(16) == b"hello"
        assert send(a.fileno(), b"x" * (256 * 1024 + 1)) == 0
        total = 0
        for _ in range(100_000):                 # fill the socket buffer until it would block
            n = send(a.fileno(), b"y" * 65536)
            if n == 0:
                break
            total += n
        assert n == 0 and total > 0
        with pytest.raises(ValueError):
            send(-1, b"z")
    finally:
        a.close()
        b.close()
    import os
    r, w = os.pipe()
    try:
        with pytest.raises(OSError):             # not a socket (ENOTSOCK)
            send(w, b"z")
    finally:
        os.close(r)
        os.close(w)


def test_many_jobs_on_a_bounded_set_of_threads_settle_and_the_threads_stop():
    """Plain-listener jobs go to at most consume_thread_nums threads, every job's result comes
    back to the loop (counters and the committed offset cover all of them), and shutdown ends the
    threads."""
    import threading

    names: set[str] = set()

    def listener(msgs):
        names.add(threading.current_thread().name)
        return ConsumeStatus.CONSUME_SUCCESS

    async def main():
        consumer = _Consumer()
        svc = ConsumeMessageConcurrentlyService(consumer, listener, consume_thread_nums=3,
                                                consume_message_batch_max_size=2)
        svc.start()
        pq = ProcessQueue()
        for p in range(40):                           # 40 pulls of 8 messages
            msgs = [_msg(p * 8 + i) for i in range(8)]
            pq.put_messages(msgs)
            svc.submit_consume_request(msgs, pq, MQ, True)
        for _ in range(1000):                         # bounded: at most 10 s
            if not svc.stats()["inFlightRequests"]:
                break
            await asyncio.sleep(0.01)
        threads = list(svc._threads)
        await svc.shutdown(1.0)
        return consumer, svc, pq, threads
    consumer, svc, pq, threads = asyncio.run(main())
    assert (svc.consumed_ok, svc.consumed_failed) == (320, 0) and pq.msg_count == 0
    assert consumer.offset_store.updates[-1] == 320 == max(consumer.offset_store.updates)
    assert 1 <= len(threads) <= 3 and len(names) <= 3
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
