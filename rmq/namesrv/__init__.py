"""rmq.namesrv: the NameServer — RouteInfoManager, KV config and its asyncio listener (SPEC §9)."""
from .kv_config import KVConfigManager
from .route_info import RouteInfoManager
from .server import NamesrvServer, start_namesrv_listener

__all__ = ["KVConfigManager", "NamesrvServer", "RouteInfoManager", "start_namesrv_listener"]
