"""`rmq pipeline run NAME|DIR`: a Spark Declarative Pipeline from configs/pipelines/ (or any
directory holding a spark-pipeline.yml) run with `spark-pipelines run`, against a broker.

Each run starts its own Spark Connect server on a free port of the loopback (127.0.0.1, never
0.0.0.0 nor the fixed 15002), and points `spark-pipelines --remote` at it, so several runs on one
machine do not collide; the server is stopped when the run ends. Its JVM starts first, so that its
start overlaps the embedded broker's start and the seed (which may wait on retry timers).

Without --bootstrap/--namesrv an embedded broker is started (`rmq up` on free ports, with
configs/demo-semantics.yaml: short retry delays, SQL92 filters on) and stopped at the end. --seed N
first runs the pipeline's own seed.py to send demo data. The spec is copied into the output
directory with the addresses in its `configuration` and its `storage` there too; spark-pipelines runs
in the output directory, so the tables land in OUT/spark-warehouse/<table> as Parquet. Flow events
are printed as they come, with rows/s for each finished flow, and the outputs with their row counts
at the end. This module starts processes only: pyspark is imported by the pipeline's own files.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import yaml

from .peers import stop_process

REPO = Path(__file__).resolve().parent.parent
PIPELINES = REPO / "configs" / "pipelines"
FLOW_EVENT = re.compile(r"^(\S+ \S+): Flow (\S+) (is|has) (\w+)")
RUN_EVENT = re.compile(r"^(\S+ \S+): Run (is|has) (\w+)")
# pyspark 4.x's Spark Connect client raises this after a run that used Python data sources (their
# accumulators come back as an observed plan it does not know); the run itself has completed.
KNOWN_CLIENT_ERROR = "[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__"


class PipelineError(click.ClickException):
    pass


def resolve(name_or_dir: str) -> Path:
    p = Path(name_or_dir)
    if (p / "spark-pipeline.yml").is_file():
        return p.resolve()
    if (PIPELINES / name_or_dir / "spark-pipeline.yml").is_file():
        return PIPELINES / name_or_dir
    names = ", ".join(sorted(d.name for d in PIPELINES.iterdir() if (d / "spark-pipeline.yml").is_file()))
    raise PipelineError(f"{name_or_dir}: no such pipeline, and not a directory with a spark-pipeline.yml "
                        f"(pipelines: {names})")


def _start_broker(workdir: str, say) -> tuple[subprocess.Popen, dict]:
    from .peers import start_embedded
    try:
        proc, addrs, _ = start_embedded(workdir, str(REPO / "configs" / "demo-semantics.yaml"))
    except RuntimeError as exc:
        raise PipelineError(f"the embedded broker did not start: {exc}") from None
    say(f"embedded broker: Kafka {addrs['kafka']}, NameServer {addrs['namesrv']}")
    return proc, addrs


def _reachable(addr: str) -> bool:
    import socket
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            return True
    except (OSError, ValueError):
        return False


def _seed(src: Path, addrs: dict, config: dict, n: int, say) -> None:
    path = src / "seed.py"
    if not path.is_file():
        raise PipelineError(f"{src}: --seed needs a seed.py in the pipeline directory")
    spec = importlib.util.spec_from_file_location(f"pipeline_seed_{src.name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.seed(addrs, config, n, say)
    except PipelineError:
        raise
    except Exception as exc:       # the seed's own failure, told in one line
        raise PipelineError(f"{path}: seeding failed: {type(exc).__name__}: {exc}") from None


def table_rows(out: Path) -> dict[str, int]:
    """Row counts of the Parquet tables under OUT/spark-warehouse."""
    import pyarrow.dataset as ds
    wh = out / "spark-warehouse"
    counts = {}
    if wh.is_dir():
        for d in sorted(wh.iterdir()):
            if d.is_dir():
                try:
                    counts[d.name] = ds.dataset(str(d), format="parquet").count_rows()
                except Exception:           # a table that is not Parquet, or still empty
                    counts[d.name] = -1
    return counts


def run_pipeline(name_or_dir: str, bootstrap: str | None, namesrv: str | None, seed: int | None,
                 out_dir: str | None, say=None, timeout: float = 900) -> dict:
    say = say or (lambda m: click.echo(m, err=True))
    src = resolve(name_or_dir)
    with open(src / "spark-pipeline.yml", encoding="utf-8") as fh:
        spec = yaml.safe_load(fh) or {}
    if not isinstance(spec, dict) or "name" not in spec:
        raise PipelineError(f"{src / 'spark-pipeline.yml'}: expected a mapping with at least a name")
    for what, addr in (("--bootstrap", bootstrap), ("--namesrv", namesrv)):
        if addr and not _reachable(addr):
            raise PipelineError(f"{what} {addr}: nothing answers there")
    out = Path(out_dir or os.path.join("pipelines-out", src.name)).resolve()
    if (out / "spark-warehouse").exists():
        shutil.rmtree(out / "spark-warehouse")
    for d in ("storage", "pipeline"):
        shutil.rmtree(out / d, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    broker = None
    # the Spark Connect server's JVM starts while the broker starts and the seed runs (its line is printed
    # once it is waited for, after theirs); _spark_pipelines stops it
    launched = launch_connect_server(out)
    handed = False
    tmp = tempfile.mkdtemp(prefix="pipeline-broker-")
    try:
        if bootstrap or namesrv:
            addrs = {"kafka": bootstrap or "", "namesrv": namesrv or "", "remoting": ""}
            if seed and namesrv:
                from rmq.client.admin import MQAdmin
                with MQAdmin(namesrv=[namesrv]) as admin:
                    info = admin.cluster_info()
                    addrs["remoting"] = next(iter(next(iter(info.brokerAddrTable.values())).brokerAddrs.values()))
        else:
            broker, addrs = _start_broker(tmp, say)
        config = dict(spec.get("configuration") or {})
        if addrs.get("kafka"):
            config["rmq.bootstrap"] = addrs["kafka"]
        if addrs.get("namesrv"):
            config["rmq.namesrv"] = addrs["namesrv"]
        if seed:
            _seed(src, addrs, config, seed, say)
        shutil.copytree(src, out / "pipeline", ignore=shutil.ignore_patterns("seed.py", "__pycache__"))
        spec["configuration"] = {k: str(v) for k, v in config.items()}
        spec["storage"] = (out / "storage").as_uri()
        spec_path = out / "pipeline" / "spark-pipeline.yml"
        with open(spec_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(spec, fh, sort_keys=False)
        handed = True
        result = _spark_pipelines(spec_path, out, say, timeout, launched)
    finally:
        if not handed:
            _stop_group(launched[0])
        if broker is not None:
            stop_process(broker)
        shutil.rmtree(tmp, ignore_errors=True)
    result["tables"] = table_rows(out)
    result["out"] = str(out)
    return result


def _pipeline_env() -> dict:
    bindir = os.path.dirname(sys.executable)
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
                PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass


def launch_connect_server(out: Path, master: str = "local[2]") -> tuple[subprocess.Popen, int]:
    """Start (not wait for) a Spark Connect server for one run: spark-submit of SparkConnectServer bound to
    127.0.0.1 on a free port, its log in OUT/connect-server.log, its warehouse OUT/spark-warehouse.
    Returns (process, port); await_connect_server waits until it listens."""
    from .peers import free_port
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    if not os.path.exists(submit):
        raise PipelineError("spark-submit not found next to this Python (pip install 'pyspark[connect]')")
    port = free_port()
    cmd = [submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", master,
           "--name", f"rmq pipeline {out.name}",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.sql.warehouse.dir={(out / 'spark-warehouse').as_uri()}", "spark-internal"]
    with open(out / "connect-server.log", "a", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=out, env=_pipeline_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, port


def await_connect_server(launched: tuple[subprocess.Popen, int], out: Path, say, master: str = "local[2]",
                         attempts: int = 3, timeout: float = 180) -> tuple[subprocess.Popen, str]:
    """Wait until a launched Spark Connect server listens; returns (process, sc:// URL). A port taken
    between choosing and binding (another run) is retried with a new one."""
    from .peers import wait_port
    log_path = out / "connect-server.log"
    proc, port = launched
    for attempt in range(attempts):
        if attempt:
            proc, port = launch_connect_server(out, master)
        if wait_port("127.0.0.1", port, timeout, proc):
            say(f"Spark Connect server on 127.0.0.1:{port}")
            return proc, f"sc://127.0.0.1:{port}"
        _stop_group(proc)
        if "BindException" not in log_path.read_text(errors="replace"):
            break
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-10:])
    raise PipelineError(f"the Spark Connect server did not start; the end of {log_path}:\n{tail}")


def start_connect_server(out: Path, say, master: str = "local[2]", attempts: int = 3,
                         timeout: float = 180) -> tuple[subprocess.Popen, str]:
    """launch_connect_server, then await_connect_server: a listening server and its sc:// URL."""
    return await_connect_server(launch_connect_server(out, master), out, say, master, attempts, timeout)


def _spark_pipelines(spec_path: Path, out: Path, say, timeout: float, launched) -> dict:
    bindir = os.path.dirname(sys.executable)
    exe = os.path.join(bindir, "spark-pipelines")
    if not os.path.exists(exe):
        _stop_group(launched[0])
        raise PipelineError("spark-pipelines not found next to this Python (pip install 'pyspark[pipelines]')")
    env = _pipeline_env()
    log_path = out / "spark-pipelines.log"
    started: dict[str, float] = {}
    flows: dict[str, dict] = {}
    status = None
    t0 = time.monotonic()
    server, url = await_connect_server(launched, out, say)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([exe, "--remote", url, "run", "--spec", str(spec_path)], cwd=out, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)
        try:
            for line in proc.stdout:
                log.write(line)
                for part in line.replace("\r", "\n").splitlines():
                    m = FLOW_EVENT.match(part.strip())
                    if m:
                        flow, state = m.group(2).split(".")[-1], m.group(4)
                        now = time.monotonic()
                        if state == "RUNNING":
                            started[flow] = now
                        flows[flow] = {"state": state}
                        if state in ("COMPLETED", "FAILED", "STOPPED") and flow in started:
                            secs = now - started[flow]
                            flows[flow]["seconds"] = round(secs, 2)
                            rows = table_rows(out).get(flow, -1)
                            flows[flow]["rows"] = rows
                            rate = f", {rows / secs:,.0f} rows/s" if rows >= 0 and secs > 0 else ""
                            say(f"[{now - t0:6.1f}s] flow {flow} {state.lower()}: {rows} rows in {secs:.1f}s{rate}")
                        else:
                            say(f"[{now - t0:6.1f}s] flow {flow} {state.lower()}")
                    r = RUN_EVENT.match(part.strip())
                    if r:
                        status = r.group(3)
                        say(f"[{time.monotonic() - t0:6.1f}s] run {status.lower()}")
                if time.monotonic() - t0 > timeout:
                    raise PipelineError(f"spark-pipelines ran longer than {timeout:.0f}s; its log: {log_path}")
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            _stop_group(server)
    text = log_path.read_text(errors="replace")
    if status != "COMPLETED" or (code != 0 and KNOWN_CLIENT_ERROR not in text):
        errors = [ln for ln in text.splitlines() if re.search(r"Error|Exception|FAILED", ln)
                  and not ln.lstrip().startswith("at ")][:8]
        raise PipelineError(f"the pipeline did not complete (spark-pipelines exit code {code}, run "
                            f"{(status or 'not started').lower()}); from {log_path}:\n" + "\n".join(errors))
    return {"status": status, "flows": flows, "exit_code": code, "seconds": round(time.monotonic() - t0, 1)}


@click.group("pipeline")
def pipeline() -> None:
    """Spark Declarative Pipelines over the broker (configs/pipelines/)."""


@pipeline.command("list")
def list_pipelines() -> None:
    """The pipelines that ship with the project."""
    for d in sorted(PIPELINES.iterdir()):
        if (d / "spark-pipeline.yml").is_file():
            first = (d / "spark-pipeline.yml").read_text().splitlines()[0].lstrip("# ")
            click.echo(f"{d.name:10s}  {first}")


@pipeline.command("run")
@click.argument("name_or_dir")
@click.option("--bootstrap", default=None, help="A running broker's Kafka listener (host:port).")
@click.option("--namesrv", default=None, help="A running broker's NameServer (host:port).")
@click.option("--seed", type=click.IntRange(min=1), default=None, help="Send N demo records first (the pipeline's seed.py).")
@click.option("--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the tables, the storage and the log go (default pipelines-out/NAME).")
def run(name_or_dir, bootstrap, namesrv, seed, out_dir) -> None:
    """Run a pipeline with spark-pipelines (an embedded broker unless --bootstrap/--namesrv)."""
    if importlib.util.find_spec("pyspark") is None:      # spark-pipelines runs in a child process
        from rmq.extras import MissingExtra
        raise MissingExtra("pyspark", "`rmq pipeline run`")
    res = run_pipeline(name_or_dir, bootstrap, namesrv, seed, out_dir)
    click.echo(f"pipeline {Path(res['out']).name}: {res['status'].lower()} in {res['seconds']}s; outputs (Parquet):")
    for t, n in res["tables"].items():
        click.echo(f"  {os.path.join(res['out'], 'spark-warehouse', t)}  {n} rows")
