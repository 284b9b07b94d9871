"""Starved repeats (labs.starvation): a run whose broker or client processes waited for a CPU at least
as long as they ran is flagged in the results, the CSV, the report's table and the verdict sentence,
and a verdict on a timed figure that rests on such a run says it is unreliable instead of claiming a
result, while a count stands. The inputs are synthetic (planted results with set CPU and wait
seconds), never real load, so every test is deterministic."""
from __future__ import annotations

import csv
import json
import random

import yaml
from click.testing import CliRunner

from labs import runner
from labs.cli import lab as lab_cmd
from labs.runner import SchedMeter, load_lab, run_lab
from labs.starvation import describe, starved, timed, wait_shares


def _lab(tmp_path, metric="publishRateAvg"):
    body = {"name": "planted", "title": "planted", "question": "which is faster?",
            "source": {"seed": "003", "section": "test"}, "claim": "A is faster",
            "systems": [{"system": "kafka-bridge", "label": "fast"}, {"system": "kafka-log", "label": "slow"}],
            "workload": {"topics": 1}, "sweep": {"topics": [1, 4]}, "metrics": [metric],
            "verdict": {"metric": metric, "kind": "higher", "expect_best": "fast", "explain": "x"}}
    p = tmp_path / "lab.yaml"
    p.write_text(yaml.safe_dump(body))
    return load_lab(str(p))


def _plant(monkeypatch, metric, starve):
    """run_point replaced: `fast` measures twice `slow` (a difference that holds), and the runs for
    which starve(system, topics, call number) is true are starved: the broker waited 3 s for a CPU
    while it ran 1 s of a 5 s phase, on a machine 99% busy; the others waited 0.05 s."""
    rnd = random.Random(3)
    calls = []

    def fake(spec, w, workdir, max_messages, base_dir, say, driver="omb", params=None, cond=None):
        calls.append(spec.name)
        bad = starve(spec.name, w.topics, len(calls))
        x = (20_000.0 if spec.name == "fast" else 10_000.0) * (1 + rnd.uniform(-0.02, 0.02))
        return {"status": "ok", metric: x, "measuredSeconds": 5.0,
                "cpuSeconds": {"broker": 1.0, "runner": 2.0},
                "cpuWaitSeconds": {"broker": 3.0 if bad else 0.05, "runner": 0.1},
                "machineBusyPct": 99.0 if bad else 40.0, "mechanism": {"files_written": 1, "open_fds": 9}}
    monkeypatch.setattr(runner, "run_point", fake)
    return calls


def test_a_process_that_waited_as_long_as_it_ran_is_starved():
    base = {"status": "ok", "measuredSeconds": 10.0, "machineBusyPct": 97.5}
    r = base | {"cpuSeconds": {"broker": 2.0, "producers": 4.0}, "cpuWaitSeconds": {"broker": 2.0, "producers": 1.0}}
    assert wait_shares(r) == {"broker": 0.5, "producers": 0.2}
    s = starved(r)
    assert s == {"processes": {"broker": 0.5}, "machineBusyPct": 97.5}
    assert describe(s) == "broker 50% of their runnable time waiting for a CPU, machine 98% busy"
    # waiting most of its runnable time, but 0.5 s of a 10 s phase: a process that barely ran
    assert starved(base | {"cpuSeconds": {"runner": 0.1}, "cpuWaitSeconds": {"runner": 0.5}}) is None
    assert starved(base | {"cpuSeconds": {"broker": 2.0}, "cpuWaitSeconds": {"broker": 1.9}}) is None
    # the same waits with CPUs idle a third of the time: its own threads' wake-ups, not a starved machine
    assert starved(r | {"machineBusyPct": 65.0}) is None
    assert starved(r | {"machineBusyPct": 90.0}) is not None
    # nothing to judge by: no figures, a process with no CPU reading, a failed run
    assert starved(base) is None
    assert starved(base | {"cpuSeconds": {}, "cpuWaitSeconds": {"broker": 9.0}}) is None
    assert starved({"status": "failed", "cpuSeconds": {"b": 1.0}, "cpuWaitSeconds": {"b": 9.0}}) is None
    # a driver's result has no measuredSeconds: the run's own seconds are the phase
    assert starved({"status": "ok", "seconds": 2.0, "cpuSeconds": {"runner": 0.2},
                    "cpuWaitSeconds": {"runner": 0.3}})["processes"] == {"runner": 0.6}


def test_timed_figures_are_rates_latencies_and_durations():
    for m in ("publishRateAvg", "backlogDrainRate", "aggregatedEndToEndLatency99pct", "latenessMsP99",
              "timeToStableSeconds", "transactionsPerSecond"):
        assert timed(m), m
    for m in ("topicsTheApplicationCreated", "orderViolations", "wireBytesPerMatch", "diskBytesAfter",
              "messagesReadPerLookup", "brokerOffsetEntries"):
        assert not timed(m), m


def test_a_verdict_resting_on_a_starved_repeat_is_unreliable_and_the_report_says_which(tmp_path, monkeypatch):
    lab = _lab(tmp_path)
    # the second call (topics=1, repeat 1, slow) is starved
    _plant(monkeypatch, "publishRateAvg", lambda s, p, n: n == 2)
    out = tmp_path / "o"
    doc = run_lab(lab, str(out), repeats=3)
    v = doc["verdict"]
    assert v["outcome"] == "unreliable" and v["holds"] is None, v["text"]
    assert {c["outcome"] for c in v["comparisons"]} == {"holds"}          # the numbers alone would hold
    assert "1 of the 12 runs compared were measured while the machine was starved: slow topics=1 repeat 1: " \
           "broker 75% of their runnable time waiting for a CPU, machine 99% busy" in v["text"]
    assert v["text"].endswith("— unreliable: the comparison rests on runs measured while the machine was starved; "
                              "run it again on a quieter machine.")
    assert v["starved"] == [{"system": "slow", "point": 1, "repeat": 1, "processes": {"broker": 0.75},
                             "machineBusyPct": 99.0}]
    md = (out / "report.md").read_text()
    assert "the claim holds" not in md and "rests on runs measured while the machine was starved" in md
    header = next(line for line in md.splitlines() if line.startswith("| "))
    assert header.endswith("| starved runs |")
    rows = [line for line in md.splitlines() if line.startswith("| slow | 1 |") or line.startswith("| fast | 1 |")]
    assert sorted(r.rsplit("|", 2)[1].strip() for r in rows) == ["0/3", "1/3"]
    with open(out / "results.csv", encoding="utf-8") as fh:
        flagged = [row for row in csv.DictReader(fh) if row["starved"]]
    assert [(r["system"], r["repeat"]) for r in flagged] == [("slow", "1")]
    res = CliRunner().invoke(lab_cmd, ["report", str(out), "--lang", "zh"], catch_exceptions=False)
    assert res.exit_code == 0 and "不可靠" in res.output and "CPU 不足" in (out / "report.md").read_text()


def test_without_a_starved_repeat_the_same_numbers_hold(tmp_path, monkeypatch):
    _plant(monkeypatch, "publishRateAvg", lambda s, p, n: False)
    out = tmp_path / "o"
    v = run_lab(_lab(tmp_path), str(out), repeats=3)["verdict"]
    assert v["outcome"] == "holds" and v["starved"] == [] and "starved" not in v["text"]
    assert "starved runs" not in (out / "report.md").read_text()


def test_a_count_stands_on_a_starved_repeat_and_the_repeat_is_still_named(tmp_path, monkeypatch):
    _plant(monkeypatch, "orderViolations", lambda s, p, n: s == "fast" and p == 4)
    v = run_lab(_lab(tmp_path, metric="orderViolations"), str(tmp_path / "o"), repeats=3)["verdict"]
    assert v["outcome"] == "holds", v["text"]
    assert "3 of the 12 runs compared were measured while the machine was starved" in v["text"]
    assert "orderViolations does not depend on timing" in v["text"]


def test_an_inconclusive_verdict_stays_inconclusive_and_names_the_starved_runs(tmp_path, monkeypatch):
    _plant(monkeypatch, "publishRateAvg", lambda s, p, n: True)
    v = run_lab(_lab(tmp_path), str(tmp_path / "o"), repeats=1)["verdict"]   # one repeat: no spread
    assert v["outcome"] == "inconclusive", v["text"]
    assert "4 of the 4 runs compared were measured while the machine was starved" in v["text"]


def test_sched_meter_keeps_the_wait_of_a_thread_that_ended(monkeypatch):
    """The other drivers' figures: a client thread that waited and ended before the phase did still
    counts with its last reading; a thread there from the start counts only what it added."""
    readings = iter([{"1": 100_000_000}, {"1": 300_000_000, "7": 500_000_000}, {"1": 400_000_000}])
    monkeypatch.setattr(SchedMeter, "_waits", staticmethod(lambda pid: next(readings)))
    meter = SchedMeter({"runner": 12345})
    meter.sample()                       # thread 7 seen, waiting 0.5 s
    fig = meter.figures()                # thread 7 has ended
    assert fig["cpuWaitSeconds"] == {"runner": 0.8}          # (0.4 - 0.1) + 0.5
    assert set(fig) == {"cpuSeconds", "cpuWaitSeconds", "machineBusyPct"}


def test_a_driver_run_records_cpu_and_wait_of_the_broker_and_the_runner(tmp_path):
    """The run_point figures for a driver other than OMB's, read from this process and a child."""
    import os
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        meter = SchedMeter({"broker": child.pid, "runner": os.getpid()})
        sum(range(300_000))
        fig = meter.figures()
    finally:
        child.kill()
        child.wait(10)
    assert set(fig["cpuWaitSeconds"]) == {"broker", "runner"} and set(fig["cpuSeconds"]) == {"broker", "runner"}
    assert all(v >= 0 for v in fig["cpuWaitSeconds"].values()) and fig["cpuSeconds"]["runner"] >= 0
    json.dumps(fig)                      # stored in results.json as it is
