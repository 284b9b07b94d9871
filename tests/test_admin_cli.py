"""``rmq admin`` (mqadmin-style commands, SPEC §3, §9, §10) and ``rmq bench rmq`` against real
NameServer + broker listeners on 127.0.0.1 ephemeral ports, driven through the ``rmq`` CLI."""
from __future__ import annotations

import json
import os
import sys
import time

import pytest
from click.testing import CliRunner

from rmq.cli import main
from rmq.client import (ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MQAdmin, Producer,
                        PushConsumer)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remoting_harness import Cluster  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("rmq-admin"))
    c.add_broker("broker-a")
    c.wait_registered("broker-a")
    yield c
    c.close()


@pytest.fixture(scope="module")
def ns(cluster):
    return cluster.namesrv_addr


def rmq(*args: str, ok: bool = True):
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output
    return res


def rmq_json(*args: str):
    return json.loads(rmq(*args, "--json").output)


def wait_until(pred, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


def test_admin_registered_in_rmq_cli():
    out = rmq("admin", "--help").output
    for cmd in ("updateTopic", "deleteTopic", "topicList", "topicRoute", "topicStatus", "clusterList", "brokerStatus",
                "consumerProgress", "queryMsgByKey", "queryMsgById", "queryMsgByOffset", "sendMessage",
                "consumeMessage", "pushConsume", "resendDLQ", "updateSubGroup"):
        assert cmd in out
    assert "rmq" in rmq("bench", "--help").output


def test_topic_lifecycle_and_messages(ns, cluster):
    topic = f"AdminT_{os.getpid()}"
    broker_addr = cluster.brokers[0][2]
    created = rmq_json("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
    assert created["brokers"] == [broker_addr] and created["writeQueueNums"] == 4
    wait_until(lambda: topic in rmq_json("admin", "topicList", "-n", ns)["topicList"], what="topic listed")
    route = rmq_json("admin", "topicRoute", "-n", ns, "-t", topic)
    assert route["queueDatas"][0]["writeQueueNums"] == 4 and route["queueDatas"][0]["perm"] == 6
    assert "broker-a" in rmq("admin", "topicRoute", "-n", ns, "-t", topic).output

    sent = rmq_json("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "hello admin", "-k", "OrderID188", "-c", "TagA")
    assert sent["sendStatus"] == "SEND_OK" and len(sent["msgId"]) == 32
    to_q2 = rmq_json("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "to q2", "-b", "broker-a", "-i", "2")
    assert to_q2["queueId"] == 2
    p = Producer("admin_test_pg", ns)
    p.start()
    try:
        for i in range(6):
            p.send(Message(topic, f"m{i}".encode(), tags="TagB"))
    finally:
        p.shutdown()

    status = rmq_json("admin", "topicStatus", "-n", ns, "-t", topic)
    assert len(status["queues"]) == 4 and sum(q["maxOffset"] for q in status["queues"]) == 8
    assert all(q["lastUpdateTimestamp"] > 0 for q in status["queues"] if q["maxOffset"] > 0)
    table = rmq("admin", "topicStatus", "-n", ns, "-t", topic).output
    assert "Max Offset" in table and "broker-a" in table

    by_key = rmq_json("admin", "queryMsgByKey", "-n", ns, "-t", topic, "-k", "OrderID188")
    assert [m["body"] for m in by_key["messages"]] == ["hello admin"]
    assert by_key["messages"][0]["tags"] == "TagA"
    by_offset_id = rmq_json("admin", "queryMsgById", "-n", ns, "-i", sent["offsetMsgId"])
    assert by_offset_id["body"] == "hello admin" and by_offset_id["msgId"] == sent["msgId"]
    by_uniq = rmq_json("admin", "queryMsgById", "-n", ns, "-i", sent["msgId"], "-t", topic)
    assert by_uniq["offsetMsgId"] == sent["offsetMsgId"]
    at = rmq_json("admin", "queryMsgByOffset", "-n", ns, "-t", topic, "-b", "broker-a", "-i",
                  str(sent["queueId"]), "-o", str(sent["queueOffset"]))
    assert at["body"] == "hello admin"
    consumed = rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic)
    assert sorted(m["body"] for m in consumed["messages"]) == sorted(["hello admin", "to q2"] + [f"m{i}" for i in range(6)])
    only_b = rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic, "-s", "TagB", "-c", "3")
    assert len(only_b["messages"]) == 3 and {m["tags"] for m in only_b["messages"]} == {"TagB"}
    assert "hello admin" in rmq("admin", "queryMsgById", "-n", ns, "-i", sent["offsetMsgId"]).output

    deleted = rmq_json("admin", "deleteTopic", "-n", ns, "-t", topic, "-c", "DefaultCluster")
    assert deleted["brokers"] == [broker_addr]
    gone = rmq("admin", "topicRoute", "-n", ns, "-t", topic, ok=False)
    assert gone.exit_code == 1 and "Error:" in gone.output and "Traceback" not in gone.output


def test_cluster_list_and_broker_status(ns, cluster):
    broker_addr = cluster.brokers[0][2]
    cl = rmq_json("admin", "clusterList", "-n", ns)
    (b,) = cl["brokers"]
    assert (b["cluster"], b["brokerName"], b["brokerId"], b["addr"]) == ("DefaultCluster", "broker-a", 0, broker_addr)
    assert b["version"] == "V4_9_4"
    assert "broker-a" in rmq("admin", "clusterList", "-n", ns).output
    st = rmq_json("admin", "brokerStatus", "-n", ns, "-b", broker_addr)
    assert st["brokerVersionDesc"] == "V4_9_4" and "msgPutTotalTodayNow" in st
    by_cluster = rmq_json("admin", "brokerStatus", "-n", ns, "-c", "DefaultCluster")
    assert list(by_cluster) == [broker_addr]


def test_consumer_progress_shows_lag_then_zero(ns):
    topic = f"AdminLag_{os.getpid()}"
    group = f"admin_lag_cg_{os.getpid()}"
    rmq("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    with MQAdmin(ns) as a:
        a.wait_for_route(topic, queues=2)
    seen = []
    p = Producer("admin_lag_pg", ns)
    p.start()
    c = PushConsumer(group, ns, config=ClientConfig(instance_name="lag"),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic)
    c.register_message_listener(lambda msgs: (seen.extend(msgs), ConsumeStatus.CONSUME_SUCCESS)[1])
    try:
        for i in range(10):
            p.send(Message(topic, f"lag{i}".encode()))
        c.start()
        wait_until(lambda: len(seen) >= 10, what="10 consumed")
        c.persist_offsets()
        prog = rmq_json("admin", "consumerProgress", "-n", ns, "-g", group, "-t", topic)
        rows = [q for q in prog["queues"] if q["topic"] == topic]
        assert len(rows) == 2 and sum(q["brokerOffset"] for q in rows) == 10
        assert prog["diffTotal"] == 0 and all(q["diff"] == 0 for q in rows)
        for i in range(3):
            p.send(Message(topic, f"more{i}".encode()))
        wait_until(lambda: len(seen) >= 13, what="13 consumed")
        c.shutdown()                       # commits the offsets synchronously
        c = None
        for i in range(4):
            p.send(Message(topic, f"late{i}".encode()))
        prog = rmq_json("admin", "consumerProgress", "-n", ns, "-g", group, "-t", topic)
        assert prog["diffTotal"] == 4      # the 4 sent after the consumer left
        assert "#Diff" in rmq("admin", "consumerProgress", "-n", ns, "-g", group, "-t", topic).output
    finally:
        if c is not None:
            c.shutdown()
        p.shutdown()


def test_unreachable_namesrv_is_one_clear_line():
    res = rmq("admin", "topicList", "-n", "127.0.0.1:1", ok=False)
    assert res.exit_code == 1
    assert "Error:" in res.output and "127.0.0.1:1" in res.output and "Traceback" not in res.output
    res = rmq("admin", "clusterList", "-n", "127.0.0.1:1", "--json", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_usage_errors():
    res = rmq("admin", "updateTopic", "-n", "127.0.0.1:1", "-t", "X", ok=False)
    assert res.exit_code == 2 and "-c CLUSTER or -b BROKER_ADDR" in res.output
    res = rmq("admin", "updateTopic", "-n", "127.0.0.1:1", "-t", "bad topic!", "-b", "x:1", ok=False)
    assert res.exit_code == 1 and "illegal characters" in res.output


def test_bench_rmq_both_clients(ns):
    out = rmq_json("bench", "rmq", "--namesrv", ns, "--count", "200", "--size", "64", "--client", "both",
                   "--consume-timeout", "30")
    assert out["count"] == 200 and not out["embedded"]
    for name in ("python", "cpp"):
        r = out["results"][name]
        assert "error" not in r, r
        assert r["sent"] == 200 and r["consumed"] == 201 and r["consume_complete"]
        assert r["send_msgs_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0


def test_bench_rmq_embedded_server():
    """The embedded broker, with a pullBatchSize above its default cap (it is raised to match)
    and listener calls of several messages: every message is consumed once."""
    out = rmq_json("bench", "rmq", "--count", "300", "--client", "python", "--pull-batch-size", "128",
                   "--consume-batch", "16", "--broker-set", "flushCommitLogTimed=true")
    assert out["embedded"] and (out["pull_batch_size"], out["consume_batch"]) == (128, 16)
    assert out["broker_set"] == {"flushCommitLogTimed": True}
    assert out["results"]["python"]["consumed"] == 301 and out["results"]["python"]["consume_complete"]
    # --broker-set is checked as the broker's YAML is, before anything starts
    for bad, says in (("flushCommitLogTimd=true", "did you mean 'flushCommitLogTimed'"),
                      ("flushCommitLogTimed=maybe", "expected true or false"), ("flushCommitLogTimed", "KEY=VALUE")):
        res = rmq("bench", "rmq", "--broker-set", bad, ok=False)
        assert res.exit_code == 2 and says in res.output, res.output


def test_bench_rmq_concurrent_batched_async_and_vs_kafka():
    """Two sending processes of two threads each in batches, the Kafka path of the same broker
    beside it, and the broker's CPU per message (the embedded broker runs in a child process)."""
    out = rmq_json("bench", "rmq", "--count", "400", "--client", "python", "--threads", "2", "--processes", "2",
                   "--batch", "10", "--vs-kafka", "--consume-timeout", "60")
    assert (out["threads"], out["processes"], out["batch"]) == (2, 2, 10) and out["broker_pid"]
    py = out["results"]["python"]
    assert py["sent"] == 400 and py["consumed"] == 402 and py["consume_complete"]   # + one warm-up per process
    # CPU comes from /proc in clock ticks (10 ms): consuming 402 small messages may take less than one
    assert py["broker_cpu_us_per_send"] > 0 and py["broker_cpu_us_per_consumed"] >= 0 and "send_errors" not in py
    kafka = out["results"]["kafka"]
    assert kafka["consumed"] == 400 and kafka["consume_complete"] and kafka["broker_cpu_us_per_consumed"] > 0
    out = rmq_json("bench", "rmq", "--count", "300", "--client", "python", "--async", "20")
    r = out["results"]["python"]
    assert "error" not in r, r                          # the client's error, if the run failed
    assert out["window"] == 20 and r["consumed"] == 301 and "send_errors" not in r
    res = rmq("bench", "rmq", "--batch", "2", "--async", "5", ok=False)
    assert res.exit_code == 2 and "--batch or --async" in res.output
    res = rmq("bench", "rmq", "--vs-kafka", "--server", "inproc", ok=False)
    assert res.exit_code == 2 and "--server process" in res.output


# ------------------------------------------------------------------------------- issue 5 commands
@pytest.fixture(scope="module")
def cluster5(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("rmq-admin5"))
    c.add_broker("broker-a", messageDelayLevel="1s 1s 1s 1s 1s 1s", enablePropertyFilter=True,
                 transactionTimeout=500, transactionCheckInterval=300, transactionCheckMax=2)
    c.wait_registered("broker-a")
    yield c
    c.close()


def test_send_with_properties_and_delay_then_sql_and_tag_pulls(cluster5):
    ns = cluster5.namesrv_addr
    topic = f"AdminSql_{os.getpid()}"
    rmq("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
    for i in range(4):
        rmq("admin", "sendMessage", "-n", ns, "-t", topic, "-p", f"o{i}", "-c", f"T{i % 2}", "-P", f"amount={i * 10}",
            "-P", "region=eu")
    got = rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic, "--sql", "amount >= 20 AND region = 'eu'")
    assert [m["body"] for m in got["messages"]] == ["o2", "o3"]
    got = rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic, "--expression", "T1")
    assert [m["body"] for m in got["messages"]] == ["o1", "o3"]
    delayed = rmq_json("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "later", "-d", "2")
    assert delayed["delayLevel"] == 2 and delayed["sendStatus"] == "SEND_OK"
    assert "later" not in [m["body"] for m in rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic)["messages"]]
    wait_until(lambda: "later" in [m["body"] for m in rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic)["messages"]],
               5, "the delayed message")
    bad = rmq("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "x", "-P", "novalue", ok=False)
    assert bad.exit_code != 0 and "KEY=VALUE" in bad.output


def test_push_consume_retries_to_dlq_then_resend_dlq(cluster5):
    ns = cluster5.namesrv_addr
    topic = f"AdminDlq_{os.getpid()}"
    group = f"cg_admin_dlq_{os.getpid()}"
    rmq("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
    rmq("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "poison", "-k", "dead-1")
    out = rmq("admin", "pushConsume", "-n", ns, "-t", topic, "-g", group, "--fail", "always",
              "--max-reconsume-times", "1", "--count", "2", "--duration", "15", "--json").output
    recs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert [(r["body"], r["reconsumeTimes"], r["status"]) for r in recs] == \
        [("poison", 0, "RECONSUME_LATER"), ("poison", 1, "RECONSUME_LATER")]
    wait_until(lambda: rmq_json("admin", "queryMsgByKey", "-n", ns, "-t", f"%DLQ%{group}", "-k", "dead-1")["messages"],
               5, "the dead letter")
    res = rmq_json("admin", "resendDLQ", "-n", ns, "-g", group)
    assert res["resent"] == 1 and res["brokers"][0]["destination"] == f"%RETRY%{group}"
    assert rmq_json("admin", "resendDLQ", "-n", ns, "-g", group)["resent"] == 0
    out = rmq("admin", "pushConsume", "-n", ns, "-t", topic, "-g", group, "--count", "1", "--duration", "10",
              "--json").output
    recs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert [(r["body"], r["topic"], r["status"]) for r in recs] == [("poison", topic, "CONSUME_SUCCESS")]
    assert rmq("admin", "resendDLQ", "-n", ns, "-g", "no-such-group", ok=False).exit_code != 0


def test_transactional_send_and_check_back_from_the_cli(cluster5):
    ns = cluster5.namesrv_addr
    topic = f"AdminTx_{os.getpid()}"
    rmq("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
    r = rmq_json("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "rolled back", "--transaction", "rollback")
    assert r["localTransactionState"] == "ROLLBACK_MESSAGE"
    r = rmq_json("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "checked", "--transaction", "unknown",
                 "--check-answer", "commit", "--check-wait", "10")
    assert r["localTransactionState"] == "UNKNOW" and len(r["checkBacks"]) == 1
    assert r["checkBacks"][0]["answer"] == "COMMIT_MESSAGE" and r["checkBacks"][0]["transactionId"] == r["msgId"]
    wait_until(lambda: [m["body"] for m in rmq_json("admin", "consumeMessage", "-n", ns, "-t", topic)["messages"]]
               == ["checked"], 5, "only the checked message is visible")


def test_push_consume_idempotent_skips_a_duplicate_key(cluster5, tmp_path):
    """idempotent_listener around a one-argument listener on a real push consumer: the second
    message with the same key is skipped (and acknowledged)."""
    ns = cluster5.namesrv_addr
    topic = f"AdminIdem_{os.getpid()}"
    rmq("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
    for _ in range(2):
        rmq("admin", "sendMessage", "-n", ns, "-t", topic, "-p", "refund 9", "-k", "refund-9")
    out = rmq("admin", "pushConsume", "-n", ns, "-t", topic, "-g", f"cg_idem_{os.getpid()}", "--idempotent",
              str(tmp_path / "dedup.sqlite3"), "--count", "2", "--duration", "15", "--json").output
    recs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert sorted(r["status"].split(" ")[0] for r in recs) == ["CONSUME_SUCCESS", "SKIPPED"]
