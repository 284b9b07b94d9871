"""Auto-checked exercises: labs/exercises/<name>/ holds exercise.yaml (validated with pydantic),
task.md and task.zh.md (the task in English and Chinese), starter/ (what `rmq exercise start`
copies) and checker.py (hidden cases, and live cases against a real broker where it fits).

`check` counts the cases first (the same number on every run), then runs the checker in a child
process of its own session: a call into the student's code that does not return within a few
seconds is interrupted and named (function and line, in whatever thread it runs), each case has a
time limit, the whole run has one too, and on a timeout the process group (the student's code and any
broker it started) is killed. Feedback names the failing case, what was expected and what came back."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROOT = Path(__file__).parent


class ExerciseError(ValueError):
    """A bad exercise name, file or directory: the message says which and what was expected."""


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: str
    section: str


class Exercise(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str
    title_zh: str
    topic: str
    source: Source
    file: str = Field(description="the file the student edits, copied from starter/")
    entry: str = Field(description="the function or class to fill in")
    live: bool = Field(False, description="after the hidden cases pass, cases run against a live broker")
    case_timeout: int = Field(5, ge=1, le=60, description="seconds one call into the student's code, and one "
                                                          "hidden (offline) case, may take")
    live_case_timeout: int = Field(90, ge=5, le=600, description="seconds one live case may take (the checker's "
                                                                 "own waiting for the broker included)")
    timeout: int = Field(180, ge=5, le=900, description="seconds each phase of the check may take")


def exercise_dir(name: str) -> Path:
    return ROOT / name


def names() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir() if (p / "exercise.yaml").exists())


def load_exercise(name: str) -> Exercise:
    path = exercise_dir(name) / "exercise.yaml"
    if not path.exists():
        raise ExerciseError(f"{name}: no such exercise (exercises: {', '.join(names())})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Exercise.model_validate(data)
    except yaml.YAMLError as exc:
        raise ExerciseError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except ValidationError as exc:
        lines = [f"{path}: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ExerciseError("\n".join(lines)) from None


def task_text(name: str, lang: str = "en") -> str:
    f = exercise_dir(name) / ("task.zh.md" if lang == "zh" else "task.md")
    return f.read_text(encoding="utf-8")


def start(name: str, dest: str, force: bool = False) -> list[str]:
    """Copy the starter files and the task (both languages) into dest; never overwrite a student's
    work unless force."""
    load_exercise(name)
    src = exercise_dir(name) / "starter"
    os.makedirs(dest, exist_ok=True)
    files = [(p, Path(dest) / p.relative_to(src)) for p in sorted(src.rglob("*")) if p.is_file()
             and "__pycache__" not in p.parts]
    files += [(exercise_dir(name) / t, Path(dest) / t) for t in ("task.md", "task.zh.md")]
    clash = [str(d) for _, d in files if d.exists()]
    if clash and not force:
        raise ExerciseError(f"{dest}: already has {', '.join(clash)}; use --force to overwrite or pick another directory")
    out = []
    for s, d in files:
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s, d)
        out.append(str(d))
    return out


@dataclass
class CheckResult:
    name: str
    cases: list[dict] = field(default_factory=list)
    error: str = ""            # the whole run failed (time limit, crash), with the case that was running
    output: str = ""           # what the student's code printed (truncated)
    planned: list[tuple[str, str]] = field(default_factory=list)   # (phase, name) of every case, counted first
    stopped: str = ""          # why a phase stopped before its last case

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.cases) and all(c["ok"] for c in self.cases) and not self.not_run

    @property
    def not_run(self) -> list[tuple[str, str]]:
        done = {(c["phase"], c["name"]) for c in self.cases}
        return [p for p in self.planned if p not in done]

    @property
    def total(self) -> int:
        """The planned cases ("import your file", reported only when it fails, is not one of them)."""
        return len(self.planned) if self.planned else len(self.cases)

    def as_dict(self) -> dict:
        return {"exercise": self.name, "passed": self.passed, "cases": self.cases, "error": self.error,
                "output": self.output, "total": self.total,
                "not_run": [{"phase": p, "name": n} for p, n in self.not_run], "stopped": self.stopped}


def _checker(name: str):
    import importlib.util
    mod_name = f"labs_exercise_checker_{name.replace('-', '_')}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, exercise_dir(name) / "checker.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return mod


def planned_cases(name: str) -> list[tuple[str, str]]:
    """Every (phase, case name) the check will run when all goes well, listed without the student's
    code (a checker names its cases without calling it) and without a broker, so the summary's count
    is the same on every run."""
    ex = load_exercise(name)
    mod = _checker(name)
    plan = [("offline", n) for n, _fn in mod.offline(None)]
    if ex.live:
        plan += [("live", n) for n, _fn in mod.live(None, None)]
    return plan


def _run_phase(ex: Exercise, solution: str, phase: str, budget: float, res: CheckResult,
               case_timeout: int | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="rmq-check-") as tmp:
        results = os.path.join(tmp, "results.jsonl")
        open(results, "w").close()
        log = os.path.join(tmp, "output.txt")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", RMQ_EXERCISE_CASE_TIMEOUT=str(case_timeout or ex.case_timeout))
        repo = str(ROOT.parent.parent)
        env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "labs.exercises.child", ex.name, solution, results, phase],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=os.path.dirname(solution), env=env, start_new_session=True)
            try:
                proc.wait(budget)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)     # the child, the student's threads, any broker it started
                except ProcessLookupError:
                    pass
                proc.wait(10)
        running = None
        with open(results, encoding="utf-8") as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if "running" in obj:
                    running = obj["running"]
                elif "stopped" in obj:
                    res.stopped = obj["stopped"]
                else:
                    running = None
                    obj["phase"] = phase
                    res.cases.append(obj)
        with open(log, "rb") as fh:
            printed = fh.read().decode("utf-8", "replace")
        if printed.strip():
            res.output += printed[-2000:]
        if timed_out:
            res.error = (f"the {phase} check did not finish within {budget:.0f} s (its time limit)" +
                         (f"; case {running!r} was running" if running else "") + " (the process was stopped)")
        elif proc.returncode not in (0, None) and not res.error:
            res.error = f"the {phase} checker exited with code {proc.returncode}" + \
                        (f" during case {running!r}" if running else "")


def check(name: str, directory: str = ".", *, timeout: float | None = None,
          case_timeout: int | None = None) -> CheckResult:
    """Run the hidden cases, then (when they pass and the exercise has them) the live ones. The
    limits default to the exercise's own."""
    ex = load_exercise(name)
    solution = os.path.abspath(os.path.join(directory, ex.file))
    if not os.path.isfile(solution):
        raise ExerciseError(f"{solution}: not found; run `rmq exercise start {name} {directory}` first, "
                            f"then fill in {ex.entry} in {ex.file}")
    res = CheckResult(name)
    try:
        res.planned = planned_cases(name)
    except Exception as exc:  # noqa: BLE001 - a checker that cannot list its cases is the project's bug: say so
        res.error = f"the checker could not list its cases ({type(exc).__name__}: {exc})"
        return res
    _run_phase(ex, solution, "offline", timeout or ex.timeout, res, case_timeout)
    if ex.live and not res.error and not res.stopped and res.cases and all(c["ok"] for c in res.cases):
        _run_phase(ex, solution, "live", timeout or ex.timeout, res, case_timeout)
    return res


def describe(res: CheckResult) -> str:
    """The feedback a student reads: each failing case with what was expected and what came back."""
    lines = []
    same: dict[tuple, int] = {}            # (expected, got) -> failures shown in full with that pair
    hidden = 0
    for c in res.cases:
        if not c["ok"]:
            key = (c["expected"], c["got"])
            same[key] = same.get(key, 0) + 1
            if same[key] > 2:              # the third and later identical failures: counted, not repeated
                hidden += 1
                continue
        mark = "ok  " if c["ok"] else "FAIL"
        lines.append(f"{mark} [{c['phase']}] {c['name']}")
        if not c["ok"]:
            lines.append(f"       expected: {c['expected']}")
            lines.append(f"       got:      {c['got']}")
            if c.get("hint"):
                lines.append(f"       hint:     {c['hint']}")
    if hidden:
        lines.append(f"FAIL ... and {hidden} more case(s) failing with the same expected/got as one shown above "
                     f"(--json lists every case)")
    if res.error:
        lines.append(f"FAIL {res.error}")
    if res.output.strip():
        lines.append("your code printed (last lines):")
        lines += ["  " + x for x in res.output.strip().splitlines()[-10:]]
    if res.stopped:
        lines.append(f"FAIL {res.stopped}")
    left = res.not_run
    if left:
        live_left = sum(p == "live" for p, _ in left)
        why = "the live cases run once the hidden ones pass" if live_left == len(left) and \
            not any(c["phase"] == "live" for c in res.cases) else "the check stopped before them"
        lines.append(f"not run: {len(left)} case(s) ({why}), first: [{left[0][0]}] {left[0][1]}")
    n_ok = sum(c["ok"] for c in res.cases)
    lines.append(f"{res.name}: {'PASSED' if res.passed else 'not yet'} ({n_ok} of {res.total} cases passed)")
    return "\n".join(lines)
