"""KVConfigManager: the NameServer's namespace -> key -> value settings (e.g. ORDER_TOPIC_CONFIG),
optionally persisted as kvConfig.json the way RocketMQ writes it (SPEC §9)."""
from __future__ import annotations

import json
import logging
import os

from ..remoting import KVTable

log = logging.getLogger("rmq.namesrv")

#: NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.config_table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if not self.path or not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            table = data.get("configTable") if isinstance(data, dict) else None
            if isinstance(table, dict):
                for ns, kv in table.items():
                    if isinstance(kv, dict):
                        self.config_table[str(ns)] = {str(k): str(v) for k, v in kv.items()}
        except (OSError, ValueError) as exc:
            log.error("%s: cannot load the KV config (%s); starting empty", self.path, exc)

    def persist(self) -> None:
        if not self.path:
            return
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"configTable": self.config_table}, fh, indent=4)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("%s: cannot persist the KV config: %s", self.path, exc)

    def put(self, namespace: str, key: str, value: str) -> None:
        table = self.config_table.setdefault(namespace, {})
        prev = table.get(key)
        table[key] = value
        log.info("putKVConfig %s %s %s: %s", "update" if prev is not None else "create", namespace, key, value)
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        table = self.config_table.get(namespace)
        if table is not None and table.pop(key, None) is not None:
            log.info("deleteKVConfig delete a config item, Namespace: %s Key: %s", namespace, key)
            self.persist()

    def get_kv_list_by_namespace(self, namespace: str) -> bytes | None:
        table = self.config_table.get(namespace)
        if table is None:
            return None
        return KVTable(table=dict(table)).encode()
