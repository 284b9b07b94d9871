"""ConsumerManager, ProducerManager and RebalanceLockManager: which client connections belong to which
group, their subscriptions, idle-channel expiry (120 s) and the orderly queue locks (SPEC §4).

Wire-agnostic: a "channel" is any hashable object with ``close()`` (the remoting connection);
the remoting layer sets ``ids_change_listener`` to push NOTIFY_CONSUMER_IDS_CHANGED."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

log = logging.getLogger("rmq.broker.client")

#: ClientHousekeepingService: a channel silent this long is closed and forgotten.
CHANNEL_EXPIRED_TIMEOUT_S = 120.0
#: RebalanceLockManager: a queue lock not renewed for this long may be taken by another client.
REBALANCE_LOCK_MAX_LIVE_TIME_S = 60.0


def _now() -> float:
    return time.monotonic()


@dataclass
class ClientChannelInfo:
    channel: Any
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update: float = field(default_factory=_now)


@dataclass
class Subscription:
    """SubscriptionData as the broker keeps it for a group (topic, expression, version)."""
    topic: str
    sub_string: str = "*"
    expression_type: str = "TAG"
    sub_version: int = 0
    tags_set: tuple = ()
    code_set: tuple = ()


class ConsumerGroupInfo:
    def __init__(self, group: str, consume_type: str | None, message_model: str | None,
                 consume_from_where: str | None) -> None:
        self.group = group
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.channels: dict[Any, ClientChannelInfo] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.last_update = _now()

    def all_channels(self) -> list[Any]:
        return list(self.channels)

    def all_client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]

    def find_channel_by_client_id(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_channel(self, info: ClientChannelInfo, consume_type, message_model, consume_from_where) -> bool:
        updated = False
        self.consume_type, self.message_model, self.consume_from_where = consume_type, message_model, consume_from_where
        old = self.channels.get(info.channel)
        if old is None:
            self.channels[info.channel] = info
            log.info("new consumer connected, group: %s %s %s channel: %s", self.group, consume_type,
                     message_model, info.client_id)
            updated = True
            old = info
        elif old.client_id != info.client_id:
            log.error("consumer channel exists in broker, but clientId differs: group %s old %s new %s",
                      self.group, old.client_id, info.client_id)
            self.channels[info.channel] = info
            old = info
        self.last_update = _now()
        old.last_update = self.last_update
        return updated

    def update_subscription(self, subs: Iterable[Subscription]) -> bool:
        updated = False
        subs = list(subs)
        for sub in subs:
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                updated = True
                log.info("subscription changed, add new topic, group: %s %s", self.group, sub)
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        wanted = {s.topic for s in subs}
        for topic in list(self.subscriptions):
            if topic not in wanted:
                log.warning("subscription changed, group: %s remove topic %s", self.group, topic)
                del self.subscriptions[topic]
                updated = True
        self.last_update = _now()
        return updated

    def unregister_channel(self, channel: Any) -> bool:
        info = self.channels.pop(channel, None)
        if info is not None:
            log.info("unregister a consumer[%s] from consumerGroupInfo %s", info.client_id, self.group)
        return info is not None


class ConsumerManager:
    """consumerTable: group -> ConsumerGroupInfo. ``ids_change_listener(group, channels)`` is called
    whenever a group's membership changes (DefaultConsumerIdsChangeListener CHANGE event)."""

    def __init__(self, channel_expired_timeout_s: float = CHANNEL_EXPIRED_TIMEOUT_S) -> None:
        self.table: dict[str, ConsumerGroupInfo] = {}
        self.channel_expired_timeout_s = channel_expired_timeout_s
        self.ids_change_listener: Callable[[str, list[Any]], None] | None = None
        self.lock = threading.RLock()

    def _changed(self, group: str, channels: list[Any]) -> None:
        fn = self.ids_change_listener
        if fn is not None:
            try:
                fn(group, channels)
            except Exception:  # noqa: BLE001
                log.exception("consumer ids change listener failed for %s", group)

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def register_consumer(self, group: str, info: ClientChannelInfo, consume_type, message_model,
                          consume_from_where, subs: Iterable[Subscription], notify: bool = True) -> bool:
        with self.lock:
            cg = self.table.get(group)
            if cg is None:
                cg = self.table[group] = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
            r1 = cg.update_channel(info, consume_type, message_model, consume_from_where)
            r2 = cg.update_subscription(subs)
            channels = cg.all_channels()
        if (r1 or r2) and notify:
            self._changed(group, channels)
        return r1 or r2

    def unregister_consumer(self, group: str, channel: Any, notify: bool = True) -> None:
        with self.lock:
            cg = self.table.get(group)
            if cg is None:
                return
            cg.unregister_channel(channel)
            if not cg.channels:
                self.table.pop(group, None)
                log.info("unregister consumer ok, no any connection, and remove consumer group, %s", group)
            channels = cg.all_channels()
        if notify:
            self._changed(group, channels)

    def do_channel_close_event(self, channel: Any) -> list[str]:
        """A connection closed: forget it in every group and tell the remaining members."""
        changed = []
        with self.lock:
            for group, cg in list(self.table.items()):
                if cg.unregister_channel(channel):
                    if not cg.channels:
                        self.table.pop(group, None)
                        log.info("unregister consumer ok, no any connection, and remove consumer group, %s", group)
                    changed.append((group, cg.all_channels()))
        for group, channels in changed:
            self._changed(group, channels)
        return [g for g, _ in changed]

    def scan_not_active_channel(self, now: float | None = None) -> list[Any]:
        """Channels silent for channel_expired_timeout_s are dropped; returns them (to be closed)."""
        now = _now() if now is None else now
        expired = []
        with self.lock:
            for group, cg in list(self.table.items()):
                for ch, info in list(cg.channels.items()):
                    if now - info.last_update > self.channel_expired_timeout_s:
                        log.warning("SCAN: remove expired channel from ConsumerManager consumerTable. "
                                    "channel=%s, consumerGroup=%s", info.client_id, group)
                        del cg.channels[ch]
                        expired.append(ch)
                if not cg.channels:
                    log.warning("SCAN: remove expired channel from ConsumerManager consumerTable, all "
                                "clear, consumerGroup=%s", group)
                    del self.table[group]
        return expired

    def find_subscription(self, group: str, topic: str) -> Subscription | None:
        cg = self.table.get(group)
        return cg.subscriptions.get(topic) if cg else None

    def groups_by_topic(self, topic: str) -> set[str]:
        return {g for g, cg in list(self.table.items()) if topic in cg.subscriptions}


class ProducerManager:
    """groupChannelTable: producer group -> {channel: ClientChannelInfo}."""

    def __init__(self, channel_expired_timeout_s: float = CHANNEL_EXPIRED_TIMEOUT_S) -> None:
        self.table: dict[str, dict[Any, ClientChannelInfo]] = {}
        self.channel_expired_timeout_s = channel_expired_timeout_s
        self.lock = threading.RLock()

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        with self.lock:
            chans = self.table.setdefault(group, {})
            old = chans.get(info.channel)
            if old is None:
                chans[info.channel] = info
                log.info("new producer connected, group: %s channel: %s", group, info.client_id)
            else:
                old.last_update = _now()

    def unregister_producer(self, group: str, channel: Any) -> None:
        with self.lock:
            chans = self.table.get(group)
            if chans and chans.pop(channel, None) is not None:
                log.info("unregister a producer[%s] from groupChannelTable", group)
                if not chans:
                    del self.table[group]

    def do_channel_close_event(self, channel: Any) -> None:
        with self.lock:
            for group, chans in list(self.table.items()):
                if chans.pop(channel, None) is not None and not chans:
                    del self.table[group]

    def scan_not_active_channel(self, now: float | None = None) -> list[Any]:
        now = _now() if now is None else now
        expired = []
        with self.lock:
            for group, chans in list(self.table.items()):
                for ch, info in list(chans.items()):
                    if now - info.last_update > self.channel_expired_timeout_s:
                        log.warning("SCAN: remove expired channel[%s] from ProducerManager groupChannelTable, "
                                    "producer group name: %s", info.client_id, group)
                        del chans[ch]
                        expired.append(ch)
                if not chans:
                    del self.table[group]
        return expired

    def available_channel(self, group: str) -> Any | None:
        """A live channel of the group (for CHECK_TRANSACTION_STATE), newest activity first."""
        with self.lock:
            chans = self.table.get(group)
            if not chans:
                return None
            infos = sorted(chans.values(), key=lambda i: i.last_update, reverse=True)
        for info in infos:
            if not getattr(info.channel, "closed", False):
                return info.channel
        return None

    def channels(self, group: str) -> list[ClientChannelInfo]:
        return list(self.table.get(group, {}).values())


@dataclass
class LockEntry:
    client_id: str
    last_update: float = field(default_factory=_now)

    def is_locked(self, client_id: str, max_live: float) -> bool:
        return self.client_id == client_id and not self.is_expired(max_live)

    def is_expired(self, max_live: float) -> bool:
        return _now() - self.last_update > max_live


class RebalanceLockManager:
    """mqLockTable: group -> {(topic, brokerName, queueId): LockEntry} for orderly consumers."""

    def __init__(self, max_live_s: float = REBALANCE_LOCK_MAX_LIVE_TIME_S) -> None:
        self.max_live_s = max_live_s
        self.table: dict[str, dict[tuple, LockEntry]] = {}
        self.lock = threading.Lock()

    def try_lock_batch(self, group: str, mqs: Iterable[tuple], client_id: str) -> list[tuple]:
        locked = []
        with self.lock:
            entries = self.table.setdefault(group, {})
            for mq in mqs:
                e = entries.get(mq)
                if e is None:
                    entries[mq] = LockEntry(client_id)
                    log.info("tryLockBatch, message queue locked, %s %s %s", group, client_id, mq)
                    locked.append(mq)
                elif e.client_id == client_id:
                    e.last_update = _now()
                    locked.append(mq)
                elif e.is_expired(self.max_live_s):
                    log.warning("tryLockBatch, message queue lock expired, %s OLD %s NEW %s %s",
                                group, e.client_id, client_id, mq)
                    e.client_id = client_id
                    e.last_update = _now()
                    locked.append(mq)
                else:
                    log.warning("tryLockBatch, message queue locked by other client, %s OTHER %s NEW %s %s",
                                group, e.client_id, client_id, mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[tuple], client_id: str) -> None:
        with self.lock:
            entries = self.table.get(group)
            if not entries:
                return
            for mq in mqs:
                e = entries.get(mq)
                if e is not None and e.client_id == client_id:
                    del entries[mq]
                    log.info("unlockBatch, Group: %s %s %s", group, mq, client_id)
            if not entries:
                del self.table[group]

    def is_locked(self, group: str, mq: tuple, client_id: str) -> bool:
        e = self.table.get(group, {}).get(mq)
        return e is not None and e.is_locked(client_id, self.max_live_s)


__all__ = ["ClientChannelInfo", "Subscription", "ConsumerGroupInfo", "ConsumerManager", "ProducerManager",
           "RebalanceLockManager", "CHANNEL_EXPIRED_TIMEOUT_S", "REBALANCE_LOCK_MAX_LIVE_TIME_S"]
