"""Plain ACL of RocketMQ 4.x (acl module: PlainPermissionManager, Permission, AclUtils, AclSigner,
RemoteAddressStrategyFactory) as pure logic: plain_acl.yml text in, accounts out; signatures and
permission checks. No sockets, no files: rmq/server/acl.py reads the file and hooks the listener."""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import yaml

# SessionCredentials ext field names (the Java client's AclClientRPCHook, the C++ ClientRPCHook)
ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # the C++ client's authChannel, signed like any other field
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: not part of the signature
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

# Permission.java
DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

#: Permission.ADMIN_CODE: UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
#: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP
ADMIN_CODES = frozenset({17, 25, 215, 200, 207})

_PERM_NAMES = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
_ACCOUNT_KEYS = {"accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                 "defaultGroupPerm", "topicPerms", "groupPerms"}
_TOP_KEYS = {"globalWhiteRemoteAddresses", "accounts", "dataVersion"}


class AclConfigError(ValueError):
    """A plain_acl.yml that cannot be used; the message names the file, the line and the key."""


class AclDenied(Exception):
    """A request the ACL refuses (PlainPermissionManager's AclException); str() is the reason."""


def parse_perm(text: str | None) -> int:
    """Permission.parsePermFromString: DENY, PUB, SUB, PUB|SUB (None -> DENY). ValueError otherwise."""
    if text is None:
        return DENY
    norm = re.sub(r"\s+", "", str(text)).upper()
    if norm not in _PERM_NAMES:
        raise ValueError(f"permission {text!r}: expected DENY, PUB, SUB or PUB|SUB")
    return _PERM_NAMES[norm]


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB|SUB"}.get(perm & (PUB | SUB), "DENY")


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & PUB or owned & SUB)
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def is_retry_topic(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


# ------------------------------------------------------------------------------ signatures
def _java_key(k: str):
    return k.encode("utf-16-be")  # TreeMap<String> order: UTF-16 code units


def combine_request_content(fields: Mapping[str, str], body: bytes | None) -> bytes:
    """AclUtils.combineRequestContent: the values of `fields` sorted by key (Signature and
    _UNIQUE_KEY_QUERY left out), concatenated, UTF-8, then the body."""
    parts = [str(fields[k]) for k in sorted(fields, key=_java_key)
             if k != SIGNATURE and k != UNIQUE_MSG_QUERY_FLAG and fields[k] is not None]
    data = "".join(parts).encode("utf-8")
    return data + bytes(body) if body else data


def cal_signature(data: bytes, secret_key: str) -> str:
    """AclSigner.calSignature: base64(HmacSHA1(secretKey, data))."""
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), data, hashlib.sha1).digest()).decode("ascii")


def sign_ext_fields(ext_fields: dict, body: bytes | None, access_key: str, secret_key: str,
                    security_token: str | None = None) -> dict:
    """AclClientRPCHook.doBeforeRequest: add AccessKey (and SecurityToken) to the ext fields, then the
    Signature over all of them and the body. Returns the same dict."""
    ext_fields.pop(SIGNATURE, None)
    ext_fields[ACCESS_KEY] = access_key
    if security_token:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields[SIGNATURE] = cal_signature(combine_request_content(ext_fields, body), secret_key)
    return ext_fields


# ------------------------------------------------------------------------------ remote addresses
class RemoteAddressStrategy:
    """RemoteAddressStrategyFactory: "*" (everyone), "" (nobody), "192.168.1.1", "192.168.*.*",
    "192.168.1.10-20", "192.168.1.{1,2,3}", "a,b,c" (several), and CIDR "10.0.0.0/8"."""

    def __init__(self, text: str | None) -> None:
        self.text = (text or "").strip()
        self._all = self.text in ("*", "*.*.*.*")
        self._nets: list = []
        self._patterns: list[list[tuple[int, int] | frozenset]] = []
        if self._all or not self.text:
            return
        brace = re.fullmatch(r"((?:\d+\.){3})\{([\d,\s]+)\}", self.text)
        items = ([brace.group(1) + n.strip() for n in brace.group(2).split(",") if n.strip()] if brace
                 else [p.strip() for p in self.text.split(",") if p.strip()])
        for item in items:
            if "/" in item or ":" in item:
                try:
                    self._nets.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    raise ValueError(f"address {item!r}: not an IP address, pattern or CIDR") from None
                continue
            segs = item.split(".")
            if len(segs) != 4 and not (segs and segs[-1] == "*" and len(segs) < 4):
                raise ValueError(f"address {item!r}: expected four dot-separated parts")
            while len(segs) < 4:
                segs.append("*")
            pat = []
            for s in segs:
                m = re.fullmatch(r"(\d{1,3})(?:-(\d{1,3}))?", s)
                if s == "*":
                    pat.append((0, 255))
                elif m:
                    lo = int(m.group(1))
                    hi = int(m.group(2)) if m.group(2) else lo
                    if not 0 <= lo <= hi <= 255:
                        raise ValueError(f"address {item!r}: part {s!r} is not in 0..255")
                    pat.append((lo, hi))
                else:
                    raise ValueError(f"address {item!r}: part {s!r} is not a number, range or *")
            self._patterns.append(pat)

    def match(self, ip: str | None) -> bool:
        if self._all:
            return True
        if not ip or (not self._patterns and not self._nets):
            return False
        if self._nets:
            try:
                addr = ipaddress.ip_address(ip)
                if any(addr in n for n in self._nets):
                    return True
            except ValueError:
                pass
        segs = ip.split(".")
        if len(segs) != 4 or not all(s.isdigit() for s in segs):
            return False
        nums = [int(s) for s in segs]
        return any(all(lo <= n <= hi for n, (lo, hi) in zip(nums, pat)) for pat in self._patterns)

    def __repr__(self) -> str:
        return f"RemoteAddressStrategy({self.text!r})"


# ------------------------------------------------------------------------------ accounts
@dataclass
class PlainAccount:
    """One entry of `accounts` (PlainAccessConfig / PlainAccessResource)."""
    access_key: str
    secret_key: str
    white: RemoteAddressStrategy = field(default_factory=lambda: RemoteAddressStrategy(""))
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    resource_perms: dict[str, int] = field(default_factory=dict)  # topic or %RETRY%group -> perm


@dataclass
class AccessRequest:
    """What one request needs (PlainAccessResource as built by PlainAccessValidator.parse)."""
    remote_ip: str
    request_code: int = 0
    access_key: str | None = None
    signature: str | None = None
    content: bytes = b""
    resources: dict[str, int] = field(default_factory=dict)

    def add(self, resource: str | None, perm: int) -> None:
        if resource:
            self.resources[resource] = perm


class PlainAclConfig:
    """PlainPermissionManager over one parsed plain_acl.yml."""

    def __init__(self, global_white: list[RemoteAddressStrategy], accounts: dict[str, PlainAccount],
                 source: str = "<plain_acl>") -> None:
        self.global_white = global_white
        self.accounts = accounts
        self.source = source

    def is_global_white(self, ip: str | None) -> bool:
        return any(s.match(ip) for s in self.global_white)

    def validate(self, req: AccessRequest) -> None:
        """PlainPermissionManager.validate: global whitelist, account, account whitelist, signature,
        then the permission of each resource. Raises AclDenied with RocketMQ's reason."""
        if self.is_global_white(req.remote_ip):
            return
        if not req.access_key:
            raise AclDenied("No accessKey is configured")
        acct = self.accounts.get(req.access_key)
        if acct is None:
            raise AclDenied(f"No acl config for {req.access_key}")
        if acct.white.match(req.remote_ip):
            return
        expected = cal_signature(req.content, acct.secret_key)
        if not req.signature or not hmac.compare_digest(expected, req.signature):
            raise AclDenied(f"Check signature failed for accessKey={req.access_key}")
        self.check_perm(acct, req.request_code, req.resources)

    def check_perm(self, acct: PlainAccount, request_code: int | None, needed: Mapping[str, int]) -> None:
        """PlainPermissionManager.checkPerm."""
        if request_code in ADMIN_CODES and not acct.admin:
            raise AclDenied(f"Need admin permission for request code={request_code}, "
                            f"but accessKey={acct.access_key} is not")
        if not needed or (acct.admin and not acct.resource_perms):
            return
        for resource, perm in needed.items():
            group = is_retry_topic(resource)
            owned = acct.resource_perms.get(resource)
            if owned is None:
                owned = acct.default_group_perm if group else acct.default_topic_perm
                if not check_permission(perm, owned):
                    raise AclDenied(f"No default permission for {_print(resource, group)}")
            elif not check_permission(perm, owned):
                raise AclDenied(f"No permission for {_print(resource, group)}")

    def allowed(self, access_key: str | None, resource: str, perm: int, *, group: bool = False) -> bool:
        """The permission part only (an authenticated principal, e.g. a Kafka SASL user)."""
        acct = self.accounts.get(access_key or "")
        if acct is None:
            return False
        try:
            self.check_perm(acct, None, {retry_topic(resource) if group else resource: perm})
        except AclDenied:
            return False
        return True


def _print(resource: str, group: bool) -> str:
    return f"group={resource[len(RETRY_GROUP_TOPIC_PREFIX):]}" if group else f"topic={resource}"


# ------------------------------------------------------------------------------ plain_acl.yml
def parse_plain_acl(text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
    """Parse plain_acl.yml text; AclConfigError names `source`, the line and the key at fault."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise AclConfigError(f"{source}:{where}: not valid YAML: {what}") from None
    if root is None:
        return PlainAclConfig([], {}, source)
    ctor = yaml.SafeLoader("")

    def fail(node, msg: str):
        raise AclConfigError(f"{source}: line {node.start_mark.line + 1}: {msg}")

    def scalar(node, key: str):
        if not isinstance(node, yaml.ScalarNode):
            fail(node, f"{key}: expected a single value, got a {'list' if isinstance(node, yaml.SequenceNode) else 'mapping'}")
        return ctor.construct_object(node)

    def string(node, key: str, *, allow_none: bool = True):
        v = scalar(node, key)
        if v is None:
            if not allow_none:
                fail(node, f"{key}: a value is required")
            return None
        if isinstance(v, bool):
            fail(node, f"{key}: expected a string, got {v!r}")
        return str(v)

    def strings(node, key: str) -> list[tuple[object, str]]:
        if isinstance(node, yaml.ScalarNode) and ctor.construct_object(node) is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            fail(node, f"{key}: expected a list")
        return [(n, string(n, key, allow_none=False)) for n in node.value]

    def mapping(node, what: str) -> dict:
        if not isinstance(node, yaml.MappingNode):
            fail(node, f"{what}: expected a mapping of keys")
        out = {}
        for k, v in node.value:
            name = scalar(k, what)
            if name in out:
                fail(k, f"{what}: key {name!r} given twice")
            out[name] = (k, v)
        return out

    top = mapping(root, "plain_acl.yml")
    for name, (k, _) in top.items():
        if name not in _TOP_KEYS:
            fail(k, f"unknown key {name!r} (expected globalWhiteRemoteAddresses, accounts)")
    global_white = []
    if "globalWhiteRemoteAddresses" in top:
        for n, text in strings(top["globalWhiteRemoteAddresses"][1], "globalWhiteRemoteAddresses"):
            try:
                global_white.append(RemoteAddressStrategy(text))
            except ValueError as exc:
                fail(n, f"globalWhiteRemoteAddresses: {exc}")
    accounts: dict[str, PlainAccount] = {}
    acc_node = top.get("accounts", (None, None))[1]
    if acc_node is not None and not (isinstance(acc_node, yaml.ScalarNode) and ctor.construct_object(acc_node) is None):
        if not isinstance(acc_node, yaml.SequenceNode):
            fail(acc_node, "accounts: expected a list of accounts")
        for an in acc_node.value:
            a = mapping(an, "accounts entry")
            for name, (k, _) in a.items():
                if name not in _ACCOUNT_KEYS:
                    fail(k, f"account: unknown key {name!r} (expected one of {', '.join(sorted(_ACCOUNT_KEYS))})")
            for req in ("accessKey", "secretKey"):
                if req not in a:
                    fail(an, f"account: {req} is missing")
            ak = string(a["accessKey"][1], "accessKey", allow_none=False)
            sk = string(a["secretKey"][1], "secretKey", allow_none=False)
            for key, val in (("accessKey", ak), ("secretKey", sk)):
                if len(val) <= 5:  # PlainPermissionManager: "length should longer than 6"
                    fail(a[key][1], f"{key} of account {ak!r}: at least 6 characters are required")
            if ak in accounts:
                fail(a["accessKey"][1], f"accessKey {ak!r}: given for two accounts")
            acct = PlainAccount(ak, sk)
            if "whiteRemoteAddress" in a:
                node = a["whiteRemoteAddress"][1]
                try:
                    acct.white = RemoteAddressStrategy(string(node, "whiteRemoteAddress"))
                except ValueError as exc:
                    fail(node, f"whiteRemoteAddress of account {ak!r}: {exc}")
            if "admin" in a:
                node = a["admin"][1]
                v = scalar(node, "admin")
                if isinstance(v, str) and v.lower() in ("true", "false"):
                    v = v.lower() == "true"
                if v is not None and not isinstance(v, bool):
                    fail(node, f"admin of account {ak!r}: expected true or false, got {v!r}")
                acct.admin = bool(v)
            for key, attr in (("defaultTopicPerm", "default_topic_perm"), ("defaultGroupPerm", "default_group_perm")):
                if key in a:
                    node = a[key][1]
                    try:
                        setattr(acct, attr, parse_perm(string(node, key)))
                    except ValueError as exc:
                        fail(node, f"{key} of account {ak!r}: {exc}")
            for key, group in (("topicPerms", False), ("groupPerms", True)):
                if key not in a:
                    continue
                for n, entry in strings(a[key][1], key):
                    res, eq, perm = entry.rpartition("=")
                    res = res.strip()
                    if not eq or not res:
                        fail(n, f"{key} of account {ak!r}: {entry!r}: expected NAME=PUB|SUB|PUB|SUB|DENY")
                    try:
                        p = parse_perm(perm)
                    except ValueError as exc:
                        fail(n, f"{key} of account {ak!r}: {entry!r}: {exc}")
                    acct.resource_perms[retry_topic(res) if group else res] = p
            accounts[ak] = acct
    return PlainAclConfig(global_white, accounts, source)


def accounts_secrets(cfg: PlainAclConfig) -> Iterable[tuple[str, str]]:
    return ((a.access_key, a.secret_key) for a in cfg.accounts.values())


__all__ = ["ACCESS_KEY", "SECRET_KEY", "SIGNATURE", "SECURITY_TOKEN", "ONS_CHANNEL", "DENY", "ANY", "PUB", "SUB",
           "ADMIN_CODES", "AclConfigError", "AclDenied", "AccessRequest", "PlainAccount", "PlainAclConfig",
           "RemoteAddressStrategy", "parse_perm", "perm_name", "check_permission", "combine_request_content",
           "cal_signature", "sign_ext_fields", "parse_plain_acl", "retry_topic", "is_retry_topic"]
