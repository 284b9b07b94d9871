"""`rmq namesrv` and `rmq broker -c FILE`: the NameServer and a broker as separate processes, for
clusters of several brokers and NameServers on one machine or many (SPEC §9, DESIGN "Processes")."""
from __future__ import annotations

import json
import logging
import os
import socket

import click
import yaml

from .common.acl import AclConfigError
from .config import ConfigError, load_config
from .server.eventloop import LoopChoiceError
from .server.eventloop import run as _run_event_loop
from .server.shutdown import ShutdownGuard


def _run_loop(main) -> None:
    """Runs a server's main coroutine on the event loop RMQ_LOOP chooses (rmq.server.eventloop)."""
    try:
        _run_event_loop(main)
    except LoopChoiceError as exc:
        raise click.ClickException(str(exc)) from None

#: Keys a namesrv YAML file may hold (NamesrvConfig / NettyServerConfig names where RocketMQ has them).
NAMESRV_KEYS = {"listenPort": int, "kvConfigPath": str, "orderMessageEnable": bool,
                "brokerExpirySeconds": float, "scanIntervalSeconds": float}


def _setup_logging() -> None:
    logging.basicConfig(level=os.environ.get("RMQ_LOG", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _write_ready(path: str | None, info: dict) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(info, fh)
    os.replace(tmp, path)


def load_namesrv_config(path: str | None) -> dict:
    """Read and validate a namesrv YAML file; unknown keys and wrong types name the file and key."""
    if not path:
        return {}
    if not os.path.exists(path):
        raise ConfigError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of camelCase keys")
    out = {}
    for key, value in data.items():
        typ = NAMESRV_KEYS.get(key)
        if typ is None:
            raise ConfigError(f"{path}: unknown key {key!r} (expected one of {', '.join(sorted(NAMESRV_KEYS))})")
        ok = (isinstance(value, bool) if typ is bool else
              isinstance(value, (int, float)) and not isinstance(value, bool) if typ is float else
              isinstance(value, int) and not isinstance(value, bool) if typ is int else isinstance(value, str))
        if not ok:
            raise ConfigError(f"{path}: key {key!r}: expected {typ.__name__}, got {value!r}")
        out[key] = typ(value)
    return out




# ------------------------------------------------------------------------------------------ namesrv
@click.command("namesrv")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file (listenPort, kvConfigPath, orderMessageEnable, brokerExpirySeconds, scanIntervalSeconds).")
@click.option("--port", type=int, help="Port to listen on (default 9876; 0 = ephemeral).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--broker-expiry-s", type=float, help="Drop a broker silent this long (default 120).")
@click.option("--scan-interval-s", type=float, help="How often to look for silent brokers (default 10).")
@click.option("--kv-config", "kv_config", type=click.Path(dir_okay=False), help="Persist KV config here (kvConfig.json).")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write {\"namesrv\": \"host:port\"} here once listening.")
def namesrv(config_path, port, host, broker_expiry_s, scan_interval_s, kv_config, ready_file) -> None:
    """Run a NameServer: brokers register here, clients read topic routes here."""
    from .namesrv import start_namesrv_listener
    try:
        cfg = load_namesrv_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc))
    port = port if port is not None else cfg.get("listenPort", 9876)
    expiry = broker_expiry_s if broker_expiry_s is not None else cfg.get("brokerExpirySeconds", 120.0)
    scan = scan_interval_s if scan_interval_s is not None else cfg.get("scanIntervalSeconds", 10.0)
    if expiry <= 0 or scan <= 0:
        raise click.BadParameter("expected positive seconds", param_hint="--broker-expiry-s/--scan-interval-s")
    kv_path = kv_config or cfg.get("kvConfigPath")
    _setup_logging()
    guard = ShutdownGuard("namesrv")

    async def main() -> None:
        try:
            srv, addr = await start_namesrv_listener(host, port, scan_interval_s=scan, broker_expiry_s=expiry,
                                                     kv_config_path=kv_path)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}")
        srv.processor.order_message_enable = bool(cfg.get("orderMessageEnable", False))
        click.echo(f" namesrv: {addr}")
        click.echo("ready (Ctrl-C to stop)")
        _write_ready(ready_file, {"namesrv": addr})
        await guard.wait_for_signal()
        click.echo("shutting down")
        await srv.close_async()

    _run_loop(main())
    guard.finished()


# ------------------------------------------------------------------------------------------ broker
class BrokerProcess:
    """What plugin listeners see of a `rmq broker` process (rmq.plugins.listener_factories): the
    config, the started BrokerController, the bind address and the address clients are told."""

    mode = "broker"

    def __init__(self, cfg, controller, host: str) -> None:
        self.cfg = cfg
        self.controller = controller
        self.host = host
        self.advertised_host = cfg.store.brokerIP1


@click.command("broker")
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Broker YAML (brokerName, brokerId, brokerClusterName, namesrvAddr, listenPort, kafkaPort, ...).")
@click.option("--data", type=click.Path(file_okay=False), help="Store root (storePathRootDir), overriding the file.")
@click.option("--host", help="Address to bind (default: brokerIP1).")
@click.option("--kafka-port", type=int, help="Kafka listener port (kafkaPort; 0 = ephemeral), overriding the file.")
@click.option("--listen-port", type=int, help="Remoting port (listenPort; 0 = ephemeral), overriding the file.")
@click.option("-n", "--namesrv-addr", help="NameServer list 'host:port;host:port' (namesrvAddr), overriding the file.")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write the listener addresses as JSON here once up.")
def broker(config_path, data, host, kafka_port, listen_port, namesrv_addr, ready_file) -> None:
    """Run one broker (master brokerId 0 or slave) that registers with the NameServers in namesrvAddr,
    with the plugin listeners (Kafka, when kafkaEnable) in the same process."""
    from rmq.server.broker_listener import start_remoting_listener

    from .broker.controller import BrokerController
    from .plugins import listener_factories
    from .store.mapped_file import StoreError
    try:
        cfg = load_config(config_path, {"storePathRootDir": data, "kafkaPort": kafka_port, "listenPort": listen_port,
                                        "namesrvAddr": namesrv_addr})
    except ConfigError as exc:
        raise click.ClickException(str(exc))
    bind_host = host or cfg.store.brokerIP1
    # several brokers often share a machine: `rmq broker` opens the console only when its file sets
    # consolePort (a port, or -1 for an ephemeral one), never on `rmq up`'s 8080 default
    console_wanted = cfg.broker.consolePort != 0
    if cfg.store.brokerRole == "SLAVE" and cfg.broker.brokerId <= 0:
        raise click.ClickException(f"{config_path}: brokerRole SLAVE needs brokerId > 0 (got {cfg.broker.brokerId})")
    if cfg.store.brokerRole != "SLAVE" and cfg.broker.brokerId != 0:
        click.echo(f"warning: {config_path}: brokerRole {cfg.store.brokerRole} is a master, so brokerId is 0, not "
                   f"{cfg.broker.brokerId} (as RocketMQ's BrokerStartup does); a slave has brokerRole SLAVE", err=True)
        cfg.broker.brokerId = 0
    if cfg.store.listenPort == 0 and cfg.store.haListenPort == -1:
        cfg.store.haListenPort = 0  # an ephemeral remoting port gets an ephemeral HA port
    # Bind first: with listenPort 0 the store must know the real port (it is in every offsetMsgId).
    try:
        sock = socket.create_server((bind_host, cfg.store.listenPort), reuse_port=False, backlog=1024)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {bind_host}:{cfg.store.listenPort}: {exc}")
    cfg.store.listenPort = sock.getsockname()[1]
    _setup_logging()
    try:
        controller = BrokerController(cfg)
        controller.start()
    except StoreError as exc:
        sock.close()
        raise click.ClickException(str(exc))

    b = cfg.broker
    guard = ShutdownGuard(f"broker {b.brokerName} id {b.brokerId}", flush=controller.flush_for_exit)

    async def main() -> None:
        from .server.eventloop import running_loop_name
        logging.getLogger("rmq.server").info("rmq broker runs on the %s event loop (RMQ_LOOP)", running_loop_name())
        try:
            srv, addr = await start_remoting_listener(controller, bind_host, 0, sock=sock, ha=True)
        except OSError as exc:
            raise click.ClickException(f"cannot start the HA listener (haListenPort): {exc}")
        except AclConfigError as exc:  # aclEnable with a plain_acl.yml that cannot be used
            raise click.ClickException(str(exc))
        plugins = []  # (name, server, "host:port"), closed before the remoting listener
        try:
            for name, factory in listener_factories(BrokerProcess(cfg, controller, bind_host)):
                try:
                    psrv, paddr = await factory()
                except OSError as exc:
                    raise click.ClickException(f"cannot start the {name} listener: {exc}")
                except StoreError as exc:  # a kafka-log directory another process holds
                    raise click.ClickException(str(exc))
                plugins.append((name, psrv, paddr))
            if console_wanted:  # the web console and /metrics (rmq/console), only when the file asks
                from .console import ConsoleContext, start_console
                ctx = ConsoleContext(controller, {"remoting": srv, **{n: p for n, p, _ in plugins}},
                                     {"remoting": addr, **{n: a for n, _, a in plugins}},
                                     labs_dir=cfg.broker.consoleLabsDir)
                try:
                    csrv, caddr = await start_console(ctx, bind_host, max(0, cfg.broker.consolePort))
                except OSError as exc:
                    raise click.ClickException(
                        f"cannot start the console listener on {bind_host}:{cfg.broker.consolePort}: "
                        f"{exc.strerror or exc} (consolePort in {config_path}; -1 picks a free port, 0 turns it off)")
                plugins.append(("console", csrv, caddr))
            b = cfg.broker
            click.echo(f"  broker: {b.brokerClusterName}/{b.brokerName} id {b.brokerId} on {addr} "
                       f"(registered as {srv.broker_addr})")
            if srv.ha_server_addr:
                click.echo(f"      ha: {srv.ha_server_addr} ({cfg.store.brokerRole})")
            elif cfg.store.brokerRole == "SLAVE":
                click.echo(f"      ha: slave of {cfg.store.haMasterAddress or 'the master the NameServer names'}")
            for name, _, paddr in plugins:
                click.echo(f"{name:>8}: {paddr}")
            click.echo(f"   store: {controller.store.root}")
            click.echo(f" namesrv: {b.namesrvAddr or '(none: set namesrvAddr)'}")
            click.echo("ready (Ctrl-C to stop)")
            info = {"remoting": addr, "brokerAddr": srv.broker_addr, "store": controller.store.root,
                    "brokerName": b.brokerName, "brokerRole": cfg.store.brokerRole}
            if srv.ha_server_addr:
                info["ha"] = srv.ha_server_addr
            info.update({name: paddr for name, _, paddr in plugins})
            _write_ready(ready_file, info)
            await guard.wait_for_signal()
            click.echo("shutting down")
        finally:
            for _, psrv, _ in reversed(plugins):
                await psrv.close_async() if hasattr(psrv, "close_async") else psrv.close()
            await srv.close_async()

    try:
        _run_loop(main())
    finally:
        controller.shutdown()
    guard.finished()
