"""The stop drill (issue 22): a SYNC_MASTER and its SLAVE as `rmq broker -c` processes (with a
NameServer) under traffic; each round SIGSTOPs the slave, SIGCONTs it, sends it SIGTERM and times
its exit, then starts it again on the same store and waits until it replicates. A last round sends
the master SIGTERM while its slave is stopped and a raw HA client that never reads holds a full
socket buffer (peers that do not read). Every process must exit within the shutdown bound
(rmq/server/shutdown.py); `forced` says whether the watchdog had to end it."""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import yaml

from .processes import MasterSlaveBrokers, wait_until

TOPIC = "DrillStop"
FORCED_LINE = "clean shutdown not finished"


@dataclass
class StopRound:
    round: int
    target: str              # "slave" or "master"
    exit_code: int | None    # None: still up after timeout_s (then SIGKILLed)
    stop_s: float            # SIGTERM to exit
    forced: bool             # the shutdown watchdog ended it (its log says so)
    recovery: str = ""       # the restart's recovery: "normal" (clean shutdown) or "abnormal"
    unsent: int | None = None  # master round: bytes queued by the kernel towards the raw HA client at SIGTERM


@dataclass
class StopReport:
    rounds: list[StopRound] = field(default_factory=list)
    sent: int = 0

    @property
    def ok(self) -> bool:
        return all(r.exit_code is not None for r in self.rounds)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "sent": self.sent, "rounds": [asdict(r) for r in self.rounds]}


def _log_tail(path: str, start: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read().decode("utf-8", "replace")


def _log_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _sigterm_and_time(proc: subprocess.Popen, timeout_s: float) -> tuple[int | None, float]:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = None
        proc.kill()
        proc.wait(30)
    return code, time.monotonic() - t0


class _Traffic:
    """Producers sending to TOPIC through the NameServer until stop() (a SYNC_MASTER's sends wait for
    the slave, so while it is stopped they time out: that is expected, they go on)."""

    def __init__(self, namesrv: str, threads: int = 2, size: int = 8000) -> None:
        from rmq.client import Producer
        self.stop_event = threading.Event()
        self.sent = 0
        self.producer = Producer("drill_stop_pg", namesrv, retry_times_when_send_failed=0, send_msg_timeout=3.0)
        self.producer.start()
        self.body = b"s" * size
        self.threads = [threading.Thread(target=self._run, name=f"drill-stop-{i}", daemon=True) for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        from rmq.client import Message
        while not self.stop_event.is_set():
            try:
                self.producer.send(Message(TOPIC, self.body))
                self.sent += 1
            except Exception:  # noqa: BLE001 - the slave is stopped or restarting: keep sending
                time.sleep(0.05)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(10)
        try:
            self.producer.shutdown()
        except Exception:  # noqa: BLE001
            pass


def _non_reading_slave(ha_addr: str, broker_name: str) -> socket.socket:
    """A raw HA client that sends the slave hello for offset 0 and then never reads: the master
    streams to it until the socket buffers are full and its drain() waits."""
    from rmq.server.ha import encode_slave_hello
    host, _, port = ha_addr.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(encode_slave_hello(broker_name, 0))
    return s


def _send_queue(local_port: int, remote_port: int) -> int | None:
    """Bytes the kernel holds unsent (tx_queue) on the loopback socket local_port -> remote_port
    (Linux /proc/net/tcp; None elsewhere or when not found)."""
    try:
        with open("/proc/net/tcp", encoding="ascii") as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        cols = row.split()
        if len(cols) > 4 and int(cols[1].split(":")[1], 16) == local_port and \
                int(cols[2].split(":")[1], 16) == remote_port:
            return int(cols[4].split(":")[0], 16)
    return None


def run_stop_drill(rounds: int, workdir: str, *, pause_s: float = 0.5, timeout_s: float = 15.0,
                   seed: int | None = None, master_round: bool = True, kafka: bool = False,
                   on_round: Callable[[StopRound], None] | None = None) -> StopReport:
    """`rounds` SIGSTOP / SIGCONT / SIGTERM / restart rounds of the slave, then (master_round) one
    SIGTERM of the master while its slave is stopped. With `kafka` both brokers also run their Kafka
    listener (the slave's is a follower). Processes are stopped at the end either way."""
    rng = random.Random(seed)
    d = MasterSlaveBrokers(None, workdir, kafka=kafka)
    if kafka:
        with open(d.slave_config_path, encoding="utf-8") as fh:
            slave_cfg = yaml.safe_load(fh)
        slave_cfg.update(kafkaEnable=True, kafkaPort=0)
        with open(d.slave_config_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(slave_cfg, fh)
    rep = StopReport()
    traffic = None
    try:
        d.start_all()
        d.wait_replicating()
        traffic = _Traffic(d.listeners["namesrv"])
        slave = d.slave
        for i in range(rounds):
            time.sleep(rng.uniform(0.2, 1.0))
            pid = slave.proc.pid
            os.kill(pid, signal.SIGSTOP)
            time.sleep(pause_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(rng.uniform(0.0, 0.3))
            mark = _log_size(slave.log_path)
            code, took = _sigterm_and_time(slave.proc, timeout_s)
            text = _log_tail(slave.log_path, mark)
            r = StopRound(i + 1, "slave", code, took, FORCED_LINE in text)
            mark = _log_size(slave.log_path)
            slave.start()
            wait_until(lambda: str(d._runtime_info(d.slave_addr).get("haMasterConnected")).lower() == "true",
                       30.0, f"the restarted slave connecting to its master (see {slave.log_path})")
            text = _log_tail(slave.log_path, mark)
            r.recovery = ("normal" if "clean shutdown, normal recovery" in text else
                          "abnormal" if "abort file found" in text else "?")
            rep.rounds.append(r)
            if on_round:
                on_round(r)
        if master_round:
            name = d.master.info.get("brokerName", "broker-a")
            os.kill(slave.proc.pid, signal.SIGSTOP)
            raw = None
            try:
                raw = _non_reading_slave(d.master.info["ha"], name)
                time.sleep(1.0)  # traffic goes on: both peers' buffers fill
                unsent = _send_queue(int(d.master.info["ha"].rpartition(":")[2]), raw.getsockname()[1])
                mark = _log_size(d.master.log_path)
                code, took = _sigterm_and_time(d.master.proc, timeout_s)
                text = _log_tail(d.master.log_path, mark)
                r = StopRound(rounds + 1, "master", code, took, FORCED_LINE in text, unsent=unsent)
            finally:
                os.kill(slave.proc.pid, signal.SIGCONT)
                if raw is not None:
                    raw.close()
            rep.rounds.append(r)
            if on_round:
                on_round(r)
    finally:
        if traffic is not None:
            traffic.stop()
            rep.sent = traffic.sent
        d.shutdown()
    return rep


__all__ = ["run_stop_drill", "StopRound", "StopReport"]
