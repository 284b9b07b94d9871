"""The labs as an `rmq` plugin (entry point group "rmq.plugins"): the `rmq lab`, `rmq exercise` and
`rmq demo` commands. `rmq` never imports labs; labs import rmq and kafka_bridge."""
from __future__ import annotations

from .cli import lab
from .demos import demo
from .exercises.cli import exercise

commands = [lab, exercise, demo]
__all__ = ["commands"]
