"""Kill drills (issue 16 part 2) with real processes: a SYNC_FLUSH broker (`rmq up`) is SIGKILLed
while producers send, then restarted; every acknowledged message must be in the consumequeue
exactly once and committed consumer offsets must survive. With `--slave` the broker is a
SYNC_MASTER whose running slave must hold every acknowledged message right after each kill, and
exactly once after it caught up. A bounded number of rounds here; the same drills run for users as
`rmq drill kill --rounds N [--slave]`."""
from __future__ import annotations

import json
import subprocess

import psutil
import pytest
import yaml

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


def test_rmq_drill_kill_slave_sync_master_keeps_every_ack_on_its_slave(tmp_path):
    """`--slave`: a SYNC_MASTER killed while both protocols send, its slave running. Right after each
    kill the slave already holds every message the master acknowledged; after the restart both hold
    each one exactly once at its acknowledged queue offset, and both keep committed offsets."""
    pytest.importorskip("confluent_kafka")
    work = tmp_path / "w"
    out = subprocess.run([PY, "-c", "from rmq.cli import main; main()", "drill", "kill", "--slave", "--rounds", "2",
                          "--protocol", "both", "--min-s", "0.3", "--max-s", "0.8", "--seed", "18",
                          "--data", str(work), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(out.stdout)
    rounds = rep["rounds"]
    assert len(rounds) == 2 and all(r["acknowledged"] > 0 for r in rounds), rounds
    assert rep["total_found"] == rep["total_acknowledged"] > 0
    assert (rep["total_lost"], rep["total_duplicated"], rep["total_misplaced"], rep["offset_errors"]) == (0, 0, 0, 0)
    s = rep["slave"]
    assert s["acked_not_on_slave"] == 0, rounds
    assert (s["total_lost"], s["total_duplicated"], s["total_misplaced"], s["offset_errors"]) == (0, 0, 0, 0), rounds
    assert s["total_found"] == rep["total_acknowledged"]
    # the check at the kill saw every message acknowledged so far on the slave, this round's included
    before = 0
    for r in rounds:
        assert r["slave"]["on_slave_at_kill"] > before and r["slave"]["acked_not_on_slave"] == 0
        before = r["slave"]["on_slave_at_kill"]
    assert all(r["recovery"].startswith("process-crash") for r in rounds), [r["recovery"] for r in rounds]
    master, slave = (yaml.safe_load((work / f"drill-{n}.yaml").read_text()) for n in ("master", "slave"))
    assert (master["brokerRole"], master["flushDiskType"], master["brokerId"]) == ("SYNC_MASTER", "SYNC_FLUSH", 0)
    assert (slave["brokerRole"], slave["brokerId"], slave["brokerName"]) == ("SLAVE", 1, master["brokerName"])


def test_kill_drill_stops_every_process_when_a_broker_cannot_start(tmp_path):
    """A master that refuses its config: a clear error naming its log, and the NameServer already
    started is stopped too (no process of the drill outlives it)."""
    def children() -> set[int]:
        return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("noSuchKey: 1\n")
    before = children()  # other modules' servers may be running in this session
    with pytest.raises(RuntimeError, match=r"the master process exited with status 1; see .*master\.log"):
        run_kill_drill(1, config_path=str(cfg), slave=True, workdir=str(tmp_path / "w"))
    assert "noSuchKey" in (tmp_path / "w" / "master.log").read_text()
    assert (tmp_path / "w" / "namesrv.ready.json").exists()  # it had started
    assert children() - before == set()
