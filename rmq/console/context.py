"""ConsoleContext: what the console and /metrics read — the broker process's BrokerController and its
listener objects — plus RateSampler, the once-a-second sampler behind put/get TPS, consume TPS and
the live (server-sent) updates. Reads only; changes go through the broker services."""
from __future__ import annotations

import asyncio
import time

from ..plugins import load_plugins

TOPIC_GROUP_SEPARATOR = "@"


class RateSampler:
    """Samples cheap counters every `interval` seconds on the broker loop (no store scan): store
    put/get totals, giving put/get TPS (consume TPS per group: ConsumerOffsetManager.consume_tps)."""

    def __init__(self, ctx: "ConsoleContext", interval: float = 1.0):
        self.ctx = ctx
        self.interval = interval
        self.put_tps = 0.0
        self.get_tps = 0.0
        self._last: tuple | None = None
        self._task: asyncio.Task | None = None
        self.listeners: set[asyncio.Queue] = set()  # one per open server-sent-events stream
        self.snapshot: dict = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ConsoleRateSampler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def sample(self) -> dict:
        store = self.ctx.controller.store
        now = time.monotonic()
        put, get = store.stats["put_messages"], store.stats["get_messages"]
        if self._last is not None:
            t0, p0, g0 = self._last
            dt = max(now - t0, 1e-3)
            self.put_tps = (put - p0) / dt
            self.get_tps = (get - g0) / dt
        self._last = (now, put, get)
        info = store.runtime_info()
        self.snapshot = {
            "putTps": round(self.put_tps, 1), "getTps": round(self.get_tps, 1),
            "commitLogMaxOffset": info["commitLogMaxOffset"], "commitLogMinOffset": info["commitLogMinOffset"],
            "commitLogFlushedOffset": info["commitLogFlushedOffset"],
            "dispatchBehindBytes": info["dispatchBehindBytes"], "reputFromOffset": info["reputFromOffset"],
            "putMessageTimesTotal": info["putMessageTimesTotal"], "getMessageTimesTotal": info["getMessageTimesTotal"],
            "diskRatio": info["diskRatio"], "commitLogFiles": info["commitLogFiles"],
            "indexFiles": info["indexFiles"], "groupCommitFlushes": info["groupCommitFlushes"],
            "time": time.strftime("%H:%M:%S"),
        }
        return self.snapshot

    async def _run(self) -> None:
        while True:
            snap = self.sample()
            for q in list(self.listeners):
                if q.full():  # a slow browser: drop its oldest update, never wait for it
                    try:
                        q.get_nowait()
                    except asyncio.QueueEmpty:
                        pass
                q.put_nowait(snap)
            await asyncio.sleep(self.interval)


class ConsoleContext:
    def __init__(self, controller, listener_objects: dict | None = None, listeners: dict | None = None,
                 labs_dir: str | None = None):
        self.controller = controller
        self.listener_objects = listener_objects if listener_objects is not None else {}  # name -> server object
        self.listeners = listeners if listeners is not None else {}  # name -> "host:port"
        self.labs_dir = labs_dir
        self.sampler = RateSampler(self)
        self.console_connections = 0

    def connection_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, obj in list(self.listener_objects.items()):
            remoting = getattr(obj, "remoting", None)
            if remoting is not None and hasattr(remoting, "connections"):
                out["remoting"] = len(remoting.connections)
            for plugin in load_plugins():
                fn = getattr(plugin, "console_connections", None)
                if fn is not None:
                    out.update(fn(obj))
        ha = getattr(self.controller, "ha_service", None)
        if ha is not None:
            out["ha"] = len(ha.connections)
        out["console_sse"] = len(self.sampler.listeners)
        return out

    def kafka_groups(self) -> dict:
        out: dict = {}
        for obj in list(self.listener_objects.values()):
            for plugin in load_plugins():
                fn = getattr(plugin, "console_groups", None)
                if fn is not None:
                    out.update(fn(obj))
        return out

    def acl(self):
        """The broker's PlainAccessValidator when aclEnable, else None."""
        if not getattr(self.controller.broker_config, "aclEnable", False):
            return None
        from ..server.acl import acl_validator
        return acl_validator(self.controller)
