"""ShareGroupCoordinator: Kafka's share groups (KIP-932, "queues for Kafka") as pure logic: the
members and their share sessions, and per partition a SharePartition holding each in-flight
record's state, delivery count and acquisition lock.

Semantics follow KIP-932 and Kafka 4.1's SharePartition:
- record states AVAILABLE -> ACQUIRED -> ACKNOWLEDGED or ARCHIVED (values 0, 1, 2, 4 as Kafka's
  RecordState); the share-partition start offset (SPSO) moves past the leading records that are
  acknowledged or archived, and every offset from the SPSO to the end of the in-flight window
  (the share-partition end offset, here ``next``) has an entry;
- an acquisition adds one to the record's delivery count and locks it for
  ``group.share.record.lock.duration.ms`` (kafkaShareRecordLockDurationMs, 30 s); when the lock
  expires, or the consumer RELEASEs the record, it is AVAILABLE again unless its delivery count
  has reached ``group.share.delivery.count.limit`` (kafkaShareDeliveryCountLimit, 5): then it is
  ARCHIVED. ACCEPT acknowledges, REJECT archives;
- an acknowledgement must name records the member holds (ACQUIRED by it, lock not expired):
  anything else, a batch with first > last, or a type list that is neither one type nor one per
  offset, is INVALID_RECORD_STATE / INVALID_REQUEST for the whole batch and nothing is applied;
- a new share partition starts at the log end (``share.auto.offset.reset`` latest) or at the log
  start (earliest): kafkaShareAutoOffsetReset, or the group's ``share.auto.offset.reset`` config.

Partitions are assigned as Kafka's SimpleAssignor does (``_assignment``): spread over the members
when there are at least as many partitions as members, shared (several members per partition)
when there are more members. Records are handed out per record, so members of one partition never
get the same record at the same time.

State (SPSO, window end, each in-flight record's state and delivery count) is saved to a JSON
file (``<storePathRootDir>/config/kafkaShareGroups.json``, beside consumerOffset.json) after every
request that changed it, written to a temporary file and renamed; on a restart, records that were
ACQUIRED come back AVAILABLE with their delivery counts (their locks died with the broker), as
Kafka's share coordinator recovers them. Archived records may also be handed to ``on_archive``
(the bridge writes them to the group's %DLQ% topic when kafkaShareDlqEnable is set).

Lock expiry is applied lazily: whenever a partition is touched and from the fetch wait loop,
which wakes at the earliest lock deadline (``next_deadline``). Member session expiry, group
listing and the first heartbeat checks come from GroupRegistry (group_registry.py), shared with
the KIP-848 consumer groups. No sockets, no wire codec.
"""
from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from .group_registry import GroupRegistry, HeartbeatResult
from .protocol import error_codes as ec

log = logging.getLogger("kafka_bridge.share")

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged", ARCHIVED: "Archived"}
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
MAX_IN_FLIGHT = 2000  # group.share.partition.max.record.locks (Kafka's default is 2000)


class SharePartition:
    """The in-flight window of one topic-partition for one share group."""

    __slots__ = ("start", "next", "records")

    def __init__(self, start: int):
        self.start = start
        self.next = start
        # offset -> [state, delivery count, member id or None, lock deadline (monotonic) or 0]
        self.records: dict[int, list] = {}

    def expire(self, now: float, limit: int, archived: list) -> bool:
        changed = False
        for off, r in self.records.items():
            if r[0] == ACQUIRED and r[3] <= now:
                self._release(off, r, limit, archived)
                changed = True
        if changed:
            self.advance()
        return changed

    def _release(self, off: int, r: list, limit: int, archived: list) -> None:
        r[2], r[3] = None, 0.0
        if r[1] >= limit:
            r[0] = ARCHIVED
            archived.append((off, r[1], "delivery count limit"))
        else:
            r[0] = AVAILABLE

    def advance(self) -> None:
        recs = self.records
        while self.start < self.next:
            r = recs.get(self.start)
            if r is None or r[0] not in (ACKNOWLEDGED, ARCHIVED):
                break
            del recs[self.start]
            self.start += 1

    def move_start(self, log_start: int, log_end: int) -> None:
        """Records deleted from the log (retention) leave the window; a log truncated below the
        window end (a topic recreated) resets the window."""
        if self.next > log_end:
            self.start = self.next = min(self.start, log_end)
            self.records.clear()
        if self.start < log_start:
            for off in range(self.start, min(log_start, self.next)):
                self.records.pop(off, None)
            self.start = log_start
            self.next = max(self.next, log_start)

    def acquire(self, member: str, log_end: int, max_records: int, now: float, lock_s: float,
                limit: int) -> list[tuple[int, int]]:
        """Acquire up to max_records: released records first (oldest first), then new ones.
        Returns [(offset, delivery count)] in offset order."""
        out = []
        deadline = now + lock_s
        for off in sorted(o for o, r in self.records.items() if r[0] == AVAILABLE):
            if len(out) >= max_records:
                break
            r = self.records[off]
            r[0], r[1], r[2], r[3] = ACQUIRED, r[1] + 1, member, deadline
            out.append((off, r[1]))
        while len(out) < max_records and self.next < log_end and self.next - self.start < MAX_IN_FLIGHT:
            self.records[self.next] = [ACQUIRED, 1, member, deadline]
            out.append((self.next, 1))
            self.next += 1
        out.sort()
        return out

    def acknowledge(self, member: str, first: int, last: int, types: list[int], now: float, limit: int,
                    archived: list) -> int:
        """Apply one acknowledgement batch atomically; returns an error code."""
        n = last - first + 1
        if first < 0 or n <= 0 or len(types) not in (1, n) or any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
            return ec.INVALID_REQUEST
        recs = self.records
        for off in range(first, last + 1):
            t = types[0] if len(types) == 1 else types[off - first]
            r = recs.get(off)
            if t == GAP and r is None:
                continue
            if r is None or r[0] != ACQUIRED or r[2] != member or r[3] <= now:
                return ec.INVALID_RECORD_STATE
        for off in range(first, last + 1):
            t = types[0] if len(types) == 1 else types[off - first]
            r = recs.get(off)
            if r is None:
                continue
            if t in (ACCEPT, GAP):
                r[0], r[2], r[3] = ACKNOWLEDGED, None, 0.0
            elif t == RELEASE:
                self._release(off, r, limit, archived)
            else:
                r[0], r[2], r[3] = ARCHIVED, None, 0.0
                archived.append((off, r[1], "rejected"))
        self.advance()
        return ec.NONE

    def release_member(self, member: str, limit: int, archived: list) -> bool:
        changed = False
        for off, r in self.records.items():
            if r[0] == ACQUIRED and r[2] == member:
                # a closed session gives its records back without counting it against the limit
                r[0], r[2], r[3] = AVAILABLE, None, 0.0
                changed = True
        return changed

    def next_deadline(self) -> float | None:
        ds = [r[3] for r in self.records.values() if r[0] == ACQUIRED]
        return min(ds) if ds else None

    def to_json(self) -> dict:
        return {"start": self.start, "next": self.next,
                "records": {str(o): [ACKNOWLEDGED if r[0] == ACKNOWLEDGED else ARCHIVED if r[0] == ARCHIVED
                                     else AVAILABLE, r[1]] for o, r in self.records.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "SharePartition":
        sp = cls(int(d["start"]))
        sp.next = int(d["next"])
        # a record ACQUIRED elsewhere (the master's live view, synced to a slave) is AVAILABLE here:
        # its lock belongs to a consumer of the other broker
        sp.records = {int(o): [int(r[0]) if int(r[0]) in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE, int(r[1]), None, 0.0]
                      for o, r in d.get("records", {}).items()}
        return sp

    def live_json(self, now: float) -> dict:
        """The window as the admin tools show it: each record's state, delivery count, and for an
        acquired one its member and the milliseconds its lock has left."""
        return {"start": self.start, "next": self.next,
                "records": {str(o): [r[0], r[1]] + ([r[2], max(0, int((r[3] - now) * 1000))] if r[0] == ACQUIRED else [])
                            for o, r in sorted(self.records.items())}}


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    epoch: int = 0
    topics: list[str] = field(default_factory=list)
    last_seen: float = 0.0
    last_sent: frozenset | None = None


@dataclass
class ShareSession:
    epoch: int = 1
    partitions: set = field(default_factory=set)  # (topic, partition)


class ShareGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.partitions: dict[tuple[str, int], SharePartition] = {}
        self.sessions: dict[str, ShareSession] = {}
        self.auto_offset_reset: str | None = None  # the group config share.auto.offset.reset

    def state(self) -> str:
        return "Stable" if self.members else "Empty"


class ShareGroupCoordinator(GroupRegistry):
    """The share groups of one broker. `topics()` returns {topic: partitions}; `bounds(topic,
    partition)` returns (log start, log end) or None for an unknown partition."""

    groups: dict[str, ShareGroup]

    def __init__(self, topics: Callable[[], dict[str, int]], bounds: Callable[[str, int], tuple[int, int] | None],
                 state_path: str | None = None, *, heartbeat_interval_ms: int = 5000,
                 session_timeout_ms: int = 45_000, lock_duration_ms: int = 30_000, delivery_count_limit: int = 5,
                 auto_offset_reset: str = "latest", on_archive: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(heartbeat_interval_ms=heartbeat_interval_ms, session_timeout_ms=session_timeout_ms,
                         clock=clock)
        self.topics = topics
        self.bounds = bounds
        self.state_path = state_path
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.auto_offset_reset = auto_offset_reset
        self.on_archive = on_archive
        self.dirty = False
        self.stats = {"acquired": 0, "redelivered": 0, "acknowledged": 0, "released": 0, "archived": 0}
        if state_path:
            self._load()

    # ---------------------------------------------------------------- persistence
    def _load(self) -> None:
        try:
            with open(self.state_path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("share-group state %s not loaded (%s); share groups start empty", self.state_path, exc)
            return
        for gid, gd in data.get("groups", {}).items():
            g = self.groups[gid] = ShareGroup(gid)
            g.epoch = int(gd.get("epoch", 0))
            g.auto_offset_reset = gd.get("share.auto.offset.reset")
            for key, pd in gd.get("partitions", {}).items():
                topic, _, part = key.rpartition(":")
                g.partitions[(topic, int(part))] = SharePartition.from_json(pd)

    def snapshot(self, live: bool = False) -> dict:
        """The state as JSON-ready data: what kafkaShareGroups.json holds, or with `live` what
        the admin tools and a slave read (acquired records with their member and lock, the
        members, the delivery limit and the counters)."""
        now = self.clock()
        groups = {}
        for gid, g in list(self.groups.items()):
            gd = {"epoch": g.epoch, "share.auto.offset.reset": g.auto_offset_reset,
                  "partitions": {f"{t}:{p}": sp.live_json(now) if live else sp.to_json()
                                 for (t, p), sp in sorted(g.partitions.items())}}
            if live:
                gd["state"] = g.state()
                gd["members"] = sorted(g.members)
            groups[gid] = gd
        data = {"groups": groups}
        if live:
            data.update(deliveryCountLimit=self.delivery_count_limit, lockDurationMs=self.lock_duration_ms,
                        stats=dict(self.stats))
        return data

    def dump(self) -> bytes:
        """snapshot(live=True) as JSON bytes; may be called from another thread than the one
        serving Kafka requests, so a table changing under it is read again (bounded)."""
        for _ in range(20):
            try:
                return json.dumps(self.snapshot(live=True), separators=(",", ":")).encode()
            except RuntimeError:  # dictionary changed size during iteration
                continue
        raise RuntimeError("share-group state kept changing while it was read")

    def replace_from(self, body: bytes) -> int:
        """On a slave (SlaveSynchronize): the master's state replaces this broker's for every share
        group that has no members here (a group this broker serves, while its master is down,
        keeps its own); groups the master no longer has are dropped. Returns the groups taken."""
        data = json.loads(body or b"{}")
        if not isinstance(data, dict) or not isinstance(data.get("groups", {}), dict):
            raise ValueError("share-group state: expected an object with a 'groups' object")
        taken = 0
        for gid, gd in data.get("groups", {}).items():
            local = self.groups.get(gid)
            if local is not None and local.members:
                continue
            g = ShareGroup(gid)
            g.epoch = int(gd.get("epoch", 0))
            g.auto_offset_reset = gd.get("share.auto.offset.reset")
            for key, pd in gd.get("partitions", {}).items():
                topic, _, part = key.rpartition(":")
                g.partitions[(topic, int(part))] = SharePartition.from_json(pd)
            self.groups[gid] = g
            taken += 1
        for gid in [gid for gid, g in self.groups.items() if gid not in data.get("groups", {}) and not g.members]:
            del self.groups[gid]
        self.dirty = True
        self.save()
        return taken

    def save(self) -> None:
        """Write the state if a request changed it (temporary file + rename)."""
        if not self.dirty or not self.state_path:
            return
        data = self.snapshot()
        tmp = self.state_path + ".tmp"
        os.makedirs(os.path.dirname(self.state_path) or ".", exist_ok=True)
        text = json.dumps(data, separators=(",", ":"))  # one write, not json.dump's many small ones
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, self.state_path)
        self.dirty = False

    # ---------------------------------------------------------------- groups
    # owns, list_groups, _expire and _prune come from GroupRegistry.
    def set_auto_offset_reset(self, group_id: str, value: str | None) -> None:
        if value is not None and value not in ("latest", "earliest"):
            raise ValueError(f"share.auto.offset.reset: expected latest or earliest, got {value!r}")
        g = self.groups.get(group_id) or self.groups.setdefault(group_id, ShareGroup(group_id))
        g.auto_offset_reset = value
        self.dirty = True

    def _idle(self, g: ShareGroup) -> bool:
        """No members, no sessions and no partition state (a group id a client made up and never
        fetched with): _prune forgets it."""
        return not g.members and not g.sessions and not g.partitions and g.auto_offset_reset is None

    def _remove_member(self, g: ShareGroup, m: ShareMember) -> None:
        self._remove(g, m.member_id)

    def _remove(self, g: ShareGroup, member_id: str, close_session: bool = True) -> None:
        if g.members.pop(member_id, None) is not None:
            g.epoch += 1
        if close_session and g.sessions.pop(member_id, None) is not None:
            archived: list = []
            for sp in g.partitions.values():
                if sp.release_member(member_id, self.delivery_count_limit, archived):
                    self.dirty = True

    def _assignment(self, g: ShareGroup, m: ShareMember) -> dict[str, list[int]]:
        """Kafka's SimpleAssignor for share groups, per topic over the members subscribed to it
        (sorted by member id): with at least as many partitions as members, each partition goes
        to one member (partition p to member p mod M), so the members spread over the partitions;
        with more members than partitions, member i reads partition i mod P, so each partition is
        shared by about M/P members and no member is idle. Not sticky: a join or leave may move
        partitions (a record already acquired stays with its member until acknowledged or its lock
        expires)."""
        topics = self.topics()
        out = {}
        for t in sorted(set(m.topics)):
            if t not in topics or topics[t] <= 0:
                continue
            n = topics[t]
            subs = sorted(x.member_id for x in g.members.values() if t in x.topics)
            i = subs.index(m.member_id) if m.member_id in subs else 0
            k = max(1, len(subs))
            out[t] = [p for p in range(n) if p % k == i] if n >= k else [i % n]
        return out

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                  topic_names: list[str] | None = None, client_id: str = "", client_host: str = "") -> HeartbeatResult:
        bad = self._check_heartbeat(group_id, member_epoch, -1)
        if bad is not None:
            return bad
        if member_epoch == 0 and topic_names is None:
            return HeartbeatResult(ec.INVALID_REQUEST, error_message="SubscribedTopicNames must be set when joining.")
        now = self.clock()
        g = self._group_for_heartbeat(group_id, member_id, member_epoch, lambda: ShareGroup(group_id))
        if isinstance(g, HeartbeatResult):
            return g
        self._expire(g)
        if member_epoch == -1:
            if member_id not in g.members:
                return self._unknown_member(group_id, member_id)
            # a leaving consumer closes its share session with a last ShareAcknowledge (epoch -1)
            # that may arrive after this heartbeat: the session and its records wait for it (or
            # for their locks to expire)
            self._remove(g, member_id, close_session=False)
            return HeartbeatResult(ec.NONE, member_id, -1, self.heartbeat_interval_ms)
        if member_epoch == 0:
            member_id = member_id or uuid.uuid4().hex
            m = g.members.get(member_id)
            if m is None:
                m = g.members[member_id] = ShareMember(member_id, client_id, client_host)
            m.last_sent = None
            g.epoch += 1
        else:
            m = g.members.get(member_id)
            if m is None:
                return self._unknown_member(group_id, member_id)
            if member_epoch != m.epoch:
                self._remove(g, member_id)
                return HeartbeatResult(ec.FENCED_MEMBER_EPOCH,
                                       error_message=f"The member epoch {member_epoch} is fenced (expected {m.epoch}).")
        if topic_names is not None and sorted(topic_names) != sorted(m.topics):
            m.topics = list(topic_names)
            g.epoch += 1
        if rack_id is not None:
            m.rack_id = rack_id
        m.last_seen = now
        m.epoch = g.epoch
        asg = self._assignment(g, m)
        key = frozenset((t, p) for t, ps in asg.items() for p in ps)
        send = key != m.last_sent
        if send and m.last_sent:
            # partitions taken from this member: the records it acquired there (perhaps in a fetch
            # its client drops, now that they are not assigned) are available again at once instead
            # of waiting for their locks; an acknowledgement for one of them later is refused
            archived: list = []
            for tp in m.last_sent - key:
                sp = g.partitions.get(tp)
                if sp is not None:
                    sp.release_member(m.member_id, self.delivery_count_limit, archived)
        m.last_sent = key
        self.dirty = True
        return HeartbeatResult(ec.NONE, m.member_id, m.epoch, self.heartbeat_interval_ms, asg if send else None)

    def describe(self, group_id: str) -> dict | None:
        g = self.groups.get(group_id)
        if g is None:
            return None
        self._expire(g)
        return {"group_id": g.group_id, "state": g.state(), "group_epoch": g.epoch,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                             "client_id": m.client_id, "client_host": m.client_host, "topic_names": list(m.topics),
                             "assignment": self._assignment(g, m)} for m in g.members.values()]}

    # ---------------------------------------------------------------- sessions
    def open_session(self, group_id: str, member_id: str, epoch: int) -> tuple[int, ShareGroup | None, ShareSession | None]:
        """Check a ShareFetch/ShareAcknowledge session epoch: 0 opens (replaces) the member's share
        session, -1 closes it after this request, others must be the session's next epoch."""
        g = self.groups.get(group_id or "")
        if g is None or member_id not in g.members and (epoch == 0 or member_id not in g.sessions):
            return ec.UNKNOWN_MEMBER_ID, None, None
        if epoch == 0:
            old = g.sessions.pop(member_id, None)
            if old is not None:
                self._release_session(g, member_id)
            s = g.sessions[member_id] = ShareSession()
            return ec.NONE, g, s
        s = g.sessions.get(member_id)
        if s is None:
            return ec.SHARE_SESSION_NOT_FOUND, g, None
        if epoch == -1:
            return ec.NONE, g, s
        if epoch != s.epoch:
            return ec.INVALID_SHARE_SESSION_EPOCH, g, s
        s.epoch += 1
        return ec.NONE, g, s

    def close_session(self, g: ShareGroup, member_id: str) -> None:
        if g.sessions.pop(member_id, None) is not None:
            self._release_session(g, member_id)

    def _release_session(self, g: ShareGroup, member_id: str) -> None:
        archived: list = []
        for sp in g.partitions.values():
            if sp.release_member(member_id, self.delivery_count_limit, archived):
                self.dirty = True

    def partition(self, g: ShareGroup, topic: str, part: int) -> SharePartition | None:
        sp = g.partitions.get((topic, part))
        b = self.bounds(topic, part)
        if b is None:
            return None
        lo, hi = b
        if sp is None:
            reset = g.auto_offset_reset or self.auto_offset_reset
            sp = g.partitions[(topic, part)] = SharePartition(lo if reset == "earliest" else hi)
            self.dirty = True
        else:
            sp.move_start(lo, hi)
        archived: list = []
        if sp.expire(self.clock(), self.delivery_count_limit, archived):
            self.dirty = True
            self._archived(g, topic, part, archived)
        return sp

    def _archived(self, g: ShareGroup, topic: str, part: int, archived: list) -> None:
        if not archived:
            return
        self.stats["archived"] += len(archived)
        if self.on_archive is not None:
            for off, count, why in archived:
                try:
                    self.on_archive(g.group_id, topic, part, off, count, why)
                except Exception:  # a failed DLQ write must not lose the acknowledgement
                    log.exception("share group %s: archived record %s-%d@%d not written to %%DLQ%%",
                                  g.group_id, topic, part, off)

    def acquire(self, g: ShareGroup, member_id: str, topic: str, part: int, max_records: int) -> list[tuple[int, int]]:
        sp = self.partition(g, topic, part)
        if sp is None:
            return []
        b = self.bounds(topic, part)
        got = sp.acquire(member_id, b[1], max_records, self.clock(), self.lock_duration_ms / 1000,
                         self.delivery_count_limit)
        if got:
            self.dirty = True
            self.stats["acquired"] += len(got)
            self.stats["redelivered"] += sum(1 for _, c in got if c > 1)
        return got

    def acknowledge(self, g: ShareGroup, member_id: str, topic: str, part: int, batches: list[dict]) -> int:
        sp = self.partition(g, topic, part)
        if sp is None:
            return ec.UNKNOWN_TOPIC_OR_PARTITION
        # batches must be in order and must not overlap
        prev = -1
        for b in batches:
            if b["first_offset"] <= prev:
                return ec.INVALID_REQUEST
            prev = b["last_offset"]
        err = ec.NONE
        archived: list = []
        now = self.clock()
        for b in batches:
            e = sp.acknowledge(member_id, b["first_offset"], b["last_offset"], list(b["acknowledge_types"]), now,
                               self.delivery_count_limit, archived)
            if e != ec.NONE:
                err = e
            else:
                self.dirty = True
                for t in b["acknowledge_types"]:
                    key = {ACCEPT: "acknowledged", RELEASE: "released"}.get(t)
                    if key:
                        self.stats[key] += (b["last_offset"] - b["first_offset"] + 1) if len(b["acknowledge_types"]) == 1 else 1
        self._archived(g, topic, part, archived)
        return err

    # ---------------------------------------------------------------- offsets (admin)
    def start_offsets(self, group_id: str, wanted: list[tuple[str, int]] | None) -> dict | None:
        """{(topic, partition): share-partition start offset, -1 when not initialised}; None for an
        unknown group. `wanted` None = every partition the group has state for."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        keys = sorted(g.partitions) if wanted is None else wanted
        return {k: g.partitions[k].start if k in g.partitions else -1 for k in keys}

    def alter_start_offset(self, group_id: str, topic: str, part: int, offset: int) -> int:
        """AlterShareGroupOffsets for one partition: the group must have no members; the partition
        restarts at `offset` with no in-flight records."""
        g = self.groups.get(group_id) or self.groups.setdefault(group_id, ShareGroup(group_id))
        self._expire(g)
        if g.members:
            return ec.NON_EMPTY_GROUP
        b = self.bounds(topic, part)
        if b is None:
            return ec.UNKNOWN_TOPIC_OR_PARTITION
        if offset < 0:
            return ec.INVALID_REQUEST
        g.partitions[(topic, part)] = SharePartition(min(max(offset, b[0]), b[1]))
        self.dirty = True
        return ec.NONE

    def delete_offsets(self, group_id: str, topic: str) -> tuple[int, list[int]]:
        """DeleteShareGroupOffsets for one topic: (error code, partitions whose state was dropped)."""
        g = self.groups.get(group_id)
        if g is None:
            return ec.GROUP_ID_NOT_FOUND, []
        self._expire(g)
        if g.members:
            return ec.NON_EMPTY_GROUP, []
        parts = sorted(p for t, p in g.partitions if t == topic)
        for p in parts:
            del g.partitions[(topic, p)]
        if parts:
            self.dirty = True
        return ec.NONE, parts

    def next_deadline(self, g: ShareGroup, parts) -> float | None:
        ds = [d for tp in parts if (sp := g.partitions.get(tp)) is not None and (d := sp.next_deadline()) is not None]
        return min(ds) if ds else None
