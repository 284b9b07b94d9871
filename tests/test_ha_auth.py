"""HA port authentication when the master has aclEnable (issue 22, rmq/server/ha.py), with real
`rmq broker -c` processes on 127.0.0.1: a slave with an admin account's haAccessKey/haSecretKey
replicates (and its SlaveSynchronize requests pass the master's ACL); a raw client that sends the old
slave handshake, or answers the challenge with an unknown account, gets no commitlog bytes and the
master logs who and why; slaves with a wrong secret, a non-admin account or no credentials are
refused, say why in their log and keep retrying."""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time

import pytest
import yaml

from rmq.common.acl import sign_ext_fields
from rmq.remoting import KVTable, RequestCode, ResponseCode
from tests.remoting_harness import SyncClient
from tests.test_cluster_processes import procs, spawn, wait_file  # noqa: F401 - procs is a fixture
from tests.test_ha import _conf, ha_hello, same_commitlog, wait_log

pytestmark = pytest.mark.timeout(180)

ADMIN, ADMIN_SECRET = "replicator", "ha-s3cret"
USER, USER_SECRET = "appuser", "app-s3cret"
PLAIN_ACL = {
    "globalWhiteRemoteAddresses": [],
    "accounts": [
        {"accessKey": ADMIN, "secretKey": ADMIN_SECRET, "admin": True},
        {"accessKey": USER, "secretKey": USER_SECRET, "admin": False, "defaultTopicPerm": "PUB|SUB",
         "defaultGroupPerm": "SUB"},
    ],
}


def signed(addr: str, code: int, ext: dict | None = None):
    c = SyncClient(addr)
    try:
        return c.request(code, sign_ext_fields(dict(ext or {}), None, ADMIN, ADMIN_SECRET))
    finally:
        c.close()


def max_offset(addr: str) -> int:
    r = signed(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(KVTable.decode(r.body).table["commitLogMaxOffset"])


def start(procs, tmp_path, name, role, ns, **kw):  # noqa: F811
    path = _conf(tmp_path, name, "broker-a", role, ns=ns, aclEnable=True, aclFile=str(tmp_path / "plain_acl.yml"),
                 **kw)
    ready = tmp_path / f"{name}.json"
    p = spawn(procs, ["broker", "-c", str(path), "--ready-file", str(ready)], tmp_path / f"{name}.log")
    return p, ready


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A NameServer, an ASYNC_MASTER with aclEnable and its slave holding the admin account."""
    tmp_path = tmp_path_factory.mktemp("ha-auth")
    (tmp_path / "plain_acl.yml").write_text(yaml.safe_dump(PLAIN_ACL))
    started: list = []
    try:
        nsr = tmp_path / "ns.json"
        pns = spawn(started, ["namesrv", "--port", "0", "--ready-file", str(nsr)], tmp_path / "ns.log")
        ns = wait_file(nsr, pns)["namesrv"]
        pm, rm = start(started, tmp_path, "m", "ASYNC_MASTER", ns)
        m = wait_file(rm, pm)
        ps, rs = start(started, tmp_path, "s", "SLAVE", ns, broker_id=1, haMasterAddress=m["ha"],
                       haAccessKey=ADMIN, haSecretKey=ADMIN_SECRET)
        s = wait_file(rs, ps)
        wait_log(tmp_path / "m.log", f"connected as accessKey '{ADMIN}'", 20)
        yield {"tmp": tmp_path, "ns": ns, "m": m, "s": s, "procs": started}
    finally:
        for p in started:
            if p.poll() is None:
                p.terminate()
        for p in started:
            try:
                p.wait(15)
            except Exception:  # noqa: BLE001
                p.kill()


def test_authenticated_slave_replicates(pair):
    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.message import SendStatus
    m, s = pair["m"], pair["s"]
    r = signed(m["brokerAddr"], RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "ha-auth", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
        "topicFilterType": "SINGLE_TAG"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    p = Producer("pg-ha-auth", pair["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-auth",
                                                                access_key=USER, secret_key=USER_SECRET))
    p.start()
    try:
        results = [p.send(Message("ha-auth", b"with credentials %d" % i)) for i in range(30)]
    finally:
        p.shutdown()
    assert {r.send_status for r in results} == {SendStatus.SEND_OK}
    top = stop = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        top, stop = max_offset(m["brokerAddr"]), max_offset(s["brokerAddr"])
        if top > 0 and stop == top:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"slave at {stop}, master at {top}")
    same_commitlog(m["store"], s["store"], top)
    # SlaveSynchronize's requests are signed with the same account: the topic reached the slave
    deadline = time.monotonic() + 15
    while b'"ha-auth"' not in (signed(s["brokerAddr"], RequestCode.GET_ALL_TOPIC_CONFIG).body or b""):
        assert time.monotonic() < deadline, "topic ha-auth not synced to the slave"
        time.sleep(0.2)
    assert "slave sync from master" not in open(pair["tmp"] / "s.log", errors="replace").read()


def _read_all(sock: socket.socket, timeout: float = 15.0) -> bytes:
    """Everything the master sends until it closes the connection (or `timeout`)."""
    sock.settimeout(1.0)
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def _challenge(buf: bytes) -> tuple[int, int, str, bytes, bytes]:
    """(status, masterMaxOffset, brokerName, nonce, rest) of a challenge."""
    magic, status, top, n = struct.unpack_from(">4sBqH", buf)
    assert magic == b"RHA1"
    name = buf[15:15 + n].decode()
    return status, top, name, buf[15 + n:15 + n + 32], buf[15 + n + 32:]


def test_old_handshake_and_unknown_account_get_no_commitlog(pair):
    m = pair["m"]
    assert max_offset(m["brokerAddr"]) > 0  # there is a commitlog to leak
    host, port = m["ha"].rsplit(":", 1)
    mlog = pair["tmp"] / "m.log"
    failed = b"RHA1" + struct.pack(">BqH", 4, 0, 8) + b"broker-a"  # the AUTH_FAILED hello
    # the old slave handshake, then silence: the challenge, AUTH_FAILED after 5 s, and the connection closed
    with socket.create_connection((host, int(port)), 3) as sock:
        sock.sendall(ha_hello("broker-a", 0))
        got = _read_all(sock)
    status, top, name, nonce, rest = _challenge(got)
    assert (status, top, name, len(nonce), rest) == (3, 0, "broker-a", 32, failed)
    line = wait_log(mlog, "did not answer the challenge within 5 s").splitlines()
    line = next(ln for ln in line if "did not answer the challenge" in ln)
    assert "refused connection from 127.0.0.1:" in line and "accessKey None" in line
    assert "nothing of the commitlog sent" in line
    # an answer for an account the master does not have: AUTH_FAILED (4) and closed, no frames
    with socket.create_connection((host, int(port)), 3) as sock:
        sock.sendall(ha_hello("broker-a", 0))
        sock.settimeout(5)
        head = b""
        while len(head) < 15 + 8 + 32:
            head += sock.recv(15 + 8 + 32 - len(head))
        _, _, _, nonce, _ = _challenge(head)
        mac = hmac.new(b"guess", nonce + b"broker-a" + struct.pack(">q", 0), hashlib.sha256).digest()
        sock.sendall(struct.pack(">H", 7) + b"nobody1" + mac)
        got = _read_all(sock)
    assert got == failed  # and nothing after it
    wait_log(mlog, "accessKey 'nobody1'): no account with this accessKey in")


def test_wrong_secret_non_admin_and_no_credentials_are_refused(pair, tmp_path, procs):  # noqa: F811
    (tmp_path / "plain_acl.yml").write_text(yaml.safe_dump(PLAIN_ACL))
    m, ns = pair["m"], pair["ns"]
    slaves = {"w": {"haAccessKey": ADMIN, "haSecretKey": "wrong"},
              "u": {"haAccessKey": USER, "haSecretKey": USER_SECRET},
              "n": {}}
    started = {n: start(procs, tmp_path, n, "SLAVE", "", broker_id=2 + i, haMasterAddress=m["ha"], **kw)
               for i, (n, kw) in enumerate(slaves.items())}
    for n, (p, ready) in started.items():
        wait_file(ready, p)
    mlog = pair["tmp"] / "m.log"
    wait_log(mlog, f"accessKey '{ADMIN}'): the HMAC does not match (wrong haSecretKey)", 20)
    wait_log(mlog, f"accessKey '{USER}'): the account is not admin: true in", 20)
    wait_log(mlog, "it closed the connection instead of answering the challenge", 20)
    # each slave says why, and tries again later (RECONNECT_DELAY_S) instead of exiting
    refused = "refused this slave's HA authentication as accessKey"
    for n, text in (("w", refused), ("u", refused), ("n", "requires HA authentication (its aclEnable is on)")):
        body = wait_log(tmp_path / f"{n}.log", text, 20)
        deadline = time.monotonic() + 20
        while body.count(text) < 2:
            assert time.monotonic() < deadline, f"slave {n} did not retry:\n{body[-2000:]}"
            time.sleep(0.2)
            body = open(tmp_path / f"{n}.log", errors="replace").read()
        assert started[n][0].poll() is None, body[-2000:]
        assert "Traceback" not in body
    # none of them received commitlog bytes
    for n in slaves:
        cl = os.path.join(tmp_path / n, "commitlog")
        assert not os.path.isdir(cl) or all(os.path.getsize(os.path.join(cl, f)) == 0 or
                                            not open(os.path.join(cl, f), "rb").read(4096).strip(b"\0")
                                            for f in os.listdir(cl))
    # the authenticated slave is untouched
    assert max_offset(pair["s"]["brokerAddr"]) == max_offset(m["brokerAddr"])


def test_slave_credentials_need_both_keys(tmp_path):
    from rmq.config import ConfigError, load_config
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"brokerRole": "SLAVE", "brokerId": 1, "haAccessKey": ADMIN}))
    with pytest.raises(ConfigError, match=r"s\.yaml: haAccessKey and haSecretKey: expected both"):
        load_config(str(path))
