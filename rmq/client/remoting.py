"""Asyncio RocketMQ remoting client (SPEC §9 "clients ... talk to NameServers and brokers"):
one TCP connection per address, requests matched to responses by opaque, per-request
timeouts, oneway sends, and server-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE, ...) dispatched to registered processors.  Frames go through the
sans-IO codec in rmq.remoting."""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from typing import Awaitable, Callable, Optional, Union

from rmq.remoting import (FLAG_RESPONSE, MQ_VERSION_V4_9_4, CommandDecodeError, FrameDecoder,
                          FramingError, LanguageCode, RemotingCommand, ResponseCode,
                          request_code_name)

from rmq import native as _native

from .errors import RemotingConnectError, RemotingSendRequestError, RemotingTimeoutError

log = logging.getLogger("rmq.client.remoting")

#: Queued small frames are sent once this many bytes are waiting, before the end of the loop pass
#: (a window of a thousand async sends then leaves in pieces the broker starts on, not all at once).
WRITE_COALESCE_BYTES = 16 * 1024

#: A processor for requests the server sends us: (addr, request) -> response or None.
RequestProcessor = Callable[[str, RemotingCommand],
                            Union[Optional[RemotingCommand], Awaitable[Optional[RemotingCommand]]]]

#: The language this client announces.  RocketMQ's LanguageCode has PYTHON (3).
CLIENT_LANGUAGE = LanguageCode.PYTHON


async def wait_timeout(fut: "asyncio.Future", timeout: float, *, cancel_on_timeout: bool = True):
    """Await ``fut`` for at most ``timeout`` seconds (asyncio.TimeoutError after that).

    Unlike ``asyncio.wait_for`` on Python 3.11, a cancellation of the caller is never lost
    when ``fut`` completes at the same moment (CPython gh-86296)."""
    fut = asyncio.ensure_future(fut)
    try:
        done, _ = await asyncio.wait({fut}, timeout=max(timeout, 0))
    except asyncio.CancelledError:
        if cancel_on_timeout:
            fut.cancel()
        raise
    if not done:
        if cancel_on_timeout:
            fut.cancel()
        raise asyncio.TimeoutError()
    return fut.result()


def acl_rpc_hook(access_key: str, secret_key: str, security_token: str | None = None
                 ) -> Callable[[RemotingCommand], None]:
    """AclClientRPCHook with SessionCredentials: AccessKey (and SecurityToken) plus the HmacSHA1
    Signature over the sorted ext fields and the body, as a broker with aclEnable checks them."""
    from rmq.common.acl import sign_ext_fields

    def hook(cmd: RemotingCommand) -> None:
        sign_ext_fields(cmd.ext_fields, cmd.body, access_key, secret_key, security_token)
    return hook


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> (host, port); raises ValueError."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not 0 < int(port) <= 65535:
        raise ValueError(f"address {addr!r}: port out of range")
    return host, int(port)


class _Connection(asyncio.Protocol):
    """One TCP connection: frames in, responses to waiting futures, requests to processors."""

    def __init__(self, client: "RemotingClient", addr: str) -> None:
        self.client = client
        self.addr = addr
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self.last_used = time.monotonic()
        self._fd = -1
        self.close_reason: str | None = None
        #: small frames written during this pass of the event loop, sent together by _flush
        self._wbuf: list[bytes] | None = None
        self._wbuf_bytes = 0

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # plain TCP only (create_connection without ssl): the bytes go to the socket as they are
        sock = transport.get_extra_info("socket") if transport.get_extra_info("sslcontext") is None else None
        #: the socket's fd for small writes that keep the GIL (rmq.native.write_keep_gil); -1: off
        self._fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FramingError as exc:
            log.warning("bad frame from %s (%s); closing the connection", self.addr, exc)
            self.close_reason = f"not a RocketMQ remoting peer ({exc})"
            self.abort()
            return
        for payload in frames:
            try:
                cmd = RemotingCommand.decode(payload)
            except CommandDecodeError as exc:
                log.warning("undecodable command from %s (%s); closing the connection", self.addr, exc)
                self.close_reason = f"undecodable command ({exc})"
                self.abort()
                return
            if cmd.flag & FLAG_RESPONSE:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                elif fut is None:
                    log.debug("response for unknown opaque %d from %s (timed out?)", cmd.opaque, self.addr)
            else:
                self.client._dispatch_request(self, cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client._forget(self)
        why = self.close_reason or (str(exc) if exc else "")
        err = RemotingConnectError(f"connection to {self.addr} closed" + (f": {why}" if why else ""), self.addr, exc)
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._wake_writers(err)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(None)

    def _wake_writers(self, err: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                if err is None:
                    w.set_result(None)
                else:
                    w.set_exception(err)

    # -- writing
    def write(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd``: the small frames written during one pass of the event loop (the pull
        requests of several queues, a window of async sends) leave in one send at the end of it,
        or as soon as WRITE_COALESCE_BYTES are queued."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise RemotingSendRequestError(f"connection to {self.addr} is closed", self.addr)
        body = cmd.body
        self.last_used = time.monotonic()
        if body and len(body) > 65536:
            self._flush()                        # what was queued before goes first
            self.transport.write(cmd.encode_prefix())
            self.transport.write(body)
            return
        data = cmd.encode()
        if self._wbuf is not None:
            self._wbuf.append(data)
            self._wbuf_bytes += len(data)
            if self._wbuf_bytes >= WRITE_COALESCE_BYTES:
                self._flush()                    # a burst leaves in pieces: the peer starts on it
            return
        self._wbuf = [data]
        self._wbuf_bytes = len(data)
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        buf, self._wbuf = self._wbuf, None
        if not buf or self.closed or self.transport is None or self.transport.is_closing():
            return   # closed meanwhile: connection_lost fails the pending requests
        # nothing queued in the transport: sent now without releasing the GIL (the event loop would
        # then wait for the consume threads to hand it back)
        _native.write_keep_gil(self.transport, self._fd, buf[0] if len(buf) == 1 else b"".join(buf))

    async def drain(self) -> None:
        if self._paused and not self.closed:
            w = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(w)
            await w

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()                        # frames written before the abort still leave
            self.transport.abort()


class RemotingClient:
    """Async request/response over RocketMQ remoting, one connection per ``host:port``.

    Must be used from one event loop.  ``register_processor(code, fn)`` handles requests the
    server initiates; without a processor the client answers REQUEST_CODE_NOT_SUPPORTED
    (unless the request is oneway).
    """

    def __init__(self, *, connect_timeout: float = 3.0, language: str = CLIENT_LANGUAGE,
                 version: int = MQ_VERSION_V4_9_4) -> None:
        self.connect_timeout = connect_timeout
        self.language = language
        self.version = version
        self._conns: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._processors: dict[int, RequestProcessor] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        #: called with every outgoing request just before it is written (RocketMQ's RPCHook)
        self.rpc_hook: Optional[Callable[[RemotingCommand], None]] = None

    # ------------------------------------------------------------------ processors
    def register_processor(self, code: int, processor: RequestProcessor) -> None:
        """Handle server-initiated requests with ``code`` (sync or async callable)."""
        self._processors[code] = processor

    def _dispatch_request(self, conn: _Connection, cmd: RemotingCommand) -> None:
        proc = self._processors.get(cmd.code)
        if proc is None:
            log.debug("no processor for %s from %s", request_code_name(cmd.code), conn.addr)
            if not cmd.is_oneway:
                self._reply(conn, RemotingCommand.response_to(
                    cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f"request type {cmd.code} not supported", language=self.language,
                    version=self.version))
            return
        try:
            result = proc(conn.addr, cmd)
        except Exception as exc:  # a processor bug must not kill the connection
            log.exception("processor for %s failed", request_code_name(cmd.code))
            if not cmd.is_oneway:
                self._reply(conn, RemotingCommand.response_to(
                    cmd, ResponseCode.SYSTEM_ERROR, str(exc), language=self.language, version=self.version))
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish_async(conn, cmd, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif result is not None and not cmd.is_oneway:
            self._reply(conn, result)

    async def _finish_async(self, conn: _Connection, cmd: RemotingCommand, aw: Awaitable) -> None:
        try:
            result = await aw
        except Exception as exc:
            log.exception("processor for %s failed", request_code_name(cmd.code))
            result = RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc),
                                                 language=self.language, version=self.version)
        if result is not None and not cmd.is_oneway:
            self._reply(conn, result)

    def _reply(self, conn: _Connection, response: RemotingCommand) -> None:
        try:
            conn.write(response)
        except RemotingSendRequestError:
            log.debug("could not answer %s: connection closed", conn.addr)

    # ------------------------------------------------------------------ connections
    async def _get_connection(self, addr: str, timeout: float) -> _Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RemotingConnectError("remoting client is closed", addr)
        pending = self._connecting.get(addr)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(addr))
            self._connecting[addr] = pending
            pending.add_done_callback(lambda f, a=addr: (self._connecting.pop(a, None),
                                                         f.cancelled() or f.exception()))
        return await wait_timeout(pending, max(timeout, 0.001), cancel_on_timeout=False)

    async def _connect(self, addr: str) -> _Connection:
        try:
            host, port = split_addr(addr)
        except ValueError as exc:
            raise RemotingConnectError(str(exc), addr) from None
        loop = asyncio.get_running_loop()
        try:
            _, conn = await wait_timeout(
                loop.create_connection(lambda: _Connection(self, addr), host, port), self.connect_timeout)
        except asyncio.TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {self.connect_timeout}s", addr) from None
        except OSError as exc:
            if isinstance(exc, ConnectionRefusedError):
                reason = "connection refused"
            elif exc.strerror:
                reason = exc.strerror.lower()
            elif exc.errno:
                reason = os.strerror(exc.errno).lower()
            else:
                reason = str(exc)
            raise RemotingConnectError(f"connect to {addr} failed: {reason}", addr, exc) from None
        if self._closed:
            conn.abort()
            raise RemotingConnectError("remoting client is closed", addr)
        self._conns[addr] = conn
        return conn

    def _forget(self, conn: _Connection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]

    def close_connection(self, addr: str) -> None:
        """Drop the connection to ``addr`` (pending requests fail)."""
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.abort()

    @property
    def addresses(self) -> list[str]:
        """Addresses with an open connection."""
        return list(self._conns)

    # ------------------------------------------------------------------ requests
    def _stamp(self, cmd: RemotingCommand) -> RemotingCommand:
        cmd.language = self.language
        cmd.version = self.version
        if self.rpc_hook is not None:  # AclClientRPCHook: sign with the session credentials
            self.rpc_hook(cmd)
        return cmd

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` to ``addr`` and return the response (any code).

        Raises RemotingConnectError, RemotingSendRequestError or RemotingTimeoutError."""
        start = time.monotonic()
        try:
            conn = await self._get_connection(addr, timeout)
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(f"connect to {addr} did not finish in {timeout:.3f}s", addr) from None
        remaining = timeout - (time.monotonic() - start)
        if remaining <= 0:
            raise RemotingTimeoutError(f"request to {addr} timed out while connecting", addr)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._stamp(request)
        opaque = request.opaque
        conn.pending[opaque] = fut
        handle = loop.call_later(remaining, _expire, fut)
        try:
            conn.write(request)
            if conn._paused:
                await conn.drain()
            return await fut
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(
                f"wait response from {addr} for {request_code_name(request.code)} timed out "
                f"after {int(timeout * 1000)}ms", addr) from None
        finally:
            handle.cancel()
            conn.pending.pop(opaque, None)

    async def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``request`` with the oneway flag; no response is awaited."""
        try:
            conn = await self._get_connection(addr, timeout)
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(f"connect to {addr} did not finish in {timeout:.3f}s", addr) from None
        self._stamp(request)
        request.mark_oneway_rpc()
        conn.write(request)
        if conn._paused:
            await wait_timeout(conn.drain(), timeout)

    async def close(self) -> None:
        """Close every connection and fail their pending requests."""
        self._closed = True
        for fut in list(self._connecting.values()):
            fut.cancel()
        for conn in list(self._conns.values()):
            conn.abort()
        self._conns.clear()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.sleep(0)


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())
