"""A reusable asyncio RocketMQ remoting server and client (SPEC §3, §4, §9): one FrameDecoder per
connection, dispatch by request code, responses carry the request's opaque; server-initiated requests."""
from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import time
from typing import Any, Awaitable, Callable, Union

from ..common.log_limit import RateLimitedLog, host_of, reason_of
from ..remoting import (DEFAULT_MAX_FRAME_SIZE, FLAG_ONEWAY, FLAG_RESPONSE, BodyDecodeError,
                        CommandDecodeError, CommandEncodeError, FrameDecoder, FramingError,
                        HeaderFieldError, RemotingCommand, ResponseCode, SerializeType,
                        request_code_name)

log = logging.getLogger("rmq.remoting")
# bad frames and refused connections: a client in a loop gets 5 lines, then one per 10 s (issue 22)
closing_log = RateLimitedLog(log, "connections closed", prefix="remoting listener: ")
bad_body_log = RateLimitedLog(log, "undecodable bodies", prefix="remoting listener: ")

ProcessorResult = Union[RemotingCommand, None, Awaitable[Union[RemotingCommand, None]]]
#: A processor gets the connection and the request; it returns the response (or None for no
#: response), or an awaitable of it (then it runs as its own task, so a held pull never blocks
#: the other requests of that connection).
Processor = Callable[["RemotingConnection", RemotingCommand], ProcessorResult]

#: Requests of one connection that may be running at once before the server answers SYSTEM_BUSY.
MAX_INFLIGHT_PER_CONNECTION = 4096
# a reply body larger than this is written on its own rather than joined into the read's batch
_BATCH_BODY_MAX = 64 * 1024


class RemotingTimeout(Exception):
    """No response arrived for an invoke within its timeout."""


class RemotingConnectError(ConnectionError):
    """A connection to a remote address could not be made (or broke)."""


def format_addr(sockaddr: Any) -> str:
    """("1.2.3.4", 5) -> "1.2.3.4:5" (RemotingHelper.parseChannelRemoteAddr)."""
    if isinstance(sockaddr, (tuple, list)) and len(sockaddr) >= 2:
        return f"{sockaddr[0]}:{sockaddr[1]}"
    return str(sockaddr)


def split_addr(addr: str) -> tuple[str, int]:
    """"host:port" -> (host, port); raises ValueError naming the address."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {addr!r}: expected host:port")
    return host.strip("[]"), int(port)


class RemotingConnection(asyncio.Protocol):
    """One TCP connection (a Netty Channel in RocketMQ): frames in, commands out.

    Requests are handed to the owner's dispatcher; responses are matched to pending invokes by
    opaque. ``serialize_type`` follows what the peer last sent, so a server-initiated request
    (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) reaches a JSON-only client as JSON.
    """

    def __init__(self, dispatcher: "Dispatcher", *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.dispatcher = dispatcher
        self.decoder = FrameDecoder(max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.remote_addr = "?"
        self.remote_host: tuple[str, int] = ("0.0.0.0", 0)
        self.local_addr = "?"
        self.serialize_type = SerializeType.JSON
        self.language: str | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = False
        self.created = time.monotonic()
        self.last_active = self.created
        self.last_frame = self.created  # last whole request in or response out (idle scan)
        self.inflight = 0
        self.attrs: dict[str, Any] = {}
        self._lost: asyncio.Future | None = None
        # while data_received runs: the replies of this read, fast or not, written in one call at
        # its end (send() appends here instead of writing)
        self._batch: list | None = None

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self._lost = asyncio.get_running_loop().create_future()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, (tuple, list)) and len(peer) >= 2:
            self.remote_host = (str(peer[0]), int(peer[1]))
        self.remote_addr = format_addr(peer)
        self.local_addr = format_addr(transport.get_extra_info("sockname"))
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - not TCP (unix socket in some test)
                pass
        self.dispatcher.connection_made(self)

    def data_received(self, data: bytes) -> None:  # type: ignore[override]
        self.last_active = time.monotonic()
        try:
            payloads = self.decoder.feed(data)
        except FramingError as exc:
            closing_log.warning(self.remote_host[0], reason_of(f"bad frame: {exc}"),
                                "%s %s: bad frame (%s); closing this connection", self.dispatcher.name,
                                self.remote_addr, exc)
            self.abort()
            return
        if payloads:
            self.last_frame = self.last_active
        fast = self.dispatcher.fast_frame
        first = 0
        if fast is not None and len(payloads) == 1 and not self.closed and not self.decoder.broken:
            # the common read: one request the fast path answers, its reply written at once
            reply = fast(self, payloads[0])
            if reply is not None:
                if not self.closed:
                    self._write_replies([reply])
                return
            first = 1  # declined (nothing done): decoded and dispatched below, not offered again
        # the replies of this read, written in one call: the fast path's and those the processors
        # answer synchronously (send() adds them here); replies of awaited processors go out later
        replies: list = []
        self._batch = replies
        try:
            self._serve(payloads, fast, replies, first)
        finally:
            self._batch = None
        if replies and not self.closed:
            self._write_replies(replies)
        if self.decoder.broken and not self.closed:
            try:
                self.decoder.feed(b"")
            except FramingError as exc:
                closing_log.warning(self.remote_host[0], reason_of(f"bad frame: {exc}"),
                                    "%s %s: bad frame (%s); closing this connection", self.dispatcher.name,
                                    self.remote_addr, exc)
            self.abort()

    def _serve(self, payloads: list, fast, replies: list, declined: int = 0) -> None:
        """Answer the payloads of one read; the first `declined` of them the fast path has already
        declined."""
        for i, payload in enumerate(payloads):
            if self.closed:
                return
            if fast is not None and i >= declined:
                reply = fast(self, payload)
                if reply is not None:
                    replies.append(reply)
                    continue
            try:
                cmd = RemotingCommand.decode(payload)
            except CommandDecodeError as exc:
                closing_log.warning(self.remote_host[0], reason_of(f"undecodable command: {exc}"),
                                    "%s %s: undecodable command (%s); closing this connection",
                                    self.dispatcher.name, self.remote_addr, exc)
                self.abort()
                return
            if cmd.flag & FLAG_RESPONSE:
                self._on_response(cmd)
            else:
                self.serialize_type = cmd.serialize_type
                self.language = cmd.language
                self.dispatcher.dispatch(self, cmd)

    def eof_received(self) -> bool:  # type: ignore[override]
        return False  # close our side too

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        self.closed = True
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectError(f"connection to {self.remote_addr} closed"))
        self.pending.clear()
        self.dispatcher.connection_lost(self)

    def pause_writing(self) -> None:  # type: ignore[override]
        # The peer reads slower than we answer: stop reading its requests until it catches up.
        if self.transport is not None and not self.closed:
            try:
                self.transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass

    def resume_writing(self) -> None:  # type: ignore[override]
        if self.transport is not None and not self.closed:
            try:
                self.transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    # ------------------------------------------------------------------ sending
    def _write_replies(self, replies: list) -> None:
        """Whole response frames, in one write; emptied."""
        if not (self.closed or self.transport is None or self.transport.is_closing()):
            self.transport.write(replies[0] if len(replies) == 1 else b"".join(replies))
        replies.clear()

    def send(self, cmd: RemotingCommand) -> bool:
        """Write one command; False when the connection is gone or the command cannot be encoded."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        body = cmd.body
        try:
            prefix = cmd.encode_prefix(len(body) if body else 0)
        except CommandEncodeError as exc:
            log.error("%s %s: cannot encode %r: %s", self.dispatcher.name, self.remote_addr, cmd, exc)
            return False
        self.last_frame = time.monotonic()
        batch = self._batch
        if batch is not None:
            if body and len(body) > _BATCH_BODY_MAX:  # a large body is not copied into a join
                self._write_replies(batch)
            else:
                batch.append(prefix)
                if body:
                    batch.append(body)
                return True
        if body:
            self.transport.writelines((prefix, body))
        else:
            self.transport.write(prefix)
        return True

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and await its response (matched by opaque)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        opaque = cmd.opaque
        self.pending[opaque] = fut
        try:
            if not self.send(cmd):
                raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the response when the
                # caller's cancellation arrives in the same loop turn (CPython gh-86296), and a loop
                # that invokes (SlaveSynchronize, registerBrokerAll) then never stops
                async with asyncio.timeout(timeout):
                    return await fut
            except TimeoutError:
                raise RemotingTimeout(f"no response from {self.remote_addr} to "
                                      f"{request_code_name(cmd.code)} within {timeout:.1f}s") from None
        finally:
            self.pending.pop(opaque, None)

    def invoke_oneway(self, cmd: RemotingCommand) -> bool:
        cmd.flag |= FLAG_ONEWAY
        return self.send(cmd)

    def new_request(self, code: int, ext_fields: dict | None = None, body: bytes = b"", **kw) -> RemotingCommand:
        """A request for this peer, in the serialize type it speaks."""
        return RemotingCommand.request(code, ext_fields, body, serialize_type=self.serialize_type, **kw)

    def _on_response(self, cmd: RemotingCommand) -> None:
        fut = self.pending.pop(cmd.opaque, None)
        if fut is None:
            log.debug("%s %s: response with unknown opaque %d (late or unsolicited)",
                      self.dispatcher.name, self.remote_addr, cmd.opaque)
            return
        if not fut.done():
            fut.set_result(cmd)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self, timeout: float = 5.0) -> None:
        if self._lost is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._lost), timeout)
            except asyncio.TimeoutError:
                pass

    def __repr__(self) -> str:
        return f"<RemotingConnection {self.remote_addr}{' closed' if self.closed else ''}>"


class Dispatcher:
    """Request code -> processor table shared by the server and the client side."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.processors: dict[int, Processor] = {}
        self.default_processor: Processor | None = None
        self.close_listeners: list[Callable[[RemotingConnection], None]] = []
        self.open_listeners: list[Callable[[RemotingConnection], None]] = []
        self.connections: set[RemotingConnection] = set()
        self._tasks: set[asyncio.Task] = set()
        self.max_inflight = MAX_INFLIGHT_PER_CONNECTION
        #: called with (connection, request) before any processor (RocketMQ's RPCHook doBeforeRequest,
        #: e.g. the ACL of rmq/server/acl.py): a response refuses the request, None lets it through
        self.request_check: Callable[[RemotingConnection, RemotingCommand], RemotingCommand | None] | None = None
        #: called with (connection, frame payload) before a request is decoded: the whole response
        #: frame when it answered the request itself (the send fast path), None to decode and dispatch
        self.fast_frame: Callable[[RemotingConnection, bytes], bytes | None] | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    def register_many(self, table: dict[int, Processor]) -> None:
        for code, fn in table.items():
            self.register(code, fn)

    # ------------------------------------------------------------------ connection events
    def connection_made(self, conn: RemotingConnection) -> None:
        self.connections.add(conn)
        for fn in list(self.open_listeners):
            try:
                fn(conn)
            except Exception:  # noqa: BLE001 - a listener bug must not break the connection
                log.exception("%s: connection-open listener failed", self.name)

    def connection_lost(self, conn: RemotingConnection) -> None:
        if conn not in self.connections:
            return
        self.connections.discard(conn)
        for fn in list(self.close_listeners):
            try:
                fn(conn)
            except Exception:  # noqa: BLE001
                log.exception("%s: connection-close listener failed", self.name)

    # ------------------------------------------------------------------ requests
    def dispatch(self, conn: RemotingConnection, req: RemotingCommand) -> None:
        if self.request_check is not None:
            try:
                refused = self.request_check(conn, req)
            except Exception as exc:  # noqa: BLE001 - a failing check refuses, it does not let through
                refused = self.error_response(conn, req, exc)
            if refused is not None:
                self.reply(conn, req, refused)
                return
        fn = self.processors.get(req.code, self.default_processor)
        if fn is None:
            log.debug("%s %s: request code %d not supported", self.name, conn.remote_addr, req.code)
            self.reply(conn, req, RemotingCommand.response_to(
                req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {req.code} not supported"))
            return
        try:
            result = fn(conn, req)
        except Exception as exc:  # noqa: BLE001 - turned into an error response
            result = self.error_response(conn, req, exc)
        if inspect.isawaitable(result):
            if conn.inflight >= self.max_inflight:
                if inspect.iscoroutine(result):
                    result.close()
                self.reply(conn, req, RemotingCommand.response_to(
                    req, ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD] {conn.inflight} requests of this connection are in progress"))
                return
            conn.inflight += 1
            task = asyncio.get_running_loop().create_task(self._finish(conn, req, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self.reply(conn, req, result)

    async def _finish(self, conn: RemotingConnection, req: RemotingCommand, aw) -> None:
        try:
            resp = await aw
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            resp = self.error_response(conn, req, exc)
        finally:
            conn.inflight -= 1
        self.reply(conn, req, resp)

    def reply(self, conn: RemotingConnection, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        if resp is None or req.flag & FLAG_ONEWAY:
            return
        resp.opaque = req.opaque
        resp.flag |= FLAG_RESPONSE
        resp.serialize_type = req.serialize_type
        conn.send(resp)

    def error_response(self, conn: RemotingConnection, req: RemotingCommand, exc: BaseException) -> RemotingCommand:
        if isinstance(exc, HeaderFieldError):
            log.debug("%s %s: %s", self.name, conn.remote_addr, exc)
            return RemotingCommand.response_to(req, exc.response_code, exc.remark)
        if isinstance(exc, BodyDecodeError):
            bad_body_log.info(host_of(conn), f"{request_code_name(req.code)} body", "%s %s: %s body: %s",
                              self.name, conn.remote_addr, request_code_name(req.code), exc)
            return RemotingCommand.response_to(req, ResponseCode.SYSTEM_ERROR, str(exc))
        log.error("%s %s: processing %s failed", self.name, conn.remote_addr, request_code_name(req.code),
                  exc_info=exc)
        return RemotingCommand.response_to(req, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    async def cancel_tasks(self) -> None:
        await cancel_and_wait(list(self._tasks))


#: cancel_and_wait gives cancelled tasks this long before it logs them and returns.
CANCEL_BOUND_S = 5.0


async def cancel_and_wait(tasks, bound_s: float = CANCEL_BOUND_S) -> None:
    """Cancel every task, then wait for them to end; what they raise (their cancellation included)
    is dropped: a closing listener only needs them gone. A task still running 0.1 s later is
    cancelled again (one that swallowed its cancellation, as asyncio.wait_for does on Python 3.11
    when the result arrives in the same loop turn, CPython gh-86296); after `bound_s` the ones left
    are logged, with the line each waits on, and the caller goes on. The caller's own cancellation
    is not swallowed."""
    tasks = [t for t in tasks if t is not asyncio.current_task()]
    pending = {t for t in tasks if not t.done()}
    for t in pending:
        t.cancel()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while pending:
        left = deadline - loop.time()
        if left <= 0:
            log.error("%d task(s) still running %.0f s after they were cancelled; leaving them: %s", len(pending),
                      bound_s, "; ".join(sorted(_where(t) for t in pending)))
            break
        _, pending = await asyncio.wait(pending, timeout=min(0.1, left))
        for t in pending:
            t.cancel()
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: no "exception was never retrieved" at exit


def _where(task: asyncio.Task) -> str:
    """A task's name and the line it is suspended at (for the log)."""
    frames = task.get_stack(limit=1)
    if not frames:
        return task.get_name()
    f = frames[-1]
    return f"{task.get_name()} at {f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}"


class RemotingServer(Dispatcher):
    """NettyRemotingServer in asyncio: `register(code, fn)`, `await start(host, port)`,
    `await close_async()`. Bad input on one connection closes that connection only."""

    def __init__(self, name: str = "remoting", *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_idle_s: float = 120.0, max_connections: int = 0) -> None:
        super().__init__(name)
        self.max_frame_size = max_frame_size
        #: serverChannelMaxIdleTimeSeconds: no whole request in, none running and no response out
        #: for this long closes the connection (a slowloris trickling one frame never completes one)
        self.max_idle_s = max_idle_s
        self.max_connections = max_connections  # serverMaxConnections (0 = no cap)
        self.refused = 0
        self._idle_task: asyncio.Task | None = None
        self.server: asyncio.base_events.Server | None = None
        self.address = ""
        self.port = 0

    def connection_made(self, conn: RemotingConnection) -> None:
        if self.max_connections and len(self.connections) >= self.max_connections:
            self.refused += 1
            # the listener is full, whoever the peers are: one key for all of them
            closing_log.warning("any peer", f"{self.name} serverMaxConnections",
                                "%s %s: %d connections open (serverMaxConnections); closing new connections "
                                "(%d refused so far)", self.name, conn.remote_addr, len(self.connections),
                                self.refused)
            conn.abort()
            return
        super().connection_made(conn)

    async def _scan_idle(self) -> None:
        """NettyServerConfig.serverChannelMaxIdleTimeSeconds: close idle channels (IdleStateHandler)."""
        while True:
            await asyncio.sleep(min(max(self.max_idle_s / 4, 0.05), 5.0))
            now = time.monotonic()
            for c in list(self.connections):
                if not c.closed and c.inflight == 0 and not c.pending and now - c.last_frame > self.max_idle_s:
                    log.warning("%s %s: IDLE for %.0f s (serverChannelMaxIdleTimeSeconds %s, %d bytes of an "
                                "unfinished frame buffered); closing", self.name, c.remote_addr, now - c.last_frame,
                                f"{self.max_idle_s:g}", c.decoder.buffered)
                    c.abort()

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None) -> str:
        loop = asyncio.get_running_loop()
        factory = lambda: RemotingConnection(self, max_frame_size=self.max_frame_size)  # noqa: E731
        if sock is not None:
            self.server = await loop.create_server(factory, sock=sock, backlog=1024)
        else:
            self.server = await loop.create_server(factory, host, port, reuse_address=True, backlog=1024)
        sockname = self.server.sockets[0].getsockname()
        self.port = int(sockname[1])
        self.address = f"{sockname[0]}:{self.port}"
        if self.max_idle_s > 0:
            self._idle_task = loop.create_task(self._scan_idle(), name=f"{self.name}-idle-scan")
        log.info("%s listening on %s", self.name, self.address)
        return self.address

    async def close_async(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
            await asyncio.gather(self._idle_task, return_exceptions=True)
            self._idle_task = None
        await self.cancel_tasks()
        conns = list(self.connections)
        for c in conns:
            c.close()
        # together, not one after the other: a peer that does not read (stopped, or its buffer
        # full) keeps its connection open until aborted, and there may be many of them
        await asyncio.gather(*(c.wait_closed(1.0) for c in conns))
        for c in conns:
            if not c.closed:
                c.abort()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2.0)
            except asyncio.TimeoutError:  # pragma: no cover
                pass
            self.server = None


class RemotingClient(Dispatcher):
    """NettyRemotingClient in asyncio: one lazily opened connection per address, reused;
    `invoke(addr, request)` awaits the response. Requests the peer sends us are dispatched
    through the same processor table as a server's."""

    def __init__(self, name: str = "remoting-client", *, connect_timeout: float = 3.0,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        super().__init__(name)
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._conns: dict[str, RemotingConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.closed = False

    async def connection(self, addr: str) -> RemotingConnection:
        if self.closed:
            raise RemotingConnectError(f"{self.name} is closed")
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            try:
                host, port = split_addr(addr)
            except ValueError as exc:
                raise RemotingConnectError(str(exc)) from None
            loop = asyncio.get_running_loop()
            try:
                _, conn = await asyncio.wait_for(loop.create_connection(
                    lambda: RemotingConnection(self, max_frame_size=self.max_frame_size), host, port),
                    self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                raise RemotingConnectError(f"cannot connect to {addr}: {exc or 'timeout'}") from None
            self._conns[addr] = conn
            return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> bool:
        conn = await self.connection(addr)
        return conn.invoke_oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close_async(self) -> None:
        self.closed = True
        await self.cancel_tasks()
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        await asyncio.gather(*(c.wait_closed(1.0) for c in conns))
        for c in conns:
            if not c.closed:
                c.abort()


__all__ = ["RemotingServer", "RemotingClient", "RemotingConnection", "Dispatcher", "Processor",
           "RemotingTimeout", "RemotingConnectError", "format_addr", "split_addr"]
