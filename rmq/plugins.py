"""Plugins: packages that sit above `rmq` (the Kafka bridge, labs) add listeners and commands
through the "rmq.plugins" entry point group, so `rmq` never imports them by name (DESIGN.md).

A plugin module may define:
  listener_factory(server) -> (name, async factory returning (server_obj, "host:port")) or None
      called by every process that hosts a broker: `rmq up` (EmbeddedServer) and `rmq broker`
      (cli_cluster.BrokerProcess). `server` has .cfg (RmqConfig), .controller (a started
      BrokerController), .host (the bind address), .advertised_host (the address clients are
      told, or None for "the bound one") and .mode ("embedded" or "broker"); the returned server
      object is closed with `await obj.close_async()` (or obj.close()) before the broker's
      remoting listener, so a plugin may still reach the NameServers while it closes.
  commands: list of click commands added to `rmq`
  bench_commands: list of click commands added to `rmq bench`
  store_batch_encoder: the Kafka-batch encoder `rmq bench store --kafka-batches` uses
  fuzz_protocols: {name: protocol} that `rmq bench fuzz --protocol name` fuzzes (rmq/bench/fuzz.py)
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


def listener_factories(server) -> list:
    """(name, async factory) for every plugin listener `server` should host (see the module doc)."""
    out = []
    for plugin in load_plugins():
        factory = getattr(plugin, "listener_factory", None)
        entry = factory(server) if factory is not None else None
        if entry is not None:
            out.append(entry)
    return out
