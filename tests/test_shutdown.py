"""Every server process stops on SIGTERM within the shutdown bound (issue 22, rmq/server/shutdown.py),
with real processes on 127.0.0.1: a SLAVE SIGSTOPped and SIGCONTed under traffic, then SIGTERMed
and restarted on the same store (rmq drill stop); its SYNC_MASTER while the slave is stopped and a
raw HA client never reads; `rmq up` and `rmq namesrv` with connected clients, one of which never
reads. The watchdog itself: a shutdown that hangs is ended after the bound with the pending tasks
logged and the store flushed, and a second SIGTERM ends it at once. Timeouts here are generous
(15 s) and nothing asserts how fast a clean shutdown is."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rmq.remoting import RemotingCommand, RequestCode
from tests.test_cluster_processes import procs, spawn, wait_file  # noqa: F401 - procs is a fixture

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_TIMEOUT_S = 15.0  # above the 10 s bound: a process slower than this did not honour it


def sigterm_and_wait(p: subprocess.Popen) -> int:
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        raise AssertionError(f"pid {p.pid} still up {EXIT_TIMEOUT_S:.0f} s after SIGTERM") from None


def test_slave_stopped_and_continued_then_terminated_exits_and_restarts(tmp_path):
    from rmq.drill.stop import run_stop_drill
    rep = run_stop_drill(8, str(tmp_path), pause_s=0.5, timeout_s=EXIT_TIMEOUT_S, seed=22)
    rounds = [(r.target, r.exit_code, r.forced, r.recovery) for r in rep.rounds]
    # every slave exited on its own (no watchdog), cleanly: its restart found no abort file
    assert rounds[:8] == [("slave", 0, False, "normal")] * 8, rounds
    # the master too, with its slave stopped and a raw HA client that never reads
    assert rounds[8] == ("master", 0, False, ""), rounds
    # (the raw client really did not read: the master's kernel held bytes for it at the SIGTERM)
    assert rep.rounds[8].unsent is None or rep.rounds[8].unsent > 0
    assert rep.sent > 0
    master_log = open(os.path.join(tmp_path, "master.log"), errors="replace").read()
    assert "clean shutdown not finished" not in master_log


def _raw_non_reader(addr: str, request: bytes, count: int) -> socket.socket:
    """A client that sends `count` requests and never reads the responses."""
    host, _, port = addr.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    data = request * count
    sent = 0
    deadline = time.monotonic() + 5
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += s.send(data[sent:])
        except BlockingIOError:
            time.sleep(0.01)
    return s


def test_rmq_up_and_namesrv_exit_with_connected_clients(tmp_path, procs):  # noqa: F811
    from kafka import KafkaConsumer

    from rmq.client import ClientConfig, Message, Producer
    ready_ns = tmp_path / "ns.json"
    pns = spawn(procs, ["namesrv", "--port", "0", "--ready-file", str(ready_ns)], tmp_path / "ns.log")
    ns = wait_file(ready_ns, pns)["namesrv"]
    ready_up = tmp_path / "up.json"
    pup = spawn(procs, ["up", "--namesrv-port", "0", "--remoting-port", "0", "--kafka-port", "0",
                        "--data", str(tmp_path / "store"), "--ready-file", str(ready_up)], tmp_path / "up.log")
    up = wait_file(ready_up, pup)
    producer = Producer("pg-shutdown", up["namesrv"], config=ClientConfig(client_ip="127.0.0.1",
                                                                           instance_name="shutdown"))
    producer.start()
    consumer = None
    raws = []
    try:
        for i in range(20):
            producer.send(Message("shutdown-topic", f"m{i}".encode()))
        consumer = KafkaConsumer("shutdown-topic", bootstrap_servers=up["kafka"], group_id="g-shutdown",
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        got = []
        for rec in consumer:
            got.append(rec.value)
            if len(got) == 20:
                break
        assert len(got) == 20
        # clients that never read what they asked for, on every port
        route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "shutdown-topic"}).encode()
        raws.append(_raw_non_reader(up["remoting"], route, 20000))
        raws.append(_raw_non_reader(up["namesrv"], route, 20000))
        raws.append(_raw_non_reader(ns, route, 20000))
        assert sigterm_and_wait(pup) == 0
        assert sigterm_and_wait(pns) == 0
    finally:
        for s in raws:
            s.close()
        if consumer is not None:
            consumer.close()
        producer.shutdown()
    for log in ("up.log", "ns.log"):
        text = open(tmp_path / log, errors="replace").read()
        assert "shutting down (SIGTERM)" in text and "clean shutdown not finished" not in text, text[-2000:]
    # the store was shut down cleanly: no abort file
    assert not os.path.exists(tmp_path / "store" / "abort")


HANGING_SHUTDOWN = r'''
import asyncio, logging, sys
from rmq.broker.controller import BrokerController
from rmq.config import load_config
from rmq.server.shutdown import ShutdownGuard
from rmq.store import Message

logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
store, bound, ready = sys.argv[1], float(sys.argv[2]), sys.argv[3]
cfg = load_config(None, {"storePathRootDir": store, "kafkaEnable": False, "flushDiskType": "ASYNC_FLUSH"})
ctrl = BrokerController(cfg)
ctrl.start()
ctrl.create_topic("hang", 1)
res = ctrl.put_messages([Message("hang", b"written before the hang")])
print("put", res.status.name, flush=True)
guard = ShutdownGuard("hang-test", bound_s=bound, flush=ctrl.flush_for_exit)

async def stubborn():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # a task that ignores its cancellation: the shutdown below never ends

async def main():
    task = asyncio.get_running_loop().create_task(stubborn(), name="stubborn-task")
    open(ready, "w").write("ready")
    await guard.wait_for_signal()
    print("shutting down", flush=True)
    task.cancel()
    await task

asyncio.run(main())
ctrl.shutdown()
guard.finished()
'''


def _start_hanging(tmp_path, bound_s: float) -> subprocess.Popen:
    script = tmp_path / "hang.py"
    script.write_text(HANGING_SHUTDOWN)
    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), str(bound_s), str(ready)],
                         stdout=open(tmp_path / "hang.log", "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None, open(tmp_path / "hang.log").read()
        assert time.monotonic() < deadline, "the hanging script did not start"
        time.sleep(0.05)
    return p


def _recovered_offset(store: str) -> int:
    from rmq.config import load_config
    from rmq.store import DefaultMessageStore
    s = DefaultMessageStore(load_config(None, {"storePathRootDir": store}).store)
    s.load()
    try:
        return s.commitlog.max_offset
    finally:
        s.shutdown()


def test_hung_shutdown_is_ended_after_the_bound_with_the_store_flushed(tmp_path):
    p = _start_hanging(tmp_path, bound_s=2.0)
    try:
        code = sigterm_and_wait(p)
    finally:
        if p.poll() is None:
            p.kill()
    text = open(tmp_path / "hang.log", errors="replace").read()
    assert code == 1, text
    assert "put PUT_OK" in text
    line = next(ln for ln in text.splitlines() if "clean shutdown not finished" in ln)
    assert "it did not end within 2 s" in line and "stubborn-task" in line, line
    assert "store flushed; the abort file stays" in text
    # the next start recovers as after a crash, and finds the message
    assert os.path.exists(tmp_path / "store" / "abort")
    assert _recovered_offset(str(tmp_path / "store")) > 0


def test_second_sigterm_exits_at_once(tmp_path):
    p = _start_hanging(tmp_path, bound_s=600.0)  # the bound is far away: only the second signal ends it
    try:
        p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while "shutting down" not in open(tmp_path / "hang.log", errors="replace").read():
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        code = sigterm_and_wait(p)
    finally:
        if p.poll() is None:
            p.kill()
    text = open(tmp_path / "hang.log", errors="replace").read()
    assert code == 1, text
    assert "a second SIGTERM/SIGINT arrived" in text, text



def test_ha_client_cancelled_while_reading_a_backlog_always_ends(tmp_path):
    """The root cause of the hung slave: a cancellation that arrived in the same loop turn as a
    completed read was swallowed (asyncio.wait_for on Python 3.11), and the HAClient read on. Here a
    fake master floods heartbeat frames and the client's task is cancelled once, at a different
    loop turn each round: it must end every time."""
    import asyncio

    from rmq.broker.controller import BrokerController
    from rmq.config import load_config
    from rmq.server import ha

    writers = []

    async def fake_master(reader, writer):
        writers.append(writer)
        try:
            await reader.readexactly(4 + 2 + len(b"broker-a") + 8)
            writer.write(ha.encode_master_hello(ha.HELLO_OK, "broker-a", 0))
            frames = ha.HEADER.pack(0, 0) * 200
            while True:
                writer.write(frames)
                await writer.drain()
                await asyncio.sleep(0)  # drain() does not yield below the high-water mark
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        cfg = load_config(None, {"storePathRootDir": str(tmp_path / "s"), "brokerRole": "SLAVE", "brokerId": 1,
                                 "haMasterAddress": f"127.0.0.1:{port}", "kafkaEnable": False})
        ctrl = BrokerController(cfg)
        ctrl.start()
        hung = []
        try:
            for turn in range(40):
                svc = ha.HAService(ctrl)
                await svc.start("127.0.0.1", 0)
                deadline = asyncio.get_running_loop().time() + 10
                while not svc.master_connected:
                    assert asyncio.get_running_loop().time() < deadline, "the client did not connect"
                    await asyncio.sleep(0.01)
                for _ in range(turn % 7 + 3):  # a few loop turns into the flood
                    await asyncio.sleep(0)
                task = svc._tasks[0]
                task.cancel()  # once, as a shutdown does
                done, _ = await asyncio.wait({task}, timeout=3)
                if not done:
                    hung.append(turn)
                    break  # the flood is cut below: the client then ends on end-of-stream
                await svc.close_async()
        finally:
            server.close()
            for w in writers:
                w.transport.abort()
            if hung:
                await svc.close_async()
            ctrl.shutdown()
        return hung

    assert asyncio.run(main()) == []
