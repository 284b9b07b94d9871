"""Kafka transactions carried on RocketMQ half messages (SPEC §8, §11). Filled in by issue 5;
until then the broker answers transactional requests with COORDINATOR_NOT_AVAILABLE."""
from __future__ import annotations


def attach(bridge) -> None:
    """Enable transactions on `bridge` (sets bridge.txn). Not yet implemented: bridge.txn stays None."""
    bridge.txn = None
