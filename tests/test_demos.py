"""The demos (`rmq demo`): every demo under configs/demos/ runs to its end non-interactively through
the real command, and its expectations (output regexes, timing bounds such as the delay demo's
"no sooner than 5 s") are checked as it goes; bad demo YAML is refused before anything starts; a
demo whose expectation fails says which and leaves no process behind."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from labs.demos import DemoError, demo_files, load_demo

REPO = Path(__file__).resolve().parent.parent
RMQ = [sys.executable, "-P", "-m", "rmq.cli"]
DEMOS = [f.stem for f in demo_files()]


def rmq_demo(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([*RMQ, "demo", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(REPO), stdin=subprocess.DEVNULL)


def leftovers(marker: str) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in a for a in (p.info["cmdline"] or [])):
                found.append(" ".join(p.info["cmdline"]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_the_six_demos_the_course_needs_are_there_in_both_languages():
    assert {"kafka-in-rocketmq-out", "order-payment-transaction", "delayed-cancellation", "retry-dlq-resend",
            "ordered-rebalance", "store-inspect-live", "two-brokers-failover"} <= set(DEMOS)
    assert any(load_demo(f).broker.kind == "cluster" for f in demo_files())
    for f in demo_files():
        d = load_demo(f)
        assert d.name == f.stem
        assert d.title_zh and d.about_zh and re.search(r"[\u4e00-\u9fff]", d.title_zh)
        for s in d.steps:
            assert bool(s.say) == bool(s.say_zh) and bool(s.then) == bool(s.then_zh), (d.name, s)
    res = rmq_demo("list", "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert set(rows) == set(DEMOS) and all("error" not in r for r in rows.values())


@pytest.mark.parametrize("name", DEMOS)
def test_demo_runs_to_the_end_and_its_narration_held(name):
    zh = name == "delayed-cancellation"                   # one demo narrated in Chinese
    res = rmq_demo("run", name, *(["--lang", "zh"] if zh else []))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    done = "演示完成：每一步的说明都与实际发生的一致。" if zh else "Demo complete: every step's narration matched what happened."
    assert done in res.stdout
    demo = load_demo(REPO / "configs" / "demos" / f"{name}.yaml")
    told = len([s for s in demo.steps if (s.say_zh or s.say if zh else s.say)])
    numbers = re.findall(rf"^\[(\d+)/{told}\] ", res.stdout, re.M)
    assert numbers == [str(i) for i in range(1, told + 1)]   # every narrated step, numbered without gaps
    assert not leftovers(f"rmq-demo-{name}-"), "the demo left processes behind"
    if zh:
        # the narration says order 7 (level 3 = 10 s) arrives no sooner than 10 s: the runner measured it
        took = [float(x) for x in re.findall(r"\((\d+\.\d) s after 'order-7'\)", res.stdout)]
        assert len(took) == 1 and took[0] >= 10.0 - 0.05, res.stdout[-3000:]
        assert "订单 7 创建" in res.stdout


BAD = {
    "unknown key": ("steps:\n  - run: echo hi\n    sya: typo\n", r"steps\.1\.sya: unknown key"),
    "two actions": ("steps:\n  - run: echo hi\n    sleep: 1\n", r"exactly one of run, background"),
    "no action": ("steps:\n  - say: hello\n", r"this one: none"),
    "unstarted process": ("steps:\n  - kill: {process: ghost}\n", r"'ghost' is not started by an earlier background"),
    "bad regex": ("steps:\n  - run: echo hi\n    expect: ['(unclosed']\n", r"not a regular expression"),
    "unknown mark": ("steps:\n  - background: sleep 1\n    name: s\n  - wait_for: {process: s, pattern: x, after: m}\n",
                     r"mark 'm' is not set by an earlier step"),
    "bad broker kind": ("broker: {kind: cloud}\nsteps:\n  - run: echo hi\n", r"broker\.kind"),
    "yaml syntax": ("steps:\n  - run: a: b: c\n", r"not valid YAML \(line 7, column 11: mapping values"),
    "not a mapping": None,
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_demo_yaml_is_refused_before_anything_starts(case, tmp_path):
    head = "name: bad\ntitle: t\ntitle_zh: 坏\nabout: a\nabout_zh: 坏\n"
    f = tmp_path / "bad.yaml"
    if BAD[case] is None:
        f.write_text("- just\n- a list\n")
        pattern = r"expected a mapping of keys at the top level"
    else:
        body, pattern = BAD[case]
        f.write_text(head + body)
    t0 = time.monotonic()
    res = rmq_demo("run", str(f), timeout=60)
    assert res.returncode == 1
    assert re.search(pattern, res.stderr), res.stderr
    assert str(f) in res.stderr and "Traceback" not in res.stderr
    assert "embedded broker" not in res.stdout and time.monotonic() - t0 < 30


def test_unknown_demo_names_the_ones_there_are():
    res = rmq_demo("run", "no-such-demo", timeout=60)
    assert res.returncode == 1 and "no such demo or file" in res.stderr and "store-inspect-live" in res.stderr


def test_a_failed_expectation_stops_the_demo_says_why_and_cleans_up(tmp_path):
    f = tmp_path / "fails.yaml"
    f.write_text(
        "name: fails\ntitle: t\ntitle_zh: 失败\nabout: a\nabout_zh: 失败\nsteps:\n"
        "  - background: exec -a demo-leftover-probe sleep 300\n    name: sleeper\n"
        "  - say: a message that will not arrive so soon\n    say_zh: 太早\n"
        "    mark: sent\n    run: rmq admin sendMessage -t Late -p x -d 3\n"
        "  - background: rmq admin pushConsume -t Late -g cg_late --duration 60\n    name: consumer\n"
        "  - wait_for: {process: consumer, pattern: \"body='x'\", after: sent, max_seconds: 1, timeout: 30}\n"
        "  - run: echo never-reached\n")
    res = rmq_demo("run", str(f), timeout=120)
    assert res.returncode == 1, res.stdout[-2000:]
    assert re.search(r"Error: consumer printed .*later than the 1 s the demo says", res.stderr), res.stderr
    assert "never-reached" not in res.stdout
    assert not leftovers("demo-leftover-probe") and not leftovers("rmq-demo-fails-")


def test_a_step_that_does_not_show_what_it_promised_fails(tmp_path):
    f = tmp_path / "promise.yaml"
    f.write_text("name: promise\ntitle: t\ntitle_zh: 承诺\nabout: a\nabout_zh: 承诺\nsteps:\n"
                 "  - run: rmq admin updateTopic -c DefaultCluster -t P -r 2 -w 2\n"
                 "    expect: ['readQueueNums=3']\n")
    res = rmq_demo("run", str(f), timeout=120)
    assert res.returncode == 1
    assert "step 1: the output does not show 'readQueueNums=3', which the demo says it will" in res.stderr
    assert not leftovers("rmq-demo-promise-")


def test_schema_errors_carry_the_file_name(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("name: x\n")
    with pytest.raises(DemoError, match=r"x\.yaml: title: Field required"):
        load_demo(f)


def test_chinese_narration_keeps_no_spaces_from_folded_yaml_lines():
    from labs.schema import unfold_cjk
    cjk = "\u3000-\u303f\u3400-\u9fff\uff00-\uffef"
    gap = re.compile(rf"[{cjk}][ \t\n]+[{cjk}]")
    folded = 0
    for name in DEMOS:
        demo = load_demo(REPO / "configs" / "demos" / f"{name}.yaml")
        for text in [demo.about_zh] + [t for s in demo.steps for t in (s.say_zh, s.then_zh) if t]:
            folded += len(gap.findall(text))
            assert not gap.search(unfold_cjk(text)), text
            assert unfold_cjk(text).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    assert folded > 0                     # the files do fold Chinese lines: the narration must undo it
