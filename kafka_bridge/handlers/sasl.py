"""SaslHandshake and SaslAuthenticate: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677, as
Kafka's ScramSaslServer) over the accounts of kafkaSaslUsers and, with aclEnable, plain_acl.yml (SPEC §11);
SCRAM also over the credentials AlterUserScramCredentials stored (those win over a configured password).
Off unless kafkaSaslEnable or aclEnable; a wrong password is SASL_AUTHENTICATION_FAILED and a log line."""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os

from rmq.common.log_limit import RateLimitedLog

from ..protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.sasl")
failure_log = RateLimitedLog(log, "failed authentications", prefix="Kafka SASL: ")  # a retry loop is summarised

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
_SCRAM_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SASL_AUTHENTICATION_FAILED = 58
_FAILED = "Authentication failed: Invalid username or password"


class SaslFailure(Exception):
    """The exchange failed; str() is the message the client gets."""


def sasl_enabled(bridge) -> bool:
    cfg = bridge.config
    return bool(cfg.kafkaSaslEnable or getattr(cfg, "aclEnable", False))


def password_of(bridge, user: str) -> str | None:
    """The secret of `user`: an ACL account (accessKey/secretKey) first, then kafkaSaslUsers."""
    acl = getattr(bridge, "acl", None)
    if acl is not None:
        secret = acl.secrets().get(user)
        if secret is not None:
            return secret
    return bridge.sasl_users.get(user)


async def handle_sasl_handshake(bridge, conn, version: int, body: dict):
    mech = body["mechanism"]
    if not sasl_enabled(bridge):
        return {"error_code": ec.ILLEGAL_SASL_STATE, "mechanisms": []}
    if mech not in MECHANISMS:
        return {"error_code": ec.UNSUPPORTED_SASL_MECHANISM, "mechanisms": MECHANISMS}
    conn.sasl_mechanism = mech
    conn.extra.pop("scram", None)
    conn.sasl_v0_pending = version == 0  # v0: the next frames are raw SASL tokens, not requests
    return {"error_code": ec.NONE, "mechanisms": MECHANISMS}


def check_plain(bridge, token: bytes) -> str | None:
    """PLAIN token authzid\\0authcid\\0passwd -> the user name when the password matches."""
    parts = bytes(token).split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        user, pw = parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError:
        return None
    expected = password_of(bridge, user)
    if expected is None or not hmac.compare_digest(expected.encode(), pw.encode()):
        return None
    return user


# ------------------------------------------------------------------------------ SCRAM
def _hmac(alg: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, alg).digest()


def scram_credential(alg: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """ScramFormatter: (StoredKey, ServerKey) from the password."""
    salted = hashlib.pbkdf2_hmac(alg, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(alg, salted, b"Client Key")
    return hashlib.new(alg, client_key).digest(), _hmac(alg, salted, b"Server Key")


def _credential(bridge, mech: str, user: str, password: str) -> tuple[bytes, int, bytes, bytes]:
    """(salt, iterations, StoredKey, ServerKey) of a user, computed once per password (as Kafka
    keeps SCRAM credentials rather than passwords)."""
    cache = bridge.__dict__.setdefault("_scram_credentials", {})
    iterations = max(4096, int(getattr(bridge.config, "kafkaSaslScramIterations", 4096)))
    key = (mech, user)
    hit = cache.get(key)
    if hit is not None and hit[0] == hashlib.sha256(password.encode()).digest() and hit[2] == iterations:
        return hit[1], hit[2], hit[3], hit[4]
    salt = os.urandom(16)
    stored, server = scram_credential(_SCRAM_HASH[mech], password, salt, iterations)
    cache[key] = (hashlib.sha256(password.encode()).digest(), salt, iterations, stored, server)
    return salt, iterations, stored, server


def _attrs(msg: str) -> dict[str, str]:
    out = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslFailure(f"Invalid SCRAM message: attribute {part!r}")
        out.setdefault(part[0], part[2:])
    return out


def _saslname(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslFailure("Invalid SCRAM username encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def scram_step(bridge, conn, token: bytes) -> tuple[bytes, bool]:
    """One SCRAM round: client-first -> server-first, client-final -> server-final (done)."""
    mech = conn.sasl_mechanism
    alg = _SCRAM_HASH[mech]
    try:
        msg = bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
    st = conn.extra.get("scram")
    if st is None:  # client-first-message: gs2-header client-first-message-bare
        if not (msg.startswith("n,") or msg.startswith("y,")):
            raise SaslFailure("Invalid SCRAM client first message (channel binding is not supported)")
        cut = msg.index(",", 2)
        gs2, bare = msg[:cut + 1], msg[cut + 1:]
        a = _attrs(bare)
        if "n" not in a or "r" not in a or not a["r"]:
            raise SaslFailure("Invalid SCRAM client first message")
        if bare.split(",", 2)[0][:2] == "m=":
            raise SaslFailure("SCRAM mandatory extensions are not supported")
        user = _saslname(a["n"])
        if "tokenauth=true" in bare.split(","):
            raise SaslFailure("Delegation tokens are not supported")
        from .security import stored_credential
        cred = stored_credential(bridge, mech, user)  # AlterUserScramCredentials' credentials first
        if cred is None:
            password = password_of(bridge, user)
            if password is None:
                raise SaslFailure(_FAILED)
            cred = _credential(bridge, mech, user, password)
        salt, iterations, stored, server_key = cred
        nonce = a["r"] + base64.b64encode(os.urandom(24)).decode("ascii").rstrip("=").replace("/", "_").replace("+", "-")
        server_first = f"r={nonce},s={base64.b64encode(salt).decode('ascii')},i={iterations}"
        conn.extra["scram"] = {"user": user, "gs2": gs2, "bare": bare, "server_first": server_first,
                               "nonce": nonce, "stored": stored, "server_key": server_key}
        return server_first.encode("utf-8"), False
    # client-final-message: c=..,r=..[,..],p=proof
    conn.extra.pop("scram", None)
    conn.extra["scram_user"] = st["user"]        # for the log line if this message is refused
    head, sep, proof_b64 = msg.rpartition(",p=")
    if not sep:
        raise SaslFailure("Invalid SCRAM client final message: no proof")
    a = _attrs(head)
    try:
        cbind = base64.b64decode(a.get("c", ""), validate=True)
        proof = base64.b64decode(proof_b64, validate=True)
    except ValueError:
        raise SaslFailure("Invalid SCRAM client final message: bad base64") from None
    if cbind != st["gs2"].encode("utf-8"):
        raise SaslFailure("Invalid SCRAM client final message: channel binding does not match")
    if a.get("r") != st["nonce"]:
        raise SaslFailure("Invalid SCRAM client final message: nonce does not match")
    auth_message = f"{st['bare']},{st['server_first']},{head}".encode("utf-8")
    client_sig = _hmac(alg, st["stored"], auth_message)
    if len(proof) != len(client_sig):
        raise SaslFailure(_FAILED)
    client_key = bytes(x ^ y for x, y in zip(proof, client_sig))
    if not hmac.compare_digest(hashlib.new(alg, client_key).digest(), st["stored"]):
        raise SaslFailure(_FAILED)
    conn.authenticated = True
    conn.principal = st["user"]
    server_sig = _hmac(alg, st["server_key"], auth_message)
    return f"v={base64.b64encode(server_sig).decode('ascii')}".encode("utf-8"), True


def sasl_token(bridge, conn, token: bytes) -> tuple[bytes, bool]:
    """One SASL token of the chosen mechanism -> (reply, done); SaslFailure when refused."""
    mech = conn.sasl_mechanism
    if mech == "PLAIN":
        user = check_plain(bridge, token)
        if user is None:
            raise SaslFailure(_FAILED)
        conn.authenticated, conn.principal = True, user
        return b"", True
    if mech in _SCRAM_HASH:
        return scram_step(bridge, conn, token)
    raise SaslFailure("SaslHandshake first")


def _user_hint(conn, token: bytes) -> str:
    st = conn.extra.get("scram")
    if st is not None:
        return st["user"]
    if "scram_user" in conn.extra:
        return conn.extra["scram_user"]
    try:
        text = bytes(token[:512]).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001
        return "?"
    if conn.sasl_mechanism == "PLAIN":
        parts = text.split("\x00")
        return parts[1] if len(parts) == 3 else "?"
    for part in text.split(","):
        if part.startswith("n="):
            return part[2:]
    return "?"


def log_failure(conn, token: bytes, exc: Exception) -> None:
    failure_log.warning(conn.peer[0], f"SASL/{conn.sasl_mechanism}",
                        "SASL/%s authentication failed for user %r from %s:%s: %s", conn.sasl_mechanism,
                        _user_hint(conn, token), *conn.peer, exc)


async def handle_sasl_authenticate(bridge, conn, version: int, body: dict):
    if conn.sasl_mechanism not in MECHANISMS:
        return {"error_code": ec.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first", "auth_bytes": b"",
                "session_lifetime_ms": 0}
    token = body["auth_bytes"]
    try:
        reply, _done = sasl_token(bridge, conn, token)
    except SaslFailure as exc:
        log_failure(conn, token, exc)
        conn.extra["close_after_reply"] = True
        return {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": str(exc), "auth_bytes": b"",
                "session_lifetime_ms": 0}
    return {"error_code": ec.NONE, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0}
