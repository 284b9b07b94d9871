"""Lab verdicts that survive a second look: every point is measured several times with the systems
interleaved, a difference inside the measured spread or below the lab's minimum effect is
"inconclusive", a large planted difference "holds", and a workload without a claim gets results and no
verdict. The measurements here are planted (run_point replaced by a seeded fake), so the rule and
the reports are checked in a second; tests/test_labs.py runs the labs for real."""
from __future__ import annotations

import json
import random
import re

import pytest
import yaml
from click.testing import CliRunner

from labs import runner
from labs.cli import lab as lab_cmd
from labs.runner import lab_files, load_lab, run_lab
from labs.schema import Lab
from labs.verdict import INCONCLUSIVE, compare, fmt_range


def _lab(tmp_path, systems, kind="higher", metric="publishRateAvg", sweep=None, **verdict) -> Lab:
    body = {"name": "planted", "title": "planted", "question": "which is faster?",
            "source": {"seed": "003", "section": "test"}, "claim": "A is faster", "systems": systems,
            "workload": {"topics": 1}, "sweep": sweep if sweep is not None else {"topics": [1, 4]},
            "metrics": [metric], "mechanism": ["fsyncs"],
            "verdict": {"metric": metric, "kind": kind, "expect_best": systems[0]["label"], "explain": "x", **verdict}}
    p = tmp_path / "lab.yaml"
    p.write_text(yaml.safe_dump(body))
    return load_lab(str(p))


def _plant(monkeypatch, level, spread=0.05, seed=1):
    """run_point replaced: metric = level(system label, sweep value) x (1 +- spread), seeded; the calls are kept."""
    rnd = random.Random(seed)
    calls = []

    def fake(spec, w, workdir, max_messages, base_dir, say, driver="omb", params=None, cond=None):
        calls.append((spec.name, w.topics))
        x = level(spec.name, w.topics) * (1 + rnd.uniform(-spread, spread))
        return {"status": "ok", "publishRateAvg": x, "measuredSeconds": 5.01,
                "mechanism": {"fsyncs": 100, "files_written": 3, "open_fds": 9}}
    monkeypatch.setattr(runner, "run_point", fake)
    return calls


def test_the_same_system_under_two_labels_is_inconclusive(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "a"}, {"system": "kafka-bridge", "label": "b"}])
    calls = _plant(monkeypatch, lambda s, p: 10_000.0)
    doc = run_lab(lab, str(tmp_path / "o"), quick=True)
    assert doc["repeats"] == 3 and len(doc["results"]) == 2 * 3 * 2          # 2 points x 3 repeats x 2 systems
    assert calls[:6] == [("a", 1), ("b", 1), ("b", 1), ("a", 1), ("a", 1), ("b", 1)]   # interleaved
    v = doc["verdict"]
    assert v["outcome"] == INCONCLUSIVE and v["holds"] is None and "inconclusive" in v["text"]
    assert {c["outcome"] for c in v["comparisons"]} == {INCONCLUSIVE}
    for p in ("1", "4"):                     # the sentence gives the medians and ranges it was decided on
        for s in ("a", "b"):
            n = v["numbers"][p][s]
            assert f"{s} {fmt_range(n['median'], n['min'], n['max'])}" in v["text"]
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert sorted({r["repeat"] for r in saved["results"]}) == [1, 2, 3]      # every repeat is kept


def test_a_planted_large_difference_holds_and_its_reverse_does_not(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "fast"}, {"system": "kafka-log", "label": "slow"}])
    _plant(monkeypatch, lambda s, p: 20_000.0 if s == "fast" else 10_000.0)
    doc = run_lab(lab, str(tmp_path / "o"), repeats=5)
    assert doc["repeats"] == 5 and doc["verdict"]["outcome"] == "holds" and doc["verdict"]["holds"] is True
    assert "the claim holds" in doc["verdict"]["text"] and re.search(r"fast vs slow: \d\d% apart, holds", doc["verdict"]["text"])
    lab.verdict.kind = "lower"
    doc = run_lab(lab, str(tmp_path / "o2"), repeats=3)
    assert doc["verdict"]["outcome"] == "does not hold" and doc["verdict"]["holds"] is False


def test_a_steady_difference_below_the_minimum_effect_is_inconclusive(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "a"}, {"system": "kafka-log", "label": "b"}],
               min_effect=0.10)
    _plant(monkeypatch, lambda s, p: 10_500.0 if s == "a" else 10_000.0, spread=0.001)
    v = run_lab(lab, str(tmp_path / "o"), quick=True)["verdict"]
    assert v["outcome"] == INCONCLUSIVE and {c["reason"] for c in v["comparisons"]} == {"small"}
    assert "below the lab's minimum effect of 10%" in v["text"]


def test_falloff_is_decided_on_the_share_kept_with_its_spread(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "commitlog"}, {"system": "kafka-log", "label": "log"}],
               kind="falloff")
    _plant(monkeypatch, lambda s, p: 10_000.0 if s == "commitlog" or p == 1 else 2_000.0)
    v = run_lab(lab, str(tmp_path / "o"), quick=True)["verdict"]
    assert v["outcome"] == "holds", v["text"]
    assert 0.9 < v["numbers"]["commitlog"]["kept"] < 1.1 and 0.15 < v["numbers"]["log"]["kept"] < 0.25
    assert "From topics=1 to topics=4" in v["text"]


def test_compare_overlap_and_single_measurements():
    assert compare([1.0, 2.0, 3.0], [2.5, 3.5, 4.0], "higher", 0.1)[:2] == (INCONCLUSIVE, "overlap")
    assert compare([1.0], [9.0], "lower", 0.1)[:2] == (INCONCLUSIVE, "one_repeat")
    assert compare([0.0, 0.0], [3.0, 4.0], "lower", 0.1)[0] == "holds"       # 0 topics vs 3-4: all of the effect


OMB_WORKLOAD = "name: 1 topic\ntopics: 1\npartitionsPerTopic: 4\nmessageSize: 1024\nproducerRate: 5000\n"


def test_an_omb_workload_without_a_claim_gets_results_and_no_verdict(tmp_path, monkeypatch):
    p = tmp_path / "w.yaml"
    p.write_text(OMB_WORKLOAD)
    lab = load_lab(str(p))
    assert lab.verdict is None
    _plant(monkeypatch, lambda s, p: 5_000.0 if s == "kafka-bridge" else 4_950.0)
    out = tmp_path / "o"
    doc = run_lab(lab, str(out), quick=True)
    assert doc["verdict"]["outcome"] is None and doc["verdict"]["holds"] is None
    assert doc["verdict"]["text"].startswith("no verdict") and "not a claim" in doc["verdict"]["text"]
    assert len(doc["results"]) == 3 * 2
    html = (out / "report.html").read_text()
    assert "None" not in html and "holds" not in html
    assert "publish<wbr>Rate<wbr>Avg (msgs/s)" in html and re.search(r'<td>[45],\d{3}<br><span class="r">\[[45],\d{3}-[45],\d{3}\]</span></td>', html)
    md = (out / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| "))
    assert "consumeRateAvg" not in header                    # a figure no result has is not a column


def test_report_names_the_sweep_gives_units_and_fits(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "fast"}, {"system": "kafka-log", "label": "slow"}])
    _plant(monkeypatch, lambda s, p: 29_499.11 if s == "fast" else 10_000.0)
    out = tmp_path / "o"
    run_lab(lab, str(out), quick=True)
    md = (out / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| "))
    assert header.split(" | ")[1] == "topics" and "| value |" not in md
    assert "publishRateAvg (msgs/s)" in header and "fsyncs" in header
    assert re.search(r"\| 29,\d{3} \[2\d,\d{3}-3?\d,\d{3}\] \|", md) and "29499.11" not in md
    assert "measured phase 5.01-5.01 s per run" in md and "each point measured 3 time(s)" in md
    assert "**What this means.**" in md
    html = (out / "report.html").read_text()
    assert 'class="scroll"' in html and "overflow-x:auto" in html
    assert sorted(p.name for p in out.glob("plot-*.png")) == ["plot-fsyncs.png", "plot-publishRateAvg.png"]


def test_report_in_chinese(tmp_path, monkeypatch):
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "fast"}, {"system": "kafka-log", "label": "slow"}],
               sweep={"topics": [2]})
    _plant(monkeypatch, lambda s, p: 20_000.0 if s == "fast" else 10_000.0)
    out = tmp_path / "o"
    run_lab(lab, str(out), quick=True)
    res = CliRunner().invoke(lab_cmd, ["report", str(out), "--lang", "zh"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "论断成立" in res.output
    html = (out / "report.html").read_text()
    for word in ("问题", "结论", "这意味着什么", "重复次数", "论断成立"):
        assert word in html
    assert "@font-face{font-family:LabCJK;src:url(data:font/woff;base64," in html   # readable without Chinese fonts
    assert (out / "plot-publishRateAvg.png").stat().st_size > 0


def test_every_lab_states_its_minimum_effect_and_names_only_figures_it_reports():
    from labs.report import MECHANISM_FIGURES
    known = set(MECHANISM_FIGURES)
    labs = [load_lab(str(f)) for f in lab_files()]
    for lb in labs:
        known |= set(lb.metrics)
    for lb in labs:
        assert 0 < lb.verdict.min_effect < 1
        shown = set(lb.metrics) | set(lb.mechanism) | {lb.verdict.metric}
        for text in (lb.verdict.explain, lb.verdict.explain_zh):
            named = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]+", text) if w in known}
            assert named <= shown, (lb.name, named - shown)


def test_repeats_option_is_checked():
    res = CliRunner().invoke(lab_cmd, ["run", "topic-count", "--repeats", "0"])
    assert res.exit_code == 2 and "--repeats" in res.output




def test_falloff_pairs_each_repeat_and_leaves_out_a_failed_one(tmp_path):
    from labs.verdict import compute_verdict
    lab = _lab(tmp_path, [{"system": "kafka-bridge", "label": "a"}, {"system": "kafka-log", "label": "b"}],
               kind="falloff")

    def r(system, point, rep, x):
        return {"system": system, "sweep_key": "topics", "sweep_value": point, "repeat": rep,
                **({"status": "ok", "publishRateAvg": x} if x is not None else {"status": "failed", "reason": "x"})}
    results = [r("a", 1, 1, 100.0), r("a", 1, 2, 200.0), r("a", 1, 3, None),
               r("b", 1, 1, 100.0), r("b", 1, 2, 100.0), r("b", 1, 3, 100.0),
               r("a", 4, 1, 90.0), r("a", 4, 2, 180.0), r("a", 4, 3, 50.0),
               r("b", 4, 1, 10.0), r("b", 4, 2, 12.0), r("b", 4, 3, 11.0)]
    v = compute_verdict(lab, results)
    assert v["numbers"]["a"]["values"] == [0.9, 0.9]          # repeat 3 failed at the first point: left out
    assert v["numbers"]["b"]["values"] == [0.1, 0.12, 0.11]
    assert v["outcome"] == "holds"
