"""The Kafka admin state a KRaft controller would keep, in the broker's config dir
(<storeRoot>/config/kafkaAdmin.json, beside topics.json): Kafka ACL bindings (CreateAcls), dynamic
broker configs (AlterConfigs on a BROKER resource: per broker id, or the cluster default ""), GROUP
configs (KIP-848 / KIP-932 group resources) and SCRAM credentials (AlterUserScramCredentials).

Written atomically with a .bak copy (ConfigManager), read back at start, and registered as the
broker config table "kafkaAdmin", so a slave copies its master's (SlaveSynchronize) as it copies
the topic configs and consumer offsets. SCRAM credentials are kept as Kafka keeps them: salt,
iterations, StoredKey and ServerKey, never the password.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import threading

from rmq.broker.config_manager import ConfigManager

from .kafka_acls import AclBinding

FILE_NAME = "kafkaAdmin.json"


class KafkaAdminState(ConfigManager):
    file_name = FILE_NAME

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.acls: list[AclBinding] = []
        self.broker_configs: dict[str, dict[str, str]] = {}   # "" (cluster default) or broker id -> {name: value}
        self.group_configs: dict[str, dict[str, str]] = {}    # group id -> {name: value}
        # user -> mechanism name -> {"salt", "iterations", "storedKey", "serverKey"} (bytes base64 in JSON)
        self.scram: dict[str, dict[str, dict]] = {}
        self.version = 0  # bumped on every change (the authorizer's cache key)
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ persistence
    def encode(self) -> dict:
        return {"acls": [b.to_json() for b in self.acls],
                "brokerConfigs": self.broker_configs,
                "groupConfigs": self.group_configs,
                "scramCredentials": {u: {m: {"salt": base64.b64encode(c["salt"]).decode(), "iterations": c["iterations"],
                                             "storedKey": base64.b64encode(c["storedKey"]).decode(),
                                             "serverKey": base64.b64encode(c["serverKey"]).decode()}
                                         for m, c in mechs.items()} for u, mechs in self.scram.items()}}

    def decode(self, data: dict) -> None:
        """Raises ValueError (ConfigManager.load then tries the .bak copy) on a malformed table."""
        try:
            self._decode(data)
        except (KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise ValueError(f"{FILE_NAME}: malformed ({type(exc).__name__}: {exc})") from None

    def _decode(self, data: dict) -> None:
        acls = [AclBinding.from_json(d) for d in data.get("acls") or []]
        broker = {str(k): {str(n): str(v) for n, v in (cfg or {}).items()}
                  for k, cfg in (data.get("brokerConfigs") or {}).items()}
        groups = {str(k): {str(n): str(v) for n, v in (cfg or {}).items()}
                  for k, cfg in (data.get("groupConfigs") or {}).items()}
        scram = {str(u): {str(m): {"salt": base64.b64decode(c["salt"]), "iterations": int(c["iterations"]),
                                   "storedKey": base64.b64decode(c["storedKey"]),
                                   "serverKey": base64.b64decode(c["serverKey"])}
                          for m, c in (mechs or {}).items()}
                 for u, mechs in (data.get("scramCredentials") or {}).items()}
        with self.lock:
            self.acls, self.broker_configs, self.group_configs, self.scram = acls, broker, groups, scram
            self.version += 1

    def changed(self) -> None:
        """Persist after a change (callers mutate under self.lock, then call this)."""
        with self.lock:
            self.version += 1
        with self._write_lock:
            self.persist()

    # ------------------------------------------------------------------ the config table (slaves, admin tools)
    def dump(self) -> bytes:
        with self.lock:
            return json.dumps(self.encode(), sort_keys=True).encode("utf-8")

    def replace_from(self, body: bytes) -> None:
        """A slave takes its master's copy (SlaveSynchronize) and persists it."""
        data = json.loads(body.decode("utf-8")) if body else {}
        if not isinstance(data, dict):
            raise ValueError("kafkaAdmin table: expected a JSON object")
        self.decode(data)
        with self._write_lock:
            self.persist()


def admin_state(bridge) -> KafkaAdminState:
    """The bridge's KafkaAdminState, loaded from the config dir on first use."""
    st = getattr(bridge, "_admin_state", None)
    if st is None:
        config_dir = getattr(bridge.controller, "config_dir", None) or os.path.join(
            bridge.store.config.storePathRootDir, "config")
        st = KafkaAdminState(config_dir)
        st.load()
        bridge._admin_state = st
    return st


__all__ = ["KafkaAdminState", "admin_state", "FILE_NAME"]
