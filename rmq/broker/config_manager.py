"""ConfigManager: JSON files under <storeRoot>/config written atomically, with a .bak copy, as RocketMQ does."""
from __future__ import annotations

import json
import logging
import os
import threading

log = logging.getLogger("rmq.broker")


class ConfigManager:
    """Subclasses define encode() -> dict and decode(dict); persist() writes, load() reads."""

    file_name = ""

    def __init__(self, config_dir: str):
        self.config_dir = config_dir
        self.path = os.path.join(config_dir, self.file_name)
        self.lock = threading.RLock()

    def encode(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode(self, data: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def load(self) -> None:
        for path in (self.path, self.path + ".bak"):
            if not os.path.exists(path):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object")
                self.decode(data)
                return
            except (ValueError, OSError) as exc:
                log.error("%s: unreadable (%s); trying the backup", path, exc)
        return

    def persist(self) -> None:
        with self.lock:
            text = json.dumps(self.encode(), indent=4, sort_keys=False)
        self.write_text(text)

    def write_text(self, text: str) -> None:
        """Replace the file with `text`: a fsynced temporary file renamed over it, the old one kept as .bak."""
        os.makedirs(self.config_dir, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(self.path):
            try:
                os.replace(self.path, self.path + ".bak")
            except OSError:
                pass
        os.replace(tmp, self.path)
