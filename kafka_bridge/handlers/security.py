"""CreateAcls, DescribeAcls, DeleteAcls (KIP-140 / KIP-290) over the Kafka ACL store, and
DescribeUserScramCredentials / AlterUserScramCredentials (KIP-554) over the SCRAM credential store,
both kept in kafka_bridge.admin_state (config/kafkaAdmin.json, copied to slaves).

The ACL APIs answer as a Kafka broker with StandardAuthorizer does (bindings are stored whether or
not kafkaAclEnable enforces them, as Kafka stores them whatever allow.everyone.if.no.acl.found says);
the SCRAM APIs validate as Kafka 3.9's ScramControlManager (its error codes and messages) and keep
salt, iterations, StoredKey and ServerKey, which SASL/SCRAM then authenticates against.
"""
from __future__ import annotations

import hashlib
import hmac

from .. import kafka_acls as ka
from ..admin_state import admin_state
from ..protocol import error_codes as ec

# ScramMechanism (clients.admin): UNKNOWN 0, SCRAM_SHA_256 1, SCRAM_SHA_512 2
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_MECH_CODE = {v: k for k, v in SCRAM_MECHANISMS.items()}
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096     # ScramMechanism.minIterations (both mechanisms)
MAX_ITERATIONS = 16384    # ScramControlManager.MAX_ITERATIONS


# ------------------------------------------------------------------ ACLs
def _filter(d: dict, prefix: str = "") -> ka.AclFilter:
    return ka.AclFilter(d["resource_type_filter"], d["resource_name_filter"], d.get("pattern_type_filter", ka.PT_LITERAL),
                        d["principal_filter"], d["host_filter"], d["operation"], d["permission_type"])


async def handle_create_acls(bridge, conn, version: int, body: dict):
    st = admin_state(bridge)
    results = []
    added = False
    for c in body["creations"]:
        b = ka.AclBinding(c["resource_type"], c["resource_name"], c.get("resource_pattern_type", ka.PT_LITERAL),
                          c["principal"], c["host"], c["operation"], c["permission_type"])
        why = ka.binding_error(b)
        if why is not None:
            results.append({"error_code": ec.INVALID_REQUEST, "error_message": why})
            continue
        with st.lock:
            if b not in st.acls:   # Kafka: creating an existing binding again succeeds and changes nothing
                st.acls.append(b)
                added = True
        results.append({"error_code": ec.NONE, "error_message": None})
    if added:
        st.changed()
    return {"throttle_time_ms": 0, "results": results}


async def handle_describe_acls(bridge, conn, version: int, body: dict):
    f = _filter(body)
    why = ka.filter_error(f)
    if why is not None:
        return {"throttle_time_ms": 0, "error_code": ec.INVALID_REQUEST, "error_message": why, "resources": []}
    st = admin_state(bridge)
    with st.lock:
        found = [b for b in st.acls if f.matches(b)]
    if version == 0:  # v0 knows LITERAL patterns only
        found = [b for b in found if b.pattern_type == ka.PT_LITERAL]
    by_resource: dict[tuple, list] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission})
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None,
            "resources": [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                          for (t, n, p), acls in by_resource.items()]}


async def handle_delete_acls(bridge, conn, version: int, body: dict):
    st = admin_state(bridge)
    out = []
    removed = False
    for d in body["filters"]:
        f = _filter(d)
        why = ka.filter_error(f)
        if why is not None:
            out.append({"error_code": ec.INVALID_REQUEST, "error_message": why, "matching_acls": []})
            continue
        with st.lock:
            hit = [b for b in st.acls if f.matches(b) and (version > 0 or b.pattern_type == ka.PT_LITERAL)]
            if hit:
                st.acls = [b for b in st.acls if b not in hit]
                removed = True
        out.append({"error_code": ec.NONE, "error_message": None, "matching_acls": [
            {"error_code": ec.NONE, "error_message": None, "resource_type": b.resource_type,
             "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
             "host": b.host, "operation": b.operation, "permission_type": b.permission} for b in hit]})
    if removed:
        st.changed()
    return {"throttle_time_ms": 0, "filter_results": out}


# ------------------------------------------------------------------ SCRAM credentials
def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """ScramFormatter: (StoredKey, ServerKey) from the salted password (Hi(password, salt, i))."""
    alg = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", alg).digest()
    return hashlib.new(alg, client_key).digest(), hmac.new(salted_password, b"Server Key", alg).digest()


def stored_credential(bridge, mechanism: str, user: str) -> tuple[bytes, int, bytes, bytes] | None:
    """(salt, iterations, StoredKey, ServerKey) of `user` for `mechanism` set by AlterUserScramCredentials,
    or None."""
    st = getattr(bridge, "_admin_state", None)
    if st is None:
        st = admin_state(bridge)
    with st.lock:
        c = st.scram.get(user, {}).get(mechanism)
    return None if c is None else (c["salt"], c["iterations"], c["storedKey"], c["serverKey"])


def has_scram_user(bridge, user: str) -> bool:
    st = admin_state(bridge)
    with st.lock:
        return bool(st.scram.get(user))


async def handle_describe_user_scram_credentials(bridge, conn, version: int, body: dict):
    st = admin_state(bridge)
    with st.lock:
        table = {u: dict(m) for u, m in st.scram.items() if m}
    users = [u["name"] for u in body["users"]] if body.get("users") else sorted(table)
    results = []
    dups = {u for u in users if users.count(u) > 1}
    for u in dict.fromkeys(users):
        if u in dups:
            results.append({"user": u, "error_code": ec.DUPLICATE_RESOURCE, "credential_infos": [],
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             "single request"})
        elif u not in table:
            results.append({"user": u, "error_code": ec.RESOURCE_NOT_FOUND, "credential_infos": [],
                            "error_message": "Attempt to describe a user credential that does not exist"})
        else:
            results.append({"user": u, "error_code": ec.NONE, "error_message": None, "credential_infos": [
                {"mechanism": _MECH_CODE[m], "iterations": c["iterations"]} for m, c in sorted(table[u].items())]})
    return {"throttle_time_ms": 0, "error_code": ec.NONE, "error_message": None, "results": results}


def _name_mech_error(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ec.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in SCRAM_MECHANISMS:
        return ec.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


async def handle_alter_user_scram_credentials(bridge, conn, version: int, body: dict):
    """Each user is altered at most once per request (DUPLICATE_RESOURCE otherwise); deletions of a
    credential that does not exist are RESOURCE_NOT_FOUND; upsertions need 4096..16384 iterations
    and a salt and salted password (UNACCEPTABLE_CREDENTIAL)."""
    st = admin_state(bridge)
    errors: dict[str, tuple[int, str]] = {}
    deletions: dict[str, dict] = {}
    upserts: dict[str, dict] = {}
    dup = (ec.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    with st.lock:
        for d in body["deletions"]:
            n = d["name"]
            if n in errors:
                continue
            if deletions.pop(n, None) is not None:
                errors[n] = dup
                continue
            err = _name_mech_error(n, d["mechanism"])
            if err is None and SCRAM_MECHANISMS[d["mechanism"]] not in st.scram.get(n, {}):
                err = (ec.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if err is not None:
                errors[n] = err
            else:
                deletions[n] = d
        for u in body["upsertions"]:
            n = u["name"]
            if n in errors:
                continue
            if deletions.pop(n, None) is not None or upserts.pop(n, None) is not None:
                errors[n] = dup
                continue
            err = _name_mech_error(n, u["mechanism"])
            if err is None:
                if u["iterations"] < MIN_ITERATIONS:
                    err = (ec.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                elif u["iterations"] > MAX_ITERATIONS:
                    err = (ec.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
                elif not u["salt"]:
                    err = (ec.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty")
                elif not u["salted_password"]:
                    err = (ec.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty")
            if err is not None:
                errors[n] = err
            else:
                upserts[n] = u
        for n, d in deletions.items():
            mechs = st.scram.get(n, {})
            mechs.pop(SCRAM_MECHANISMS[d["mechanism"]], None)
            if not mechs:
                st.scram.pop(n, None)
        for n, u in upserts.items():
            mech = SCRAM_MECHANISMS[u["mechanism"]]
            stored, server = scram_keys(mech, bytes(u["salted_password"]))
            st.scram.setdefault(n, {})[mech] = {"salt": bytes(u["salt"]), "iterations": u["iterations"],
                                                "storedKey": stored, "serverKey": server}
    if deletions or upserts:
        st.changed()
    results = [{"user": n, "error_code": ec.NONE, "error_message": None} for n in (*deletions, *upserts)]
    results += [{"user": n, "error_code": c, "error_message": m} for n, (c, m) in errors.items()]
    return {"throttle_time_ms": 0, "results": results}


HANDLERS = {
    29: handle_describe_acls, 30: handle_create_acls, 31: handle_delete_acls,
    50: handle_describe_user_scram_credentials, 51: handle_alter_user_scram_credentials,
}
