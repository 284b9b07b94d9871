"""One broker per store (issue 22): `<storePathRootDir>/lock` (and the kafka-log peer's `<log.dir>/.lock`)
is flock-ed before anything in the directory is read or written, so a second `rmq up` on a live store
stops with one sentence naming the store and the pid that holds it, exit code 1, and leaves every byte
of the store (and its abort file) as it was. A lock file left by a killed process stops nobody;
`rmq store inspect` reads a live store without the lock; `rmq store recover` (it writes) is refused."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.kafka_fixtures import write_config

pytestmark = pytest.mark.timeout(240)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RMQ = [sys.executable, "-m", "rmq.cli"]
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), RMQ_LOG="INFO")
PORTS = ["--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0", "--host", "127.0.0.1"]


class Up:
    """A background `rmq up` process on ephemeral ports; stop() is SIGTERM then SIGKILL, bounded."""

    def __init__(self, workdir, data, extra_config: dict | None = None):
        os.makedirs(workdir, exist_ok=True)
        self.data = str(data)
        self.ready = os.path.join(workdir, "ready.json")
        self.log_path = os.path.join(workdir, "broker.log")
        config = write_config(os.path.join(workdir, "broker.yaml"), extra_config)
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(RMQ + ["up", "--config", config, "--data", self.data, *PORTS,
                                                "--ready-file", self.ready], cwd=workdir, stdout=logf,
                                         stderr=subprocess.STDOUT, env=ENV)
        self.listeners: dict = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(self.ready):
                with open(self.ready, encoding="utf-8") as fh:
                    self.listeners = json.load(fh)
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"rmq up did not become ready (exit {self.proc.returncode}): {self.log()[-3000:]}")

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def second_up(workdir, data, extra_config: dict | None = None) -> subprocess.CompletedProcess:
    """`rmq up` that is expected to stop on its own (bounded)."""
    os.makedirs(workdir, exist_ok=True)
    config = write_config(os.path.join(workdir, "broker.yaml"), extra_config)
    return subprocess.run(RMQ + ["up", "--config", config, "--data", str(data), *PORTS], cwd=workdir,
                          capture_output=True, text=True, timeout=90, env=ENV)


def snapshot(root) -> dict:
    """Every file under the store: its bytes (the abort file's presence and content included)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


@contextlib.contextmanager
def frozen(proc):
    """SIGSTOP a live broker around a comparison of its files: its periodic writers (config persists
    every 10 s, flushes) cannot change a byte meanwhile, while the kernel keeps its lock held. SIGCONT
    on the way out, also when the comparison fails."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def stable_snapshot(root) -> dict:
    """A snapshot taken twice in a row with the same result (a broker's flush may still be writing
    what it was sent a moment ago). The comparisons that follow it run with the broker frozen, so a
    periodic file it would write later (config/delayOffset.json, 10 s after the start) cannot appear
    in the middle of one; waiting for that file first (10 s per test) added nothing."""
    prev = snapshot(root)
    for _ in range(50):
        time.sleep(0.2)
        cur = snapshot(root)
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError("the store kept changing with no client connected")


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        return [p.send(topic, value=v, partition=0).get(20) for v in values]
    finally:
        p.close(5)


def consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for ms in c.poll(timeout_ms=200).values():
                got.extend(m.value for m in ms)
    finally:
        c.close()
    return got


def refusal(root: str, pid: int, name: str = "lock") -> str:
    return (f"Error: cannot use {root} as the store directory: process {pid} holds its lock file {root}/{name} "
            "(a broker, or `rmq store recover`, is running on it); stop it, or choose another with --data, or "
            "storePathRootDir in the --config file")


def error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("Error:")]


# --------------------------------------------------------------------------------------------------
def test_a_second_rmq_up_on_a_live_store_is_refused_and_touches_nothing(tmp_path):
    data = tmp_path / "store"
    first = Up(tmp_path / "first", data)
    try:
        topic = "lock-" + uuid.uuid4().hex[:8]
        values = [b"before-%d" % i for i in range(10)]
        mds = produce(first.listeners["kafka"], topic, values)
        assert [m.offset for m in mds] == list(range(10))
        with open(data / "lock") as fh:
            assert fh.read().strip() == str(first.proc.pid)
        stable_snapshot(data)
        with frozen(first.proc):
            before = snapshot(data)
            assert "abort" in before  # the live broker's crash marker, which a second start used to delete

            proc = second_up(tmp_path / "second", data)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert error_lines(proc.stderr) == [refusal(str(data), first.proc.pid)], proc.stderr
            assert "Traceback" not in proc.stderr
            assert "recovery" not in proc.stderr + proc.stdout  # it stopped before reading the store
            # `rmq broker` (a cluster's broker process) on the same store: refused the same way
            proc = subprocess.run(RMQ + ["broker", "-c", os.path.join(ROOT, "configs", "broker-a.yaml"), "--data",
                                         str(data), "--listen-port", "0", "--kafka-port", "0", "--host", "127.0.0.1",
                                         "-n", first.listeners["namesrv"]], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=90, env=ENV)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert error_lines(proc.stderr) == [refusal(str(data), first.proc.pid)], proc.stderr
            after = snapshot(data)
        assert sorted(after) == sorted(before)
        assert after == before  # byte for byte, abort file included

        # the first broker goes on: its new sends continue its log, and everything reads back
        mds = produce(first.listeners["kafka"], topic, [b"after-%d" % i for i in range(5)])
        assert [m.offset for m in mds] == list(range(10, 15))
        assert consume(first.listeners["kafka"], topic, 15) == values + [b"after-%d" % i for i in range(5)]
    finally:
        code = first.stop()
    assert code == 0, first.log()[-3000:]
    assert not (data / "abort").exists()  # its own clean shutdown


def test_a_lock_file_left_by_a_killed_broker_stops_nobody(tmp_path):
    data = tmp_path / "store"
    first = Up(tmp_path / "first", data)
    topic = "stale-" + uuid.uuid4().hex[:8]
    try:
        produce(first.listeners["kafka"], topic, [b"m%d" % i for i in range(5)])
    finally:
        first.proc.kill()  # SIGKILL: no shutdown path; the kernel drops the flock
        first.proc.wait(10)
    with open(data / "lock") as fh:
        assert fh.read().strip() == str(first.proc.pid)  # the dead pid is still written there
    assert (data / "abort").exists()
    second = Up(tmp_path / "second", data)
    try:
        with open(data / "lock") as fh:
            assert fh.read().strip() == str(second.proc.pid)
        assert "abort file found" in second.log()  # recovered as after any crash
        assert consume(second.listeners["kafka"], topic, 5) == [b"m%d" % i for i in range(5)]
    finally:
        assert second.stop() == 0, second.log()[-3000:]


def test_store_inspect_reads_a_live_store_and_store_recover_is_refused(tmp_path):
    data = tmp_path / "store"
    first = Up(tmp_path / "first", data)
    try:
        produce(first.listeners["kafka"], "inspect-live", [b"x%d" % i for i in range(3)])
        stable_snapshot(data)
        with frozen(first.proc):
            before = snapshot(data)
            insp = subprocess.run(RMQ + ["store", "inspect", str(data), "--topic", "inspect-live"],
                                  capture_output=True, text=True, timeout=60, env=ENV)
            assert insp.returncode == 0, insp.stderr
            assert "abort file: present" in insp.stdout and "inspect-live" in insp.stdout
            rec = subprocess.run(RMQ + ["store", "recover", str(data), "--config",
                                        str(tmp_path / "first" / "broker.yaml")],
                                 capture_output=True, text=True, timeout=60, env=ENV)
            assert rec.returncode == 1
            assert error_lines(rec.stderr) == [refusal(str(data), first.proc.pid)], rec.stderr
            assert snapshot(data) == before  # neither command wrote a byte
    finally:
        assert first.stop() == 0
    # stopped, the store may be recovered offline (it writes, and takes the lock meanwhile)
    rec = subprocess.run(RMQ + ["store", "recover", str(data), "--config", str(tmp_path / "first" / "broker.yaml")],
                         capture_output=True, text=True, timeout=60, env=ENV)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.startswith(f"store {data}: recovery normal (the last shutdown was clean), commitlog ends at ")
    assert not (data / "abort").exists()


def test_the_kafka_log_directory_is_locked_too(tmp_path):
    """Two brokers with their own stores but one kafkaLogDir: Kafka's LogManager locks <log.dir>/.lock."""
    klog = tmp_path / "kafka-logs"
    cfg = {"kafkaStorage": "kafka-log", "kafkaLogDir": str(klog)}
    first = Up(tmp_path / "first", tmp_path / "store-a", cfg)
    try:
        produce(first.listeners["kafka"], "klog", [b"k%d" % i for i in range(3)])
        with open(klog / ".lock") as fh:
            assert fh.read().strip() == str(first.proc.pid)
        stable_snapshot(klog)
        with frozen(first.proc):
            before = snapshot(klog)
            proc = second_up(tmp_path / "second", tmp_path / "store-b", cfg)
            after = snapshot(klog)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert error_lines(proc.stderr) == [
            f"Error: cannot use {klog} as the kafka-log directory: process {first.proc.pid} holds its lock file "
            f"{klog}/.lock (a broker is running on it); stop it, or choose another with kafkaLogDir (or "
            "storePathRootDir) in the --config file"], proc.stderr
        assert "Traceback" not in proc.stderr
        assert after == before
        # the refused broker had its own store open: it closed it cleanly (no abort file, lock released)
        assert (tmp_path / "store-b" / "lock").exists() and not (tmp_path / "store-b" / "abort").exists()
        assert consume(first.listeners["kafka"], "klog", 3) == [b"k%d" % i for i in range(3)]
    finally:
        assert first.stop() == 0, first.log()[-3000:]
    assert (klog / ".kafka_cleanshutdown").exists()


def test_a_store_path_that_is_a_file_is_one_sentence(tmp_path):
    f = tmp_path / "store"
    f.write_text("not a directory")
    proc = second_up(tmp_path / "w", f)  # --data is checked by the command line itself: a usage error
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [f"Error: Invalid value for '--data': Directory '{f}' is a file."]
    # storePathRootDir from the config file reaches the store, which says the same in its own words
    w = tmp_path / "w2"
    w.mkdir()
    config = write_config(str(w / "broker.yaml"), {"storePathRootDir": str(f)})
    proc = subprocess.run(RMQ + ["up", "--config", config, *PORTS], cwd=w, capture_output=True, text=True,
                          timeout=90, env=ENV)
    assert proc.returncode == 1
    assert error_lines(proc.stderr) == [
        f"Error: cannot use {f} as the store directory: it is a file, not a directory; choose another with "
        "--data, or storePathRootDir in the --config file"], proc.stderr
    assert f.read_text() == "not a directory"


def _readonly_runner(tmp_path):
    """A command prefix that runs in a private mount namespace (nothing leaks to the machine's mounts)
    where `ro` is a read-only bind mount of `src`, or a skip naming why that cannot be done here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1): cannot make a read-only mount for this test")
    flags = ["-m"] if os.geteuid() == 0 else ["-r", "-m"]
    probe = tmp_path / "probe"
    probe.mkdir()
    r = subprocess.run([unshare, *flags, "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0"',
                        str(probe)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"mounting is not allowed here (unshare {' '.join(flags)}: {r.stderr.strip()[:200]})")
    return [unshare, *flags, "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && shift '
            '&& exec "$@"']


def test_a_store_on_a_read_only_filesystem_is_one_sentence(tmp_path):
    data = tmp_path / "store"
    first = Up(tmp_path / "first", data)  # a real store: files, a lock file, a clean shutdown
    produce(first.listeners["kafka"], "ro", [b"r"])
    assert first.stop() == 0
    prefix = _readonly_runner(tmp_path)
    before = snapshot(data)
    config = write_config(str(tmp_path / "ro.yaml"))
    proc = subprocess.run(prefix + [str(data), "--"] + RMQ + ["up", "--config", config, "--data", str(data), *PORTS],
                          cwd=tmp_path, capture_output=True, text=True, timeout=90, env=ENV)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert error_lines(proc.stderr) == [
        f"Error: cannot use {data} as the store directory: cannot write in it: Read-only file system; choose "
        "another with --data, or storePathRootDir in the --config file"], proc.stderr
    assert snapshot(data) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits (the read-only mount test covers it)")
def test_a_store_directory_without_write_permission_is_one_sentence(tmp_path):
    data = tmp_path / "store"
    data.mkdir()
    data.chmod(0o555)
    try:
        proc = second_up(tmp_path / "w", data)
    finally:
        data.chmod(0o755)
    assert proc.returncode == 1
    assert error_lines(proc.stderr) == [
        f"Error: cannot use {data} as the store directory: cannot write in it: Permission denied; choose "
        "another with --data, or storePathRootDir in the --config file"], proc.stderr
    assert os.listdir(data) == []


# ------------------------------------------------------------------------------ in one process
def test_in_process_the_lock_is_held_from_load_to_shutdown(tmp_path):
    from rmq.store import DefaultMessageStore, Message
    from rmq.store.mapped_file import StoreLockedError
    from tests.conftest import small_config
    root = str(tmp_path / "store")
    a = DefaultMessageStore(small_config(root)).load().start()
    try:
        a.put_message(Message("T", b"x"))
        b = DefaultMessageStore(small_config(root))
        with pytest.raises(StoreLockedError) as info:
            b.load()                                  # a flock conflicts between two opens of one process too
        assert f"process {os.getpid()} holds its lock file {root}/lock" in str(info.value)
        b.shutdown()                                  # never loaded: must not touch a's abort file
        assert os.path.exists(os.path.join(root, "abort"))
    finally:
        a.shutdown()
    assert not os.path.exists(os.path.join(root, "abort"))
    c = DefaultMessageStore(small_config(root)).load()  # released at a's clean shutdown
    try:
        assert c.get_max_offset_in_queue("T", 0) == 1 and not c.recovered_abnormally
    finally:
        c.shutdown()


def test_a_load_that_fails_after_locking_releases_the_lock(tmp_path):
    from rmq.store import DefaultMessageStore, Message
    from rmq.store.mapped_file import StoreError, StoreLockedError
    from tests.conftest import small_config
    root = str(tmp_path / "store")
    s = DefaultMessageStore(small_config(root)).load()
    s.put_message(Message("T", b"x"))
    s.shutdown()
    with pytest.raises(StoreError) as info:   # another file size than the store's files: load() fails
        DefaultMessageStore(small_config(root, mappedFileSizeCommitLog=128 * 1024)).load()
    assert not isinstance(info.value, StoreLockedError)
    s2 = DefaultMessageStore(small_config(root)).load()   # the failed load did not keep the lock
    s2.shutdown()
