"""Kafka's topic configs as a per-topic table, and the broker configs DescribeConfigs lists
(issue 11 item 3, issue 27 item 3).

The table is Kafka 3.9's (TopicConfig / LogConfig of apache/kafka 3.9: names, types, defaults,
validators), the newest the stock clients here speak: the three compression levels (3.8),
remote.log.copy.disable and remote.log.delete.on.disable (3.9), and the deprecated names 3.9 still
accepts (message.format.version, message.downconversion.enable, message.timestamp.difference.max.ms)
are accepted; nothing Kafka 3.9 removed is. Every config is validated as Kafka validates it and kept
per topic in the topic's `attributes` in `topics.json` (RocketMQ 5's TopicConfig carries such a map).
Those with a RocketMQ meaning take effect (EFFECTIVE, docs/kafka-mapping.md); the others are stored
and shown, so that what DescribeConfigs lists AlterConfigs takes back unchanged. RocketMQ's own topic
attributes (queue numbers, perm) are not Kafka topic configs: `rmq admin topicRoute` shows them.
`python -m kafka_bridge.topic_configs --write-docs` writes the table into docs/kafka-compat.md and its
Chinese twin (tests/test_kafka_compat3.py checks the pages match). Sans-IO: the handlers read and
write the table through the broker's TopicConfigManager.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

# DescribeConfigs config_type (ConfigEntry.ConfigType) and config_source values
TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
              "password": 9}
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8
SOURCE_NAMES = {SOURCE_DYNAMIC_TOPIC: "DYNAMIC_TOPIC_CONFIG", SOURCE_DYNAMIC_BROKER: "DYNAMIC_BROKER_CONFIG",
                SOURCE_DYNAMIC_DEFAULT_BROKER: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                SOURCE_STATIC_BROKER: "STATIC_BROKER_CONFIG", SOURCE_DEFAULT: "DEFAULT_CONFIG",
                SOURCE_GROUP: "GROUP_CONFIG"}

#: the Kafka release whose topic and broker config tables this module implements
KAFKA_VERSION = "3.9"


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


def _level_or_default(lo, hi, default):
    return lambda v: None if v == default or lo <= v <= hi else f"Value must be {default} or between {lo} and {hi}"


# MetadataVersion of Kafka 3.9: the versions message.format.version accepts (fromVersionString takes
# "0.10.0.0" as "0.10.0" and "2.8.1" as "2.8"); 3.x ignores the setting for writing (KIP-724).
_IBP = ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2",
        "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
        "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0", "2.4-IV1",
        "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1", "3.0-IV0", "3.0-IV1",
        "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1",
        "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4",
        "3.8-IV0", "3.9-IV0"]
METADATA_VERSIONS = frozenset(_IBP) | {v.split("-")[0] for v in _IBP}


def _metadata_version(v):
    segments = v.split(".")
    n = 3 if v.startswith("0.") else 2
    key = v if n >= len(segments) else ".".join(segments[:n])
    if key in METADATA_VERSIONS:
        return None
    return (f"Version `{v}` is not a valid version. Valid versions are: "
            f"[{', '.join(sorted(METADATA_VERSIONS, key=lambda x: [int(p) if p.isdigit() else 0 for p in re.split('[.-]', x.replace('IV', ''))]))}]")


def _each_of(*choices):
    def check(v):
        bad = [x for x in v if x not in choices]
        return f"Invalid value(s) {bad}: allowed {', '.join(choices)}" if bad else None
    return check


_L = str(LONG_MAX)
DEFS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("cleanup.policy", "list", "delete", _each_of("delete", "compact"),
              "compact: records without a key are refused; delete: the store's time-based cleanup"),
    ConfigDef("compression.gzip.level", "int", "-1", _level_or_default(1, 9, -1)),
    ConfigDef("compression.lz4.level", "int", "9", _between(1, 17)),
    ConfigDef("compression.type", "string", "producer",
              _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigDef("compression.zstd.level", "int", "3", _between(-131072, 22)),
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
    ConfigDef("message.downconversion.enable", "boolean", "true", doc="deprecated in Kafka 3.x, removed in 4.0"),
    ConfigDef("message.format.version", "string", "3.0-IV1", _metadata_version,
              "deprecated in Kafka 3.x (ignored for writing, KIP-724), removed in 4.0"),
    ConfigDef("message.timestamp.after.max.ms", "long", _L, _at_least(0)),
    ConfigDef("message.timestamp.before.max.ms", "long", _L, _at_least(0)),
    ConfigDef("message.timestamp.difference.max.ms", "long", _L, _at_least(0), doc="deprecated in Kafka 3.6"),
    ConfigDef("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
              "LogAppendTime: fetched records carry the broker's store time"),
    ConfigDef("min.cleanable.dirty.ratio", "double", "0.5", _between(0.0, 1.0)),
    ConfigDef("min.compaction.lag.ms", "long", "0", _at_least(0)),
    ConfigDef("min.insync.replicas", "int", "1", _at_least(1),
              "above the topic's one replica, acks=all produce fails with NOT_ENOUGH_REPLICAS"),
    ConfigDef("preallocate", "boolean", "false"),
    ConfigDef("remote.log.copy.disable", "boolean", "false"),
    ConfigDef("remote.log.delete.on.disable", "boolean", "false"),
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


def parse(name: str, value: str | None, defs: dict | None = None):
    """Kafka's ConfigDef.parseType + validator: the typed value, or ValueError with Kafka's wording.
    `defs`: the table `name` is looked up in (the topic configs by default)."""
    d = (DEFS if defs is None else defs).get(name)
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


#: the broker config each topic config falls back to (Kafka 3.9's ServerTopicConfigSynonyms; the
#: throttled-replica lists and remote.log.*.disable have none)
SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy", "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level", "compression.type": "compression.type",
    "compression.zstd.level": "compression.zstd.level", "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms", "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms", "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes", "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms", "max.message.bytes": "message.max.bytes",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type", "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms", "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms", "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes", "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms", "unclean.leader.election.enable": "unclean.leader.election.enable",
}

#: where a RocketMQ setting plays a topic config's part: topic config -> (broker config source, what)
_FROM_STORE = {
    "retention.ms": lambda s: (str(s.fileReservedTime * 3600 * 1000), "RocketMQ fileReservedTime (hours)"),
    "max.message.bytes": lambda s: (str(s.maxMessageSize), "RocketMQ maxMessageSize"),
    "segment.bytes": lambda s: (str(s.mappedFileSizeCommitLog),
                                "RocketMQ mappedFileSizeCommitLog, shared by every topic"),
}


def broker_defaults(store_config, broker_config) -> dict[str, tuple[str, int, str | None]]:
    """name -> (value, source, synonym) of the broker's default for each topic config: Kafka's
    default (source DEFAULT_CONFIG), or the store setting that plays its part here (shown as a
    static broker config under Kafka's broker name for it)."""
    out = {}
    for n, d in DEFS.items():
        if n in _FROM_STORE:
            value, _ = _FROM_STORE[n](store_config)
            out[n] = (value, SOURCE_STATIC_BROKER, SYNONYMS.get(n))
        else:
            out[n] = (d.default, SOURCE_DEFAULT, SYNONYMS.get(n))
    return out


# Kafka 3.9 broker configs that describe what this broker does, beyond the topic configs' synonyms:
# name -> (type, value from (broker config, store config, node id) or a constant, the RocketMQ setting
# it comes from or None for Kafka's default). Those not in dynamic_configs.BROKER_DYNAMIC are read-only
# (the broker's YAML).
_BROKER = {
    "broker.id": ("int", lambda b, s, n: str(n), "brokerName / brokerId -> Kafka node id"),
    "node.id": ("int", lambda b, s, n: str(n), "brokerName / brokerId -> Kafka node id"),
    "num.partitions": ("int", lambda b, s, n: str(b.defaultTopicQueueNums), "defaultTopicQueueNums"),
    "default.replication.factor": ("int", "1", None),
    "auto.create.topics.enable": ("boolean", lambda b, s, n: str(b.kafkaAutoCreateTopics).lower(),
                                  "kafkaAutoCreateTopics"),
    "delete.topic.enable": ("boolean", "true", None),
    "log.dirs": ("list", lambda b, s, n: s.storePathRootDir, "storePathRootDir"),
    "log.retention.hours": ("int", lambda b, s, n: str(s.fileReservedTime), "fileReservedTime"),
    "log.retention.check.interval.ms": ("long", lambda b, s, n: str(b.kafkaRetentionCheckIntervalMs),
                                        "kafkaRetentionCheckIntervalMs"),
    "log.cleaner.enable": ("boolean", "true", None),
    "connections.max.idle.ms": ("long", lambda b, s, n: str(b.kafkaConnectionsMaxIdleMs), "kafkaConnectionsMaxIdleMs"),
    "socket.request.max.bytes": ("int", lambda b, s, n: str(b.kafkaSocketRequestMaxBytes), "kafkaSocketRequestMaxBytes"),
    "max.connections": ("int", lambda b, s, n: str(b.kafkaMaxConnections or INT_MAX), "kafkaMaxConnections"),
    "group.initial.rebalance.delay.ms": ("int", lambda b, s, n: str(b.kafkaGroupInitialRebalanceDelayMs),
                                         "kafkaGroupInitialRebalanceDelayMs"),
    "group.min.session.timeout.ms": ("int", lambda b, s, n: str(b.kafkaGroupMinSessionTimeoutMs),
                                     "kafkaGroupMinSessionTimeoutMs"),
    "group.max.session.timeout.ms": ("int", "1800000", None),
    "offsets.topic.replication.factor": ("short", "1", None),
    "transaction.state.log.replication.factor": ("short", "1", None),
    "transaction.state.log.min.isr": ("int", "1", None),
    "inter.broker.protocol.version": ("string", "3.9-IV0", None),
    "sasl.enabled.mechanisms": ("list", lambda b, s, n: "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" if b.kafkaSaslEnable
                                else "GSSAPI", "kafkaSaslEnable"),
}


def broker_configs(broker_config, store_config, node_id: int) -> list[tuple[str, str, int, str]]:
    """(name, value, source, type) of every broker config a broker DescribeConfigs lists: the
    broker-level synonym of each topic config, then _BROKER; a value taken from this broker's YAML
    has source STATIC_BROKER_CONFIG, Kafka's default DEFAULT_CONFIG."""
    out: dict[str, tuple[str, str, int, str]] = {}
    for topic_name, (value, source, synonym) in broker_defaults(store_config, broker_config).items():
        if synonym and synonym not in out:
            out[synonym] = (synonym, value, source, DEFS[topic_name].type)
    for name, (typ, value, origin) in _BROKER.items():
        if callable(value):
            out[name] = (name, value(broker_config, store_config, node_id), SOURCE_STATIC_BROKER, typ)
        else:
            out[name] = (name, value, SOURCE_DEFAULT, typ)
    return sorted(out.values())


# ------------------------------------------------------------------ the docs table
DOCS_BEGIN = "<!-- topic-configs: generated by `python -m kafka_bridge.topic_configs --write-docs` -->"
DOCS_END = "<!-- /topic-configs -->"


def docs_table() -> str:
    """The Markdown table of the topic configs (docs/kafka-compat.md and docs/zh/kafka-compat.md)."""
    lines = [DOCS_BEGIN, "", f"Kafka version: {KAFKA_VERSION} ({len(DEFS)} topic configs)", "",
             "| topic config | type | Kafka default | broker synonym | here |", "|---|---|---|---|---|"]
    for name, d in DEFS.items():
        here = "takes effect" if name in EFFECTIVE else "kept and shown"
        if name in _FROM_STORE:
            here += f"; default from {_FROM_STORE[name](_DocStore())[1]}"
        if d.doc:
            here += f"; {d.doc}"
        default = f"`{d.default}`" if d.default else '""'
        lines.append(f"| `{name}` | {d.type} | {default} | {SYNONYMS.get(name, '-')} | {here} |")
    lines += ["", DOCS_END]
    return "\n".join(lines)


class _DocStore:
    fileReservedTime = 72
    maxMessageSize = 4 << 20
    mappedFileSizeCommitLog = 1 << 30


def docs_pages() -> list[str]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.join(root, "docs", "kafka-compat.md"), os.path.join(root, "docs", "zh", "kafka-compat.md")]


def splice(text: str, table: str, begin: str = DOCS_BEGIN, end: str = DOCS_END) -> str:
    """`text` with its generated table (between `begin` and `end`) replaced, appended when it has
    none yet."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + table + rest.split(end, 1)[1]
    return text.rstrip("\n") + "\n\n" + table + "\n"


def effective(attributes: dict[str, str] | None, name: str, default: str) -> str:
    return (attributes or {}).get(name, default)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Print (or --write-docs) the Kafka topic-config table of docs/kafka-compat.md")
    ap.add_argument("--write-docs", action="store_true", help="replace the table in docs/kafka-compat.md and docs/zh/")
    args = ap.parse_args(argv)
    table = docs_table()
    if not args.write_docs:
        print(table)
        return 0
    rewrite_docs(lambda text: splice(text, table))
    return 0


def rewrite_docs(edit) -> None:
    """Apply edit(text) -> text to each docs page holding a generated table; say which changed."""
    for path in docs_pages():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        new = edit(text)
        if new != text:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(new)
            print(f"wrote {path}")
        else:
            print(f"{path} is up to date")


if __name__ == "__main__":
    raise SystemExit(main())
