"""`rmq drill kill` and `rmq drill stop`: the kill drill of rmq/drill/kill.py and the stop drill of
rmq/drill/stop.py from the command line."""
from __future__ import annotations

import json
import logging
import os

import click


@click.group()
def drill() -> None:
    """Failure drills against a real broker process."""


@drill.command("kill")
@click.option("--rounds", type=click.IntRange(1), default=10, show_default=True, help="SIGKILL / restart rounds.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="Broker YAML (flushDiskType is forced to SYNC_FLUSH; ports are chosen by the drill).")
@click.option("--protocol", type=click.Choice(["rocketmq", "kafka", "both"]), default="both", show_default=True,
              help="Which producers run while the broker is killed.")
@click.option("--data", "workdir", type=click.Path(file_okay=False),
              help="Working directory (store, logs); default a temporary one, removed afterwards.")
@click.option("--min-s", type=float, default=0.3, show_default=True, help="Earliest kill after the producers start (s).")
@click.option("--max-s", type=float, default=2.0, show_default=True, help="Latest kill after the producers start (s).")
@click.option("--seed", type=int, help="Random seed for the kill moments.")
@click.option("--slave", is_flag=True,
              help="Run a SYNC_MASTER with its SLAVE (NameServer, master, slave as processes) and kill the master; "
                   "each round also checks the slave, right after the kill and after it caught up.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def drill_kill(rounds, config_path, protocol, workdir, min_s, max_s, seed, slave, as_json) -> None:
    """SIGKILL a SYNC_FLUSH broker while producers send; after each restart check that every
    acknowledged message is in the consumequeue exactly once and that committed offsets survived.
    With --slave the broker is a SYNC_MASTER whose slave must hold every acknowledged message even
    at the moment of the kill."""
    from .kill import run_kill_drill
    logging.basicConfig(level=logging.CRITICAL)  # the clients' "connection closed" lines are expected here
    protocols = ("rocketmq", "kafka") if protocol == "both" else (protocol,)
    if not as_json:
        slave_head = f" {'s-found':>8} {'s-lost':>6} {'s-dup':>5} {'not-on-s':>8} {'s-back s':>8}" if slave else ""
        click.echo(f"{'round':>5} {'acked':>8} {'found':>8} {'lost':>5} {'dup':>4}{slave_head} {'restart s':>9} "
                   f"{'store MB':>9} {'s/GB':>6} {'offsets':>7}  recovery")

    def show(r):
        if as_json:
            return
        s = r.slave
        offsets_ok = r.offsets_ok and (s is None or s.offsets_ok)
        slave_cols = (f" {s.found:>8} {s.lost:>6} {s.duplicated:>5} {s.acked_not_on_slave:>8} {s.reconnect_s:>8.3f}"
                      if s is not None else "")
        click.echo(f"{r.round:>5} {r.acknowledged:>8} {r.found:>8} {r.lost:>5} {r.duplicated:>4}{slave_cols} "
                   f"{r.restart_s:>9.3f} {r.store_bytes / 1e6:>9.1f} "
                   f"{(f'{r.restart_s_per_gb:.2f}' if r.restart_s_per_gb else '-'):>6} "
                   f"{'ok' if offsets_ok else 'WRONG':>7}  {r.recovery}")
    try:
        rep = run_kill_drill(rounds, config_path, protocols, workdir=workdir, min_s=min_s, max_s=max_s, seed=seed,
                             on_round=show, keep=workdir is not None, slave=slave)
    except (RuntimeError, ValueError) as exc:
        raise click.ClickException(str(exc))
    if as_json:
        click.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        what = "SYNC_MASTER + SLAVE, " if slave else ""
        gb = rep.store_bytes / 1e9
        click.echo(f"total: {len(rep.rounds)} rounds ({what}{'+'.join(protocols)}), acknowledged "
                   f"{rep.total_acknowledged}, found {rep.total_found}, lost {rep.total_lost}, duplicated "
                   f"{rep.total_duplicated}, misplaced {rep.total_misplaced}, offset errors {rep.offset_errors}")
        if rep.slave is not None:
            s = rep.slave
            click.echo(f"slave: found {s.total_found}, lost {s.total_lost}, duplicated {s.total_duplicated}, "
                       f"misplaced {s.total_misplaced}, acknowledged but not on the slave at a kill "
                       f"{s.acked_not_on_slave}, offset errors {s.offset_errors}; back (HA reconnected) at most "
                       f"{s.reconnect_s_max:.3f} s after a restart, then caught up within {s.catch_up_s_max:.3f} s")
        per_gb = f", {rep.restart_s_max / gb:.2f} s per GB" if gb >= 0.1 else ""
        click.echo(f"restart after SIGKILL: mean {rep.restart_s_mean:.3f} s, max {rep.restart_s_max:.3f} s "
                   f"(store {rep.store_bytes / 1e6:.1f} MB{per_gb}); clean restart {rep.clean_restart_s:.3f} s")
    if rep.failed:
        raise SystemExit(1)


@drill.command("stop")
@click.option("--rounds", type=click.IntRange(1), default=8, show_default=True,
              help="SIGSTOP / SIGCONT / SIGTERM / restart rounds of the slave.")
@click.option("--pause-s", type=float, default=0.5, show_default=True, help="How long the slave stays stopped.")
@click.option("--timeout-s", type=float, default=15.0, show_default=True,
              help="A process still up this long after SIGTERM counts as hung (and is SIGKILLed).")
@click.option("--seed", type=int, help="Random seed for the moments of the signals.")
@click.option("--kafka", is_flag=True, help="Run the brokers' Kafka listeners too (the slave's is a follower).")
@click.option("--no-master", is_flag=True,
              help="Skip the last round (SIGTERM of the master while its slave is stopped).")
@click.option("--data", "workdir", type=click.Path(file_okay=False),
              help="Working directory (stores, logs); default a temporary one, removed afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def drill_stop(rounds, pause_s, timeout_s, seed, kafka, no_master, workdir, as_json) -> None:
    """A SYNC_MASTER and its SLAVE under traffic: SIGSTOP the slave, SIGCONT it, SIGTERM it and time
    its exit, restart it on the same store; then SIGTERM the master while its slave is stopped. Every
    process must exit within the shutdown bound (10 s)."""
    import shutil
    import tempfile

    from .stop import run_stop_drill
    logging.basicConfig(level=logging.CRITICAL)  # the clients' "connection closed" lines are expected here
    tmp = None
    if workdir is None:
        workdir = tmp = tempfile.mkdtemp(prefix="rmq-drill-stop-")
    else:
        os.makedirs(workdir, exist_ok=True)
    if not as_json:
        click.echo(f"{'round':>5} {'target':>6} {'exit':>5} {'stop s':>7} {'forced':>6}  restart recovery")

    def show(r):
        if not as_json:
            click.echo(f"{r.round:>5} {r.target:>6} {('hung' if r.exit_code is None else r.exit_code)!s:>5} "
                       f"{r.stop_s:>7.2f} {('yes' if r.forced else 'no'):>6}  {r.recovery or '-'}"
                       + (f" (raw HA client: {r.unsent} bytes unsent in the master's socket)" if r.unsent else ""))
    try:
        rep = run_stop_drill(rounds, os.path.abspath(workdir), pause_s=pause_s, timeout_s=timeout_s, seed=seed,
                             master_round=not no_master, kafka=kafka, on_round=show)
    except (RuntimeError, ValueError) as exc:
        raise click.ClickException(str(exc))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        worst = max((r.stop_s for r in rep.rounds), default=0.0)
        forced = sum(r.forced for r in rep.rounds)
        hung = sum(r.exit_code is None for r in rep.rounds)
        click.echo(f"total: {len(rep.rounds)} stops, slowest {worst:.2f} s, forced by the watchdog {forced}, "
                   f"hung {hung}; {rep.sent} messages sent meanwhile")
    if not rep.ok:
        raise SystemExit(1)
