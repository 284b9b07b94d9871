"""Kill drill: SIGKILL a SYNC_FLUSH broker while producers send, restart it, check every
acknowledged message is in the consumequeue exactly once and committed offsets survive (SPEC §2,
DESIGN.md "No acknowledged message is lost under SYNC_FLUSH, even on kill -9").

The broker is `rmq up` (NameServer, broker and, with the kafka_bridge plugin, the Kafka listener
in one process) on fixed loopback ports chosen once, so clients reach it again after a restart.
Producers record a message as acknowledged only on SEND_OK (RocketMQ) or a delivery report
without error (Kafka, acks=all); their retries are off so an unacknowledged send is never
re-sent under the same id. Every message body is its id. After each restart the new part of
every queue is read back through PULL_MESSAGE (the consumequeue as a consumer sees it); the last
round re-reads every queue from offset 0.
Protocols other than RocketMQ remoting come from plugins (`drill_producers` in rmq/plugins.py).
"""
from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

import yaml

from rmq.store.cleanup import dir_disk_bytes

TOPIC = "DrillTopic"
QUEUES = 4
GROUP = "drill_cg"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """`rmq up` with the drill's config, on the same ports at every start."""

    def __init__(self, config_path: str | None, workdir: str, data: str | None = None, kafka: bool = True,
                 log_path: str | None = None):
        self.workdir = workdir
        cfg = {}
        if config_path:
            with open(config_path, encoding="utf-8") as fh:
                cfg = yaml.safe_load(fh) or {}
        cfg["flushDiskType"] = "SYNC_FLUSH"
        cfg.pop("namesrvAddr", None)  # the embedded NameServer
        if cfg.get("brokerRole") == "SLAVE":
            cfg["brokerRole"] = "ASYNC_MASTER"
        # never the config's own store: the drill kills the broker over and over
        self.data = os.path.abspath(data or os.path.join(workdir, "store"))
        cfg["storePathRootDir"] = self.data
        cfg.setdefault("autoCreateTopicEnable", True)
        self.config_path = os.path.join(workdir, "drill-broker.yaml")
        with open(self.config_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(cfg, fh)
        self.ports = {"namesrv": free_port(), "remoting": free_port(), "kafka": free_port() if kafka else 0}
        self.ready_file = os.path.join(workdir, "ready.json")
        self.log_path = log_path or os.path.join(workdir, "broker.log")
        self.proc: subprocess.Popen | None = None
        self.listeners: dict = {}

    def start(self, timeout: float = 60.0) -> float:
        """Start and wait until every listener is up; returns the seconds it took."""
        try:
            os.unlink(self.ready_file)
        except FileNotFoundError:
            pass
        cmd = [sys.executable, "-c", "from rmq.cli import main; main()", "up", "--config", self.config_path,
               "--namesrv-port", str(self.ports["namesrv"]), "--remoting-port", str(self.ports["remoting"]),
               "--kafka-port", str(self.ports["kafka"]), "--ready-file", self.ready_file]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        while not os.path.exists(self.ready_file):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited with status {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"the broker was not ready within {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.01)
        took = time.monotonic() - t0
        with open(self.ready_file, encoding="utf-8") as fh:
            self.listeners = json.load(fh)
        return took

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


# ------------------------------------------------------------------------------ producers
class AckLog:
    """Thread-safe record of acknowledged ids: id -> (queue id, queue offset)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked: dict[str, tuple[int, int]] = {}
        self.failed = 0

    def ack(self, mid: str, queue_id: int, offset: int) -> None:
        with self.lock:
            self.acked[mid] = (queue_id, offset)

    def fail(self) -> None:
        with self.lock:
            self.failed += 1


def rocketmq_producer(listeners: dict, topic: str, prefix: str, stop: threading.Event, log: AckLog):
    """Sync sends over RocketMQ remoting until `stop`; returns a closer to call once the broker is back."""
    from rmq.client import Message, Producer
    from rmq.client.message import SendStatus
    p = Producer(f"drill_pg_{prefix}", listeners["namesrv"], retry_times_when_send_failed=0, send_msg_timeout=3.0)
    p.start()

    def run():
        n = 0
        while not stop.is_set():
            mid = f"{prefix}-{n}"
            n += 1
            try:
                r = p.send(Message(topic, mid.encode(), keys=mid))
            except Exception:
                log.fail()
                time.sleep(0.05)
                continue
            if r.send_status is SendStatus.SEND_OK:
                log.ack(mid, r.message_queue.queueId, r.queue_offset)
            else:
                log.fail()
    t = threading.Thread(target=run, name=f"drill-{prefix}", daemon=True)
    t.start()

    def close():
        t.join(timeout=30)
        try:
            p.shutdown()
        except Exception:
            pass
    return close


def drill_producers() -> dict:
    """protocol -> producer function: RocketMQ here, others from plugins (`drill_producers`)."""
    out = {"rocketmq": rocketmq_producer}
    from rmq.plugins import load_plugins
    for plugin in load_plugins():
        out.update(getattr(plugin, "drill_producers", None) or {})
    return out


# ------------------------------------------------------------------------------ checks
@dataclass
class RoundResult:
    round: int
    acknowledged: int
    found: int
    lost: int
    duplicated: int
    misplaced: int
    send_failures: int
    restart_s: float
    store_bytes: int
    restart_s_per_gb: float
    offsets_ok: bool
    recovery: str = ""


@dataclass
class DrillReport:
    rounds: list[RoundResult] = field(default_factory=list)
    total_acknowledged: int = 0
    total_found: int = 0
    total_lost: int = 0
    total_duplicated: int = 0
    total_misplaced: int = 0
    offset_errors: int = 0
    restart_s_max: float = 0.0
    restart_s_mean: float = 0.0
    restart_s_per_gb_max: float = 0.0
    clean_restart_s: float = 0.0
    store_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class QueueReader:
    """Reads the drill topic's queues through PULL_MESSAGE; keeps, per queue, what it has read
    (id -> count and offset of each id) so each round reads only what is new."""

    def __init__(self):
        self.seen: collections.Counter = collections.Counter()
        self.where: dict[str, tuple[int, int]] = {}
        self.next: dict[int, int] = {}

    def read(self, namesrv: str, topic: str, queues: int, from_zero: bool = False) -> None:
        from rmq.client import PullConsumer
        from rmq.client.message import PullStatus
        from rmq.remoting import MessageQueue
        if from_zero:
            self.seen.clear()
            self.where.clear()
            self.next.clear()
        c = PullConsumer("drill_reader_cg", namesrv)
        c.start()
        try:
            mqs = {mq.queueId: mq for mq in c.fetch_subscribe_message_queues(topic)}
            for q in range(queues):
                mq = mqs.get(q) or MessageQueue(topic, next(iter(mqs.values())).brokerName, q)
                off = self.next.get(q, 0)
                while True:
                    r = c.pull(mq, "*", off, 32)
                    if r.pull_status is not PullStatus.FOUND or not r.msg_found_list:
                        break
                    for m in r.msg_found_list:
                        mid = bytes(m.body).decode("utf-8", "replace")
                        self.seen[mid] += 1
                        self.where[mid] = (q, m.queue_offset)
                    off = r.next_begin_offset
                self.next[q] = off
        finally:
            c.shutdown()


def _commit_offsets(namesrv: str, topic: str, queues: int) -> dict[int, int]:
    """Commit each queue's current max offset for GROUP (what a consumer that read everything commits)."""
    from rmq.client import PullConsumer
    c = PullConsumer(GROUP, namesrv)
    c.start()
    try:
        out = {}
        for mq in c.fetch_subscribe_message_queues(topic):
            if mq.queueId >= queues:
                continue
            mx = c.max_offset(mq)
            c.update_consume_offset(mq, mx)
            out[mq.queueId] = mx
        c.commit_offsets()
        return out
    finally:
        c.shutdown()


def _fetch_offsets(namesrv: str, topic: str, queues: int) -> dict[int, int]:
    from rmq.client import PullConsumer
    c = PullConsumer(GROUP, namesrv)
    c.start()
    try:
        return {mq.queueId: c.fetch_consume_offset(mq, True) for mq in c.fetch_subscribe_message_queues(topic)
                if mq.queueId < queues}
    finally:
        c.shutdown()


def _create_topic(listeners: dict, topic: str, queues: int) -> None:
    from rmq.client.admin import MQAdmin
    with MQAdmin(listeners["namesrv"]) as a:
        a.create_topic(topic, broker_addr=listeners["remoting"], read_queue_nums=queues, write_queue_nums=queues)


def _recovery_line(log_path: str) -> str:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            lines = [ln for ln in fh if "rmq.store" in ln and ("recovery" in ln or "nothing to recover" in ln)]
    except OSError:
        return ""
    if not lines:
        return ""
    ln = lines[-1]
    i = ln.find("took ")
    mode = "process-crash" if "page cache is intact" in ln else "os-crash" if "checkpoint's file" in ln else \
        "normal" if "normal recovery" in ln else "?"
    return f"{mode} ({ln[i:].strip()})" if i >= 0 else mode


def run_kill_drill(rounds: int, config_path: str | None = None, protocols: tuple[str, ...] = ("rocketmq",),
                   workdir: str | None = None, min_s: float = 0.3, max_s: float = 2.0, seed: int | None = None,
                   on_round=None, keep: bool = False) -> DrillReport:
    """Run the drill; `on_round(RoundResult)` is called after each round."""
    producers = drill_producers()
    unknown = [p for p in protocols if p not in producers]
    if unknown:
        raise ValueError(f"no drill producer for {', '.join(unknown)} (available: {', '.join(sorted(producers))})")
    rng = random.Random(seed)
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="rmq-drill-")
    os.makedirs(workdir, exist_ok=True)
    broker = BrokerProcess(config_path, workdir, kafka="kafka" in protocols)
    report = DrillReport()
    acks = AckLog()
    reader = QueueReader()
    committed: dict[int, list[int]] = collections.defaultdict(lambda: [0, -1])
    try:
        broker.start()
        _create_topic(broker.listeners, TOPIC, QUEUES)
        for rnd in range(1, rounds + 1):
            new_commit = _commit_offsets(broker.listeners["namesrv"], TOPIC, QUEUES)
            for q, v in new_commit.items():
                committed[q].append(v)
            before = len(acks.acked)
            failed_before = acks.failed
            stop = threading.Event()
            closers = [producers[p](broker.listeners, TOPIC, f"r{rnd}{p[0]}", stop, acks) for p in protocols]
            time.sleep(rng.uniform(min_s, max_s))
            broker.kill()
            stop.set()
            restart = broker.start()
            for close in closers:
                close()
            last = rnd == rounds
            reader.read(broker.listeners["namesrv"], TOPIC, QUEUES, from_zero=last)
            with acks.lock:
                acked = dict(acks.acked)
            lost = [m for m in acked if reader.seen.get(m, 0) == 0]
            dup = [m for m in acked if reader.seen.get(m, 0) > 1]
            misplaced = [m for m, w in acked.items() if m in reader.where and reader.where[m] != w]
            now = _fetch_offsets(broker.listeners["namesrv"], TOPIC, QUEUES)
            offsets_ok = all(v in committed[q] for q, v in now.items())
            if not offsets_ok:
                report.offset_errors += 1
            size = dir_disk_bytes(os.path.join(broker.data, "commitlog"))
            rr = RoundResult(rnd, len(acked) - before, sum(1 for m in acked if reader.seen.get(m, 0) > 0),
                             len(lost), len(dup), len(misplaced), acks.failed - failed_before, round(restart, 3),
                             size, round(restart / max(size / 1e9, 1e-9), 3) if size >= 1e8 else 0.0, offsets_ok,
                             _recovery_line(broker.log_path))
            report.rounds.append(rr)
            if on_round is not None:
                on_round(rr)
        broker.stop()
        report.clean_restart_s = round(broker.start(), 3)
        broker.stop()
    finally:
        broker.kill()
        if own_dir and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    last = report.rounds[-1] if report.rounds else None
    report.total_acknowledged = len(acks.acked)
    report.total_found = last.found if last else 0
    report.total_lost = last.lost if last else 0
    report.total_duplicated = last.duplicated if last else 0
    report.total_misplaced = last.misplaced if last else 0
    times = [r.restart_s for r in report.rounds]
    report.restart_s_max = max(times, default=0.0)
    report.restart_s_mean = round(sum(times) / len(times), 3) if times else 0.0
    report.store_bytes = last.store_bytes if last else 0
    report.restart_s_per_gb_max = max((r.restart_s_per_gb for r in report.rounds), default=0.0)
    return report
