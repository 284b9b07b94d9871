"""The Python RocketMQ client (SPEC §3, §4, §9): unit tests of its pieces (MessageClientIDSetter,
batch encoding, selectors, fault tolerance, routes, offsets, transport) and integration tests
against real NameServer + broker listeners on 127.0.0.1 ephemeral ports, including the stock C++
client (PyPI rocketmq) on the other end."""
from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import socket
import struct
import sys
import threading
import time

import pytest

from rmq.client import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    FunctionMachineRoomResolver,
    Message,
    MessageModel,
    MessageQueue,
    MQAdmin,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    RemotingConnectError,
    RemotingTimeoutError,
    SelectMessageQueueByHash,
    SelectMessageQueueByRoundRobin,
    SendStatus,
    encode_messages,
    lenient_json,
)
from rmq.client.consumer_base import build_subscription_data
from rmq.client.fault import MQFaultStrategy
from rmq.client.instance import ClientInstance
from rmq.client.offset_store import LocalFileOffsetStore, ReadOffsetType
from rmq.client.process_queue import ProcessQueue
from rmq.client.remoting import RemotingClient
from rmq.client.route import TopicPublishInfo, default_topic_route_for, route_to_publish_info, route_to_subscribe_info
from rmq.client.selector import java_hash_code
from rmq.client.uniq_id import (
    build_fix_bytes,
    create_uniq_id,
    fix_string,
    ip_from_id,
    nearly_time_from_id,
    pid_from_id,
    set_uniq_id,
)
from rmq.common.jhash import java_string_hash
from rmq.common.message import COMPRESSED_FLAG
from rmq.remoting import BrokerData, FrameDecoder, QueueData, RemotingCommand, RequestCode, ResponseCode, TopicRouteData

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remoting_harness import Cluster  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def wait_until(pred, timeout: float = 15.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


# =============================================================================== unit: ids
def test_uniq_id_layout_matches_message_client_id_setter():
    # FIX_STRING = ip (4) | pid & 0xFFFF (2) | class loader hash (4), then per id:
    # ms since the 1st of this month 00:00 local (int 4) | counter (short 2); upper-case hex.
    fix = build_fix_bytes("10.1.2.3", 0x12345, 0x7EADBEEF)
    assert fix.hex().upper() == "0A010203" + "2345" + "7EADBEEF"
    now = int(time.time() * 1000)
    a, b = create_uniq_id(now), create_uniq_id(now)
    assert len(a) == 32 and a == a.upper() and a.startswith(fix_string())
    raw_a, raw_b = bytes.fromhex(a), bytes.fromhex(b)
    month_start = _dt.datetime.fromtimestamp(now / 1000).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    span = struct.unpack(">I", raw_a[10:14])[0]
    assert span == now - int(month_start.timestamp() * 1000)
    # the counter is the last two bytes and goes up by one
    assert (struct.unpack(">H", raw_b[14:16])[0] - struct.unpack(">H", raw_a[14:16])[0]) % 65536 == 1
    assert raw_a[:14] == raw_b[:14]
    assert pid_from_id(a) == os.getpid() & 0xFFFF
    socket.inet_aton(ip_from_id(a))
    assert nearly_time_from_id(a, now + 5) == now


def test_set_uniq_id_only_once():
    props: dict[str, str] = {}
    uid = set_uniq_id(props)
    assert props["UNIQ_KEY"] == uid and set_uniq_id(props) == uid
    ids = {create_uniq_id() for _ in range(2000)}
    assert len(ids) == 2000


# =============================================================================== unit: messages
def test_batch_encoding_matches_message_decoder_encode_messages():
    m1 = Message("T", b"hello", tags="TagA", keys="k1")
    m2 = Message("T", b"\x00\x01", flag=7, properties={"color": "red"})
    props1 = "".join(f"{k}\x01{v}\x02" for k, v in m1.properties.items()).encode()
    props2 = "".join(f"{k}\x01{v}\x02" for k, v in m2.properties.items()).encode()
    # TOTALSIZE | MAGICCODE 0 | BODYCRC 0 | FLAG | BODY len + bytes | PROPERTIES short len + bytes
    expected = (struct.pack(">iiiii", 20 + 5 + 2 + len(props1), 0, 0, 0, 5) + b"hello" +
                struct.pack(">h", len(props1)) + props1 +
                struct.pack(">iiiii", 20 + 2 + 2 + len(props2), 0, 0, 7, 2) + b"\x00\x01" +
                struct.pack(">h", len(props2)) + props2)
    assert encode_messages([m1, m2]) == expected
    from rmq.common.message import decode_batch_body  # the store's decoder agrees
    assert decode_batch_body(expected) == [(0, b"hello", m1.properties), (7, b"\x00\x01", m2.properties)]


def test_producer_batch_body_is_encode_messages_and_keeps_every_batch_check():
    """AsyncProducer._build_batch (checks, UNIQ_KEY and encoding in one pass) gives the bytes
    encode_messages gives for the same messages, and refuses what generateFromList refuses."""
    from rmq.client.errors import MQClientError
    from rmq.client.producer import AsyncProducer
    prod = AsyncProducer("pg-batch")
    msgs = [Message("T", b"hello", tags="TagA", keys="k1"), Message("T", b"\x00" * 1024, flag=7),
            Message("T", "\u00e9t\u00e9", properties={"color": "r\u00f6t"})]
    batch = prod._build_batch(msgs)
    assert all(len(m.uniq_key) == 32 for m in msgs) and batch.topic == "T" and batch.messages == msgs
    assert batch.body == encode_messages(msgs)           # the UNIQ_KEYs it set are in both
    assert prod._build_batch(msgs).body == batch.body    # an id already there is kept
    bad = [([], "at least one message"),
           ([Message("T", b"a"), Message("T", b"b", delay_time_level=2)], "TimeDelayLevel"),
           ([Message("%RETRY%g", b"a")], "Retry Group"),
           ([Message("T", b"a"), Message("U", b"b")], "topic of the messages"),
           ([Message("T", b"a"), Message("T", b"b", wait_store_msg_ok=False)], "waitStoreMsgOK"),
           ([Message("T t", b"a")], "illegal characters"),
           ([Message("T", b"a"), Message("T", b"")], "body length is zero"),
           ([Message("T", b"x" * (prod.max_message_size + 1))], "over max value")]
    for ms, words in bad:
        with pytest.raises(MQClientError, match=words):
            prod._build_batch(ms)
    assert prod._build_batch([Message("T", b"a", delay_time_level=0)]).body   # level 0 is no delay


def test_message_properties():
    m = Message("T", "text", tags="A", keys=["k1", "k2"], delay_time_level=3)
    assert m.body == b"text" and m.tags == "A" and m.keys == "k1 k2" and m.delay_time_level == 3
    assert m.properties["WAIT"] == "true"    # Message(...) sets waitStoreMsgOK like Java
    m.put_user_property("color", "red")
    assert m.get_property("color") == "red"


def test_subscription_data_like_filter_api():
    sd = build_subscription_data("T", "TagA || TagB ||  TagC ")
    assert sd.subString == "TagA || TagB ||  TagC "
    assert sd.tagsSet == ["TagA", "TagB", "TagC"]
    assert sorted(sd.codeSet) == sorted(java_string_hash(t) for t in ("TagA", "TagB", "TagC"))
    assert build_subscription_data("T", "*").tagsSet == [] and build_subscription_data("T", "").subString == "*"


# =============================================================================== unit: selection
def test_hash_selector_uses_java_hash_code():
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    sel = SelectMessageQueueByHash()
    assert sel.select(mqs, None, 7).queueId == 3               # Integer.hashCode(7) = 7
    assert sel.select(mqs, None, -7).queueId == 3              # abs(-7 % 4) = 3
    assert java_hash_code("abc") == 96354                      # "abc".hashCode()
    assert sel.select(mqs, None, "abc").queueId == 96354 % 4
    assert java_hash_code(1 << 40) == 256                       # Long.hashCode: (int)(v ^ v>>>32)
    rr = SelectMessageQueueByRoundRobin()
    assert [rr.select(mqs, None, None).queueId for _ in range(6)] == [0, 1, 2, 3, 0, 1]


def _route(*brokers, order_conf=None):
    qds, bds = [], []
    for name, nq, perm, has_master in brokers:
        qds.append(QueueData(brokerName=name, readQueueNums=nq, writeQueueNums=nq, perm=perm))
        bds.append(BrokerData("C", name, {0: f"{name}:1"} if has_master else {1: f"{name}:2"}))
    return TopicRouteData(queueDatas=qds, brokerDatas=bds, orderTopicConf=order_conf)


def test_publish_and_subscribe_info_from_route():
    route = _route(("b", 2, 6, True), ("a", 2, 6, True), ("r", 3, 4, True), ("s", 2, 6, False))
    tp = route_to_publish_info("T", route)
    # writable (perm & 2) brokers with a master, in brokerName order: a0 a1 b0 b1
    assert [(q.brokerName, q.queueId) for q in tp.message_queue_list] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    sub = route_to_subscribe_info("T", route)
    assert len(sub) == 2 + 2 + 3 + 2
    ordered = route_to_publish_info("T", _route(("a", 4, 6, True), order_conf="a:2;b:1"))
    assert ordered.order_topic and [(q.brokerName, q.queueId) for q in ordered.message_queue_list] == [
        ("a", 0), ("a", 1), ("b", 0)]
    tp.reset_index(0)
    # after a failure on broker "a" the next pick is on another broker when there is one
    assert all(tp.select_one_message_queue("a").brokerName == "b" for _ in range(8))
    cut = default_topic_route_for(_route(("a", 8, 7, True)), 4)
    assert (cut.queueDatas[0].readQueueNums, cut.queueDatas[0].writeQueueNums) == (4, 4)


def test_latency_fault_tolerance():
    now = [1_000_000]
    fs = MQFaultStrategy(True, clock=lambda: now[0])
    # latencyMax {50,100,550,1000,2000,3000,15000} -> notAvailableDuration {0,0,30s,60s,120s,180s,600s}
    assert [fs.compute_not_available_duration(x) for x in (10, 99, 550, 1500, 2999, 3000, 20000)] == [
        0, 0, 30000, 60000, 120000, 180000, 600000]
    tp = TopicPublishInfo([MessageQueue("T", "a", 0), MessageQueue("T", "b", 0)],
                          route=_route(("a", 1, 6, True), ("b", 1, 6, True)))
    # a failure counts as a 30000 ms latency -> >= 15000 -> "a" is avoided for 600 s
    fs.update_fault_item("a", 0, isolation=True)
    assert {fs.select_one_message_queue(tp, None).brokerName for _ in range(10)} == {"b"}
    now[0] += 599_999
    assert {fs.select_one_message_queue(tp, None).brokerName for _ in range(10)} == {"b"}
    now[0] += 1
    assert {fs.select_one_message_queue(tp, None).brokerName for _ in range(10)} == {"a", "b"}
    fs.update_fault_item("a", 600, False)
    fs.update_fault_item("b", 2500, False)             # both unavailable: the least bad is picked
    mq = fs.select_one_message_queue(tp, None)
    assert mq.brokerName == "a"


# =============================================================================== unit: consumer pieces
def test_process_queue_commits_minimum_in_flight():
    from rmq.client.message import MessageExt
    def m(off):
        return MessageExt("T", b"x", 0, 0, {}, 0, 0, ("1.1.1.1", 1), 0, ("1.1.1.1", 2), 0, 0, off, 0, 0, 0)
    pq = ProcessQueue()
    msgs = [m(i) for i in range(10, 15)]
    pq.put_messages(msgs)
    assert pq.max_span() == 4
    assert pq.remove_messages([msgs[1], msgs[3]]) == 10      # 10 still in flight
    assert pq.remove_messages([msgs[0]]) == 12
    assert pq.remove_messages([msgs[2], msgs[4]]) == 15      # empty: max + 1


def test_process_queue_orderly_take_commit_and_consume_again():
    """takeMessages / commit / makeMessageToConsumeAgain: an orderly consumer commits only the
    consumed prefix, and messages put back are taken again first, in offset order."""
    from rmq.client.message import MessageExt
    def m(off):
        return MessageExt("T", b"xy", 0, 0, {}, 0, 0, ("1.1.1.1", 1), 0, ("1.1.1.1", 2), 0, 0, off, 0, 0, 0)
    pq = ProcessQueue()
    assert pq.put_messages([m(i) for i in range(5)]) is True      # dispatch: nobody consuming yet
    assert pq.put_messages([m(5)]) is False                       # a consume request is running
    first = pq.take_messages(2)
    assert [x.queue_offset for x in first] == [0, 1] and pq.msg_count == 6
    assert pq.commit() == 2 and pq.msg_count == 4
    again = pq.take_messages(2)
    pq.make_message_to_consume_again(again)                       # SUSPEND_CURRENT_QUEUE_A_MOMENT
    assert [x.queue_offset for x in pq.take_messages(3)] == [2, 3, 4]
    assert pq.commit() == 5
    assert [x.queue_offset for x in pq.take_messages(10)] == [5] and pq.commit() == 6
    assert pq.take_messages(1) == [] and pq.consuming is False and pq.commit() == -1
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_local_file_offset_store(tmp_path):
    mq0, mq1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    st = LocalFileOffsetStore("127.0.0.1@x", "G", str(tmp_path))

    async def go():
        st.update_offset(mq0, 5, False)
        st.update_offset(mq0, 3, True)           # increase-only keeps 5
        st.update_offset(mq1, 9, False)
        await st.persist_all([mq0, mq1])
        st.update_offset(mq1, 11, False)
        await st.persist_all([mq0, mq1])
        fresh = LocalFileOffsetStore("127.0.0.1@x", "G", str(tmp_path))
        await fresh.load()
        return fresh.offset_table, await fresh.read_offset(MessageQueue("T", "b", 7), ReadOffsetType.READ_FROM_STORE)
    table, missing = asyncio.run(go())
    assert table == {mq0: 5, mq1: 11} and missing == -1
    path = tmp_path / "127.0.0.1@x" / "G" / "offsets.json"
    doc = json.loads(path.read_text())
    assert {(e["queueId"], e["offset"]) for e in doc["offsetTable"]} == {(0, 5), (1, 11)}
    assert (tmp_path / "127.0.0.1@x" / "G" / "offsets.json.bak").exists()


def test_compute_pull_from_where():
    from rmq.client.push_consumer import AsyncPushConsumer, parse_consume_timestamp
    calls = []

    class Store:
        def __init__(self, value):
            self.value = value

        async def read_offset(self, mq, kind):
            return self.value

    async def run(cfw, stored, topic="T", ts="20240102030405"):
        c = AsyncPushConsumer("G", "127.0.0.1:1", consume_from_where=cfw, consume_timestamp=ts)
        c.offset_store = Store(stored)

        async def max_offset(mq):
            return 42

        async def search_offset(mq, t):
            calls.append(t)
            return 17
        c.max_offset, c.search_offset = max_offset, search_offset
        return await c.compute_pull_from_where(MessageQueue(topic, "b", 0))

    L, F, T = (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
               ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)
    assert asyncio.run(run(L, 7)) == 7                  # a stored offset always wins
    assert asyncio.run(run(L, -1)) == 42                # none stored: max offset
    assert asyncio.run(run(L, -1, "%RETRY%G")) == 0     # retry topic from 0
    assert asyncio.run(run(F, -1)) == 0
    assert asyncio.run(run(T, -1)) == 17
    assert calls == [parse_consume_timestamp("20240102030405")]
    assert asyncio.run(run(T, -1, "%RETRY%G")) == 42
    assert asyncio.run(run(L, -2)) == -1                # read error: do not add the queue


def test_lenient_json_reads_fastjson_object_keys():
    body = b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":3,"topic":"t"}:{"brokerOffset":9}},"x":{0:"a"}}'
    obj = lenient_json.loads(body)
    (key, value), = obj["offsetTable"].items()
    assert lenient_json.to_message_queue(key) == MessageQueue("t", "b", 3) and value == {"brokerOffset": 9}
    assert obj["x"] == {"0": "a"}
    assert lenient_json.to_message_queue("MessageQueue [topic=t, brokerName=b, queueId=1]") == MessageQueue("t", "b", 1)


# =============================================================================== unit: transport
def test_remoting_client_timeout_oneway_and_server_requests():
    """A scripted peer: ignores code 999 (timeout), answers code 30, and sends the client
    NOTIFY_CONSUMER_IDS_CHANGED plus an unknown request code."""
    got_notify = []

    async def main():
        seen = []

        async def handle(reader, writer):
            dec = FrameDecoder()
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for payload in dec.feed(data):
                    cmd = RemotingCommand.decode(payload)
                    seen.append(cmd)
                    if cmd.is_response:
                        continue
                    if cmd.code == 30:
                        writer.write(RemotingCommand.response_to(cmd, 0, ext_fields={"offset": "5"}).encode())
                        # server-initiated requests on the same connection
                        writer.write(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                             {"consumerGroup": "G"}, oneway=True).encode())
                        writer.write(RemotingCommand.request(12345, opaque=777).encode())
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        client = RemotingClient()
        client.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                  lambda a, c: got_notify.append(c.ext_fields["consumerGroup"]))
        try:
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(addr, RemotingCommand.request(999), 0.2)
            resp = await client.invoke(addr, RemotingCommand.request(30), 2.0)
            assert resp.code == 0 and resp.ext_fields["offset"] == "5"
            await client.invoke_oneway(addr, RemotingCommand.request(31))
            for _ in range(100):
                if got_notify and any(c.is_response and c.opaque == 777 for c in seen):
                    break
                await asyncio.sleep(0.02)
            reply = next(c for c in seen if c.is_response and c.opaque == 777)
            assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert any(c.code == 31 and c.is_oneway for c in seen)
            assert seen[0].language == "PYTHON" and seen[0].version == 401
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
        with pytest.raises(RemotingConnectError):
            await RemotingClient().invoke(addr, RemotingCommand.request(30), 1.0)

    asyncio.run(main())
    assert got_notify == ["G"]


# =============================================================================== integration
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("rmq-client"))
    c.add_broker("broker-a", messageDelayLevel=" ".join(["1s"] * 18))   # fast retries for the tests
    c.wait_registered("broker-a")
    yield c
    c.close()


@pytest.fixture(scope="module")
def ns(cluster):
    return cluster.namesrv_addr


@pytest.fixture(scope="module")
def admin(ns):
    a = MQAdmin(ns)
    yield a
    a.close()


@pytest.fixture
def producer(ns):
    p = Producer("test_pg", ns)
    p.start()
    yield p
    p.shutdown()


@pytest.fixture
def pull_consumer(ns):
    c = PullConsumer("test_pull_cg", ns)
    c.start()
    yield c
    c.shutdown()


_topic_seq = iter(range(10_000))


def new_topic(admin, prefix: str, queues: int = 8, cluster_name: str = "DefaultCluster") -> str:
    t = f"{prefix}_{os.getpid()}_{next(_topic_seq)}"
    admin.create_topic(t, cluster=cluster_name, read_queue_nums=queues, write_queue_nums=queues)
    admin.wait_for_route(t, queues=queues)
    return t


def pull_all(pc: PullConsumer, topic: str, expression: str = "*") -> list:
    out = []
    for mq in pc.fetch_subscribe_message_queues(topic):
        offset = 0
        for _ in range(1000):
            r = pc.pull(mq, expression, offset, 32)
            out += r.msg_found_list
            if r.pull_status is not PullStatus.FOUND:
                break
            offset = r.next_begin_offset
    return out


def test_async_sends_keep_a_bounded_window(ns, pull_consumer, admin):
    """back_pressure_for_async_send_num bounds the sends in flight: send_async waits for a slot;
    every send completes, each callback runs once, and every message is stored."""
    topic = new_topic(admin, "AsyncWindow", 2)
    p = Producer("pg_async_window", ns, instance_name="async_window", back_pressure_for_async_send_num=3)
    p.start()
    try:
        futs, outstanding, got = [], [], []
        lock = threading.Lock()
        for i in range(60):
            futs.append(p.send_async(Message(topic, b"w%d" % i), lambda r, e: (lock.acquire(), got.append((r, e)),
                                                                             lock.release())))
            outstanding.append(sum(not f.done() for f in futs))
        results = [f.result(10) for f in futs]
        assert max(outstanding) <= 3 and all(r.send_status is SendStatus.SEND_OK for r in results)
        wait_until(lambda: len(got) == 60, what="60 callbacks")
        assert all(e is None for _, e in got) and {id(r) for r, _ in got} == {id(r) for r in results}
    finally:
        p.shutdown()
    with pytest.raises(MQClientError):
        Producer("pg_bad_window", ns, back_pressure_for_async_send_num=0)
    msgs = wait_until(lambda: (lambda ms: ms if len(ms) == 60 else None)(pull_all(pull_consumer, topic)),
                      what="60 messages stored")
    assert sorted(m.body for m in msgs) == sorted(b"w%d" % i for i in range(60))


def test_send_sync_async_oneway_batch_orderly(producer, pull_consumer, admin):
    topic = new_topic(admin, "SendModes", 4)
    r = producer.send(Message(topic, b"sync", tags="S", keys="k-sync"))
    assert r.send_status is SendStatus.SEND_OK and r.message_queue.topic == topic and r.offset_msg_id
    callbacks = []
    done = threading.Event()
    fut = producer.send_async(Message(topic, b"async", tags="A"),
                              lambda res, err: (callbacks.append((res, err)), done.set()))
    ra = fut.result(5)
    assert done.wait(5) and callbacks[0][0] is ra and callbacks[0][1] is None
    producer.send_oneway(Message(topic, b"oneway", tags="O"))
    rb = producer.send_batch([Message(topic, f"batch{i}".encode(), tags="B", keys=f"bk{i}") for i in range(5)])
    assert rb.msg_id.count(",") == 4 and rb.offset_msg_id.count(",") == 4
    orderly = [producer.send_orderly(Message(topic, f"order{i}".encode(), tags="R"), SelectMessageQueueByHash(), 1234)
               for i in range(6)]
    assert {o.message_queue.queueId for o in orderly} == {1234 % 4}
    assert [o.queue_offset for o in orderly] == sorted(o.queue_offset for o in orderly)

    msgs = wait_until(lambda: (lambda ms: ms if len(ms) == 1 + 1 + 1 + 5 + 6 else None)(pull_all(pull_consumer, topic)),
                      what="all 14 messages stored")
    by_body = {m.body: m for m in msgs}
    assert by_body[b"sync"].msg_id == r.msg_id and by_body[b"sync"].keys == "k-sync"
    assert by_body[b"async"].msg_id == ra.msg_id
    assert by_body[b"oneway"].tags == "O"
    assert [m.uniq_key for m in sorted((m for m in msgs if m.tags == "B"), key=lambda m: m.queue_offset)] == \
        rb.msg_id.split(",")
    order_q = sorted((m for m in msgs if m.tags == "R"), key=lambda m: m.queue_offset)
    assert [m.body for m in order_q] == [f"order{i}".encode() for i in range(6)]
    assert all(m.uniq_key and len(m.uniq_key) == 32 for m in msgs)


def test_topic_auto_created_through_tbw102(producer, admin):
    topic = f"AutoCreate_{os.getpid()}"
    with pytest.raises(MQClientError):
        admin.topic_route(topic)
    r = producer.send(Message(topic, b"first"))
    assert r.send_status is SendStatus.SEND_OK
    route = admin.wait_for_route(topic)
    assert route.queueDatas[0].writeQueueNums == 4      # defaultTopicQueueNums


def test_compressed_body_round_trip(producer, pull_consumer, admin):
    topic = new_topic(admin, "Compress", 1)
    big = (b"RocketMQ compresses bodies of 4 KiB and more. " * 200)[:8000]
    small = b"y" * 4095
    producer.send(Message(topic, big))
    producer.send(Message(topic, small))
    msgs = pull_all(pull_consumer, topic)
    assert [m.body for m in msgs] == [big, small]
    assert msgs[0].sys_flag & COMPRESSED_FLAG and msgs[0].store_size < len(big)   # stored zlib-compressed
    assert not msgs[1].sys_flag & COMPRESSED_FLAG                                  # below the 4096 threshold


def test_pull_statuses_offsets_and_tag_filter(producer, pull_consumer, admin):
    topic = new_topic(admin, "PullStatus", 1)
    for i in range(6):
        producer.send(Message(topic, f"m{i}".encode(), tags="TagA" if i % 2 == 0 else "TagB"))
    mq = pull_consumer.fetch_subscribe_message_queues(topic)[0]
    r = pull_consumer.pull(mq, "*", 0, 4)
    assert r.pull_status is PullStatus.FOUND and len(r.msg_found_list) == 4 and r.next_begin_offset == 4
    assert (r.min_offset, r.max_offset) == (0, 6)
    assert r.msg_found_list[0].properties["MAX_OFFSET"] == "6"
    a = pull_consumer.pull(mq, "TagA", 0, 32)
    assert [m.body for m in a.msg_found_list] == [b"m0", b"m2", b"m4"]
    assert pull_consumer.pull(mq, "*", 6, 32).pull_status is PullStatus.NO_NEW_MSG
    assert pull_consumer.pull(mq, "TagZ", 0, 32).pull_status in (PullStatus.NO_MATCHED_MSG, PullStatus.NO_NEW_MSG)
    assert pull_consumer.pull(mq, "*", 100, 32).pull_status is PullStatus.OFFSET_ILLEGAL
    assert (pull_consumer.min_offset(mq), pull_consumer.max_offset(mq)) == (0, 6)
    assert pull_consumer.fetch_consume_offset(mq) in (-1, 0)
    pull_consumer.update_consume_offset(mq, 4)
    pull_consumer.commit_offsets()
    assert pull_consumer.fetch_consume_offset(mq) == 4
    with pytest.raises(MQClientError):
        pull_consumer.pull(mq, "*", -1, 32)


def test_unreachable_namesrv_is_a_clear_error():
    p = Producer("pg_dead", "127.0.0.1:1")
    p.start()
    try:
        with pytest.raises(MQClientError) as ei:
            p.send(Message("Anything", b"x"))
        assert "No route info" in str(ei.value) or "NameServer" in str(ei.value)
    finally:
        p.shutdown()


def test_namesrv_round_robin_after_failure(ns):
    async def go():
        inst = ClientInstance(ClientConfig(namesrv_addr=["127.0.0.1:1", ns]))
        inst._ns_index = 0            # start on the dead one
        try:
            route = await inst.fetch_topic_route("TBW102")
            return route, inst._ns_chosen
        finally:
            await inst.remoting.close()
    route, chosen = asyncio.run(go())
    assert route.queueDatas and chosen == ns


class Collector:
    """A listener that records (consumer, queueId, offset, body) of every message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, int, int, bytes]] = []

    def listener(self, name: str, status=ConsumeStatus.CONSUME_SUCCESS):
        def on(msgs):
            with self.lock:
                self.items += [(name, m.queue_id, m.queue_offset, m.body) for m in msgs]
            return status
        return on

    def count(self) -> int:
        with self.lock:
            return len(self.items)


def start_push(ns, group, topic, name, collector, **kw):
    cfg = ClientConfig(client_ip="127.0.0.1", instance_name=name, rebalance_interval=kw.pop("rebalance_interval", 20.0))
    c = PushConsumer(group, ns, config=cfg, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw)
    c.subscribe(topic, kw.pop("expression", "*"))
    c.register_message_listener(collector.listener(name))
    c.start()
    return c


EXPECTED = {
    # derived by hand in tests/test_rebalance.py (same client ids, topic "T" -> see below)
    "AVG": ({0, 1, 2}, {3, 4, 5}, {6, 7}),
    "AVG_BY_CIRCLE": ({0, 3, 6}, {1, 4, 7}, {2, 5}),
}


def _consistent_hash_expected(topic: str, broker: str) -> tuple[set, set, set]:
    """The consistent-hash result depends on the topic name in MessageQueue.toString(); the
    algorithm itself is hand-checked for topic "T" in test_rebalance.py."""
    strat = AllocateMessageQueueConsistentHash()
    mqs = [MessageQueue(topic, broker, i) for i in range(8)]
    cids = [f"127.0.0.1@c{i}" for i in range(3)]
    return tuple({mq.queueId for mq in strat.allocate("G", cid, mqs, cids)} for cid in cids)  # type: ignore[return-value]


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
def test_push_clustering_three_members_spread_eight_queues(ns, admin, producer, strategy):
    topic = new_topic(admin, f"Push{strategy.replace('_', '')}", 8)
    group = f"cg_{strategy}_{os.getpid()}"
    strat = {"AVG": AllocateMessageQueueAveragely, "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
             "CONSISTENT_HASH": AllocateMessageQueueConsistentHash}[strategy]
    expected = EXPECTED[strategy] if strategy in EXPECTED else _consistent_hash_expected(topic, "broker-a")
    col = Collector()
    consumers = []
    try:
        for i in range(3):
            consumers.append(start_push(ns, group, topic, f"c{i}", col, allocate_message_queue_strategy=strat()))
        wait_until(lambda: tuple({mq.queueId for mq in c.assigned_message_queues(topic)} for c in consumers) == expected,
                   what=f"{strategy} allocation {expected}")
        assert [c.client_id for c in consumers] == [f"127.0.0.1@c{i}" for i in range(3)]
        n = 48
        for i in range(n):
            producer.send(Message(topic, f"p{i}".encode()))
        wait_until(lambda: col.count() >= n, what="all messages consumed")
        time.sleep(0.2)
        with col.lock:
            items = list(col.items)
        assert sorted(b for *_, b in items) == sorted(f"p{i}".encode() for i in range(n))   # exactly once
        for name, qid, _, _ in items:                  # each message came from an owned queue
            assert qid in expected[int(name[1])]
        for c in consumers:
            c.persist_offsets()
    finally:
        for c in consumers:
            c.shutdown()
    rows, _ = admin.consumer_progress(group, topic)
    assert sum(r.broker_offset for r in rows) == n and all(r.diff == 0 for r in rows)


def test_push_machine_room_nearby(tmp_path_factory):
    c2 = Cluster(tmp_path_factory.mktemp("rmq-rooms"))
    consumers = []
    try:
        for name in ("hz-broker-a", "bj-broker-c"):
            c2.add_broker(name)
            c2.wait_registered(name)
        ns2 = c2.namesrv_addr
        with MQAdmin(ns2) as adm:
            topic = new_topic(adm, "Rooms", 4)
            adm.wait_for_route(topic, queues=8)
        resolver = FunctionMachineRoomResolver(lambda mq: mq.brokerName.split("-")[0],
                                               lambda cid: cid.split("@")[1].split("_")[0])
        col = Collector()
        for name in ("hz_c0", "hz_c1", "sh_c2"):
            consumers.append(start_push(ns2, "cg_rooms", topic, name, col, allocate_message_queue_strategy=
                                        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), resolver)))
        # hand-derived in test_rebalance.test_machine_room_nearby_two_brokers_room_without_consumers
        expected = ({("hz-broker-a", 0), ("hz-broker-a", 1), ("bj-broker-c", 0), ("bj-broker-c", 1)},
                    {("hz-broker-a", 2), ("hz-broker-a", 3), ("bj-broker-c", 2)},
                    {("bj-broker-c", 3)})
        wait_until(lambda: tuple({(mq.brokerName, mq.queueId) for mq in c.assigned_message_queues(topic)}
                                 for c in consumers) == expected, what="machine-room allocation")
    finally:
        for c in consumers:
            c.shutdown()
        c2.close()


@pytest.mark.parametrize("fault_tolerance", [False, True])
def test_sync_send_retries_on_another_broker_when_one_dies(tmp_path_factory, fault_tolerance):
    c2 = Cluster(tmp_path_factory.mktemp("rmq-failover"))
    p = None
    try:
        for name in ("broker-1", "broker-2"):
            c2.add_broker(name)
            c2.wait_registered(name)
        with MQAdmin(c2.namesrv_addr) as adm:
            topic = new_topic(adm, "Failover", 2)
            adm.wait_for_route(topic, queues=4)
        p = Producer("pg_failover", c2.namesrv_addr, send_latency_fault_enable=fault_tolerance)
        p.start()
        assert {p.send(Message(topic, b"warm")).message_queue.brokerName for _ in range(4)} == {"broker-1", "broker-2"}
        time.sleep(0.2)      # let the producer's first route poll (10 ms after start) pass; the next is in 30 s
        ctrl, srv, _ = c2.brokers.pop()                 # broker-2 goes away; the cached route still lists it
        c2.lt.run(srv.close_async())
        ctrl.shutdown()
        results = [p.send(Message(topic, f"after{i}".encode())) for i in range(12)]
        assert all(r.send_status is SendStatus.SEND_OK for r in results)
        assert {r.message_queue.brokerName for r in results} == {"broker-1"}
        if fault_tolerance:    # a failed send isolates broker-2: it is not even tried for a while
            assert not p.impl.fault_strategy.tolerance.is_available("broker-2")
    finally:
        if p is not None:
            p.shutdown()
        c2.close()


def test_consumer_join_triggers_rebalance_via_notify(ns, admin, producer):
    topic = new_topic(admin, "JoinNotify", 8)
    group = f"cg_join_{os.getpid()}"
    col = Collector()
    # rebalance_interval 600 s: only NOTIFY_CONSUMER_IDS_CHANGED can move queues in time
    c0 = start_push(ns, group, topic, "c0", col, rebalance_interval=600.0)
    c1 = None
    try:
        wait_until(lambda: len(c0.assigned_message_queues(topic)) == 8, what="c0 owns all 8 queues")
        before = c0.impl.rebalance_count
        c1 = start_push(ns, group, topic, "c1", col, rebalance_interval=600.0)
        wait_until(lambda: ({mq.queueId for mq in c0.assigned_message_queues(topic)},
                            {mq.queueId for mq in c1.assigned_message_queues(topic)}) == ({0, 1, 2, 3}, {4, 5, 6, 7}),
                   timeout=10, what="rebalance after c1 joined")
        assert c0.impl.rebalance_count > before
        c1.shutdown()
        c1 = None
        wait_until(lambda: len(c0.assigned_message_queues(topic)) == 8, timeout=10, what="c0 takes back all queues")
    finally:
        if c1 is not None:
            c1.shutdown()
        c0.shutdown()


def test_broadcasting_every_member_gets_every_message(ns, admin, producer, tmp_path):
    topic = new_topic(admin, "Broadcast", 4)
    col = Collector()
    consumers = [start_push(ns, "cg_bcast", topic, f"b{i}", col, message_model=MessageModel.BROADCASTING,
                            offset_store_dir=str(tmp_path)) for i in range(2)]
    try:
        wait_until(lambda: all(len(c.assigned_message_queues(topic)) == 4 for c in consumers),
                   what="each member pulls every queue")
        n = 20
        for i in range(n):
            producer.send(Message(topic, f"b{i}".encode()))
        wait_until(lambda: col.count() >= 2 * n, what="both members got everything")
    finally:
        for c in consumers:
            c.shutdown()
    with col.lock:
        for name in ("b0", "b1"):
            assert sorted(b for who, _, _, b in col.items if who == name) == sorted(f"b{i}".encode() for i in range(n))
    for name in ("b0", "b1"):
        doc = json.loads((tmp_path / f"127.0.0.1@{name}" / "cg_bcast" / "offsets.json").read_text())
        assert sum(e["offset"] for e in doc["offsetTable"] if e["topic"] == topic) == n


def test_reconsume_later_is_sent_back_and_redelivered_from_the_retry_topic(ns, admin, producer):
    """RECONSUME_LATER -> CONSUMER_SEND_MSG_BACK; the broker re-stores the message to
    %RETRY%group after delay level 3 (1 s on this test broker) and the consumer, subscribed to
    its retry topic automatically, gets it again with the original topic and reconsumeTimes 1."""
    topic = new_topic(admin, "Reconsume", 1)
    group = f"cg_later_{os.getpid()}"
    seen = []
    lock = threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend((m.topic, m.reconsume_times, m.body, m.properties.get("RETRY_TOPIC")) for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if msgs[0].reconsume_times == 0 else ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, ns, config=ClientConfig(client_ip="127.0.0.1", instance_name="later"),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    try:
        for i in range(3):
            producer.send(Message(topic, f"r{i}".encode()))
        mq = MessageQueue(topic, "broker-a", 0)
        wait_until(lambda: c.committed_offsets().get(mq) == 3, what="offset 3 committed (failures sent back)")
        wait_until(lambda: len(seen) >= 6, timeout=20, what="3 deliveries + 3 redeliveries")
        assert f"%RETRY%{group}" in {mq.topic for mq in c.assigned_message_queues()}
    finally:
        c.shutdown()
    with lock:
        first = sorted(x for x in seen if x[1] == 0)
        again = sorted(x for x in seen if x[1] == 1)
    assert first == [(topic, 0, f"r{i}".encode(), None) for i in range(3)]
    assert again == [(topic, 1, f"r{i}".encode(), topic) for i in range(3)]


# =============================================================================== C++ client interop
def _cpp():
    try:
        from rocketmq import client as cpp
        return cpp
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"C++ client unavailable: {exc}")


def test_cpp_producer_python_consumers(ns, admin, pull_consumer):
    cpp = _cpp()
    topic = new_topic(admin, "CppToPy", 4)
    p = cpp.Producer("cpp_pg_interop")
    p.set_namesrv_addr(ns)
    p.start()
    sent = []
    try:
        for i in range(10):
            m = cpp.Message(topic)
            m.set_tags("CppTag" if i % 2 else "Other")
            m.set_keys(f"ck{i}")
            m.set_property("color", "blue")
            m.set_body(f"from-cpp-{i}".encode())
            r = p.send_sync(m)
            sent.append(r.msg_id)
    finally:
        p.shutdown()
    msgs = pull_all(pull_consumer, topic)
    assert sorted(m.body for m in msgs) == sorted(f"from-cpp-{i}".encode() for i in range(10))
    m0 = next(m for m in msgs if m.body == b"from-cpp-0")
    assert m0.tags == "Other" and m0.keys == "ck0" and m0.properties["color"] == "blue"
    assert {m.msg_id for m in msgs} == set(sent)        # the C++ UNIQ_KEY is the msgId we read
    tagged = pull_all(pull_consumer, topic, "CppTag")
    assert sorted(m.body for m in tagged) == sorted(f"from-cpp-{i}".encode() for i in range(1, 10, 2))
    # and a Python push consumer
    col = Collector()
    c = start_push(ns, "py_cg_from_cpp", topic, "pyc", col)
    try:
        wait_until(lambda: col.count() >= 10, what="python push consumer got the C++ messages")
    finally:
        c.shutdown()


def test_python_producer_cpp_push_consumer(ns, admin, producer):
    cpp = _cpp()
    topic = new_topic(admin, "PyToCpp", 4)
    n = 12
    big = b"z" * 6000                       # compressed by the Python producer; C++ must inflate
    for i in range(n - 3):
        producer.send(Message(topic, f"from-py-{i}".encode(), tags="PyTag", keys=f"pk{i}",
                              properties={"color": "green"}))
    producer.send_batch([Message(topic, f"batch-{i}".encode(), tags="PyTag") for i in range(2)])
    producer.send(Message(topic, big, tags="PyTag"))
    got = []
    lock = threading.Lock()
    done = threading.Event()

    def on(msg):
        with lock:
            got.append((msg.body, msg.tags, msg.keys, msg.get_property("color"), msg.id))
            if len(got) >= n:
                done.set()
    c = cpp.PushConsumer("cpp_cg_interop")
    c.set_namesrv_addr(ns)
    c.set_instance_name(f"cpp_interop_{os.getpid()}")
    c.subscribe(topic, on, "PyTag")
    c.start()
    try:
        assert done.wait(30), f"C++ consumer got {len(got)} of {n}"
    finally:
        c.shutdown()
    bodies = sorted(g[0] for g in got)
    assert bodies == sorted([f"from-py-{i}".encode() for i in range(n - 3)] + [b"batch-0", b"batch-1", big])
    first = next(g for g in got if g[0] == b"from-py-0")
    assert first[1] == b"PyTag" and first[2] == b"pk0" and first[3] == b"green" and len(first[4]) == 32


def test_asyncio_native_api_in_the_callers_loop(ns, admin):
    """AsyncProducer / AsyncPullConsumer run in the caller's event loop (no background thread)."""
    from rmq.client import AsyncProducer, AsyncPullConsumer
    topic = new_topic(admin, "AsyncNative", 2)

    async def main():
        got = []
        async with AsyncProducer("apg_native", ns) as p:
            first = await p.send_async(Message(topic, b"cb"), lambda r, e: got.append((r, e)))
            results = await asyncio.gather(*(p.send(Message(topic, f"g{i}".encode())) for i in range(30)))
        assert got == [(first, None)] and all(r.send_status is SendStatus.SEND_OK for r in results)
        async with AsyncPullConsumer("acg_native", ns) as pc:
            bodies = []
            for mq in await pc.fetch_subscribe_message_queues(topic):
                bodies += [m.body for m in (await pc.pull(mq, "*", 0, 64)).msg_found_list]
        return bodies
    bodies = asyncio.run(main())
    assert sorted(bodies) == sorted([b"cb"] + [f"g{i}".encode() for i in range(30)])


def test_connection_sends_the_frames_of_one_loop_pass_together_in_order():
    """_Connection.write queues small frames and sends the ones written during one pass of the
    event loop together (a burst in pieces of WRITE_COALESCE_BYTES), in the order written; a
    large body flushes what was queued first; abort() sends what was written before it."""
    import rmq.client.remoting as remoting_mod
    from rmq.remoting import RemotingCommand
    from rmq.remoting.frame import FrameDecoder

    async def main():
        got = bytearray()
        eof = asyncio.Event()

        async def serve(reader, writer):
            while True:
                chunk = await reader.read(1 << 20)
                if not chunk:
                    break
                got.extend(chunk)
            eof.set()
            writer.close()
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            loop = asyncio.get_running_loop()

            class Owner:                                  # what _Connection calls back
                def _forget(self, conn):
                    pass

                def _dispatch_request(self, conn, cmd):
                    pass
            conn = remoting_mod._Connection(client=Owner(), addr=f"127.0.0.1:{port}")
            await loop.create_connection(lambda: conn, "127.0.0.1", port)
            flushes: list[int] = []                       # bytes of each send of queued frames
            flush = conn._flush

            def counting_flush():
                if conn._wbuf:
                    flushes.append(sum(map(len, conn._wbuf)))
                flush()
            conn._flush = counting_flush
            for i in range(5):
                conn.write(RemotingCommand.request(10 + i, {"i": str(i)}))
            assert not flushes                            # nothing left yet: queued for this pass
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert len(flushes) == 1                      # the five frames in one send
            for i in range(100):                          # a burst leaves in WRITE_COALESCE_BYTES pieces
                conn.write(RemotingCommand.request(100 + i, {"i": "b"}, body=b"b" * 1000))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            burst = flushes[1:]
            assert 100 * 1000 // remoting_mod.WRITE_COALESCE_BYTES <= len(burst) < 100
            assert all(n >= remoting_mod.WRITE_COALESCE_BYTES for n in burst[:-1])
            conn.write(RemotingCommand.request(20, {"i": "5"}))
            conn.write(RemotingCommand.request(21, {"i": "6"}, body=b"B" * 70000))   # large: flushes first
            conn.write(RemotingCommand.request(22, {"i": "7"}))
            conn.abort()                                  # the last small frame still leaves
            await asyncio.wait_for(eof.wait(), 10)
        finally:
            server.close()
            await server.wait_closed()
        frames = [RemotingCommand.decode(p) for p in FrameDecoder().feed(bytes(got))]
        assert [f.code for f in frames] == [10, 11, 12, 13, 14] + list(range(100, 200)) + [20, 21, 22]
        frames = frames[:5] + frames[105:]
        assert [f.ext_fields["i"] for f in frames] == [str(i) for i in range(8)] and len(frames[6].body) == 70000
    asyncio.run(main())
