"""Disk faults (issue 16 part 3): the diskMaxUsedSpaceRatio / diskSpaceCleanForciblyRatio /
diskSpaceWarningLevelRatio paths on a real broker whose store sits on a small tmpfs the test
mounts. Past 90 % a send is refused with RocketMQ's SERVICE_NOT_AVAILABLE (14) and a Kafka
produce with KAFKA_STORAGE_ERROR (56); nothing acknowledged is lost; writing resumes when space
returns. Mounting needs root (CAP_SYS_ADMIN): without it the test is skipped, saying why; the
same thresholds are covered without a mount by tests/test_store.py (injected disk usage)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from rmq.store import DefaultMessageStore, Message, MessageStoreConfig, PutMessageStatus


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


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    why = _mount_tmpfs(str(mnt), "32m")
    if why:
        pytest.skip(f"cannot make a small file system: {why}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _usage(path: str) -> float:
    du = shutil.disk_usage(path)
    return (du.total - du.free) / du.total


def _fill_to(path: str, ratio: float, name: str = "filler") -> str:
    """Write a filler file so the file system is `ratio` full."""
    du = shutil.disk_usage(path)
    want = int(du.total * ratio) - (du.total - du.free)
    f = os.path.join(path, name)
    with open(f, "ab") as fh:
        fh.write(b"\0" * max(want, 0))
    return f


def test_store_on_a_full_tmpfs_refuses_then_resumes(small_fs):
    """The store alone: usage measured on the real file system (the default probe)."""
    cfg = MessageStoreConfig(storePathRootDir=os.path.join(small_fs, "store"), mappedFileSizeCommitLog=1 << 20, maxMessageSize=64 * 1024,
                             mappedFileSizeConsumeQueue=20 * 4000, maxHashSlotNum=1000, maxIndexNum=4000,
                             flushDiskType="SYNC_FLUSH", cleanResourceInterval=60_000)
    s = DefaultMessageStore(cfg).load().start()
    try:
        acked = []
        for i in range(50):
            r = s.put_message(Message("DiskT", b"m%d" % i))
            assert r.ok
            acked.append(r.result.queue_offset)
        filler = _fill_to(small_fs, 0.93)
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


def test_broker_refuses_both_protocols_on_a_full_disk_and_resumes(small_fs, tmp_path):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Producer as KProducer

    from rmq.client import Message as CMessage
    from rmq.client import MQClientError, Producer
    from rmq.client.message import SendStatus
    from rmq.drill.kill import AckLog, BrokerProcess, QueueReader, _create_topic

    cfg = tmp_path / "broker.yaml"
    cfg.write_text("mappedFileSizeCommitLog: 4194304\nmaxMessageSize: 1048576\nmappedFileSizeConsumeQueue: 80000\nmaxHashSlotNum: 1000\n"
                   "maxIndexNum: 4000\ncleanResourceInterval: 100\nautoCreateTopicEnable: true\n")
    work = tmp_path / "work"
    work.mkdir()
    broker = BrokerProcess(str(cfg), str(work), data=os.path.join(small_fs, "store"), kafka=True)
    broker.start()
    topic = "DiskFullT"
    log = AckLog()
    p = None
    try:
        _create_topic(broker.listeners, topic, 2)
        p = Producer("disk_pg", broker.listeners["namesrv"], retry_times_when_send_failed=0)
        p.start()

        def send(mid: str):
            r = p.send(CMessage(topic, mid.encode(), keys=mid))
            assert r.send_status is SendStatus.SEND_OK
            log.ack(mid, r.message_queue.queueId, r.queue_offset)

        kafka_errors = []

        def kafka_send(mid: str) -> None:
            kp = KProducer({"bootstrap.servers": broker.listeners["kafka"], "acks": "all", "retries": 0,
                            "enable.idempotence": False, "message.timeout.ms": 10000, "log_level": 2})

            def report(err, msg):
                if err is None:
                    log.ack(msg.value().decode(), msg.partition(), msg.offset())
                else:
                    kafka_errors.append(err.code())
            kp.produce(topic, mid.encode(), partition=0, on_delivery=report)
            kp.flush(15)

        for i in range(20):
            send(f"before-{i}")
        kafka_send("before-k")
        assert not kafka_errors
        filler = _fill_to(small_fs, 0.93)
        time.sleep(0.5)  # a few cleanResourceInterval runs: usage now past diskSpaceWarningLevelRatio
        with pytest.raises(MQClientError) as exc:
            send("refused")
        assert exc.value.response_code == 14 and "disk full" in str(exc.value)  # SERVICE_NOT_AVAILABLE
        kafka_send("refused-k")
        assert kafka_errors and kafka_errors[-1] == 56  # KAFKA_STORAGE_ERROR
        os.unlink(filler)
        deadline = time.monotonic() + 10
        while True:
            try:
                send("after-0")
                break
            except MQClientError:
                assert time.monotonic() < deadline, "writes did not resume after space came back"
                time.sleep(0.1)
        kafka_send("after-k")
        assert kafka_errors == [56]
        reader = QueueReader()
        reader.read(broker.listeners["namesrv"], topic, 2)
        assert all(reader.seen.get(m) == 1 for m in log.acked), "an acknowledged message is missing or doubled"
        assert "refused" not in reader.seen and "refused-k" not in reader.seen
        assert len(log.acked) == 23
    finally:
        if p is not None:
            p.shutdown()
        broker.stop()
        broker.kill()
