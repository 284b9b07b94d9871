"""The labs as an `rmq` plugin (entry point group "rmq.plugins"): the `rmq lab`, `rmq exercise` and
`rmq demo` commands. `rmq` never imports labs; labs import rmq and kafka_bridge. Without the labs
extra (pydantic, matplotlib, docker: `make run` installs the runtime set only) the three commands
stay listed and say what to install."""
from __future__ import annotations

from rmq.extras import missing_module, placeholder_command

try:
    from .cli import lab
    from .demos import demo
    from .exercises.cli import exercise
except ModuleNotFoundError as exc:
    _module = missing_module(exc)
    if _module is None:
        raise
    commands = [placeholder_command(name, _module, text) for name, text in (
        ("lab", "Run YAML experiments that compare the RocketMQ design with Kafka's on the same workload."),
        ("exercise", "Exercises with hidden, auto-checked cases (some against a live broker)."),
        ("demo", "Classroom demos: YAML scenarios that start a broker, run steps and narrate them."))]
else:
    commands = [lab, exercise, demo]
__all__ = ["commands"]
