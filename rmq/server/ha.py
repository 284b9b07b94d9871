"""HAService over asyncio: the master's HA listener and HAConnections, the slave's HAClient, and
SlaveSynchronize (SPEC §9; RocketMQ 4.x store/ha/HAService, HAConnection, HAClient and
broker/slave/SlaveSynchronize). The store side (byte ranges out, bytes in) is rmq/store/ha.py.

Wire, as RocketMQ 4.x after a handshake of this project's own:
  slave -> master  hello: "RHA1", nameLen(2), brokerName, slaveMaxOffset(8)
  master -> slave  hello: "RHA1", status(1), masterMaxOffset(8), nameLen(2), brokerName
  then (RocketMQ's frames) slave -> master: maxOffset(8) reports; master -> slave: phyOffset(8)
  size(4) + body, a size-0 frame being a heartbeat.
The handshake lets a master refuse a slave of another brokerName or one whose commitlog is ahead
of its own, and lets a slave that is pointed at a port that is not an HA port say so, each with a
log line on both sides.

When the master has aclEnable (beyond RocketMQ 4.x, whose HA port takes anyone who sends an
offset), a challenge-response comes between the two hellos:
  master -> slave  challenge: "RHA1", status 3 (AUTH_REQUIRED), masterMaxOffset 0 (withheld),
                   nameLen(2), brokerName, nonce(32 random bytes)
  slave -> master  answer: keyLen(2), accessKey, HMAC-SHA256(secretKey, nonce + brokerName +
                   slaveMaxOffset(8)) (32), brokerName and offset as in the slave's hello
  master -> slave  hello as above: status 0 and the real masterMaxOffset, or status 4
                   (AUTH_FAILED) and the connection closed.
The account (the slave's haAccessKey / haSecretKey) must be an `admin: true` account of the
master's plain_acl.yml: a slave receives every topic's messages. IP whitelists do not stand in for
the proof. Any other connection is refused with one log line naming the peer, the accessKey and
why, and is sent nothing of the commitlog. Nothing is encrypted (no TLS).
"""
from __future__ import annotations

import asyncio
import hashlib
import heapq
import hmac
import itertools
import logging
import secrets
import struct
import threading

from rmq.common.log_limit import RateLimitedLog, reason_of
from rmq.server.remoting_server import cancel_and_wait
from rmq.store import PutMessageStatus
from rmq.store import ha as store_ha

log = logging.getLogger("rmq.ha")
# refused HA connections: a client or a misconfigured slave retrying in a loop is summarised
refusal_log = RateLimitedLog(log, "refused HA connections", prefix="HA: ")

MAGIC = b"RHA1"
HELLO_OK, HELLO_NAME_MISMATCH, HELLO_SLAVE_AHEAD, HELLO_AUTH_REQUIRED, HELLO_AUTH_FAILED = 0, 1, 2, 3, 4
HELLO_STATUS_TEXT = {HELLO_OK: "ok", HELLO_NAME_MISMATCH: "brokerName differs",
                     HELLO_SLAVE_AHEAD: "slave commitlog ahead of the master's",
                     HELLO_AUTH_REQUIRED: "authentication required", HELLO_AUTH_FAILED: "authentication failed"}
NONCE_LEN = 32
MAC_LEN = 32                           # HMAC-SHA256
OFFSET = struct.Struct(">q")
HEADER = struct.Struct(">qi")          # phyOffset, bodySize
NAME_LEN = struct.Struct(">H")
MASTER_HELLO = struct.Struct(">4sBq")  # magic, status, masterMaxOffset (then nameLen, name)
MAX_NAME = 255
HANDSHAKE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0
RECONNECT_DELAY_S = 5.0                # HAClient waits this long after a failed connection
MAX_FRAME_BODY = 4 * 1024 * 1024       # the slave's read buffer in RocketMQ (READ_MAX_BUFFER_SIZE)


async def _within(aw, timeout: float):
    """`await aw`, TimeoutError after `timeout` s. Not asyncio.wait_for: on Python 3.11 that returns
    the result when a cancellation arrives in the same loop turn as the result (CPython gh-86296),
    so a slave reading a backlog of frames (after a SIGSTOP/SIGCONT) swallowed the cancellation of
    its shutdown and kept replicating; asyncio.timeout lets every cancellation through."""
    async with asyncio.timeout(timeout):
        return await aw


class HAProtocolError(Exception):
    """The other side does not speak this HA protocol, refused the handshake, or sent a bad frame."""


def encode_slave_hello(broker_name: str, max_offset: int) -> bytes:
    name = broker_name.encode("utf-8")[:MAX_NAME]
    return MAGIC + NAME_LEN.pack(len(name)) + name + OFFSET.pack(max_offset)


def encode_master_hello(status: int, broker_name: str, max_offset: int) -> bytes:
    name = broker_name.encode("utf-8")[:MAX_NAME]
    return MASTER_HELLO.pack(MAGIC, status, max_offset) + NAME_LEN.pack(len(name)) + name


def ha_auth_mac(secret_key: str, nonce: bytes, broker_name: bytes | str, slave_offset: int) -> bytes:
    """The slave's answer to the master's challenge: HMAC-SHA256 keyed by the account's secretKey
    over nonce + brokerName (UTF-8, as in the hello) + slaveMaxOffset (8 bytes, big-endian)."""
    name = broker_name.encode("utf-8")[:MAX_NAME] if isinstance(broker_name, str) else broker_name
    return hmac.new(secret_key.encode("utf-8"), nonce + name + OFFSET.pack(slave_offset), hashlib.sha256).digest()


def encode_slave_auth(access_key: str, mac: bytes) -> bytes:
    key = access_key.encode("utf-8")[:MAX_NAME]
    return NAME_LEN.pack(len(key)) + key + mac


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise HAProtocolError(f"HA address {addr!r} is not host:port")
    return host, int(port)


class HAConnection:
    """One slave, on the master: reads its 8-byte offset reports, streams commitlog ranges to it."""

    def __init__(self, service: "HAService", reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.slave_ack_offset = -1
        self.next_transfer = -1
        self.wake = asyncio.Event()
        self.ready = False
        self.access_key: str | None = None  # the account the slave proved (aclEnable)

    async def run(self) -> None:
        svc = self.service
        try:
            if not await self._handshake():
                return
            self.ready = True
            svc.connections.add(self)
            reader_task = asyncio.ensure_future(self._read_reports())
            writer_task = asyncio.ensure_future(self._transfer())
            try:
                done, pending = await asyncio.wait({reader_task, writer_task}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # on the way out (this task cancelled at shutdown too), neither half stays behind
                await cancel_and_wait({reader_task, writer_task} - {t for t in (reader_task, writer_task) if t.done()})
            for t in done:
                exc = t.exception()
                if exc is not None and not isinstance(exc, (ConnectionError, asyncio.IncompleteReadError)):
                    log.error("HA: connection with slave %s failed: %r", self.peer, exc)
        except (ConnectionError, OSError) as exc:
            log.info("HA: slave %s: %s", self.peer, exc)
        finally:
            svc.connections.discard(self)
            if self.ready:
                log.info("HA: slave %s disconnected (acknowledged up to offset %d)", self.peer, self.slave_ack_offset)
                # commitlog bytes still buffered for a slave that stopped reading are of no use
                self.writer.transport.abort()
            else:
                self.writer.close()  # a refusal's answer still goes out

    def _refused(self, level: int, reason: str, msg: str, *args) -> None:
        """One refusal's log line, summarised when the same peer host keeps being refused (RateLimitedLog)."""
        refusal_log.log(level, self.peer.rsplit(":", 1)[0], reason, "HA: " + msg, *args)

    async def _handshake(self) -> bool:
        svc = self.service
        try:
            magic = await _within(self.reader.readexactly(4), HANDSHAKE_TIMEOUT_S)
        except asyncio.IncompleteReadError as exc:
            self._refused(logging.WARNING, "closed before the handshake",
                          "connection from %s closed before the HA handshake (%d bytes)", self.peer, len(exc.partial))
            return False
        except asyncio.TimeoutError:
            self._refused(logging.WARNING, "no handshake", "connection from %s sent no HA handshake within %.0f s; "
                          "closing", self.peer, HANDSHAKE_TIMEOUT_S)
            return False
        if magic != MAGIC:
            self._refused(logging.WARNING, "not the HA handshake", "connection from %s did not start with the HA "
                          "handshake (first bytes %r): not a slave of this protocol; closing it", self.peer, magic)
            return False
        try:
            (n,) = NAME_LEN.unpack(await _within(self.reader.readexactly(2), HANDSHAKE_TIMEOUT_S))
            if n > MAX_NAME:
                self._refused(logging.WARNING, "brokerName too long", "handshake from %s names a brokerName of %d "
                              "bytes (at most %d); closing", self.peer, n, MAX_NAME)
                return False
            raw = await _within(self.reader.readexactly(n + 8), HANDSHAKE_TIMEOUT_S)
        except asyncio.IncompleteReadError as exc:
            self._refused(logging.WARNING, "truncated handshake", "truncated HA handshake from %s (%d bytes); "
                          "closing", self.peer, 6 + len(exc.partial))
            return False
        except asyncio.TimeoutError:
            self._refused(logging.WARNING, "incomplete handshake", "incomplete HA handshake from %s after %.0f s; "
                          "closing", self.peer, HANDSHAKE_TIMEOUT_S)
            return False
        name = raw[:n].decode("utf-8", "replace")
        (slave_offset,) = OFFSET.unpack_from(raw, n)
        if svc.acl is not None and not await self._authenticate(svc.acl, raw[:n], name, slave_offset):
            return False
        master_max = store_ha.max_phy_offset(svc.store)
        status = HELLO_OK
        if name != svc.broker_name:
            status = HELLO_NAME_MISMATCH
            self._refused(logging.ERROR, "brokerName differs", "refused slave %s: its brokerName is %r, this "
                          "master's is %r", self.peer, name, svc.broker_name)
        elif slave_offset > master_max or slave_offset < 0:
            status = HELLO_SLAVE_AHEAD
            self._refused(logging.ERROR, "slave ahead", "refused slave %s of %s: its commitlog ends at offset %d, "
                          "ahead of this master's %d (it holds bytes this master never wrote; clear the slave's "
                          "store to resync)", self.peer, name, slave_offset, master_max)
        self.writer.write(encode_master_hello(status, svc.broker_name, master_max))
        await self.writer.drain()
        if status != HELLO_OK:
            return False
        self.slave_ack_offset = slave_offset
        self.next_transfer = store_ha.transfer_start_offset(svc.store, slave_offset)
        log.info("HA: slave %s of %s connected%s; it has offset %d, streaming from %d (master max %d)", self.peer,
                 name, f" as accessKey {self.access_key!r}" if self.access_key else "", slave_offset,
                 self.next_transfer, master_max)
        svc.notify_transfer_some(slave_offset)
        return True

    async def _authenticate(self, acl, name_raw: bytes, name: str, slave_offset: int) -> bool:
        """aclEnable: challenge the slave (see the module docstring); False, with one log line and
        an AUTH_FAILED hello when the peer still listens, when it does not prove an admin account."""
        svc = self.service
        nonce = secrets.token_bytes(NONCE_LEN)
        self.writer.write(encode_master_hello(HELLO_AUTH_REQUIRED, svc.broker_name, 0) + nonce)
        await self.writer.drain()
        access_key = None
        why = ""
        try:
            (n,) = NAME_LEN.unpack(await _within(self.reader.readexactly(2), HANDSHAKE_TIMEOUT_S))
            if not 0 < n <= MAX_NAME:
                why = f"its answer names an accessKey of {n} bytes (1 to {MAX_NAME})"
            else:
                raw = await _within(self.reader.readexactly(n + MAC_LEN), HANDSHAKE_TIMEOUT_S)
                access_key = raw[:n].decode("utf-8", "replace")
                acct = acl.current().accounts.get(access_key)
                if acct is None:
                    why = f"no account with this accessKey in {acl.path}"
                elif not hmac.compare_digest(ha_auth_mac(acct.secret_key, nonce, name_raw, slave_offset), raw[n:]):
                    why = "the HMAC does not match (wrong haSecretKey)"
                elif not acct.admin:
                    why = f"the account is not admin: true in {acl.path} (HA replication needs an admin account)"
        except (asyncio.IncompleteReadError, ConnectionError):
            why = ("it closed the connection instead of answering the challenge (a slave without haAccessKey/"
                   "haSecretKey, or a client of the old handshake)")
        except TimeoutError:
            why = f"it did not answer the challenge within {HANDSHAKE_TIMEOUT_S:.0f} s"
        if not why:
            self.access_key = access_key
            return True
        self._refused(logging.ERROR, "authentication: " + reason_of(why), "refused connection from %s (brokerName "
                      "%r, accessKey %r): %s; aclEnable requires HA authentication; closing it, nothing of the "
                      "commitlog sent", self.peer, name, access_key, why)
        if not self.writer.is_closing():
            self.writer.write(encode_master_hello(HELLO_AUTH_FAILED, svc.broker_name, 0))
        return False

    async def _read_reports(self) -> None:
        """ReadSocketService: the slave's 8-byte max-offset reports (its acknowledgements)."""
        svc = self.service
        timeout = svc.cfg.haHousekeepingInterval / 1000.0
        while True:
            try:
                raw = await _within(self.reader.readexactly(8), timeout)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    log.warning("HA: truncated frame from slave %s (%d of 8 bytes) before it closed", self.peer,
                                len(exc.partial))
                return
            except asyncio.TimeoutError:
                log.warning("HA: slave %s reported nothing for %.0f s (haHousekeepingInterval); closing", self.peer,
                            timeout)
                return
            (offset,) = OFFSET.unpack(raw)
            top = store_ha.max_phy_offset(svc.store)
            if offset < 0 or offset > top:
                log.error("HA: slave %s reports offset %d outside this master's commitlog [0, %d]; closing", self.peer,
                          offset, top)
                return
            self.slave_ack_offset = offset
            svc.notify_transfer_some(offset)

    async def _transfer(self) -> None:
        """WriteSocketService: commitlog ranges from next_transfer, heartbeats when idle."""
        svc = self.service
        store = svc.store
        batch = svc.cfg.haTransferBatchSize
        heartbeat = svc.cfg.haSendHeartbeatInterval / 1000.0
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        writer = self.writer
        while True:
            self.wake.clear()
            data = store_ha.get_commitlog_data(store, self.next_transfer, batch)
            if data is None:
                log.error("HA: offset %d for slave %s is no longer in this master's commitlog [%d, %d); closing",
                          self.next_transfer, self.peer, store.commitlog.min_offset, store.commitlog.max_offset)
                return
            if data:
                writer.write(HEADER.pack(self.next_transfer, len(data)))
                writer.write(data)
                await writer.drain()
                self.next_transfer += len(data)
                last_write = loop.time()
                continue
            now = loop.time()
            if now - last_write >= heartbeat:
                writer.write(HEADER.pack(self.next_transfer, 0))
                await writer.drain()
                last_write = now
            try:
                await _within(self.wake.wait(), min(0.1, max(0.001, heartbeat - (now - last_write))))
            except asyncio.TimeoutError:
                pass


class HAService:
    """Owns the master's HA listener (AcceptSocketService) and connections, the slave's HAClient,
    push2SlaveMaxOffset and the SYNC_MASTER waiters (GroupTransferService)."""

    def __init__(self, controller) -> None:
        self.controller = controller
        self.store = controller.store
        self.cfg = controller.cfg.store
        self.broker_name = controller.broker_config.brokerName
        self.role = self.cfg.brokerRole
        self.connections: set[HAConnection] = set()
        self.push2slave_max_offset = 0
        self._waiters: list = []
        self._seq = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._tasks: list[asyncio.Task] = []
        self._conn_tasks: set[asyncio.Task] = set()  # one per accepted connection (master)
        self._wake_pending = False
        self.address = ""
        # slave side
        self.master_ha_addr = self.cfg.haMasterAddress or ""
        self.learn_master_addr = not self.cfg.haMasterAddress
        self.master_connected = False
        self.last_error = ""
        bc = controller.broker_config
        self.access_key = getattr(bc, "haAccessKey", "")   # the slave's account (aclEnable masters)
        self.secret_key = getattr(bc, "haSecretKey", "")
        self.acl = None   # a master's PlainAccessValidator when aclEnable: slaves must authenticate

    @property
    def sync_master(self) -> bool:
        return self.role == "SYNC_MASTER"

    @property
    def is_slave(self) -> bool:
        return self.role == "SLAVE"

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> str:
        """Masters listen on host:port (0 = ephemeral); slaves start the HAClient. Returns the
        master's HA address ("" on a slave)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.is_slave:
            self._tasks.append(self._loop.create_task(self._client_loop(), name="HAClient"))
            return ""
        from rmq.server.acl import acl_validator
        self.acl = acl_validator(self.controller)
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        sock = self._server.sockets[0].getsockname()
        self.address = f"{sock[0]}:{sock[1]}"
        # wake the transfer when messages arrive (the long-polling listener is called after dispatch)
        earlier = self.store.message_arriving_listener

        def arriving(topic, queue_id, next_offset, _earlier=earlier):
            if _earlier is not None:
                _earlier(topic, queue_id, next_offset)
            self.wake_transfer()
        self.store.message_arriving_listener = arriving
        self._earlier_listener = (earlier, arriving)
        log.info("HA: %s %s listens for slaves on %s%s", self.role, self.broker_name, self.address,
                 f"; slaves authenticate with an admin account of {self.acl.path} (aclEnable)" if self.acl else "")
        return self.address

    async def close_async(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        earlier = getattr(self, "_earlier_listener", None)
        if earlier is not None and self.store.message_arriving_listener is earlier[1]:
            self.store.message_arriving_listener = earlier[0]
        if self._server is not None:
            self._server.close()
            # abort, not close: a slave that does not read (stopped, or slow) would keep a closed
            # transport open until its unsent bytes drain, and a drain() waiting on it forever
            for c in list(self.connections):
                c.writer.transport.abort()
            await cancel_and_wait(self._conn_tasks)
            try:
                await _within(self._server.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
            self._server = None
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    async def _accept(self, reader, writer) -> None:
        task = asyncio.current_task()
        self._conn_tasks.add(task)
        try:
            await HAConnection(self, reader, writer).run()
        except asyncio.CancelledError:
            pass  # close_async ends it; the task's end is all it wants (asyncio logs a cancelled callback task)
        finally:
            self._conn_tasks.discard(task)

    # ------------------------------------------------------------------ master: SYNC_MASTER waits
    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """HAService.isSlaveOK: a slave is connected and not more than haSlaveFallbehindMax behind."""
        return bool(self.connections) and master_put_where - self.push2slave_max_offset < self.cfg.haSlaveFallbehindMax

    def replica_in_sync(self) -> bool:
        """Whether this pair is in step, as far as this side knows: on a master, a slave is connected
        and within haSlaveFallbehindMax of the commitlog's end (isSlaveOK); on a slave, it is
        connected to its master (the Kafka listener's ISR, docs/ha.md)."""
        if self.is_slave:
            return self.master_connected
        return self.is_slave_ok(store_ha.max_phy_offset(self.store))

    def notify_transfer_some(self, offset: int) -> None:
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.push2slave_max_offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(True)

    def wake_transfer(self) -> None:
        """Tell every connection there is new data (from any thread)."""
        if threading.get_ident() == self._loop_thread:
            for c in self.connections:
                c.wake.set()
        elif self._loop is not None and not self._wake_pending:
            self._wake_pending = True

            def wake():
                self._wake_pending = False
                for c in self.connections:
                    c.wake.set()
            try:
                self._loop.call_soon_threadsafe(wake)
            except RuntimeError:  # loop closed
                pass

    async def wait_for_slave(self, end_offset: int, timeout_ms: int | None = None) -> PutMessageStatus:
        """CommitLog.handleHA for SYNC_MASTER: PUT_OK once a slave has reported an offset >= end_offset;
        FLUSH_SLAVE_TIMEOUT after syncFlushTimeout; SLAVE_NOT_AVAILABLE at once when no slave is
        connected (or the slave is more than haSlaveFallbehindMax behind)."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and loop is not self._loop:  # another loop: hop over
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                self.wait_for_slave(end_offset, timeout_ms), self._loop))
        if self.push2slave_max_offset >= end_offset:
            return PutMessageStatus.PUT_OK
        if not self.is_slave_ok(end_offset):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        fut = loop.create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), fut))
        self.wake_transfer()
        timeout = (timeout_ms if timeout_ms is not None else self.cfg.syncFlushTimeout) / 1000.0
        try:
            ok = await _within(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            fut.cancel()
            log.warning("HA: no slave acknowledged offset %d within syncFlushTimeout %d ms (slave at %d)",
                        end_offset, int(timeout * 1000), self.push2slave_max_offset)
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def runtime_info(self) -> dict:
        return {"haRole": self.role, "haAddress": self.address, "haConnections": len(self.connections),
                "push2SlaveMaxOffset": self.push2slave_max_offset, "haMasterAddress": self.master_ha_addr,
                "haMasterConnected": self.master_connected}

    # ------------------------------------------------------------------ slave: HAClient
    def update_master_address(self, ha_addr: str | None) -> None:
        """HAClient.updateMasterAddress, from the NameServer's answer (unless haMasterAddress is set)."""
        if self.learn_master_addr and ha_addr and ha_addr != self.master_ha_addr:
            log.info("HA: master HA address of %s is now %s (from the NameServer)", self.broker_name, ha_addr)
            self.master_ha_addr = ha_addr

    async def _client_loop(self) -> None:
        waited_for_addr = False
        while True:
            addr = self.master_ha_addr
            if not addr:
                if not waited_for_addr:
                    log.info("HA: slave %s waits for its master's HA address (haMasterAddress, or the NameServer)",
                             self.broker_name)
                    waited_for_addr = True
                await asyncio.sleep(0.5)
                continue
            try:
                await self._connect_and_run(addr)
                log.warning("HA: master %s closed the HA connection; reconnecting in %.0f s", addr, RECONNECT_DELAY_S)
            except HAProtocolError as exc:
                self.last_error = str(exc)
                log.error("HA: %s", exc)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("HA: connection to master %s failed: %s; retrying in %.0f s", addr,
                            exc or type(exc).__name__, RECONNECT_DELAY_S)
            finally:
                self.master_connected = False
            await asyncio.sleep(RECONNECT_DELAY_S)

    async def _connect_and_run(self, addr: str) -> None:
        host, port = _split_addr(addr)
        store = self.store
        reader, writer = await _within(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        try:
            mine = store_ha.max_phy_offset(store)
            writer.write(encode_slave_hello(self.broker_name, mine))
            await writer.drain()
            status, master_max, master_name = await self._read_master_hello(addr, reader)
            authenticated = False
            if status == HELLO_AUTH_REQUIRED:
                nonce = await self._read_handshake(addr, reader, NONCE_LEN)
                if not (self.access_key and self.secret_key):
                    raise HAProtocolError(
                        f"master {addr} ({master_name}) requires HA authentication (its aclEnable is on): set "
                        f"haAccessKey and haSecretKey in this slave's config to an admin account of the master's "
                        f"plain_acl.yml; retrying in {RECONNECT_DELAY_S:.0f} s")
                writer.write(encode_slave_auth(self.access_key, ha_auth_mac(self.secret_key, nonce, self.broker_name,
                                                                            mine)))
                await writer.drain()
                status, master_max, master_name = await self._read_master_hello(addr, reader)
                authenticated = True
            if status == HELLO_AUTH_FAILED:
                raise HAProtocolError(
                    f"master {addr} ({master_name}) refused this slave's HA authentication as accessKey "
                    f"{self.access_key!r}: a wrong haSecretKey, or not an admin account of its plain_acl.yml (its log "
                    f"says which); retrying in {RECONNECT_DELAY_S:.0f} s")
            if status == HELLO_NAME_MISMATCH:
                raise HAProtocolError(f"master {addr} is brokerName {master_name!r}, this slave is {self.broker_name!r}: "
                                      f"refused (a slave replicates the master of its own brokerName)")
            if status == HELLO_SLAVE_AHEAD:
                raise HAProtocolError(f"master {addr} ({master_name}) refused this slave: its commitlog ends at {mine}, "
                                      f"ahead of the master's {master_max}; clear this slave's store to resync")
            if status != HELLO_OK:
                raise HAProtocolError(f"master {addr} refused the handshake with status {status}")
            if authenticated:
                log.info("HA: slave %s authenticated to master %s as accessKey %r", self.broker_name, addr,
                         self.access_key)
            self.master_connected = True
            self.last_error = ""
            log.info("HA: slave %s connected to master %s; master max offset %d, slave max offset %d",
                     self.broker_name, addr, master_max, mine)
            await self._replicate(addr, reader, writer)
        finally:
            writer.close()

    @staticmethod
    async def _read_handshake(addr: str, reader, n: int) -> bytes:
        try:
            return await _within(reader.readexactly(n), HANDSHAKE_TIMEOUT_S)
        except asyncio.IncompleteReadError as exc:
            raise HAProtocolError(
                f"{addr} closed the connection during the HA handshake ({len(exc.partial)} bytes): not the "
                f"master's HA port (haListenPort, default listenPort + 1), or the master refused this slave "
                f"(see its log)") from None
        except TimeoutError:
            raise HAProtocolError(f"{addr} did not answer the HA handshake within {HANDSHAKE_TIMEOUT_S:.0f} s: "
                                  f"is haMasterAddress the master's HA port?") from None

    async def _read_master_hello(self, addr: str, reader) -> tuple[int, int, str]:
        """(status, masterMaxOffset, brokerName) of the master's hello (or challenge)."""
        head = await self._read_handshake(addr, reader, MASTER_HELLO.size)
        magic, status, master_max = MASTER_HELLO.unpack(head)
        if magic != MAGIC:
            raise HAProtocolError(f"{addr} answered {head[:4]!r}, not the HA handshake: haMasterAddress must be the "
                                  f"master's HA port (haListenPort, default listenPort + 1)")
        (n,) = NAME_LEN.unpack(await self._read_handshake(addr, reader, 2))
        master_name = (await self._read_handshake(addr, reader, n)).decode("utf-8", "replace")
        return status, master_max, master_name

    async def _replicate(self, addr: str, reader, writer) -> None:
        store = self.store
        loop = asyncio.get_running_loop()
        heartbeat = self.cfg.haSendHeartbeatInterval / 1000.0
        housekeeping = self.cfg.haHousekeepingInterval / 1000.0
        reported = store_ha.max_phy_offset(store)
        writer.write(OFFSET.pack(reported))
        await writer.drain()
        last_report = loop.time()
        # a frame holds at most haTransferBatchSize bytes, or one unit of up to maxMessageSize and more
        limit = max(MAX_FRAME_BODY, 2 * self.cfg.haTransferBatchSize, 2 * self.cfg.maxMessageSize)
        while True:
            try:
                head = await _within(reader.readexactly(HEADER.size), housekeeping)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise HAProtocolError(f"truncated HA frame from master {addr}: {len(exc.partial)} of "
                                          f"{HEADER.size} header bytes") from None
                return
            except asyncio.TimeoutError:
                raise HAProtocolError(f"master {addr} sent nothing for {housekeeping:.0f} s "
                                      f"(haHousekeepingInterval); reconnecting") from None
            phy, size = HEADER.unpack(head)
            if size < 0 or size > limit:
                raise HAProtocolError(f"HA frame from master {addr} announces {size} bytes (at most {limit}); "
                                      f"closing the connection")
            if size:
                try:
                    body = await _within(reader.readexactly(size), housekeeping)
                except asyncio.IncompleteReadError as exc:
                    raise HAProtocolError(f"truncated HA frame from master {addr}: {len(exc.partial)} of {size} "
                                          f"body bytes at offset {phy}") from None
                mine = store_ha.max_phy_offset(store)
                if mine != 0 and phy != mine:
                    raise HAProtocolError(f"master {addr} pushed offset {phy}, not this slave's max offset {mine}; "
                                          f"reconnecting")
                try:
                    reported = await loop.run_in_executor(None, store_ha.append_to_commitlog, store, phy, body)
                except store_ha.HAApplyError as exc:
                    raise HAProtocolError(f"bytes from master {addr} refused: {exc}") from None
                writer.write(OFFSET.pack(reported))
                await writer.drain()
                last_report = loop.time()
            elif loop.time() - last_report >= heartbeat:
                reported = store_ha.max_phy_offset(store)
                writer.write(OFFSET.pack(reported))
                await writer.drain()
                last_report = loop.time()


class SlaveSynchronize:
    """A slave copies the master's topic configs, consumer offsets, delay offsets and subscription
    groups every `interval_s` (SlaveSynchronize.syncAll over GET_ALL_TOPIC_CONFIG,
    GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG), signed with
    haAccessKey / haSecretKey when they are set (a master with aclEnable refuses unsigned ones)."""

    def __init__(self, controller, invoke, master_addr, interval_s: float) -> None:
        self.controller = controller
        self.invoke = invoke              # async (addr, RemotingCommand, timeout) -> RemotingCommand
        self.master_addr = master_addr    # () -> "host:port" of the master's remoting port, or None
        self.interval_s = interval_s
        self.syncs = 0
        self._failing = False

    async def run(self) -> None:
        while True:
            addr = self.master_addr()
            if addr:
                try:
                    await self.sync_all(addr)
                    if self._failing:
                        log.info("slave sync from master %s works again", addr)
                    self._failing = False
                except Exception as exc:  # noqa: BLE001 - keep syncing
                    if not self._failing:
                        log.warning("slave sync from master %s failed: %s", addr, exc)
                    self._failing = True
            await asyncio.sleep(self.interval_s if addr else 0.5)

    def _signed(self, ext: dict) -> dict:
        from rmq.common.acl import sign_ext_fields
        bc = self.controller.broker_config
        if getattr(bc, "haAccessKey", "") and getattr(bc, "haSecretKey", ""):
            sign_ext_fields(ext, None, bc.haAccessKey, bc.haSecretKey)  # a master with aclEnable checks these
        return ext

    async def _get(self, addr: str, code: int) -> bytes:
        from rmq.remoting import RemotingCommand, ResponseCode
        resp = await self.invoke(addr, RemotingCommand.request(code, self._signed({})), 3.0)
        if resp.code != ResponseCode.SUCCESS:
            raise HAProtocolError(f"request {code} answered {resp.code} {resp.remark}")
        return resp.body or b""

    async def sync_all(self, addr: str) -> None:
        from rmq.broker.topic_config import TopicConfig
        from rmq.broker.subscription_group import SubscriptionGroupConfig
        from rmq.remoting import RemotingCommand, RequestCode, ResponseCode, TopicConfigSerializeWrapper, fastjson
        ctrl = self.controller
        # syncTopicConfig: the master's table replaces ours when its dataVersion differs
        wrapper = TopicConfigSerializeWrapper.decode(await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        tcm = ctrl.topic_config_manager
        dv = wrapper.dataVersion
        if (tcm.data_version.get("timestamp"), tcm.data_version.get("counter")) != (dv.timestamp, dv.counter):
            with tcm.lock:
                old = tcm.table
                tcm.table = {name: TopicConfig(name, t.readQueueNums, t.writeQueueNums, t.perm, t.topicFilterType,
                                               t.topicSysFlag, bool(t.order),
                                               attributes=dict(old[name].attributes) if name in old else {})
                             for name, t in wrapper.topicConfigTable.items()}
                tcm.data_version = {"timestamp": dv.timestamp, "counter": dv.counter}
            tcm.persist()
            log.info("slave synced %d topic configs from master %s", len(tcm.table), addr)
        # syncConsumerOffset
        body = fastjson.loads(await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET),
                              what="ConsumerOffsetSerializeWrapper")
        table = body.get("offsetTable") if isinstance(body, dict) else None
        if isinstance(table, dict):
            om = ctrl.offset_manager
            with om.lock:
                for key, queues in table.items():
                    if isinstance(queues, dict):
                        om.offset_table[str(key)] = {int(q): int(o) for q, o in queues.items()}
            om.persist()
        # syncDelayOffset
        body = fastjson.loads(await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET) or b"{}", what="delayOffset")
        table = body.get("offsetTable") if isinstance(body, dict) else None
        if isinstance(table, dict):
            offs = ctrl.schedule_service.offsets
            with offs.lock:
                for level, off in table.items():
                    offs.offset_table[int(level)] = int(off)
            offs.persist()
        # syncSubscriptionGroupConfig
        body = fastjson.loads(await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
                              what="SubscriptionGroupWrapper")
        table = body.get("subscriptionGroupTable") if isinstance(body, dict) else None
        if isinstance(table, dict):
            sgm = ctrl.subscription_group_manager
            known = set(SubscriptionGroupConfig.__dataclass_fields__)
            with sgm.lock:
                for name, cfg in table.items():
                    if isinstance(cfg, dict):
                        kw = {k: v for k, v in cfg.items() if k in known and k != "groupName"}
                        sgm.table[str(name)] = SubscriptionGroupConfig(str(name), **kw)
            sgm.persist()
        # plugin config tables (the Kafka bridge's share groups): the master's copy replaces ours
        for name, table in list(getattr(ctrl, "config_tables", {}).items()):
            resp = await self.invoke(addr, RemotingCommand.request(RequestCode.GET_CONFIG_TABLE_EXT,
                                                                   self._signed({"name": name})), 3.0)
            if resp.code != ResponseCode.SUCCESS:  # a master without that plugin: nothing to copy
                log.debug("slave sync: master %s has no config table %s (%s)", addr, name, resp.remark)
                continue
            table.load(resp.body or b"")
        self.syncs += 1


__all__ = ["HAService", "HAConnection", "SlaveSynchronize", "HAProtocolError", "encode_slave_hello",
           "encode_master_hello", "MAGIC", "HEADER", "OFFSET"]
