"""The labs as an `rmq` plugin (entry point group "rmq.plugins"): the `rmq lab` commands. `rmq`
never imports labs; labs import rmq and kafka_bridge."""
from __future__ import annotations

from .cli import lab

commands = [lab]
__all__ = ["commands"]
