"""Hidden cases for replication (the keys as `rmq broker` validates them, the roles they choose, what a
send status promises), then each config on a real NameServer + master + slave (`rmq namesrv`,
`rmq broker -c` twice): messages are sent while the slave is connected, more while the link to it is
cut, the master is killed with kill -9, and the slave is read to see what it holds.

The slave reaches the master's HA port through a small TCP relay in this process, so "the link is
cut" is exact: while cut, the relay forwards nothing, and when the master dies the relay drops what it
held, as a network that fails with the machine would. (Freezing the slave instead would not do: on
one machine the bytes would wait in the kernel's socket buffers and arrive once it woke.)"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
import uuid

import yaml

from labs.exercises.kit import Once, expect, load_broker_dict, rule

ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
STATUSES = ("SEND_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
HEALTHY, CUT = 12, 3                    # messages sent with the slave connected, then with the link cut
# the checker's own keys: they place the master and the slave; the student's dict cannot move them
PLACED = ("brokerName", "brokerId", "brokerClusterName", "namesrvAddr", "brokerIP1", "listenPort", "haListenPort",
          "haMasterAddress", "storePathRootDir", "kafkaEnable", "kafkaPort", "registerNameServerPeriod")


def _role(d) -> str:
    cfg, _err = load_broker_dict(d)
    return cfg.store.brokerRole if cfg is not None else ""


def offline(sol):
    for name in ("LEDGER", "FEED"):
        def valid(name=name):
            cfg, err = load_broker_dict(getattr(sol, name, None))
            return rule(cfg is not None, "broker config keys `rmq broker` accepts", err or "accepted")
        yield f"{name}: the keys are valid broker config", valid

    def ledger():
        cfg, err = load_broker_dict(sol.LEDGER)
        return rule(cfg is not None and cfg.store.brokerRole == "SYNC_MASTER",
                    "a master whose answer waits until the slave has the message",
                    err or f"brokerRole {cfg.store.brokerRole}",
                    "the default role (ASYNC_MASTER) answers before the slave has anything")
    yield "LEDGER: SEND_OK comes only once the slave has the message", ledger

    def feed():
        cfg, err = load_broker_dict(sol.FEED)
        return rule(cfg is not None and cfg.store.brokerRole == "ASYNC_MASTER",
                    "a master whose answer does not wait for the slave",
                    err or f"brokerRole {cfg.store.brokerRole}",
                    "a SLAVE refuses sends; a SYNC_MASTER waits for the slave")
    yield "FEED: a master that answers without waiting for the slave", feed

    for role in ROLES:
        for status in STATUSES:
            if role == "ASYNC_MASTER" and status != "SEND_OK":
                continue                 # an ASYNC_MASTER answers SEND_OK whatever its slave does
            want = role == "SYNC_MASTER" and status == "SEND_OK"
            yield (f"on_slave({role!r}, {status!r})", lambda role=role, status=status, want=want: expect(
                bool(sol.on_slave(role, status)), want,
                "only a SYNC_MASTER's SEND_OK says the slave has it; FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE "
                "mean stored on the master only"))


class Relay:
    """A TCP relay from a local port to `target` (the master's HA port) that can be cut: while cut it
    forwards nothing in either direction, and drop() closes every connection, discarding what it held."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.open = threading.Event()
        self.open.set()
        self.dropped = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="ha-relay").start()

    def _accept(self) -> None:
        while not self.dropped.is_set():
            try:
                a, _ = self.srv.accept()
                b = socket.create_connection(self.target, timeout=5)
                b.settimeout(None)
            except OSError:
                continue
            self.socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while not self.open.wait(0.1):
                    if self.dropped.is_set():
                        return
                if self.dropped.is_set():
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.open.clear()

    def drop(self) -> None:
        """Close every connection at once: shutdown() first, because a close() alone neither wakes a
        thread blocked in recv() nor sends the FIN that tells the slave its master is gone."""
        self.dropped.set()
        for s in [self.srv, *self.socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - a process that is still starting answers with errors
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s" + (f" (last error: {last})" if last else ""))


def _scenario(config: dict) -> dict:
    """NameServer, master (the student's keys) and slave; HEALTHY sends, the link cut, CUT sends, kill -9
    of the master, the slave read. Returns each send's status and the keys the slave holds."""
    from rmq.client.admin import MQAdmin
    from rmq.client.message import Message
    from rmq.client.producer import Producer
    from rmq.drill.processes import ServerProcess, free_port
    from rmq.remoting import MessageQueue
    work = tempfile.mkdtemp(prefix="rmq-exercise-ha-")
    procs: list[ServerProcess] = []
    relay = None
    try:
        ns_port, m_port, m_ha, s_port = free_port(), free_port(), free_port(), free_port()
        ns = f"127.0.0.1:{ns_port}"
        relay = Relay(("127.0.0.1", m_ha))
        common = {"brokerClusterName": "ExerciseCluster", "brokerName": "broker-r", "namesrvAddr": ns,
                  "brokerIP1": "127.0.0.1", "kafkaEnable": False, "registerNameServerPeriod": 1000}
        master = {"syncFlushTimeout": 2000, **{k: v for k, v in config.items() if k not in PLACED}, **common,
                  "brokerId": 0, "listenPort": m_port, "haListenPort": m_ha,
                  "storePathRootDir": os.path.join(work, "master")}
        slave = {**common, "brokerId": 1, "brokerRole": "SLAVE", "listenPort": s_port, "haMasterAddress": relay.addr,
                 "storePathRootDir": os.path.join(work, "slave"), "slaveSynchronizeInterval": 500}
        for name, cfg in (("master", master), ("slave", slave)):
            with open(os.path.join(work, f"{name}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(cfg, fh)
        ns_p = ServerProcess("namesrv", ["namesrv", "--port", str(ns_port), "--host", "127.0.0.1"], work)
        m_p = ServerProcess("master", ["broker", "-c", os.path.join(work, "master.yaml")], work)
        s_p = ServerProcess("slave", ["broker", "-c", os.path.join(work, "slave.yaml")], work)
        for p in (ns_p, m_p, s_p):
            procs.append(p)
            p.start(45)
        m_addr, s_addr = f"127.0.0.1:{m_port}", f"127.0.0.1:{s_port}"
        topic = f"Ledger{uuid.uuid4().hex[:6]}"
        with MQAdmin(namesrv=[ns]) as admin:
            admin.create_topic(topic, broker_addr=m_addr, read_queue_nums=1, write_queue_nums=1)
            admin.wait_for_route(topic, queues=1, timeout=30)
            _wait(lambda: int(admin.broker_runtime_info(m_addr).get("haConnections", 0)) > 0, 30,
                  "the slave connecting to the master")
            # the slave copies the topic's config every slaveSynchronizeInterval; then it answers pulls
            _wait(lambda: admin.pull(MessageQueue(topic, "broker-r", 0), 0, 1, broker_addr=s_addr) is not None, 30,
                  "the slave serving the topic")
        sends: list[tuple[str, str, str]] = []          # (key, status, phase)
        p = Producer(f"pg_ha_{uuid.uuid4().hex[:6]}", namesrv=[ns], retry_times_when_send_failed=0)
        p.start()
        admin = MQAdmin(namesrv=[ns])
        try:
            for i in range(HEALTHY + CUT):
                if i == HEALTHY:            # the slave has caught up (an ASYNC_MASTER's may lag); then the cut
                    _wait(lambda: int(admin.broker_runtime_info(s_addr)["commitLogMaxOffset"]) >=
                          int(admin.broker_runtime_info(m_addr)["commitLogMaxOffset"]), 20, "the slave catching up")
                    relay.cut()
                key = f"m{i}"
                r = p.send(Message(topic, f"entry {i}", keys=key))
                sends.append((key, getattr(r.send_status, "value", str(r.send_status)),
                              "healthy" if i < HEALTHY else "cut"))
        finally:
            m_p.kill()                      # kill -9, the link still cut
            relay.drop()
            p.shutdown()
            admin.close()
        with MQAdmin(namesrv=[ns]) as admin:
            def settled():
                info = admin.broker_runtime_info(s_addr)
                return str(info.get("haMasterConnected")).lower() == "false" and \
                    int(info.get("dispatchBehindBytes", 0)) == 0
            _wait(settled, 30, "the slave settling after the master's kill")
            on_slave: set[str] = set()
            offset = 0
            for _ in range(100):
                res = admin.pull(MessageQueue(topic, "broker-r", 0), offset, 32, broker_addr=s_addr)
                found = list(res.msg_found_list or [])
                if not found:
                    break
                on_slave.update(m.keys for m in found)
                offset = res.next_begin_offset
        return {"sends": sends, "on_slave": on_slave}
    finally:
        if relay is not None:
            relay.drop()
        for p in reversed(procs):
            try:
                p.stop()
            finally:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def broker_config(sol):
    return None                              # no `rmq up`: the live cases start their own master and slave


def live(sol, broker):
    runs = {"LEDGER": Once(lambda: _scenario(dict(sol.LEDGER))), "FEED": Once(lambda: _scenario(dict(sol.FEED)))}

    def acked_on_slave():
        r = runs["LEDGER"]()
        ok = [k for k, st, _ph in r["sends"] if st == "SEND_OK"]
        lost = [k for k in ok if k not in r["on_slave"]]
        return rule(ok and not lost, "every message answered SEND_OK on the slave",
                    f"{len(ok) - len(lost)} of {len(ok)} SEND_OK messages on the slave" + (f", lost {lost}" if lost else ""),
                    "an ASYNC_MASTER answers SEND_OK before its slave has the message")
    yield ("live LEDGER: master killed with kill -9 while the link to its slave was cut: every message answered "
           "SEND_OK is on the slave"), acked_on_slave

    def ledger_waited():
        r = runs["LEDGER"]()
        cut = [st for _k, st, ph in r["sends"] if ph == "cut"]
        return rule(cut and all(st != "SEND_OK" for st in cut),
                    "no SEND_OK while the slave could not confirm (FLUSH_SLAVE_TIMEOUT)", f"statuses {cut}")
    yield "live LEDGER: sends while the link was cut were not answered SEND_OK", ledger_waited

    def feed_did_not_wait():
        r = runs["FEED"]()
        cut = [st for _k, st, ph in r["sends"] if ph == "cut"]
        return rule(cut and all(st == "SEND_OK" for st in cut), "SEND_OK without waiting for the slave",
                    f"statuses {cut}")
    yield "live FEED: sends while the link was cut were answered SEND_OK at once", feed_did_not_wait

    def feed_lost_the_tail():
        r = runs["FEED"]()
        healthy = [k for k, _st, ph in r["sends"] if ph == "healthy"]
        cut = [k for k, _st, ph in r["sends"] if ph == "cut"]
        got = sorted(k for k in healthy + cut if k in r["on_slave"])
        return rule(set(healthy) <= r["on_slave"] and not set(cut) & r["on_slave"],
                    f"the {len(healthy)} messages sent before the cut on the slave, the {len(cut)} after it not "
                    "(acknowledged, and lost with the master)", f"on the slave: {got}")
    yield ("live FEED: after the kill -9 the slave holds what reached it before the cut; what the master "
           "acknowledged after it is gone"), feed_lost_the_tail

    def your_promises():
        wrong = []
        for name in ("LEDGER", "FEED"):
            r = runs[name]()
            role = _role(getattr(sol, name))
            for k, st, _ph in r["sends"]:
                if sol.on_slave(role, st) and k not in r["on_slave"]:
                    wrong.append(f"{name} {k}: on_slave({role!r}, {st!r}) said yes, the slave does not have it")
        return rule(not wrong, "on_slave never says yes for a message the slave lacks",
                    "; ".join(wrong[:3]) or "right every time")
    yield "live: on_slave was right about every message of both runs", your_promises
