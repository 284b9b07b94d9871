"""Abnormal recovery after a process crash (issue 16 part 1): with the abort marker holding this
boot's id, recovery reads the commitlog only from the last unit the consumequeues hold (what was
in flight at the kill), re-dispatches the undispatched units and cuts a torn tail; a marker from
another boot (or an old empty one) takes the checkpoint-based scan of RocketMQ's recoverAbnormally."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from rmq.store import Message
from rmq.store.checkpoint import create_abort_file
from rmq.store.consume_queue import CQ_STORE_UNIT_SIZE

from .conftest import PY, ROOT


def _crash_copy(s, undispatched: int, torn: bool):
    """Make the files of `s` look like a kill: the last `undispatched` consumequeue units never
    written, a half-written unit after the log's end, and the abort marker of this boot."""
    root = s.root
    end = s.commitlog.max_offset
    count = s.get_max_offset_in_queue("CrashT", 0)
    s.shutdown()
    qdir = os.path.join(root, "consumequeue", "CrashT", "0")
    last = sorted(os.listdir(qdir))[-1]
    pos = (count - undispatched) * CQ_STORE_UNIT_SIZE - int(last)
    assert pos >= 0
    with open(os.path.join(qdir, last), "r+b") as fh:
        fh.seek(pos)
        fh.write(b"\0" * undispatched * CQ_STORE_UNIT_SIZE)
    if torn:
        with open(os.path.join(root, "commitlog", "0" * 20), "r+b") as fh:
            fh.seek(end)
            fh.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\xee" * 40)  # a unit header, then the kill
    create_abort_file(root)
    return end


def test_process_crash_reads_only_the_undispatched_tail(store_factory, caplog):
    s = store_factory()
    for i in range(200):
        assert s.put_message(Message("CrashT", b"m-%03d" % i, properties={"KEYS": f"k{i}"})).ok
    last_five = [r[0] for r in [s.get_consume_queue("CrashT", 0).get_unit(q) for q in range(195, 200)]]
    end = _crash_copy(s, undispatched=5, torn=True)
    with caplog.at_level("INFO", logger="rmq.store"):
        s2 = store_factory(root=s.root)
    assert s2.recovered_abnormally and s2.recovery_mode == "process-crash"
    assert s2.recovery_scan_start == last_five[0]  # the end of the last unit the consumequeue held
    assert s2.commitlog.max_offset == end  # the torn unit is cut
    assert s2.get_max_offset_in_queue("CrashT", 0) == 200
    got, off = [], 0
    while off < 200:
        res = s2.get_message("g", "CrashT", 0, off, 1000, max_bytes=1 << 20)
        got += [m.body for m in res.decoded()]
        off = res.next_begin_offset
    assert got == [b"m-%03d" % i for i in range(200)]
    assert [m.body for m in s2.query_message("CrashT", "k199")] == [b"m-199"]
    assert [m.body for m in s2.query_message("CrashT", "k100")] == [b"m-100"]  # not indexed twice
    said = [r.getMessage() for r in caplog.records if "abnormal recovery" in r.getMessage()]
    assert said and "page cache is intact" in said[0] and "5 unit(s) re-dispatched" in said[0], said
    r = s2.put_message(Message("CrashT", b"next"))
    assert r.result.wrote_offset == end and r.result.queue_offset == 200


def test_marker_from_another_boot_scans_from_the_checkpoint(store_factory):
    s = store_factory()
    for i in range(50):
        assert s.put_message(Message("CrashT", b"m-%03d" % i)).ok
    end = _crash_copy(s, undispatched=3, torn=True)
    with open(os.path.join(s.root, "abort"), "w") as fh:
        fh.write("00000000-0000-0000-0000-000000000000")  # the machine rebooted since
    s2 = store_factory(root=s.root)
    assert s2.recovery_mode == "os-crash" and s2.recovery_scan_start == 0
    assert s2.commitlog.max_offset == end and s2.get_max_offset_in_queue("CrashT", 0) == 50


_WRITER = r"""
import sys
from rmq.store import DefaultMessageStore, MessageStoreConfig, Message
cfg = MessageStoreConfig(storePathRootDir=sys.argv[1], flushDiskType="SYNC_FLUSH",
                         mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=20 * 1000,
                         maxMessageSize=64 * 1024, maxHashSlotNum=1000, maxIndexNum=4000)
s = DefaultMessageStore(cfg).load().start()
print("up", s.recovery_mode, s.recovery_scan_start, s.commitlog.max_offset, flush=True)
i = 0
while True:
    r = s.put_message(Message("KillT", b"x" * 200, queue_id=i % 4))
    if r.ok and i % 50 == 0:
        print(i, flush=True)
    i += 1
"""


def test_repeated_kills_read_a_bounded_tail(tmp_path):
    """Five kill -9s of a writing process: every restart reads only what was in flight, however
    large the log has grown (the cost does not grow with the store or with the number of kills)."""
    root = str(tmp_path / "store")
    reads = []
    for _ in range(6):
        proc = subprocess.Popen([PY, "-c", _WRITER, root], stdout=subprocess.PIPE, cwd=ROOT, text=True)
        try:
            up = proc.stdout.readline().split()
            assert up and up[0] == "up", up
            reads.append((up[1], int(up[2]), int(up[3])))
            deadline = time.monotonic() + 30
            n = 0
            while n < 20 and time.monotonic() < deadline:
                if not proc.stdout.readline():
                    break
                n += 1
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert reads[0][0] == "normal"
    for mode, start, end in reads[1:]:
        assert mode == "process-crash"
        assert 0 <= end - start < 64 * 1024, reads  # at most what was in flight, not the whole log
    assert reads[-1][2] > 5 * 200 * 900  # the log did grow
