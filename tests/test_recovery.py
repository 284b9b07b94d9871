"""Abnormal recovery after a process crash (issue 16 part 1): with the abort marker holding this
boot's id, recovery reads the commitlog only from the last unit the consumequeues hold (what was
in flight at the kill), re-dispatches the undispatched units and cuts a torn tail; a marker from
another boot (or an old empty one) takes the checkpoint-based scan of RocketMQ's recoverAbnormally."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

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


def _store_files(root: str) -> dict:
    """The bytes of the commitlog and consumequeue files by path, and of the index files in order
    (an index file is named by the clock when it was made)."""
    out: dict = {}
    for sub in ("commitlog", "consumequeue", "index"):
        base = os.path.join(root, sub)
        for dirpath, _dirs, names in os.walk(base):
            for n in sorted(names):
                with open(os.path.join(dirpath, n), "rb") as fh:
                    data = fh.read()
                if sub == "index":
                    out.setdefault("index", []).append(data)
                else:
                    out[os.path.relpath(os.path.join(dirpath, n), root)] = data
    return out


def test_os_crash_recovery_in_c_rebuilds_what_the_python_walk_rebuilds(store_factory, tmp_path, monkeypatch):
    """A machine crash (marker of another boot) over several commitlog files, with consumequeues
    that lost their last units, an index that lost its last file, prepared transaction units and a
    torn tail: the walk in C (rmq._native.scan_units, which decodes only the units a dispatch would
    change) leaves the same commitlog, consumequeue and index files as the walk in Python."""
    import shutil

    from rmq import native
    from rmq.common.message import TRANSACTION_PREPARED_TYPE
    from rmq.store.checkpoint import StoreCheckpoint
    if native.ext is None:
        import pytest
        pytest.skip("rmq._native is not built")
    s = store_factory(root=str(tmp_path / "orig"), mappedFileSizeCommitLog=16 * 1024, maxMessageSize=4096, maxIndexNum=100)
    for i in range(400):
        flag = TRANSACTION_PREPARED_TYPE if i % 37 == 5 else 0
        assert s.put_message(Message(f"T{i % 3}", b"m-%03d" % i, queue_id=i % 2, sys_flag=flag,
                                     properties={"KEYS": f"k{i}"} if i % 4 else {})).ok
    assert len(s.commitlog.queue.files) >= 3
    counts = {(t, q): s.get_max_offset_in_queue(t, q) for t in ("T0", "T1", "T2") for q in (0, 1)}
    end = _crash_copy_units(s, lost={("T1", 0): 9, ("T2", 1): 30}, clean_copy=str(tmp_path / "clean"))
    index_files = sorted(os.listdir(os.path.join(s.root, "index")))
    os.remove(os.path.join(s.root, "index", index_files[-1]))
    cp = StoreCheckpoint(os.path.join(s.root, "checkpoint"))  # nothing on disk since the first file
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 1
    cp.flush()
    cp.close()
    with open(os.path.join(s.root, "abort"), "w") as fh:
        fh.write("another-boot")
    roots = {}
    for kind in ("c", "python"):
        roots[kind] = str(tmp_path / kind)
        shutil.copytree(s.root, roots[kind])
    recovered = {}
    for kind, root in roots.items():
        with monkeypatch.context() as m:
            if kind == "python":
                m.setattr(native, "ext", None)
            s2 = store_factory(root=root, mappedFileSizeCommitLog=16 * 1024, maxMessageSize=4096, maxIndexNum=100)
            assert s2.recovery_mode == "os-crash" and s2.recovery_scan_start == 0
            assert s2.commitlog.max_offset == end
            assert {k: s2.get_max_offset_in_queue(*k) for k in counts} == counts
            assert (s2._rescanned >= 0) == (kind == "c")
            recovered[kind] = s2._redispatched
            assert [m.body for m in s2.query_message("T0", "k399")] == [b"m-399"]
            s2.shutdown()
    assert recovered["c"] < recovered["python"]  # the units already in place were not decoded
    assert _store_files(roots["c"]) == _store_files(roots["python"]) == _store_files(str(tmp_path / "clean"))


def _crash_copy_units(s, lost: dict, clean_copy: str | None = None) -> int:
    """Shut `s` down (and copy its files to `clean_copy`, the reference a recovery must rebuild);
    for each (topic, queue): number of its last consumequeue units to zero (lost pages), then a
    torn unit after the log's end. Returns the log's end."""
    import shutil

    root, end = s.root, s.commitlog.max_offset
    counts = {k: s.get_max_offset_in_queue(*k) for k in lost}
    last_file = s.commitlog.queue.files[-1]
    s.shutdown()
    if clean_copy is not None:
        shutil.copytree(root, clean_copy)
    for (topic, qid), n in lost.items():
        qdir = os.path.join(root, "consumequeue", topic, str(qid))
        name = sorted(os.listdir(qdir))[-1]
        pos = (counts[(topic, qid)] - n) * CQ_STORE_UNIT_SIZE - int(name)
        assert pos >= 0
        with open(os.path.join(qdir, name), "r+b") as fh:
            fh.seek(pos)
            fh.write(b"\0" * n * CQ_STORE_UNIT_SIZE)
    with open(os.path.join(root, "commitlog", "%020d" % last_file.file_from_offset), "r+b") as fh:
        fh.seek(end - last_file.file_from_offset)
        fh.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\xee" * 40)
    return end


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


# ------------------------------------------------------------------ machine crash, bounded by the checkpoint
_N_BEFORE, _N_AFTER = 1200, 300  # units put before the last checkpoint flush, and after it


def _props(kind: str, i: int) -> dict:
    """The properties of message i of a store of `kind`: none, KEYS on every message, or a mix
    (KEYS, UNIQ_KEY only, an empty KEYS, nothing)."""
    if kind == "keys":
        return {"KEYS": f"k{i}"}
    if kind == "mixed":
        return [{"KEYS": f"k{i} alt{i}"}, {"UNIQ_KEY": f"U{i:08X}"}, {"KEYS": ""}, {"TAGS": "t"}, {}][i % 5]
    return {}


def _sys_flag(kind: str, i: int) -> int:
    from rmq.common.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
    if kind != "mixed":
        return 0
    return TRANSACTION_ROLLBACK_TYPE if i % 13 == 4 else TRANSACTION_PREPARED_TYPE if i % 11 == 6 else 0


def _indexable(kind: str, i: int) -> bool:
    """What IndexService.build_index would index for message i (rolled-back units are not)."""
    from rmq.common.message import TRANSACTION_ROLLBACK_TYPE
    p = _props(kind, i)
    return bool(p.get("KEYS") or p.get("UNIQ_KEY")) and _sys_flag(kind, i) != TRANSACTION_ROLLBACK_TYPE


def _machine_crash(store_factory, tmp_path, kind: str, lost: tuple[str, ...]):
    """Put _N_BEFORE messages (store time +40 ms each), flush the consumequeues, index and checkpoint
    as FlushConsumeQueueService's thorough round does, put _N_AFTER more, shut down cleanly (the
    reference), then make a copy whose `lost` directories (consumequeue, index) and checkpoint are
    those of the flush: what a machine crash leaves when the pages written after it are gone.
    Returns (clock, clean root, crashed root)."""
    import shutil

    now = [1_700_000_000_000]
    clock = lambda: now[0]  # noqa: E731
    clean = str(tmp_path / "clean")
    s = store_factory(root=clean, clock=clock, start=False)
    snap = tmp_path / "at-checkpoint"
    for i in range(_N_BEFORE + _N_AFTER):
        if i == _N_BEFORE:
            s.flush_commitlog(0)
            s.flush_logics(0)
            snap.mkdir()
            for name in lost + ("checkpoint",):
                if os.path.isdir(os.path.join(clean, name)):
                    shutil.copytree(os.path.join(clean, name), snap / name)
                elif os.path.exists(os.path.join(clean, name)):
                    shutil.copy(os.path.join(clean, name), snap / name)
        now[0] += 40
        r = s.put_message(Message(f"T{i % 2}", b"m-%04d" % i + b"." * 150, queue_id=i % 3,
                                  sys_flag=_sys_flag(kind, i), properties=_props(kind, i)))
        assert r.ok, r
    assert len(s.commitlog.queue.files) >= 5
    s.shutdown()
    crashed = str(tmp_path / "crashed")
    shutil.copytree(clean, crashed)
    for name in lost:
        shutil.rmtree(os.path.join(crashed, name), ignore_errors=True)
        if (snap / name).exists():
            shutil.copytree(snap / name, os.path.join(crashed, name))
    shutil.copy(snap / "checkpoint", os.path.join(crashed, "checkpoint"))
    with open(os.path.join(crashed, "abort"), "w") as fh:
        fh.write("another-boot")
    return clock, clean, crashed


def _expected_walk(root: str, checkpoint_ts: int) -> tuple[int, int]:
    """recoverAbnormally's start (the newest commitlog file whose first unit is no newer than the
    checkpoint's minimum timestamp less 3 s), the number of units from there and the log's end,
    read with iter_units from the files of a clean store."""
    from rmq.store.commitlog import CommitLog
    cl = CommitLog(root, 64 * 1024, ("127.0.0.1", 10911))
    cl.queue.load()
    try:
        for f in cl.queue.files:
            f.wrote_position = f.file_size
        start = 0
        for f in cl.queue.files:
            if 0 < cl.store_timestamp_at(f.file_from_offset) <= checkpoint_ts - 3000:
                start = f.file_from_offset
        walked = sum(1 for _ in cl.iter_units(start, check_crc=False, decode=False))
        return start, walked, cl.scan_end
    finally:
        cl.close()


@pytest.mark.parametrize("kind,lost", [("none", ("consumequeue", "index")), ("keys", ("consumequeue", "index")),
                                       ("mixed", ("consumequeue", "index")), ("mixed", ("index",))])
def test_machine_crash_reads_from_the_checkpoints_file_and_redispatches_what_was_lost(store_factory, tmp_path,
                                                                                      monkeypatch, kind, lost):
    """After a machine crash the walk starts at the checkpoint's file, not at the first file; the
    walk in C decodes only the units that are missing from their consumequeue, or from the index
    and have KEYS or UNIQ_KEY to index (a store without keys decodes no more than one with keys);
    the recovered consumequeue and index files are those of a clean run and of the Python walk."""
    import shutil

    from rmq import native
    if native.ext is None:
        pytest.skip("rmq._native is not built")
    clock, clean, crashed = _machine_crash(store_factory, tmp_path, kind, lost)
    checkpoint_ts = 1_700_000_000_000 + 40 * _N_BEFORE  # the store time of the last unit before the flush
    start, walked, end = _expected_walk(clean, checkpoint_ts)
    assert start > 0 and walked < _N_BEFORE + _N_AFTER  # the bound skips files
    from rmq.common.message import TRANSACTION_PREPARED_TYPE
    after = range(_N_BEFORE, _N_BEFORE + _N_AFTER)
    if "consumequeue" in lost:  # the units past the checkpoint that lost a consumequeue unit or index keys
        redispatch = sum(not _sys_flag(kind, i) & TRANSACTION_PREPARED_TYPE or _indexable(kind, i) for i in after)
    else:  # only the index lost them
        redispatch = sum(_indexable(kind, i) for i in after)
    assert 0 < redispatch <= _N_AFTER
    roots = {"c": crashed, "python": str(tmp_path / "python")}
    shutil.copytree(crashed, roots["python"])
    for how, root in roots.items():
        with monkeypatch.context() as m:
            if how == "python":
                m.setattr(native, "ext", None)
            s2 = store_factory(root=root, clock=clock, start=False)
            assert s2.recovery_mode == "os-crash" and s2.recovery_scan_start == start
            if how == "c":
                assert (s2._rescanned, s2._redispatched) == (walked, redispatch)
            else:
                assert (s2._rescanned, s2._redispatched) == (-1, walked)  # the reference decodes every unit
            assert s2.commitlog.max_offset == end
            last = _N_BEFORE + _N_AFTER - 1
            if kind != "none":
                found = s2.query_message(f"T{last % 2}", f"k{last}" if kind == "keys" else f"alt{last - last % 5}")
                assert [m.body[:6] for m in found] == [b"m-%04d" % (last if kind == "keys" else last - last % 5)]
            s2.shutdown()
    want = _store_files(clean)
    if kind == "none":
        assert "index" not in want
    assert _store_files(roots["c"]) == want
    assert _store_files(roots["python"]) == want


def test_bench_recovery_reports_what_recovery_walked_and_redispatched(tmp_path):
    """`rmq bench recovery` on 10 MiB stores: a machine crash (os-crash), every unit walked from the
    only commitlog file, and only the messages appended after the checkpoint re-dispatched, with
    keys and without; the stores are gone afterwards."""
    import json

    from click.testing import CliRunner

    from rmq import native
    from rmq.cli import main
    if native.ext is None:
        pytest.skip("rmq._native is not built")
    out = CliRunner().invoke(main, ["bench", "recovery", "--gb", "0.01", "--after-checkpoint-mb", "1",
                                    "--data", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert [r["keys"] for r in rows] == [False, True]
    for r in rows:
        assert r["mode"] == "os-crash" and r["scan_start"] == 0 and r["cache"] == "warm"
        assert r["walked"] == r["messages"] > r["after_checkpoint_messages"] > 0
        assert r["redispatched"] == r["after_checkpoint_messages"]
        assert r["commitlog_bytes"] >= 10 << 20 and r["index_files"] == (1 if r["keys"] else 0)
    assert os.listdir(tmp_path) == []
    bad = CliRunner().invoke(main, ["bench", "recovery", "--gb", "0.01", "--after-checkpoint-mb", "20"])
    assert bad.exit_code == 2 and "--after-checkpoint-mb" in bad.output
