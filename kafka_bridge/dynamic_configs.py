"""Kafka's dynamic broker configs (KIP-226: AlterConfigs on a BROKER resource, per broker id or as the
cluster default "") and GROUP configs (KIP-848 / KIP-932, Kafka 4.0's GroupConfig): their tables,
validation and the entries DescribeConfigs lists, with Kafka's sources (DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, GROUP_CONFIG).

The dynamic broker table is Kafka 3.9's DynamicBrokerConfig set this broker can hold: the broker-level
synonym of every topic config (DynamicLogConfig; DescribeConfigs shows a value set here as the default
of every topic without its own, as Kafka does) and the thread-pool, connection-quota, log-cleaner and
SASL settings. They are kept and shown; none changes what this broker does yet (the topic configs that
take effect read the topic's own value or the broker's YAML).
A Kafka broker config that is not dynamic is refused with Kafka's INVALID_REQUEST "Cannot update these
configs dynamically"; a name Kafka does not know is refused with INVALID_CONFIG (Kafka would keep it as
a custom config). Values are kept in kafka_bridge.admin_state. Sans-IO.
"""
from __future__ import annotations

from . import topic_configs as tc
from .topic_configs import ConfigDef, INT_MAX, LONG_MAX, _at_least, _between, _one_of

_L = str(LONG_MAX)

#: Kafka 3.9's dynamic broker configs kept here: name -> ConfigDef (type, Kafka's default, validator)
BROKER_DYNAMIC: dict[str, ConfigDef] = {}
for _topic, _broker in tc.SYNONYMS.items():
    _d = tc.DEFS[_topic]
    BROKER_DYNAMIC[_broker] = ConfigDef(_broker, _d.type, _d.default, _d.check, f"default of topic config {_topic}")
for _d in (
    ConfigDef("log.retention.hours", "int", "168", None, "default of retention.ms (in hours)"),
    ConfigDef("log.retention.minutes", "int", None, None, "default of retention.ms (in minutes)"),
    ConfigDef("log.roll.hours", "int", "168", _at_least(1), "default of segment.ms (in hours)"),
    ConfigDef("log.cleaner.threads", "int", "1", _at_least(0)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308"),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", "134217728"),
    ConfigDef("log.cleaner.io.buffer.size", "int", "524288", _at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", "double", "0.9"),
    ConfigDef("log.cleaner.backoff.ms", "long", "15000", _at_least(0)),
    ConfigDef("background.threads", "int", "10", _at_least(1)),
    ConfigDef("num.io.threads", "int", "8", _at_least(1)),
    ConfigDef("num.network.threads", "int", "3", _at_least(1)),
    ConfigDef("num.replica.fetchers", "int", "1"),
    ConfigDef("num.recovery.threads.per.data.dir", "int", "2", _at_least(1)),
    ConfigDef("max.connections", "int", str(INT_MAX), _at_least(0)),
    ConfigDef("max.connections.per.ip", "int", str(INT_MAX), _at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", ""),
    ConfigDef("max.connection.creation.rate", "int", str(INT_MAX), _at_least(0)),
    ConfigDef("leader.replication.throttled.rate", "long", _L, _at_least(0)),
    ConfigDef("follower.replication.throttled.rate", "long", _L, _at_least(0)),
    ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", "long", _L, _at_least(0)),
    ConfigDef("producer.id.expiration.ms", "int", "86400000", _at_least(1)),
    ConfigDef("transaction.partition.verification.enable", "boolean", "true"),
    ConfigDef("sasl.enabled.mechanisms", "list", "GSSAPI"),
    ConfigDef("sasl.jaas.config", "password", None),
    ConfigDef("sasl.kerberos.service.name", "string", None),
    ConfigDef("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit"),
    ConfigDef("sasl.kerberos.min.time.before.relogin", "long", "60000"),
    ConfigDef("sasl.kerberos.ticket.renew.jitter", "double", "0.05"),
    ConfigDef("sasl.kerberos.ticket.renew.window.factor", "double", "0.8"),
    ConfigDef("sasl.login.refresh.buffer.seconds", "short", "300", _between(0, 3600)),
    ConfigDef("sasl.login.refresh.min.period.seconds", "short", "60", _between(0, 900)),
    ConfigDef("sasl.login.refresh.window.factor", "double", "0.8", _between(0.5, 1.0)),
    ConfigDef("sasl.login.refresh.window.jitter", "double", "0.05", _between(0.0, 0.25)),
    ConfigDef("ssl.cipher.suites", "list", ""),
    ConfigDef("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3"),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https"),
    ConfigDef("ssl.client.auth", "string", "none", _one_of("required", "requested", "none")),
    ConfigDef("metric.reporters", "list", ""),
):
    BROKER_DYNAMIC[_d.name] = _d
del _d, _topic, _broker


def _group_range(lo: int, hi: int, lo_name: str, hi_name: str, name: str):
    def check(v):
        if v < lo:
            return f"{name} must be greater than or equal to {lo_name} ({lo})"
        if v > hi:
            return f"{name} must be less than or equal to {hi_name} ({hi})"
        return None
    return check


#: Kafka 4.0's GroupConfig: name -> ConfigDef, bounded by the broker's group.* limits (Kafka's defaults)
GROUP_DEFS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("consumer.session.timeout.ms", "int", "45000",
              _group_range(45000, 60000, "group.consumer.min.session.timeout.ms",
                           "group.consumer.max.session.timeout.ms", "consumer.session.timeout.ms")),
    ConfigDef("consumer.heartbeat.interval.ms", "int", "5000",
              _group_range(5000, 15000, "group.consumer.min.heartbeat.interval.ms",
                           "group.consumer.max.heartbeat.interval.ms", "consumer.heartbeat.interval.ms")),
    ConfigDef("share.session.timeout.ms", "int", "45000",
              _group_range(45000, 60000, "group.share.min.session.timeout.ms",
                           "group.share.max.session.timeout.ms", "share.session.timeout.ms")),
    ConfigDef("share.heartbeat.interval.ms", "int", "5000",
              _group_range(5000, 15000, "group.share.min.heartbeat.interval.ms",
                           "group.share.max.heartbeat.interval.ms", "share.heartbeat.interval.ms")),
    ConfigDef("share.record.lock.duration.ms", "int", "30000",
              _group_range(15000, 60000, "group.share.min.record.lock.duration.ms",
                           "group.share.max.record.lock.duration.ms", "share.record.lock.duration.ms")),
    ConfigDef("share.auto.offset.reset", "string", "latest", _one_of("latest", "earliest"),
              "takes effect: where a share group without a start offset begins"),
)}


def check_broker(configs: dict[str, str | None]) -> tuple[str, str] | None:
    """('INVALID_REQUEST' | 'INVALID_CONFIG', message) for the first config this broker cannot set
    dynamically, else None."""
    static = sorted(n for n in configs if n not in BROKER_DYNAMIC and n in _static_names())
    if static:
        return "INVALID_REQUEST", f"Cannot update these configs dynamically: Set({', '.join(static)})"
    for name, value in configs.items():
        if name not in BROKER_DYNAMIC:
            return "INVALID_CONFIG", (f"Unknown broker config name: {name} (the dynamic broker configs of Kafka "
                                      f"{tc.KAFKA_VERSION} this broker keeps are listed in docs/kafka-compat.md)")
        try:
            tc.parse(name, value, BROKER_DYNAMIC)
        except ValueError as exc:
            return "INVALID_CONFIG", str(exc)
    return None


def check_group(configs: dict[str, str | None]) -> tuple[str, str] | None:
    for name, value in configs.items():
        if name not in GROUP_DEFS:
            return "INVALID_CONFIG", f"Unknown group config name: {name}"
        try:
            tc.parse(name, value, GROUP_DEFS)
        except ValueError as exc:
            return "INVALID_CONFIG", str(exc)
    return None


def canonical(defs: dict, name: str, value: str) -> str:
    d = defs[name]
    if d.type == "list":
        return ",".join(tc.parse(name, value, defs))
    if d.type == "boolean":
        return value.strip().lower()
    return value.strip()


def _static_names() -> set[str]:
    return set(tc._BROKER)


def dynamic_value(broker_configs: dict[str, dict[str, str]], node_id: int, name: str) -> tuple[str, int] | None:
    """(value, source) of a dynamic broker config: this broker's own, else the cluster default."""
    own = broker_configs.get(str(node_id), {})
    if name in own:
        return own[name], tc.SOURCE_DYNAMIC_BROKER
    dflt = broker_configs.get("", {})
    if name in dflt:
        return dflt[name], tc.SOURCE_DYNAMIC_DEFAULT_BROKER
    return None


def broker_entries(broker_config, store_config, node_id: int, dynamic: dict[str, dict[str, str]],
                   default_resource: bool = False, include_synonyms: bool = False) -> list[dict]:
    """DescribeConfigs entries of a BROKER resource. For this broker's id: every config (static ones
    read-only, dynamic ones with the value and source that wins: DYNAMIC_BROKER_CONFIG, then
    DYNAMIC_DEFAULT_BROKER_CONFIG, then STATIC_BROKER_CONFIG / DEFAULT_CONFIG). For the cluster
    default resource "": only the dynamic defaults set, as Kafka lists them."""
    out = []
    if default_resource:
        for name, value in sorted(dynamic.get("", {}).items()):
            d = BROKER_DYNAMIC.get(name)
            out.append(_entry(name, value, tc.SOURCE_DYNAMIC_DEFAULT_BROKER, False, d.type if d else "string",
                              [{"name": name, "value": value, "source": tc.SOURCE_DYNAMIC_DEFAULT_BROKER}]
                              if include_synonyms else []))
        return out
    base = {n: (v, src, typ) for n, v, src, typ in tc.broker_configs(broker_config, store_config, node_id)}
    for name, d in BROKER_DYNAMIC.items():
        base.setdefault(name, (d.default, tc.SOURCE_DEFAULT, d.type))
    for name in sorted(base):
        value, src, typ = base[name]
        syn = []
        if include_synonyms:
            own = dynamic.get(str(node_id), {})
            if name in own:
                syn.append({"name": name, "value": own[name], "source": tc.SOURCE_DYNAMIC_BROKER})
            if name in dynamic.get("", {}):
                syn.append({"name": name, "value": dynamic[""][name], "source": tc.SOURCE_DYNAMIC_DEFAULT_BROKER})
            syn.append({"name": name, "value": value, "source": src})
        dyn = dynamic_value(dynamic, node_id, name) if name in BROKER_DYNAMIC else None
        if dyn is not None:
            value, src = dyn
        sensitive = BROKER_DYNAMIC.get(name) is not None and BROKER_DYNAMIC[name].type == "password"
        out.append(_entry(name, None if sensitive else value, src, name not in BROKER_DYNAMIC, typ, syn, sensitive))
    return out


def group_entries(overrides: dict[str, str], include_synonyms: bool = False) -> list[dict]:
    """DescribeConfigs entries of a GROUP resource: each group config, GROUP_CONFIG where the group
    has its own value, DEFAULT_CONFIG otherwise (the group need not exist, as in Kafka)."""
    out = []
    for name, d in GROUP_DEFS.items():
        own = overrides.get(name)
        syn = []
        if include_synonyms:
            if own is not None:
                syn.append({"name": name, "value": own, "source": tc.SOURCE_GROUP})
            syn.append({"name": name, "value": d.default, "source": tc.SOURCE_DEFAULT})
        out.append(_entry(name, own if own is not None else d.default,
                          tc.SOURCE_GROUP if own is not None else tc.SOURCE_DEFAULT, False, d.type, syn))
    return out


def _entry(name, value, source, read_only, typ, synonyms, sensitive=False) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source, "is_sensitive": sensitive,
            "synonyms": synonyms, "config_type": tc.TYPE_CODES.get(typ, 2), "documentation": None}


DOCS_BEGIN = "<!-- broker-group-configs: generated by `python -m kafka_bridge.dynamic_configs --write-docs` -->"
DOCS_END = "<!-- /broker-group-configs -->"


def docs_tables() -> str:
    """The Markdown tables of the dynamic broker configs and the group configs (docs/kafka-compat.md
    and docs/zh/kafka-compat.md, after the topic configs)."""
    lines = [DOCS_BEGIN, "", f"Dynamic broker configs ({len(BROKER_DYNAMIC)}, Kafka {tc.KAFKA_VERSION}'s DynamicBrokerConfig "
             "set kept here; AlterConfigs / IncrementalAlterConfigs on a BROKER resource, this broker's id or \"\" "
             "for the cluster default):", "",
             "| broker config | type | Kafka default | here |", "|---|---|---|---|"]
    for name in sorted(BROKER_DYNAMIC):
        d = BROKER_DYNAMIC[name]
        default = f"`{d.default}`" if d.default else '""'
        lines.append(f"| `{name}` | {d.type} | {default} | kept and shown{'; ' + d.doc if d.doc else ''} |")
    lines += ["", f"Group configs ({len(GROUP_DEFS)}, Kafka 4.0's GroupConfig; resource type GROUP = 32):", "",
              "| group config | type | Kafka default | here |", "|---|---|---|---|"]
    for name, d in GROUP_DEFS.items():
        lines.append(f"| `{name}` | {d.type} | `{d.default}` | {d.doc or 'kept and shown'} |")
    lines += ["", DOCS_END]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Print (or --write-docs) the dynamic broker and group config tables "
                                             "of docs/kafka-compat.md")
    ap.add_argument("--write-docs", action="store_true", help="replace the tables in docs/kafka-compat.md and docs/zh/")
    args = ap.parse_args(argv)
    table = docs_tables()
    if not args.write_docs:
        print(table)
        return 0
    def edit(text: str) -> str:
        if DOCS_BEGIN in text:
            return tc.splice(text, table, DOCS_BEGIN, DOCS_END)
        return text.replace(tc.DOCS_END, tc.DOCS_END + "\n\n" + table, 1)  # the first time: after the topic configs
    tc.rewrite_docs(edit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["BROKER_DYNAMIC", "GROUP_DEFS", "check_broker", "check_group", "broker_entries", "group_entries",
           "dynamic_value", "canonical", "docs_tables"]
