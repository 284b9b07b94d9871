"""Spark drills with real processes: a streaming job killed with SIGKILL mid-stream and restarted from
its checkpoint (in the tests' own SparkSession, another JVM) writes every record exactly once (both
Python sources); a job on a standalone master
and worker started from pyspark's own launcher reads its source partitions on the worker's executor,
not on the driver."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")

from tests.kafka_fixtures import start_broker, unique  # noqa: E402
from tests.spark_fixtures import KafkaSide, RocketSide  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "spark_job.py")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("spark-drill-up")))
    try:
        yield b
    finally:
        b.stop()


def _env() -> dict:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _spawn(args: list[str], log: str) -> subprocess.Popen:
    fh = open(log, "ab")
    return subprocess.Popen([sys.executable, JOB, *args], stdout=fh, stderr=fh, env=_env(), cwd=ROOT,
                            start_new_session=True)         # its own group: the JVM dies with it


def _kill_group(p: subprocess.Popen, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


def _sink_rows(out: str) -> int:
    """Rows in the files a streaming file sink has committed (its _spark_metadata log), read with
    pyarrow: polling through the shared SparkSession while another JVM writes cost a py4j call per
    second, and one that stalled on a loaded machine broke the session for every later Spark test."""
    import json
    from urllib.parse import urlparse

    import pyarrow.parquet as pq
    meta = os.path.join(out, "_spark_metadata")
    files: set = set()
    for name in sorted(os.listdir(meta)) if os.path.isdir(meta) else []:
        if name.startswith("."):
            continue
        try:
            with open(os.path.join(meta, name), encoding="utf-8") as fh:
                lines = fh.read().splitlines()[1:]             # the first line is the log's version
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue                                      # a log file still being written
            path = urlparse(entry["path"]).path
            (files.discard if entry.get("action") == "delete" else files.add)(path)
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files if os.path.exists(f))


def _committed(checkpoint: str) -> int:
    d = os.path.join(checkpoint, "commits")
    return len([f for f in os.listdir(d) if f.isdigit()]) if os.path.isdir(d) else 0


@pytest.mark.parametrize("fmt", ["pykafka", "rocketmq"])
def test_kill_and_restart_from_checkpoint_writes_each_record_once(spark, broker, fmt, tmp_path):
    side = KafkaSide(broker) if fmt == "pykafka" else RocketSide(broker)
    t = side.create("spk-eo", 2)
    # 160 records, 40 per micro-batch: killed after 2 of the 4 batches, 80 more while it is down
    first = [(i % 2, b"e%d" % i, None) for i in range(160)]
    side.produce(t, first)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "job.log")
    opts = side.options(topic=t, startingOffsets="earliest", maxOffsetsPerTrigger="40")
    if fmt == "rocketmq":
        opts["consumerGroup"] = unique("spark-eo")
    args = ["stream", fmt, out, ck, *[f"{k}={v}" for k, v in opts.items()]]
    job = _spawn(args, log)
    try:
        deadline = time.monotonic() + 180
        while _committed(ck) < 2:
            assert job.poll() is None, open(log, errors="replace").read()[-3000:]
            assert time.monotonic() < deadline, "the job committed fewer than 2 micro-batches in 180 s"
            time.sleep(0.2)
    finally:
        _kill_group(job)                                   # SIGKILL mid-stream: no clean shutdown
    done_before = _committed(ck)
    assert done_before * 40 < 160, "the job finished before it was killed: not a mid-stream kill"
    side.produce(t, [(i % 2, b"e%d" % i, None) for i in range(160, 240)])     # more while it is down
    # The restart is a new query on the same checkpoint and output in another JVM, this test's shared
    # session (the checkpoint is all the killed job leaves behind); availableNow has it re-run the batch
    # the kill interrupted, read to the end and stop by itself, with no JVM start and no polling.
    r = spark.readStream.format(fmt)
    for k, v in opts.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", ck).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(240), f"after the restart the output holds {_sink_rows(out)} of 240 records in 240 s"
    finally:
        if q.isActive:
            q.stop()
    assert q.exception() is None, q.exception()
    assert _committed(ck) > done_before                             # it went on from the checkpoint
    df = spark.read.parquet(out)
    values = sorted(bytes(r.value) for r in df.collect())
    assert values == sorted(b"e%d" % i for i in range(240))          # each once: none lost, none twice
    assert df.select("partition", "offset").distinct().count() == 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class(*args: str, log: str) -> subprocess.Popen:
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    fh = open(log, "ab")
    env = dict(_env(), SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=os.path.dirname(log))
    return subprocess.Popen([spark_class, *args], stdout=fh, stderr=fh, env=env, start_new_session=True)


def _wait_port(port: int, proc: subprocess.Popen, log: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None, open(log, errors="replace").read()[-3000:]
        assert time.monotonic() < deadline, f"nothing listens on {port} after {timeout:.0f}s"
        time.sleep(0.3)


def test_standalone_cluster_reads_on_the_executors(broker, tmp_path):
    k = KafkaSide(broker)
    t = k.create("spk-cl", 3)
    k.produce(t, [(i % 3, b"c%d" % i, None) for i in range(90)])
    port, ui = _free_port(), _free_port()
    mlog, wlog, jlog = str(tmp_path / "master.log"), str(tmp_path / "worker.log"), str(tmp_path / "job.log")
    master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", str(ui), log=mlog)
    worker = None
    try:
        _wait_port(port, master, mlog)
        worker = _spark_class("org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                              "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                              "--work-dir", str(tmp_path / "work"), log=wlog)
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in open(wlog, errors="replace").read():
            assert worker.poll() is None, open(wlog, errors="replace").read()[-3000:]
            assert time.monotonic() < deadline, "the worker did not register with the master in 60 s"
            time.sleep(0.3)
        res = subprocess.run([sys.executable, JOB, "cluster", f"spark://127.0.0.1:{port}", "pykafka",
                              f"kafka.bootstrap.servers={k.bootstrap}", f"subscribe={t}"],
                             capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        got = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        for p in (worker, master):
            if p is not None:
                _kill_group(p, signal.SIGTERM)
    assert got["master"] == f"spark://127.0.0.1:{port}"
    assert got["count"] == 90 and got["partitions"] == 3
    assert got["task_executors"] == ["0"], got        # every task on the worker's executor, none on the driver
    assert got["tasks"] >= 3


@pytest.mark.skipif(not os.path.isdir(os.environ.get("SPARK_KAFKA_JARS", "/nonexistent")),
                    reason="SPARK_KAFKA_JARS does not name a directory holding spark-sql-kafka-0-10 and its "
                           "dependencies (Maven Central is not reachable here)")
def test_official_connector_reads_what_pykafka_reads(broker):
    k = KafkaSide(broker)
    t = k.create("spk-off", 2)
    k.produce(t, [(i % 2, b"o%d" % i, b"k%d" % i) for i in range(20)])
    res = subprocess.run([sys.executable, JOB, "official", f"kafka.bootstrap.servers={k.bootstrap}", f"subscribe={t}",
                          "startingOffsets=earliest"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["official_available"] is True
    assert len(got["kafka"]) == 20 and got["kafka"] == got["pykafka"]
