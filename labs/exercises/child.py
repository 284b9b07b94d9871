"""The checker's process: `python -m labs.exercises.child NAME SOLUTION RESULTS PHASE`.

It imports the student's file, runs the exercise's cases with a time limit each (SIGALRM), and
appends one JSON line per event to RESULTS: {"running": case} before a case, then the case's result.
The parent reads that file, so whatever the student's code prints cannot corrupt the results.

A watchdog thread looks at every thread's stack a few times a second: when one call into the
student's file (the outermost frame from that file) has run longer than `case_timeout`, in any
thread (a consumer thread of a live case too), it interrupts the case and names the function and the
line it was on. After one such case the limit drops to 1 s (the code is known to hang) and after
MAX_HANGS the phase stops; a hang in another thread cannot be undone, so the phase stops at once.
The cases left are reported as not run."""
from __future__ import annotations

import importlib.util
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from . import exercise_dir, load_exercise
from .kit import Broker, Case


MAX_HANGS = 8                            # cases whose code did not return before the phase stops


class CaseTimeout(BaseException):
    """Raised in the main thread when a case runs out of time (a BaseException, so that a student's
    `except Exception:` inside a loop cannot swallow it)."""


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


class Watchdog(threading.Thread):
    """Finds a call into the student's file that has run longer than `limit` seconds, in any thread."""

    PERIOD_S = 0.2

    def __init__(self, solution: str, limit: float) -> None:
        super().__init__(name="exercise-watchdog", daemon=True)
        self.solution = os.path.realpath(solution)
        self.file = os.path.basename(solution)
        self.limit = limit
        self.hung: str = ""              # what hung, in words; set once
        self.hung_in_main = False
        self._mine: dict[str, bool] = {}
        self._seen: dict[int, tuple[object, float]] = {}   # thread id -> (outermost student frame, since)
        self._halt = threading.Event()
        self.main_ident = threading.main_thread().ident

    def _is_mine(self, filename: str) -> bool:
        got = self._mine.get(filename)
        if got is None:
            got = self._mine[filename] = os.path.realpath(filename) == self.solution
        return got

    def _describe(self, outer, inner, tid: int, ran: float) -> str:
        code = outer.f_code
        what = "the top level of your file" if code.co_name == "<module>" else \
            f"your {getattr(code, 'co_qualname', code.co_name)}()"
        line = linecache.getline(inner.f_code.co_filename, inner.f_lineno).strip()
        thread = "" if tid == self.main_ident else " in a thread the checker started (a consumer or listener thread)"
        return (f"{what} did not return within {ran:.0f} s{thread}; it was at {self.file} line {inner.f_lineno}"
                + (f": {line}" if line else "") + " (a loop that never ends, or a wait that never finishes?)")

    def run(self) -> None:
        while not self._halt.wait(self.PERIOD_S):
            now = time.monotonic()
            frames = sys._current_frames()
            for tid in list(self._seen):
                if tid not in frames:
                    del self._seen[tid]
            for tid, f in frames.items():
                if tid == self.ident:
                    continue
                outer = inner = None
                while f is not None:
                    if self._is_mine(f.f_code.co_filename):
                        outer = f
                        inner = inner or f
                    f = f.f_back
                if outer is None:
                    self._seen.pop(tid, None)
                    continue
                prev = self._seen.get(tid)
                if prev is None or prev[0] is not outer:
                    self._seen[tid] = (outer, now)
                    continue
                if now - prev[1] >= self.limit and not self.hung:
                    self.hung = self._describe(outer, inner, tid, now - prev[1])
                    self.hung_in_main = tid == self.main_ident
                    signal.pthread_kill(self.main_ident, signal.SIGALRM)
            del frames

    def busy_elsewhere(self) -> bool:
        """Is the student's code running in a thread other than the main one right now?"""
        return any(tid != self.main_ident for tid in list(self._seen))

    def stop(self) -> None:
        self._halt.set()


def main(argv: list[str]) -> int:
    name, solution, results, phase = argv
    ex = load_exercise(name)
    call_limit = float(os.environ.get("RMQ_EXERCISE_CASE_TIMEOUT") or ex.case_timeout)
    live_limit = int(os.environ.get("RMQ_EXERCISE_LIVE_CASE_TIMEOUT") or ex.live_case_timeout)

    def case_limit() -> int:             # room for the watchdog to name the call before the alarm fires
        return live_limit if phase == "live" else int(dog.limit + 0.999) + 2
    out = open(results, "a", encoding="utf-8")
    lock = threading.Lock()

    def emit(obj: dict) -> None:
        with lock:
            out.write(json.dumps(obj) + "\n")
            out.flush()

    dog = Watchdog(solution, call_limit)

    in_case = [True]                     # the import counts as a case

    def _alarm(_signum, _frame):
        if in_case[0]:                   # a late signal between cases is ignored
            raise CaseTimeout()
    signal.signal(signal.SIGALRM, _alarm)
    dog.start()
    try:
        signal.alarm(case_limit())
        sol = _load(solution, "solution")
        signal.alarm(0)
        in_case[0] = False
    except BaseException as exc:  # a syntax error, an import that raises, a loop at import time
        signal.alarm(0)
        what = (dog.hung or f"took longer than {case_limit()} s to import") if isinstance(exc, CaseTimeout) else \
            f"{type(exc).__name__}: {exc}" + _where(exc, solution)
        emit(Case("import your file", False, "the file imports cleanly", what).as_dict())
        out.close()
        os._exit(0)                      # a thread the import started may still be running
    checker = _load(str(exercise_dir(name) / "checker.py"), f"checker_{name.replace('-', '_')}")
    if phase == "offline":
        gen = checker.offline(sol)
        broker = None
    else:
        config = checker.broker_config(sol) if hasattr(checker, "broker_config") else {}
        broker = None if config is None else Broker(config=config)     # None: the checker starts its own
        if broker is not None:
            broker.__enter__()
        gen = checker.live(sol, broker)
    hangs = 0
    try:
        for case_name, fn in gen:
            emit({"running": case_name})
            dog.hung = ""
            hung = False
            in_case[0] = True
            signal.alarm(case_limit())
            try:
                case = fn()
                signal.alarm(0)
                in_case[0] = False
            except CaseTimeout:
                signal.alarm(0)
                in_case[0] = False
                got = dog.hung or f"the case did not finish within {case_limit()} s"
                case = Case(case_name, False, f"each call into your code to return within {dog.limit:.0f} s"
                            if dog.hung else f"an answer within {case_limit()} s", f"no answer: {got}")
                hung = True
            except Exception as exc:  # the student's code raised inside the case
                signal.alarm(0)
                in_case[0] = False
                case = Case(case_name, False, "no exception", f"{type(exc).__name__}: {exc}" + _where(exc, solution))
            if not case.ok and not dog.hung and dog.busy_elsewhere():
                # the case gave up waiting (a client call timed out) while the student's code still runs
                # in a consumer thread: give the watchdog the time to tell whether that call hangs
                until = time.monotonic() + dog.limit + 1
                while time.monotonic() < until and not dog.hung and dog.busy_elsewhere():
                    time.sleep(0.1)
            if dog.hung and not dog.hung_in_main and not hung:
                case = Case(case_name, False, f"each call into your code to return within {dog.limit:.0f} s",
                            f"no answer: {dog.hung}")
                hung = True
            case.name = case_name
            emit(case.as_dict())
            if hung:
                hangs += 1
                dog.limit = min(dog.limit, 1.0)      # it hangs: later cases need not wait as long to say so
                # a loop in another thread cannot be stopped; in this one, MAX_HANGS say enough
                if (dog.hung and not dog.hung_in_main) or hangs >= MAX_HANGS:
                    emit({"stopped": f"the {phase} check stopped after {'a case' if hangs == 1 else f'{hangs} cases'} "
                                     f"whose code did not return"})
                    break
    finally:
        signal.alarm(0)
        dog.stop()
        if broker is not None:
            broker.__exit__(None, None, None)
        out.close()
    os._exit(0)                          # threads of the student's code may still be running


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
