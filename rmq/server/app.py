"""The embedded broker process (`rmq up`): store + broker services + listeners in one asyncio loop.

Every listener (Kafka, and the RocketMQ remoting and NameServer ones) calls the same
BrokerController, so a message produced through one protocol is the same stored message for another.
"""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import os

from ..common.acl import AclConfigError
from ..config import RmqConfig
from ..plugins import listener_factories
from ..store.mapped_file import StoreError
from .shutdown import ShutdownGuard

log = logging.getLogger("rmq.server")

# listener name -> (command-line option, config key) that moves it to another port
PORT_OPTIONS = {"namesrv": ("--namesrv-port", "namesrvPort"), "remoting": ("--remoting-port", "listenPort"),
                "kafka": ("--kafka-port", "kafkaPort"), "ha": (None, "haListenPort"),
                "console": ("--console-port", "consolePort")}


class StartupError(Exception):
    """`rmq up` could not start; the message is one sentence for the user (nothing was left running)."""


class EmbeddedServer:
    """Owns the BrokerController and the listeners; start() binds, stop() closes cleanly."""

    def __init__(self, cfg: RmqConfig, host: str = "127.0.0.1"):
        from ..broker.controller import BrokerController
        self.cfg = cfg
        self.host = host
        self.controller = BrokerController(cfg)
        self.advertised_host: str | None = None  # plugin listeners advertise the address they bind
        self.mode = "embedded"
        self.listeners: dict[str, str] = {}
        self.listener_objects: dict = {}  # name -> server object (the console reads them)
        self._servers: list = []

    async def start(self) -> dict[str, str]:
        self.controller.start()
        self.listeners["store"] = self.controller.store.root
        for name, factory in self._listener_factories():
            try:
                server, addr = await factory()
            except OSError as exc:
                await self.stop()  # close what started; a clean shutdown leaves no abort file
                # the HA listener starts with the remoting one (rmq.server.broker_listener._start_ha)
                raise StartupError(self._bind_failure(getattr(exc, "listener", name), exc)) from exc
            except (AclConfigError, StoreError) as exc:  # an unusable plain_acl.yml; a kafka-log dir in use
                await self.stop()
                raise StartupError(str(exc)) from exc
            self._servers.append(server)
            self.listeners[name] = addr
            self.listener_objects[name] = server
        await self._registered()
        return self.listeners

    async def _registered(self, timeout: float = 10.0) -> None:
        """Wait (bounded) until the embedded NameServer holds this broker's route, when the broker
        registers with it: a client that reads the printed addresses at once then finds its routes
        (TBW102's included) instead of "No route info of this topic". Registration runs as a task
        of the remoting listener, so without this wait `start` could return before it."""
        ns = self.listener_objects.get("namesrv")
        if ns is None or "remoting" not in self.listener_objects or self.cfg.broker.namesrvAddr:
            return
        name = self.cfg.broker.brokerName
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while name not in ns.route_info.broker_addr_table:
            if loop.time() >= deadline:
                log.warning("broker %s not yet registered with the embedded NameServer after %.0f s", name, timeout)
                return
            await asyncio.sleep(0.01)

    def _bind_failure(self, name: str, exc: OSError) -> str:
        opt, key = PORT_OPTIONS.get(name, (None, None))
        port = getattr(exc, "port", None)
        if key and port is None:
            port = getattr(self.cfg.broker, key, getattr(self.cfg.store, key, None))
        where = f"{self.host}:{port}" if port is not None else self.host
        if exc.errno == errno.EADDRINUSE:
            msg = f"cannot start the {name} listener: {where} is already in use"
        else:
            msg = f"cannot start the {name} listener on {where}: {exc.strerror or exc}"
        if opt:
            msg += f" (choose another port with {opt}, or {key} in the --config file; 0 picks a free one)"
        elif key:
            msg += f" (choose another port with {key} in the --config file; 0 picks a free one)"
        return msg

    def _listener_factories(self):
        """NameServer first (the broker registers with it), then broker remoting, then Kafka."""
        from ..namesrv import start_namesrv_listener
        out = []
        b = self.cfg.broker
        out.append(("namesrv", lambda: start_namesrv_listener(self.host, b.namesrvPort)))
        out.append(("remoting", self._start_remoting))
        out.extend(listener_factories(self))  # the Kafka listener comes from the kafka_bridge plugin
        if b.consolePort != 0:
            out.append(("console", self._start_console))  # last: it reads the others
        return out

    async def _start_console(self):
        """The web console and /metrics (rmq/console) on this loop; consolePort -1 = ephemeral."""
        from ..console import ConsoleContext, start_console
        b = self.cfg.broker
        ctx = ConsoleContext(self.controller, self.listener_objects, self.listeners, labs_dir=b.consoleLabsDir)
        return await start_console(ctx, self.host, max(0, b.consolePort))

    def wants_ha(self) -> bool:
        """Whether `rmq up` runs the HA service (master/slave replication, rmq.server.ha): for a
        SYNC_MASTER (its sends wait for a slave) or a SLAVE, or when haListenPort is given. An
        ASYNC_MASTER on the defaults opens no HA port, so `make run` holds only the three it prints;
        `rmq broker` always runs it, as a RocketMQ broker does."""
        st = self.cfg.store
        return st.brokerRole in ("SYNC_MASTER", "SLAVE") or st.haListenPort >= 0

    async def _start_remoting(self):
        from rmq.server.broker_listener import start_remoting_listener
        b = self.cfg.broker
        ha = self.wants_ha()
        server, addr = await start_remoting_listener(
            self.controller, self.host, self.cfg.store.listenPort,
            namesrv_addr=b.namesrvAddr or self.listeners["namesrv"], ha=ha)
        if server.ha_server_addr:
            self.listeners["ha"] = server.ha_server_addr
        return server, addr

    async def stop(self) -> None:
        for s in reversed(self._servers):  # Kafka, then remoting (unregisters), then NameServer
            await s.close_async() if hasattr(s, "close_async") else s.close()
        self._servers.clear()
        self.controller.shutdown()


def run_embedded(cfg: RmqConfig, host: str = "127.0.0.1", ready_file: str | None = None) -> None:
    logging.basicConfig(level=os.environ.get("RMQ_LOG", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    guard: ShutdownGuard | None = None

    async def main() -> None:
        nonlocal guard
        srv = EmbeddedServer(cfg, host)
        guard = ShutdownGuard("rmq up", flush=srv.controller.flush_for_exit)
        from rmq.server.eventloop import running_loop_name
        log.info("rmq up runs on the %s event loop (RMQ_LOOP)", running_loop_name())
        listeners = await srv.start()
        for name, addr in listeners.items():
            print(f"{name:>8}: {addr}", flush=True)
        print("ready (Ctrl-C to stop)", flush=True)
        if ready_file:
            tmp = ready_file + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(listeners, fh)
            os.replace(tmp, ready_file)
        await guard.wait_for_signal()
        print("shutting down", flush=True)
        await srv.stop()

    from rmq.server.eventloop import LoopChoiceError, run
    try:
        run(main())
    except LoopChoiceError as exc:
        raise StartupError(str(exc)) from None
    if guard is not None:
        guard.finished()
