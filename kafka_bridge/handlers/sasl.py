"""SaslHandshake and SaslAuthenticate with the PLAIN mechanism (off by default; kafkaSaslEnable) (SPEC §11)."""
from __future__ import annotations

import hmac

from ..protocol import error_codes as ec

MECHANISMS = ["PLAIN"]


async def handle_sasl_handshake(bridge, conn, version: int, body: dict):
    mech = body["mechanism"]
    if not bridge.config.kafkaSaslEnable:
        return {"error_code": ec.ILLEGAL_SASL_STATE, "mechanisms": []}
    if mech not in MECHANISMS:
        return {"error_code": ec.UNSUPPORTED_SASL_MECHANISM, "mechanisms": MECHANISMS}
    conn.sasl_mechanism = mech
    conn.sasl_v0_pending = version == 0  # v0: the next frame is a raw SASL token, not a request
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
    expected = bridge.sasl_users.get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), pw.encode()):
        return None
    return user


async def handle_sasl_authenticate(bridge, conn, version: int, body: dict):
    if conn.sasl_mechanism != "PLAIN":
        return {"error_code": ec.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first", "auth_bytes": b"",
                "session_lifetime_ms": 0}
    user = check_plain(bridge, body["auth_bytes"])
    if user is None:
        return {"error_code": ec.SASL_AUTHENTICATION_FAILED,
                "error_message": "Authentication failed: Invalid username or password", "auth_bytes": b"",
                "session_lifetime_ms": 0}
    conn.authenticated = True
    conn.principal = user
    return {"error_code": ec.NONE, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}
