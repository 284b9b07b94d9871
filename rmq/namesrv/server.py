"""The NameServer listener (NamesrvController): a RemotingServer running the DefaultRequestProcessor,
plus the scan that drops brokers silent for 120 s, checked every 10 s (SPEC §9)."""
from __future__ import annotations

import asyncio
import logging

from ..server.remoting_server import RemotingConnection, RemotingServer
from .kv_config import KVConfigManager
from .processor import NamesrvProcessor
from .route_info import RouteInfoManager

log = logging.getLogger("rmq.namesrv")


class NamesrvServer:
    """Owns the routing tables, the KV config and the listener; `close_async()` stops it."""

    def __init__(self, *, scan_interval_s: float = 10.0, broker_expiry_s: float = 120.0,
                 kv_config_path: str | None = None, order_message_enable: bool = False) -> None:
        self.scan_interval_s = scan_interval_s
        self.route_info = RouteInfoManager(broker_expiry_ms=int(broker_expiry_s * 1000))
        self.kv_config = KVConfigManager(kv_config_path)
        self.kv_config.load()
        self.processor = NamesrvProcessor(self.route_info, self.kv_config, order_message_enable=order_message_enable)
        self.remoting = RemotingServer("namesrv")
        self.remoting.register_many(self.processor.table())
        self.remoting.close_listeners.append(self._on_close)
        self.address = ""
        self._scan_task: asyncio.Task | None = None

    async def start(self, host: str, port: int, *, sock=None) -> str:
        self.address = await self.remoting.start(host, port, sock=sock)
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="scanNotActiveBroker")
        return self.address

    def _on_close(self, conn: RemotingConnection) -> None:
        # BrokerHousekeepingService.onChannelClose: a broker whose connection drops leaves at once.
        self.route_info.on_channel_destroy(conn)

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                for addr, channel in self.route_info.scan_not_active_broker():
                    if isinstance(channel, RemotingConnection):
                        channel.close()
            except Exception:  # noqa: BLE001 - the scan must keep running
                log.exception("scanNotActiveBroker failed")

    async def close_async(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            try:
                await self._scan_task
            except asyncio.CancelledError:
                pass
            self._scan_task = None
        await self.remoting.close_async()


async def start_namesrv_listener(host: str, port: int, *, scan_interval_s: float = 10,
                                 broker_expiry_s: float = 120, kv_config_path: str | None = None,
                                 sock=None) -> tuple[NamesrvServer, str]:
    """Start a NameServer on host:port (0 = ephemeral); returns (server, "host:port")."""
    srv = NamesrvServer(scan_interval_s=scan_interval_s, broker_expiry_s=broker_expiry_s,
                        kv_config_path=kv_config_path)
    addr = await srv.start(host, port, sock=sock)
    return srv, addr
