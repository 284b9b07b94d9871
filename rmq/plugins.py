"""Plugins: packages that sit above `rmq` (the Kafka bridge, labs) add listeners and commands
through the "rmq.plugins" entry point group, so `rmq` never imports them by name (DESIGN.md).

A plugin module may define:
  listener_factory(server) -> (name, async factory returning (server_obj, "host:port")) or None
  commands: list of click commands added to `rmq`
  bench_commands: list of click commands added to `rmq bench`
  store_batch_encoder: the Kafka-batch encoder `rmq bench store --kafka-batches` uses
"""
from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points

log = logging.getLogger("rmq.plugins")
_loaded: list | None = None


def load_plugins() -> list:
    """The plugin modules installed with the project (each imported once)."""
    global _loaded
    if _loaded is None:
        _loaded = []
        for ep in entry_points(group="rmq.plugins"):
            try:
                _loaded.append(importlib.import_module(ep.value))
            except ImportError as exc:  # an optional part that is not installed or cannot load
                log.warning("plugin %s (%s) not loaded: %s", ep.name, ep.value, exc)
    return _loaded


def first(attr: str):
    """The first plugin attribute of that name, or None."""
    for mod in load_plugins():
        value = getattr(mod, attr, None)
        if value is not None:
            return value
    return None
