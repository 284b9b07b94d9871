"""The asyncio remoting server (framing, dispatch, errors, server-initiated requests) and the broker's
remoting processors (send, pull with long polling, offsets, client management, admin) on 127.0.0.1."""
from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from rmq.common.message import decode_message, decode_message_id
from rmq.remoting import (
    GetMaxOffsetRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicRouteData,
    fastjson,
)
from rmq.server.remoting_server import RemotingClient, RemotingServer
from tests.remoting_harness import Cluster, LoopThread, SyncClient, encode_batch, send_message

pytestmark = pytest.mark.timeout(120)


# ====================================================================== the generic server
@pytest.fixture(scope="module")
def echo_server():
    lt = LoopThread()
    srv = RemotingServer("test")

    def echo(conn, req):
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, "echo", {"n": str(len(req.body))}, req.body)

    async def slow(conn, req):
        await asyncio.sleep(0.2)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, "slow")

    def boom(conn, req):
        raise RuntimeError("processor exploded")

    def needs_header(conn, req):
        h = GetMaxOffsetRequestHeader.from_command(req)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, h.topic)

    async def call_back(conn, req):
        # Server-initiated request to the same client, matched by its opaque.
        resp = await conn.invoke(conn.new_request(2000, {"q": "ping"}, b"ping"), timeout=5)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, "called back", body=resp.body)

    srv.register_many({1000: echo, 1001: slow, 1002: boom, 1003: needs_header, 1004: call_back})
    addr = lt.run(srv.start("127.0.0.1", 0))
    yield lt, srv, addr
    lt.run(srv.close_async())
    lt.stop()


def test_request_response_keeps_opaque_and_serialize_type(echo_server):
    _, _, addr = echo_server
    c = SyncClient(addr)
    try:
        r = c.request(1000, {"a": "1"}, b"hello")
        assert r.code == ResponseCode.SUCCESS and r.is_response and r.body == b"hello" and r.ext_fields["n"] == "5"
        assert r.serialize_type == SerializeType.JSON
        r = c.request(1000, {}, b"xy", serialize_type=SerializeType.ROCKETMQ)
        assert r.serialize_type == SerializeType.ROCKETMQ and r.body == b"xy" and r.remark == "echo"
    finally:
        c.close()


def test_oneway_gets_no_response_and_async_processors_overlap(echo_server):
    _, _, addr = echo_server
    c = SyncClient(addr)
    try:
        c.send(RemotingCommand.request(1000, {}, b"one", oneway=True))
        slow = RemotingCommand.request(1001)
        c.send(slow)
        r = c.request(1000, {}, b"two")  # answered while the slow one is still sleeping
        assert r.body == b"two"
        r2 = c.read(5)
        assert r2.opaque == slow.opaque and r2.remark == "slow"
        c.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            c.sock.recv(1)  # nothing else: the oneway request got no response
    finally:
        c.close()


def test_unknown_code_missing_field_and_processor_error(echo_server):
    _, _, addr = echo_server
    c = SyncClient(addr)
    try:
        r = c.request(4242)
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in r.remark and "not supported" in r.remark
        r = c.request(1003, {"topic": "T"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
        r = c.request(1003, {"topic": "T", "queueId": "x"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
        r = c.request(1002)
        assert r.code == ResponseCode.SYSTEM_ERROR and "exploded" in r.remark
        assert c.request(1003, {"topic": "T", "queueId": "1"}).remark == "T"  # the connection still works
    finally:
        c.close()


def test_server_initiated_request_is_matched_by_opaque(echo_server):
    _, _, addr = echo_server
    c = SyncClient(addr)
    try:
        req = RemotingCommand.request(1004)
        c.send(req)
        incoming = c.read(5)
        assert not incoming.is_response and incoming.code == 2000 and incoming.body == b"ping"
        c.send(RemotingCommand.response_to(incoming, ResponseCode.SUCCESS, body=b"pong"))
        r = c.read(5)
        assert r.opaque == req.opaque and r.body == b"pong"
    finally:
        c.close()


@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff" + b"x" * 20,                       # negative length
    struct.pack(">i", 0x7FFFFFF0) + b"xxxx",              # longer than the frame limit
    struct.pack(">i", 2) + b"ab",                          # shorter than the header-length word
    struct.pack(">ii", 9, 5) + b"{bad}",                  # whole frame, header is not JSON
    struct.pack(">ii", 8, 0x09000000 | 4) + b"abcd",      # unknown serialize type
])
def test_garbage_closes_only_that_connection(echo_server, garbage):
    _, srv, addr = echo_server
    good = SyncClient(addr)
    bad = SyncClient(addr)
    try:
        assert good.request(1000, {}, b"before").body == b"before"
        bad.sock.sendall(garbage)
        bad.sock.settimeout(5)
        with pytest.raises((ConnectionError, OSError)):
            while True:
                if not bad.sock.recv(100):
                    raise ConnectionError("closed")
        assert good.request(1000, {}, b"after").body == b"after"
        again = SyncClient(addr)
        assert again.request(1000, {}, b"new").body == b"new"
        again.close()
    finally:
        good.close()
        bad.close()


def test_remoting_client_invokes_and_serves_requests_from_the_server(echo_server):
    lt, srv, addr = echo_server

    async def scenario():
        client = RemotingClient("t")
        client.register(2000, lambda conn, req: RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=b"from-client"))
        try:
            r1 = await client.invoke(addr, RemotingCommand.request(1000, body=b"z"))
            r2 = await client.invoke(addr, RemotingCommand.request(1004))
            ok = await client.invoke_oneway(addr, RemotingCommand.request(1000, body=b"o"))
            return r1.body, r2.body, ok
        finally:
            await client.close_async()

    assert lt.run(scenario()) == (b"z", b"from-client", True)


# ====================================================================== the broker listener
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    c.add_broker("broker-a")
    c.add_broker("broker-s", enablePropertyFilter=True, flushDiskType="SYNC_FLUSH", autoCreateTopicEnable=False)
    c.wait_registered("broker-a")
    c.wait_registered("broker-s")
    yield c
    c.close()


@pytest.fixture
def broker(cluster):
    ctrl, srv, addr = cluster.brokers[0]
    c = SyncClient(addr)
    yield ctrl, srv, c
    c.close()


@pytest.fixture
def sbroker(cluster):
    ctrl, srv, addr = cluster.brokers[1]
    c = SyncClient(addr)
    yield ctrl, srv, c
    c.close()


def pull(c, topic, qid, offset, *, group="G", sub="*", expr_type=None, suspend_ms=0, sys_flag=None, commit=0,
         timeout=20.0, max_nums=32):
    flag = sys_flag if sys_flag is not None else (0x4 | (0x2 if suspend_ms else 0))
    ext = dict(consumerGroup=group, topic=topic, queueId=qid, queueOffset=offset, maxMsgNums=max_nums, sysFlag=flag,
               commitOffset=commit, suspendTimeoutMillis=suspend_ms, subscription=sub, subVersion=0)
    if expr_type:
        ext["expressionType"] = expr_type
    return c.request(RequestCode.PULL_MESSAGE, ext, timeout=timeout)


def units(body: bytes):
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        out.append(m)
        pos += m.store_size
    return out


def create_topic(c, topic, *, queues=4, perm=6):
    r = c.request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(topic=topic, defaultTopic="TBW102", readQueueNums=queues,
                                                             writeQueueNums=queues, perm=perm,
                                                             topicFilterType="SINGLE_TAG"))
    assert r.code == ResponseCode.SUCCESS, r


def test_send_v1_v2_and_batch_are_stored_as_sent(broker):
    ctrl, srv, c = broker
    r1 = send_message(c, "SendT", b"v1-body", tags="TagA", keys="k1 k2", code=RequestCode.SEND_MESSAGE,
                      props={"UNIQ_KEY": "U1", "color": "red"})
    r2 = send_message(c, "SendT", b"v2-body", tags="TagB", code=RequestCode.SEND_MESSAGE_V2, sys_flag=0)
    assert r1.code == r2.code == ResponseCode.SUCCESS
    assert (r1.ext_fields["queueId"], r1.ext_fields["queueOffset"]) == ("0", "0")
    assert r2.ext_fields["queueOffset"] == "1"
    host, off = decode_message_id(r1.ext_fields["msgId"])
    assert host == ("127.0.0.1", srv.remoting.port)
    m = ctrl.store.look_message_by_offset(off)
    assert (m.topic, m.body, m.tags, m.keys, m.properties["color"], m.properties["UNIQ_KEY"]) == \
        ("SendT", b"v1-body", "TagA", "k1 k2", "red", "U1")
    batch = encode_batch([(b"b%d" % i, {"TAGS": "TagC", "KEYS": f"bk{i}", "UNIQ_KEY": f"BU{i}"}) for i in range(3)])
    r3 = send_message(c, "SendT", batch, code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
    assert r3.code == ResponseCode.SUCCESS and r3.ext_fields["queueOffset"] == "2"
    ids = r3.ext_fields["msgId"].split(",")
    assert len(ids) == 3
    res = ctrl.store.get_message("G", "SendT", 0, 0, 32)
    got = [(x.body, x.tags, x.keys) for x in res.decoded()]
    assert got == [(b"v1-body", "TagA", "k1 k2"), (b"v2-body", "TagB", None),
                   (b"b0", "TagC", "bk0"), (b"b1", "TagC", "bk1"), (b"b2", "TagC", "bk2")]
    assert [decode_message_id(i)[1] for i in ids] == [x.commit_log_offset for x in res.decoded()[2:]]
    # born host is the producer's address; compressed flag bit is kept
    r4 = send_message(c, "SendT", b"x\x9c", code=RequestCode.SEND_MESSAGE, sys_flag=1)
    m4 = ctrl.store.look_message_by_offset(decode_message_id(r4.ext_fields["msgId"])[1])
    assert m4.sys_flag & 1 and m4.born_host[0] == "127.0.0.1" and m4.born_host[1] == c.sock.getsockname()[1]


def test_auto_create_registers_route_with_namesrv(cluster, broker):
    ctrl, srv, c = broker
    assert send_message(c, "AutoT", b"x", queue_id=3).code == ResponseCode.SUCCESS
    tc = ctrl.topic_config_manager.get("AutoT")
    assert (tc.readQueueNums, tc.writeQueueNums, tc.perm) == (4, 4, 6)
    ns = SyncClient(cluster.namesrv_addr)
    try:
        deadline = time.monotonic() + 5
        while True:
            r = ns.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AutoT"})
            if r.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        route = TopicRouteData.decode(r.body)
        assert [(q.brokerName, q.writeQueueNums) for q in route.queueDatas] == [("broker-a", 4)]
        assert route.brokerDatas[0].brokerAddrs == {0: srv.broker_addr}
    finally:
        ns.close()


def test_send_refusals(broker, sbroker):
    ctrl, srv, c = broker
    big = b"x" * (ctrl.cfg.store.maxMessageSize + 1)
    r = send_message(c, "BigT", big)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
    create_topic(c, "ReadOnlyT", perm=4)
    r = send_message(c, "ReadOnlyT", b"x")
    assert r.code == ResponseCode.NO_PERMISSION and "ReadOnlyT" in r.remark
    r = send_message(c, "TBW102", b"x")
    assert r.code == ResponseCode.SYSTEM_ERROR and "reserved" in r.remark
    r = send_message(c, "SCHEDULE_TOPIC_XXXX", b"x")
    assert r.code == ResponseCode.NO_PERMISSION
    r = send_message(c, "Bad Topic!", b"x")
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal" in r.remark
    r = send_message(c, "SendT", b"x", queue_id=99)
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[99]" in r.remark
    r = c.request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "SendT"}, b"x")
    assert r.code == ResponseCode.SYSTEM_ERROR and "c (defaultTopic)" in r.remark
    r = send_message(c, "SendT", b"\x00\x00\x00\x10garbage", code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    before = ctrl.store.commitlog.max_offset
    for props, why in (({"DELAY": "2"}, "TimeDelayLevel"), ({"TRAN_MSG": "true"}, "transaction")):
        delayed = encode_batch([(b"ok", {}), (b"no", props)])
        r = send_message(c, "SendT", delayed, code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and why in r.remark, r.remark
    assert ctrl.store.commitlog.max_offset == before  # nothing of a refused batch is stored
    _, _, sc = sbroker
    r = send_message(sc, "NoAutoT", b"x")  # autoCreateTopicEnable=false on this broker
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoAutoT" in r.remark


def test_sync_flush_put(sbroker):
    ctrl, srv, c = sbroker
    create_topic(c, "SyncT")
    r = send_message(c, "SyncT", b"durable", tags="A")
    assert r.code == ResponseCode.SUCCESS
    assert ctrl.store.commitlog.queue.flushed_offset >= decode_message_id(r.ext_fields["msgId"])[1]
    rb = send_message(c, "SyncT", encode_batch([(b"d%d" % i, {"TAGS": "B"}) for i in range(4)]),
                      code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
    assert rb.code == ResponseCode.SUCCESS and rb.ext_fields["queueOffset"] == "1"
    last = decode_message_id(rb.ext_fields["msgId"].split(",")[-1])[1]
    assert ctrl.store.commitlog.queue.flushed_offset > last


def test_retry_topic_past_max_reconsume_goes_to_dlq(broker):
    ctrl, srv, c = broker
    props = "".join(f"{k}\x01{v}\x02" for k, v in {"TAGS": "t", "RETRY_TOPIC": "SendT"}.items())
    ext = dict(producerGroup="PG", topic="%RETRY%GDLQ", defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=0,
               sysFlag=0, bornTimestamp=1, flag=0, properties=props, reconsumeTimes=16, maxReconsumeTimes=16)
    r = c.request(RequestCode.SEND_MESSAGE, ext, b"dead")
    assert r.code == ResponseCode.SUCCESS
    m = ctrl.store.look_message_by_offset(decode_message_id(r.ext_fields["msgId"])[1])
    assert m.topic == "%DLQ%GDLQ" and m.body == b"dead"
    assert ctrl.topic_config_manager.get("%DLQ%GDLQ").perm == 2


def test_pull_found_filtered_and_offset_moved(broker):
    ctrl, srv, c = broker
    create_topic(c, "PullT", queues=1)
    for i, tag in enumerate(["A", "B", "A", "C"]):
        send_message(c, "PullT", b"p%d" % i, tags=tag)
    r = pull(c, "PullT", 0, 0)
    assert r.code == ResponseCode.SUCCESS and r.remark == "FOUND"
    assert [m.body for m in units(r.body)] == [b"p0", b"p1", b"p2", b"p3"]
    assert (r.ext_fields["nextBeginOffset"], r.ext_fields["minOffset"], r.ext_fields["maxOffset"],
            r.ext_fields["suggestWhichBrokerId"]) == ("4", "0", "4", "0")
    r = pull(c, "PullT", 0, 0, sub="A || C")
    assert [m.tags for m in units(r.body)] == ["A", "A", "C"]
    r = pull(c, "PullT", 0, 1, sub="Z")
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "4"
    r = pull(c, "PullT", 0, 4)
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "4"
    r = pull(c, "PullT", 0, 100)  # overflow badly with minOffset 0: RocketMQ corrects to 0
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"
    r = pull(c, "PullT", 5, 0)
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[5]" in r.remark
    r = pull(c, "NoSuchTopicT", 0, 0)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = pull(c, "PullT", 0, 0, sub="a > ", expr_type="SQL92")
    assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in r.remark  # enablePropertyFilter=false here
    create_topic(c, "WriteOnlyT", perm=2)
    assert pull(c, "WriteOnlyT", 0, 0).code == ResponseCode.NO_PERMISSION


def test_pull_sql92_when_enabled(sbroker):
    ctrl, srv, c = sbroker
    create_topic(c, "SqlT", queues=1)
    for i in range(5):
        send_message(c, "SqlT", b"s%d" % i, tags="T", props={"n": str(i)})
    r = pull(c, "SqlT", 0, 0, sub="n >= 3 AND TAGS = 'T'", expr_type="SQL92")
    assert r.code == ResponseCode.SUCCESS and [m.body for m in units(r.body)] == [b"s3", b"s4"]
    r = pull(c, "SqlT", 0, 0, sub="n >>> 3", expr_type="SQL92")
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_long_polling_wakes_on_arrival_and_times_out(cluster, broker):
    ctrl, srv, c = broker
    create_topic(c, "LpT", queues=1)
    waiter = SyncClient(cluster.brokers[0][2])
    try:
        t0 = time.monotonic()
        r = pull(waiter, "LpT", 0, 0, suspend_ms=800)
        assert r.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 >= 0.7
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(
            consumerGroup="G", topic="LpT", queueId="0", queueOffset="0", maxMsgNums="32", sysFlag=str(0x2 | 0x4),
            commitOffset="0", suspendTimeoutMillis="15000", subscription="*", subVersion="0"))
        t0 = time.monotonic()
        waiter.send(req)
        time.sleep(0.3)
        send_message(c, "LpT", b"wake", tags="x")
        r = waiter.read(10)
        assert r.opaque == req.opaque and r.code == ResponseCode.SUCCESS
        assert time.monotonic() - t0 < 5  # woken by the arrival, not the 15 s hold
        assert [m.body for m in units(r.body)] == [b"wake"]
        # a non-matching arrival keeps the pull held; a matching one answers it
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(
            consumerGroup="G", topic="LpT", queueId="0", queueOffset="1", maxMsgNums="32", sysFlag=str(0x2 | 0x4),
            commitOffset="0", suspendTimeoutMillis="15000", subscription="Want", subVersion="0"))
        waiter.send(req)
        time.sleep(0.2)
        send_message(c, "LpT", b"other", tags="Other")
        time.sleep(0.4)
        send_message(c, "LpT", b"wanted", tags="Want")
        r = waiter.read(10)
        assert r.code == ResponseCode.SUCCESS and [m.body for m in units(r.body)] == [b"wanted"]
    finally:
        waiter.close()


def test_offsets(broker):
    ctrl, srv, c = broker
    create_topic(c, "OffT", queues=1)
    t_before = int(time.time() * 1000)
    for i in range(3):
        send_message(c, "OffT", b"o%d" % i)
        time.sleep(0.01)
    q = dict(consumerGroup="NewG", topic="OffT", queueId=0)
    r = c.request(RequestCode.QUERY_CONSUMER_OFFSET, q)
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "0"  # RocketMQ: new group, queue from 0
    r = c.request(RequestCode.QUERY_CONSUMER_OFFSET, dict(q, topic="NeverT"))
    assert r.ext_fields["offset"] == "0"
    c.request(RequestCode.UPDATE_CONSUMER_OFFSET, dict(q, commitOffset=2))
    assert c.request(RequestCode.QUERY_CONSUMER_OFFSET, q).ext_fields["offset"] == "2"
    # the pull's commit-offset flag commits too
    pull(c, "OffT", 0, 2, group="NewG", sys_flag=0x1 | 0x4, commit=3)
    assert c.request(RequestCode.QUERY_CONSUMER_OFFSET, q).ext_fields["offset"] == "3"
    assert ctrl.offset_manager.query_offset("NewG", "OffT", 0) == 3
    assert c.request(RequestCode.GET_MAX_OFFSET, dict(topic="OffT", queueId=0)).ext_fields["offset"] == "3"
    assert c.request(RequestCode.GET_MIN_OFFSET, dict(topic="OffT", queueId=0)).ext_fields["offset"] == "0"
    r = c.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, dict(topic="OffT", queueId=0, timestamp=t_before - 10_000))
    assert r.ext_fields["offset"] == "0"
    r = c.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, dict(topic="OffT", queueId=0, timestamp=t_before + 10**7))
    assert r.ext_fields["offset"] == "2"
    r = c.request(RequestCode.GET_EARLIEST_MSG_STORETIME, dict(topic="OffT", queueId=0))
    assert t_before - 1000 <= int(r.ext_fields["timestamp"]) <= t_before + 5000
    r = c.request(RequestCode.GET_MAX_OFFSET, dict(topic="OffT"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark


def heartbeat(c, client_id, group, topic="HbT", sub="*", model="CLUSTERING"):
    body = {"clientID": client_id, "producerDataSet": [{"groupName": "PG"}],
            "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
                                 "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                                 "subscriptionDataSet": [{"topic": topic, "subString": sub, "tagsSet": [],
                                                          "codeSet": [], "subVersion": 1, "classFilterMode": False}]}]}
    return c.request(RequestCode.HEART_BEAT, {}, fastjson.dumpb(body))


def _notifications(c, timeout=0.5):
    """NOTIFY_CONSUMER_IDS_CHANGED requests that reached client c (read until quiet)."""
    out = []
    while True:
        try:
            cmd = c.read(timeout)
        except (socket.timeout, TimeoutError):
            return out
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and not cmd.is_response:
            assert cmd.is_oneway
            out.append(cmd.ext_fields["consumerGroup"])


def test_heartbeat_consumer_list_notify_and_unregister(cluster, broker):
    ctrl, srv, c = broker
    addr = cluster.brokers[0][2]
    create_topic(c, "HbT", queues=2)
    a, b = SyncClient(addr), SyncClient(addr)

    def members():
        r = a.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "HbG"})
        return sorted(fastjson.loads(r.body)["consumerIdList"]) if r.code == ResponseCode.SUCCESS else r.remark

    try:
        assert heartbeat(a, "client-a", "HbG").code == ResponseCode.SUCCESS
        assert ctrl.topic_config_manager.get("%RETRY%HbG") is not None
        assert members() == ["client-a"]
        assert _notifications(a) == ["HbG"]  # RocketMQ tells every member, the new one included
        assert heartbeat(a, "client-a", "HbG").code == ResponseCode.SUCCESS
        assert _notifications(a) == []  # a repeated heartbeat changes nothing
        assert heartbeat(b, "client-b", "HbG").code == ResponseCode.SUCCESS
        assert _notifications(a) == ["HbG"]
        assert members() == ["client-a", "client-b"]
        # the subscription from the heartbeat is used when the pull carries none
        send_message(c, "HbT", b"hb", tags="x")
        assert pull(a, "HbT", 0, 0, group="HbG", sys_flag=0).code == ResponseCode.SUCCESS
        assert pull(a, "HbT", 0, 0, group="NoSuchG", sys_flag=0).code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        b.close()  # closing a member's connection notifies the others
        assert _notifications(a, 2) == ["HbG"]
        assert members() == ["client-a"]
        r = a.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "client-a", "consumerGroup": "HbG",
                                                      "producerGroup": "PG"})
        assert r.code == ResponseCode.SUCCESS
        assert "no consumer" in members()
    finally:
        a.close()
        b.close()


def test_idle_client_channels_expire(cluster, broker):
    ctrl, srv, c = broker
    svc = srv.services
    a = SyncClient(cluster.brokers[0][2])
    try:
        heartbeat(a, "idle-client", "IdleG")
        assert svc.consumer_manager.get("IdleG") is not None
        expired = svc.consumer_manager.scan_not_active_channel(now=time.monotonic() + 121)
        assert expired and svc.consumer_manager.get("IdleG") is None
        expired = svc.producer_manager.scan_not_active_channel(now=time.monotonic() + 121)
        assert expired
    finally:
        a.close()


def test_lock_and_unlock_batch_mq(broker):
    ctrl, srv, c = broker
    mq = [{"brokerName": "broker-a", "queueId": 0, "topic": "LockT"}, {"brokerName": "broker-a", "queueId": 1, "topic": "LockT"}]
    body = lambda client, mqs: fastjson.dumpb({"consumerGroup": "LG", "clientId": client, "mqSet": mqs})  # noqa: E731
    r = c.request(RequestCode.LOCK_BATCH_MQ, {}, body("c1", mq))
    assert len(fastjson.loads(r.body)["lockOKMQSet"]) == 2
    r = c.request(RequestCode.LOCK_BATCH_MQ, {}, body("c2", mq))
    assert fastjson.loads(r.body)["lockOKMQSet"] == []
    c.request(RequestCode.UNLOCK_BATCH_MQ, {}, body("c1", mq[:1]))
    r = c.request(RequestCode.LOCK_BATCH_MQ, {}, body("c2", mq))
    assert [m["queueId"] for m in fastjson.loads(r.body)["lockOKMQSet"]] == [0]


def test_admin_requests(broker):
    from rmq.server.processors import parse_mq_table
    ctrl, srv, c = broker
    create_topic(c, "AdmT", queues=2)
    r = c.request(RequestCode.GET_ALL_TOPIC_CONFIG)
    table = fastjson.loads(r.body)["topicConfigTable"]
    assert table["AdmT"]["readQueueNums"] == 2 and "TBW102" in table
    r = send_message(c, "AdmT", b"find me", keys="order-42", queue_id=1)
    off = decode_message_id(r.ext_fields["msgId"])[1]
    q = c.request(RequestCode.QUERY_MESSAGE, dict(topic="AdmT", key="order-42", maxNum=32, beginTimestamp=0,
                                                  endTimestamp=2**62))
    assert q.code == ResponseCode.SUCCESS and [m.body for m in units(q.body)] == [b"find me"]
    assert int(q.ext_fields["indexLastUpdatePhyoffset"]) >= off
    q = c.request(RequestCode.QUERY_MESSAGE, dict(topic="AdmT", key="nope", maxNum=32, beginTimestamp=0,
                                                  endTimestamp=2**62))
    assert q.code == ResponseCode.QUERY_NOT_FOUND
    v = c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": off})
    assert units(v.body)[0].keys == "order-42"
    assert c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**12}).code == ResponseCode.SYSTEM_ERROR
    stats = parse_mq_table(c.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdmT"}).body)
    assert stats[("AdmT", "broker-a", 1)]["maxOffset"] == 1 and stats[("AdmT", "broker-a", 0)]["maxOffset"] == 0
    assert c.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NopeT"}).code == ResponseCode.TOPIC_NOT_EXIST
    c.request(RequestCode.UPDATE_CONSUMER_OFFSET, dict(consumerGroup="LagG", topic="AdmT", queueId=1, commitOffset=0))
    cs = c.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "LagG", "topic": "AdmT"})
    lag = parse_mq_table(cs.body)
    assert lag[("AdmT", "broker-a", 1)] == {"brokerOffset": 1, "consumerOffset": 0, "lastTimestamp": 0}
    info = fastjson.loads(c.request(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert info["brokerVersionDesc"] == "V4_9_4" and int(info["commitLogMaxOffset"]) > 0
    assert c.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdmT"}).code == ResponseCode.SUCCESS
    assert ctrl.topic_config_manager.get("AdmT") is None
    r = c.request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(topic="Bad Name", defaultTopic="TBW102", readQueueNums=1,
                                                             writeQueueNums=1, perm=6, topicFilterType="SINGLE_TAG"))
    assert r.code == ResponseCode.SYSTEM_ERROR


def test_broker_survives_garbage_while_serving(cluster, broker):
    ctrl, srv, c = broker
    bad = socket.create_connection(tuple(cluster.brokers[0][2].rsplit(":", 1)[0:1]) + (srv.remoting.port,))
    bad.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    bad.settimeout(5)
    assert bad.recv(10) == b""  # closed
    bad.close()
    assert send_message(c, "SendT", b"still here").code == ResponseCode.SUCCESS


def test_consumer_send_msg_back_to_retry_then_dlq(broker):
    ctrl, srv, c = broker
    r = send_message(c, "BackT", b"failed once", tags="t", keys="bk")
    off = decode_message_id(r.ext_fields["msgId"])[1]
    back = dict(offset=off, group="BackG", delayLevel=0, originMsgId=r.ext_fields["msgId"], originTopic="BackT",
                maxReconsumeTimes=2)
    assert c.request(RequestCode.CONSUMER_SEND_MSG_BACK, back).code == ResponseCode.SUCCESS
    # delay level 3 + reconsumeTimes: parked in SCHEDULE_TOPIC_XXXX queue 2 until due, then %RETRY%BackG
    parked = ctrl.store.get_message("x", "SCHEDULE_TOPIC_XXXX", 2, 0, 32).decoded()
    m = [p for p in parked if p.body == b"failed once"][-1]
    assert (m.tags, m.keys, m.reconsume_times) == ("t", "bk", 1)
    assert m.properties["REAL_TOPIC"] == "%RETRY%BackG" and m.properties["RETRY_TOPIC"] == "BackT"
    assert m.properties["ORIGIN_MESSAGE_ID"] == r.ext_fields["msgId"]
    assert ctrl.topic_config_manager.get("%RETRY%BackG") is not None
    assert c.request(RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=m.commit_log_offset,
                                                              maxReconsumeTimes=1)).code == ResponseCode.SUCCESS
    dlq = ctrl.store.get_message("x", "%DLQ%BackG", 0, 0, 32).decoded()
    assert [(d.body, d.reconsume_times, d.properties["ORIGIN_MESSAGE_ID"]) for d in dlq] == \
        [(b"failed once", 2, r.ext_fields["msgId"])]
    r = c.request(RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=10**12))
    assert r.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in r.remark


def test_transaction_half_message_commit_rollback_and_check_back(cluster, sbroker):
    from rmq.remoting import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
    ctrl, srv, c = sbroker
    create_topic(c, "TxnT", queues=1)
    producer = SyncClient(cluster.brokers[1][2])
    try:
        body = {"clientID": "txn-producer", "producerDataSet": [{"groupName": "TxnPG"}], "consumerDataSet": []}
        assert producer.request(RequestCode.HEART_BEAT, {}, fastjson.dumpb(body)).code == ResponseCode.SUCCESS

        def half(text, born=None):
            props = {"TRAN_MSG": "true", "PGROUP": "TxnPG", "UNIQ_KEY": f"U-{text}"}
            r = send_message(producer, "TxnT", text.encode(), tags="tx", props=props, group="TxnPG")
            assert r.code == ResponseCode.SUCCESS
            return r

        def end(r, state, from_check=False):
            ext = dict(producerGroup="TxnPG", tranStateTableOffset=r.ext_fields["queueOffset"],
                       commitLogOffset=decode_message_id(r.ext_fields["msgId"])[1], commitOrRollback=state,
                       fromTransactionCheck=str(from_check).lower(), msgId=r.ext_fields["msgId"])
            return producer.request(RequestCode.END_TRANSACTION, ext)

        r1, r2 = half("commit-me"), half("roll-me-back")
        assert ctrl.store.get_max_offset_in_queue("TxnT", 0) == 0  # half messages are invisible
        assert end(r1, TRANSACTION_COMMIT_TYPE).code == ResponseCode.SUCCESS
        assert end(r2, TRANSACTION_ROLLBACK_TYPE).code == ResponseCode.SUCCESS
        assert [m.body for m in ctrl.store.get_message("x", "TxnT", 0, 0, 32).decoded()] == [b"commit-me"]
        bad = end(r1, TRANSACTION_COMMIT_TYPE)
        assert bad.code in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)
        # no answer: the check-back asks the producer group over its connection
        r3 = half("ask-me")
        ctrl.broker_config.transactionTimeout = 0
        assert ctrl.transaction_service.check() == 1
        check = producer.read(5)
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
        unit = decode_message(check.body)
        assert (unit.topic, unit.queue_id, unit.body) == ("TxnT", 0, b"ask-me")
        assert check.ext_fields["msgId"] == "U-ask-me" and check.ext_fields["offsetMsgId"] == unit.msg_id
        ext = dict(producerGroup="TxnPG", tranStateTableOffset=check.ext_fields["tranStateTableOffset"],
                   commitLogOffset=check.ext_fields["commitLogOffset"], commitOrRollback=TRANSACTION_COMMIT_TYPE,
                   fromTransactionCheck="true", msgId=check.ext_fields["offsetMsgId"])
        assert producer.request(RequestCode.END_TRANSACTION, ext).code == ResponseCode.SUCCESS
        assert [m.body for m in ctrl.store.get_message("x", "TxnT", 0, 0, 32).decoded()] == [b"commit-me", b"ask-me"]
        assert r3.code == ResponseCode.SUCCESS
    finally:
        ctrl.broker_config.transactionTimeout = 6000
        producer.close()


def test_bad_bodies_and_headers_get_error_responses(broker):
    ctrl, srv, c = broker
    for code, body in ((RequestCode.HEART_BEAT, b""), (RequestCode.HEART_BEAT, b"{not json"),
                       (RequestCode.HEART_BEAT, b'{"producerDataSet": 5}'), (RequestCode.LOCK_BATCH_MQ, b"[]"),
                       (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, b'{"retryMaxTimes": 1}')):
        r = c.request(code, {}, body)
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark, (code, body, r)
    r = c.request(RequestCode.PULL_MESSAGE, dict(
        consumerGroup="G", topic="SendT", queueId="zero", queueOffset=0, maxMsgNums=1, sysFlag=0, commitOffset=0,
        suspendTimeoutMillis=0, subVersion=0))
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
    r = c.request(RequestCode.QUERY_CONSUMER_OFFSET, dict(topic="SendT", queueId=0))
    assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in r.remark
    assert send_message(c, "SendT", b"fine").code == ResponseCode.SUCCESS
