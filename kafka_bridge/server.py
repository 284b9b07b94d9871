"""The Kafka listener hosted by the broker process: frames in, handlers, responses out (SPEC §11).

Requests on one connection are answered one at a time and in order, as a Kafka broker does.
A malformed frame or request closes that connection only (with a log line); other connections
are unaffected and the listener keeps running.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from time import perf_counter_ns

from rmq import native
from rmq.common.latency import LatencyHistogram
from rmq.common.log_limit import RateLimitedLog, reason_of

from . import protocol as kp
from . import authorizer, txn
from .bridge import Connection, KafkaBridge
from .handlers import (admin, fetch, fetch_frame, groups, groups_v2, metadata, operations, produce, produce_frame,
                       sasl, security, share)

log = logging.getLogger("kafka_bridge.server")
# bad input and refused connections: a client in a loop gets 5 lines, then one per 10 s (issue 22)
closing_log = RateLimitedLog(log, "connections closed", prefix="Kafka listener: ")

MAX_FRAME = 100 * 1024 * 1024  # socket.request.max.bytes (kafkaSocketRequestMaxBytes)
#: a connection whose peer has this many response bytes unread waits (asyncio's drain) before its next read
OUT_HIGH_WATER = 1 << 20

HANDLERS = {
    kp.PRODUCE: produce.handle_produce,
    kp.FETCH: fetch.handle_fetch,
    kp.LIST_OFFSETS: fetch.handle_list_offsets,
    kp.METADATA: metadata.handle_metadata,
    kp.OFFSET_COMMIT: groups.handle_offset_commit,
    kp.OFFSET_FETCH: groups.handle_offset_fetch,
    kp.FIND_COORDINATOR: metadata.handle_find_coordinator,
    kp.JOIN_GROUP: groups.handle_join_group,
    kp.HEARTBEAT: groups.handle_heartbeat,
    kp.LEAVE_GROUP: groups.handle_leave_group,
    kp.SYNC_GROUP: groups.handle_sync_group,
    kp.DESCRIBE_GROUPS: groups.handle_describe_groups,
    kp.LIST_GROUPS: groups.handle_list_groups,
    kp.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    kp.API_VERSIONS: metadata.handle_api_versions,
    kp.CREATE_TOPICS: admin.handle_create_topics,
    kp.DELETE_TOPICS: admin.handle_delete_topics,
    kp.INIT_PRODUCER_ID: groups.handle_init_producer_id,
    kp.DESCRIBE_CONFIGS: admin.handle_describe_configs,
    kp.ALTER_CONFIGS: admin.handle_alter_configs,
    kp.INCREMENTAL_ALTER_CONFIGS: admin.handle_incremental_alter_configs,
    kp.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    kp.CREATE_PARTITIONS: admin.handle_create_partitions,
    kp.DESCRIBE_CLUSTER: metadata.handle_describe_cluster,
    **txn.TXN_HANDLERS,
    **operations.HANDLERS,
    **security.HANDLERS,    # ACLs and SCRAM credentials
    **groups_v2.HANDLERS,   # KIP-848 consumer groups
    **share.HANDLERS,       # KIP-932 share groups
}
PRE_AUTH = {kp.API_VERSIONS, kp.SASL_HANDSHAKE, kp.SASL_AUTHENTICATE}
#: Bounds of KafkaBridge.api_usage, whose client part is whatever clients send (issue 16: a client
#: making up a new client id per connection must not grow the broker's memory without end).
API_USAGE_MAX_KEYS = 4096
API_USAGE_LABEL_MAX = 128
OTHER_CLIENTS = "(other clients)"


def count_api_usage(usage: dict, client: str, api_key: int, api_version: int) -> None:
    """Counts a request in `usage` ((client software or client id, api key, version) -> requests,
    docs/kafka-compat.md). The client label is cut to API_USAGE_LABEL_MAX characters; once the
    table holds API_USAGE_MAX_KEYS keys, a request under a new key counts as OTHER_CLIENTS (so the
    table stays under API_USAGE_MAX_KEYS plus one key per api version), with one warning."""
    key = (client[:API_USAGE_LABEL_MAX], api_key, api_version)
    n = usage.get(key)
    if n is None and len(usage) >= API_USAGE_MAX_KEYS:
        key = (OTHER_CLIENTS, api_key, api_version)
        n = usage.get(key)
    usage[key] = (n or 0) + 1
    if n is None and len(usage) == API_USAGE_MAX_KEYS:
        log.warning("Kafka API usage table full (%d client/api/version keys): requests of further clients are "
                    "counted as %r", API_USAGE_MAX_KEYS, OTHER_CLIENTS)


def observe_api_latency(table: dict, api_key: int, api_version: int, ns: int) -> None:
    """Adds one request's handling time to `table` ((api key, version) -> LatencyHistogram; bounded
    by the api keys and versions the codec decodes), which the console's /metrics exports as
    kafka_request_latency_seconds."""
    h = table.get((api_key, api_version))
    if h is None:
        h = table[(api_key, api_version)] = LatencyHistogram()
    h.observe_ns(ns)


def _fast_path_served(bridge, conn, hdr, t0: int) -> None:
    """The bookkeeping of a request a frame path (Produce, Fetch) answered, as the decoding path does
    it: its handling time, the connection's client id and the API usage count."""
    observe_api_latency(bridge.api_latency, hdr.api_key, hdr.api_version, perf_counter_ns() - t0)
    conn.client_id = hdr.client_id
    count_api_usage(bridge.api_usage, conn.software or conn.client_id or "?", hdr.api_key, hdr.api_version)


metadata.IMPLEMENTED.update(HANDLERS)


class KafkaServer:
    def __init__(self, bridge: KafkaBridge):
        self.bridge = bridge
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()
        #: connection task -> when it last completed a request (inf while one is being handled);
        #: connections.max.idle.ms closes the others, so a slowloris trickling one frame is cut off
        self.activity: dict[asyncio.Task, float] = {}
        self.idle_task: asyncio.Task | None = None
        self.refused = 0
        self.kick: _WriterKick | None = None  # the writer thread's wake, once per loop pass

    def _limit(self, key: str, default):
        cfg = getattr(self.bridge, "config", None)
        return getattr(cfg, key, default)

    async def _scan_idle(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 5.0))
            now = time.monotonic()
            for task, last in list(self.activity.items()):
                if now - last > idle_s and not task.done():
                    log.warning("closing idle Kafka connection %s (no request for %.0f ms, connections.max.idle.ms "
                                "= %d)", task.get_name(), (now - last) * 1000, idle_s * 1000)
                    self.activity.pop(task, None)
                    task.cancel()

    async def close_async(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.idle_task is not None:
            self.idle_task.cancel()
            await asyncio.gather(self.idle_task, return_exceptions=True)
        for t in list(self.connections):
            t.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()
        if self.bridge is not None:
            task = getattr(self.bridge, "retention_task", None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if self.bridge.cluster is not None:  # delete the published endpoint from the NameServers
                await self.bridge.cluster.close()
            self.bridge.close()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        peer = writer.get_extra_info("peername") or ("?", 0)
        cap = self._limit("kafkaMaxConnections", 0)
        if cap and len(self.connections) >= cap:
            self.refused += 1
            # the listener is full, whoever the peers are: one key for all of them
            closing_log.warning("any peer", "max.connections", "closing %s:%s: %d connections open (max.connections); "
                                "%d refused so far", peer[0], peer[1], len(self.connections), self.refused)
            writer.transport.abort()
            return
        task.set_name(f"{peer[0]}:{peer[1]}")
        self.connections.add(task)
        self.activity[task] = time.monotonic()
        conn = Connection(peer=(peer[0], peer[1]), authenticated=not sasl.sasl_enabled(self.bridge))
        acl = getattr(self.bridge, "acl", None)
        if acl is not None and acl.is_global_white(conn.peer[0]):
            conn.authenticated = True  # globalWhiteRemoteAddresses: no credentials, no ACL checks
            conn.extra["acl_white"] = True
        try:
            await self._serve_connection(reader, writer, conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # a handler bug must not take the listener down
            log.exception("connection %s:%s failed", *conn.peer)
        finally:
            self.connections.discard(task)
            self.activity.pop(task, None)
            writer.close()

    async def _serve_connection(self, reader, writer, conn: Connection) -> None:
        sock = writer.get_extra_info("socket")
        if self.kick is None:
            self.kick = _WriterKick(asyncio.get_running_loop())
        out = _Replies(writer, sock.fileno() if sock is not None else -1, self.kick)
        try:
            await self._serve_frames(reader, writer, conn, out)
        finally:
            out.close()

    async def _serve_frames(self, reader, writer, conn: Connection, out: _Replies) -> None:
        frames = kp.FrameDecoder(max_frame_size=self._limit("kafkaSocketRequestMaxBytes", MAX_FRAME))
        activity = self.activity
        task = asyncio.current_task()
        while True:
            data = await reader.read(1 << 18)
            if not data:
                return
            try:
                frames.feed(data)
                pending = list(frames.frames())
            except kp.FrameError as exc:
                closing_log.warning(conn.peer[0], reason_of(exc), "closing %s:%s: %s", *conn.peer, exc)
                return
            if not pending:
                continue
            activity[task] = math.inf  # being handled: not idle, however long a fetch waits
            # Responses of fast-path Produce requests are written together, once the frames of this
            # read are handled (one send for a client's pipelined requests), and before any other
            # request's handler runs, so the order stays the requests' and none waits behind a fetch.
            try:
                keep = await self._handle_frames(pending, conn, writer, out)
            finally:
                out.flush()
            if not keep:
                return
            if out.pending() > OUT_HIGH_WATER:
                await out.drain(OUT_HIGH_WATER // 4)
            activity[task] = time.monotonic()

    async def _handle_frames(self, pending: list, conn: Connection, writer, out: _Replies) -> bool:
        """The requests of one read, in order (_serve_connection). Fast-path Produce responses are
        collected in `out` and written before anything else is written or awaited. False when the
        connection must be closed."""
        bridge = self.bridge
        for frame in pending:
            if conn.sasl_v0_pending:
                # SaslHandshake v0: this frame is a raw SASL token, answered with a raw frame
                try:
                    reply, done = sasl.sasl_token(bridge, conn, frame)
                except sasl.SaslFailure as exc:
                    sasl.log_failure(conn, frame, exc)
                    return False
                conn.sasl_v0_pending = not done
                out.send([len(reply).to_bytes(4, "big"), reply])
                continue
            hdr = None
            try:
                hdr, body_at = kp.decode_request_header_checked(frame)
                if hdr.api_key == kp.PRODUCE and conn.authenticated:
                    # the common Produce request straight from the frame (handlers/produce_frame.py)
                    t0 = perf_counter_ns()
                    try:
                        parts = await produce_frame.handle_frame(bridge, conn, hdr, frame, body_at)
                    except produce_frame.Declined:
                        pass
                    else:
                        _fast_path_served(bridge, conn, hdr, t0)
                        if parts is not None:
                            out.extend(parts)
                        continue
                if hdr.api_key == kp.FETCH and conn.authenticated:
                    # the common Fetch straight from the frame (handlers/fetch_frame.py); what came
                    # before it goes out first, as it may wait for records
                    out.flush()
                    t0 = perf_counter_ns()
                    try:
                        reply = await fetch_frame.handle_frame(bridge, conn, hdr, frame, body_at)
                    except fetch_frame.Declined:
                        pass
                    else:
                        _fast_path_served(bridge, conn, hdr, t0)
                        out.send([reply])
                        continue
                req = kp.Request(hdr, kp.decode_request_body(hdr.api_key, hdr.api_version, frame, body_at))
            except kp.UnsupportedVersion as exc:
                if exc.header is not None and exc.header.api_key == kp.API_VERSIONS:
                    out.send([kp.encode_unsupported_api_versions(exc.header.correlation_id)])
                    continue
                closing_log.warning(conn.peer[0], reason_of(exc), "closing %s:%s: %s", *conn.peer, exc)
                return False
            except kp.ProtocolError as exc:
                closing_log.warning(conn.peer[0], reason_of(f"malformed request: {exc}"),
                                    "closing %s:%s: malformed request: %s", *conn.peer, exc)
                return False
            except ConnectionError:  # the peer went away while its answer was being written (the
                return False         # writer thread's failed send): closed, not a handler's bug
            except Exception:  # a bug must not take the listener down: this connection is closed
                if hdr is None:
                    raise
                log.exception("handler %s v%d failed", kp.API_NAMES.get(hdr.api_key), hdr.api_version)
                return False
            conn.client_id = hdr.client_id
            if hdr.api_key == kp.API_VERSIONS and hdr.api_version >= 3:
                conn.software = req.body.get("client_software_name") or conn.software
            count_api_usage(bridge.api_usage, conn.software or conn.client_id or "?", hdr.api_key,
                            hdr.api_version)
            if not conn.authenticated and hdr.api_key not in PRE_AUTH:
                closing_log.warning(conn.peer[0], "request before SASL authentication",
                                    "closing %s:%s: %s before SASL authentication", *conn.peer,
                                    kp.API_NAMES.get(hdr.api_key))
                return False
            handler = HANDLERS.get(hdr.api_key)
            if handler is None:
                closing_log.warning(conn.peer[0], "no handler for the api", "closing %s:%s: no handler for api %s",
                                    *conn.peer, hdr.api_key)
                return False
            out.flush()
            t0 = perf_counter_ns()
            try:
                body = await authorizer.authorize(bridge, conn, hdr.api_key, hdr.api_version, req.body, handler)
            except Exception:
                log.exception("handler %s v%d failed", kp.API_NAMES.get(hdr.api_key), hdr.api_version)
                return False
            observe_api_latency(bridge.api_latency, hdr.api_key, hdr.api_version, perf_counter_ns() - t0)
            if body is None:
                continue
            try:
                out.send(kp.encode_response_parts(hdr, body))
            except kp.ProtocolError:
                log.exception("encoding %s v%d response failed", kp.API_NAMES.get(hdr.api_key), hdr.api_version)
                return False
            if conn.extra.get("close_after_reply"):  # failed SASL: answered, then closed (as Kafka does)
                await out.drain(0)
                return False
        return True


class _Replies(list):
    """A connection's responses waiting to be written (KafkaServer._handle_frames), and their writes.

    With the C extension, the responses go to the listener's writer thread (rmq/_native_writer.h):
    the event loop copies each write into the connection's queue and goes on, and the thread, which
    never takes the GIL, sends the queues in order. The loop used to make the send(2) itself: on
    loopback a send does the receiver's TCP work and wakes its thread, which then often took the
    loop's CPU (issue 24: a third of the loop's samples at 10k msgs/s with 28 client threads on 2
    cores, and about 200 preemptions of the loop per 1,000 records). A failed send (the peer reset
    the connection) is reported by the connection's next write as ConnectionResetError.

    Without the extension (or over TLS), while nothing is queued in the transport a response goes
    out with one non-blocking send that keeps the GIL (rmq.native.write_keep_gil); what the socket
    does not take goes to the transport, which queues it. Order is kept either way."""

    __slots__ = ("writer", "fd", "channel", "kick")

    def __init__(self, writer, fd: int, kick: _WriterKick | None = None):
        super().__init__()
        self.writer = writer
        self.kick = kick
        self.fd = fd  # the socket's fd; -1: always through the transport
        self.channel = None
        ext = native.ext
        if fd >= 0 and ext is not None and hasattr(ext, "kafka_writer_open") \
                and writer.get_extra_info("sslcontext") is None:
            try:
                self.channel = ext.kafka_writer_open(fd)
            except OSError:
                self.channel = None  # no fd to spare: the transport writes

    def flush(self) -> None:
        """Write the responses collected so far."""
        if self:
            self.send(self)
            self.clear()

    def send(self, parts: list) -> None:
        """Write these buffers now, after whatever was collected (flushed first)."""
        if parts is not self and self:
            self.flush()
        if self.channel is not None:
            kick = self.kick
            try:
                native.ext.kafka_writer_write(self.channel, parts if len(parts) > 1 else parts[0], kick is None)
            except OSError as exc:
                raise ConnectionResetError(exc.errno, f"sending a response failed: {exc.strerror}") from None
            if kick is not None and not kick.due:
                kick.schedule()
            return
        native.write_keep_gil(self.writer.transport, self.fd, parts[0] if len(parts) == 1 else b"".join(parts))

    def pending(self) -> int:
        """Bytes written and not sent yet."""
        if self.channel is None:
            return self.writer.transport.get_write_buffer_size()
        try:
            return native.ext.kafka_writer_pending(self.channel)
        except OSError as exc:
            raise ConnectionResetError(exc.errno, f"sending a response failed: {exc.strerror}") from None

    async def drain(self, below: int) -> None:
        """Wait until at most `below` bytes are left to send (the writer thread's queue polled with
        a growing pause, 0.5 to 50 ms), or the transport's drain."""
        if self.channel is None:
            await self.writer.drain()
            return
        pause = 0.0005
        while self.pending() > below:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    def close(self) -> None:
        """No more writes: the writer thread sends what is queued, then closes its copy of the socket."""
        if self.channel is not None:
            native.ext.kafka_writer_close(self.channel)


class _WriterKick:
    """Wakes the writer thread once per pass of the event loop for the responses written in it
    (kafka_writer_write with wake=False, then kafka_writer_kick at the start of the next pass): a
    wake per response made the woken thread take the loop's CPU as a send did, once per response."""

    __slots__ = ("loop", "due")

    def __init__(self, loop):
        self.loop = loop
        self.due = False

    def schedule(self) -> None:
        self.due = True
        self.loop.call_soon(self._run)

    def _run(self) -> None:
        self.due = False
        native.ext.kafka_writer_kick()


async def start_kafka_listener(controller, host: str, port: int, advertised_host: str | None = None,
                               *, cluster: bool = False):
    """Bind the Kafka listener; returns (server, "host:port"). The bridge learns the bound port
    (port 0 = ephemeral) before the first connection is served. With `cluster`, the advertised
    endpoint is published to the NameServers of namesrvAddr (kafka_bridge.cluster) before this
    returns (bounded by the NameServer timeout)."""
    server = KafkaServer(None)
    # backlog as the remoting listener's: asyncio's default of 100 made the 1,000th of a burst of
    # new connections wait for SYN retransmits (seconds)
    aserver = await asyncio.start_server(server._on_connect, host, port, limit=1 << 20, backlog=1024)
    sock = aserver.sockets[0].getsockname()
    bridge = KafkaBridge(controller, advertised_host or sock[0], sock[1], cluster=cluster)
    operations.log_start_offsets(bridge)    # where DeleteRecords moved partitions' log starts
    bridge.loop = asyncio.get_running_loop()
    bridge.retention_task = bridge.loop.create_task(operations.retention_loop(bridge), name="KafkaTopicRetention")
    txn.attach(bridge)
    server.bridge = bridge
    server.server = aserver
    idle_ms = bridge.config.kafkaConnectionsMaxIdleMs
    if idle_ms > 0:
        server.idle_task = bridge.loop.create_task(server._scan_idle(idle_ms / 1000), name="KafkaIdleConnections")
    if bridge.cluster is not None:
        await bridge.cluster.start()
    return server, f"{sock[0]}:{sock[1]}"


__all__ = ["HANDLERS", "KafkaServer", "count_api_usage", "start_kafka_listener"]
