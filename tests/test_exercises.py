"""The exercises (`rmq exercise`): every checker accepts its reference solution (hidden cases and the
live-broker cases) and rejects the typical wrong answers in tests/exercise_solutions/<name>/; start
copies the starter and the task and never overwrites; check survives code that raises, loops,
prints or fails to import, names the failing case, and leaves no process behind."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from labs.exercises import ExerciseError, check, describe, load_exercise, names, planned_cases, start
from labs.exercises.cli import exercise as exercise_cmd

SOLUTIONS = Path(__file__).parent / "exercise_solutions"
EXERCISES = names()


def _place(name: str, src: Path, tmp: Path) -> Path:
    ex = load_exercise(name)
    d = tmp / src.stem
    d.mkdir()
    shutil.copyfile(src, d / ex.file)
    return d


def test_there_are_at_least_eight_with_both_languages_and_answers():
    assert len(EXERCISES) >= 8
    for n in EXERCISES:
        base = Path("labs/exercises") / n
        for f in ("task.md", "task.zh.md", "checker.py"):
            assert (base / f).stat().st_size > 200, (n, f)
        assert (SOLUTIONS / n / "good.py").exists(), n
        assert len(list((SOLUTIONS / n).glob("wrong_*.py"))) >= 2, n


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_solution_passes(name, tmp_path):
    res = check(name, str(_place(name, SOLUTIONS / name / "good.py", tmp_path)))
    assert res.passed, describe(res)
    # the count of cases, listed before running, is what ran
    assert [(c["phase"], c["name"]) for c in res.cases] == planned_cases(name) and res.total == len(res.cases)
    if load_exercise(name).live:
        assert any(c["phase"] == "live" for c in res.cases), "the live cases ran"


WRONG = [(n, p.name) for n in EXERCISES for p in sorted((SOLUTIONS / n).glob("wrong_*.py"))]


@pytest.mark.parametrize("name, wrong", WRONG, ids=[f"{n}/{w}" for n, w in WRONG])
def test_typical_wrong_answer_is_rejected_with_the_case_named(name, wrong, tmp_path):
    res = check(name, str(_place(name, SOLUTIONS / name / wrong, tmp_path)))
    assert not res.passed
    failing = [c for c in res.cases if not c["ok"]]
    assert failing and all(c["name"] and c["expected"] for c in failing)
    text = describe(res)
    assert f"FAIL [offline] {failing[0]['name']}" in text and "expected:" in text and "got:" in text


def run_cli(*args):
    return CliRunner().invoke(exercise_cmd, list(args), catch_exceptions=False)


def test_list_show_start_check_from_the_command_line(tmp_path):
    res = run_cli("list", "--json")
    rows = json.loads(res.output)
    assert [r["name"] for r in rows] == EXERCISES and all(r["title_zh"] for r in rows)
    assert "环形" in run_cli("show", "allocate-by-circle", "--lang", "zh").output
    work = tmp_path / "work"
    res = run_cli("start", "allocate-by-circle", str(work))
    assert res.exit_code == 0 and (work / "allocate.py").exists() and (work / "task.zh.md").exists()
    res = run_cli("start", "allocate-by-circle", str(work))          # never over a student's work
    assert res.exit_code == 1 and "already has" in res.output and "--force" in res.output
    res = run_cli("check", "allocate-by-circle", str(work))           # the untouched starter
    assert res.exit_code == 1 and "NotImplementedError: fill in allocate" in res.output
    assert "not yet (0 of" in res.output
    res = run_cli("check", "no-such-thing", str(work))
    assert res.exit_code == 1 and "no such exercise" in res.output and "allocate-by-circle" in res.output
    res = run_cli("check", "indexfile-lookup", str(work))              # started another exercise
    assert res.exit_code == 1 and "indexfile.py: not found" in res.output and "rmq exercise start" in res.output


def test_start_and_check_as_a_student_would(tmp_path):
    """The installed `rmq` command, from a directory outside the repository."""
    rmq = Path(sys.executable).with_name("rmq")
    work = tmp_path / "me"
    out = subprocess.run([str(rmq), "exercise", "start", "retry-schedule", str(work)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    shutil.copyfile(SOLUTIONS / "retry-schedule" / "wrong_level_one.py", work / "retry.py")
    out = subprocess.run([str(rmq), "exercise", "check", "retry-schedule", str(work)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and "FAIL [offline] next_step(0) with the defaults" in out.stdout, out.stdout


@pytest.mark.parametrize("body, words", [
    ("def allocate(:\n", "SyntaxError"),
    ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ("import sys\nprint('garbage', flush=True)\nsys.stdout.write('{\"ok\": true}\\n')\n"
     "def allocate(g, c, mqs, cids):\n    print('noise')\n    raise KeyError('mine')\n", "KeyError: 'mine' (your line 6"),
    ("n = 0\nwhile True:\n    n += 1\n", "the top level of your file did not return within"),
])
def test_bad_student_code_is_reported_not_crashed(tmp_path, body, words):
    d = tmp_path / "w"
    d.mkdir()
    (d / "allocate.py").write_text(body)
    res = check("allocate-by-circle", str(d))
    assert not res.passed and words in describe(res), describe(res)
    # the same count of cases whatever went wrong
    assert f" of {len(planned_cases('allocate-by-circle'))} cases passed)" in describe(res)


def test_a_loop_times_out_per_case_and_the_run_goes_on(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / "allocate.py").write_text("def allocate(g, c, mqs, cids):\n    if len(mqs) == 4:\n        while True:\n"
                                   "            pass\n    return []\n")
    res = check("allocate-by-circle", str(d), case_timeout=1)
    text = describe(res)
    # the case, the function and the line that hung are named
    assert "FAIL [offline] 4 queues, 4 consumers: the share of 10.0.0.0@c0" in text, text
    assert re.search(r"your allocate\(\) did not return within 1 s; it was at allocate.py line (3: while True:|4: pass)",
                     text), text
    assert any(c["name"].startswith("12 queues") for c in res.cases)   # later cases still ran
    assert f" of {len(planned_cases('allocate-by-circle'))} cases passed)" in text   # counted before running


def test_a_loop_in_a_thread_of_the_live_case_is_named_and_stops_the_phase(tmp_path):
    """Right offline, but the allocate the live consumers' rebalance calls never returns."""
    d = tmp_path / "w"
    d.mkdir()
    good = (SOLUTIONS / "allocate-by-circle" / "good.py").read_text()
    (d / "allocate.py").write_text(good.replace("def allocate(", "def _allocate(") + (
        "\n\ndef allocate(group, cid, mqs, cids):\n"
        "    while not cid.startswith(('10.0.0.', 'a@', 'ghost@')):\n"
        "        pass\n"
        "    return _allocate(group, cid, mqs, cids)\n"))
    res = check("allocate-by-circle", str(d), case_timeout=2)
    text = describe(res)
    assert all(c["ok"] for c in res.cases if c["phase"] == "offline"), text
    assert "your allocate() did not return within 2 s in a thread the checker started" in text, text
    assert "the live check stopped" in text and "not run:" in text, text
    assert f"of {len(planned_cases('allocate-by-circle'))} cases passed" in text
    assert not res.passed


def test_a_run_past_its_limit_is_stopped_with_everything_it_started(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    marker = f"rmq-exercise-orphan-{os.getpid()}"
    (d / "allocate.py").write_text(
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '600', '{marker}'])\n"
        "def allocate(g, c, mqs, cids):\n    time.sleep(600)\n")
    t0 = time.monotonic()
    res = check("allocate-by-circle", str(d), timeout=6, case_timeout=100)
    assert time.monotonic() - t0 < 30
    assert "did not finish within 6 s" in res.error and "was running" in res.error
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert not left, left


def test_start_refuses_an_unknown_exercise(tmp_path):
    with pytest.raises(ExerciseError, match="no such exercise"):
        start("nope", str(tmp_path))


def test_commitlog_decode_damaged_units_are_what_a_decoder_without_checks_fails(tmp_path):
    """The page says the decoder is checked against damaged units: a decoder that decodes every field
    right but validates nothing passes every undamaged case and fails every damaged one."""
    res = check("commitlog-decode", str(_place("commitlog-decode", SOLUTIONS / "commitlog-decode" /
                                               "wrong_no_validation.py", tmp_path)))
    damaged = [c for c in res.cases if c["name"].startswith("damaged: ")]
    assert len(damaged) >= 8 and not any(c["ok"] for c in damaged), describe(res)
    assert all(c["ok"] for c in res.cases if not c["name"].startswith("damaged: ")), describe(res)
    names_ = " ".join(c["name"] for c in damaged)
    for what in ("torn tail", "blank magic", "bodyCRC", "magic code that is neither", "past the end of the file",
                 "bodyLength", "zeros"):
        assert what in names_, what


@pytest.mark.parametrize("name", EXERCISES)
def test_cases_are_listed_without_the_students_code_or_a_broker(name):
    """The count in the summary comes from this list: unique names, the same every time."""
    first, again = planned_cases(name), planned_cases(name)
    assert first == again and len(set(first)) == len(first) and first
    assert {p for p, _ in first} == ({"offline", "live"} if load_exercise(name).live else {"offline"})
