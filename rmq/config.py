"""YAML configuration: a flat mapping of RocketMQ's camelCase keys (as in broker.conf), validated on
load; an unknown key or a wrong type is an error naming the file, the key and what was expected."""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

import yaml

from .broker.config import BrokerConfig
from .store.config import MessageStoreConfig


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names file, key and expectation."""


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _coerce(path: str, key: str, value, typ):
    typ = {"int": int, "float": float, "bool": bool, "str": str}.get(typ, typ) if isinstance(typ, str) else typ
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif typ is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{path}: key {key!r}: expected {_TYPE_NAMES.get(typ, typ)}, got {value!r}")


#: RocketMQ's own spelling of a key this project spells otherwise (broker.conf files work as they are).
KEY_ALIASES = {"transactionTimeOut": "transactionTimeout"}


@dataclass
class RmqConfig:
    store: MessageStoreConfig
    broker: BrokerConfig


def load_config(path: str | None, overrides: dict | None = None) -> RmqConfig:
    """Load and validate a YAML file (or just defaults when path is None)."""
    data: dict = {}
    label = path or "<defaults>"
    if path:
        if not os.path.exists(path):
            raise ConfigError(f"{path}: no such file")
        try:
            with open(path, encoding="utf-8") as fh:
                loaded = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of camelCase keys (as in broker.conf), "
                              f"got {type(loaded).__name__}")
        data.update(loaded)
    if overrides:
        data.update({k: v for k, v in overrides.items() if v is not None})
    store_keys = MessageStoreConfig.keys()
    broker_keys = BrokerConfig.keys()
    store_kw, broker_kw = {}, {}
    for alias, key in KEY_ALIASES.items():
        if alias in data:
            if key in data:
                raise ConfigError(f"{label}: give either {alias!r} or {key!r}, not both")
            data[key] = data.pop(alias)
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{label}: key {key!r}: expected a string key")
        if key in store_keys:
            store_kw[key] = _coerce(label, key, value, store_keys[key])
        elif key in broker_keys:
            broker_kw[key] = _coerce(label, key, value, broker_keys[key])
        else:
            near = difflib.get_close_matches(key, list(store_keys) + list(broker_keys), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{label}: unknown key {key!r}{hint}")
    store = MessageStoreConfig(**store_kw)
    broker = BrokerConfig(**broker_kw)
    try:
        store.validate()
        broker.validate()
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from exc
    return RmqConfig(store, broker)
