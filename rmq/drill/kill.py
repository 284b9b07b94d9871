"""Kill drill: SIGKILL a SYNC_FLUSH broker while producers send, restart it, check every
acknowledged message is in the consumequeue exactly once and committed offsets survive (SPEC §2,
§9; DESIGN.md "No acknowledged message is lost under SYNC_FLUSH, even on kill -9").

Two deployments (rmq/drill/processes.py), each on fixed loopback ports chosen once, so clients reach
it again after a restart:
- `rmq up` (NameServer, broker and, with the kafka_bridge plugin, the Kafka listener in one process);
  the drill kills that process.
- with `slave=True`: `rmq namesrv`, a SYNC_MASTER (`rmq broker`, brokerId 0) and its SLAVE (same
  brokerName, brokerId 1) as three processes; the drill kills the master while the slave runs. Right
  after the kill, before the master restarts, the slave must already hold every message the master
  acknowledged (a SYNC_MASTER answers a send only once its slave has the bytes): the drill waits until
  the slave has torn down its HA connection and dispatched everything it received, then reads it.
  After the restart and the slave's catch-up it must hold every acknowledged message exactly once at
  the acknowledged queue offset, as the master does, and its copy of the committed offsets must be one
  the group committed.

Producers record a message as acknowledged only on SEND_OK (RocketMQ) or a delivery report
without error (Kafka, acks=all); their retries are off so an unacknowledged send is never
re-sent under the same id. Every message body is its id. Queues are read back with PULL_MESSAGE
addressed to one broker (the consumequeue as a consumer of that broker sees it, a slave included);
each round reads only what is new, the last round re-reads every queue from offset 0.
Protocols other than RocketMQ remoting come from plugins (`drill_producers` in rmq/plugins.py).
"""
from __future__ import annotations

import collections
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from rmq.store.cleanup import dir_disk_bytes

from .processes import BrokerProcess, MasterSlaveBrokers

TOPIC = "DrillTopic"
QUEUES = 4
GROUP = "drill_cg"

PRODUCER_STOP_TIMEOUT_S = 30.0  # a sender thread returns once `stop` is set (a send times out in 3 s)


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

    def snapshot(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return dict(self.acked)


@dataclass
class ProducerRun:
    """What a drill producer function returns. `settle()` is called once `stop` is set and the broker
    is down: it joins the sender thread and records the outcomes the client already knows, without
    waiting for in-flight sends. `close()` is called once the broker is back: it waits (bounded) for
    the outcomes of in-flight sends and releases the client."""
    settle: Callable[[], None]
    close: Callable[[], None]


def join_sender(t: threading.Thread, what: str) -> None:
    """Join a producer's sender thread (it returns once `stop` is set); RuntimeError if it does not."""
    t.join(timeout=PRODUCER_STOP_TIMEOUT_S)
    if t.is_alive():
        raise RuntimeError(f"the {what} producer thread did not stop within {PRODUCER_STOP_TIMEOUT_S:.0f} s")


def rocketmq_producer(listeners: dict, topic: str, prefix: str, stop: threading.Event, log: AckLog) -> ProducerRun:
    """Sync sends over RocketMQ remoting until `stop` (a send's outcome is known when it returns)."""
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
        try:
            join_sender(t, "RocketMQ")
        finally:
            try:
                p.shutdown()
            except Exception:  # noqa: BLE001 - the broker may have gone again
                pass
    return ProducerRun(settle=lambda: join_sender(t, "RocketMQ"), close=close)


def drill_producers() -> dict:
    """protocol -> producer function (listeners, topic, prefix, stop, AckLog) -> ProducerRun:
    RocketMQ here, others from plugins (`drill_producers`)."""
    out = {"rocketmq": rocketmq_producer}
    from rmq.plugins import load_plugins
    for plugin in load_plugins():
        out.update(getattr(plugin, "drill_producers", None) or {})
    return out


# ------------------------------------------------------------------------------ checks
@dataclass
class SlaveRound:
    """The slave's figures for one round of the master/slave drill."""
    acked_not_on_slave: int   # acknowledged before the master restarted, not on the slave right after the kill
    on_slave_at_kill: int     # acknowledged messages the slave held right after the kill
    found: int                # after the slave caught up with the restarted master
    lost: int
    duplicated: int
    misplaced: int
    reconnect_s: float        # from the master's restart until its slave was connected again
    catch_up_s: float         # then, once the master was checked, until the slave's commitlog ended at the master's
    offsets_ok: bool


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
    slave: SlaveRound | None = None


@dataclass
class SlaveTotals:
    total_found: int = 0
    total_lost: int = 0
    total_duplicated: int = 0
    total_misplaced: int = 0
    acked_not_on_slave: int = 0   # distinct messages missing from the slave at some kill
    offset_errors: int = 0
    reconnect_s_max: float = 0.0
    catch_up_s_max: float = 0.0


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
    slave: SlaveTotals | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def failed(self) -> bool:
        """Anything acknowledged missing, doubled or misplaced, or an offset that did not survive."""
        bad = self.total_lost or self.total_duplicated or self.total_misplaced or self.offset_errors
        s = self.slave
        if s is not None:
            bad = bad or s.total_lost or s.total_duplicated or s.total_misplaced or s.acked_not_on_slave \
                or s.offset_errors
        return bool(bad)


class QueueReader:
    """Reads the drill topic's queues through PULL_MESSAGE; keeps, per queue, what it has read
    (id -> count and offset of each id) so each round reads only what is new."""

    def __init__(self):
        self.seen: collections.Counter = collections.Counter()
        self.where: dict[str, tuple[int, int]] = {}
        self.next: dict[int, int] = {}

    def read(self, namesrv: str, topic: str, queues: int, from_zero: bool = False,
             broker_addr: str | None = None) -> None:
        """Read what is new in queues 0..queues-1 of `topic`: on `broker_addr` (a slave, say), else
        on the broker the NameServer's route names."""
        from rmq.client.admin import MQAdmin
        from rmq.client.message import PullStatus
        from rmq.remoting import MessageQueue
        if from_zero:
            self.seen.clear()
            self.where.clear()
            self.next.clear()
        with MQAdmin(namesrv) as admin:
            name = "" if broker_addr else admin.topic_route(topic).brokerDatas[0].brokerName
            for q in range(queues):
                mq = MessageQueue(topic, name, q)
                off = self.next.get(q, 0)
                while True:  # ends: every FOUND moves `off` forward, within the queue's finite length
                    r = admin.pull(mq, off, 32, broker_addr=broker_addr)
                    if r.pull_status is not PullStatus.FOUND or not r.msg_found_list or r.next_begin_offset <= off:
                        break
                    for m in r.msg_found_list:
                        mid = bytes(m.body).decode("utf-8", "replace")
                        self.seen[mid] += 1
                        self.where[mid] = (q, m.queue_offset)
                    off = r.next_begin_offset
                self.next[q] = off


@dataclass
class Presence:
    """Acknowledged messages against what a QueueReader read."""
    found: int
    lost: int
    duplicated: int
    misplaced: int


def presence(acked: dict[str, tuple[int, int]], reader: QueueReader) -> Presence:
    seen, where = reader.seen, reader.where
    return Presence(found=sum(1 for m in acked if seen.get(m, 0) > 0),
                    lost=sum(1 for m in acked if seen.get(m, 0) == 0),
                    duplicated=sum(1 for m in acked if seen.get(m, 0) > 1),
                    misplaced=sum(1 for m, w in acked.items() if m in where and where[m] != w))


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


def _consumer_offsets(namesrv: str, broker_addr: str, topic: str, queues: int) -> dict[int, int]:
    """GROUP's offsets on one broker, as a consumer resuming there reads them (QUERY_CONSUMER_OFFSET)."""
    from rmq.client.admin import MQAdmin
    with MQAdmin(namesrv) as admin:
        return {q: admin.query_consumer_offset(broker_addr, GROUP, topic, q) for q in range(queues)}


def _offsets_ok(now: dict[int, int], committed: dict[int, list[int]]) -> bool:
    """Every queue's offset is one the group committed (offsets are persisted periodically, so after a
    kill it may be an earlier commit: RocketMQ's at-least-once, never an offset nobody committed)."""
    return all(v in committed[q] for q, v in now.items())


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


def _close_all(runs: list[ProducerRun]) -> None:
    """Close every producer run; the first error is raised after all were closed."""
    first: Exception | None = None
    for r in runs:
        try:
            r.close()
        except Exception as exc:  # noqa: BLE001
            first = first or exc
    if first is not None:
        raise first


class SlaveCheck:
    """The slave's side of the master/slave drill: what it holds right after each kill of the master,
    and, once it caught up with the restarted master, whether it holds every acknowledged message
    exactly once at its queue offset and a committed offset for each queue."""

    def __init__(self, brokers: MasterSlaveBrokers):
        self.brokers = brokers
        self.reader = QueueReader()
        self.missing_at_kill: set[str] = set()
        self.totals = SlaveTotals()
        self._at_kill = (0, 0)  # (acknowledged not on the slave, acknowledged on the slave)

    def at_kill(self, acks: AckLog) -> None:
        """Called with the master down and the producers settled: what the slave holds now is what it
        had at the kill, checked against everything acknowledged so far."""
        b = self.brokers
        b.wait_slave_settled()
        self.reader.read(b.listeners["namesrv"], TOPIC, QUEUES, broker_addr=b.slave_addr)
        acked = acks.snapshot()
        not_there = {m for m in acked if self.reader.seen.get(m, 0) == 0}
        self.missing_at_kill |= not_there
        self._at_kill = (len(not_there), len(acked) - len(not_there))

    def after_restart(self, acked: dict[str, tuple[int, int]], committed: dict[int, list[int]],
                      from_zero: bool, reconnect_s: float) -> SlaveRound:
        b = self.brokers
        catch_up = b.wait_caught_up()
        self.reader.read(b.listeners["namesrv"], TOPIC, QUEUES, from_zero=from_zero, broker_addr=b.slave_addr)
        got = presence(acked, self.reader)
        offsets_ok = _offsets_ok(_consumer_offsets(b.listeners["namesrv"], b.slave_addr, TOPIC, QUEUES), committed)
        t = self.totals
        t.total_found, t.total_lost, t.total_duplicated, t.total_misplaced = \
            got.found, got.lost, got.duplicated, got.misplaced
        t.acked_not_on_slave = len(self.missing_at_kill)
        t.offset_errors += not offsets_ok
        t.reconnect_s_max = max(t.reconnect_s_max, round(reconnect_s, 3))
        t.catch_up_s_max = max(t.catch_up_s_max, round(catch_up, 3))
        return SlaveRound(self._at_kill[0], self._at_kill[1], got.found, got.lost, got.duplicated, got.misplaced,
                          round(reconnect_s, 3), round(catch_up, 3), offsets_ok)


def run_kill_drill(rounds: int, config_path: str | None = None, protocols: tuple[str, ...] = ("rocketmq",),
                   workdir: str | None = None, min_s: float = 0.3, max_s: float = 2.0, seed: int | None = None,
                   on_round=None, keep: bool = False, slave: bool = False) -> DrillReport:
    """Run the drill; `on_round(RoundResult)` is called after each round. With `slave`, the broker is
    a SYNC_MASTER with a running SLAVE and every round checks the slave too (RoundResult.slave)."""
    producers = drill_producers()
    unknown = [p for p in protocols if p not in producers]
    if unknown:
        raise ValueError(f"no drill producer for {', '.join(unknown)} (available: {', '.join(sorted(producers))})")
    if not 0 <= min_s <= max_s:
        raise ValueError(f"expected 0 <= min_s <= max_s, got {min_s} and {max_s}")
    rng = random.Random(seed)
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="rmq-drill-")
    os.makedirs(workdir, exist_ok=True)
    kafka = "kafka" in protocols
    brokers = MasterSlaveBrokers(config_path, workdir, kafka=kafka) if slave else \
        BrokerProcess(config_path, workdir, kafka=kafka)
    slave_check = SlaveCheck(brokers) if slave else None
    report = DrillReport(slave=slave_check.totals if slave_check else None)
    acks = AckLog()
    reader = QueueReader()
    committed: dict[int, list[int]] = collections.defaultdict(lambda: [0, -1])
    stop = threading.Event()
    runs: list[ProducerRun] = []
    try:
        brokers.start_all()
        ns, broker_addr = brokers.listeners["namesrv"], brokers.listeners["remoting"]
        _create_topic(brokers.listeners, TOPIC, QUEUES)
        brokers.wait_serves(TOPIC)
        for rnd in range(1, rounds + 1):
            brokers.wait_replicating()
            for q, v in _commit_offsets(ns, TOPIC, QUEUES).items():
                committed[q].append(v)
            before = len(acks.acked)
            failed_before = acks.failed
            stop = threading.Event()
            runs = [producers[p](brokers.listeners, TOPIC, f"r{rnd}{p[0]}", stop, acks) for p in protocols]
            time.sleep(rng.uniform(min_s, max_s))
            brokers.kill()
            stop.set()
            for r in runs:
                r.settle()
            if slave_check is not None:
                slave_check.at_kill(acks)
            restart = brokers.start()
            reconnect = brokers.wait_replicating()
            _close_all(runs)
            runs = []
            last = rnd == rounds
            reader.read(ns, TOPIC, QUEUES, from_zero=last, broker_addr=broker_addr)
            acked = acks.snapshot()
            got = presence(acked, reader)
            offsets_ok = _offsets_ok(_consumer_offsets(ns, broker_addr, TOPIC, QUEUES), committed)
            report.offset_errors += not offsets_ok
            slave_round = slave_check.after_restart(acked, committed, last, reconnect) if slave_check else None
            size = dir_disk_bytes(os.path.join(brokers.data, "commitlog"))
            rr = RoundResult(rnd, len(acked) - before, got.found, got.lost, got.duplicated, got.misplaced,
                             acks.failed - failed_before, round(restart, 3), size,
                             round(restart / max(size / 1e9, 1e-9), 3) if size >= 1e8 else 0.0, offsets_ok,
                             _recovery_line(brokers.log_path), slave_round)
            report.rounds.append(rr)
            if on_round is not None:
                on_round(rr)
        brokers.stop()
        report.clean_restart_s = round(brokers.start(), 3)
        brokers.stop()
    finally:
        stop.set()
        try:
            _close_all(runs)  # after a failure mid-round: bounded (the Kafka producer's flush)
        except Exception:  # noqa: BLE001 - the drill's own error is the one to see
            pass
        brokers.shutdown()
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
