"""Kafka's ACL model (KIP-140, KIP-290): AclBinding, the filters of DescribeAcls / DeleteAcls, and the
authorizer's decision, as org.apache.kafka.common.acl and Kafka 3.9's StandardAuthorizer define them.

Sans-IO: bindings are plain values; kafka_bridge.admin_state keeps them in the broker's config dir and
kafka_bridge.authorizer asks `decide()` when kafkaAclEnable is on.
"""
from __future__ import annotations

from dataclasses import dataclass

# ResourceType
RT_UNKNOWN, RT_ANY, RT_TOPIC, RT_GROUP, RT_CLUSTER, RT_TRANSACTIONAL_ID, RT_DELEGATION_TOKEN, RT_USER = range(8)
RESOURCE_TYPES = {RT_TOPIC: "TOPIC", RT_GROUP: "GROUP", RT_CLUSTER: "CLUSTER", RT_TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                  RT_DELEGATION_TOKEN: "DELEGATION_TOKEN", RT_USER: "USER"}
# PatternType
PT_UNKNOWN, PT_ANY, PT_MATCH, PT_LITERAL, PT_PREFIXED = range(5)
PATTERN_TYPES = {PT_LITERAL: "LITERAL", PT_PREFIXED: "PREFIXED"}
# AclOperation
(OP_UNKNOWN, OP_ANY, OP_ALL, OP_READ, OP_WRITE, OP_CREATE, OP_DELETE, OP_ALTER, OP_DESCRIBE, OP_CLUSTER_ACTION,
 OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS, OP_IDEMPOTENT_WRITE, OP_CREATE_TOKENS, OP_DESCRIBE_TOKENS) = range(15)
OPERATIONS = {OP_ALL: "ALL", OP_READ: "READ", OP_WRITE: "WRITE", OP_CREATE: "CREATE", OP_DELETE: "DELETE",
              OP_ALTER: "ALTER", OP_DESCRIBE: "DESCRIBE", OP_CLUSTER_ACTION: "CLUSTER_ACTION",
              OP_DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS", OP_ALTER_CONFIGS: "ALTER_CONFIGS",
              OP_IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", OP_CREATE_TOKENS: "CREATE_TOKENS",
              OP_DESCRIBE_TOKENS: "DESCRIBE_TOKENS"}
# AclPermissionType
PERM_UNKNOWN, PERM_ANY, PERM_DENY, PERM_ALLOW = range(4)
PERMISSIONS = {PERM_DENY: "DENY", PERM_ALLOW: "ALLOW"}

WILDCARD = "*"               # ResourcePattern.WILDCARD_RESOURCE, AclEntry.WildcardHost
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

#: an allowed operation also allows these (AclAuthorizer / StandardAuthorizer's implied operations)
_IMPLIES = {OP_DESCRIBE: (OP_READ, OP_WRITE, OP_DELETE, OP_ALTER), OP_DESCRIBE_CONFIGS: (OP_ALTER_CONFIGS,)}


@dataclass(frozen=True)
class AclBinding:
    """A resource pattern (type, name, LITERAL or PREFIXED) and an access control entry (principal,
    host, operation, permission)."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> dict:
        return {"resourceType": RESOURCE_TYPES[self.resource_type], "resourceName": self.resource_name,
                "patternType": PATTERN_TYPES[self.pattern_type], "principal": self.principal, "host": self.host,
                "operation": OPERATIONS[self.operation], "permission": PERMISSIONS[self.permission]}

    @classmethod
    def from_json(cls, d: dict) -> "AclBinding":
        def code(table: dict, name: str) -> int:
            for k, v in table.items():
                if v == name:
                    return k
            raise ValueError(f"unknown ACL value {name!r}")
        return cls(code(RESOURCE_TYPES, d["resourceType"]), str(d["resourceName"]), code(PATTERN_TYPES, d["patternType"]),
                   str(d["principal"]), str(d["host"]), code(OPERATIONS, d["operation"]),
                   code(PERMISSIONS, d["permission"]))


@dataclass(frozen=True)
class AclFilter:
    """AclBindingFilter: None (null) matches any name, principal or host; ANY any type, operation
    or permission; pattern type ANY any pattern with exactly this name, MATCH every pattern that
    would apply to a resource of this name (the literal name, the literal '*', the prefixes)."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != RT_ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PT_ANY, PT_MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PT_ANY, b.pattern_type):
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == PT_LITERAL:   # MATCH
                if b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(b.resource_name):  # MATCH against PREFIXED
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == OP_ANY or self.operation == b.operation)
                and (self.permission == PERM_ANY or self.permission == b.permission))


def binding_error(b: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (Kafka's AclControlManager.validateNewAcl, INVALID_REQUEST),
    or None."""
    if b.resource_type not in RESOURCE_TYPES:
        return f"Invalid resourceType {b.resource_type}"
    if b.pattern_type not in PATTERN_TYPES:
        return f"Invalid patternType {b.pattern_type}"
    if b.operation not in OPERATIONS:
        return f"Invalid operation {b.operation}"
    if b.permission not in PERMISSIONS:
        return f"Invalid permissionType {b.permission}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if b.resource_type == RT_CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in b.principal or not b.principal.split(":", 1)[0] or not b.principal.split(":", 1)[1]:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal " \
               "type from the principal name)"
    if not b.host:
        return "Invalid host: the host must not be empty ('*' is any host)"
    return None


def filter_error(f: AclFilter) -> str | None:
    """Why DescribeAcls / DeleteAcls refuse a filter (an UNKNOWN field), or None."""
    if f.resource_type == RT_UNKNOWN or (f.resource_type != RT_ANY and f.resource_type not in RESOURCE_TYPES):
        return "Filter contains UNKNOWN elements: resource type"
    if f.pattern_type not in (PT_ANY, PT_MATCH, PT_LITERAL, PT_PREFIXED):
        return "Filter contains UNKNOWN elements: pattern type"
    if f.operation == OP_UNKNOWN or (f.operation != OP_ANY and f.operation not in OPERATIONS):
        return "Filter contains UNKNOWN elements: operation"
    if f.permission == PERM_UNKNOWN or f.permission not in (PERM_ANY, PERM_DENY, PERM_ALLOW):
        return "Filter contains UNKNOWN elements: permission type"
    return None


def _applies(b: AclBinding, rtype: int, name: str, principal: str, host: str) -> bool:
    if b.resource_type != rtype:
        return False
    if b.pattern_type == PT_LITERAL:
        if b.resource_name not in (name, WILDCARD):
            return False
    elif not name.startswith(b.resource_name):
        return False
    return b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)


def decide(bindings, principal: str, host: str, operation: int, rtype: int, name: str,
           allow_if_no_acl: bool = False) -> bool:
    """StandardAuthorizer's answer for `principal` from `host` doing `operation` on (rtype, name):
    a matching DENY (of the operation or ALL) wins; then a matching ALLOW of the operation, of ALL,
    or of an operation that implies it (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
    DESCRIBE_CONFIGS); else allowed only when no ACL at all names the resource and
    allow.everyone.if.no.acl.found (kafkaAllowEveryoneIfNoAclFound) is on."""
    ops = (operation, OP_ALL) + _IMPLIES.get(operation, ())
    any_acl = False
    allowed = False
    for b in bindings:
        if b.resource_type != rtype:
            continue
        if not (b.resource_name == name or b.resource_name == WILDCARD and b.pattern_type == PT_LITERAL
                or b.pattern_type == PT_PREFIXED and name.startswith(b.resource_name)):
            continue
        any_acl = True
        if not _applies(b, rtype, name, principal, host):
            continue
        if b.permission == PERM_DENY and b.operation in (operation, OP_ALL):
            return False
        if b.permission == PERM_ALLOW and b.operation in ops:
            allowed = True
    return allowed or (not any_acl and allow_if_no_acl)
