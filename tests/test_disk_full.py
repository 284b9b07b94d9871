"""Disk full is a refusal, never a crash (issue 22 item 2; it replaces tests/test_disk_faults.py).

Every test puts the store on a small tmpfs it mounts itself (mounting needs root: elsewhere the
tests are skipped, saying why) and fills it with a filler file:

- a real broker (`rmq up`) refuses a RocketMQ send with SERVICE_NOT_AVAILABLE (14) and a Kafka
  produce with KAFKA_STORAGE_ERROR (56), at the first write after the filler (the periodic
  cleanResourceInterval check is set to an hour: the put path's own check refuses), stays up for
  other connections, loses nothing acknowledged, and takes writes again once the filler is gone,
  without a restart;
- the same broker with Kafka topics in the kafka-log peer (kafkaStorage kafka-log), whose append
  really meets ENOSPC: 56, nothing half-written, resumes;
- a store opened on a full disk refuses to start with a clear error, and opens once space returns;
- the store itself, once for each kind of file that meets the full disk first (commitlog,
  consumequeue, index): the disk-usage probe is held at 50 % so the put path's check does not see
  the filler, as when another process fills the disk between two checks. The commitlog's write
  is refused and leaves the log as it was; a consumequeue or index write that fails stops dispatch
  at that unit, which was acknowledged and is dispatched once space returns.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from rmq.common.message import PROPERTY_KEYS
from rmq.store import DefaultMessageStore, Message, MessageStoreConfig, PutMessageStatus
from rmq.store.cleanup import default_disk_ratio


def _mount_tmpfs(path: str, size: str) -> str | None:
    """Mount a tmpfs at `path`; None when done, else why it could not be."""
    if shutil.which("mount") is None:
        return "no mount command"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True)
    if r.returncode != 0:
        return f"mount -t tmpfs failed: {r.stderr.strip() or r.returncode}"
    return None


def _small_fs(tmp_path, size: str):
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    why = _mount_tmpfs(str(mnt), size)
    if why:
        pytest.skip(f"cannot make a small file system: {why}")
    return str(mnt)


@pytest.fixture
def small_fs(tmp_path):
    mnt = _small_fs(tmp_path, "32m")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


def _fill(path: str, ratio: float | None = None, name: str = "filler") -> str:
    """A filler file taking the file system to `ratio` used, or (None) to the last byte."""
    f = os.path.join(path, name)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if ratio is not None:
            du = shutil.disk_usage(path)
            want = max(int(du.total * ratio) - (du.total - du.free), 0)
            while want > 0:
                want -= os.write(fd, b"\0" * min(want, 1 << 20))
            return f
        chunk = 1 << 20
        while chunk:
            try:
                os.write(fd, b"\0" * chunk)
            except OSError:
                chunk //= 2
    finally:
        os.close(fd)
    return f


def _wait(cond, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ---------------------------------------------------------------------------- the store alone
def test_cleanup_past_the_warning_ratio_refuses_then_resumes(small_fs):
    """The periodic check (CleanupService.run_once) on the real file system: past 90 % writes are
    refused and cleanup is forced (past diskSpaceCleanForciblyRatio); below, writes resume."""
    cfg = MessageStoreConfig(storePathRootDir=os.path.join(small_fs, "store"), mappedFileSizeCommitLog=1 << 20,
                             maxMessageSize=64 * 1024, mappedFileSizeConsumeQueue=20 * 4000, maxHashSlotNum=1000,
                             maxIndexNum=4000, flushDiskType="SYNC_FLUSH", cleanResourceInterval=60_000)
    s = DefaultMessageStore(cfg).load().start()
    try:
        for i in range(50):
            r = s.put_message(Message("DiskT", b"m%d" % i))
            assert r.ok and r.result.queue_offset == i
        filler = _fill(small_fs, 0.93)
        rep = s.cleanup.run_once()
        assert rep.disk_full and rep.disk_ratio > 0.90
        assert rep.clean_immediately  # > diskSpaceCleanForciblyRatio: forced cleanup (one commitlog file: kept)
        assert rep.commitlog_files_deleted == 0
        r = s.put_message(Message("DiskT", b"refused"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.remark
        os.unlink(filler)
        assert not s.cleanup.run_once().disk_full
        r = s.put_message(Message("DiskT", b"after"))
        assert r.ok and r.result.queue_offset == 50
        got = s.get_message("g", "DiskT", 0, 0, 100).decoded()
        assert [m.body for m in got] == [b"m%d" % i for i in range(50)] + [b"after"]
    finally:
        s.shutdown()


CASES = {
    # kind: (message body size, with a key, store config)
    "commitlog": (48 * 1024, False, dict(mappedFileSizeCommitLog=1 << 20, maxMessageSize=64 * 1024)),
    "consumequeue": (100, False, dict(mappedFileSizeCommitLog=4 << 20)),
    "index": (100, True, dict(mappedFileSizeCommitLog=4 << 20, maxHashSlotNum=100, maxIndexNum=300)),
}


@pytest.mark.parametrize("reput", ["inline", "thread"])
@pytest.mark.parametrize("kind", list(CASES))
def test_store_first_write_meeting_a_full_disk(small_fs, kind, reput):
    body_size, keyed, extra = CASES[kind]
    cfg = dict(reputMode=reput, storePathRootDir=os.path.join(small_fs, "store"), mappedFileSizeConsumeQueue=20 * 4000,
               maxMessageSize=64 * 1024,
               maxHashSlotNum=1000, maxIndexNum=4000, flushDiskType="SYNC_FLUSH", cleanResourceInterval=60_000)
    cfg.update(extra)
    probe = {"held": False}

    def usage(path):  # held at 50 % while the filler is there: the check has not seen it yet
        return 0.5 if probe["held"] else default_disk_ratio(path)

    s = DefaultMessageStore(MessageStoreConfig(**cfg), disk_ratio=usage).load().start()
    topic = "DiskFull" + kind
    acked: list[bytes] = []
    try:
        def put(i: int):
            body = b"%06d" % i + b"x" * (body_size - 6)
            props = {PROPERTY_KEYS: "k%d" % i} if keyed else {}
            r = s.put_message(Message(topic, body, properties=props))
            if r.ok:
                assert r.result.queue_offset == len(acked)
                acked.append(body)
            return r

        assert put(0).ok
        probe["held"] = True
        filler = _fill(small_fs)
        refused = None
        for i in range(1, 5000):
            r = put(i)
            if not r.ok:
                refused = r
                break
        assert refused is not None, "nothing was refused on a full disk"
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk full" in refused.remark
        if kind == "commitlog":
            assert "writing the commitlog" in refused.remark
            assert s.dispatch_stalled_at < 0
        else:
            # the unit that met the full disk was stored and acknowledged; dispatch stopped at it
            assert s.dispatch_stalled_at >= 0 and "dispatch" in refused.remark
            # (inline, the put that met it was the last acknowledged; with the reput thread a few
            # more may have been acknowledged before the thread met it)
            cq_max = s.get_max_offset_in_queue(topic, 0)
            if kind == "consumequeue":
                assert cq_max == len(acked) - 1 if reput == "inline" else cq_max < len(acked)
            else:  # its consumequeue unit went in, its index entry did not
                assert cq_max == len(acked) if reput == "inline" else cq_max <= len(acked)
                assert not s.query_message(topic, "k%d" % (len(acked) - 1))
        end = s.commitlog.max_offset
        assert not s.put_message(Message(topic, b"again")).ok and s.commitlog.max_offset == end
        probe["held"] = False
        os.unlink(filler)
        _wait(lambda: put(len(acked) + 100_000).ok, "writes to resume")
        s.wait_dispatched()
        got = []
        while len(got) < len(acked):
            batch = s.get_message("g", topic, 0, len(got), 64).decoded()
            assert batch, f"only {len(got)} of {len(acked)} acknowledged messages readable"
            got += [m.body for m in batch]
        assert got == acked
        if keyed:
            last = int(acked[-2][:6])
            assert s.query_message(topic, "k%d" % last), "the index lost a key of an acknowledged message"
        s.shutdown()
        s = DefaultMessageStore(MessageStoreConfig(**cfg)).load()  # a restart finds exactly what was acknowledged
        assert s.get_max_offset_in_queue(topic, 0) == len(acked)
        assert [m.body for m in s.get_message("g", topic, 0, len(acked) - 1, 1).decoded()] == acked[-1:]
    finally:
        s.shutdown()


def test_shutdown_while_dispatch_waits_for_space(small_fs):
    """Stopped while dispatch waits for space: the abort file stays, and the next start (space back)
    dispatches the acknowledged units the consumequeue never got."""
    from rmq.store.checkpoint import abort_file_exists
    root = os.path.join(small_fs, "store")
    cfg = dict(storePathRootDir=root, mappedFileSizeCommitLog=4 << 20, mappedFileSizeConsumeQueue=20 * 4000,
               maxMessageSize=64 * 1024, cleanResourceInterval=60_000)
    probe = {"held": False}
    s = DefaultMessageStore(MessageStoreConfig(**cfg),
                            disk_ratio=lambda p: 0.5 if probe["held"] else default_disk_ratio(p)).load().start()
    acked = 0
    try:
        assert s.put_message(Message("DiskW", b"m0")).ok
        acked = 1
        probe["held"] = True
        filler = _fill(small_fs)
        for i in range(1, 5000):
            if not s.put_message(Message("DiskW", b"m%d" % i)).ok:
                break
            acked += 1
        assert s.dispatch_stalled_at >= 0
    finally:
        s.shutdown()
    assert abort_file_exists(root)
    os.unlink(filler)
    s = DefaultMessageStore(MessageStoreConfig(**cfg)).load()
    try:
        assert s.get_max_offset_in_queue("DiskW", 0) == acked
        got = s.get_message("g", "DiskW", 0, acked - 2, 2).decoded()
        assert [m.body for m in got] == [b"m%d" % (acked - 2), b"m%d" % (acked - 1)]
    finally:
        s.shutdown()


def test_restart_on_a_full_disk(small_fs):
    """A store opened on a full disk: a clear StoreError (no SIGBUS: on tmpfs even a read of an
    unallocated page of a mapping is one, so the consumequeue's recovery search stays below the
    file's first hole); once space returns it opens with everything acknowledged."""
    from rmq.store.mapped_file import StoreError
    cfg = dict(storePathRootDir=os.path.join(small_fs, "store"), mappedFileSizeCommitLog=1 << 20,
               maxMessageSize=64 * 1024, maxHashSlotNum=100, maxIndexNum=400, mappedFileSizeConsumeQueue=20 * 4000)
    with DefaultMessageStore(MessageStoreConfig(**cfg)).load().start() as s:
        for i in range(10):
            assert s.put_message(Message("DiskR", b"m%d" % i, properties={PROPERTY_KEYS: "k%d" % i})).ok
    filler = _fill(small_fs)
    with pytest.raises(StoreError, match="No space left on device"):
        DefaultMessageStore(MessageStoreConfig(**cfg)).load()
    os.unlink(filler)
    with DefaultMessageStore(MessageStoreConfig(**cfg)).load().start() as s:
        assert [m.body for m in s.get_message("g", "DiskR", 0, 0, 32).decoded()] == [b"m%d" % i for i in range(10)]
        assert s.query_message("DiskR", "k3")[0].body == b"m3"
        assert s.put_message(Message("DiskR", b"after")).ok


# ---------------------------------------------------------------------------- a real broker
def _broker(tmp_path, store_dir: str, extra: str = ""):
    from rmq.drill.kill import BrokerProcess
    cfg = tmp_path / "broker.yaml"
    cfg.write_text("mappedFileSizeCommitLog: 4194304\nmaxMessageSize: 1048576\nmappedFileSizeConsumeQueue: 80000\n"
                   "maxHashSlotNum: 1000\nmaxIndexNum: 4000\nautoCreateTopicEnable: true\n" + extra)
    work = tmp_path / "work"
    work.mkdir()
    broker = BrokerProcess(str(cfg), str(work), data=store_dir, kafka=True)
    broker.start()
    return broker


def _kafka_producer(bootstrap: str):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                     "message.timeout.ms": 10000, "linger.ms": 0, "log_level": 2})


def _kafka_send(kp, topic: str, value: bytes, partition: int = 0) -> tuple[int, int]:
    """(error code or 0, offset) of one record, waited for."""
    out = []
    kp.produce(topic, value, partition=partition,
               on_delivery=lambda err, msg: out.append((err.code() if err else 0, msg.offset())))
    kp.flush(15)
    assert out, "no delivery report"
    return out[0]


# reputMode inline: a Kafka produce goes through the C fast path (produce_frame.py, put_entries);
# reputMode thread: produce_frame declines it and handle_produce's Python path puts it, and the
# ReputMessageService thread dispatches.
@pytest.mark.parametrize("reput", ["inline", "thread"])
def test_broker_refuses_both_protocols_at_the_first_write_and_resumes(small_fs, tmp_path, reput):
    pytest.importorskip("confluent_kafka")
    from rmq.client import Message as CMessage
    from rmq.client import MQClientError, Producer
    from rmq.client.message import SendStatus
    from rmq.drill.kill import AckLog, QueueReader, _create_topic

    # the periodic check (cleanResourceInterval) never runs here: the put path's own check refuses
    broker = _broker(tmp_path, os.path.join(small_fs, "store"), f"cleanResourceInterval: 3600000\nreputMode: {reput}\n")
    topic = "DiskFullT"
    log = AckLog()
    p = kp = kp2 = None
    try:
        _create_topic(broker.listeners, topic, 2)
        p = Producer("disk_pg", broker.listeners["namesrv"], retry_times_when_send_failed=0)
        p.start()

        def send(mid: str):
            r = p.send(CMessage(topic, mid.encode(), keys=mid))
            assert r.send_status is SendStatus.SEND_OK
            log.ack(mid, r.message_queue.queueId, r.queue_offset)

        kp = _kafka_producer(broker.listeners["kafka"])
        for i in range(20):
            send(f"before-{i}")
        err, off = _kafka_send(kp, topic, b"before-k")
        assert err == 0
        log.ack("before-k", 0, off)

        filler = _fill(small_fs)  # to the last byte
        with pytest.raises(MQClientError) as exc:
            send("refused")
        assert exc.value.response_code == 14 and "disk full" in str(exc.value)  # SERVICE_NOT_AVAILABLE
        for i in range(3):  # the same connection keeps getting answers
            assert _kafka_send(kp, topic, b"refused-k%d" % i)[0] == 56  # KAFKA_STORAGE_ERROR
        # a new connection is served too, and reads work meanwhile
        kp2 = _kafka_producer(broker.listeners["kafka"])
        assert _kafka_send(kp2, topic, b"refused-k2", partition=1)[0] == 56
        assert broker.process.proc.poll() is None, "the broker died on a full disk"
        reader = QueueReader()
        reader.read(broker.listeners["namesrv"], topic, 2)
        assert all(reader.seen.get(m) == 1 for m in log.acked)

        os.unlink(filler)

        def resumed():
            try:
                send("after-0")
                return True
            except MQClientError:
                return False
        _wait(resumed, "RocketMQ sends to be taken again")
        err, off = _kafka_send(kp, topic, b"after-k")
        assert err == 0
        log.ack("after-k", 0, off)
        reader = QueueReader()
        reader.read(broker.listeners["namesrv"], topic, 2)
        assert all(reader.seen.get(m) == 1 for m in log.acked), "an acknowledged message is missing or doubled"
        assert not any(k.startswith("refused") for k in reader.seen)
        assert len(log.acked) == 23
    finally:
        if p is not None:
            p.shutdown()
        broker.stop()
        broker.kill()


def test_kafka_log_peer_on_a_full_disk(small_fs, tmp_path):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Consumer, TopicPartition

    broker = _broker(tmp_path, os.path.join(small_fs, "store"), "kafkaStorage: kafka-log\n")
    topic = "DiskFullKl"
    try:
        kp = _kafka_producer(broker.listeners["kafka"])
        acked = []
        for i in range(5):
            value = b"%03d" % i + b"v" * 20_000
            err, off = _kafka_send(kp, topic, value)
            assert err == 0
            acked.append((off, value))
        filler = _fill(small_fs)  # to the last byte: the log's next write meets ENOSPC itself
        for i in range(3):
            err, _ = _kafka_send(kp, topic, b"refused" + b"r" * 20_000)
            assert err == 56
        assert broker.process.proc.poll() is None, "the broker died on a full disk"
        os.unlink(filler)
        value = b"after" + b"a" * 20_000
        err, off = _kafka_send(kp, topic, value)
        assert err == 0 and off == len(acked), "a refused append left something in the log"
        acked.append((off, value))
        c = Consumer({"bootstrap.servers": broker.listeners["kafka"], "group.id": "dfk", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + 20
            while len(got) < len(acked) and time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    assert m.error() is None, m.error()
                    got.append((m.offset(), m.value()))
        finally:
            c.close()
        assert got == acked
    finally:
        broker.stop()
        broker.kill()
