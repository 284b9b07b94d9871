"""Issue 5 with the stock RocketMQ C++ client (PyPI rocketmq 0.4.4, librocketmq 2.x) wherever
its API reaches (SPEC §4-§7): delay levels, tag filters, retry then one dead letter, orderly
consumption across a rebalance, broadcasting.  (Its Python binding has no transactional
producer and no SQL92 subscription; those are covered with the Python client in
tests/test_semantics_wire.py.)

The NameServer and broker run in this process on 127.0.0.1 ephemeral ports with a short delay
table; every C++ client runs in a subprocess with HOME in a temp dir (its logs and broadcasting
offsets go there).  The C++ push consumer starts from the last offset for a new group, so the
tests give each group a committed offset of 0 per queue first (UPDATE_CONSUMER_OFFSET, as an
operator would with resetOffset) — nothing sent before it finished rebalancing is skipped.
What the C++ client does that the tests rely on was read in rocketmq-client-cpp 2.x: it sends
CONSUMER_SEND_MSG_BACK without maxReconsumeTimes (the broker applies the group's retryMaxTimes,
set here with updateSubGroup); it renews orderly queue locks every 20 s (lockAll) and trusts a
lock for 30 s, so this broker's rebalanceLockMaxLiveTime is 30 s (RocketMQ: 60 s) — shorter would
let a live C++ consumer lose its queues between renewals.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rmq.client import MQAdmin
from tests.remoting_harness import Cluster
from tests.test_cpp_client_interop import _ERR
from tests.test_semantics_wire import check_queue_order

pytestmark = pytest.mark.timeout(180)

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELAY_TABLE = "1s 2s 3s " + " ".join(["1s"] * 15)
DELAY_S = [float(x[:-1]) for x in DELAY_TABLE.split()]
LATE_S = 1.0


if _ERR is not None:  # librocketmq's import is probed once, in test_cpp_client_interop
    pytest.skip(f"librocketmq (PyPI rocketmq) cannot load: {_ERR}", allow_module_level=True)


PRODUCER = textwrap.dedent('''
    import json, os, sys, time
    from rocketmq.client import Producer, Message
    ns, group, topic, plan = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    p = Producer(group, timeout=5000)
    p.set_namesrv_addr(ns)
    p.start()
    out = []
    for step in plan:
        m = Message(topic)
        if step.get("tags"): m.set_tags(step["tags"])
        if step.get("keys"): m.set_keys(step["keys"])
        if step.get("delay"): m.set_delay_time_level(step["delay"])
        m.set_body(step["body"].encode())
        t = time.time()
        r = p.send_orderly(m, step["arg"]) if "arg" in step else p.send_sync(m)
        out.append({"body": step["body"], "status": r.status.name, "msg_id": r.msg_id, "offset": r.offset, "t": t})
        if step.get("sleep"): time.sleep(step["sleep"])
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
''')

CONSUMER = textwrap.dedent('''
    import json, os, sys, time, threading
    from rocketmq.client import PushConsumer
    from rocketmq.ffi import MessageModel
    ns, group, topic, expr, name, out_path, stop_path, opts = sys.argv[1:9]
    opts = json.loads(opts)
    fh = open(out_path, "a", buffering=1)
    lock = threading.Lock()
    def cb(msg):
        rec = {"who": name, "t": time.time(), "topic": msg.topic, "q": msg.queue_id, "o": msg.queue_offset,
               "body": msg.body.decode(), "tags": (msg.tags or b"").decode(), "rt": msg.reconsume_times,
               "born": msg.born_timestamp / 1000.0, "id": msg.id}
        with lock:
            fh.write(json.dumps(rec) + "\\n")
        if opts.get("fail"):
            raise RuntimeError("failing on purpose")   # the binding answers RECONSUME_LATER
    c = PushConsumer(group, orderly=bool(opts.get("orderly")),
                     message_model=MessageModel.BROADCASTING if opts.get("broadcast") else MessageModel.CLUSTERING)
    c.set_namesrv_addr(ns)
    c.set_instance_name(name)
    c.subscribe(topic, cb, expression=expr)
    c.start()
    print("READY", flush=True)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(stop_path):
        time.sleep(0.05)
    os._exit(0)
''')


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cppsem")
    cluster = Cluster(tmp / "servers")
    ctrl, srv, addr = cluster.add_broker("broker-a", messageDelayLevel=DELAY_TABLE, rebalanceLockMaxLiveTime=30_000)
    cluster.wait_registered("broker-a")
    home = tmp / "home"
    home.mkdir()
    scripts = {}
    for name, text in (("producer", PRODUCER), ("consumer", CONSUMER)):
        p = tmp / f"{name}.py"
        p.write_text(text)
        scripts[name] = str(p)
    admin = MQAdmin(cluster.namesrv_addr)
    yield {"cluster": cluster, "ns": cluster.namesrv_addr, "ctrl": ctrl, "broker_addr": addr, "tmp": tmp,
           "scripts": scripts, "env": dict(os.environ, HOME=str(home)), "admin": admin}
    admin.close()
    cluster.close()


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout}s (last: {last!r})")


_seq = iter(range(10_000))


def new_topic(env, prefix: str, queues: int) -> str:
    t = f"{prefix}{next(_seq)}"
    env["admin"].create_topic(t, cluster="DefaultCluster", read_queue_nums=queues, write_queue_nums=queues)
    env["admin"].wait_for_route(t, queues=queues)
    return t


def start_group_at_zero(env, group: str, topic: str, queues: int) -> None:
    """Commit offset 0 for every queue of ``topic`` so a C++ consumer (CONSUME_FROM_LAST_OFFSET
    for a new group) reads from the beginning."""
    api = env["admin"].instance.api
    lt = env["admin"]._lt
    for q in range(queues):
        lt.run(api.update_consumer_offset(env["broker_addr"], group, topic, q, 0))


def produce(env, group: str, topic: str, plan: list, timeout: float = 60) -> list:
    p = subprocess.run([PY, env["scripts"]["producer"], env["ns"], group, topic, json.dumps(plan)],
                       capture_output=True, text=True, timeout=timeout, env=env["env"], cwd=str(env["tmp"]))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"C++ producer failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    res = json.loads(lines[-1][len("RESULT "):])
    assert all(r["status"] == "OK" for r in res), res
    return res


class Consumers:
    """C++ push consumer subprocesses writing every delivery to a JSON-lines file."""

    def __init__(self, env, tag: str) -> None:
        self.env = env
        self.stop_path = env["tmp"] / f"stop-{tag}-{next(_seq)}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.outs: dict[str, str] = {}

    def start(self, name: str, group: str, topic: str, expr: str = "*", **opts) -> None:
        out = self.env["tmp"] / f"{name}-{next(_seq)}.jsonl"
        out.write_text("")
        p = subprocess.Popen([PY, self.env["scripts"]["consumer"], self.env["ns"], group, topic, expr, name,
                              str(out), str(self.stop_path), json.dumps(opts)],
                             stdout=subprocess.PIPE, stderr=open(str(out) + ".err", "w"), text=True,
                             env=self.env["env"], cwd=str(self.env["tmp"]))
        assert p.stdout.readline().strip() == "READY", open(str(out) + ".err").read()[-2000:]
        self.procs[name] = p
        self.outs[name] = str(out)

    def records(self, name: str | None = None) -> list[dict]:
        out = []
        for n, path in self.outs.items():
            if name is None or n == name:
                with open(path) as fh:
                    out += [json.loads(ln) for ln in fh if ln.strip()]
        return out

    def stop(self) -> None:
        self.stop_path.write_text("stop")
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


# =============================================================================== §6 delay
def test_cpp_delay_levels_arrive_on_time(env):
    topic = new_topic(env, "CppDelay", 2)
    group = "cpp_delay_cg"
    start_group_at_zero(env, group, topic, 2)
    cs = Consumers(env, "delay")
    try:
        cs.start("d1", group, topic)
        produce(env, "CppDelayPG", topic, [{"body": "warm-up"}])
        wait_until(lambda: cs.records(), 20, "the C++ consumer is pulling")
        res = produce(env, "CppDelayPG", topic, [{"body": f"L{lv}", "delay": lv} for lv in (3, 2, 1)] + [{"body": "L0"}])
        wait_until(lambda: len(cs.records()) >= 5, 15, "4 deliveries")
        time.sleep(0.5)
    finally:
        cs.stop()
    got = {r["body"]: r for r in cs.records()}
    assert sorted(got) == ["L0", "L1", "L2", "L3", "warm-up"] and len(cs.records()) == 5
    for r in res:
        level = int(r["body"][1:])
        want = DELAY_S[level - 1] if level else 0.0
        waited = got[r["body"]]["t"] - got[r["body"]]["born"]
        assert want <= waited <= want + LATE_S, f"{r['body']}: {waited:.3f}s after send, level wants {want}s"


# =============================================================================== §5 tags
def test_cpp_tag_filter_delivers_exactly_the_matching_set(env):
    topic = new_topic(env, "CppTags", 2)
    cs = Consumers(env, "tags")
    plan = [{"body": f"m{i}", "tags": ("TagA", "TagB", "TagC")[i % 3], "keys": f"k{i}"} for i in range(24)]
    plan += [{"body": "aa", "tags": "Aa"}, {"body": "bb", "tags": "BB"}]   # same Java hashCode
    want = {"ab": {p["body"] for p in plan if p["tags"] in ("TagA", "TagB")}, "aa": {"aa"}}
    try:
        for name, expr in (("ab", "TagA || TagB"), ("aa", "Aa")):
            start_group_at_zero(env, f"cpp_tags_{name}", topic, 2)
            cs.start(name, f"cpp_tags_{name}", topic, expr)
        produce(env, "CppTagsPG", topic, plan)
        wait_until(lambda: all({r["body"] for r in cs.records(n)} >= w for n, w in want.items()), 20,
                   "both groups got their messages")
        time.sleep(1.0)
    finally:
        cs.stop()
    for name, w in want.items():
        got = [r["body"] for r in cs.records(name)]
        assert sorted(got) == sorted(w), name


# =============================================================================== §7 retry
def test_cpp_failing_consumer_sees_the_retry_sequence_then_one_dlq_entry(env):
    topic = new_topic(env, "CppRetry", 1)
    group = "cpp_retry_cg"
    admin = env["admin"]
    # the C++ client sends no maxReconsumeTimes: the group's retryMaxTimes decides
    admin.create_subscription_group(group, broker_addr=env["broker_addr"], retry_max_times=2)
    admin.create_topic(f"%RETRY%{group}", broker_addr=env["broker_addr"], read_queue_nums=1, write_queue_nums=1)
    admin.wait_for_route(f"%RETRY%{group}", queues=1)
    start_group_at_zero(env, group, topic, 1)
    cs = Consumers(env, "retry")
    try:
        cs.start("r1", group, topic, fail=True)
        produce(env, "CppRetryPG", topic, [{"body": "poison", "keys": "cpp-order-9"}])
        wait_until(lambda: len(cs.records()) >= 3, 20, "the original delivery and 2 retries")
        time.sleep(2.5)
        got = cs.records()
    finally:
        cs.stop()
    assert [g["rt"] for g in got] == [0, 1, 2]
    assert {g["topic"] for g in got} == {topic} and len({g["id"] for g in got}) == 1
    for prev, cur in zip(got, got[1:]):
        level = 3 + prev["rt"]
        gap = cur["t"] - prev["t"]
        assert DELAY_S[level - 1] <= gap <= DELAY_S[level - 1] + 1.5, f"retry {cur['rt']} after {gap:.3f}s"
    dead = admin.query_msg_by_key(f"%DLQ%{group}", "cpp-order-9")
    assert len(dead) == 1 and dead[0].body == b"poison" and dead[0].properties["RETRY_TOPIC"] == topic
    assert sum(s.max_offset for s in admin.topic_status(f"%DLQ%{group}")) == 1


# =============================================================================== §4 orderly
def test_cpp_orderly_keeps_per_queue_order_across_a_rebalance_and_a_crash(env):
    """Keyed sequences (the binding's hashing selector: arg % queues) on 4 queues; two C++
    orderly consumers, a third joins mid-stream (rebalance: the old owner unlocks the queue it
    gives up), then the first is killed with SIGKILL (its locks expire on the broker after
    rebalanceLockMaxLiveTime, 30 s here, then the others lock its queues).  Each queue is
    consumed in offset order, one owner at a time; a new owner may repeat what the old one had
    not committed, never skip.  (A clean C++ shutdown would not be quicker: librocketmq 2.x's
    unlockAll leaves the first queue of each broker locked.)"""
    topic = new_topic(env, "CppOrder", 4)
    group = "cpp_order_cg"
    start_group_at_zero(env, group, topic, 4)
    ctrl = env["ctrl"]

    def owners():
        table = ctrl.rebalance_lock_manager.table.get(group, {})
        return {k[2]: e.client_id.split("@")[1] for k, e in list(table.items()) if k[0] == topic}
    n_keys, per_key = 8, 40
    plan = [{"body": f"K{k}:{s}", "keys": f"K{k}", "arg": k, "sleep": 0.1 if k == n_keys - 1 else 0}
            for s in range(per_key) for k in range(n_keys)]
    cs = Consumers(env, "orderly")
    producer = None
    try:
        cs.start("A", group, topic, orderly=True)
        cs.start("B", group, topic, orderly=True)
        producer = subprocess.Popen([PY, env["scripts"]["producer"], env["ns"], "CppOrderPG", topic, json.dumps(plan)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env["env"],
                                    cwd=str(env["tmp"]))
        wait_until(lambda: len(set(owners().values())) == 2, 30, "A and B lock their queues")
        time.sleep(1.0)
        cs.start("C", group, topic, orderly=True)
        wait_until(lambda: "C" in owners().values(), 30, "C locks a queue after the rebalance")
        time.sleep(1.0)
        cs.procs["A"].kill()
        cs.procs["A"].wait(5)
        wait_until(lambda: set(owners().values()) <= {"B", "C"} and len(owners()) == 4, 45,
                   "B and C hold every queue once A's locks expired")
        out, err = producer.communicate(timeout=60)
        assert producer.returncode == 0, err[-2000:]
        maxes = {s.mq.queueId: s.max_offset for s in env["admin"].topic_status(topic)}

        def consumed_all():
            seen = {}
            for r in cs.records():
                seen[r["q"]] = max(seen.get(r["q"], -1), r["o"])
            return all(seen.get(q, -1) == m - 1 for q, m in maxes.items())
        wait_until(consumed_all, 45, "every queue consumed to its end")
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        cs.stop()
    recs = cs.records()
    by_queue: dict[int, list] = {}
    for r in recs:
        by_queue.setdefault(r["q"], []).append(r)
    seen_owners = {q: check_queue_order(rs, maxes[q]) for q, rs in by_queue.items()}
    assert any(o[0] == "B" and o[-1] == "C" for o in seen_owners.values()), seen_owners  # the rebalance
    assert any(o[0] == "A" and o[-1] in ("B", "C") for o in seen_owners.values()), seen_owners  # the crash
    assert all(o[-1] in ("B", "C") for o in seen_owners.values())
    keyed: dict[str, list] = {}
    for r in sorted(recs, key=lambda r: r["t"]):
        k, s = r["body"].split(":")
        keyed.setdefault(k, []).append(int(s))
    for k, seqs in keyed.items():
        assert set(seqs) == set(range(per_key)), k


# =============================================================================== §4 broadcasting
def test_cpp_broadcasting_delivers_every_message_to_every_member(env):
    topic = new_topic(env, "CppBcast", 4)
    cs = Consumers(env, "bcast")
    try:
        for i in range(3):
            cs.start(f"b{i}", "cpp_bcast_cg", topic, broadcast=True)
        # a new broadcasting member starts at the queues' max offset: warm up until all pull
        deadline = time.monotonic() + 30
        while not all(cs.records(f"b{i}") for i in range(3)):
            assert time.monotonic() < deadline, "broadcasting members did not start pulling"
            produce(env, "CppBcastPG", topic, [{"body": "warm-up", "tags": "W"}])
            time.sleep(1.0)
        n = 20
        produce(env, "CppBcastPG", topic, [{"body": f"b{j}", "tags": "B"} for j in range(n)])
        want = {f"b{j}" for j in range(n)}
        wait_until(lambda: all({r["body"] for r in cs.records(f"b{i}")} >= want for i in range(3)), 20,
                   "every member got every message")
        time.sleep(0.5)
    finally:
        cs.stop()
    for i in range(3):
        got = [r["body"] for r in cs.records(f"b{i}") if r["body"] != "warm-up"]
        assert sorted(got) == sorted(want), f"b{i}"
