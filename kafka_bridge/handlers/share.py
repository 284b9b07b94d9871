"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge (KIP-932)."""
from __future__ import annotations

HANDLERS: dict = {}
