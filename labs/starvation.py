"""Starved repeats: a lab run whose broker or client processes spent much of their runnable time
waiting for a CPU (the run-queue wait of /proc/PID/task/TID/schedstat) measured the machine's other
work as much as the system. A result carries `cpuSeconds` and `cpuWaitSeconds` per process (the OMB
driver's for its measured phase; labs.runner's around the other drivers) and `machineBusyPct`;
`starved()` reads them and says whether the repeat was starved and by how much, and `timed()`
whether a figure depends on timing at all (a rate, a latency, a duration), so that a starved repeat
makes a verdict on it unreliable while a count (topics created, order violations, bytes on the wire)
stands. Pure functions: the verdict, the report and the tests call them on stored results."""
from __future__ import annotations

from .units import unit

#: a process is starved when it waited for a CPU at least this share of the time it was runnable
#: (waiting + running): as long as it ran, or longer
STARVED_WAIT_SHARE = 0.5
#: ... and its waiting adds up to at least this share of the measured phase (so that a process that
#: barely ran, a few milliseconds of waiting among as many of running, is not called starved)
MIN_WAIT_OF_PHASE = 0.10
#: ... and the machine's CPUs were at least this busy over the phase (when the result says): with a
#: CPU idle a good part of the time, the waits are the wake-up latency of a process's own many
#: threads (librdkafka's, a consume pool's), not other work holding the cores; on a quiet 2-core
#: machine OMB's kafka-bridge consumers waited half their runnable time with the machine 59-72% busy
MIN_MACHINE_BUSY_PCT = 90.0
#: units (labs.units.unit) of the figures that depend on timing
TIMED_UNITS = frozenset({"msgs/s", "tx/s", "MB/s", "writes/s", "ms", "s", "µs/msg"})


def wait_shares(r: dict) -> dict[str, float]:
    """{process: share of its runnable time spent waiting for a CPU} for the processes whose CPU and
    wait seconds the result gives."""
    cpu, wait = r.get("cpuSeconds") or {}, r.get("cpuWaitSeconds") or {}
    out = {}
    for who, w in wait.items():
        c = cpu.get(who)
        if isinstance(w, (int, float)) and isinstance(c, (int, float)) and w >= 0 and c >= 0 and w + c > 0:
            out[who] = w / (w + c)
    return out


def starved(r: dict) -> dict | None:
    """None, or {"processes": {process: wait share}, "machineBusyPct": ...} for a result taken while
    the machine was starved: some measured process waited for a CPU at least as long as it ran
    (STARVED_WAIT_SHARE), for at least MIN_WAIT_OF_PHASE of the measured phase, while the machine
    was at least MIN_MACHINE_BUSY_PCT busy."""
    if r.get("status", "ok") != "ok":
        return None
    busy = r.get("machineBusyPct")
    if isinstance(busy, (int, float)) and busy < MIN_MACHINE_BUSY_PCT:
        return None
    phase = r.get("measuredSeconds") or r.get("seconds") or 0.0
    wait = r.get("cpuWaitSeconds") or {}
    who = {p: round(s, 2) for p, s in wait_shares(r).items()
           if s >= STARVED_WAIT_SHARE and wait[p] >= MIN_WAIT_OF_PHASE * phase}
    if not who:
        return None
    return {"processes": who, "machineBusyPct": r.get("machineBusyPct")}


def timed(metric: str) -> bool:
    """Does the figure depend on how fast things ran (a rate, a latency, a duration)?"""
    return unit(metric) in TIMED_UNITS


def describe(s: dict, lang: str = "en") -> str:
    """'broker 64%, runner 71% of their runnable time waiting for a CPU, machine 98% busy' (or in Chinese)."""
    procs = ", ".join(f"{p} {share:.0%}" for p, share in s["processes"].items())
    busy = s.get("machineBusyPct")
    if lang == "zh":
        return f"{procs} 的可运行时间在等待 CPU" + (f"，整机 CPU {busy:.0f}% 繁忙" if busy is not None else "")
    return f"{procs} of their runnable time waiting for a CPU" + \
        (f", machine {busy:.0f}% busy" if busy is not None else "")
