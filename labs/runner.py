"""Running a lab: every sweep point on every system (a fresh process and data directory each), the
workload through OMB's driver, the mechanism figures around the measured phase, then the verdict
and the reports. A system that fails is kept in the results as failed, with its log tail."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import yaml
from pydantic import ValidationError

from .schema import Lab, SystemSpec, Workload
from .starvation import starved
from .systems import RunningSystem, SystemUnavailable, meminfo, mechanism, snapshot, speaks_kafka, start_system

LIBRARY = Path(__file__).parent / "library"
QUICK_MEASURE_SECONDS = 5.0       # --quick: OMB's measured phase per point (its warm-up: 2 s)
QUICK_WARMUP_SECONDS = 2.0
REPEATS_FULL = 5                  # measurements per (point, system) unless the lab or --repeats says otherwise
REPEATS_QUICK = 3


class LabError(ValueError):
    """A lab or workload file that cannot be used: the message names the file, the key and the expectation."""


def _describe(exc: ValidationError, path: str) -> str:
    lines = []
    for e in exc.errors():
        key = ".".join(str(x) for x in e["loc"]) or "(top level)"
        what = e["msg"]
        if e["type"] == "extra_forbidden":
            what = "unknown key"
        elif e["type"] == "missing":
            what = "required key is missing"
        lines.append(f"{path}: {key}: {what}" + (f" (got {e['input']!r})" if e["type"] not in ("missing",) and
                                                  not isinstance(e.get("input"), dict) else ""))
    return "\n".join(lines)


def _read_yaml(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise LabError(f"{path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise LabError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise LabError(f"{path}: expected a mapping of keys at the top level")
    return data


def lab_files() -> list[Path]:
    return sorted(LIBRARY.glob("*.yaml"))


def resolve(name_or_file: str) -> str:
    if os.path.exists(name_or_file):
        return name_or_file
    p = LIBRARY / f"{name_or_file}.yaml"
    if p.exists():
        return str(p)
    names = ", ".join(f.stem for f in lab_files())
    raise LabError(f"{name_or_file}: no such lab or file (labs: {names})")


def load_lab(path: str, systems: list[str] | None = None) -> Lab:
    """A lab file, or a bare OMB workload file (then it becomes a lab comparing `systems`, by default
    kafka-bridge and kafka-log, on publish rate)."""
    data = _read_yaml(path)
    try:
        if "workload" not in data and "question" not in data:      # an OMB workload file
            w = Workload.model_validate(data)
            names = systems or ["kafka-bridge", "kafka-log"]
            return Lab(name=Path(path).stem, title=w.name, question=f"How does {w.name} run on each system?",
                       source={"seed": "-", "section": "OpenMessaging Benchmark workload"},
                       claim="(a workload, not a claim)", claim_zh="（一个负载，不是一个论断）", systems=names,
                       workload=w, metrics=["publishRateAvg", "consumeRateAvg", "aggregatedPublishLatency99pct",
                                            "aggregatedEndToEndLatency99pct"], verdict=None)
        lab = Lab.model_validate(data)
    except ValidationError as exc:
        raise LabError(_describe(exc, path)) from None
    if systems:
        known = {s.name: s for s in lab.systems}
        unknown = [s for s in systems if s not in known and s not in ("rocketmq", "kafka-bridge", "kafka-log", "tansu",
                                                                      "docker-kafka", "docker-rocketmq", "rocketmq-cpp")]
        if unknown:
            raise LabError(f"--systems: unknown system(s) {', '.join(unknown)}")
        lab.systems = [known.get(s) or SystemSpec(system=s) for s in systems]
    return lab


def quick_seconds() -> tuple[float, float]:
    """--quick's measured and warm-up seconds per point: 5 and 2, or RMQ_LAB_QUICK_SECONDS (the test
    suite's smoke runs set it to 1: they check that every lab runs and reports, not its numbers)."""
    raw = os.environ.get("RMQ_LAB_QUICK_SECONDS")
    if raw is None:
        return QUICK_MEASURE_SECONDS, QUICK_WARMUP_SECONDS
    try:
        measure = float(raw)
    except ValueError:
        raise LabError(f"RMQ_LAB_QUICK_SECONDS={raw!r}: expected a number of seconds") from None
    if measure <= 0:
        raise LabError(f"RMQ_LAB_QUICK_SECONDS={raw!r}: expected a positive number of seconds")
    return measure, min(QUICK_WARMUP_SECONDS, measure / 2)


def apply_quick(lab: Lab) -> Lab:
    lab = copy.deepcopy(lab)
    q = dict(lab.quick)
    sweep = q.pop("sweep", None)
    if "shareBroker" in q:
        lab.shareBroker = q.pop("shareBroker")
        if not isinstance(lab.shareBroker, bool):
            raise LabError(f"{lab.name}: quick.shareBroker: expected true or false (got {lab.shareBroker!r})")
    for k in [k for k in q if k in lab.params]:
        lab.params[k] = q.pop(k)
    if sweep:
        lab.sweep = {k: list(v) for k, v in sweep.items()}
    data = lab.workload.model_dump()
    measure, warmup = quick_seconds()
    data.update({"warmupDurationMinutes": warmup / 60, "testDurationMinutes": measure / 60})
    data.update(q)
    try:
        lab.workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise LabError(_describe(exc, f"{lab.name} (quick)")) from None
    return lab


def check_disk(lab: Lab, out_dir: str) -> None:
    """A workload whose backlog or volume cannot fit the disk is refused before anything starts."""
    w = lab.workload
    points = max((len(v) for v in lab.sweep.values()), default=1)
    need = int(w.consumerBacklogSizeGB * (1 << 30)) * len(lab.systems) * points
    free = shutil.disk_usage(out_dir).free
    if need > free * 0.8:
        raise LabError(f"{lab.name}: consumerBacklogSizeGB={w.consumerBacklogSizeGB} over {len(lab.systems)} "
                       f"system(s) and {points} sweep point(s) needs {need / 2**30:.1f} GiB; "
                       f"{free / 2**30:.1f} GiB are free")


class SchedMeter:
    """CPU seconds and run-queue wait (seconds runnable but not on a CPU) of some processes over a
    phase, and how busy the machine was: what labs.starvation reads for the drivers other than OMB's
    (which measures its own measured phase). The wait is per thread (/proc/PID/task/TID/schedstat);
    sample() every 200 ms keeps the last reading of threads that end during the phase (a client's
    threads), so their waiting still counts."""

    def __init__(self, pids: dict[str, int]) -> None:
        from .omb import cpu_seconds, machine_cpu
        self.pids = pids
        self.first = {who: self._waits(pid) for who, pid in pids.items()}
        self.last = {who: dict(w) for who, w in self.first.items()}
        self.cpu0 = {who: cpu_seconds(pid) for who, pid in pids.items()}
        self.machine0 = machine_cpu()

    @staticmethod
    def _waits(pid: int) -> dict[str, int]:
        """{thread id: run-queue wait in ns} of a process's live threads."""
        from .omb import thread_waits_ns
        return thread_waits_ns(pid) or {}

    def sample(self) -> None:
        for who, pid in self.pids.items():
            self.last[who].update(self._waits(pid))

    def figures(self) -> dict:
        """{"cpuSeconds": {process: s}, "cpuWaitSeconds": {process: s}, "machineBusyPct": %} since start."""
        from .omb import cpu_seconds, machine_busy_pct, machine_cpu
        self.sample()
        cpu, wait = {}, {}
        for who, pid in self.pids.items():
            c = cpu_seconds(pid)
            if c is not None and self.cpu0[who] is not None:
                cpu[who] = round(c - self.cpu0[who], 3)
            first = self.first[who]
            wait[who] = round(sum(max(0, w - first.get(tid, 0)) for tid, w in self.last[who].items()) / 1e9, 3)
        return {"cpuSeconds": cpu, "cpuWaitSeconds": wait,
                "machineBusyPct": machine_busy_pct(self.machine0, machine_cpu())}


class _DirtySampler(threading.Thread):
    """/proc/meminfo's Dirty every 200 ms (the whole machine's), and with lab conditions the broker's
    own memory cgroup's dirty and writeback bytes; with a SchedMeter, its per-thread waits too."""
    def __init__(self, cond=None, meter: SchedMeter | None = None) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.cg_dirty_peak = 0
        self.cg_writeback_peak = 0
        self._cond = cond
        self._meter = meter
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):
            self.peak = max(self.peak, meminfo().get("Dirty", 0))
            if self._meter is not None:
                self._meter.sample()
            cg = self._cond.dirty_now() if self._cond is not None else None
            if cg:
                self.cg_dirty_peak = max(self.cg_dirty_peak, cg[0])
                self.cg_writeback_peak = max(self.cg_writeback_peak, cg[1])

    def stop(self) -> int:
        self._halt.set()
        self.join(2)
        return self.peak


class SharedSystems:
    """A lab with shareBroker: one broker process, started on first use in a directory of its own,
    serves every sweep point and repeat of every system that would start the same process (the
    same kind of broker with the same config: rocketmq and kafka-bridge without config keys are
    one `rmq up`), one point after the other, instead of a fresh process per point. The drivers
    name their topics and groups afresh each time. One that died is started again; close() stops
    them all."""

    def __init__(self) -> None:
        self.running: dict[tuple, RunningSystem] = {}

    @staticmethod
    def key(spec: SystemSpec) -> tuple:
        # rocketmq-cpp apart: starting it checks that the C++ client loads here
        kind = "rmq" if spec.system in ("rocketmq", "kafka-bridge") else spec.system
        return kind, json.dumps(spec.config, sort_keys=True)

    def get(self, spec: SystemSpec) -> RunningSystem:
        k = self.key(spec)
        run = self.running.get(k)
        if run is not None and not run.alive():
            self._stop(k)
            run = None
        if run is None:
            work = tempfile.mkdtemp(prefix=f"lab-shared-{spec.system}-")
            try:
                run = start_system(spec, work)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            self.running[k] = run
        return dataclasses.replace(run, spec=spec)      # the same process, seen as this system

    def _stop(self, k: tuple) -> None:
        run = self.running.pop(k)
        try:
            run.stop()
        finally:
            shutil.rmtree(run.workdir, ignore_errors=True)

    def close(self) -> None:
        for k in list(self.running):
            self._stop(k)


def run_point(spec: SystemSpec, w: Workload, workdir: str, max_messages: int | None, base_dir: str | None,
              say, driver: str = "omb", params: dict | None = None, cond=None,
              shared: SharedSystems | None = None) -> dict:
    """One measurement of one system at one point: a fresh broker process in `workdir`, or the
    system's broker from `shared` (left running for the next point)."""
    from .drivers import DRIVERS
    from .omb import KafkaClients, RocketMQClients, WorkloadError, run_omb
    if driver == "omb" and not (speaks_kafka(spec) or spec.system in ("rocketmq", "rocketmq-cpp")):
        return {"status": "skipped", "reason": f"{spec.system}: the OMB driver has no client for it"}
    if driver != "omb" and spec.system not in DRIVERS[driver][1]:
        return {"status": "skipped", "reason": f"{spec.system}: the {driver} driver does not run against it"}
    try:
        run: RunningSystem = shared.get(spec) if shared is not None else start_system(spec, workdir)
    except SystemUnavailable as exc:
        return {"status": "skipped", "reason": str(exc)}
    except RuntimeError as exc:
        return {"status": "failed", "reason": str(exc).splitlines()[0], "log_tail": str(exc)}
    try:
        if cond is not None:
            try:
                cond.attach(run.proc.pid)
            except OSError as exc:
                return {"status": "failed", "reason": f"cannot move the broker into the lab's cgroups ({exc})",
                        "log_tail": run.log_tail()}
        before = snapshot(run)
        c_before = cond.sample() if cond is not None else None
        meter = SchedMeter({"broker": run.proc.pid, "runner": os.getpid()}) if driver != "omb" else None
        sampler = _DirtySampler(cond, meter)
        sampler.start()
        t0 = time.monotonic()
        try:
            if driver == "omb":
                clients = (KafkaClients(run.bootstrap, dict(spec.producer)) if speaks_kafka(spec) else
                           RocketMQClients(run.namesrv, run.extra["remoting"], cpp=spec.system == "rocketmq-cpp",
                                           producer_conf=dict(spec.producer)))
                procs = cond.cond.producerProcesses if cond is not None else 0
                res = run_omb(w, clients, base_dir=base_dir, max_messages=max_messages, progress=say,
                              producer_processes=procs, broker_pid=run.proc.pid,
                              consumer_processes=cond is not None and cond.cond.consumerProcesses)
            else:
                res = DRIVERS[driver][0](run, w, params or {}, say)
        except (WorkloadError, Exception) as exc:  # noqa: B014 - any driver failure is this system's failure
            sampler.stop()
            return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "log_tail": run.log_tail()}
        peak = sampler.stop()
        if meter is not None:                # the other drivers: the whole driver call is the measured phase
            for k, v in meter.figures().items():
                res.setdefault(k, v)
        c_after = cond.sample() if cond is not None else None
        after = snapshot(run)
        if not run.alive():
            return {"status": "failed", "reason": "the broker process died", "log_tail": run.log_tail()}
        res["mechanism"] = mechanism(before, after, peak, res.get("messagesAcked", 0) * w.messageSize,
                                     res.get("messagesAcked", 0))
        for who, us in res.get("cpuMicrosPerMessage", {}).items():     # the measured phase's CPU per message
            res["mechanism"][f"{who}_cpu_us_per_msg"] = us
        if cond is not None:
            res["mechanism"].update(cond.figures(c_before, c_after))
            if cond.memcg:
                res["mechanism"].update({"cgroup_dirty_bytes_peak": sampler.cg_dirty_peak,
                                         "cgroup_writeback_bytes_peak": sampler.cg_writeback_peak})
        res["seconds"] = round(time.monotonic() - t0, 2)
        res["status"] = "ok"
        res["starved"] = starved(res)
        if shared is not None:
            res["sharedBroker"] = True
        return res
    finally:
        if shared is None:
            run.stop()


def repeats_for(lab: Lab, quick: bool, repeats: int | None) -> int:
    """--repeats, else the lab's own `repeats`, else 5 (3 with --quick)."""
    if repeats is not None:
        if repeats < 1:
            raise LabError(f"--repeats: expected a count of 1 or more (got {repeats})")
        return repeats
    return lab.repeats or (REPEATS_QUICK if quick else REPEATS_FULL)


def run_lab(lab: Lab, out_dir: str, *, quick: bool = False, base_dir: str | None = None, console=None,
            repeats: int | None = None, lang: str = "en") -> dict:
    """Run every sweep point `repeats` times on every system, the systems interleaved (repeat 1 runs
    them in the lab's order, repeat 2 in reverse, ...) so that drift on the machine hits them alike;
    write the results (every repeat) and the reports into out_dir; return the results."""
    from .report import write_reports
    from .verdict import compute_verdict
    n = repeats_for(lab, quick, repeats)
    if quick:
        lab = apply_quick(lab)
    os.makedirs(out_dir, exist_ok=True)
    check_disk(lab, out_dir)
    key, values = next(iter(lab.sweep.items()), (None, [None]))
    from .conditions import LabConditions
    c = lab.conditions
    cond = None
    if lab.driver == "omb" and (c.producerProcesses or c.consumerProcesses or c.brokerMemoryMB or c.diskWriteIops
                                or c.diskWriteMBps):
        cond = LabConditions(c)
    try:
        if cond is not None:
            cond.setup()
            for item in cond.report:
                if console is not None:
                    console.log(f"condition {item['condition']}: {item['status']}: "
                                f"{item.get('detail') or item.get('reason')}")
        results = _run_points(lab, n, key, values, console, base_dir, cond)
    finally:
        if cond is not None:
            cond.teardown()
    doc = {"lab": lab.model_dump(mode="json"), "quick": quick, "repeats": n, "results": results,
           "machine": machine(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
           "conditions": cond.report if cond is not None else []}
    doc["verdict"] = compute_verdict(lab, results)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    write_reports(doc, out_dir, lang=lang)
    return doc


def _run_points(lab: Lab, n: int, key, values, console, base_dir, cond) -> list[dict]:
    results = []
    skipped: set[str] = set()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    total = len(values) * len(lab.systems) * n
    shared = SharedSystems() if lab.shareBroker and cond is None else None
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=False) as prog:
            task = prog.add_task(lab.name, total=total)
            for v in values:
                params = dict(lab.params)
                if key in params:
                    params[key] = v
                w = lab.workload if key is None or key in params else lab.workload.model_copy(update={key: v})
                for rep in range(n):
                    order = lab.systems if rep % 2 == 0 else list(reversed(lab.systems))
                    for spec in order:
                        if spec.name in skipped:              # a system that cannot run here is not tried again
                            prog.advance(task)
                            continue
                        prog.update(task, description=f"{lab.name}: {spec.name}" + (f" {key}={v}" if key else "") +
                                    f" (repeat {rep + 1}/{n})")
                        work = tempfile.mkdtemp(prefix=f"lab-{lab.name}-",
                                                dir=cond.data_root if cond is not None else None)
                        try:
                            r = run_point(spec, w, work, None, base_dir,
                                          lambda msg: prog.console.log(f"{spec.name}: {msg}") if console is not None
                                          else None, lab.driver, params, cond,
                                          **({"shared": shared} if shared is not None else {}))
                        finally:
                            shutil.rmtree(work, ignore_errors=True)
                        r.update({"system": spec.name, "sweep_key": key, "sweep_value": v, "repeat": rep + 1})
                        results.append(r)
                        prog.advance(task)
                        if r["status"] == "skipped":
                            skipped.add(spec.name)
    finally:
        if shared is not None:
            shared.close()
    return results


def machine() -> dict:
    import platform
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            mem = int(fh.readline().split()[1]) * 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_bytes": mem, "python": platform.python_version(),
            "kernel": platform.release()}
