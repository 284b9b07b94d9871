"""`rmq demo list | show | run`: classroom demos as YAML scenarios (configs/demos/*.yaml).

A demo starts what its file asks for (an embedded broker with a config, or a NameServer with two
brokers; both with their Kafka listeners), then runs its steps in order, saying before each what is
about to happen and after it why it happened. A step runs an `rmq` command line (in the
foreground, or in the background under a name), produces or consumes through a Kafka client, waits
for a background process to print something (optionally no sooner and no later than some seconds
after a marked step), kills a process, or sleeps. Expectations (regular expressions the output must
or must not contain, timing bounds) are checked as the demo goes, so the narration is only shown as
true when it happened; a demo whose expectation fails stops there with exit code 1.

The file is validated with pydantic before anything starts; every process a demo started is
stopped when it ends, fails or is interrupted."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

import click
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .listing import echo_listing
from .schema import unfold_cjk

REPO = Path(__file__).resolve().parent.parent
DEMOS = REPO / "configs" / "demos"


class DemoError(ValueError):
    """A demo file that cannot be used, or a demo whose expectation failed."""


class BrokerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["embedded", "cluster"] = "embedded"
    config_file: str | None = Field(None, description="a broker.yaml of the repository (e.g. configs/demo-semantics.yaml) "
                                                      "that `config` keys override")
    config: dict[str, str | int | float | bool] = Field(default_factory=dict,
                                                        description="broker.yaml keys (every broker of a cluster)")


class KafkaRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str
    key: str | None = None
    partition: int | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class KafkaProduce(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    records: list[KafkaRecord] = Field(min_length=1)


class KafkaConsume(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    group: str
    count: int = Field(ge=1, description="stop after this many records")
    timeout: float = Field(20, gt=0, le=300)


class WaitFor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    process: str
    pattern: str = Field(description="a regular expression the process must print")
    count: int = Field(1, ge=1, description="how many lines must match")
    timeout: float = Field(30, gt=0, le=600)
    after: str | None = Field(None, description="a mark: the bounds below count from the start of that step")
    min_seconds: float | None = None
    max_seconds: float | None = None


class Kill(BaseModel):
    model_config = ConfigDict(extra="forbid")
    process: str
    signal: Literal["KILL", "TERM", "INT"] = "TERM"


# what wait_for can watch besides the background steps: the servers' logs
SERVER_LOGS = {"embedded": {"broker": "broker.log"},
               "cluster": {"namesrv": "ns.log", "broker-a": "broker-a.log", "broker-b": "broker-b.log"}}

ACTIONS = ("run", "background", "kafka_produce", "kafka_consume", "wait_for", "kill", "sleep")


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    say: str = ""
    say_zh: str = ""
    then: str = Field("", description="shown after the step: why it happened")
    then_zh: str = ""
    run: str | None = Field(None, description="a command line (rmq ... ; bash syntax), run to its end")
    background: str | None = Field(None, description="a command line started in the background as `name`")
    name: str | None = None
    kafka_produce: KafkaProduce | None = None
    kafka_consume: KafkaConsume | None = None
    wait_for: WaitFor | None = None
    kill: Kill | None = None
    sleep: float | None = Field(None, ge=0, le=300)
    expect: list[str] = Field(default_factory=list, description="regular expressions the output must contain")
    expect_absent: list[str] = Field(default_factory=list, description="regular expressions it must not contain")
    mark: str | None = Field(None, description="remember when this step started (wait_for ... after counts from it)")
    timeout: float = Field(60, gt=0, le=600)

    @model_validator(mode="after")
    def _one_action(self):
        given = [a for a in ACTIONS if getattr(self, a) is not None]
        if len(given) != 1:
            raise ValueError(f"a step does exactly one of {', '.join(ACTIONS)} (this one: {', '.join(given) or 'none'})")
        if self.background is not None and not self.name:
            raise ValueError("a background step needs a name (what later steps call it)")
        for rx in self.expect + self.expect_absent + ([self.wait_for.pattern] if self.wait_for else []):
            try:
                re.compile(rx)
            except re.error as exc:
                raise ValueError(f"expect pattern {rx!r} is not a regular expression: {exc}") from None
        return self


class Demo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str
    title_zh: str
    about: str = Field(description="what the demo shows, said before the first step")
    about_zh: str
    broker: BrokerSpec = Field(default_factory=BrokerSpec)
    steps: list[Step] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self):
        started, marks = set(SERVER_LOGS[self.broker.kind]), set()
        for i, s in enumerate(self.steps, 1):
            for ref in ([s.wait_for.process] if s.wait_for else []) + ([s.kill.process] if s.kill else []):
                if ref not in started:
                    raise ValueError(f"steps.{i}: process {ref!r} is not started by an earlier background step")
            if s.wait_for and s.wait_for.after and s.wait_for.after not in marks:
                raise ValueError(f"steps.{i}: mark {s.wait_for.after!r} is not set by an earlier step")
            if s.background:
                started.add(s.name)
            if s.mark:
                marks.add(s.mark)
        return self


def demo_files() -> list[Path]:
    return sorted(DEMOS.glob("*.yaml"))


def resolve(name_or_file: str) -> Path:
    p = Path(name_or_file)
    if p.exists():
        return p
    q = DEMOS / f"{name_or_file}.yaml"
    if q.exists():
        return q
    raise DemoError(f"{name_or_file}: no such demo or file (demos: {', '.join(f.stem for f in demo_files())})")


def load_demo(path: Path) -> Demo:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DemoError(f"{path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise DemoError(f"{path}: not valid YAML ({where}{getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise DemoError(f"{path}: expected a mapping of keys at the top level")
    try:
        return Demo.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            parts = list(e["loc"])
            if len(parts) > 1 and parts[0] == "steps" and isinstance(parts[1], int):
                parts[1] += 1                    # steps are numbered from 1, as the run shows them
            loc = ".".join(str(x) for x in parts) or "(top level)"
            msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
            lines.append(f"{path}: {loc}: {msg}")
        raise DemoError("\n".join(lines)) from None


# ---- running ---------------------------------------------------------------------------------------

class Runner:
    def __init__(self, demo: Demo, lang: str = "en", step_mode: bool = False, echo=click.echo) -> None:
        self.demo, self.lang, self.step_mode, self.echo = demo, lang, step_mode, echo
        self.workdir = tempfile.mkdtemp(prefix=f"rmq-demo-{demo.name}-")
        self.procs: dict[str, tuple[subprocess.Popen, str]] = {}      # name -> (process, output file)
        self.servers: list[subprocess.Popen] = []
        self.marks: dict[str, float] = {}
        self.env = dict(os.environ)
        self.env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + self.env.get("PATH", "")
        self.env["DEMO"] = self.workdir

    # -- servers
    def base_config(self) -> dict:
        spec = self.demo.broker
        cfg: dict = {}
        if spec.config_file:
            path = REPO / spec.config_file
            try:
                cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise DemoError(f"broker.config_file {spec.config_file}: cannot be read as YAML ({exc})") from None
        cfg.update(spec.config)
        return cfg

    def start(self) -> None:
        from kafka_bridge.peers import start_embedded
        spec = self.demo.broker
        if spec.kind == "embedded":
            cfg = os.path.join(self.workdir, "broker.yaml")
            with open(cfg, "w", encoding="utf-8") as fh:
                yaml.safe_dump(self.base_config(), fh)
            try:
                proc, addrs, _ = start_embedded(self.workdir, cfg, log_level="INFO")
            except RuntimeError as exc:
                raise DemoError(str(exc)) from None
            self.servers.append(proc)
            self.procs["broker"] = (proc, os.path.join(self.workdir, "broker.log"))
            self.env.update(NAMESRV_ADDR=addrs["namesrv"], BROKER_ADDR=addrs["remoting"], BOOTSTRAP=addrs["kafka"],
                            STORE=os.path.join(self.workdir, "store"))
            self.echo(f"embedded broker: NameServer {addrs['namesrv']}, broker {addrs['remoting']}, "
                      f"Kafka {addrs['kafka']}")
        else:
            self._start_cluster(spec)

    def _ready(self, proc: subprocess.Popen, ready: str, log: str, what: str) -> dict:
        deadline = time.monotonic() + 45
        while not (os.path.exists(ready) and os.path.getsize(ready)):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = Path(log).read_text(encoding="utf-8", errors="replace")[-1500:]
                raise DemoError(f"{what} did not start; its log ended with:\n{tail}")
            time.sleep(0.1)
        time.sleep(0.05)
        return json.loads(Path(ready).read_text(encoding="utf-8"))

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        with open(log, "wb") as out:
            p = subprocess.Popen([sys.executable, "-P", "-m", "rmq.cli", *args], stdout=out, stderr=out,
                                 cwd=self.workdir, env=dict(self.env, RMQ_LOG="INFO"), start_new_session=True)
        self.servers.append(p)
        return p

    def _start_cluster(self, spec: BrokerSpec) -> None:
        w = self.workdir
        ns = self._spawn(["namesrv", "--port", "0", "--kv-config", f"{w}/ns/kvConfig.json", "--ready-file",
                          f"{w}/ns.json"], f"{w}/ns.log")
        namesrv = self._ready(ns, f"{w}/ns.json", f"{w}/ns.log", "the NameServer")["namesrv"]
        addrs = {}
        for b in ("a", "b"):
            cfg = yaml.safe_load((REPO / "configs" / f"broker-{b}.yaml").read_text(encoding="utf-8"))
            cfg.update(self.base_config())
            path = f"{w}/broker-{b}.yaml"
            with open(path, "w", encoding="utf-8") as fh:
                yaml.safe_dump(cfg, fh)
            p = self._spawn(["broker", "-c", path, "-n", namesrv, "--listen-port", "0", "--kafka-port", "0",
                             "--data", f"{w}/broker-{b}/store", "--ready-file", f"{w}/broker-{b}.json"],
                            f"{w}/broker-{b}.log")
            addrs[b] = self._ready(p, f"{w}/broker-{b}.json", f"{w}/broker-{b}.log", f"broker-{b}")
            self.procs[f"broker-{b}"] = (p, f"{w}/broker-{b}.log")
        self.procs["namesrv"] = (ns, f"{w}/ns.log")
        self.env.update(NAMESRV_ADDR=namesrv, BROKER_ADDR=addrs["a"].get("remoting", ""),
                        BROKER_B_ADDR=addrs["b"].get("remoting", ""), BOOTSTRAP=addrs["a"].get("kafka", ""),
                        STORE=f"{w}/broker-a/store", STORE_B=f"{w}/broker-b/store")
        self.echo(f"cluster: NameServer {namesrv}, broker-a {self.env['BROKER_ADDR']}, "
                  f"broker-b {self.env['BROKER_B_ADDR']}, Kafka {self.env['BOOTSTRAP']}")

    def stop(self) -> None:
        for p, _ in self.procs.values():
            if p not in self.servers:
                _stop(p)
        for p in reversed(self.servers):
            _stop(p)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- steps
    def text(self, en: str, zh: str) -> str:
        return unfold_cjk(zh or en) if self.lang == "zh" else en

    def run(self) -> None:
        self.start()
        told = [s for s in self.demo.steps if self.text(s.say, s.say_zh)]   # the steps the audience is told about
        n_told = 0
        for i, step in enumerate(self.demo.steps, 1):
            said = self.text(step.say, step.say_zh)
            if said:
                n_told += 1
                self.echo(f"\n[{n_told}/{len(told)}] {said.strip()}")
            if self.step_mode:
                click.pause("(press any key for the next step)")
            if step.mark:
                self.marks[step.mark] = time.monotonic()
            out = self.do(step)
            self.check(i, step, out)
            then = self.text(step.then, step.then_zh)
            if then:
                self.echo(f"  -> {then.strip()}")

    def do(self, step: Step) -> str:
        if step.run is not None:
            self.echo(f"$ {step.run.strip()}")
            try:
                res = subprocess.run(["bash", "-c", step.run], capture_output=True, text=True, env=self.env,
                                     cwd=self.workdir, timeout=step.timeout, start_new_session=True)
            except subprocess.TimeoutExpired:
                raise DemoError(f"`{step.run}` did not finish within {step.timeout:.0f} s") from None
            out = res.stdout + res.stderr
            self._show(out)
            if res.returncode != 0 and not step.expect:
                raise DemoError(f"`{step.run}` exited with code {res.returncode}")
            return out
        if step.background is not None:
            self.echo(f"$ {step.background.strip()} &    # as {step.name}")
            log = os.path.join(self.workdir, f"{step.name}.out")
            with open(log, "wb") as out:
                p = subprocess.Popen(["bash", "-c", step.background], stdout=out, stderr=subprocess.STDOUT,
                                     env=self.env, cwd=self.workdir, start_new_session=True)
            self.procs[step.name] = (p, log)
            return ""
        if step.kafka_produce is not None:
            return self._kafka_produce(step.kafka_produce)
        if step.kafka_consume is not None:
            return self._kafka_consume(step.kafka_consume)
        if step.wait_for is not None:
            return self._wait_for(step.wait_for)
        if step.kill is not None:
            p, _ = self.procs[step.kill.process]
            self.echo(f"$ kill -{step.kill.signal} <{step.kill.process}>")
            sig = getattr(signal, f"SIG{step.kill.signal}")
            try:
                if p in self.servers:
                    p.send_signal(sig)          # a server: the process itself (rmq up shares our group)
                else:
                    os.killpg(p.pid, sig)       # a background step: its whole group (bash and rmq)
            except ProcessLookupError:
                pass
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                _stop(p)
            return ""
        self.echo(f"(waiting {step.sleep:g} s)")
        time.sleep(step.sleep or 0)
        return ""

    def _show(self, out: str, limit: int = 40) -> None:
        lines = out.rstrip().splitlines()
        for line in lines[:limit]:
            self.echo(f"  {line}")
        if len(lines) > limit:
            self.echo(f"  ... ({len(lines) - limit} more lines)")

    def _kafka_produce(self, kp: KafkaProduce) -> str:
        from confluent_kafka import Producer
        self.echo(f"Kafka producer -> {kp.topic}: {len(kp.records)} record(s)")
        p = Producer({"bootstrap.servers": self.env["BOOTSTRAP"], "acks": "all"})
        lines = []

        def report(err, msg):
            lines.append(f"{'error ' + str(err) if err else 'acked'} {msg.topic()}-{msg.partition()}@{msg.offset()} "
                         f"key={(msg.key() or b'').decode()} value={msg.value().decode()}")
        for r in kp.records:
            kw = {"partition": r.partition} if r.partition is not None else {}
            p.produce(kp.topic, value=r.value.encode(), key=r.key.encode() if r.key else None,
                      headers=list(r.headers.items()) or None, on_delivery=report, **kw)
        if p.flush(30):
            raise DemoError(f"Kafka records to {kp.topic} were not acknowledged within 30 s")
        out = "\n".join(lines)
        self._show(out)
        return out

    def _kafka_consume(self, kc: KafkaConsume) -> str:
        from confluent_kafka import Consumer
        self.echo(f"Kafka consumer (group {kc.group}) <- {kc.topic}")
        import logging
        client_log: list[str] = []

        class _Keep(logging.Handler):       # librdkafka's own log lines: shown only if the step fails
            def emit(self, record):
                client_log.append(record.getMessage())
        logger = logging.getLogger(f"rmq.demo.kafka.{kc.group}")
        logger.propagate = False
        logger.handlers[:] = [_Keep()]
        c = Consumer({"bootstrap.servers": self.env["BOOTSTRAP"], "group.id": kc.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": True}, logger=logger)
        c.subscribe([kc.topic])
        lines: list[str] = []
        deadline = time.monotonic() + kc.timeout
        try:
            while len(lines) < kc.count and time.monotonic() < deadline:
                for m in c.consume(10, 0.2):
                    if m.error() is None:
                        hdrs = " ".join(f"{k}={(v or b'').decode()}" for k, v in (m.headers() or []))
                        lines.append(f"{m.topic()}-{m.partition()}@{m.offset()} key={(m.key() or b'').decode()} "
                                     f"value={(m.value() or b'').decode()}" + (f" headers: {hdrs}" if hdrs else ""))
        finally:
            c.close()
        out = "\n".join(lines)
        self._show(out)
        if len(lines) < kc.count:
            raise DemoError(f"the Kafka consumer got {len(lines)} of {kc.count} records within {kc.timeout:g} s"
                            + ("; librdkafka said:\n" + "\n".join(client_log[-10:]) if client_log else ""))
        return out

    def _wait_for(self, wf: WaitFor) -> str:
        p, log = self.procs[wf.process]
        rx = re.compile(wf.pattern)
        start = time.monotonic()
        self.echo(f"(waiting for {wf.process} to print {wf.pattern!r})")
        text, hits = "", []
        while time.monotonic() - start < wf.timeout:
            text = Path(log).read_text(encoding="utf-8", errors="replace")
            hits = [ln for ln in text.splitlines() if rx.search(ln)]
            if len(hits) >= wf.count:
                break
            if p.poll() is not None:
                text = Path(log).read_text(encoding="utf-8", errors="replace")
                hits = [ln for ln in text.splitlines() if rx.search(ln)]
                break
            time.sleep(0.1)
        if len(hits) < wf.count:
            raise DemoError(f"{wf.process} did not print {wf.pattern!r} ({len(hits)} of {wf.count}) within "
                            f"{wf.timeout:g} s; it printed:\n{text[-1500:]}")
        at = time.monotonic()
        self._show("\n".join(hits))
        if wf.after:
            took = at - self.marks[wf.after]
            lo, hi = wf.min_seconds, wf.max_seconds
            self.echo(f"  ({took:.1f} s after '{wf.after}')")
            if lo is not None and took < lo - 0.05:
                raise DemoError(f"{wf.process} printed {wf.pattern!r} {took:.1f} s after '{wf.after}': sooner than "
                                f"the {lo:g} s the demo says")
            if hi is not None and took > hi:
                raise DemoError(f"{wf.process} printed {wf.pattern!r} {took:.1f} s after '{wf.after}': later than "
                                f"the {hi:g} s the demo says")
        return "\n".join(hits)

    def check(self, i: int, step: Step, out: str) -> None:
        for rx in step.expect:
            if not re.search(rx, out, re.MULTILINE):
                raise DemoError(f"step {i}: the output does not show {rx!r}, which the demo says it will")
        for rx in step.expect_absent:
            if re.search(rx, out, re.MULTILINE):
                raise DemoError(f"step {i}: the output shows {rx!r}, which the demo says it will not")


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(5)


def run_demo(demo: Demo, lang: str = "en", step_mode: bool = False, echo=click.echo) -> None:
    r = Runner(demo, lang, step_mode, echo)
    try:
        r.run()
    finally:
        r.stop()


# ---- commands --------------------------------------------------------------------------------------

@click.group("demo")
def demo() -> None:
    """Classroom demos: YAML scenarios that start a broker, run steps and narrate them."""


@demo.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def list_cmd(as_json, lang) -> None:
    """The demos under configs/demos/."""
    rows = []
    for f in demo_files():
        try:
            d = load_demo(f)
            rows.append({"name": d.name, "title": d.title, "title_zh": d.title_zh, "broker": d.broker.kind,
                         "steps": len(d.steps), "file": str(f)})
        except DemoError as exc:
            rows.append({"name": f.stem, "error": str(exc)})
    echo_listing(rows, as_json, lang)


@demo.command("run")
@click.argument("name_or_file")
@click.option("--step", "step_mode", is_flag=True, help="Pause before every step (for a class).")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
def run_cmd(name_or_file, step_mode, lang) -> None:
    """Run a demo by name or from a YAML file."""
    try:
        d = load_demo(resolve(name_or_file))
    except DemoError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    click.echo(d.title_zh if lang == "zh" else d.title)
    click.echo((unfold_cjk(d.about_zh) if lang == "zh" else d.about).strip())
    try:
        run_demo(d, lang, step_mode)
    except DemoError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted: everything the demo started is stopped", err=True)
        sys.exit(130)
    click.echo("\n" + ("演示完成：每一步的说明都与实际发生的一致。" if lang == "zh" else
                       "Demo complete: every step's narration matched what happened."))
