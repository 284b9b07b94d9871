"""The NameServer on 127.0.0.1: broker registration, topic routes exactly as RocketMQ writes them,
cluster info, KV config, broker expiry and connection loss, and the broker's registration loop."""
from __future__ import annotations

import struct
import time
import zlib

import pytest

from rmq.namesrv import start_namesrv_listener
from rmq.remoting import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    fastjson,
)
from tests.remoting_harness import LoopThread, SyncClient, make_controller

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ns(tmp_path):
    lt = LoopThread()
    srv, addr = lt.run(start_namesrv_listener("127.0.0.1", 0, scan_interval_s=0.1, broker_expiry_s=0.6,
                                              kv_config_path=str(tmp_path / "kvConfig.json")))
    yield lt, srv, addr
    lt.run(srv.close_async())
    lt.stop()


def register_body(topics: dict[str, tuple[int, int, int]], counter: int = 1) -> bytes:
    table = {t: TopicConfig(t, r, w, p) for t, (r, w, p) in topics.items()}
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1000, counter)), []).encode()


def register(c, name="broker-a", addr="10.0.0.1:10911", broker_id=0, topics=None, cluster="C1", body=None, **extra):
    body = register_body(topics or {"TopicA": (4, 4, 6)}) if body is None else body
    ext = dict(brokerName=name, brokerAddr=addr, clusterName=cluster, haServerAddr=addr.replace("10911", "10912"),
               brokerId=broker_id, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF)
    ext.update(extra)
    return c.request(RequestCode.REGISTER_BROKER, ext, body)


def route(c, topic):
    return c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def test_route_data_is_written_as_rocketmq_writes_it(ns):
    _, _, addr = ns
    c = SyncClient(addr)
    try:
        assert register(c).code == ResponseCode.SUCCESS
        r = route(c, "TopicA")
        assert r.code == ResponseCode.SUCCESS and r.remark is None
        assert r.body == (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
                          b'"cluster":"C1"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
                          b'"perm":6,"readQueueNums":4,"topicSynFlag":0,"writeQueueNums":4}]}')
        r = c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA", "acceptStandardJsonOnly": "true"})
        assert b'{"0":"10.0.0.1:10911"}' in r.body
        r = route(c, "Missing")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST == 17 and "Missing" in r.remark and not r.body
        r = c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
        assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in r.remark
        r = c.request(RequestCode.REGISTER_BROKER, {"brokerName": "x", "clusterName": "C1", "haServerAddr": "",
                                                    "brokerId": "0"}, b"")
        assert r.code == ResponseCode.SYSTEM_ERROR and "brokerAddr" in r.remark
    finally:
        c.close()


def test_two_brokers_cluster_info_topic_lists_and_slaves(ns):
    _, srv, addr = ns
    c = SyncClient(addr)
    try:
        register(c, "broker-a", "10.0.0.1:10911", topics={"Shared": (4, 4, 6), "OnlyA": (2, 2, 6)})
        register(c, "broker-b", "10.0.0.2:10911", topics={"Shared": (8, 8, 6)})
        r = register(c, "broker-a", "10.0.0.3:10911", broker_id=1, topics={"Shared": (4, 4, 6)})
        assert r.ext_fields["masterAddr"] == "10.0.0.1:10911" and r.ext_fields["haServerAddr"] == "10.0.0.1:10912"
        rd = TopicRouteData.decode(route(c, "Shared").body)
        assert sorted((q.brokerName, q.writeQueueNums) for q in rd.queueDatas) == [("broker-a", 4), ("broker-b", 8)]
        addrs = {b.brokerName: b.brokerAddrs for b in rd.brokerDatas}
        assert addrs == {"broker-a": {0: "10.0.0.1:10911", 1: "10.0.0.3:10911"}, "broker-b": {0: "10.0.0.2:10911"}}
        ci = ClusterInfo.decode(c.request(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert sorted(ci.clusterAddrTable["C1"]) == ["broker-a", "broker-b"]
        assert ci.brokerAddrTable["broker-b"].brokerAddrs == {0: "10.0.0.2:10911"}
        tl = TopicList.decode(c.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
        assert sorted(tl.topicList) == ["OnlyA", "Shared"]
        tl = TopicList.decode(c.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"}).body)
        assert sorted(tl.topicList) == ["OnlyA", "Shared"]
        r = c.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-b"})
        assert r.ext_fields["wipeTopicCount"] == "1"
        rd = TopicRouteData.decode(route(c, "Shared").body)
        assert {q.brokerName: q.perm for q in rd.queueDatas} == {"broker-a": 6, "broker-b": 4}
        # a changed topic config (new data version) replaces the broker's queue data
        register(c, "broker-b", "10.0.0.2:10911", body=register_body({"Shared": (2, 2, 6)}, counter=2))
        rd = TopicRouteData.decode(route(c, "Shared").body)
        assert {q.brokerName: q.writeQueueNums for q in rd.queueDatas} == {"broker-a": 4, "broker-b": 2}
        r = c.request(RequestCode.UNREGISTER_BROKER, dict(brokerName="broker-b", brokerAddr="10.0.0.2:10911",
                                                           clusterName="C1", brokerId=0))
        assert r.code == ResponseCode.SUCCESS
        rd = TopicRouteData.decode(route(c, "Shared").body)
        assert [q.brokerName for q in rd.queueDatas] == ["broker-a"]
        assert c.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "OnlyA"}).code == ResponseCode.SUCCESS
        assert route(c, "OnlyA").code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        c.close()


def test_kv_config(ns, tmp_path):
    _, srv, addr = ns
    c = SyncClient(addr)
    try:
        kv = dict(namespace="ORDER_TOPIC_CONFIG", key="OrdT", value="broker-a:4")
        assert c.request(RequestCode.PUT_KV_CONFIG, kv).code == ResponseCode.SUCCESS
        r = c.request(RequestCode.GET_KV_CONFIG, dict(namespace="ORDER_TOPIC_CONFIG", key="OrdT"))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["value"] == "broker-a:4"
        r = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
        assert fastjson.loads(r.body) == {"table": {"OrdT": "broker-a:4"}}
        assert fastjson.loads((tmp_path / "kvConfig.json").read_bytes())["configTable"]["ORDER_TOPIC_CONFIG"] == {
            "OrdT": "broker-a:4"}
        # REGISTER_BROKER answers with the order topic config; routes carry it when enabled
        assert fastjson.loads(register(c, topics={"OrdT": (4, 4, 6)}).body) == {"table": {"OrdT": "broker-a:4"}}
        srv.processor.order_message_enable = True
        assert TopicRouteData.decode(route(c, "OrdT").body).orderTopicConf == "broker-a:4"
        r = c.request(RequestCode.DELETE_KV_CONFIG, dict(namespace="ORDER_TOPIC_CONFIG", key="OrdT"))
        assert r.code == ResponseCode.SUCCESS
        r = c.request(RequestCode.GET_KV_CONFIG, dict(namespace="ORDER_TOPIC_CONFIG", key="OrdT"))
        assert r.code == ResponseCode.QUERY_NOT_FOUND and "OrdT" in r.remark
        r = c.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "nothing"})
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        r = c.request(RequestCode.PUT_KV_CONFIG, dict(namespace="n", key="k"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "value" in r.remark
    finally:
        c.close()


def test_silent_broker_expires_and_closed_connection_leaves_at_once(ns):
    lt, srv, addr = ns
    silent, closing = SyncClient(addr), SyncClient(addr)
    try:
        register(silent, "broker-s", "10.0.0.5:10911", topics={"SilentT": (4, 4, 6)})
        register(closing, "broker-c", "10.0.0.6:10911", topics={"ClosingT": (4, 4, 6)})
        probe = SyncClient(addr)
        assert route(probe, "SilentT").code == ResponseCode.SUCCESS
        closing.close()
        deadline = time.monotonic() + 2
        while route(probe, "ClosingT").code == ResponseCode.SUCCESS and time.monotonic() < deadline:
            time.sleep(0.02)
        assert route(probe, "ClosingT").code == ResponseCode.TOPIC_NOT_EXIST
        t0 = time.monotonic()
        while route(probe, "SilentT").code == ResponseCode.SUCCESS and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert route(probe, "SilentT").code == ResponseCode.TOPIC_NOT_EXIST
        assert 0.3 < time.monotonic() - t0 < 3  # expiry 0.6 s, scanned every 0.1 s
        assert "broker-s" not in ClusterInfo.decode(probe.request(RequestCode.GET_BROKER_CLUSTER_INFO).body).brokerAddrTable
        # the expired broker's connection was closed by the NameServer; registering again works
        silent.sock.settimeout(3)
        assert silent.sock.recv(10) == b""
        again = SyncClient(addr)
        register(again, "broker-s", "10.0.0.5:10911", topics={"SilentT": (4, 4, 6)})
        assert route(probe, "SilentT").code == ResponseCode.SUCCESS
        again.close()
        probe.close()
    finally:
        silent.close()
        closing.close()


def compressed_register_body(topics: dict[str, tuple[int, int, int]], counter: int = 7) -> bytes:
    """RegisterBrokerBody.encode(compress=true) as a RocketMQ 4.x broker writes it."""
    raw = bytearray()
    dv = DataVersion(1234, counter).encode()
    raw += struct.pack(">i", len(dv)) + dv
    raw += struct.pack(">i", len(topics))
    for t, (r, w, p) in topics.items():
        text = f"{t} {r} {w} {p} SINGLE_TAG".encode()
        raw += struct.pack(">i", len(text)) + text
    fl = b"[]"
    raw += struct.pack(">i", len(fl)) + fl
    return zlib.compress(bytes(raw), 9)


def test_compressed_body_and_crc_check(ns):
    _, _, addr = ns
    c = SyncClient(addr)
    try:
        body = compressed_register_body({"ZipT": (3, 3, 6)})
        assert register(c, body=body, compressed="true").code == ResponseCode.SUCCESS
        rd = TopicRouteData.decode(route(c, "ZipT").body)
        assert (rd.queueDatas[0].readQueueNums, rd.queueDatas[0].writeQueueNums) == (3, 3)
        r = register(c, body=register_body({"CrcT": (1, 1, 6)}), bodyCrc32="12345")
        assert r.code == ResponseCode.SYSTEM_ERROR and "crc32" in r.remark
        r = register(c, body=b"\x00not-zlib", compressed="true")
        assert r.code == ResponseCode.SYSTEM_ERROR and "inflate" in r.remark
        r = register(c, body=b"{not json")
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert route(c, "ZipT").code == ResponseCode.SUCCESS  # the server is fine
    finally:
        c.close()


def test_broker_registers_with_every_namesrv_and_unregisters_on_close(tmp_path):
    from rmq.server.broker_listener import start_remoting_listener
    lt = LoopThread()
    ns1, a1 = lt.run(start_namesrv_listener("127.0.0.1", 0))
    ns2, a2 = lt.run(start_namesrv_listener("127.0.0.1", 0))
    ctrl = make_controller(str(tmp_path / "b"), namesrvAddr=f"{a1}; {a2}", brokerName="broker-x",
                           brokerClusterName="CX", registerNameServerPeriod=1000)
    try:
        srv, addr = lt.run(start_remoting_listener(ctrl, "127.0.0.1", 0))
        deadline = time.monotonic() + 5
        tables = lambda: [n.route_info.broker_addr_table.get("broker-x") for n in (ns1, ns2)]  # noqa: E731
        while None in lt.call(tables) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [bd.brokerAddrs for bd in lt.call(tables)] == [{0: srv.broker_addr}] * 2
        assert srv.broker_addr == f"127.0.0.1:{srv.remoting.port}"
        c1 = SyncClient(a1)
        assert route(c1, "TBW102").code == ResponseCode.SUCCESS  # autoCreateTopicEnable: TBW102 is routed
        ctrl.create_topic("LateT", 2)  # a topic created by another listener is registered within ~1 s
        deadline = time.monotonic() + 5
        while route(c1, "LateT").code != ResponseCode.SUCCESS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert route(c1, "LateT").code == ResponseCode.SUCCESS
        lt.run(srv.close_async())
        assert lt.call(tables) == [None, None]
        c1.close()
    finally:
        ctrl.shutdown()
        lt.run(ns1.close_async())
        lt.run(ns2.close_async())
        lt.stop()


def test_namesrv_yaml_validation(tmp_path):
    from rmq.cli_cluster import load_namesrv_config
    from rmq.config import ConfigError
    p = tmp_path / "ns.yaml"
    p.write_text("listenPort: 9999\nbrokerExpirySeconds: 3\n")
    assert load_namesrv_config(str(p)) == {"listenPort": 9999, "brokerExpirySeconds": 3.0}
    p.write_text("listenPrt: 1\n")
    with pytest.raises(ConfigError, match="listenPrt"):
        load_namesrv_config(str(p))
    p.write_text("listenPort: abc\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_namesrv_config(str(p))
