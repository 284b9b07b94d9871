"""The layering rules of docs/architecture.md hold for the tree, and the check fails when an arrow
runs the wrong way or a cycle appears (shown on a copy of the tree with one line added)."""
from __future__ import annotations

import os
import shutil

import pytest

from tests import layering

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tree_has_no_forbidden_import():
    assert layering.violations(ROOT) == []


def test_tree_has_no_import_cycle():
    assert layering.cycles(ROOT) == []


@pytest.fixture
def tree_copy(tmp_path):
    for pkg in layering.PACKAGES:
        shutil.copytree(os.path.join(ROOT, pkg), tmp_path / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    return tmp_path


def _append(root, rel: str, text: str) -> None:
    with open(os.path.join(root, rel), "a", encoding="utf-8") as f:
        f.write("\n" + text + "\n")


@pytest.mark.parametrize("rel, line, expect", [
    ("rmq/client/producer.py", "from rmq.store import DefaultMessageStore",
     "rmq.client.producer -> rmq.store (rmq.client may import only"),
    ("rmq/client/consumer_base.py", "def f():\n    from rmq.broker.controller import BrokerController",
     "rmq.client.consumer_base -> rmq.broker.controller"),
    ("rmq/store/commitlog.py", "from rmq.broker import topic_config",
     "rmq.store.commitlog -> rmq.broker.topic_config (rmq.store may import only"),
    ("rmq/broker/retry.py", "from rmq.remoting import RemotingCommand",
     "rmq.broker.retry -> rmq.remoting (rmq.broker may import only"),
    ("rmq/cli.py", "import kafka_bridge.server", "rmq.cli -> kafka_bridge.server (rmq may import only rmq)"),
    ("kafka_bridge/mapping.py", "from labs import plugin", "kafka_bridge.mapping -> labs"),
    ("kafka_bridge/handlers/fetch.py", "import pyspark",
     "kafka_bridge.handlers.fetch -> pyspark (pyspark is imported only in kafka_bridge.spark)"),
    ("kafka_bridge/records/batch.py", "import socket", "(a codec opens no socket or file)"),
    ("rmq/remoting/frame.py", "def f(p):\n    return open(p)", "rmq.remoting.frame calls open()"),
    ("rmq/cli_cluster.py", "from rmq.bench import store", "(rmq.bench is imported only by rmq.cli"),
])
def test_forbidden_import_is_reported(tree_copy, rel, line, expect):
    assert layering.violations(str(tree_copy)) == []
    _append(tree_copy, rel, line)
    found = layering.violations(str(tree_copy))
    assert len(found) == 1 and expect in found[0], found
    assert found[0].startswith(rel + ":")


def test_optional_spark_package_must_be_imported_lazily(tree_copy):
    os.makedirs(tree_copy / "kafka_bridge" / "spark", exist_ok=True)
    (tree_copy / "kafka_bridge" / "spark" / "__init__.py").write_text("import pyspark\n")
    assert layering.violations(str(tree_copy)) == []  # pyspark inside kafka_bridge.spark is fine
    _append(tree_copy, "kafka_bridge/plugin.py", "def load():\n    from kafka_bridge import spark")
    assert layering.violations(str(tree_copy)) == []  # a lazy import from the plugin is fine
    _append(tree_copy, "kafka_bridge/plugin.py", "from kafka_bridge import spark as _spark")
    found = layering.violations(str(tree_copy))
    assert len(found) == 1 and "kafka_bridge.spark is optional" in found[0], found


def test_cycle_is_reported_even_through_a_lazy_or_type_checking_import(tree_copy):
    _append(tree_copy, "rmq/client/consume_service.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .push_consumer import AsyncPushConsumer")
    found = layering.cycles(str(tree_copy))
    assert len(found) == 1
    assert {"rmq.client.consume_service", "rmq.client.push_consumer"} <= set(found[0])
