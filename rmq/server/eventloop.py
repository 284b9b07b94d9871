"""Which asyncio event loop the server processes run (issue 24): asyncio's own selector loop, or
uvloop, libuv's loop in C, on request. Every listener of a broker process (remoting, HA,
NameServer, Kafka, the aiohttp console) runs on the one loop chosen here.

RMQ_LOOP picks it: ``asyncio`` (the default), ``auto`` (uvloop when importable), or ``uvloop``
(required: an error when it is missing). uvloop stays opt-in: it measured no cheaper per send here
(docs/architecture.md). `rmq bench rmq --loop asyncio,uvloop` compares both in one run.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Coroutine

#: The values RMQ_LOOP takes.
CHOICES = ("auto", "uvloop", "asyncio")


class LoopChoiceError(RuntimeError):
    """RMQ_LOOP names no loop, or names uvloop where it is not installed."""


def _uvloop():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def chosen(name: str | None = None) -> str:
    """The loop a server process runs: "uvloop" or "asyncio", for `name` (default: $RMQ_LOOP, else
    "asyncio"). Raises LoopChoiceError with one sentence when the choice cannot be honoured."""
    raw = name if name is not None else os.environ.get("RMQ_LOOP", "asyncio")
    want = (raw or "asyncio").strip().lower()
    if want not in CHOICES:
        raise LoopChoiceError(f"RMQ_LOOP: expected one of {', '.join(CHOICES)}, got {raw!r}")
    if want == "asyncio":
        return "asyncio"
    if _uvloop() is None:
        if want == "uvloop":
            raise LoopChoiceError("RMQ_LOOP=uvloop: the uvloop package is not installed "
                                  "(pip install uvloop, or RMQ_LOOP=asyncio)")
        return "asyncio"
    return "uvloop"


def loop_factory(name: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A callable making a new loop of the chosen kind (for asyncio.Runner or a loop thread)."""
    if chosen(name) == "uvloop":
        return _uvloop().new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, Any], *, name: str | None = None) -> Any:
    """asyncio.run(main) on the chosen loop."""
    try:
        factory = loop_factory(name)
    except LoopChoiceError:
        main.close()  # never awaited: no "coroutine was never awaited" warning on top of the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """"uvloop" or "asyncio": the kind of the loop running in this thread (for logs and reports)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


__all__ = ["CHOICES", "LoopChoiceError", "chosen", "loop_factory", "run", "running_loop_name"]
