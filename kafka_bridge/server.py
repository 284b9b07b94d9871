"""The Kafka listener hosted by the broker process: frames in, handlers, responses out (SPEC §11).

Requests on one connection are answered one at a time and in order, as a Kafka broker does.
A malformed frame or request closes that connection only (with a log line); other connections
are unaffected and the listener keeps running.
"""
from __future__ import annotations

import asyncio
import logging

from . import protocol as kp
from . import txn
from .bridge import Connection, KafkaBridge
from .handlers import admin, fetch, groups, metadata, operations, produce, sasl

log = logging.getLogger("kafka_bridge.server")

MAX_FRAME = 100 * 1024 * 1024  # socket.request.max.bytes

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
}
PRE_AUTH = {kp.API_VERSIONS, kp.SASL_HANDSHAKE, kp.SASL_AUTHENTICATE}


metadata.IMPLEMENTED.update(HANDLERS)


class KafkaServer:
    def __init__(self, bridge: KafkaBridge):
        self.bridge = bridge
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()

    async def close_async(self) -> None:
        if self.server is not None:
            self.server.close()
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
        self.connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = Connection(peer=(peer[0], peer[1]), authenticated=not self.bridge.config.kafkaSaslEnable)
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
            writer.close()

    async def _serve_connection(self, reader, writer, conn: Connection) -> None:
        frames = kp.FrameDecoder(max_frame_size=MAX_FRAME)
        bridge = self.bridge
        while True:
            data = await reader.read(1 << 18)
            if not data:
                return
            try:
                frames.feed(data)
                pending = list(frames.frames())
            except kp.FrameError as exc:
                log.warning("closing %s:%s: %s", *conn.peer, exc)
                return
            for frame in pending:
                if conn.sasl_v0_pending:
                    # SaslHandshake v0: this frame is the raw PLAIN token, answered with an empty frame
                    conn.sasl_v0_pending = False
                    user = sasl.check_plain(bridge, frame)
                    if user is None:
                        log.warning("SASL/PLAIN failed for %s:%s", *conn.peer)
                        return
                    conn.authenticated, conn.principal = True, user
                    writer.write(b"\x00\x00\x00\x00")
                    continue
                try:
                    req = kp.decode_request(frame)
                except kp.UnsupportedVersion as exc:
                    if exc.header is not None and exc.header.api_key == kp.API_VERSIONS:
                        writer.write(kp.encode_unsupported_api_versions(exc.header.correlation_id))
                        continue
                    log.warning("closing %s:%s: %s", *conn.peer, exc)
                    return
                except kp.ProtocolError as exc:
                    log.warning("closing %s:%s: malformed request: %s", *conn.peer, exc)
                    return
                hdr = req.header
                conn.client_id = hdr.client_id
                if hdr.api_key == kp.API_VERSIONS and hdr.api_version >= 3:
                    conn.software = req.body.get("client_software_name") or conn.software
                key = (conn.software or conn.client_id or "?", hdr.api_key, hdr.api_version)
                bridge.api_usage[key] = bridge.api_usage.get(key, 0) + 1
                if not conn.authenticated and hdr.api_key not in PRE_AUTH:
                    log.warning("closing %s:%s: %s before SASL authentication", *conn.peer, kp.API_NAMES.get(hdr.api_key))
                    return
                handler = HANDLERS.get(hdr.api_key)
                if handler is None:
                    log.warning("closing %s:%s: no handler for api %s", *conn.peer, hdr.api_key)
                    return
                try:
                    body = await handler(bridge, conn, hdr.api_version, req.body)
                except Exception:
                    log.exception("handler %s v%d failed", kp.API_NAMES.get(hdr.api_key), hdr.api_version)
                    return
                if body is None:
                    continue
                try:
                    writer.writelines(kp.encode_response_parts(hdr, body))
                except kp.ProtocolError:
                    log.exception("encoding %s v%d response failed", kp.API_NAMES.get(hdr.api_key), hdr.api_version)
                    return
            if writer.transport.get_write_buffer_size() > (1 << 20):
                await writer.drain()


async def start_kafka_listener(controller, host: str, port: int, advertised_host: str | None = None,
                               *, cluster: bool = False):
    """Bind the Kafka listener; returns (server, "host:port"). The bridge learns the bound port
    (port 0 = ephemeral) before the first connection is served. With `cluster`, the advertised
    endpoint is published to the NameServers of namesrvAddr (kafka_bridge.cluster) before this
    returns (bounded by the NameServer timeout)."""
    server = KafkaServer(None)
    aserver = await asyncio.start_server(server._on_connect, host, port, limit=1 << 20)
    sock = aserver.sockets[0].getsockname()
    bridge = KafkaBridge(controller, advertised_host or sock[0], sock[1], cluster=cluster)
    operations.log_start_offsets(bridge)    # where DeleteRecords moved partitions' log starts
    bridge.loop = asyncio.get_running_loop()
    bridge.retention_task = bridge.loop.create_task(operations.retention_loop(bridge), name="KafkaTopicRetention")
    txn.attach(bridge)
    server.bridge = bridge
    server.server = aserver
    if bridge.cluster is not None:
        await bridge.cluster.start()
    return server, f"{sock[0]}:{sock[1]}"


__all__ = ["HANDLERS", "KafkaServer", "start_kafka_listener"]
