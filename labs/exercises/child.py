"""The checker's process: `python -m labs.exercises.child NAME SOLUTION RESULTS PHASE`.

It imports the student's file, runs the exercise's cases with a time limit each (SIGALRM), and
appends one JSON line per event to RESULTS: {"running": case} before a case, then the case's result.
The parent reads that file, so whatever the student's code prints cannot corrupt the results, and a
hang is reported with the case that was running when the parent killed this process group."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from . import exercise_dir, load_exercise
from .kit import Broker, Case


class CaseTimeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise CaseTimeout()


def _load(path: str, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


def _where(exc: BaseException, solution: str) -> str:
    """The student's own line that raised, if any."""
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(fr.filename).resolve() == Path(solution).resolve():
            return f" (your line {fr.lineno}: {fr.line})"
    return ""


def main(argv: list[str]) -> int:
    name, solution, results, phase = argv
    ex = load_exercise(name)
    limit = int(os.environ.get("RMQ_EXERCISE_CASE_TIMEOUT") or ex.case_timeout)
    out = open(results, "a", encoding="utf-8")

    def emit(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()
    signal.signal(signal.SIGALRM, _alarm)
    try:
        signal.alarm(limit)
        sol = _load(solution, "solution")
        signal.alarm(0)
    except BaseException as exc:  # a syntax error, an import that raises, a loop at import time
        signal.alarm(0)
        what = "took too long to import" if isinstance(exc, CaseTimeout) else f"{type(exc).__name__}: {exc}"
        emit(Case("import your file", False, "the file imports cleanly", what + _where(exc, solution)).as_dict())
        return 0
    checker = _load(str(exercise_dir(name) / "checker.py"), f"checker_{name.replace('-', '_')}")
    if phase == "offline":
        gen = checker.offline(sol)
        broker = None
    else:
        config = checker.broker_config(sol) if hasattr(checker, "broker_config") else {}
        broker = Broker(config=config)
        broker.__enter__()
        gen = checker.live(sol, broker)
    try:
        for case_name, fn in gen:
            emit({"running": case_name})
            signal.alarm(limit)
            try:
                case = fn()
            except CaseTimeout:
                case = Case(case_name, False, f"an answer within {limit} s",
                            "no answer: your code was still running (a loop that never ends?)")
            except Exception as exc:  # the student's code raised inside the case
                case = Case(case_name, False, "no exception", f"{type(exc).__name__}: {exc}" + _where(exc, solution))
            finally:
                signal.alarm(0)
            case.name = case_name
            emit(case.as_dict())
    finally:
        signal.alarm(0)
        if broker is not None:
            broker.__exit__(None, None, None)
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
