"""One store, two protocols: messages sent by the stock RocketMQ C++ client are read by Kafka
clients through the bridge and by the Python RocketMQ client, and the reverse (SPEC §11)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from .kafka_fixtures import start_broker
from .test_cpp_client_interop import _ERR, PRODUCER, PULL_CONSUMER

pytestmark = pytest.mark.timeout(180)
if _ERR is not None:
    pytest.skip(f"librocketmq (PyPI rocketmq) cannot load: {_ERR}", allow_module_level=True)


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    work = tmp_path_factory.mktemp("xproto")
    b = start_broker(str(work / "broker"))
    home = work / "home"
    home.mkdir()
    scripts = {}
    for name, text in (("producer", PRODUCER), ("pull", PULL_CONSUMER)):
        p = work / f"{name}.py"
        p.write_text(text)
        scripts[name] = str(p)
    yield {"broker": b, "namesrv": b.listeners["namesrv"], "kafka": b.bootstrap, "scripts": scripts,
           "env": dict(os.environ, HOME=str(home)), "cwd": str(work)}
    alive = b.alive()
    assert b.stop() == 0 and alive, b.log_text()[-3000:]


def cpp(up, name, *args) -> list:
    p = subprocess.run([sys.executable, up["scripts"][name], *map(str, args)], capture_output=True, text=True,
                       timeout=60, env=up["env"], cwd=up["cwd"])
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"C++ {name} failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


def create_topic(up, topic: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from rmq.client import MQAdmin
    admin = AdminClient({"bootstrap.servers": up["kafka"]})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    with MQAdmin(up["namesrv"]) as a:  # the broker re-registers the new topic with the NameServer
        a.wait_for_route(topic, queues=partitions)


def kafka_read(up, topic: str, n: int) -> list:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": up["kafka"], "group.id": f"x{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + 20
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            out.append(m)
    c.close()
    return out


def test_cpp_client_messages_reach_kafka_and_python_clients(up):
    topic = f"XCpp{uuid.uuid4().hex[:6]}"
    create_topic(up, topic)
    plan = [{"kind": "sync", "body": f"from-cpp-{i}", "tags": "TagA", "keys": f"order-{i}",
             "props": {"region": "eu"}} for i in range(5)]
    sent = cpp(up, "producer", up["namesrv"], topic, json.dumps(plan))
    assert [r["status"] for r in sent] == ["OK"] * 5  # SendStatus.OK in the PyPI binding
    got = kafka_read(up, topic, 5)
    by_body = {m.value().decode(): m for m in got}
    assert sorted(by_body) == [f"from-cpp-{i}" for i in range(5)]
    for i in range(5):
        m = by_body[f"from-cpp-{i}"]
        headers = dict(m.headers() or [])
        assert m.key() == f"order-{i}".encode()
        assert headers["rocketmq.tags"] == b"TagA" and headers["region"] == b"eu"

    from rmq.client import PullConsumer
    from rmq.client.message import PullStatus
    with PullConsumer(f"py{uuid.uuid4().hex[:6]}", up["namesrv"]) as pc:
        bodies = []
        for mq in pc.fetch_subscribe_message_queues(topic):
            r = pc.pull(mq, "TagA", 0, 32)
            if r.pull_status is PullStatus.FOUND:
                bodies += [(m.body.decode(), m.tags, m.keys) for m in r.msg_found_list]
    assert sorted(bodies) == [(f"from-cpp-{i}", "TagA", f"order-{i}") for i in range(5)]


def test_kafka_records_reach_the_cpp_client(up):
    from confluent_kafka import Producer
    topic = f"XKafka{uuid.uuid4().hex[:6]}"
    create_topic(up, topic)
    p = Producer({"bootstrap.servers": up["kafka"]})
    for i in range(3):
        p.produce(topic, value=f"from-kafka-{i}".encode(), key=f"k{i}".encode(),
                  headers=[("rocketmq.tags", b"TagB"), ("app", b"x")])
    p.produce(topic, value=b"untagged", key=b"k9")
    assert p.flush(15) == 0
    got = cpp(up, "pull", up["namesrv"], f"cppg{uuid.uuid4().hex[:6]}", topic, "TagB")
    assert sorted((m["body"], m["tags"], m["keys"]) for m in got) == [
        (f"from-kafka-{i}", "TagB", f"k{i}") for i in range(3)]  # the tag filter left "untagged" out
