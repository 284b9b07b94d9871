"""Kill drills (issue 16 part 2) with real processes: a SYNC_FLUSH broker (`rmq up`) is SIGKILLed
while producers send, then restarted; every acknowledged message must be in the consumequeue
exactly once and committed consumer offsets must survive. A bounded number of rounds here; the
same drill runs for users as `rmq drill kill --rounds N`."""
from __future__ import annotations

import json
import subprocess

import pytest

from rmq.drill.kill import run_kill_drill

from .conftest import PY, ROOT


def _check(rep, rounds):
    assert len(rep.rounds) == rounds
    assert rep.total_acknowledged > 0 and all(r.acknowledged > 0 for r in rep.rounds), rep.rounds
    assert rep.total_lost == 0 and rep.total_duplicated == 0 and rep.total_misplaced == 0, rep.rounds
    assert rep.total_found == rep.total_acknowledged
    assert rep.offset_errors == 0
    # after a kill the store recovers from the last dispatched unit, not by re-reading the log
    assert all(r.recovery.startswith("process-crash") for r in rep.rounds), [r.recovery for r in rep.rounds]


def test_kill_drill_rocketmq_remoting(tmp_path):
    rep = run_kill_drill(3, protocols=("rocketmq",), workdir=str(tmp_path), min_s=0.3, max_s=1.0, seed=16)
    _check(rep, 3)


def test_kill_drill_kafka_acks_all(tmp_path):
    pytest.importorskip("confluent_kafka")
    rep = run_kill_drill(3, protocols=("kafka",), workdir=str(tmp_path), min_s=0.3, max_s=1.0, seed=17)
    _check(rep, 3)


def test_rmq_drill_kill_command_prints_totals_and_json(tmp_path):
    pytest.importorskip("confluent_kafka")
    cfg = tmp_path / "broker.yaml"
    cfg.write_text("brokerName: drill-b\nflushDiskType: ASYNC_FLUSH\n")  # the drill forces SYNC_FLUSH
    out = subprocess.run([PY, "-c", "from rmq.cli import main; main()", "drill", "kill", "--rounds", "2",
                          "--config", str(cfg), "--protocol", "both", "--min-s", "0.3", "--max-s", "0.8",
                          "--data", str(tmp_path / "w"), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(out.stdout)
    assert len(rep["rounds"]) == 2 and rep["total_lost"] == 0 and rep["total_duplicated"] == 0
    assert rep["total_found"] == rep["total_acknowledged"] > 0
    assert "SYNC_FLUSH" in (tmp_path / "w" / "drill-broker.yaml").read_text()
