"""Master/slave replication (SPEC §9, rmq/server/ha.py) with real `rmq namesrv` / `rmq broker -c`
processes on 127.0.0.1: SYNC_MASTER and ASYNC_MASTER replicate what the Python client and a Kafka
client (confluent-kafka, acks=all) send; the slave's commitlog is a byte copy of the master's and
has its own consumequeues; a SYNC_MASTER without a slave answers SLAVE_NOT_AVAILABLE, with a slave
that never acknowledges FLUSH_SLAVE_TIMEOUT; bad HA input is logged and the master keeps serving;
when the master is killed a consumer reads from the slave."""
from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time

import pytest
import yaml

from rmq.remoting import KVTable, RequestCode, ResponseCode
from tests.remoting_harness import SyncClient, send_message
from tests.test_cluster_processes import procs, spawn, wait_file  # noqa: F401 - procs is a fixture

pytestmark = pytest.mark.timeout(120)

FILE_SIZE = 1024 * 1024
MAGIC = b"RHA1"


def _conf(tmp_path, name, broker_name, role, ns="", broker_id=0, **extra):
    conf = {"brokerClusterName": "HACluster", "brokerName": broker_name, "brokerId": broker_id, "brokerRole": role,
            "namesrvAddr": ns, "brokerIP1": "127.0.0.1", "listenPort": 0, "storePathRootDir": str(tmp_path / name),
            "registerNameServerPeriod": 1000, "mappedFileSizeCommitLog": FILE_SIZE,
            "mappedFileSizeConsumeQueue": 20 * 1000, "maxMessageSize": 64 * 1024, "maxHashSlotNum": 1000,
            "maxIndexNum": 4000, "kafkaEnable": False, "slaveSynchronizeInterval": 500, "syncFlushTimeout": 1500}
    conf.update(extra)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path


def start_broker(procs, tmp_path, name, broker_name, role, **kw):  # noqa: F811
    path = _conf(tmp_path, name, broker_name, role, **kw)
    ready = tmp_path / f"{name}.json"
    p = spawn(procs, ["broker", "-c", str(path), "--ready-file", str(ready)], tmp_path / f"{name}.log")
    return p, ready


def runtime_info(addr: str) -> dict:
    c = SyncClient(addr)
    try:
        r = c.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        assert r.code == ResponseCode.SUCCESS, r.remark
        return KVTable.decode(r.body).table
    finally:
        c.close()


def max_offset(addr: str) -> int:
    return int(runtime_info(addr)["commitLogMaxOffset"])


def wait_caught_up(master: str, slave: str, timeout=15.0) -> int:
    deadline = time.monotonic() + timeout
    m = s = -1
    while time.monotonic() < deadline:
        m, s = max_offset(master), max_offset(slave)
        if m == s and m > 0:
            return m
        time.sleep(0.05)
    raise AssertionError(f"slave at {s}, master at {m}")


def wait_log(path, text: str, timeout=10.0) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = open(path, errors="replace").read()
        if text in body:
            return body
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {path}:\n{body[-3000:]}")


def start_namesrv(procs, tmp_path) -> str:
    """A NameServer that expires silent brokers after 3 s; returns its address."""
    ready = tmp_path / "ns.json"
    p = spawn(procs, ["namesrv", "--port", "0", "--broker-expiry-s", "3", "--scan-interval-s", "1",
                      "--ready-file", str(ready)], tmp_path / "ns.log")
    return wait_file(ready, p)["namesrv"]


def start_sync_pair(procs, tmp_path, ns: str, **kw):
    """broker-a as SYNC_MASTER ("m") and its SLAVE ("s"), both with the settings kw, the slave
    learning the master's HA address from the NameServer; returns (master proc, slave proc, master's
    ready info, slave's ready info) once the master logged the slave's connection."""
    pm, rm = start_broker(procs, tmp_path, "m", "broker-a", "SYNC_MASTER", ns=ns, **kw)
    ps, rs = start_broker(procs, tmp_path, "s", "broker-a", "SLAVE", ns=ns, broker_id=1, **kw)
    m, s = wait_file(rm, pm), wait_file(rs, ps)
    wait_log(tmp_path / "m.log", "HA: slave 127.0.0.1:", 15)
    return pm, ps, m, s


def create_topic(addr: str, topic: str, queues: int = 4) -> None:
    c = SyncClient(addr)
    try:
        r = c.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
            "perm": "6", "topicFilterType": "SINGLE_TAG"})
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        c.close()


def same_commitlog(master_store: str, slave_store: str, upto: int) -> None:
    """The slave's commitlog files hold the master's bytes [0, upto)."""
    done = 0
    while done < upto:
        name = f"{done:020d}"
        n = min(FILE_SIZE, upto - done)
        with open(os.path.join(master_store, "commitlog", name), "rb") as fm, \
                open(os.path.join(slave_store, "commitlog", name), "rb") as fs:
            assert fm.read(n) == fs.read(n), f"commitlog file {name} differs"
        done += FILE_SIZE


def ha_hello(name: str, offset: int) -> bytes:
    raw = name.encode()
    return MAGIC + struct.pack(">H", len(raw)) + raw + struct.pack(">q", offset)


def read_master_hello(sock) -> tuple[int, int, str]:
    sock.settimeout(5)
    buf = b""
    while len(buf) < 15:
        chunk = sock.recv(15 - len(buf))
        if not chunk:
            raise AssertionError(f"closed after {buf!r}")
        buf += chunk
    magic, status, top, n = struct.unpack(">4sBqH", buf)
    assert magic == MAGIC
    name = b""
    while len(name) < n:
        name += sock.recv(n - len(name))
    return status, top, name.decode()


# ------------------------------------------------------------------ store side (no sockets)
def _copy_all(master, slave, batch=32 * 1024, start=None) -> int:
    """What an HAConnection does, without the socket: ranges from the slave's end until none is left."""
    from rmq.store import ha as store_ha
    off = store_ha.transfer_start_offset(master, store_ha.max_phy_offset(slave)) if start is None else start
    frames = 0
    for _ in range(100_000):
        data = store_ha.get_commitlog_data(master, off, batch)
        if not data:
            break
        off = store_ha.append_to_commitlog(slave, off, data)
        frames += 1
    return frames


def test_store_ranges_copy_commitlog_and_slave_dispatches(store_factory, tmp_path):
    from rmq.common.message import decode_message
    from rmq.store import Message
    from rmq.store import ha as store_ha
    size = 64 * 1024
    master = store_factory(root=str(tmp_path / "m"), mappedFileSizeCommitLog=size, maxMessageSize=16 * 1024)
    slave = store_factory(root=str(tmp_path / "s"), mappedFileSizeCommitLog=size, maxMessageSize=16 * 1024,
                          brokerRole="SLAVE")
    for i in range(300):  # ~ 3 files: rollover and END_OF_FILE blank units
        body = bytes([65 + i % 26]) * (100 + (i * 37) % 900)
        assert master.put_message(Message("T", body, queue_id=i % 3, properties={"KEYS": f"k{i}"})).ok
    # a slave refuses sends: its log is the master's copy
    assert slave.put_message(Message("T", b"x")).status.value == "SERVICE_NOT_AVAILABLE"
    frames = _copy_all(master, slave, batch=5000, start=0)  # the whole history, not just the last file
    top = master.commitlog.max_offset
    assert frames > 3 and slave.commitlog.max_offset == top
    for f in master.commitlog.queue.files:  # byte-identical files
        g = slave.commitlog.queue.find_by_offset(f.file_from_offset)
        assert g is not None and g.read(0, f.wrote_position) == f.read(0, f.wrote_position)
    # every range ends on a unit boundary and never crosses a file
    off = 0
    for _ in range(1000):
        data = store_ha.get_commitlog_data(master, off, 3000)
        if not data:
            break
        assert off // size == (off + len(data) - 1) // size
        off += len(data)
        assert off == top or master.commitlog.read_message(off) is not None or off % size == 0
    # the slave's reput built consumequeue and index from the copied bytes
    for q in range(3):
        assert slave.get_max_offset_in_queue("T", q) == master.get_max_offset_in_queue("T", q) == 100
    res = slave.get_message("G", "T", 1, 0, 5)
    assert [decode_message(r).body for r in res.messages] == [decode_message(r).body for r in
                                                              master.get_message("G", "T", 1, 0, 5).messages]
    assert [m.body for m in slave.query_message("T", "k299")] == [bytes([65 + 299 % 26]) * (100 + (299 * 37) % 900)]
    # bytes that do not start at the slave's end are refused
    with pytest.raises(store_ha.HAApplyError):
        store_ha.append_to_commitlog(slave, top - 10, b"\0" * 10)
    assert store_ha.get_commitlog_data(master, top, 100) == b""
    assert store_ha.get_commitlog_data(master, top + size * 5, 100) is None


def test_store_new_slave_starts_at_masters_last_file(store_factory, tmp_path):
    from rmq.store import Message
    from rmq.store import ha as store_ha
    size = 16 * 1024
    master = store_factory(root=str(tmp_path / "m"), mappedFileSizeCommitLog=size, maxMessageSize=4096)
    slave = store_factory(root=str(tmp_path / "s"), mappedFileSizeCommitLog=size, maxMessageSize=4096,
                          brokerRole="SLAVE")
    for i in range(100):
        assert master.put_message(Message("T", b"y" * 500, queue_id=0)).ok
    start = store_ha.transfer_start_offset(master, 0)
    assert start == master.commitlog.max_offset - master.commitlog.max_offset % size and start > 0
    _copy_all(master, slave)
    assert slave.commitlog.min_offset == start and slave.commitlog.max_offset == master.commitlog.max_offset
    assert slave.get_max_offset_in_queue("T", 0) == 100
    empty = store_factory(root=str(tmp_path / "s2"), mappedFileSizeCommitLog=size, maxMessageSize=4096,
                          brokerRole="SLAVE")
    with pytest.raises(store_ha.HAApplyError):  # an empty slave takes bytes at a file start only
        store_ha.append_to_commitlog(empty, 5, b"x")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One NameServer; broker-a SYNC_MASTER (Kafka listener on) with a slave that learns the master's
    HA address from the NameServer; broker-b ASYNC_MASTER with a slave given haMasterAddress."""
    tmp_path = tmp_path_factory.mktemp("ha")
    started: list = []
    try:
        ns = start_namesrv(started, tmp_path)
        pa, ra = start_broker(started, tmp_path, "a", "broker-a", "SYNC_MASTER", ns=ns, kafkaEnable=True, kafkaPort=0)
        # broker-b sends any consumer that is behind to its slave (ratio 0: every pull short of the end)
        pb, rb = start_broker(started, tmp_path, "b", "broker-b", "ASYNC_MASTER", ns=ns, slaveReadEnable=True,
                              accessMessageInMemoryMaxRatio=0)
        a, b = wait_file(ra, pa), wait_file(rb, pb)
        pas, ras = start_broker(started, tmp_path, "a-s", "broker-a", "SLAVE", ns=ns, broker_id=1)
        pbs, rbs = start_broker(started, tmp_path, "b-s", "broker-b", "SLAVE", ns=ns, broker_id=1,
                                haMasterAddress=b["ha"])
        a_s, b_s = wait_file(ras, pas), wait_file(rbs, pbs)
        for path in (tmp_path / "a.log", tmp_path / "b.log"):
            wait_log(path, "HA: slave 127.0.0.1:", 15)
        yield {"tmp": tmp_path, "ns": ns, "a": a, "b": b, "a_s": a_s, "b_s": b_s, "procs": started,
               "pa": pa, "pas": pas, "pbs": pbs}
    finally:
        for p in started:
            if p.poll() is None:
                p.terminate()
        for p in started:
            try:
                p.wait(10)
            except Exception:  # noqa: BLE001
                p.kill()


def test_sync_master_replicates_python_and_kafka(cluster):
    from confluent_kafka import Producer as KafkaProducer

    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.message import SendStatus
    a, a_s = cluster["a"], cluster["a_s"]
    assert a["brokerRole"] == "SYNC_MASTER" and a_s["brokerRole"] == "SLAVE" and "ha" in a
    create_topic(a["brokerAddr"], "ha-sync")
    p = Producer("pg-ha-sync", cluster["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-sync"))
    p.start()
    try:
        results = [p.send(Message("ha-sync", f"sync-{i}".encode(), keys=f"k{i}")) for i in range(37)]
        results.append(p.send_batch([Message("ha-sync", f"sync-{i}".encode()) for i in range(37, 40)]))
    finally:
        p.shutdown()
    assert {r.send_status for r in results} == {SendStatus.SEND_OK}
    # a SYNC_MASTER answered each send after the slave had it: the slave is that far already
    assert max_offset(a_s["brokerAddr"]) >= max_offset(a["brokerAddr"])

    errors, acked = [], []
    kp = KafkaProducer({"bootstrap.servers": a["kafka"], "acks": "all", "linger.ms": 0,
                        "message.timeout.ms": 15000})
    for i in range(40):
        kp.produce("ha-sync", value=f"kafka-{i}".encode(), key=f"kk{i}".encode(),
                   on_delivery=lambda err, msg: (errors if err else acked).append(err or msg.offset()))
    assert kp.flush(20) == 0
    assert errors == [] and len(acked) == 40
    top = wait_caught_up(a["brokerAddr"], a_s["brokerAddr"])
    same_commitlog(a["store"], a_s["store"], top)
    info, s_info = runtime_info(a["brokerAddr"]), runtime_info(a_s["brokerAddr"])
    assert (info["haRole"], info["haConnections"], s_info["haMasterConnected"]) == ("SYNC_MASTER", "1", "true")
    assert 0 < int(info["push2SlaveMaxOffset"]) <= top and s_info["haMasterAddress"] == a["ha"]
    # the slave dispatched its own consumequeues (and serves them: see the failover test)
    qdir = os.path.join(a_s["store"], "consumequeue", "ha-sync")
    assert os.path.isdir(qdir) and sorted(os.listdir(qdir))


def test_async_master_replicates_and_slave_refuses_sends(cluster):
    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.message import SendStatus
    b, b_s = cluster["b"], cluster["b_s"]
    create_topic(b["brokerAddr"], "ha-async")
    p = Producer("pg-ha-async", cluster["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-async"))
    p.start()
    try:
        # 1.2 MB in 1 MB commitlog files: ranges of 32 KiB, a file rollover with its blank unit
        results = [p.send(Message("ha-async", bytes([97 + i % 26]) * 2000 + str(i).encode())) for i in range(600)]
        top = wait_caught_up(b["brokerAddr"], b_s["brokerAddr"])
        assert top > FILE_SIZE
        same_commitlog(b["store"], b_s["store"], top)
        # the slave killed (-9) while the master takes more, then restarted: it resumes from its own end
        pbs = cluster["pbs"]
        os.kill(pbs.pid, signal.SIGKILL)
        pbs.wait(10)
        results += [p.send(Message("ha-async", b"while the slave is down %d" % i)) for i in range(50)]
        ready = cluster["tmp"] / "b-s.json"
        os.unlink(ready)
        pbs = spawn(cluster["procs"], ["broker", "-c", str(cluster["tmp"] / "b-s.yaml"), "--ready-file", str(ready)],
                    cluster["tmp"] / "b-s-2.log")
        b_s = cluster["b_s"] = wait_file(ready, pbs)
    finally:
        p.shutdown()
    assert {r.send_status for r in results} == {SendStatus.SEND_OK}
    top = wait_caught_up(b["brokerAddr"], b_s["brokerAddr"])
    same_commitlog(b["store"], b_s["store"], top)
    text = wait_log(cluster["tmp"] / "b-s-2.log", "slave max offset ")
    resumed = int(text.split("slave max offset ")[1].split()[0])
    assert FILE_SIZE < resumed < top  # from its own end, not from scratch
    assert os.listdir(os.path.join(b_s["store"], "consumequeue", "ha-async"))
    # topic config synced (SlaveSynchronize), and the slave is read-only for sends
    deadline = time.monotonic() + 10
    c = SyncClient(b_s["brokerAddr"])
    try:
        while time.monotonic() < deadline:
            r = c.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
            if b'"ha-async"' in (r.body or b""):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("topic ha-async not synced to the slave")
        r = send_message(c, "ha-async", b"to-slave")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    finally:
        c.close()


def test_consumer_behind_is_redirected_to_slave(cluster):
    """suggestWhichBrokerId: broker-b (slaveReadEnable, accessMessageInMemoryMaxRatio 0) answers a pull
    that leaves commitlog behind it with whichBrokerWhenConsumeSlowly (1); the client's next pull goes
    to the slave."""
    from rmq.client import ClientConfig, PullConsumer
    from rmq.client.message import PullStatus
    b_s = cluster["b_s"]
    c = PullConsumer("cg-ha-slow", cluster["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-slow"))
    c.start()
    try:
        mq = c.fetch_subscribe_message_queues("ha-async")[0]
        first = c.pull(mq, "*", 0, 4)
        assert first.pull_status is PullStatus.FOUND and first.suggest_which_broker_id == 1
        before = int(runtime_info(b_s["brokerAddr"])["getMessageTimesTotal"])
        second = c.pull(mq, "*", first.next_begin_offset, 4)
        assert second.pull_status is PullStatus.FOUND
        assert [m.queue_offset for m in second.msg_found_list] == list(range(4, 8))
        assert int(runtime_info(b_s["brokerAddr"])["getMessageTimesTotal"]) == before + 4  # served by the slave
    finally:
        c.shutdown()


def test_sync_master_without_slave(tmp_path, procs):  # noqa: F811
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as KafkaProducer
    # SYNC_FLUSH too: the send waits for the group commit, then for the slave
    p, ready = start_broker(procs, tmp_path, "c", "broker-c", "SYNC_MASTER", syncFlushTimeout=800, kafkaEnable=True,
                            kafkaPort=0, flushDiskType="SYNC_FLUSH")
    c = wait_file(ready, p)
    create_topic(c["brokerAddr"], "ha-lonely")
    cli = SyncClient(c["brokerAddr"])
    try:
        r = send_message(cli, "ha-lonely", b"no slave")
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
        assert r.ext_fields.get("msgId")  # stored on the master all the same
        # Kafka acks=all: the records are appended, the follower is missing; acks=1 does not wait
        got = {}
        for acks in ("all", "1"):
            kp = KafkaProducer({"bootstrap.servers": c["kafka"], "acks": acks, "retries": 0, "linger.ms": 0,
                                "message.timeout.ms": 10000})
            kp.produce("ha-lonely", value=b"k", on_delivery=lambda err, msg, a=acks: got.__setitem__(a, err))
            assert kp.flush(15) == 0
        assert got["all"] is not None and got["all"].code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert got["1"] is None
        # a slave that shakes hands but never acknowledges: FLUSH_SLAVE_TIMEOUT after syncFlushTimeout
        host, port = c["ha"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), 3) as s:
            s.sendall(ha_hello("broker-c", max_offset(c["brokerAddr"])))
            assert read_master_hello(s)[0] == 0
            t0 = time.monotonic()
            r = send_message(cli, "ha-lonely", b"slave silent")
            assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
            assert time.monotonic() - t0 >= 0.7
    finally:
        cli.close()


def test_bad_ha_input_is_logged_and_master_keeps_serving(cluster, tmp_path, procs):  # noqa: F811
    from rmq.client import ClientConfig, Message, Producer
    from rmq.client.message import SendStatus
    a, a_s, b = cluster["a"], cluster["a_s"], cluster["b"]
    alog = cluster["tmp"] / "a.log"
    host, port = a["ha"].rsplit(":", 1)
    addr = (host, int(port))
    # not the HA handshake
    with socket.create_connection(addr, 3) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.settimeout(5)
        assert s.recv(100) == b""
    wait_log(alog, "did not start with the HA handshake")
    # a client that keeps trying is summarised (rmq.common.log_limit): 5 lines in full, the rest counted
    for _ in range(30):
        with socket.create_connection(addr, 3) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.settimeout(5)
            assert s.recv(100) == b""
    # (6 if more than 10 s passed between the first line and the flood: a quiet key starts over)
    assert 5 <= alog.read_text().count("did not start with the HA handshake") <= 6
    # another brokerName
    with socket.create_connection(addr, 3) as s:
        s.sendall(ha_hello("broker-zz", 0))
        assert read_master_hello(s)[0] == 1
    wait_log(alog, "its brokerName is 'broker-zz'")
    # a slave whose commitlog is ahead of the master's
    top = max_offset(a["brokerAddr"])
    with socket.create_connection(addr, 3) as s:
        s.sendall(ha_hello("broker-a", top + 10_000))
        assert read_master_hello(s)[0] == 2
    wait_log(alog, "ahead of this master's")
    # a truncated offset report
    with socket.create_connection(addr, 3) as s:
        s.sendall(ha_hello("broker-a", top))
        assert read_master_hello(s)[0] == 0
        s.sendall(b"\x00\x00\x00\x00\x01")
    wait_log(alog, "truncated frame from slave")
    # slaves on the wrong side: one pointed at a remoting (non-HA) port, one at another brokerName's
    # master, one at a fake master that sends a truncated frame
    fake = socket.create_server(("127.0.0.1", 0))
    fake_port = fake.getsockname()[1]

    def fake_master():
        fake.settimeout(20)
        try:
            conn, _ = fake.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            conn.recv(1024)
            conn.sendall(MAGIC + struct.pack(">BqH", 0, 0, 8) + b"broker-f")
            conn.sendall(struct.pack(">q", 0)[:5])
            conn.shutdown(socket.SHUT_WR)  # the 5 bytes, then end of stream (no reset)
            try:
                while conn.recv(1024):
                    pass
            except OSError:
                pass
    t = threading.Thread(target=fake_master, daemon=True)
    t.start()
    slaves = [("x1", "broker-b", a["remoting"]), ("x2", "broker-b", a["ha"]), ("x3", "broker-f", f"127.0.0.1:{fake_port}")]
    started = [(n, *start_broker(procs, tmp_path, n, bn, "SLAVE", broker_id=1, haMasterAddress=ha))
               for n, bn, ha in slaves]
    for n, p, ready in started:
        wait_file(ready, p)
    wait_log(tmp_path / "x1.log", "not the master's HA port")
    wait_log(tmp_path / "x2.log", "is brokerName 'broker-a', this slave is 'broker-b'")
    wait_log(tmp_path / "x3.log", "truncated HA frame from master")
    wait_log(alog, "its brokerName is 'broker-b'")
    fake.close()
    # the master still serves, and its real slave still replicates
    p = Producer("pg-ha-after", cluster["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-after"))
    p.start()
    try:
        r = p.send(Message("ha-sync", b"after bad input"))
    finally:
        p.shutdown()
    assert r.send_status is SendStatus.SEND_OK
    wait_caught_up(a["brokerAddr"], a_s["brokerAddr"])
    assert b  # broker-b untouched


def test_master_killed_consumer_reads_from_slave(cluster):
    """Last in the module: kills broker-a's master."""
    from rmq.client import ClientConfig, PullConsumer
    from rmq.client.message import PullStatus
    a, a_s = cluster["a"], cluster["a_s"]
    group = "cg-ha-failover"
    cfg = ClientConfig(client_ip="127.0.0.1", instance_name="ha-fo1")
    c = PullConsumer(group, cluster["ns"], config=cfg)
    c.start()
    try:
        mqs = c.fetch_subscribe_message_queues("ha-sync")
        assert {m.brokerName for m in mqs} == {"broker-a"}
        mq0 = mqs[0]
        assert c.pull(mq0, "*", 0, 1).msg_found_list  # the master creates the subscription group
        c.update_consume_offset(mq0, 3)
        c.commit_offsets()
    finally:
        c.shutdown()
    # the committed offset reaches the slave through SlaveSynchronize
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cl = SyncClient(a_s["brokerAddr"])
        try:
            r = cl.request(RequestCode.GET_ALL_CONSUMER_OFFSET, {})
        finally:
            cl.close()
        if f"ha-sync@{group}".encode() in (r.body or b""):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("consumer offset not synced to the slave")
    # delay offsets (a level-1 message delivered by the master) and subscription groups reach it too
    cl = SyncClient(a["brokerAddr"])
    try:
        r = send_message(cl, "ha-delay", b"later", props={"DELAY": "1"})
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        cl.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        cl = SyncClient(a_s["brokerAddr"])
        try:
            delay = cl.request(RequestCode.GET_ALL_DELAY_OFFSET, {}).body or b""
            groups = cl.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}).body or b""
        finally:
            cl.close()
        if b'"1":1' in delay.replace(b" ", b"") and group.encode() in groups:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"delay offsets {delay!r} / groups not synced to the slave")
    expected = wait_caught_up(a["brokerAddr"], a_s["brokerAddr"])
    assert expected > 0
    pa = cluster["pa"]
    os.kill(pa.pid, signal.SIGKILL)
    pa.wait(10)
    c = PullConsumer(group, cluster["ns"], config=ClientConfig(client_ip="127.0.0.1", instance_name="ha-fo2"))
    c.start()
    try:
        deadline = time.monotonic() + 15
        while True:  # the NameServer drops the master when its connection closes
            mqs = c.fetch_subscribe_message_queues("ha-sync")
            if mqs and c.impl.instance.find_broker_address_in_subscribe("broker-a", 0, True) is None:
                break
            assert time.monotonic() < deadline, "master still in the route"
            time.sleep(0.2)
        assert c.fetch_consume_offset(mq0) == 3  # served by the slave
        bodies = []
        for mq in mqs:
            off = 0
            for _ in range(50):
                res = c.pull(mq, "*", off, 32)
                if res.pull_status is not PullStatus.FOUND:
                    break
                bodies.extend(m.body for m in res.msg_found_list)
                off = res.next_begin_offset
        assert len(bodies) == 81  # 40 Python + 40 Kafka + 1 after the bad-input test
        assert b"sync-0" in bodies and b"kafka-39" in bodies
    finally:
        c.shutdown()
