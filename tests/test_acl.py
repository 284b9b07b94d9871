"""RocketMQ 4.x plain ACL on the broker's remoting listener (aclEnable, aclFile = plain_acl.yml): signed
requests (HmacSHA1 over the sorted ext fields and the body, as AclClientRPCHook and the stock C++ client's
set_session_credentials compute it) pass; wrong secret, no credentials, missing PUB/SUB, and admin codes
without admin are refused with NO_PERMISSION (16); whitelists skip the signature; bad files name the line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from rmq.common.acl import (PUB, SIGNATURE, SUB, AclConfigError, cal_signature,
                            combine_request_content, parse_plain_acl, sign_ext_fields)
from rmq.remoting import HeartbeatData, RemotingCommand, RequestCode, ResponseCode
from rmq.remoting.bodies import ConsumerData, SubscriptionData
from tests.remoting_harness import Cluster, SyncClient

pytestmark = pytest.mark.timeout(240)

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB|SUB
      - TopicB=SUB
      - TopicP=PUB
    groupPerms:
      - groupDenied=DENY
  - accessKey: rocketmq2
    secretKey: 87654321
    admin: true
  - accessKey: whitelisted
    secretKey: whitesecret
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""


# ------------------------------------------------------------------------------ pure logic
def test_parse_sample_file():
    cfg = parse_plain_acl(ACL_YML, "plain_acl.yml")
    assert set(cfg.accounts) == {"RocketMQ", "rocketmq2", "whitelisted"}
    a = cfg.accounts["RocketMQ"]
    assert a.secret_key == "12345678" and not a.admin
    assert a.resource_perms["TopicA"] == PUB | SUB and a.resource_perms["%RETRY%groupDenied"] == 1
    assert cfg.accounts["rocketmq2"].secret_key == "87654321" and cfg.accounts["rocketmq2"].admin
    assert cfg.is_global_white("10.10.103.77") and cfg.is_global_white("192.168.0.2")
    assert not cfg.is_global_white("192.168.0.3") and not cfg.is_global_white("127.0.0.1")
    assert cfg.allowed("RocketMQ", "TopicA", PUB) and not cfg.allowed("RocketMQ", "TopicB", PUB)
    assert cfg.allowed("RocketMQ", "anyGroup", SUB, group=True)
    assert not cfg.allowed("RocketMQ", "groupDenied", SUB, group=True)
    assert cfg.allowed("rocketmq2", "whatever", PUB)


def test_signature_is_hmac_sha1_over_sorted_values_and_body():
    ext = {"topic": "T", "producerGroup": "G", "a": "1"}
    signed = sign_ext_fields(dict(ext), b"BODY", "ak", "sk")
    # values in key order: AccessKey, a, producerGroup, topic; then the body
    assert combine_request_content(signed, b"BODY") == b"ak1GTBODY"
    assert signed[SIGNATURE] == cal_signature(b"ak1GTBODY", "sk")
    import base64
    import hashlib
    import hmac
    assert signed[SIGNATURE] == base64.b64encode(hmac.new(b"sk", b"ak1GTBODY", hashlib.sha1).digest()).decode()


@pytest.mark.parametrize("text,line,words", [
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: [1, 2\n", 4, "not valid YAML"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    topicPerms:\n      - T=READ\n", 5, "T=READ"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    admn: true\n", 4, "unknown key 'admn'"),
    ("accounts:\n  - accessKey: abc\n    secretKey: abcdefg\n", 2, "at least 6"),
    ("accounts:\n  - accessKey: abcdefg\n", 2, "secretKey is missing"),
    ("globalWhiteRemoteAddresses:\n  - 10.0.300.1\n", 2, "0..255"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n    defaultTopicPerm: ALL\n", 4, "defaultTopicPerm"),
    ("acounts: []\n", 1, "unknown key 'acounts'"),
])
def test_bad_acl_file_names_the_line(text, line, words):
    with pytest.raises(AclConfigError) as ei:
        parse_plain_acl(text, "/etc/rmq/plain_acl.yml")
    msg = str(ei.value)
    assert msg.startswith("/etc/rmq/plain_acl.yml:") and f"line {line}" in msg and words in msg, msg


# ------------------------------------------------------------------------------ remoting
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acl")
    acl_path = tmp / "plain_acl.yml"
    acl_path.write_text(ACL_YML)
    cluster = Cluster(tmp / "servers")
    ctrl, srv, addr = cluster.add_broker("broker-a", aclEnable=True, aclFile=str(acl_path))
    cluster.wait_registered("broker-a")
    home = tmp / "home"
    home.mkdir()
    yield {"cluster": cluster, "addr": addr, "srv": srv, "tmp": tmp, "acl_path": acl_path,
           "env": dict(os.environ, HOME=str(home))}
    cluster.close()


def _send_req(topic: str, body: bytes = b"hello") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}, body)


def _request(addr: str, cmd: RemotingCommand, ak: str | None = None, sk: str | None = None) -> RemotingCommand:
    if ak is not None:
        sign_ext_fields(cmd.ext_fields, cmd.body, ak, sk)
    c = SyncClient(addr)
    try:
        c.send(cmd)
        while True:  # skip requests the broker sends us (NOTIFY_CONSUMER_IDS_CHANGED)
            r = c.read(10)
            if r.is_response and r.opaque == cmd.opaque:
                return r
    finally:
        c.sock.close()


def test_signed_send_with_pub_succeeds(env):
    r = _request(env["addr"], _send_req("TopicA"), "RocketMQ", "12345678")
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_refusals_answer_no_permission(env):
    addr = env["addr"]
    cases = {
        "wrong secret": (_send_req("TopicA"), "RocketMQ", "wrongsecret", "Check signature failed"),
        "no credentials": (_send_req("TopicA"), None, None, "No accessKey"),
        "unknown account": (_send_req("TopicA"), "nobody", "12345678", "No acl config for nobody"),
        "SUB only": (_send_req("TopicB"), "RocketMQ", "12345678", "topic=TopicB"),
        "default DENY": (_send_req("TopicZ"), "RocketMQ", "12345678", "topic=TopicZ"),
        "admin code": (RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "NewT", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG"}), "RocketMQ", "12345678", "Need admin permission"),
    }
    for name, (cmd, ak, sk, words) in cases.items():
        r = _request(addr, cmd, ak, sk)
        assert r.code == ResponseCode.NO_PERMISSION and words in (r.remark or ""), (name, r)
    # the body is signed: a changed body after signing is refused
    cmd = _send_req("TopicA", b"original")
    sign_ext_fields(cmd.ext_fields, cmd.body, "RocketMQ", "12345678")
    cmd.body = b"tampered"
    r = _request(addr, cmd)
    assert r.code == ResponseCode.NO_PERMISSION, r
    assert env["srv"].remoting.request_check.__self__.refused >= 7


def test_admin_account_may_create_topics(env):
    cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "AdminMade", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG"})
    assert _request(env["addr"], cmd, "rocketmq2", "87654321").code == ResponseCode.SUCCESS


def test_pull_and_heartbeat_need_sub_on_topic_and_group(env):
    addr = env["addr"]

    def pull(topic, group):
        return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
    assert _request(addr, pull("TopicA", "g1"), "RocketMQ", "12345678").code != ResponseCode.NO_PERMISSION
    assert _request(addr, pull("TopicP", "g1"), "RocketMQ", "12345678").code == ResponseCode.NO_PERMISSION
    assert _request(addr, pull("TopicA", "groupDenied"), "RocketMQ", "12345678").code == ResponseCode.NO_PERMISSION

    def hb(topic, group):
        body = HeartbeatData(clientID="c1", consumerDataSet=[ConsumerData(groupName=group, subscriptionDataSet=[
            SubscriptionData(topic=topic, subString="*")])]).encode()
        return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
    assert _request(addr, hb("TopicA", "g1"), "RocketMQ", "12345678").code == ResponseCode.SUCCESS
    r = _request(addr, hb("TopicP", "g1"), "RocketMQ", "12345678")
    assert r.code == ResponseCode.NO_PERMISSION and "topic=TopicP" in r.remark


def test_account_white_address_skips_the_signature(env):
    r = _request(env["addr"], _send_req("TopicZ"), "whitelisted", "not-the-secret")
    assert r.code == ResponseCode.SUCCESS, r.remark  # 127.0.0.1 is this account's whiteRemoteAddress


def test_file_changes_are_reloaded_and_global_whitelist(env, tmp_path):
    from rmq.server import acl as acl_mod
    path = env["acl_path"]
    try:
        path.write_text(ACL_YML.replace("  - 10.10.103.*\n", "  - 127.0.0.*\n"))
        os.utime(path, (time.time() + 5, time.time() + 5))
        deadline = time.monotonic() + acl_mod.RELOAD_CHECK_S * 5 + 5
        r = None
        while time.monotonic() < deadline:
            r = _request(env["addr"], _send_req("TopicZ"))  # no credentials at all
            if r.code == ResponseCode.SUCCESS:
                break
            time.sleep(0.2)
        assert r is not None and r.code == ResponseCode.SUCCESS, r
        path.write_text("accounts: [\n")  # a broken edit: logged, the last good file stays
        os.utime(path, (time.time() + 10, time.time() + 10))
        time.sleep(acl_mod.RELOAD_CHECK_S + 0.3)
        assert _request(env["addr"], _send_req("TopicZ")).code == ResponseCode.SUCCESS
    finally:
        path.write_text(ACL_YML)
        os.utime(path, (time.time() + 20, time.time() + 20))
    deadline = time.monotonic() + acl_mod.RELOAD_CHECK_S * 5 + 5
    while time.monotonic() < deadline:
        if _request(env["addr"], _send_req("TopicZ")).code == ResponseCode.NO_PERMISSION:
            break
        time.sleep(0.2)
    assert _request(env["addr"], _send_req("TopicZ")).code == ResponseCode.NO_PERMISSION


def test_python_client_signs_with_session_credentials(env):
    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.errors import MQClientError
    ns = env["cluster"].namesrv_addr
    p = Producer("PyAclPG", ns, config=ClientConfig(access_key="RocketMQ", secret_key="12345678"),
                 instance_name=f"acl-{uuid.uuid4().hex[:6]}", send_msg_timeout=5)
    p.start()
    try:
        r = p.send(Message("TopicA", b"from the python client"))
        assert r.send_status.name == "SEND_OK"
    finally:
        p.shutdown()
    bad = Producer("PyAclPG2", ns, config=ClientConfig(access_key="RocketMQ", secret_key="wrong-secret"),
                   instance_name=f"acl-{uuid.uuid4().hex[:6]}", send_msg_timeout=3, retry_times_when_send_failed=0)
    bad.start()
    try:
        with pytest.raises(MQClientError) as ei:
            bad.send(Message("TopicA", b"x"))
        assert "16" in str(ei.value) or "signature" in str(ei.value).lower(), ei.value
    finally:
        bad.shutdown()


def test_admin_cli_access_key(env):
    from click.testing import CliRunner

    from rmq.cli import main
    args = ["admin", "updateTopic", "-n", env["cluster"].namesrv_addr, "-b", env["addr"], "-t", "CliAclTopic"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and "NO_PERMISSION" in res.output and "No accessKey" in res.output, res.output
    res = CliRunner().invoke(main, args + ["--access-key", "RocketMQ", "--secret-key", "12345678"])
    assert res.exit_code != 0 and "Need admin permission" in res.output, res.output
    res = CliRunner().invoke(main, args + ["--access-key", "rocketmq2", "--secret-key", "87654321"])
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------------------ the stock C++ client
def _librocketmq_error() -> str | None:
    try:
        p = subprocess.run([PY, "-c", "import rocketmq.client"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["import failed"])[-1]


CPP_PRODUCER = textwrap.dedent('''
    import json, os, sys
    from rocketmq.client import Producer, Message
    ns, topic, ak, sk = sys.argv[1:5]
    p = Producer("CppAclPG", timeout=3000, max_message_size=1 << 20)
    p.set_namesrv_addr(ns)
    if ak:
        p.set_session_credentials(ak, sk, "ALIYUN")
    p.start()
    m = Message(topic); m.set_keys("k1"); m.set_tags("t1"); m.set_body(("body for " + topic).encode())
    try:
        r = p.send_sync(m)
        out = {"ok": True, "status": r.status.name, "offset": r.offset}
    except Exception as exc:
        out = {"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:200]}
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
''')

CPP_PULL = textwrap.dedent('''
    import json, os, sys, threading
    from rocketmq.client import PullConsumer
    ns, group, topic, ak, sk, wait = sys.argv[1:7]
    c = PullConsumer(group)
    c.set_namesrv_addr(ns)
    if ak:
        c.set_session_credentials(ak, sk, "ALIYUN")
    c.start()
    got, out = [], {}
    def run():
        try:
            for m in c.pull(topic):  # the wrapper retries a refused pull forever: bounded below
                got.append(m.body.decode())
            out.update(ok=True)
        except Exception as exc:
            out.update(ok=False, error=type(exc).__name__ + ": " + str(exc)[:200])
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(float(wait))
    if t.is_alive():
        out.update(ok=False, error="pull did not finish (refused)")
    out["bodies"] = got
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
''')


def _run_cpp(env, script: str, *args) -> dict:
    path = env["tmp"] / f"cpp_{abs(hash(script))}.py"
    path.write_text(script)
    p = subprocess.run([PY, str(path), *map(str, args)], capture_output=True, text=True, timeout=90,
                       env=env["env"], cwd=str(env["tmp"]))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"C++ client failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


def _queue_total(env, topic: str) -> int:
    ctrl = env["cluster"].brokers[0][0]
    store = ctrl.store
    return sum(max(store.get_max_offset_in_queue(topic, q), 0) for q in range(8))


@pytest.fixture(scope="module")
def cpp(env):
    err = _librocketmq_error()
    if err is not None:
        pytest.skip(f"librocketmq (PyPI rocketmq) cannot load: {err}")
    return env


def test_cpp_signed_producer_with_pub_succeeds(cpp):
    before = _queue_total(cpp, "TopicA")
    out = _run_cpp(cpp, CPP_PRODUCER, cpp["cluster"].namesrv_addr, "TopicA", "RocketMQ", "12345678")
    assert out["ok"] and out["status"] == "OK", out
    assert _queue_total(cpp, "TopicA") == before + 1


def test_cpp_wrong_secret_and_no_credentials_are_refused(cpp):
    validator = cpp["srv"].remoting.request_check.__self__
    for ak, sk in (("RocketMQ", "wrong-secret"), ("", "")):
        before, refused = _queue_total(cpp, "TopicA"), validator.refused
        out = _run_cpp(cpp, CPP_PRODUCER, cpp["cluster"].namesrv_addr, "TopicA", ak, sk)
        assert not out["ok"], out
        assert _queue_total(cpp, "TopicA") == before  # nothing stored
        assert validator.refused > refused


def test_cpp_producer_without_pub_is_refused(cpp):
    out = _run_cpp(cpp, CPP_PRODUCER, cpp["cluster"].namesrv_addr, "TopicB", "RocketMQ", "12345678")
    assert not out["ok"], out


def test_cpp_consumer_needs_sub(cpp):
    ns = cpp["cluster"].namesrv_addr
    # rocketmq2 (admin, no per-resource perms) may do anything: put a message in TopicP (RocketMQ: PUB only)
    out = _run_cpp(cpp, CPP_PRODUCER, ns, "TopicP", "rocketmq2", "87654321")
    assert out["ok"], out
    assert _run_cpp(cpp, CPP_PRODUCER, ns, "TopicA", "RocketMQ", "12345678")["ok"]
    out = _run_cpp(cpp, CPP_PULL, ns, "CppAclCG", "TopicA", "RocketMQ", "12345678", 60)
    assert out["ok"] and "body for TopicA" in out["bodies"], out
    validator = cpp["srv"].remoting.request_check.__self__
    refused = validator.refused
    out = _run_cpp(cpp, CPP_PULL, ns, "CppAclCG", "TopicP", "RocketMQ", "12345678", 6)
    assert not (out["ok"] and out["bodies"]), out  # no SUB on TopicP: nothing is delivered
    assert validator.refused > refused
    out = _run_cpp(cpp, CPP_PULL, ns, "CppAclCG2", "TopicP", "rocketmq2", "87654321", 60)
    assert out["ok"] and "body for TopicP" in out["bodies"], out


# ------------------------------------------------------------------------------ startup
def test_rmq_up_with_a_bad_acl_file_names_the_line(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "plain_acl.yml").write_text("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefg\n"
                                        "    topicPerms:\n      - TopicA=PUBLISH\n")
    (tmp_path / "broker.yaml").write_text("aclEnable: true\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([PY, "-m", "rmq.cli", "up", "--config", "broker.yaml", "--data", str(tmp_path / "data"),
                        "--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path), env=env)
    assert p.returncode != 0
    assert "conf/plain_acl.yml: line 5" in p.stderr and "TopicA=PUBLISH" in p.stderr, p.stderr[-2000:]
    (tmp_path / "broker.yaml").write_text("aclEnable: true\naclFile: missing.yml\n")
    p = subprocess.run([PY, "-m", "rmq.cli", "up", "--config", "broker.yaml", "--data", str(tmp_path / "data"),
                        "--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path), env=env)
    assert p.returncode != 0 and "missing.yml: no such file" in p.stderr, p.stderr[-2000:]
