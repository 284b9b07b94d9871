"""ACL checks on the Kafka listener with the accounts of plain_acl.yml (aclEnable; rmq/server/acl.py):
the SASL user is the accessKey; Produce needs PUB on the topic, Fetch and offsets SUB, ListOffsets and
Metadata PUB or SUB, group APIs SUB on the group (groupPerms), topic admin APIs an admin account.
Where Kafka's authorizer asks for an operation RocketMQ's permissions do not have (DELETE, ALTER_CONFIGS,
anything on the cluster), an admin account is needed: DeleteRecords, AlterConfigs,
IncrementalAlterConfigs, DeleteGroups, OffsetDelete, and DescribeConfigs of a broker; DescribeConfigs of
a topic needs PUB or SUB on it, and ListGroups lists only the groups with SUB. Refusals carry Kafka's
TOPIC_AUTHORIZATION_FAILED (29) / GROUP_AUTHORIZATION_FAILED (30) / CLUSTER_AUTHORIZATION_FAILED (31)
and are logged."""
from __future__ import annotations

import logging

from rmq.common.acl import ANY, PUB, SUB
from rmq.common.log_limit import RateLimitedLog

from . import kafka_acls as ka
from . import protocol as kp
from .protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.acl")
refusal_log = RateLimitedLog(log, "refusals", prefix="Kafka ACL: ")  # a retry loop is summarised

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
RESOURCE_TOPIC = 2  # DescribeConfigs / AlterConfigs resource types (ConfigResource.Type)

#: group APIs answered with a single top-level GROUP_AUTHORIZATION_FAILED
_GROUP_SIMPLE = {kp.JOIN_GROUP: {"generation_id": -1, "leader": "", "member_id": "", "members": []},
                 kp.SYNC_GROUP: {"assignment": b""},
                 kp.HEARTBEAT: {},
                 kp.LEAVE_GROUP: {"members": []}}
#: topic admin APIs: per-topic TOPIC_AUTHORIZATION_FAILED unless the account is admin
_ADMIN_TOPIC_APIS = {kp.CREATE_TOPICS: ("topics", "topics"), kp.DELETE_TOPICS: ("topic_names", "responses"),
                     kp.CREATE_PARTITIONS: ("topics", "results")}


_NOT_CLUSTER = "Cluster authorization failed (an admin account, or the Kafka ACL, is needed)"


def _config_refusal(r: dict) -> dict:
    topic = r["resource_type"] == RESOURCE_TOPIC
    return {"error_code": TOPIC_AUTHORIZATION_FAILED if topic else CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Not authorized" + ("" if topic else " (admin needed)"),
            "resource_type": r["resource_type"], "resource_name": r["resource_name"]}


#: APIs only an admin account may call -> the refusal for a request body
_ADMIN_ONLY = {
    kp.DELETE_RECORDS: lambda body: {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": TOPIC_AUTHORIZATION_FAILED}
            for p in t["partitions"]]} for t in body["topics"]]},
    kp.ALTER_CONFIGS: lambda body: {"throttle_time_ms": 0,
                                    "responses": [_config_refusal(r) for r in body["resources"]]},
    kp.INCREMENTAL_ALTER_CONFIGS: lambda body: {"throttle_time_ms": 0,
                                                "responses": [_config_refusal(r) for r in body["resources"]]},
    kp.DELETE_GROUPS: lambda body: {"throttle_time_ms": 0, "results": [
        {"group_id": g, "error_code": GROUP_AUTHORIZATION_FAILED} for g in body["groups_names"]]},
    kp.OFFSET_DELETE: lambda body: {"error_code": GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []},
    kp.DESCRIBE_ACLS: lambda body: {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                    "error_message": _NOT_CLUSTER, "resources": []},
    kp.CREATE_ACLS: lambda body: {"throttle_time_ms": 0, "results": [
        {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _NOT_CLUSTER} for _ in body["creations"]]},
    kp.DELETE_ACLS: lambda body: {"throttle_time_ms": 0, "filter_results": [
        {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _NOT_CLUSTER, "matching_acls": []}
        for _ in body["filters"]]},
    kp.DESCRIBE_USER_SCRAM_CREDENTIALS: lambda body: {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                                      "error_message": _NOT_CLUSTER, "results": []},
    kp.ALTER_USER_SCRAM_CREDENTIALS: lambda body: {"throttle_time_ms": 0, "results": [
        {"user": u["name"], "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _NOT_CLUSTER}
        for u in list(body["deletions"]) + list(body["upsertions"])]},
}


def _refuse(conn, what: str) -> None:
    # keyed by the API and the (authenticated) principal, not by the topics a client may vary at will
    refusal_log.warning(conn.peer[0], f"{what.split(' ', 1)[0]} by {conn.principal}",
                        "ACL refused %s for %s from %s:%s", what, conn.principal, *conn.peer)


class _PlainAclPolicy:
    """aclEnable: the accounts and permissions of plain_acl.yml (RocketMQ's PUB / SUB, admin accounts)."""

    def __init__(self, acl, user):
        self.acl, self.user = acl, user

    def topic_ok(self, name, perm: int) -> bool:
        return name is not None and self.acl.allowed(self.user, name, perm)

    def group_ok(self, group, describe: bool = False) -> bool:
        return bool(group) and self.acl.allowed(self.user, group, SUB, group=True)

    def describe_config_ok(self, r: dict) -> bool:
        return self.topic_ok(r["resource_name"], ANY) if r["resource_type"] == RESOURCE_TOPIC else self.admin_ok(None, None)

    def admin_ok(self, api_key, body) -> bool:
        acct = self.acl.current().accounts.get(self.user or "")
        return acct is not None and acct.admin


class KafkaAclPolicy:
    """kafkaAclEnable: Kafka ACL bindings (CreateAcls; kafka_bridge.kafka_acls.decide) for the principal
    User:<SASL user> (User:ANONYMOUS without SASL) from the peer's address; kafkaSuperUsers pass."""

    def __init__(self, bridge, conn):
        from .admin_state import admin_state
        st = admin_state(bridge)
        with st.lock:
            self.bindings = list(st.acls)
        self.principal = f"User:{conn.principal}" if conn.principal else "User:ANONYMOUS"
        self.host = conn.peer[0] if conn.peer else ""
        supers = {p.strip() for p in (getattr(bridge.config, "kafkaSuperUsers", "") or "").split(";") if p.strip()}
        self.super = self.principal in supers
        self.allow_if_none = bool(getattr(bridge.config, "kafkaAllowEveryoneIfNoAclFound", False))

    def ok(self, op: int, rtype: int, name) -> bool:
        if self.super:
            return True
        return name is not None and ka.decide(self.bindings, self.principal, self.host, op, rtype, name,
                                              self.allow_if_none)

    def topic_ok(self, name, perm: int) -> bool:
        return self.ok({PUB: ka.OP_WRITE, SUB: ka.OP_READ}.get(perm, ka.OP_DESCRIBE), ka.RT_TOPIC, name)

    def group_ok(self, group, describe: bool = False) -> bool:
        """READ on the group; DESCRIBE where Kafka asks for it (FindCoordinator, DescribeGroups,
        OffsetFetch, ListGroups), which READ implies."""
        return bool(group) and self.ok(ka.OP_DESCRIBE if describe else ka.OP_READ, ka.RT_GROUP, group)

    def describe_config_ok(self, r: dict) -> bool:
        rtype = {RESOURCE_TOPIC: ka.RT_TOPIC, 32: ka.RT_GROUP}.get(r["resource_type"], ka.RT_CLUSTER)
        name = r["resource_name"] if rtype != ka.RT_CLUSTER else ka.CLUSTER_NAME
        return self.ok(ka.OP_DESCRIBE_CONFIGS, rtype, name)

    def admin_ok(self, api_key, body) -> bool:
        """Kafka's operation for each admin API, on every resource the request names."""
        cl = (ka.RT_CLUSTER, ka.CLUSTER_NAME)
        if api_key == kp.CREATE_TOPICS:
            return all(self.ok(ka.OP_CREATE, *cl) or self.ok(ka.OP_CREATE, ka.RT_TOPIC, t["name"])
                       for t in body["topics"])
        if api_key == kp.DELETE_TOPICS:
            names = [t.get("name") for t in body.get("topics") or ()] or list(body.get("topic_names") or ())
            return all(self.ok(ka.OP_DELETE, ka.RT_TOPIC, n) for n in names)
        if api_key == kp.CREATE_PARTITIONS:
            return all(self.ok(ka.OP_ALTER, ka.RT_TOPIC, t["name"]) for t in body["topics"])
        if api_key == kp.DELETE_RECORDS:
            return all(self.ok(ka.OP_DELETE, ka.RT_TOPIC, t["name"]) for t in body["topics"])
        if api_key in (kp.ALTER_CONFIGS, kp.INCREMENTAL_ALTER_CONFIGS):
            def res(r):
                rtype = {RESOURCE_TOPIC: ka.RT_TOPIC, 32: ka.RT_GROUP}.get(r["resource_type"], ka.RT_CLUSTER)
                return rtype, r["resource_name"] if rtype != ka.RT_CLUSTER else ka.CLUSTER_NAME
            return all(self.ok(ka.OP_ALTER_CONFIGS, *res(r)) for r in body["resources"])
        if api_key == kp.DELETE_GROUPS:
            return all(self.ok(ka.OP_DELETE, ka.RT_GROUP, g) for g in body["groups_names"])
        if api_key == kp.OFFSET_DELETE:
            return self.ok(ka.OP_DELETE, ka.RT_GROUP, body["group_id"])
        if api_key in (kp.DESCRIBE_ACLS, kp.DESCRIBE_USER_SCRAM_CREDENTIALS):
            return self.ok(ka.OP_DESCRIBE, *cl)
        return self.ok(ka.OP_ALTER, *cl)   # CreateAcls, DeleteAcls, AlterUserScramCredentials


def _policy(bridge, conn):
    """The checks that apply to this connection: Kafka ACLs (kafkaAclEnable), plain_acl.yml
    (aclEnable), or none."""
    if getattr(bridge.config, "kafkaAclEnable", False):
        return KafkaAclPolicy(bridge, conn)
    acl = getattr(bridge, "acl", None)
    if acl is None or conn.extra.get("acl_white"):
        return None
    return _PlainAclPolicy(acl, conn.principal)


async def authorize(bridge, conn, api_key: int, version: int, body: dict, handler):
    """Run `handler` for what the connection's principal may do; answer the rest with Kafka's errors."""
    policy = _policy(bridge, conn)
    if policy is None:
        return await handler(bridge, conn, version, body)
    topic_ok, group_ok = policy.topic_ok, policy.group_ok

    if api_key == kp.PRODUCE:
        denied = [td for td in body["topic_data"] if not topic_ok(td["name"], PUB)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"Produce to {', '.join(td['name'] for td in denied)}")
        rest = [td for td in body["topic_data"] if td not in denied]
        res = await handler(bridge, conn, version, {**body, "topic_data": rest}) if rest else None
        if body["acks"] == 0:
            return None
        res = res or {"responses": [], "throttle_time_ms": 0}
        res["responses"] = list(res["responses"]) + [
            {"name": td["name"], "partition_responses": [
                {"index": pd["index"], "error_code": TOPIC_AUTHORIZATION_FAILED, "base_offset": -1,
                 "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                 "error_message": "Not authorized to access topics"} for pd in td["partition_data"]]}
            for td in denied]
        return res

    if api_key == kp.FETCH:
        by_id = version >= 13

        def name_of(t):
            return bridge.topic_by_id(t["topic_id"]) if by_id else t["topic"]
        denied = [t for t in body["topics"] if name_of(t) is not None and not topic_ok(name_of(t), SUB)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"Fetch from {', '.join(name_of(t) for t in denied)}")
        rest = [t for t in body["topics"] if t not in denied]
        res = await handler(bridge, conn, version, {**body, "topics": rest})
        from .handlers.fetch import _partition_error
        res["responses"] = list(res["responses"]) + [
            {"topic": "" if by_id else t["topic"], "topic_id": t.get("topic_id"),
             "partitions": [_partition_error(p["partition"], TOPIC_AUTHORIZATION_FAILED) for p in t["partitions"]]}
            for t in denied]
        return res

    if api_key == kp.LIST_OFFSETS:
        denied = [t for t in body["topics"] if not topic_ok(t["name"], ANY)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"ListOffsets of {', '.join(t['name'] for t in denied)}")
        rest = [t for t in body["topics"] if t not in denied]
        res = await handler(bridge, conn, version, {**body, "topics": rest})
        res["topics"] = list(res["topics"]) + [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": TOPIC_AUTHORIZATION_FAILED,
                 "timestamp": -1, "offset": -1, "old_style_offsets": []} for p in t["partitions"]]}
            for t in denied]
        return res

    if api_key == kp.METADATA:
        req = body.get("topics")
        if req:  # named topics: the ones without PUB or SUB get an error (and are not auto-created)
            denied = [t for t in req if t.get("name") is not None and not topic_ok(t["name"], ANY)]
            if not denied:
                return await handler(bridge, conn, version, body)
            rest = [t for t in req if t not in denied]
            if not rest and version >= 1:
                rest = []  # an empty list asks for no topics (v1+)
            res = await handler(bridge, conn, version, {**body, "topics": rest})
            if not rest and version == 0:
                res["topics"] = []
            res["topics"] = list(res["topics"]) + [
                {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": t["name"], "is_internal": False, "partitions": []}
                for t in denied]
            return res
        res = await handler(bridge, conn, version, body)  # all topics: only those this user may see
        res["topics"] = [t for t in res["topics"] if t.get("name") is None or topic_ok(t["name"], ANY)]
        return res

    if api_key in _GROUP_SIMPLE:
        if group_ok(body["group_id"]):
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"{kp.API_NAMES.get(api_key)} of group {body['group_id']}")
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, **_GROUP_SIMPLE[api_key]}

    if api_key == kp.FIND_COORDINATOR and body.get("key_type", 0) == 0:
        keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
        denied = [k for k in keys if not group_ok(k, True)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"FindCoordinator of group {', '.join(denied)}")
        if version < 4:
            return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                    "error_message": "Not authorized to access group", "node_id": -1, "host": "", "port": -1}
        rest = [k for k in keys if k not in denied]
        res = await handler(bridge, conn, version, {**body, "coordinator_keys": rest}) if rest else \
            {"throttle_time_ms": 0, "coordinators": []}
        res["coordinators"] = list(res["coordinators"]) + [
            {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": GROUP_AUTHORIZATION_FAILED,
             "error_message": "Not authorized to access group"} for k in denied]
        return res

    if api_key == kp.DESCRIBE_GROUPS:
        denied = [g for g in body["groups"] if not group_ok(g, True)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"DescribeGroups of {', '.join(denied)}")
        res = await handler(bridge, conn, version, {**body, "groups": [g for g in body["groups"] if g not in denied]})
        res["groups"] = list(res["groups"]) + [
            {"error_code": GROUP_AUTHORIZATION_FAILED, "group_id": g, "group_state": "", "protocol_type": "",
             "protocol_data": "", "members": []} for g in denied]
        return res

    if api_key == kp.OFFSET_COMMIT:
        gok = group_ok(body["group_id"])
        denied = [t for t in body["topics"] if not gok or not topic_ok(t["name"], SUB)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"OffsetCommit of group {body['group_id']}" if not gok else
                f"OffsetCommit of {', '.join(t['name'] for t in denied)}")
        code = GROUP_AUTHORIZATION_FAILED if not gok else TOPIC_AUTHORIZATION_FAILED
        rest = [t for t in body["topics"] if t not in denied]
        res = await handler(bridge, conn, version, {**body, "topics": rest}) if rest else \
            {"throttle_time_ms": 0, "topics": []}
        res["topics"] = list(res["topics"]) + [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": code}
                                               for p in t["partitions"]]} for t in denied]
        return res

    if api_key == kp.OFFSET_FETCH:
        groups = [g["group_id"] for g in body["groups"]] if version >= 8 else [body["group_id"]]
        denied = [g for g in groups if not group_ok(g, True)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"OffsetFetch of group {', '.join(denied)}")
        if version >= 8:
            rest = [g for g in body["groups"] if g["group_id"] not in denied]
            res = await handler(bridge, conn, version, {**body, "groups": rest}) if rest else \
                {"throttle_time_ms": 0, "groups": []}
            res["groups"] = list(res["groups"]) + [{"group_id": g, "topics": [], "error_code": GROUP_AUTHORIZATION_FAILED}
                                                   for g in denied]
            return res
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": GROUP_AUTHORIZATION_FAILED} for p in t["partition_indexes"]]} for t in body["topics"] or ()]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": GROUP_AUTHORIZATION_FAILED}

    if api_key == kp.ADD_PARTITIONS_TO_TXN and version <= 3:  # a transactional producer: PUB on each topic
        denied = [t["name"] for t in body["v3_and_below_topics"] if not topic_ok(t["name"], PUB)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"AddPartitionsToTxn of {', '.join(denied)}")
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": TOPIC_AUTHORIZATION_FAILED if t["name"] in denied
                 else ec.OPERATION_NOT_ATTEMPTED} for p in t["partitions"]]} for t in body["v3_and_below_topics"]]}

    if api_key == kp.ADD_OFFSETS_TO_TXN:
        if group_ok(body["group_id"]):
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"AddOffsetsToTxn of group {body['group_id']}")
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED}

    if api_key == kp.TXN_OFFSET_COMMIT:
        gok = group_ok(body["group_id"])
        if gok and all(topic_ok(t["name"], SUB) for t in body["topics"]):
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"TxnOffsetCommit of group {body['group_id']}")
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"],
                 "error_code": TOPIC_AUTHORIZATION_FAILED if gok else GROUP_AUTHORIZATION_FAILED}
                for p in t["partitions"]]} for t in body["topics"]]}

    admin = policy.admin_ok(api_key, body) if api_key in _ADMIN_ONLY or api_key in _ADMIN_TOPIC_APIS else False

    if api_key == kp.LIST_GROUPS:
        res = await handler(bridge, conn, version, body)
        res["groups"] = [g for g in res["groups"] if group_ok(g["group_id"], True)]
        return res

    if api_key == kp.DESCRIBE_CONFIGS:
        denied = [r for r in body["resources"] if not policy.describe_config_ok(r)]
        if not denied:
            return await handler(bridge, conn, version, body)
        _refuse(conn, f"DescribeConfigs of {', '.join(r['resource_name'] for r in denied)}")
        rest = [r for r in body["resources"] if r not in denied]
        res = await handler(bridge, conn, version, {**body, "resources": rest}) if rest else \
            {"throttle_time_ms": 0, "results": []}
        res["results"] = list(res["results"]) + [
            {**_config_refusal(r), "configs": []} for r in denied]
        return res

    if api_key in _ADMIN_ONLY and not admin:
        _refuse(conn, f"{kp.API_NAMES.get(api_key)} (needs an admin account)")
        return _ADMIN_ONLY[api_key](body)

    if api_key in _ADMIN_TOPIC_APIS:
        if admin:
            return await handler(bridge, conn, version, body)
        req_key, resp_key = _ADMIN_TOPIC_APIS[api_key]
        names = [t if isinstance(t, str) else t.get("name") for t in body.get(req_key) or ()]
        if api_key == kp.DELETE_TOPICS and version >= 6:
            names = [t.get("name") for t in body.get("topics") or ()]
        _refuse(conn, f"{kp.API_NAMES.get(api_key)} of {', '.join(map(str, names))} (needs an admin account)")
        return {"throttle_time_ms": 0, resp_key: [
            {"name": n, "error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": "Not authorized (admin needed)"}
            for n in names]}

    return await handler(bridge, conn, version, body)


__all__ = ["authorize", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "ec"]
