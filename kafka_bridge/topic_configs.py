"""Kafka's topic configs as a per-topic table (issue 11, item 3).

Every config Kafka documents for topics (its TopicConfig / LogConfig names, types, defaults and
validators) is accepted, validated as Kafka validates it, and kept per topic in the topic's
`attributes` in `topics.json` (RocketMQ 5's TopicConfig carries such a map). Those with a RocketMQ
meaning take effect (see EFFECTIVE and docs/kafka-mapping.md); the others are stored and shown.
Sans-IO: the handlers read and write the table through the broker's TopicConfigManager.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

# DescribeConfigs config_type (ConfigEntry.ConfigType) and config_source values
TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
              "password": 9}
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str
    default: str | None
    check: Callable[[object], str | None] | None = None   # the parsed value -> error text or None
    doc: str = ""


def _at_least(n):
    return lambda v: None if v >= n else f"Value must be at least {n}"


def _between(lo, hi):
    return lambda v: None if lo <= v <= hi else f"Value must be no less than {lo} and no more than {hi}"


def _one_of(*choices):
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def _each_of(*choices):
    def check(v):
        bad = [x for x in v if x not in choices]
        return f"Invalid value(s) {bad}: allowed {', '.join(choices)}" if bad else None
    return check


_L = str(LONG_MAX)
DEFS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("cleanup.policy", "list", "delete", _each_of("delete", "compact"),
              "compact: records without a key are refused; delete: the store's time-based cleanup"),
    ConfigDef("compression.type", "string", "producer",
              _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigDef("delete.retention.ms", "long", "86400000", _at_least(0)),
    ConfigDef("file.delete.delay.ms", "long", "60000", _at_least(0)),
    ConfigDef("flush.messages", "long", _L, _at_least(1)),
    ConfigDef("flush.ms", "long", _L, _at_least(0)),
    ConfigDef("follower.replication.throttled.replicas", "list", ""),
    ConfigDef("index.interval.bytes", "int", "4096", _at_least(0)),
    ConfigDef("leader.replication.throttled.replicas", "list", ""),
    ConfigDef("local.retention.bytes", "long", "-2", _at_least(-2)),
    ConfigDef("local.retention.ms", "long", "-2", _at_least(-2)),
    ConfigDef("max.compaction.lag.ms", "long", _L, _at_least(1)),
    ConfigDef("max.message.bytes", "int", "1048588", _at_least(0),
              "a produced record batch larger than this is refused with MESSAGE_TOO_LARGE"),
    ConfigDef("message.downconversion.enable", "boolean", "true"),
    ConfigDef("message.timestamp.after.max.ms", "long", _L, _at_least(0)),
    ConfigDef("message.timestamp.before.max.ms", "long", _L, _at_least(0)),
    ConfigDef("message.timestamp.difference.max.ms", "long", _L, _at_least(0)),
    ConfigDef("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
              "LogAppendTime: fetched records carry the broker's store time"),
    ConfigDef("min.cleanable.dirty.ratio", "double", "0.5", _between(0.0, 1.0)),
    ConfigDef("min.compaction.lag.ms", "long", "0", _at_least(0)),
    ConfigDef("min.insync.replicas", "int", "1", _at_least(1),
              "above the topic's one replica, acks=all produce fails with NOT_ENOUGH_REPLICAS"),
    ConfigDef("preallocate", "boolean", "false"),
    ConfigDef("remote.storage.enable", "boolean", "false"),
    ConfigDef("retention.bytes", "long", "-1"),
    ConfigDef("retention.ms", "long", "604800000", _at_least(-1)),
    ConfigDef("segment.bytes", "int", "1073741824", _at_least(14)),
    ConfigDef("segment.index.bytes", "int", "10485760", _at_least(4)),
    ConfigDef("segment.jitter.ms", "long", "0", _at_least(0)),
    ConfigDef("segment.ms", "long", "604800000", _at_least(1)),
    ConfigDef("unclean.leader.election.enable", "boolean", "false"),
)}

#: configs that change what this broker does for the topic (the rest are kept and shown)
EFFECTIVE = frozenset({"cleanup.policy", "max.message.bytes", "message.timestamp.type", "min.insync.replicas"})


def parse(name: str, value: str | None):
    """Kafka's ConfigDef.parseType + validator: the typed value, or ValueError with Kafka's wording."""
    d = DEFS.get(name)
    if d is None:
        raise KeyError(name)
    if value is None:
        raise ValueError(f"Invalid value null for configuration {name}: a value is required")
    v = value.strip()
    try:
        if d.type == "boolean":
            if v.lower() not in ("true", "false"):
                raise ValueError("Expected value to be either true or false")
            parsed = v.lower() == "true"
        elif d.type in ("int", "long", "short"):
            parsed = int(v)
            hi = INT_MAX if d.type == "int" else LONG_MAX
            if not -hi - 1 <= parsed <= hi:
                raise ValueError(f"Not a number of type {d.type.upper()}")
        elif d.type == "double":
            parsed = float(v)
        elif d.type == "list":
            parsed = [x.strip() for x in v.split(",") if x.strip()]
        else:
            parsed = v
    except ValueError as exc:
        msg = str(exc) if "Expected" in str(exc) or "Not a number" in str(exc) else f"Not a number of type {d.type.upper()}"
        raise ValueError(f"Invalid value {value} for configuration {name}: {msg}") from None
    if d.check is not None:
        err = d.check(parsed)
        if err:
            raise ValueError(f"Invalid value {value} for configuration {name}: {err}")
    return parsed


def check(configs: dict[str, str | None]) -> tuple[str, str] | None:
    """(name, error) for the first unknown or invalid config, else None."""
    for name, value in configs.items():
        if name not in DEFS:
            return name, f"Unknown topic config name: {name}"
        try:
            parse(name, value)
        except ValueError as exc:
            return name, str(exc)
    return None


def canonical(name: str, value: str) -> str:
    """The form a value is stored and shown in (lists without blanks, booleans in lower case)."""
    d = DEFS[name]
    if d.type == "list":
        return ",".join(parse(name, value))
    if d.type == "boolean":
        return value.strip().lower()
    return value.strip()


def broker_defaults(store_config, broker_config) -> dict[str, tuple[str, int, str | None]]:
    """name -> (value, source, synonym) of the broker's default for each topic config: Kafka's
    default, or the store setting that plays its part here (shown as a static broker config)."""
    out = {n: (d.default, SOURCE_DEFAULT, None) for n, d in DEFS.items()}
    out["retention.ms"] = (str(store_config.fileReservedTime * 3600 * 1000), SOURCE_STATIC_BROKER,
                           "log.retention.ms (RocketMQ fileReservedTime)")
    out["max.message.bytes"] = (str(store_config.maxMessageSize), SOURCE_STATIC_BROKER,
                                "message.max.bytes (RocketMQ maxMessageSize)")
    out["segment.bytes"] = (str(store_config.mappedFileSizeCommitLog), SOURCE_STATIC_BROKER,
                            "log.segment.bytes (RocketMQ mappedFileSizeCommitLog, shared by every topic)")
    return out


def effective(attributes: dict[str, str] | None, name: str, default: str) -> str:
    return (attributes or {}).get(name, default)
