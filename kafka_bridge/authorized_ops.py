"""Kafka's authorized-operations bit fields (AuthHelper.authorizedOperations) for Metadata,
DescribeCluster and DescribeGroups, from the project's ACLs (kafka_bridge.authorizer's rules): Kafka
ACLs with kafkaAclEnable, plain_acl.yml with aclEnable, every supported operation otherwise."""
from __future__ import annotations

# Kafka's AclOperation codes, and the operations each resource type supports (ResourceType's)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = \
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12
SUPPORTED_OPS = {"topic": (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
                 "cluster": (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
                             IDEMPOTENT_WRITE),
                 "group": (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)}  # group configs: Kafka 4.0


def authorized_operations(bridge, conn, kind: str, name: str | None = None) -> int:
    """The bit field of the operations the connection's principal may do on a topic, group or the
    cluster, as Kafka's AuthHelper.authorizedOperations answers `include_*_authorized_operations`.
    Without ACLs (no authorizer) that is every operation the resource type supports; with aclEnable,
    what kafka_bridge.authorizer lets the account do: PUB -> WRITE, SUB -> READ, either -> DESCRIBE and
    DESCRIBE_CONFIGS on a topic; SUB on a group -> READ and DESCRIBE; an admin account everything."""
    ops = SUPPORTED_OPS[kind]
    acl = getattr(bridge, "acl", None)
    if getattr(bridge.config, "kafkaAclEnable", False):  # Kafka ACLs: each operation as the authorizer decides
        from . import kafka_acls as ka
        from .authorizer import KafkaAclPolicy
        policy = KafkaAclPolicy(bridge, conn)
        rtype = {"topic": ka.RT_TOPIC, "group": ka.RT_GROUP, "cluster": ka.RT_CLUSTER}[kind]
        target = ka.CLUSTER_NAME if kind == "cluster" else name
        ops = tuple(op for op in ops if target and policy.ok(op, rtype, target))
    elif acl is not None and not conn.extra.get("acl_white"):
        from rmq.common.acl import PUB, SUB
        user = conn.principal
        acct = acl.current().accounts.get(user or "")
        if not (acct is not None and acct.admin):
            allowed = set()
            if kind == "topic" and name is not None:
                if acl.allowed(user, name, PUB):
                    allowed |= {WRITE, DESCRIBE, DESCRIBE_CONFIGS}
                if acl.allowed(user, name, SUB):
                    allowed |= {READ, DESCRIBE, DESCRIBE_CONFIGS}
            elif kind == "group" and name:
                if acl.allowed(user, name, SUB, group=True):
                    allowed |= {READ, DESCRIBE}
            ops = tuple(op for op in ops if op in allowed)
    bits = 0
    for op in ops:
        bits |= 1 << op
    return bits
