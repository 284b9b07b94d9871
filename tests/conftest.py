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
    s = (SparkSession.builder.master("local[2]").appName("rmq-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
         .getOrCreate())
    from kafka_bridge.spark import register
    register(s)
    yield s
    s.stop()


def pytest_collection_finish(session):
    """Start the docs pages in the background as soon as the selection is known: they mostly wait on
    timers (delay levels, check-backs), so that waiting overlaps the other tests (tests/test_docs.py)."""
    if os.environ.get("RMQ_DOCS_EARLY", "1") == "0" or getattr(session.config.option, "collectonly", False):
        return
    if any(getattr(it, "originalname", "") == "test_page_runs" for it in session.items):
        from tests.test_docs import start_pages
        start_pages(session.items)


def pytest_sessionfinish(session):
    mod = sys.modules.get("tests.test_docs")
    if mod is not None:
        mod.stop_pages()
