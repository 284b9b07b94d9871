"""SubscriptionGroupManager: consumer group settings (retry queues, maxReconsumeTimes ...),
persisted to config/subscriptionGroup.json."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .config_manager import ConfigManager


@dataclass
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True


class SubscriptionGroupManager(ConfigManager):
    file_name = "subscriptionGroup.json"

    def __init__(self, config_dir: str, auto_create: bool = True):
        super().__init__(config_dir)
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        for name in ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                     "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER"):
            self.table[name] = SubscriptionGroupConfig(name)

    def encode(self) -> dict:
        return {"subscriptionGroupTable": {k: asdict(v) for k, v in self.table.items()}}

    def decode(self, data: dict) -> None:
        known = set(SubscriptionGroupConfig.__dataclass_fields__)
        for name, cfg in (data.get("subscriptionGroupTable") or {}).items():
            if isinstance(cfg, dict):
                kw = {k: v for k, v in cfg.items() if k in known and k != "groupName"}
                self.table[name] = SubscriptionGroupConfig(name, **kw)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        sg = self.table.get(group)
        if sg is None and self.auto_create:
            with self.lock:
                sg = self.table.setdefault(group, SubscriptionGroupConfig(group))
            self.persist()
        return sg

    def delete(self, group: str) -> None:
        with self.lock:
            self.table.pop(group, None)
        self.persist()
