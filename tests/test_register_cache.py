"""REGISTER_BROKER of an unchanged topic table (issue 24): the broker reuses the body it encoded,
the NameServer the body it decoded, both until the table changes; changes still reach the routes."""
from __future__ import annotations

import time

import pytest

from rmq.namesrv import processor as ns_processor
from rmq.namesrv import start_namesrv_listener
from rmq.remoting import RequestCode, ResponseCode
from rmq.server import broker_listener
from tests.remoting_harness import LoopThread, SyncClient, make_controller
from tests.test_namesrv import register, register_body, route

pytestmark = pytest.mark.timeout(120)


class _Counting:
    """Counts the calls of a method (or classmethod) it replaces; `fn` is what to install."""

    def __init__(self, real):
        self.real, self.calls = real, 0

        def fn(*a, **kw):
            self.calls += 1
            return real(*a, **kw)
        self.fn = fn


def test_namesrv_decodes_a_repeated_body_once(tmp_path, monkeypatch):
    decode = _Counting(ns_processor.RegisterBrokerBody.decode)
    monkeypatch.setattr(ns_processor.RegisterBrokerBody, "decode", decode.fn)
    lt = LoopThread()
    srv, addr = lt.run(start_namesrv_listener("127.0.0.1", 0, kv_config_path=str(tmp_path / "kv.json")))
    c = SyncClient(addr)
    try:
        first = register_body({"TopicA": (4, 4, 6)}, counter=1)
        for _ in range(3):
            assert register(c, body=first).code == ResponseCode.SUCCESS
        assert decode.calls == 1
        assert route(c, "TopicA").code == ResponseCode.SUCCESS
        assert register(c, body=register_body({"TopicA": (4, 4, 6), "TopicB": (2, 2, 6)}, counter=2)).code == 0
        assert decode.calls == 2 and route(c, "TopicB").code == ResponseCode.SUCCESS
        # another broker with the same body is decoded for itself
        assert register(c, name="broker-b", addr="10.0.0.2:10911", body=first).code == ResponseCode.SUCCESS
        assert decode.calls == 3
        assert c.request(RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                                         "clusterName": "C1", "brokerId": "0"}).code == 0
        assert register(c, body=first).code == ResponseCode.SUCCESS  # after unregistering: decoded again
        assert decode.calls == 4
    finally:
        c.close()
        lt.run(srv.close_async())
        lt.stop()


def test_broker_encodes_the_body_once_per_topic_table_version(tmp_path, monkeypatch):
    encode = _Counting(broker_listener.RegisterBrokerBody.encode)
    monkeypatch.setattr(broker_listener.RegisterBrokerBody, "encode", encode.fn)
    lt = LoopThread()
    ns, a1 = lt.run(start_namesrv_listener("127.0.0.1", 0, kv_config_path=str(tmp_path / "kv.json")))
    ctrl = make_controller(str(tmp_path / "b"), namesrvAddr=a1, brokerName="broker-x", brokerClusterName="CX",
                           registerNameServerPeriod=60_000)
    c1 = SyncClient(a1)
    try:
        srv, _addr = lt.run(start_remoting_listener(ctrl))
        deadline = time.monotonic() + 10
        while lt.call(lambda: srv.registrations) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        base = encode.calls
        assert lt.run(srv.register_broker_all()) == 1
        assert lt.run(srv.register_broker_all()) == 1
        assert encode.calls == base  # unchanged table: the body encoded before
        ctrl.create_topic("LateT", 2)
        assert lt.run(srv.register_broker_all()) == 1
        assert encode.calls == base + 1 and route(c1, "LateT").code == ResponseCode.SUCCESS
        ctrl.delete_topic("LateT")
        ctrl.create_topic("LateT", 3)  # a new dataVersion: the NameServer sees the new queue count
        assert lt.run(srv.register_broker_all()) == 1
        assert encode.calls == base + 2
        from rmq.remoting import TopicRouteData
        assert TopicRouteData.decode(route(c1, "LateT").body).queueDatas[0].readQueueNums == 3
        lt.run(srv.close_async())
    finally:
        c1.close()
        ctrl.shutdown()
        lt.run(ns.close_async())
        lt.stop()


def start_remoting_listener(ctrl):
    return broker_listener.start_remoting_listener(ctrl, "127.0.0.1", 0)
