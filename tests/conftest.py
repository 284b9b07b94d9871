"""Shared fixtures: small stores in temporary directories."""
from __future__ import annotations

import os
import sys

import pytest

from rmq.store import DefaultMessageStore, MessageStoreConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
# `rmq up` started by tests and docs pages (this process's children) opens no web console on 8080,
# where several would collide; console tests pass --console-port -1 (ephemeral) themselves
os.environ["RMQ_CONSOLE_PORT"] = "0"
# The Spark JVMs the tests start live for seconds to minutes: the SparkSession below, tests/spark_job.py's
# jobs and `rmq pipeline run`'s Spark Connect server (drivers launched by spark-submit, which adds
# SPARK_SUBMIT_OPTS), the standalone master and worker of tests/test_spark_drills.py (SPARK_DAEMON_JAVA_OPTS).
# C1 alone (no C2 compiler threads) leaves the 2 shared cores to the work: a local SparkSession start and
# three Python-data-source reads took a median 59 s instead of 86 s (3 interleaved pairs, loaded 2-core
# machine); files whose time goes to Python workers ran alike (test_spark_sources 202 s vs 205 s,
# test_spark_compat 379 s vs 383 s, with and without, side by side). A value the caller set is kept.
SPARK_JVM_OPTS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_JVM_OPTS)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SPARK_JVM_OPTS)


def small_config(root: str, **kw) -> MessageStoreConfig:
    base = dict(storePathRootDir=root, mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=20 * 100,
                maxMessageSize=16 * 1024, maxHashSlotNum=100, maxIndexNum=400)
    base.update(kw)
    return MessageStoreConfig(**base)


@pytest.fixture
def store_factory(tmp_path):
    opened: list[DefaultMessageStore] = []

    def make(start: bool = True, **kw) -> DefaultMessageStore:
        root = kw.pop("root", str(tmp_path / "store"))
        clock = kw.pop("clock", None)
        disk_ratio = kw.pop("disk_ratio", None)
        file_age_ms = kw.pop("file_age_ms", None)
        s = DefaultMessageStore(small_config(root, **kw), clock=clock, disk_ratio=disk_ratio,
                                file_age_ms=file_age_ms).load()
        if start:
            s.start()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.shutdown()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for every Spark test (starting one costs seconds), with the project's
    Python data sources registered."""
    pytest.importorskip("pyspark")
    import sys
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master("local[2]").appName("rmq-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    jars = os.environ.get("SPARK_KAFKA_JARS")   # Spark's own Kafka connector, for the "official" cases
    if jars and os.path.isdir(jars):
        b = b.config("spark.jars", ",".join(os.path.join(jars, f) for f in sorted(os.listdir(jars)) if f.endswith(".jar")))
    s = b.getOrCreate()
    from kafka_bridge.spark import register
    register(s)
    yield s
    s.stop()


# ---------------------------------------------------------------- running the suite in several workers
# `make test` runs pytest-xdist workers (-n 3). The scheduler below hands out whole files (a file's
# module-scoped servers start once per file; SPLIT_TESTS are halved) and gives tests/test_docs.py to the first worker, gw0,
# last: gw0 starts the docs pages in background threads right after collection
# (pytest_collection_finish), runs other files while the pages wait on their timers, and collects
# their results at the end. Long files go out first so that the workers end together (a worker that
# runs a Spark file starts its own SparkSession once); the order is a hint measured on the 2-core
# machine, correctness does not depend on it.
DOCS_FILE = "tests/test_docs.py"
DOCS_WORKER = "gw0"
# The Spark files are spread out: three JVMs starting at once on 2 cores made Spark's fixed 10 s wait
# for a Python worker run out ("Python worker failed to connect back").
LONG_FIRST = ["tests/test_spark_compat.py", "tests/test_labs.py", "tests/test_labs.py@1", "tests/test_spark_sources.py",
              "tests/test_spark_pipelines.py", "tests/test_spark_drills.py", "tests/test_demos.py",
              "tests/test_exercises.py", "tests/test_semantics_cpp.py", "tests/test_drills.py", "tests/test_console.py",
              "tests/test_shutdown.py", "tests/test_fuzz.py", "tests/test_store_lock.py", "tests/test_lab_drivers.py",
              "tests/test_cli.py", "tests/test_semantics_wire.py", "tests/test_kafka_cluster_drill.py",
              "tests/test_ha.py", "tests/test_kafka_cluster.py", "tests/test_cluster_processes.py"]


#: Parametrized tests long enough to be split in two units: the odd-numbered parameters go to the
#: unit "<file>@1", the rest stay with their file (each lab's quick run costs 15-60 s).
SPLIT_TESTS = {"tests/test_labs.py::test_every_lab_runs_quick_with_a_measured_verdict"}


def suite_scope(nodeid: str) -> str:
    """The unit of work of a test: its file, or half of a split test's parameters."""
    path, _, rest = nodeid.partition("::")
    name, _, param = rest.partition("[")
    if param and f"{path}::{name}" in SPLIT_TESTS:
        from labs.runner import lab_files
        labs = [f.stem for f in lab_files()]
        lab = param.rstrip("]")
        if lab in labs and labs.index(lab) % 2:
            return f"{path}@1"
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_scope(nodeid)

        def _docs_node(self):
            ids = {n.gateway.id: n for n in self.nodes if not n.shutting_down}
            return ids.get(DOCS_WORKER) or next(iter(ids.values()), None)

        def _next_scope(self, node):
            rank = {name: i for i, name in enumerate(LONG_FIRST)}
            others = [sc for sc in self.workqueue if sc != DOCS_FILE]
            if others:
                return min(others, key=lambda sc: rank.get(sc, len(rank)))
            return DOCS_FILE if node is self._docs_node() else None

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            scope = self._next_scope(node) if self.workqueue else None
            if scope is None:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign(node, scope)

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            if scope is not None:
                self._assign(node, scope)

        def _assign(self, node, scope) -> None:
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nid) for nid, done in work_unit.items() if not done])

    return SuiteScheduling(config, log)


def pytest_collection_finish(session):
    """Start the docs pages in the background as soon as the selection is known: they mostly wait on
    timers (delay levels, check-backs), so that waiting overlaps the other tests (tests/test_docs.py).
    Under xdist only the docs worker starts them."""
    if os.environ.get("RMQ_DOCS_EARLY", "1") == "0" or getattr(session.config.option, "collectonly", False):
        return
    if os.environ.get("PYTEST_XDIST_WORKER", DOCS_WORKER) != DOCS_WORKER:
        return
    if any(getattr(it, "originalname", "") == "test_page_runs" for it in session.items):
        from tests.test_docs import start_pages
        start_pages(session.items)


def pytest_sessionfinish(session):
    mod = sys.modules.get("tests.test_docs")
    if mod is not None:
        mod.stop_pages()
