"""The labs as an `rmq` plugin (entry point group "rmq.plugins"): the `rmq lab`, `rmq exercise` and
`rmq demo` commands. `rmq` never imports labs; labs import rmq and kafka_bridge. Without the labs
extra (pydantic, matplotlib, docker: `make run` installs the runtime set only) the three commands
stay listed and say what to install.

Every broker process (`rmq up`, `rmq broker`) loads the plugins for their listeners, and this one has
none: the commands' modules (pydantic models, the runner, the demos) are imported only when one of
the commands runs, so that a broker does not pay for them at every start."""
from __future__ import annotations

import importlib

import click

from rmq.extras import missing_module, placeholder_command


class _LazyCommand(click.Command):
    """Stands for the command `target` ("module:attribute"), imported the first time it is used:
    listed with its help line, and every use (its options, its subcommands, --help) goes to the
    real command. A missing optional package gives placeholder_command's sentence."""

    def __init__(self, name: str, target: str, help_text: str) -> None:
        super().__init__(name, help=help_text)
        self._target = target
        self._real: click.Command | None = None

    def real(self) -> click.Command:
        if self._real is None:
            mod, _, attr = self._target.partition(":")
            try:
                self._real = getattr(importlib.import_module(mod), attr)
            except ModuleNotFoundError as exc:
                module = missing_module(exc)
                if module is None:
                    raise
                self._real = placeholder_command(self.name, module, self.help or "")
        return self._real

    def make_context(self, info_name, args, parent=None, **extra):
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):
        return self.real().invoke(ctx)


commands = [_LazyCommand(name, target, text) for name, target, text in (
    ("lab", "labs.cli:lab",
     "Run YAML experiments that compare the RocketMQ design with Kafka's on the same workload."),
    ("exercise", "labs.exercises.cli:exercise",
     "Exercises with hidden, auto-checked cases (some against a live broker)."),
    ("demo", "labs.demos:demo",
     "Classroom demos: YAML scenarios that start a broker, run steps and narrate them."))]
__all__ = ["commands"]
