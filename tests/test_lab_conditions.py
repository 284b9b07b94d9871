"""Lab conditions (labs/conditions.py): a condition that cannot be set is skipped with its reason
(not root, controller missing); as root, a real broker is moved into a memory cgroup with a limit and
writes its data on a blkio-throttled loop device, and everything is removed afterwards."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from labs.conditions import LabConditions, diskstats, own_cgroup
from labs.runner import load_lab
from labs.schema import Conditions, SystemSpec
from labs.systems import start_system


def test_not_root_skips_each_condition_with_its_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    cond = LabConditions(Conditions(producerProcesses=2, brokerMemoryMB=256, diskWriteIops=100))
    with cond:
        assert cond.data_root is None and cond.memcg is None and cond.blkcg is None
        cond.attach(os.getpid())                       # nothing to attach to: a no-op, not an error
        assert cond.figures(cond.sample(), cond.sample()) == {}
    by = {r["condition"]: r for r in cond.report}
    assert by["producer processes"]["status"] == "set"
    for name in ("bounded page cache", "throttled disk"):
        assert by[name]["status"] == "skipped" and "needs root" in by[name]["reason"]


def test_missing_controller_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (tmp_path / "memory").mkdir()                      # mounted elsewhere, or not at all: no control files here
    cond = LabConditions(Conditions(brokerMemoryMB=256, diskWriteMBps=10), cgroup_root=str(tmp_path))
    with cond:
        pass
    reasons = {r["condition"]: r.get("reason", "") for r in cond.report}
    assert "memory controller is not mounted" in reasons["bounded page cache"]
    assert "blkio controller is not mounted" in reasons["throttled disk"]


def test_no_conditions_means_nothing_is_set():
    cond = LabConditions(Conditions())
    with cond:
        assert cond.report == [] and cond.data_root is None


def test_topic_count_labs_state_their_conditions():
    for name in ("topic-count", "topic-count-fsync"):
        c = load_lab(f"labs/library/{name}.yaml").conditions
        assert c.producerProcesses >= 2 and c.brokerMemoryMB and (c.diskWriteIops or c.diskWriteMBps)


def test_own_cgroup_reads_the_v1_line(tmp_path):
    p = tmp_path / "cgroup"
    p.write_text("9:name=systemd:/\n4:memory:/a/b\n1:cpu,cpuacct:/\n0::/\n")
    assert own_cgroup("memory", str(p)) == "/a/b" and own_cgroup("cpu", str(p)) == "/"
    assert own_cgroup("blkio", str(p)) == "/"


def _root_with_controllers() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for f in ("memory/memory.limit_in_bytes", "blkio/blkio.throttle.write_iops_device"):
        if not os.path.exists(os.path.join("/sys/fs/cgroup", f)):
            return f"no cgroup v1 {f.split('/')[0]} controller"
    if not (shutil.which("losetup") and shutil.which("mkfs.ext4")):
        return "no losetup/mkfs.ext4"
    return None


@pytest.mark.skipif(_root_with_controllers() is not None, reason=str(_root_with_controllers()))
def test_real_broker_in_cgroup_on_throttled_loop_device_and_teardown(tmp_path):
    cond = LabConditions(Conditions(brokerMemoryMB=512, diskWriteIops=200, diskWriteMBps=50, diskSizeMB=512))
    run = None
    try:
        cond.setup()
        assert [r["status"] for r in cond.report] == ["set", "set"], cond.report
        mnt, loop, memcg, blkcg = cond.data_root, cond.loop_dev, cond.memcg, cond.blkcg
        assert os.path.ismount(mnt) and loop.startswith("/dev/loop")
        with open(os.path.join(memcg, "memory.limit_in_bytes")) as fh:
            assert int(fh.read()) == 512 << 20
        majmin = cond._majmin
        with open(os.path.join(blkcg, "blkio.throttle.write_iops_device")) as fh:
            assert fh.read().split() == [majmin, "200"]
        with open("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device") as fh:
            assert f"{majmin} 50000000" in fh.read()

        work = os.path.join(mnt, "work")
        run = start_system(SystemSpec(system="kafka-bridge", config={"flushDiskType": "SYNC_FLUSH"}), work)
        cond.attach(run.proc.pid)
        with open(os.path.join(memcg, "cgroup.procs")) as fh:
            assert str(run.proc.pid) in fh.read().split()
        with open(os.path.join(blkcg, "cgroup.procs")) as fh:
            assert str(run.proc.pid) in fh.read().split()
        before = cond.sample()
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": run.bootstrap, "acks": "all", "linger.ms": 1})
        acked = []
        for i in range(200):
            p.produce("cond-t", value=b"x" * 1024, on_delivery=lambda err, m: acked.append(err))
        p.flush(60)
        assert acked.count(None) == 200
        deadline = time.monotonic() + 30                 # the commitlog's fdatasyncs reach the loop device
        while time.monotonic() < deadline and diskstats(os.path.basename(loop))["writes"] == before["disk"]["writes"]:
            p.poll(0.1)
        figs = cond.figures(before, cond.sample())
        assert figs["disk_write_iops"] > 0 and figs["disk_kb_per_write"] > 0
        assert "cgroup_page_cache_bytes" in figs
        assert any(os.scandir(os.path.join(work, "store")))   # the store lives on the loop device
    finally:
        if run is not None:
            run.stop()
        cond.teardown()
    assert not os.path.exists(memcg) and not os.path.exists(blkcg)
    assert not os.path.ismount(mnt)
    with open("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device") as fh:
        assert majmin not in fh.read()
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert f"{loop}:" not in out


LAB_WITH_CONDITIONS = """
name: cond-smoke
title: conditions smoke
question: are the conditions removed when the run is stopped?
source: {seed: "-", section: test}
claim: none
systems: [kafka-bridge]
workload: {topics: 1, partitionsPerTopic: 1, messageSize: 64, subscriptionsPerTopic: 0, consumerPerSubscription: 0,
           producerRate: 200, testDurationMinutes: 5, warmupDurationMinutes: 0}
conditions: {brokerMemoryMB: 256, diskWriteIops: 1000, diskSizeMB: 256}
verdict: null
"""


@pytest.mark.skipif(_root_with_controllers() is not None, reason=str(_root_with_controllers()))
def test_sigterm_mid_run_removes_broker_cgroups_and_loop_device(tmp_path):
    import signal
    import sys
    lab = tmp_path / "cond-smoke.yaml"
    lab.write_text(LAB_WITH_CONDITIONS)
    proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", "lab", "run", str(lab), "--repeats", "1", "--out",
                             str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blk = "/sys/fs/cgroup/blkio"
    try:
        broker, cg = None, None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and broker is None and proc.poll() is None:
            cg = next((d for d in os.listdir(blk) if d.startswith(f"rmq-lab-{proc.pid}-")), None)
            if cg:
                with open(os.path.join(blk, cg, "cgroup.procs")) as fh:
                    pids = fh.read().split()
                broker = int(pids[0]) if pids else None
            if broker is None:
                time.sleep(0.2)
        assert broker is not None, "the broker never reached the lab's blkio cgroup"
        with open(os.path.join(blk, "blkio.throttle.write_iops_device")) as fh:
            rules_during = fh.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert " 1000" in rules_during
    assert not any(d.startswith(f"rmq-lab-{proc.pid}-") for d in os.listdir(blk))
    with open(os.path.join(blk, "blkio.throttle.write_iops_device")) as fh:
        assert " 1000" not in fh.read()
    assert f"rmq-lab-{proc.pid}-" not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    deadline = time.monotonic() + 20                    # the broker was stopped, not left behind
    while time.monotonic() < deadline and os.path.exists(f"/proc/{broker}"):
        with open(f"/proc/{broker}/stat") as fh:
            if fh.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{broker}") or open(f"/proc/{broker}/stat").read().split(") ")[1][0] == "Z"
