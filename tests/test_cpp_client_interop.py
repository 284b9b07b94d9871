"""The stock RocketMQ C++ client (PyPI rocketmq 0.4.4, librocketmq 2.x) against our NameServer and broker:
sync / oneway / batch / orderly sends, push consumers (clustering, broadcasting, tags), pull consumer.

The server runs in this process (a background asyncio loop); each C++ client runs in a subprocess with
HOME in a temp dir (the library writes logs and broadcasting offsets there, and a crash stays contained)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rmq.remoting import RequestCode, ResponseCode
from tests.remoting_harness import Cluster, SyncClient

pytestmark = pytest.mark.timeout(180)

PY = sys.executable


def _librocketmq_error() -> str | None:
    try:
        p = subprocess.run([PY, "-c", "import rocketmq.client"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if p.returncode != 0:
        return (p.stderr.strip().splitlines() or ["import failed"])[-1]
    return None


_ERR = _librocketmq_error()
if _ERR is not None:
    pytest.skip(f"librocketmq (PyPI rocketmq) cannot load: {_ERR}", allow_module_level=True)


PRODUCER = textwrap.dedent('''
    import json, os, sys
    from rocketmq.client import Producer, Message
    ns, topic, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    p = Producer("CppPG", timeout=5000)
    p.set_namesrv_addr(ns)
    p.start()
    out = []
    def mk(d):
        m = Message(topic)
        if d.get("tags"): m.set_tags(d["tags"])
        if d.get("keys"): m.set_keys(d["keys"])
        for k, v in d.get("props", {}).items(): m.set_property(k, v)
        m.set_body(d["body"].encode())
        return m
    for step in plan:
        kind = step["kind"]
        if kind == "sync":
            r = p.send_sync(mk(step))
            out.append({"kind": kind, "status": r.status.name, "msg_id": r.msg_id, "offset": r.offset, "body": step["body"]})
        elif kind == "oneway":
            p.send_oneway(mk(step)); out.append({"kind": kind, "body": step["body"]})
        elif kind == "orderly":
            r = p.send_orderly(mk(step), step["arg"])
            out.append({"kind": kind, "status": r.status.name, "msg_id": r.msg_id, "offset": r.offset, "body": step["body"]})
        elif kind == "batch":
            r = p.send_batch([mk(d) for d in step["msgs"]])
            out.append({"kind": kind, "status": r.status.name, "offset": r.offset})
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
''')

PUSH_CONSUMER = textwrap.dedent('''
    import json, os, sys, time, threading
    from rocketmq.client import PushConsumer
    from rocketmq.ffi import MessageModel
    ns, group, model, topic, expr, inst, out_path, stop_path = sys.argv[1:9]
    lock = threading.Lock()
    fh = open(out_path, "a")
    def cb(msg):
        rec = {"topic": msg.topic, "tags": (msg.tags or b"").decode(), "keys": (msg.keys or b"").decode(),
               "body": msg.body.decode(), "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "id": msg.id}
        with lock:
            fh.write(json.dumps(rec) + "\\n"); fh.flush()
    c = PushConsumer(group, message_model=MessageModel.BROADCASTING if model == "B" else MessageModel.CLUSTERING)
    c.set_namesrv_addr(ns)
    c.set_instance_name(inst)
    c.subscribe(topic, cb, expression=expr)
    c.start()
    print("READY", flush=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(stop_path):
        time.sleep(0.05)
    os._exit(0)
''')

PULL_CONSUMER = textwrap.dedent('''
    import json, os, sys
    from rocketmq.client import PullConsumer
    ns, group, topic, expr = sys.argv[1:5]
    c = PullConsumer(group)
    c.set_namesrv_addr(ns)
    c.start()
    got = [{"queue_id": m.queue_id, "queue_offset": m.queue_offset, "body": m.body.decode(),
            "tags": (m.tags or b"").decode(), "keys": (m.keys or b"").decode()} for m in c.pull(topic, expr)]
    print("RESULT " + json.dumps(got), flush=True)
    os._exit(0)
''')


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpp")
    cluster = Cluster(tmp / "servers")
    cluster.add_broker("broker-a")
    cluster.wait_registered("broker-a")
    home = tmp / "home"
    home.mkdir()
    scripts = {}
    for name, text in (("producer", PRODUCER), ("push", PUSH_CONSUMER), ("pull", PULL_CONSUMER)):
        p = tmp / f"{name}.py"
        p.write_text(text)
        scripts[name] = str(p)
    e = dict(os.environ, HOME=str(home))
    yield {"cluster": cluster, "tmp": tmp, "scripts": scripts, "env": e}
    cluster.close()


def run_client(env, name: str, *args, timeout: float = 60) -> list:
    p = subprocess.run([PY, env["scripts"][name], *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env["env"], cwd=str(env["tmp"]))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"C++ client {name} failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


class PushConsumers:
    """Push consumer subprocesses writing every received message to a file."""

    def __init__(self, env, tag: str) -> None:
        self.env = env
        self.stop_path = env["tmp"] / f"stop-{tag}"
        self.procs = []
        self.outs = []

    def start(self, group: str, model: str, topic: str, expr: str, instance: str) -> None:
        out = self.env["tmp"] / f"{instance}.jsonl"
        out.write_text("")
        p = subprocess.Popen([PY, self.env["scripts"]["push"], self.env["cluster"].namesrv_addr, group, model, topic,
                              expr, instance, str(out), str(self.stop_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env["env"],
                             cwd=str(self.env["tmp"]))
        self.procs.append(p)
        self.outs.append(out)

    def received(self) -> list[list[dict]]:
        res = []
        for out in self.outs:
            res.append([json.loads(ln) for ln in out.read_text().splitlines() if ln.strip()])
        return res

    def wait_for(self, pred, timeout: float = 30) -> list[list[dict]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received()
            if pred(got):
                return got
            for p in self.procs:
                assert p.poll() is None, f"push consumer died: {p.communicate()}"
            time.sleep(0.1)
        return self.received()

    def stop(self) -> None:
        self.stop_path.write_text("stop")
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def wait_members(env, group: str, n: int, timeout: float = 20) -> None:
    ctrl, srv, _ = env["cluster"].brokers[0]
    lt = env["cluster"].lt
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cg = lt.call(lambda: srv.services.consumer_manager.get(group))
        if cg is not None and len(cg.channels) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{n} consumers of {group} did not register")


def create_topic(env, topic: str, queues: int = 4) -> None:
    c = SyncClient(env["cluster"].brokers[0][2])
    try:
        r = c.request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(topic=topic, defaultTopic="TBW102", readQueueNums=queues,
                                                                 writeQueueNums=queues, perm=6,
                                                                 topicFilterType="SINGLE_TAG"))
        assert r.code == ResponseCode.SUCCESS
    finally:
        c.close()
    ns = SyncClient(env["cluster"].namesrv_addr)
    try:
        deadline = time.monotonic() + 5
        while ns.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code != ResponseCode.SUCCESS:
            assert time.monotonic() < deadline, "topic route did not reach the NameServer"
            time.sleep(0.05)
    finally:
        ns.close()


def stored(ctrl, topic: str) -> dict[int, list]:
    out = {}
    for qid in range(8):
        res = ctrl.store.get_message("check", topic, qid, 0, 1000)
        if res.messages:
            out[qid] = res.decoded()
    return out


def test_cpp_producer_sends_are_stored_as_sent(env):
    ctrl = env["cluster"].brokers[0][0]
    plan = [{"kind": "sync", "tags": "TagA", "keys": f"key{i}", "body": f"sync-{i}", "props": {"color": "red"}}
            for i in range(3)]
    plan.append({"kind": "oneway", "tags": "TagB", "keys": "one", "body": "oneway-0"})
    plan.append({"kind": "batch", "msgs": [{"tags": "TagC", "keys": f"bk{i}", "body": f"batch-{i}"} for i in range(3)]})
    res = run_client(env, "producer", env["cluster"].namesrv_addr, "CppSendT", json.dumps(plan))
    assert [r.get("status") for r in res if r["kind"] != "oneway"] == ["OK"] * 4
    deadline = time.monotonic() + 10
    while sum(len(v) for v in stored(ctrl, "CppSendT").values()) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    msgs = [m for ms in stored(ctrl, "CppSendT").values() for m in ms]
    by_body = {m.body.decode(): m for m in msgs}
    assert sorted(by_body) == sorted([f"sync-{i}" for i in range(3)] + ["oneway-0"] + [f"batch-{i}" for i in range(3)])
    for i, r in enumerate(res[:3]):
        m = by_body[f"sync-{i}"]
        assert (m.topic, m.tags, m.keys, m.properties.get("color")) == ("CppSendT", "TagA", f"key{i}", "red")
        assert m.uniq_key == r["msg_id"]  # the client's msgId is the UNIQ_KEY property
        assert m.queue_offset == r["offset"]
        assert m.store_host == ("127.0.0.1", env["cluster"].brokers[0][1].remoting.port)
    assert (by_body["oneway-0"].tags, by_body["oneway-0"].keys) == ("TagB", "one")
    assert [(by_body[f"batch-{i}"].tags, by_body[f"batch-{i}"].keys) for i in range(3)] == [("TagC", f"bk{i}")
                                                                                           for i in range(3)]
    batch_qids = {by_body[f"batch-{i}"].queue_id for i in range(3)}
    assert len(batch_qids) == 1  # a batch lands in one queue, contiguous
    tc = ctrl.topic_config_manager.get("CppSendT")
    assert (tc.writeQueueNums, tc.perm) == (4, 6)  # auto-created from TBW102


def test_cpp_orderly_send_and_pull_consumer(env):
    ctrl = env["cluster"].brokers[0][0]
    plan = [{"kind": "orderly", "arg": i % 2, "tags": f"O{i % 2}", "keys": f"ok{i}", "body": f"ord-{i}"}
            for i in range(10)]
    res = run_client(env, "producer", env["cluster"].namesrv_addr, "CppOrderT", json.dumps(plan))
    assert all(r["status"] == "OK" for r in res)
    q = stored(ctrl, "CppOrderT")
    # the hashing selector sends arg % queueCount: even messages to queue 0, odd to queue 1, in order
    assert [m.body.decode() for m in q[0]] == [f"ord-{i}" for i in range(0, 10, 2)]
    assert [m.body.decode() for m in q[1]] == [f"ord-{i}" for i in range(1, 10, 2)]
    got = run_client(env, "pull", env["cluster"].namesrv_addr, "CppPullG", "CppOrderT", "O1")
    assert sorted((g["queue_id"], g["queue_offset"], g["body"]) for g in got) == \
        [(1, i, f"ord-{2 * i + 1}") for i in range(5)]
    got = run_client(env, "pull", env["cluster"].namesrv_addr, "CppPullG2", "CppOrderT", "*")
    assert len(got) == 10 and {g["tags"] for g in got} == {"O0", "O1"}


def test_cpp_push_consumers_clustering_with_tags(env):
    ctrl = env["cluster"].brokers[0][0]
    create_topic(env, "CppClusterT")
    pc = PushConsumers(env, "clustering")
    try:
        pc.start("CppCG", "C", "CppClusterT", "T1 || T2", "c1")
        pc.start("CppCG", "C", "CppClusterT", "T1 || T2", "c2")
        wait_members(env, "CppCG", 2)
        time.sleep(1.5)  # both rebalance after NOTIFY_CONSUMER_IDS_CHANGED
        plan = [{"kind": "sync", "tags": ("T0", "T1", "T2")[i % 3], "keys": f"k{i}", "body": f"c-{i}"} for i in range(24)]
        run_client(env, "producer", env["cluster"].namesrv_addr, "CppClusterT", json.dumps(plan))
        want = {f"c-{i}" for i in range(24) if i % 3}
        got = pc.wait_for(lambda g: {m["body"] for ms in g for m in ms} >= want)
        bodies = [m["body"] for ms in got for m in ms]
        assert set(bodies) == want  # T0 filtered out
        assert all(len(ms) > 0 for ms in got), "both members of the group get a share of the queues"
        assert all(m["tags"] in ("T1", "T2") and m["keys"] == f"k{m['body'][2:]}" for ms in got for m in ms)
        # consumed offsets come back to the broker (pull commitOffset / UPDATE_CONSUMER_OFFSET)
        deadline = time.monotonic() + 30  # the client persists every 5 s; a loaded machine stretches that
        maxes = {q: ctrl.store.get_max_offset_in_queue("CppClusterT", q) for q in range(4)}
        while time.monotonic() < deadline:
            committed = {q: ctrl.offset_manager.query_offset("CppCG", "CppClusterT", q) for q in range(4)}
            if committed == maxes:
                break
            time.sleep(0.2)
        assert committed == maxes
    finally:
        pc.stop()


def test_cpp_push_consumers_broadcasting(env):
    create_topic(env, "CppBroadT")
    pc = PushConsumers(env, "broadcasting")
    try:
        pc.start("CppBG", "B", "CppBroadT", "*", "b1")
        pc.start("CppBG", "B", "CppBroadT", "*", "b2")
        wait_members(env, "CppBG", 2)
        time.sleep(1.5)
        plan = [{"kind": "sync", "tags": "B", "keys": f"bk{i}", "body": f"b-{i}"} for i in range(12)]
        run_client(env, "producer", env["cluster"].namesrv_addr, "CppBroadT", json.dumps(plan))
        want = {f"b-{i}" for i in range(12)}
        got = pc.wait_for(lambda g: all({m["body"] for m in ms} >= want for ms in g))
        assert [{m["body"] for m in ms} for ms in got] == [want, want]  # every member gets every message
    finally:
        pc.stop()
