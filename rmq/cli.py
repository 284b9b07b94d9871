"""The `rmq` command line: up, store inspect, bench (DESIGN.md "Processes and defaults")."""
from __future__ import annotations

import json
import os
import sys

import click

from .config import ConfigError, load_config
from .extras import GuardedGroup
from .store.mapped_file import StoreError


class _PluginCommands:
    """A group whose plugin commands (rmq/plugins.py) are imported the first time a name is not one
    of rmq's own, or when the commands are listed (--help): `rmq admin ...` and `rmq store ...` start
    without importing kafka_bridge and labs."""

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and _load_plugin_commands():
            cmd = super().get_command(ctx, name)
        return cmd

    def list_commands(self, ctx):
        _load_plugin_commands()
        return super().list_commands(ctx)


class _MainGroup(_PluginCommands, GuardedGroup):
    pass


class _PluginGroup(_PluginCommands, click.Group):
    pass


@click.group(cls=_MainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rmq-bridge", prog_name="rmq", message="%(prog)s %(version)s")
def main() -> None:
    """A RocketMQ-semantics broker in Python that also speaks the Kafka wire protocol."""


# ------------------------------------------------------------------------------------------ up
DEFAULT_CONSOLE_PORT = 8080  # `rmq up`'s web console and /metrics
@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML file of camelCase keys (as broker.conf).")
@click.option("--data", type=click.Path(file_okay=False), help="Store root (storePathRootDir); default ./data/store.")
@click.option("--namesrv-port", type=int, help="NameServer port (default 9876; 0 = ephemeral).")
@click.option("--remoting-port", type=int, help="Broker remoting port (default 10911; 0 = ephemeral).")
@click.option("--kafka-port", type=int, help="Kafka listener port (default 9092; 0 = ephemeral).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the listeners bind to.")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write the listeners' addresses as JSON here once up.")
@click.option("--storage", type=click.Choice(["commitlog", "kafka-log"]), default=None,
              help="Where Kafka topics live (kafkaStorage): the RocketMQ store (default) or Kafka's log design.")
@click.option("--console-port", type=int, help="Web console and /metrics port (consolePort; default 8080, or "
              "RMQ_CONSOLE_PORT when set; 0 = off, -1 = ephemeral).")
def up(config_path, data, namesrv_port, remoting_port, kafka_port, host, ready_file, storage, console_port) -> None:
    """Start the embedded default: store, broker services and the listeners in one process."""
    from .server.app import StartupError, run_embedded
    overrides = {
        "storePathRootDir": data,
        "namesrvPort": namesrv_port,
        "listenPort": remoting_port,
        "kafkaPort": kafka_port,
        "kafkaStorage": storage,
        "consolePort": console_port,
    }
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc))
    if console_port is None and not (config_path and "consolePort" in _yaml_keys(config_path)):
        env_port = os.environ.get("RMQ_CONSOLE_PORT", "").strip()  # else `rmq up`'s default, 8080
        try:
            cfg.broker.consolePort = int(env_port) if env_port else DEFAULT_CONSOLE_PORT
        except ValueError:
            cfg.broker.consolePort = -2
        if not -1 <= cfg.broker.consolePort <= 65535:
            raise click.ClickException(f"RMQ_CONSOLE_PORT: expected a port number, 0 (off) or -1 (ephemeral), "
                                       f"got {env_port!r}")
    if data is None and not (config_path and "storePathRootDir" in (_yaml_keys(config_path))):
        cfg.store.storePathRootDir = os.path.abspath(os.path.join("data", "store"))
    try:
        run_embedded(cfg, host=host, ready_file=ready_file)
    except (StoreError, StartupError) as exc:
        raise click.ClickException(str(exc))


@main.command("console")
@click.option("-n", "--namesrv", "namesrv", envvar="NAMESRV_ADDR", required=True,
              help="NameServer list 'host:port;host:port' (or $NAMESRV_ADDR).")
@click.option("--kafka", "kafka", help="A Kafka bootstrap address of the cluster, for its Kafka groups.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port (0 = ephemeral).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write {\"console\": \"host:port\"} here once up.")
def console_cmd(namesrv, kafka, port, host, ready_file) -> None:
    """The web console for a whole cluster, in its own process (docs/console.md): brokers, topics,
    group progress and messages through the NameServers and brokers. Each broker's own console
    (`rmq up`) has the store, labs and /metrics pages."""
    import asyncio

    from .console.standalone import serve

    def ready(addr: str) -> None:
        if ready_file:
            with open(ready_file + ".tmp", "w", encoding="utf-8") as fh:
                json.dump({"console": addr}, fh)
            os.replace(ready_file + ".tmp", ready_file)
    try:
        asyncio.run(serve(namesrv, kafka, host, port, ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise click.ClickException(f"cannot start the console on {host}:{port}: {exc.strerror or exc} "
                                   "(choose another with --port; 0 picks a free one)")


def _yaml_keys(path: str) -> set[str]:
    import yaml
    with open(path, encoding="utf-8") as fh:
        d = yaml.safe_load(fh) or {}
    return set(d) if isinstance(d, dict) else set()


# ------------------------------------------------------------------------------------------ store
@main.group()
def store() -> None:
    """Look inside a store directory (inspect, read-only) or recover it offline (recover)."""


@store.command("inspect")
@click.argument("directory", type=click.Path())
@click.argument("what", required=False, type=click.Choice(["commitlog", "consumequeue", "index", "compaction", "history"]))
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
@click.option("--limit", type=int, default=20, show_default=True, help="Units/entries shown per file or queue (0 = all).")
@click.option("--topic", help="Only this topic (and, with --key, the index key topic#KEY).")
@click.option("--queue", "queue_id", type=int, help="Only this queueId.")
@click.option("--key", help="Show the index chain for this key (with --topic: topic#key).")
@click.option("--offset", type=int, help="history: the queue offset of the message (with --topic and --queue).")
@click.option("--msg-id", "msg_id", help="history: the message's offsetMsgId or client msgId.")
def store_inspect(directory, what, as_json, limit, topic, queue_id, key, offset, msg_id) -> None:
    """Show commitlog units, consumequeue entries and index files as the seed diagrams draw them, and
    the compacted logs of compacted topics (what compaction kept of each queue, and its last pass).

    DIRECTORY is a store root, or one file inside its commitlog/, consumequeue/<topic>/<queueId>/ or
    index/. Read-only: safe on a store a running broker uses. Exits 1 when it finds corruption (a
    unit that does not decode, a consumequeue unit that does not match the unit it points to, an
    index file whose header or entries are impossible).

    `history` follows one message (--topic --queue --offset, or --msg-id): its retry, scheduled
    and dead-letter copies, and what every group has done with it, RocketMQ and Kafka groups by
    their committed offset and Kafka share groups by the record's state and delivery count."""
    from .store.inspect import inspect_store, message_history, render_history, render_text
    if what == "history":
        try:
            rep = message_history(directory, topic=topic, queue_id=queue_id, offset=offset, msg_id=msg_id)
        except StoreError as exc:
            raise click.ClickException(str(exc))
        click.echo(json.dumps(rep, indent=1, default=str) if as_json else render_history(rep))
        return
    try:
        rep = inspect_store(directory, what, limit=None if limit == 0 else limit, topic=topic,
                            queue_id=queue_id, key=key)
    except StoreError as exc:
        raise click.ClickException(str(exc))
    if as_json:
        click.echo(json.dumps(rep, indent=1, default=str))
    else:
        click.echo(render_text(rep))
    if rep["problems"]:
        click.echo(f"Error: {directory}: {len(rep['problems'])} problem(s) found: the store is corrupt", err=True)
        sys.exit(1)


@store.command("recover")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="The broker's YAML file (its file sizes: mappedFileSizeCommitLog ...).")
def store_recover(directory, config_path) -> None:
    """Recover a store without starting a broker: what `rmq up` does first (abnormal recovery when
    the abort file is there: cut a torn tail, rebuild consumequeues and index), then a clean
    shutdown. Writes to DIRECTORY, so it is refused while a broker (or another command) holds it."""
    from .store import DefaultMessageStore
    try:
        cfg = load_config(config_path, {"storePathRootDir": directory})
    except ConfigError as exc:
        raise click.ClickException(str(exc))
    try:
        s = DefaultMessageStore(cfg.store).load()
    except StoreError as exc:
        raise click.ClickException(str(exc))
    mode = (f"abnormal ({s.recovery_mode}: the abort file was there)" if s.recovered_abnormally
            else "normal (the last shutdown was clean)")
    end = s.commitlog.max_offset
    s.shutdown()
    click.echo(f"store {s.root}: recovery {mode}, commitlog ends at {end}; closed cleanly")


# ------------------------------------------------------------------------------------------ bench
@main.group(cls=_PluginGroup)
def bench() -> None:
    """Benchmarks that print figures (and compare side by side where a peer is given)."""


@bench.command("store")
@click.option("--size", type=int, default=100, show_default=True, help="Body size in bytes.")
@click.option("--count", type=int, default=200_000, show_default=True, help="Messages to put.")
@click.option("--flush", type=click.Choice(["async", "sync"]), default="async", show_default=True,
              help="ASYNC_FLUSH or SYNC_FLUSH (group commit).")
@click.option("--writers", type=int, default=1, show_default=True, help="Concurrent writer threads.")
@click.option("--batch", type=int, default=1, show_default=True, help="Messages per put call (a batch put).")
@click.option("--keys", is_flag=True, help="Give every message a KEYS property (indexfile work included).")
@click.option("--reput", type=click.Choice(["inline", "thread"]), default="inline", show_default=True,
              help="Dispatch inside the put, or in the ReputMessageService thread.")
@click.option("--data", type=click.Path(file_okay=False), help="Directory to write in (default: a temp dir).")
@click.option("--message-lists", is_flag=True,
              help="With --batch > 1: put lists of Message objects through put_messages instead of "
                   "SEND_BATCH_MESSAGE bodies through put_batch.")
@click.option("--kafka-batches", is_flag=True,
              help="Also put the same count as Kafka RecordBatches of --batch records through the Kafka produce "
                   "fast path (C mapping + put_encoded, needs rmq._native), and print both.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (a list of two with --kafka-batches).")
def bench_store(size, count, flush, writers, batch, keys, reput, data, message_lists, kafka_batches,
                as_json) -> None:
    """Put COUNT messages of SIZE bytes; print msgs/s, MB/s, latency and raw write bandwidth.

    --batch 1 calls put_message per message; --batch N puts SEND_BATCH_MESSAGE bodies of N
    messages through put_batch (RocketMQ's putMessages), built before the clock starts as a client
    would send them."""
    from rmq.bench.store import run_store_bench
    for name, val in (("--size", size), ("--count", count), ("--writers", writers), ("--batch", batch)):
        if val <= 0:
            raise click.BadParameter(f"expected a positive number, got {val}", param_hint=name)
    if size > 4 * 1024 * 1024 - 1024:
        raise click.BadParameter("bodies over maxMessageSize (4 MiB) are refused by the store", param_hint="--size")
    encoders = [None]
    if kafka_batches:
        if keys:
            raise click.BadParameter("Kafka batches here carry no keys", param_hint="--keys")
        from . import native
        if native.ext is None:
            raise click.ClickException("--kafka-batches needs the C extension rmq._native "
                                       "(built by pip install -e .; RMQ_NO_NATIVE=1 switches it off)")
        from .plugins import first  # kafka_bridge sits above rmq: it plugs its encoder in
        encoder = first("store_batch_encoder")
        if encoder is None:
            raise click.ClickException("--kafka-batches needs the kafka_bridge plugin (pip install -e .)")
        encoders.append(encoder)
    results = []
    for encoder in encoders:
        progress = None
        bar = None
        if not as_json and sys.stderr.isatty():
            from rich.progress import Progress
            bar = Progress(transient=True)
            task = bar.add_task("putting", total=count)
            bar.start()
            progress = lambda done, total: bar.update(task, completed=done)  # noqa: E731
        try:
            results.append(run_store_bench(size=size, count=count, flush=flush, writers=writers, batch=batch,
                                           data=data, keys=keys, reput=reput, progress=progress,
                                           kafka_encoder=encoder, message_lists=message_lists))
        finally:
            if bar is not None:
                bar.stop()
    if as_json:
        click.echo(json.dumps(results if kafka_batches else results[0]))
        return
    for res in results:
        what = {"kafka-batches": "Kafka batches (C mapping, put_encoded)", "put_message": "put_message",
                "put_batch": "SEND_BATCH_MESSAGE bodies (put_batch)",
                "put_messages": "lists of Messages (put_messages)"}[res["path"]]
        click.echo(f"store put: {res['count']} x {size} B, {flush} flush, {writers} writer(s), batch {batch}, "
                   f"dispatch {reput}{', with keys' if keys else ''}: {what}")
        click.echo(f"  {res['msgs_per_s']:>12,} msgs/s   {res['mb_per_s']:>8} MB/s (commitlog bytes)")
        click.echo(f"  latency per put call: p50 {res['p50_us']} us   p99 {res['p99_us']} us   mean {res['mean_us']} us")
        click.echo(f"  raw sequential write: {res['raw_mb_per_s']} MB/s   store/raw = {res['ratio_to_raw']:.1%}")
        if flush == "sync":
            click.echo(f"  group commit: {res['group_commit_flushes']} fdatasync calls for {res['count']} messages")
        click.echo(f"  peak RSS {res['peak_rss_mb']} MB")
        if res["errors"]:
            click.echo(f"  errors: {res['errors']}")
    if len(results) == 2:
        click.echo(f"Kafka batches / {results[0]['path']}: {results[1]['msgs_per_s'] / results[0]['msgs_per_s']:.1f}x msgs/s")


@bench.command("recovery")
@click.option("--gb", type=float, default=1.0, show_default=True, help="Commitlog size of each store, in GiB.")
@click.option("--keys/--no-keys", "keys", default=None,
              help="Only the store whose messages all carry KEYS, or only the one without (default: both, side by side).")
@click.option("--size", type=int, default=100, show_default=True, help="Body size in bytes.")
@click.option("--file-mb", type=int, default=1024, show_default=True,
              help="mappedFileSizeCommitLog in MiB (RocketMQ's 1 GiB by default).")
@click.option("--after-checkpoint-mb", type=float, default=8.0, show_default=True,
              help="MiB appended after the last checkpoint flush, which the crash leaves out of the "
                   "consumequeues and the index (recovery re-dispatches them).")
@click.option("--drop-caches", is_flag=True,
              help="Also recover the same crash state after `echo 3 > /proc/sys/vm/drop_caches` (root only).")
@click.option("--data", type=click.Path(file_okay=False), help="Directory to write in (default: a temp dir).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per recovery.")
def bench_recovery(gb, keys, size, file_mb, after_checkpoint_mb, drop_caches, data, as_json) -> None:
    """Build stores of GB GiB, crash them (the abort marker of another boot: a machine crash), reopen
    and print what recovery read and re-dispatched and how long it took; the stores are deleted after."""
    from rmq.bench.store import run_recovery_bench
    if gb <= 0:
        raise click.BadParameter(f"expected a positive number, got {gb}", param_hint="--gb")
    if not 1 <= size <= 64 * 1024:
        raise click.BadParameter(f"expected 1..65536 bytes, got {size}", param_hint="--size")
    if not 1 <= file_mb <= 4096:
        raise click.BadParameter(f"expected 1..4096 MiB, got {file_mb}", param_hint="--file-mb")
    if not 0 <= after_checkpoint_mb < gb * 1024:
        raise click.BadParameter(f"expected 0 <= MiB < --gb x 1024, got {after_checkpoint_mb}",
                                 param_hint="--after-checkpoint-mb")
    if drop_caches and os.geteuid() != 0:
        raise click.BadParameter("dropping the page cache needs root", param_hint="--drop-caches")
    kinds = (False, True) if keys is None else (keys,)
    progress = None
    if not as_json and sys.stderr.isatty():
        progress = lambda label, done, total: click.echo(  # noqa: E731
            f"\r  building the store ({label}): {done >> 20} / {total >> 20} MiB", nl=False, err=True)
    try:
        results = run_recovery_bench(gb=gb, size=size, keys=kinds, file_mb=file_mb,
                                     after_checkpoint_mb=after_checkpoint_mb, drop_caches=drop_caches, data=data,
                                     progress=progress)
    except (ValueError, PermissionError) as exc:
        raise click.ClickException(str(exc)) from None
    if progress is not None:
        click.echo("", err=True)
    if as_json:
        click.echo(json.dumps(results))
        return
    click.echo(f"recovery after a machine crash: {size} B bodies, commitlog files of {file_mb} MiB, "
               f"{after_checkpoint_mb:g} MiB appended after the last checkpoint")
    click.echo(f"{'store':8} {'cache':5} {'MiB':>6} {'units':>10} {'mode':9} {'walk from':>10} {'walked':>10} "
               f"{'re-dispatched':>13} {'seconds':>8} {'s/GiB':>6} {'cpu s/GiB':>9}")
    for r in results:
        click.echo(f"{'keys' if r['keys'] else 'no keys':8} {r['cache']:5} {r['commitlog_bytes'] / (1 << 20):>6.0f} "
                   f"{r['messages']:>10} {r['mode']:9} {r['scan_start']:>10} {r['walked']:>10} "
                   f"{r['redispatched']:>13} {r['seconds']:>8.3f} {r['s_per_gb']:>6.3f} {r['cpu_s_per_gb']:>9.3f}")


def _register_commands() -> None:
    """Commands that live in their own modules; plugins add theirs on first need (_PluginCommands)."""
    from rmq.bench.client import bench_rmq
    from rmq.bench.console import bench_console
    from rmq.bench.fuzz import bench_fuzz
    from rmq.bench.ha import bench_ha

    from .admin.cli import admin
    from .cli_cluster import broker, namesrv
    from .drill.cli import drill
    for cmd in (namesrv, broker, admin, drill):
        main.add_command(cmd)
    bench.add_command(bench_rmq)
    bench.add_command(bench_fuzz)
    bench.add_command(bench_ha)
    bench.add_command(bench_console)


_plugins_added = False


def _load_plugin_commands() -> bool:
    """Add the plugins' commands to `rmq` and `rmq bench` (once); True if this call added them."""
    global _plugins_added
    if _plugins_added:
        return False
    _plugins_added = True
    from .plugins import load_plugins
    for plugin in load_plugins():
        for cmd in getattr(plugin, "commands", []):
            main.commands.setdefault(cmd.name, cmd)
        for cmd in getattr(plugin, "bench_commands", []):
            bench.commands.setdefault(cmd.name, cmd)
    return True


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
