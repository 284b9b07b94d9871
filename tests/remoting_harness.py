"""Test harness for the RocketMQ remoting listeners: an asyncio loop in a background thread hosting a
NameServer and brokers, and a small blocking remoting client speaking real frames over TCP."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time

from rmq.config import load_config
from rmq.remoting import FrameDecoder, RemotingCommand, RequestCode

STORE_SMALL = dict(mappedFileSizeCommitLog=1024 * 1024, mappedFileSizeConsumeQueue=20 * 1000,
                   maxMessageSize=64 * 1024, maxHashSlotNum=1000, maxIndexNum=4000)


class LoopThread:
    """An event loop in a daemon thread; `run(coro)` executes a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn, *args, timeout: float = 10.0):
        async def _c():
            return fn(*args)
        return self.run(_c(), timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def make_controller(root: str, **overrides):
    from rmq.broker.controller import BrokerController
    kw = dict(STORE_SMALL)
    kw.update(storePathRootDir=root, listenPort=0)
    kw.update(overrides)
    cfg = load_config(None, kw)
    ctrl = BrokerController(cfg)
    ctrl.start()
    return ctrl


class Cluster:
    """One NameServer plus brokers on 127.0.0.1 ephemeral ports, in one background loop."""

    def __init__(self, tmp_path, *, scan_interval_s: float = 10, broker_expiry_s: float = 120) -> None:
        from rmq.namesrv import start_namesrv_listener
        self.tmp = str(tmp_path)
        self.lt = LoopThread()
        self.namesrv, self.namesrv_addr = self.lt.run(start_namesrv_listener(
            "127.0.0.1", 0, scan_interval_s=scan_interval_s, broker_expiry_s=broker_expiry_s))
        self.brokers = []  # (controller, server, addr)

    def add_broker(self, name: str = "broker-a", **overrides):
        from rmq.server.broker_listener import start_remoting_listener
        overrides.setdefault("namesrvAddr", self.namesrv_addr)
        overrides.setdefault("brokerName", name)
        ctrl = make_controller(os.path.join(self.tmp, name), **overrides)
        srv, addr = self.lt.run(start_remoting_listener(ctrl, "127.0.0.1", 0))
        self.brokers.append((ctrl, srv, addr))
        return ctrl, srv, addr

    def wait_registered(self, broker_name: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lt.call(lambda: broker_name in self.namesrv.route_info.broker_addr_table):
                return
            time.sleep(0.02)
        raise AssertionError(f"{broker_name} did not register with the NameServer")

    def close(self) -> None:
        for ctrl, srv, _ in self.brokers:
            try:
                self.lt.run(srv.close_async())
            finally:
                ctrl.shutdown()
        self.lt.run(self.namesrv.close_async())
        self.lt.stop()


class SyncClient:
    """A blocking remoting client for tests: request() sends a command and reads its response."""

    def __init__(self, addr: str, timeout: float = 10.0) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.backlog: list[RemotingCommand] = []  # commands read while waiting for another

    def send(self, cmd: RemotingCommand) -> None:
        self.sock.sendall(cmd.encode())

    def read(self, timeout: float | None = None) -> RemotingCommand:
        if self.backlog:
            return self.backlog.pop(0)
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            frames = self.decoder.feed(data)
            if frames:
                cmds = [RemotingCommand.decode(f) for f in frames]
                self.backlog.extend(cmds[1:])
                return cmds[0]

    def request(self, code: int, ext: dict | None = None, body: bytes = b"", *, timeout: float = 10.0,
                **kw) -> RemotingCommand:
        cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body, **kw)
        self.send(cmd)
        deadline = time.monotonic() + timeout
        kept = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response to code {code}")
                resp = self.read(left)
                if resp.is_response and resp.opaque == cmd.opaque:
                    return resp
                kept.append(resp)
        finally:
            self.backlog[:0] = kept

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def send_message(client: SyncClient, topic: str, body: bytes, *, tags: str | None = None, keys: str | None = None,
                 queue_id: int = 0, group: str = "PG", props: dict | None = None, code: int = RequestCode.SEND_MESSAGE_V2,
                 batch: bool = False, sys_flag: int = 0):
    p = dict(props or {})
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    p.setdefault("WAIT", "true")
    props_s = "".join(f"{k}\x01{v}\x02" for k, v in p.items())
    v1 = dict(producerGroup=group, topic=topic, defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=queue_id,
              sysFlag=sys_flag, bornTimestamp=int(time.time() * 1000), flag=0, properties=props_s, reconsumeTimes=0,
              unitMode="false", batch="true" if batch else "false")
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        letters = dict(a="producerGroup", b="topic", c="defaultTopic", d="defaultTopicQueueNums", e="queueId",
                       f="sysFlag", g="bornTimestamp", h="flag", i="properties", j="reconsumeTimes", k="unitMode",
                       m="batch")
        ext = {k: v1[v] for k, v in letters.items()}
    else:
        ext = v1
    return client.request(code, ext, body)


def encode_batch(items: list[tuple[bytes, dict]]) -> bytes:
    """MessageDecoder.encodeMessages for tests."""
    out = []
    for body, props in items:
        pb = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(pb)
        out.append(struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb)
    return b"".join(out)
