"""The three pipelines of configs/pipelines/ run end to end through `rmq pipeline run --seed` (an
embedded broker, the pipeline's own demo data, spark-pipelines), and their Parquet outputs hold
what the seeded data says they must."""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
import pyarrow.dataset as ds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RMQ = [sys.executable, "-m", "rmq.cli"]


def rows(out: Path, table: str) -> list[dict]:
    return ds.dataset(str(out / "spark-warehouse" / table), format="parquet").to_table().to_pylist()


def seed_module(name: str):
    spec = importlib.util.spec_from_file_location(f"seed_{name.replace('-', '_')}",
                                                  ROOT / "configs" / "pipelines" / name / "seed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_orders_revenue_per_minute_as_docs_spark_md_shows_it():
    """docs/spark.md runs `rmq pipeline run orders --seed 300` end to end and tests/test_docs.py
    compares what it prints with the page: 300 rows in `orders` (the 30 duplicates dropped), 5 in
    `revenue_per_minute`, and the view read back. Here: the page's numbers are the ones the seed
    implies, so that run checks the pipeline's output against them (the same run a second time here
    would start a second Spark Connect server for nothing)."""
    from tests.docs_runner import extract_blocks
    page = ROOT / "docs" / "spark.md"
    cmds = {c.text: c for b in extract_blocks(page.read_text(), str(page))
            if b.info == "console" and not b.skipped for c in b.commands}
    run = cmds["rmq pipeline run orders --seed 300 --output pipelines-out/orders"]
    assert "[...s] flow orders completed: 300 rows in ...s, ... rows/s" in run.expected
    assert "  .../pipelines-out/orders/spark-warehouse/orders  300 rows" in run.expected
    assert "  .../pipelines-out/orders/spark-warehouse/revenue_per_minute  5 rows" in run.expected
    view = next(c for text, c in cmds.items() if "revenue_per_minute" in text and text.startswith("python"))
    got = {}
    for line in view.expected[1:]:
        day, start, _, _, revenue, orders = line.split()
        got[dt.datetime.fromisoformat(f"{day} {start}")] = (Decimal(revenue), int(orders))
    want = seed_module("orders").expected_revenue(300)
    assert got == want and len(want) == 5
    assert sum(n for _, n in got.values()) == 300


def run_pipelines_at_once(runs: list[tuple[str, int, Path]]) -> list[str]:
    """`rmq pipeline run` several times at once (each with its embedded broker and its own Spark Connect
    server), one (pipeline, seed, output) per run; returns each run's stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([*RMQ, "pipeline", "run", name, "--seed", str(seed), "--output", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for name, seed, out in runs]
    results = []
    try:
        for p, (_, _, out) in zip(procs, runs):
            stdout, stderr = p.communicate(timeout=900)
            assert p.returncode == 0, stdout[-3000:] + stderr[-5000:]
            assert "run completed" in stderr and f"pipeline {out.name}: completed" in stdout
            results.append(stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    return results


@pytest.mark.timeout(900)
def test_tags_and_dlq_audit_two_runs_at_once(tmp_path):
    """Two runs at once on one machine (issue 26): each has its own Spark Connect server on a free port
    of 127.0.0.1, so neither collides with the other on 15002, and both pipelines' tables are right
    (the tags pipeline keeps only the chosen tag; dlq-audit finds every dead letter)."""
    tags, dlq = tmp_path / "tags", tmp_path / "dlq"
    logs = run_pipelines_at_once([("tags", 40, tags), ("dlq-audit", 6, dlq)])
    ports = set()
    for log in logs:
        line = next(ln for ln in log.splitlines() if ln.startswith("Spark Connect server on "))
        assert line.startswith("Spark Connect server on 127.0.0.1:"), line
        ports.add(line.rsplit(":", 1)[1])
    assert len(ports) == 2 and "15002" not in ports
    check_tags(tags)
    check_dlq_audit(dlq)


def check_tags(out: Path) -> None:
    events = rows(out, "tagged_events")
    seeded = [e for e in seed_module("tags").events(40) if e["tag"] == "paid"]
    assert sorted(r["keys"] for r in events) == sorted(e["key"] for e in seeded) and len(events) == 10
    assert {r["tags"] for r in events} == {"paid"}
    counts = {(r["tags"], r["region"]): r["count"] for r in rows(out, "tagged_counts")}
    want: dict = {}
    for e in seeded:
        want[("paid", e["region"])] = want.get(("paid", e["region"]), 0) + 1
    assert counts == want


def check_dlq_audit(out: Path) -> None:
    seed = seed_module("dlq-audit")
    summary = {r["consumer_group"]: r for r in rows(out, "dead_letter_summary")}
    assert set(summary) == {"cg_pay", "cg_ship"}
    for topic, (group, max_times) in seed.GROUPS.items():
        s = summary[group]
        assert s["original_topic"] == topic and s["dead_letters"] == seed.counts(6)[topic]
        assert s["max_reconsume_times"] >= max_times              # retried up to maxReconsumeTimes first
    letters = rows(out, "dead_letters")
    assert sorted(r["keys"] for r in letters if r["consumer_group"] == "cg_ship") == [f"ship-{i:04d}" for i in range(3)]
    assert all(r["origin_msg_id"] and r["body"] for r in letters)


@pytest.mark.timeout(900)
def test_shipped_specs_under_plain_spark_pipelines(tmp_path):
    """The specs as shipped are valid for spark-pipelines itself (issue 26: a relative storage was
    refused with PIPELINE_STORAGE_ROOT_INVALID): a dry run of each, against a Spark Connect server on
    the loopback (not spark-pipelines' own on 15002, which other runs on this machine may hold)."""
    from kafka_bridge.pipelines import _pipeline_env, _stop_group, start_connect_server
    server, url = start_connect_server(tmp_path, lambda _m: None)
    exe = str(Path(sys.executable).parent / "spark-pipelines")
    procs = {}
    try:
        # the three dry runs at once against the one server: each is a Python client that mostly waits on
        # the server's answers, so they overlap instead of queueing
        for name in ("orders", "tags", "dlq-audit"):
            spec = ROOT / "configs" / "pipelines" / name / "spark-pipeline.yml"
            (tmp_path / name).mkdir()
            with open(tmp_path / name / "out.log", "w") as out, open(tmp_path / name / "err.log", "w") as err:
                procs[name] = subprocess.Popen([exe, "--remote", url, "dry-run", "--spec", str(spec)],
                                               cwd=tmp_path / name, env=_pipeline_env(), stdout=out, stderr=err,
                                               start_new_session=True)
        for name, p in procs.items():
            p.wait(600)
            stdout, stderr = ((tmp_path / name / f).read_text(errors="replace") for f in ("out.log", "err.log"))
            assert p.returncode == 0 and "Run is COMPLETED" in stdout, (name, stdout[-3000:], stderr[-3000:])
    finally:
        for p in procs.values():
            _stop_group(p)
        _stop_group(server)


@pytest.mark.parametrize("args, words", [
    (["pipeline", "run", "no-such-pipeline"], "no-such-pipeline: no such pipeline"),
    (["pipeline", "run", "orders", "--bootstrap", "127.0.0.1:1"], "--bootstrap 127.0.0.1:1: nothing answers there"),
])
def test_bad_input_is_one_clear_line(args, words, tmp_path):
    res = subprocess.run([*RMQ, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode != 0 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "pipelines-out").exists()          # refused before anything was made
