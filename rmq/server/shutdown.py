"""A bound on how long a server process takes to stop (issue 22): `rmq up`, `rmq broker` and
`rmq namesrv` wait for SIGTERM or SIGINT through ShutdownGuard, which then runs a watchdog thread.
The clean shutdown (listeners closed, tasks cancelled, the store's checkpoint written and its abort
file removed) has SHUTDOWN_BOUND_S seconds; if it has not finished by then, or a second SIGTERM or
SIGINT arrives meanwhile, the watchdog logs what is still pending (asyncio tasks with the line each
waits on, and the threads still running), flushes the store if its own shutdown has not begun, and
ends the process with os._exit(EXIT_FORCED). The abort file then stays, so the next start recovers
as after a crash (rmq/store/recovery.py). RocketMQ's brokers have no such bound: a JVM shutdown hook
that hangs keeps the process up until SIGKILL.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from typing import Callable

log = logging.getLogger("rmq.shutdown")

#: Seconds from the first SIGTERM/SIGINT to a forced exit.
SHUTDOWN_BOUND_S = 10.0
#: Seconds the forced exit gives the store's flush.
FLUSH_BOUND_S = 3.0
#: Exit status of a forced exit (a clean one exits 0).
EXIT_FORCED = 1
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _task_line(task: asyncio.Task) -> str:
    """'name (file:line in function)' of where a task is suspended, following its awaits inward."""
    coro = task.get_coro()
    where = ""
    for _ in range(50):  # bounded walk down the cr_await chain
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        inner = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if inner is None or not hasattr(inner, "cr_frame") and not hasattr(inner, "gi_frame"):
            break
        coro = inner
    return f"{task.get_name()} ({where or 'not started'})"


def _thread_line(thread: threading.Thread, frames: dict) -> str:
    frame = frames.get(thread.ident)
    where = (f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
             if frame is not None else "?")
    return f"{thread.name}{' (daemon)' if thread.daemon else ''} at {where}"


class ShutdownGuard:
    """`await guard.wait_for_signal()` returns at the first SIGTERM/SIGINT and arms the watchdog; the
    caller then shuts down cleanly and calls `guard.finished()` once the store is shut down. `what`
    names the process in the log lines; `flush` (optional, any thread) writes the store's dirty pages
    before a forced exit."""

    def __init__(self, what: str, *, bound_s: float = SHUTDOWN_BOUND_S,
                 flush: Callable[[], None] | None = None) -> None:
        self.what = what
        self.bound_s = bound_s
        self.flush = flush
        self.signal_name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = threading.Event()
        self._forced_by_signal = False
        self._finished = False
        self._thread: threading.Thread | None = None

    async def wait_for_signal(self) -> str:
        """Wait for SIGTERM or SIGINT on the running loop; returns its name with the watchdog armed."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future = loop.create_future()

        def on_signal(sig: int) -> None:
            if not got.done():
                got.set_result(sig)
        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            sig = await got
        finally:
            for s in SIGNALS:
                loop.remove_signal_handler(s)
        self.arm(loop, signal.Signals(sig).name)
        return self.signal_name

    def arm(self, loop: asyncio.AbstractEventLoop | None, signal_name: str = "") -> None:
        """Start the watchdog; from now on a SIGTERM/SIGINT forces the exit. Call from the main thread."""
        if self._thread is not None:
            return
        self._loop = loop
        self.signal_name = signal_name
        # plain handlers, not the loop's: they still run once the loop is closed (asyncio.run's
        # teardown, the store's shutdown after it), and a loop that is stuck cannot delay them
        for s in SIGNALS:
            signal.signal(s, self._second_signal)
        log.info("%s: shutting down (%s); a clean shutdown has %.0f s, a second SIGTERM/SIGINT exits at once",
                 self.what, signal_name or "requested", self.bound_s)
        self._thread = threading.Thread(target=self._watch, name="ShutdownWatchdog", daemon=True)
        self._thread.start()

    def finished(self) -> None:
        """The clean shutdown is done (the store shut down); only the interpreter's exit remains."""
        self._finished = True

    def _second_signal(self, signum, _frame) -> None:
        self._forced_by_signal = True
        self._wake.set()

    def _watch(self) -> None:
        self._wake.wait(self.bound_s)
        if self._forced_by_signal:
            why = "a second SIGTERM/SIGINT arrived"
        else:
            why = f"it did not end within {self.bound_s:.0f} s"
        if self._finished:
            log.error("%s: the clean shutdown finished but the process is still up (%s); still running: %s; "
                      "exiting now", self.what, why, self._pending_threads() or "nothing known")
            self._exit(0)
        log.error("%s: clean shutdown not finished and %s; exiting anyway. Pending tasks: %s. Threads: %s",
                  self.what, why, self._pending_tasks() or "none", self._pending_threads() or "none")
        if self.flush is not None:
            self._flush()
        self._exit(EXIT_FORCED)

    def _pending_tasks(self) -> str:
        loop = self._loop
        if loop is None or loop.is_closed():
            return ""
        for _ in range(5):  # all_tasks reads a WeakSet the loop thread may change meanwhile
            try:
                tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
                return "; ".join(sorted(_task_line(t) for t in tasks))
            except RuntimeError:
                continue
        return "(could not list them)"

    def _pending_threads(self) -> str:
        frames = sys._current_frames()
        me = threading.current_thread()
        return "; ".join(_thread_line(t, frames) for t in threading.enumerate()
                         if t is not me and t.is_alive())

    def _flush(self) -> None:
        result: list = []

        def run() -> None:
            try:
                self.flush()
                result.append(None)
            except BaseException as exc:  # noqa: BLE001 - reported below, the exit goes on
                result.append(exc)
        t = threading.Thread(target=run, name="ShutdownFlush", daemon=True)
        t.start()
        t.join(FLUSH_BOUND_S)
        if not result:
            log.error("%s: the store's flush did not finish within %.0f s; exiting without it", self.what,
                      FLUSH_BOUND_S)
        elif result[0] is not None:
            log.error("%s: the store's flush before exiting failed: %r", self.what, result[0])
        else:
            log.warning("%s: store flushed; the abort file stays, so the next start recovers as after a crash",
                        self.what)

    @staticmethod
    def _exit(status: int) -> None:
        for h in logging.getLogger().handlers:
            try:
                h.flush()
            except Exception:  # noqa: BLE001
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(status)


__all__ = ["ShutdownGuard", "SHUTDOWN_BOUND_S", "EXIT_FORCED"]
