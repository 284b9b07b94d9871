"""GroupCoordinator: the Kafka classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit/Fetch, ListGroups, DescribeGroups) as pure asyncio logic (SPEC §11).

No sockets and no wire codec live here: the Kafka request handlers decode a request, call one
method below with plain Python values and encode what it returns. Committed offsets go to the
broker's ConsumerOffsetManager (``topic@group -> {queueId: offset}``, consumerOffset.json), the
same table RocketMQ consumer groups use, so a Kafka group's offsets are visible to RocketMQ tools
and vice versa. Everything runs on one event loop; no locks are taken here.

Semantics follow Apache Kafka's classic group coordinator (``GroupCoordinator.scala`` /
``GroupMetadata.scala`` of Kafka 3.9, checked against ``ClassicGroup.java`` of Kafka 4.x):
states Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead after close()),
MEMBER_ID_REQUIRED for JoinGroup v4+, the initial rebalance delay for groups that were Empty,
rebalance timeout = max of the members' rebalance timeouts (dynamic members that did not rejoin
by then are removed; static members are kept), a pending-sync timeout of the same length,
session timeouts, static membership (``group.instance.id``) with fencing, and the
OffsetCommit rules of Kafka 3.9 / 4.x: a member of the current generation may commit while the
group is Stable *or PreparingRebalance*; a commit during CompletingRebalance gets
REBALANCE_IN_PROGRESS; generation -1 with an Empty group is a "simple" (standalone) commit.

Public API (all methods must be called on the event loop that runs the coordinator)::

    GroupCoordinator(offset_store, *, initial_rebalance_delay_ms=100, min_session_timeout_ms=6000,
                     max_session_timeout_ms=1_800_000, max_group_size=2**31-1,
                     new_member_join_timeout_ms=300_000, max_metadata_size=4096, scheduler=None,
                     group_cleanup_interval_ms=600_000, durable_commits=True)

    async join_group(group_id, member_id, group_instance_id, client_id, client_host,
                     session_timeout_ms, rebalance_timeout_ms, protocol_type,
                     protocols: list[(name, metadata bytes)], require_known_member_id=False,
                     reason=None) -> JoinResult
        JoinResult(error_code, generation_id, protocol_type: str|None, protocol_name: str|None,
                   leader, member_id, members: list[(member_id, group_instance_id|None, bytes)],
                   skip_assignment=False)
        ``rebalance_timeout_ms < 0`` (JoinGroup v0) means "same as the session timeout".
        protocol_type/protocol_name are None on errors: encode None as "" below v7.
    async sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type|None,
                     protocol_name|None, assignments: dict[member_id, bytes]) -> SyncResult
        SyncResult(error_code, protocol_type: str|None, protocol_name: str|None, assignment: bytes)
    heartbeat(group_id, generation_id, member_id, group_instance_id) -> error_code
    leave_group(group_id, members: list[(member_id, group_instance_id|None[, reason])])
        -> (top_level_error, [(member_id, group_instance_id, error_code)])
        LeaveGroup v0-v2 carry one member: answer with the member's error as the top-level error.
    commit_offsets(group_id, generation_id, member_id, group_instance_id,
                   offsets: list[(topic, partition, offset, metadata|None)])
        -> [(topic, partition, error_code)]
        Topic/partition existence (UNKNOWN_TOPIC_OR_PARTITION) is the handler's check.
    fetch_offsets(group_id, partitions: list[(topic, partition)] | None)
        -> [(topic, partition, offset, metadata, error_code)]   (offset -1, metadata "" = none)
        None = every partition the group has offsets for in the shared table (topics whose
        names are not legal Kafka topic names, e.g. %RETRY%group, are left out).
    list_groups(states_filter: list[str] | None) -> [(group_id, protocol_type, state)]
        Groups known only from the offset table (RocketMQ groups, groups from an earlier run)
        are listed as ("Empty", protocol type "").
    describe_group(group_id, api_version=0) -> dict(error_code, group_id, state, protocol_type,
        protocol, members: [dict(member_id, group_instance_id, client_id, client_host, metadata,
        assignment)])   (metadata/assignment are b"" and protocol "" unless the group is Stable;
        an unknown group is state "Dead", error NONE, or GROUP_ID_NOT_FOUND for api_version >= 6)
    validate_txn_offset_commit(group_id, generation_id, member_id, group_instance_id) -> error_code
    commit_offsets_unchecked(group_id, offsets) -> [(topic, partition, error_code)]
        Hooks for TxnOffsetCommit: Kafka's transactional validation, and a store without any
        generation check (to call when the transaction commits).
    unload_groups(moved: group_id -> bool) -> count
        forgets the groups another node coordinates now (cluster mode), as close() does for all.
    adopt_moved_members=True, or a callable saying when (cluster mode): a heartbeat or commit
        with generation >= 1 from a dynamic member of a group this coordinator has no live state
        for takes the member over at that generation (see _adopt), as Kafka's new coordinator
        carries on with the group it loads from __consumer_offsets.
    close()   cancels timers; parked JoinGroup/SyncGroup calls return NOT_COORDINATOR; later
              calls get COORDINATOR_NOT_AVAILABLE.

Empty groups with no committed offsets are dropped from memory at most every
``group_cleanup_interval_ms`` (Kafka's offsets.retention.check.interval.ms; checked when a group is
created), as Kafka's GroupMetadataManager.cleanupGroupMetadata does: group ids that clients make up
(a console consumer's random group, a fuzzer) do not stay for ever. They are then unknown ("Dead"),
as in Kafka after that cleanup; a group with offsets stays listed from the offset table.

``scheduler`` (for tests) is any object with ``call_later(delay_seconds, callback, *args)``
returning a handle with ``cancel()``; by default the running event loop is used.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .protocol.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
)

log = logging.getLogger("kafka_bridge.group")

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# Which states may lead into each state (GroupMetadata's validPreviousStates).
_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    EMPTY: {PREPARING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
}

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_TOPIC_GROUP_SEPARATOR = "@"


@dataclass
class JoinResult:
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def error(cls, member_id: str, error_code: int) -> "JoinResult":
        return cls(error_code=error_code, member_id=member_id)


@dataclass
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class _LoopScheduler:
    """Default timer source: the running loop's call_later (remembering the loop for calls that
    arrive from plain functions)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def call_later(self, delay: float, callback: Callable, *args: Any):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = self._loop
        if loop is None or loop.is_closed():
            return None
        self._loop = loop
        return loop.call_later(delay, callback, *args)


class _Member:
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "join_future",
                 "sync_future", "is_new", "hb_timer")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join_future: asyncio.Future | None = None
        self.sync_future: asyncio.Future | None = None
        self.is_new = False
        self.hb_timer = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


class _Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, _Member] = {}
        self.static_members: dict[str, str] = {}          # group.instance.id -> member id
        self.pending_members: dict[str, Any] = {}         # member id -> expiry timer handle
        self.pending_sync: set[str] = set()
        self.supported = Counter()                        # protocol name -> members supporting it
        self.new_member_added = False
        self.join_timer = None
        self.join_initial = False
        self.join_seq = 0
        self.sync_timer = None
        self.sync_seq = 0
        #: the generation this coordinator took over from members that arrived with it (a group
        #: whose coordinator moved here, see GroupCoordinator._adopt); None once it rebalanced here
        self.adopted_generation: int | None = None

    # -- membership bookkeeping (GroupMetadata) --------------------------------------------
    def transition(self, new_state: str) -> None:
        if self.state not in _VALID_PREVIOUS[new_state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state} -> {new_state}")
        self.state = new_state

    def add(self, member: _Member) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members or self.protocol_type is None:  # None: only taken-over members so far
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported.update(name for name, _ in member.protocols)
        timer = self.pending_members.pop(member.member_id, None)
        if timer is not None:
            timer.cancel()

    def remove(self, member_id: str) -> _Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported.subtract(name for name, _ in member.protocols)
            iid = member.group_instance_id
            if iid is not None and self.static_members.get(iid) == member_id:
                del self.static_members[iid]
            if member.hb_timer is not None:
                member.hb_timer.cancel()
                member.hb_timer = None
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        timer = self.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        self.pending_sync.discard(member_id)
        return member

    def set_protocols(self, member: _Member, protocols: list[tuple[str, bytes]]) -> None:
        self.supported.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self.supported.update(name for name, _ in protocols)

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_future is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported.items() if count == n}

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        # adopted members (their protocols unknown until they rejoin) do not vote
        n = sum(1 for m in self.members.values() if m.protocols)
        if n == 0:
            return bool(protocol_type) and bool(names) and self.protocol_type in (None, "", protocol_type)
        return self.protocol_type == protocol_type and any(self.supported.get(p, 0) == n for p in names)

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.join_future is not None:
            return True
        for mid, m in self.members.items():
            if m.join_future is not None:
                log.info("group %s: leader %s did not rejoin in time; %s is the new leader",
                         self.group_id, self.leader_id, mid)
                self.leader_id = mid
                return True
        return False

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        proto = self.protocol_name or ""
        return [(m.member_id, m.group_instance_id, m.metadata(proto)) for m in self.members.values()]

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's validateCurrentMember: the instance id (if given) maps to member_id, and the
        member exists."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return UNKNOWN_MEMBER_ID
            if current != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        return NONE


def _resolve(fut: asyncio.Future | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


class GroupCoordinator:
    """Kafka classic group coordinator over the broker's shared ConsumerOffsetManager."""

    def __init__(self, offset_store, *, initial_rebalance_delay_ms: int = 100,
                 min_session_timeout_ms: int = 6000, max_session_timeout_ms: int = 1_800_000,
                 max_group_size: int = 2**31 - 1, new_member_join_timeout_ms: int = 300_000,
                 max_metadata_size: int = 4096, scheduler=None, group_cleanup_interval_ms: int = 600_000,
                 durable_commits: bool = True, adopt_moved_members: bool | Callable[[], bool] = False,
                 adopted_session_timeout_ms: int = 45_000) -> None:
        self.offset_store = offset_store
        #: cluster mode: a member of a generation this coordinator does not know is taken over
        #: (see _adopt) instead of being told to rejoin
        self.adopt_moved_members = adopt_moved_members if callable(adopt_moved_members) else bool(adopt_moved_members)
        self.adopted_session_timeout_ms = int(adopted_session_timeout_ms)
        #: journal every commit before answering (kafkaOffsetCommitJournal)
        self.durable_commits = bool(durable_commits)
        self.initial_rebalance_delay_ms = int(initial_rebalance_delay_ms)
        self.min_session_timeout_ms = int(min_session_timeout_ms)
        self.max_session_timeout_ms = int(max_session_timeout_ms)
        self.max_group_size = int(max_group_size)
        self.new_member_join_timeout_ms = int(new_member_join_timeout_ms)
        self.max_metadata_size = int(max_metadata_size)
        self._scheduler = scheduler if scheduler is not None else _LoopScheduler()
        self._groups: dict[str, _Group] = {}
        # (group, topic, partition) -> (offset, metadata): commit metadata strings, not persisted.
        self._metadata: dict[tuple[str, str, int], tuple[int, str]] = {}
        # (group, topic, partition) -> (offset, committed leader epoch), the same way (not persisted)
        self._leader_epochs: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._active = True
        self.group_cleanup_interval_s = group_cleanup_interval_ms / 1000.0
        self._cleaned_at = time.monotonic()

    # ------------------------------------------------------------------ the group table
    def _new_group(self, group_id: str) -> _Group:
        """Creates a group; first, when the cleanup interval has passed, drops the Empty groups
        that have nothing left: no member, pending member or timer, and no committed offset."""
        now = time.monotonic()
        if now - self._cleaned_at >= self.group_cleanup_interval_s:
            self._cleaned_at = now
            self._remove_empty_groups()
        group = self._groups[group_id] = _Group(group_id)
        return group

    def _remove_empty_groups(self) -> int:
        idle = [gid for gid, g in self._groups.items()
                if g.state == EMPTY and not g.members and not g.pending_members
                and g.join_timer is None and g.sync_timer is None]
        if idle:
            with_offsets = self._offset_groups()
            idle = [gid for gid in idle if gid not in with_offsets]
            for gid in idle:
                del self._groups[gid]
            if idle:
                log.info("removed %d empty groups without committed offsets from memory", len(idle))
        return len(idle)

    # ------------------------------------------------------------------ timers
    def _call_later(self, delay_ms: float, callback: Callable, *args: Any):
        return self._scheduler.call_later(max(delay_ms, 0) / 1000.0, self._guarded, callback, *args)

    @staticmethod
    def _guarded(callback: Callable, *args: Any) -> None:
        try:
            callback(*args)
        except Exception:  # a timer must never take the loop down
            log.exception("group coordinator timer %s failed", getattr(callback, "__name__", callback))

    def _schedule_heartbeat(self, group: _Group, member: _Member, timeout_ms: int | None = None) -> None:
        """completeAndScheduleNextHeartbeatExpiration: restart the member's session timer."""
        if member.hb_timer is not None:
            member.hb_timer.cancel()
        member.hb_timer = self._call_later(member.session_timeout_ms if timeout_ms is None else timeout_ms,
                                           self._on_expire_heartbeat, group, member)

    def _on_expire_heartbeat(self, group: _Group, member: _Member) -> None:
        if group.state == DEAD or group.members.get(member.member_id) is not member:
            return
        member.hb_timer = None
        if not member.is_new and (member.join_future is not None or member.sync_future is not None):
            # Members parked in JoinGroup/SyncGroup satisfy their heartbeats; their timer is
            # restarted when the join or sync completes.
            return
        log.info("group %s: member %s session expired, removing it", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def _on_expire_pending(self, group: _Group, member_id: str) -> None:
        if group.state == DEAD or member_id not in group.pending_members:
            return
        log.info("group %s: pending member %s did not rejoin, dropping it", group.group_id, member_id)
        group.pending_members.pop(member_id, None)
        if group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _cancel_join_timer(self, group: _Group) -> None:
        group.join_seq += 1
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = None
        group.join_initial = False

    def _schedule_join(self, group: _Group, delay_ms: int) -> None:
        self._cancel_join_timer(group)
        group.join_timer = self._call_later(delay_ms, self._on_join_expire, group, group.join_seq)

    def _schedule_initial_join(self, group: _Group, delay_ms: int, remaining_ms: int) -> None:
        self._cancel_join_timer(group)
        group.join_initial = True
        group.join_timer = self._call_later(delay_ms, self._on_initial_join_expire, group, group.join_seq,
                                            delay_ms, remaining_ms)
        if group.join_timer is None:  # no loop to wait on: complete at once
            self._on_initial_join_expire(group, group.join_seq, delay_ms, 0)

    def _on_join_expire(self, group: _Group, seq: int) -> None:
        if seq != group.join_seq:
            return
        self._cancel_join_timer(group)
        self._on_complete_join(group)

    def _on_initial_join_expire(self, group: _Group, seq: int, delay_ms: int, remaining_ms: int) -> None:
        """InitialDelayedJoin: keep delaying while new members arrive, up to the rebalance timeout."""
        if seq != group.join_seq:
            return
        self._cancel_join_timer(group)
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_join(group, delay, max(remaining_ms - delay_ms, 0))
        else:
            self._on_complete_join(group)

    def _cancel_sync_timer(self, group: _Group) -> None:
        group.sync_seq += 1
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_timer = None

    def _remove_sync_expiration(self, group: _Group) -> None:
        group.pending_sync.clear()
        self._cancel_sync_timer(group)

    def _remove_pending_sync_member(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_timer(group)

    def _on_expire_pending_sync(self, group: _Group, seq: int, generation_id: int) -> None:
        if seq != group.sync_seq or generation_id != group.generation_id:
            return
        group.sync_timer = None
        if group.state not in (COMPLETING_REBALANCE, STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        log.info("group %s: members %s did not send SyncGroup in time, removing them", group.group_id, missing)
        for mid in missing:
            member = group.remove(mid)
            if member is not None:
                _resolve(member.join_future, JoinResult.error("", UNKNOWN_MEMBER_ID))
                member.join_future = None
        self._prepare_rebalance(group)

    # ------------------------------------------------------------------ rebalance machinery
    def _maybe_prepare_rebalance(self, group: _Group) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: _Group) -> None:
        if group.state == COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        group.adopted_generation = None
        was_empty = group.state == EMPTY
        group.transition(PREPARING_REBALANCE)
        log.info("group %s: preparing to rebalance (generation %d)", group.group_id, group.generation_id)
        if was_empty:
            delay = self.initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms)
            self._try_complete_join(group)

    def _try_complete_join(self, group: _Group) -> None:
        if (group.state == PREPARING_REBALANCE and group.join_timer is not None and not group.join_initial
                and group.has_all_members_joined()):
            self._cancel_join_timer(group)
            self._on_complete_join(group)

    def _on_complete_join(self, group: _Group) -> None:
        for member in list(group.members.values()):
            if member.join_future is None and member.group_instance_id is None:
                log.info("group %s: member %s did not rejoin in time, removing it", group.group_id, member.member_id)
                group.remove(member.member_id)
                _resolve(member.sync_future, SyncResult(UNKNOWN_MEMBER_ID))
                member.sync_future = None
        if group.state == DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout (sessions will expire meanwhile).
            self._schedule_join(group, group.rebalance_timeout_ms)
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(EMPTY)
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.transition(COMPLETING_REBALANCE)
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        all_members = group.current_member_metadata()
        for member in list(group.members.values()):
            result = JoinResult(NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                group.leader_id or "", member.member_id,
                                list(all_members) if group.is_leader(member.member_id) else [])
            fut, member.join_future = member.join_future, None
            _resolve(fut, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._cancel_sync_timer(group)
        group.sync_timer = self._call_later(group.rebalance_timeout_ms, self._on_expire_pending_sync, group,
                                            group.sync_seq, group.generation_id)

    def _propagate_assignment(self, group: _Group, error: int) -> None:
        ptype, pname = (group.protocol_type, group.protocol_name) if error == NONE else (None, None)
        for member in list(group.members.values()):
            fut, member.sync_future = member.sync_future, None
            if fut is not None:
                _resolve(fut, SyncResult(error, ptype, pname, member.assignment))
                self._schedule_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: _Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _remove_member_and_update_group(self, group: _Group, member: _Member) -> None:
        fut, member.join_future = member.join_future, None
        _resolve(fut, JoinResult.error("", UNKNOWN_MEMBER_ID))
        sfut, member.sync_future = member.sync_future, None
        _resolve(sfut, SyncResult(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _set_join_future(self, member: _Member, fut: asyncio.Future) -> None:
        old = member.join_future
        if old is not None and old is not fut:
            # A second JoinGroup while the first is parked (client retried): answer the old one.
            _resolve(old, JoinResult.error(member.member_id, REBALANCE_IN_PROGRESS))
        member.join_future = fut

    def _update_member(self, group: _Group, member: _Member, protocols, rebalance_timeout_ms: int,
                       session_timeout_ms: int, fut: asyncio.Future) -> None:
        group.set_protocols(member, protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._set_join_future(member, fut)

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                     fut) -> None:
        self._update_member(group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        self._maybe_prepare_rebalance(group)

    def _add_member_and_rebalance(self, group: _Group, member_id: str, group_instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str, protocols,
                                  fut: asyncio.Future) -> None:
        member = _Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                         session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        member.join_future = fut
        if group.state == PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # New members cannot heartbeat before their first JoinGroup answer; a generous timer
        # drops members whose client went away while parked.
        self._schedule_heartbeat(group, member, self.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)

    def _replace_static_member(self, group: _Group, instance_id: str, old_id: str, new_id: str) -> _Member:
        member = group.members.pop(old_id)
        fut, member.join_future = member.join_future, None
        _resolve(fut, JoinResult.error(old_id, FENCED_INSTANCE_ID))
        sfut, member.sync_future = member.sync_future, None
        _resolve(sfut, SyncResult(FENCED_INSTANCE_ID))
        member.member_id = new_id
        group.members[new_id] = member
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        group.static_members[instance_id] = new_id
        return member

    def _update_static_member_and_rebalance(self, group: _Group, old_id: str, new_id: str, instance_id: str,
                                            protocols, rebalance_timeout_ms: int, session_timeout_ms: int,
                                            fut: asyncio.Future) -> None:
        current_leader = group.leader_id or ""
        member = self._replace_static_member(group, instance_id, old_id, new_id)
        self._schedule_heartbeat(group, member)
        self._update_member(group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        if group.state == STABLE:
            if group.protocol_name == group.select_protocol():
                # Same selected protocol: swap the member id without a rebalance. The old leader
                # id is returned so that a rejoining static leader does not run the assignor.
                log.info("group %s: static member %s rejoined as %s without a rebalance",
                         group.group_id, instance_id, new_id)
                fut2, member.join_future = member.join_future, None
                _resolve(fut2, JoinResult(NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                          current_leader, new_id, []))
            else:
                self._maybe_prepare_rebalance(group)
        elif group.state == COMPLETING_REBALANCE:
            self._prepare_rebalance(group)
        # PreparingRebalance: the member now waits for the join to complete.

    # ------------------------------------------------------------------ JoinGroup
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                         protocol_type: str, protocols: Iterable[tuple[str, bytes]],
                         require_known_member_id: bool = False, reason: str | None = None) -> JoinResult:
        fut = asyncio.get_running_loop().create_future()
        self._handle_join(fut, group_id, member_id or "", group_instance_id, client_id or "", client_host or "",
                          int(session_timeout_ms), int(rebalance_timeout_ms), protocol_type or "",
                          [(str(n), bytes(m or b"")) for n, m in protocols], bool(require_known_member_id))
        # shield: a cancelled handler must not change the group's view of the parked member.
        return await asyncio.shield(fut)

    def _handle_join(self, fut, group_id, member_id, group_instance_id, client_id, client_host,
                     session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols, require_known) -> None:
        if not group_id:
            return _resolve(fut, JoinResult.error(member_id, INVALID_GROUP_ID))
        if not self._active:
            return _resolve(fut, JoinResult.error(member_id, COORDINATOR_NOT_AVAILABLE))
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has no rebalance timeout
            rebalance_timeout_ms = session_timeout_ms
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return _resolve(fut, JoinResult.error(member_id, INVALID_SESSION_TIMEOUT))
        is_unknown = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown:
                return _resolve(fut, JoinResult.error(member_id, UNKNOWN_MEMBER_ID))
            group = self._new_group(group_id)
        if not self._accept_joining_member(group, member_id):
            member = group.remove(member_id) if member_id else None
            if member is not None:
                _resolve(member.join_future, JoinResult.error("", GROUP_MAX_SIZE_REACHED))
                member.join_future = None
            _resolve(fut, JoinResult.error("", GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            self._do_new_member_join(group, fut, group_instance_id, require_known, client_id, client_host,
                                     rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        else:
            self._do_current_member_join(group, fut, member_id, group_instance_id, client_id, client_host,
                                         rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        if group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _accept_joining_member(self, group: _Group, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.state == PREPARING_REBALANCE:
            m = group.members.get(member_id)
            return (m is not None and m.join_future is not None) or group.num_awaiting_join < self.max_group_size
        return member_id in group.members or len(group.members) < self.max_group_size

    def _do_new_member_join(self, group, fut, group_instance_id, require_known, client_id, client_host,
                            rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols) -> None:
        if group.state == DEAD:
            return _resolve(fut, JoinResult.error("", COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(protocol_type, {n for n, _ in protocols}):
            return _resolve(fut, JoinResult.error("", INCONSISTENT_GROUP_PROTOCOL))
        new_id = f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            old_id = group.static_members.get(group_instance_id)
            if old_id is not None:
                self._update_static_member_and_rebalance(group, old_id, new_id, group_instance_id, protocols,
                                                         rebalance_timeout_ms, session_timeout_ms, fut)
            else:
                self._add_member_and_rebalance(group, new_id, group_instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                               protocols, fut)
        elif require_known:
            group.pending_members[new_id] = self._call_later(session_timeout_ms, self._on_expire_pending,
                                                             group, new_id)
            _resolve(fut, JoinResult.error(new_id, MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, new_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, fut)

    def _do_current_member_join(self, group, fut, member_id, group_instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols) -> None:
        if group.state == DEAD:
            return _resolve(fut, JoinResult.error(member_id, COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(protocol_type, {n for n, _ in protocols}):
            return _resolve(fut, JoinResult.error(member_id, INCONSISTENT_GROUP_PROTOCOL))
        if member_id in group.pending_members:
            if group_instance_id is not None:  # pending ids are only handed to dynamic members
                return _resolve(fut, JoinResult.error(member_id, UNKNOWN_MEMBER_ID))
            return self._add_member_and_rebalance(group, member_id, None, client_id, client_host,
                                                  rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                  protocols, fut)
        error = group.validate_member(member_id, group_instance_id)
        if error != NONE:
            return _resolve(fut, JoinResult.error(member_id, error))
        member = group.members[member_id]
        if group.state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        elif group.state == COMPLETING_REBALANCE:
            if member.matches(protocols):
                # Lost JoinGroup answer: repeat the current generation's answer.
                _resolve(fut, JoinResult(NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                         group.leader_id or "", member_id,
                                         group.current_member_metadata() if group.is_leader(member_id) else []))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, fut)
        elif group.state == STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining forces a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, fut)
            else:
                _resolve(fut, JoinResult(NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                         group.leader_id or "", member_id, []))
        else:
            _resolve(fut, JoinResult.error(member_id, UNKNOWN_MEMBER_ID))

    # ------------------------------------------------------------------ SyncGroup
    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        fut = asyncio.get_running_loop().create_future()
        self._handle_sync(fut, group_id, int(generation_id), member_id or "", group_instance_id, protocol_type,
                          protocol_name, assignments or {})
        return await asyncio.shield(fut)

    def _handle_sync(self, fut, group_id, generation_id, member_id, group_instance_id, protocol_type,
                     protocol_name, assignments) -> None:
        if not group_id:
            return _resolve(fut, SyncResult(INVALID_GROUP_ID))
        if not self._active:
            return _resolve(fut, SyncResult(COORDINATOR_NOT_AVAILABLE))
        group = self._groups.get(group_id)
        if group is None:
            return _resolve(fut, SyncResult(UNKNOWN_MEMBER_ID))
        if group.state == DEAD:
            return _resolve(fut, SyncResult(COORDINATOR_NOT_AVAILABLE))
        error = group.validate_member(member_id, group_instance_id)
        if error == NONE:
            if generation_id != group.generation_id:
                error = ILLEGAL_GENERATION
            elif protocol_type is not None and protocol_type != group.protocol_type:
                error = INCONSISTENT_GROUP_PROTOCOL
            elif protocol_name is not None and protocol_name != group.protocol_name:
                error = INCONSISTENT_GROUP_PROTOCOL
        if error != NONE:
            return _resolve(fut, SyncResult(error))
        member = group.members[member_id]
        if group.state == EMPTY:
            _resolve(fut, SyncResult(UNKNOWN_MEMBER_ID))
        elif group.state == PREPARING_REBALANCE:
            _resolve(fut, SyncResult(REBALANCE_IN_PROGRESS))
        elif group.state == COMPLETING_REBALANCE:
            if member.sync_future is not None and member.sync_future is not fut:
                _resolve(member.sync_future, SyncResult(REBALANCE_IN_PROGRESS))
            member.sync_future = fut
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info("group %s: assignment from leader %s for generation %d", group.group_id, member_id,
                         group.generation_id)
                for m in group.members.values():
                    m.assignment = bytes(assignments.get(m.member_id) or b"")
                self._propagate_assignment(group, NONE)
                group.transition(STABLE)
        else:  # Stable: answer with the current assignment
            self._remove_pending_sync_member(group, member_id)
            _resolve(fut, SyncResult(NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member)

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup
    def _adopt(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> None:
        """Cluster mode: the group's coordinator moved here (its broker died, or came back) and this
        coordinator has no live state for it. Kafka's new coordinator loads the group (generation,
        members) from __consumer_offsets and the members carry on; the bridge keeps no group state
        off the coordinating broker, so the members are taken over as they show up: a dynamic member
        that heartbeats or commits with generation g >= 1 to a group that is unknown here or Empty
        with no member, timer or pending member makes it Stable at generation g with that member;
        more members of g join it; a member of a newer generation replaces those of the older one
        (they are told UNKNOWN_MEMBER_ID next and rejoin). A member of an older generation, and any
        member once the group rebalanced here, is checked as usual. The members' session timeouts
        are unknown until they rejoin: adopted_session_timeout_ms (Kafka's default 45 s) stands in."""
        if not member_id or generation_id < 1 or group_instance_id is not None:
            return
        adopt = self.adopt_moved_members
        if not (adopt() if callable(adopt) else adopt):
            return
        group = self._groups.get(group_id)
        if group is None:
            group = self._new_group(group_id)
        if group.state == EMPTY:
            if group.members or group.pending_members or group.join_timer is not None or group.sync_timer is not None:
                return
        elif group.state != STABLE or group.adopted_generation is None or generation_id < group.adopted_generation:
            return
        elif generation_id > group.adopted_generation:
            for mid in list(group.members):
                group.remove(mid)
        elif member_id in group.members:
            return
        if generation_id != group.adopted_generation:
            log.info("group %s: coordinator moved here; taking over generation %d (was %s here, generation %d)",
                     group_id, generation_id, group.state, group.generation_id)
        group.state = STABLE  # not a transition of Kafka's state machine: the group was Stable elsewhere
        group.generation_id = group.adopted_generation = generation_id
        group.protocol_name = None
        member = _Member(member_id, None, "", "", self.adopted_session_timeout_ms, self.adopted_session_timeout_ms,
                         None, [])
        group.add(member)
        self._schedule_heartbeat(group, member)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        if not self._active:
            return COORDINATOR_NOT_AVAILABLE
        self._adopt(group_id, generation_id, member_id or "", group_instance_id)
        group = self._groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id or "", group_instance_id)
        if error != NONE:
            return error
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        if group.state == EMPTY:
            return UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.members[member_id])
        return REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else NONE

    def leave_group(self, group_id: str, members: Iterable[tuple]) -> tuple[int, list[tuple[str, str | None, int]]]:
        leaving = [(m[0] or "", m[1] if len(m) > 1 else None) for m in members]
        if not group_id:
            return INVALID_GROUP_ID, []
        if not self._active:
            return COORDINATOR_NOT_AVAILABLE, []
        group = self._groups.get(group_id)
        if group is None:
            return NONE, [(mid, iid, UNKNOWN_MEMBER_ID) for mid, iid in leaving]
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE, []
        out = []
        for mid, iid in leaving:
            if mid == "":
                # Administrative removal by group.instance.id.
                current = group.static_members.get(iid) if iid is not None else None
                if current is None:
                    out.append((mid, iid, UNKNOWN_MEMBER_ID))
                    continue
                self._remove_member_and_update_group(group, group.members[current])
                log.info("group %s: static member %s (%s) left", group_id, iid, current)
                out.append((mid, iid, NONE))
            elif mid in group.pending_members:
                group.remove(mid)
                if group.state == PREPARING_REBALANCE:
                    self._try_complete_join(group)
                out.append((mid, iid, NONE))
            else:
                error = group.validate_member(mid, iid)
                if error == NONE:
                    self._remove_member_and_update_group(group, group.members[mid])
                    log.info("group %s: member %s left", group_id, mid)
                out.append((mid, iid, error))
        return NONE, out

    # ------------------------------------------------------------------ offsets
    def _validate_offset_commit(self, group: _Group, generation_id: int, member_id: str,
                                group_instance_id: str | None, transactional: bool) -> int:
        """ClassicGroup.validateOffsetCommit (Kafka 4.x; same outcome as Kafka 3.9's doCommitOffsets)."""
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state == EMPTY:
            return NONE  # admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error != NONE:
                return error
            if generation_id != group.generation_id:
                return ILLEGAL_GENERATION
        elif not transactional and group.state != EMPTY:
            return UNKNOWN_MEMBER_ID
        if not transactional and group.state == COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: Iterable[tuple]) -> list[tuple[str, int, int]]:
        offsets = list(offsets)
        if group_id is None:
            return [(o[0], o[1], INVALID_GROUP_ID) for o in offsets]
        if not self._active:
            return [(o[0], o[1], COORDINATOR_NOT_AVAILABLE) for o in offsets]
        member_id = member_id or ""
        self._adopt(group_id, int(generation_id), member_id, group_instance_id)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A stale generation (e.g. the group was lost on restart): make the member rejoin.
                return [(o[0], o[1], ILLEGAL_GENERATION) for o in offsets]
            group = self._new_group(group_id)
            log.info("group %s: created by a simple (standalone) offset commit", group_id)
        error = self._validate_offset_commit(group, int(generation_id), member_id, group_instance_id, False)
        if error != NONE:
            return [(o[0], o[1], error) for o in offsets]
        member = group.members.get(member_id)
        if member is not None and group.state in (STABLE, PREPARING_REBALANCE):
            # During PreparingRebalance the commit is accepted; the heartbeat answer tells the
            # member to rejoin.
            self._schedule_heartbeat(group, member)
        return self._store_offsets(group_id, offsets)

    def validate_txn_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                                   group_instance_id: str | None) -> int:
        """TxnOffsetCommit hook: Kafka's checks for transactional commits (member fields are only
        checked when given; CompletingRebalance is allowed). Creates the group when unknown."""
        if group_id is None:
            return INVALID_GROUP_ID
        if not self._active:
            return COORDINATOR_NOT_AVAILABLE
        group = self._groups.get(group_id)
        if group is None:
            group = self._new_group(group_id)
        return self._validate_offset_commit(group, int(generation_id), member_id or "", group_instance_id, True)

    def commit_offsets_unchecked(self, group_id: str, offsets: Iterable[tuple]) -> list[tuple[str, int, int]]:
        """TxnOffsetCommit hook: store offsets for a group with no generation or member check."""
        if not self._active:
            return [(o[0], o[1], COORDINATOR_NOT_AVAILABLE) for o in offsets]
        return self._store_offsets(group_id, list(offsets))

    def _store_offsets(self, group_id: str, offsets: list[tuple]) -> list[tuple[str, int, int]]:
        """Every path that commits (OffsetCommit, KIP-848's, TxnOffsetCommit at EndTxn) comes here:
        the offsets are journaled (durable=True) and the journal written before the answer, as
        Kafka writes __consumer_offsets before it answers."""
        out = self._store_offsets_unsynced(group_id, offsets)
        sync = getattr(self.offset_store, "journal_sync", None)
        if sync is not None and self.durable_commits:
            try:
                sync()
            except OSError:
                log.exception("group %s: writing the offsets journal failed", group_id)
                return [(t, p, UNKNOWN_SERVER_ERROR if e == NONE else e) for t, p, e in out]
        return out

    def _store_offsets_unsynced(self, group_id: str, offsets: list[tuple]) -> list[tuple[str, int, int]]:
        out = []
        for entry in offsets:
            topic, partition, offset = entry[0], int(entry[1]), int(entry[2])
            metadata = (entry[3] if len(entry) > 3 else None) or ""
            if len(metadata) > self.max_metadata_size:
                out.append((topic, partition, OFFSET_METADATA_TOO_LARGE))
                continue
            try:
                self.offset_store.commit_offset(group_id, topic, partition, offset, durable=self.durable_commits)
            except Exception:
                log.exception("group %s: storing offset %s-%d failed", group_id, topic, partition)
                out.append((topic, partition, UNKNOWN_SERVER_ERROR))
                continue
            key = (group_id, topic, partition)
            if metadata:
                self._metadata[key] = (offset, metadata)
            else:
                self._metadata.pop(key, None)
            leader_epoch = entry[4] if len(entry) > 4 and entry[4] is not None else -1
            if leader_epoch >= 0:
                self._leader_epochs[key] = (offset, int(leader_epoch))
            else:
                self._leader_epochs.pop(key, None)
            out.append((topic, partition, NONE))
        return out

    def _offset_table_entries(self, group_id: str) -> list[tuple[str, int, int]]:
        table = getattr(self.offset_store, "offset_table", None) or {}
        out = []
        for key in list(table):
            topic, sep, group = key.partition(_TOPIC_GROUP_SEPARATOR)
            if not sep or group != group_id or not _LEGAL_TOPIC.match(topic):
                continue
            queues = dict(table.get(key) or {})
            out.extend((topic, int(q), int(o)) for q, o in sorted(queues.items()))
        return out

    def _metadata_for(self, group_id: str, topic: str, partition: int, offset: int) -> str:
        entry = self._metadata.get((group_id, topic, partition))
        # Metadata belongs to the offset it was committed with; a RocketMQ consumer moving the
        # offset since then makes it stale.
        return entry[1] if entry is not None and entry[0] == offset else ""

    def leader_epoch_for(self, group_id: str, topic: str, partition: int, offset: int) -> int:
        """The leader epoch committed with `offset` (OffsetCommit v6+), -1 when none was or the offset
        has moved since (as _metadata_for)."""
        entry = self._leader_epochs.get((group_id, topic, partition))
        return entry[1] if entry is not None and entry[0] == offset else -1

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None
                      ) -> list[tuple[str, int, int, str, int]]:
        if partitions is None:
            if group_id is None or not self._active:
                return []
            return [(t, p, o, self._metadata_for(group_id, t, p, o), NONE)
                    for t, p, o in self._offset_table_entries(group_id)]
        parts = [(t, int(p)) for t, p in partitions]
        if group_id is None:
            return [(t, p, -1, "", INVALID_GROUP_ID) for t, p in parts]
        if not self._active:
            return [(t, p, -1, "", COORDINATOR_NOT_AVAILABLE) for t, p in parts]
        out = []
        for topic, partition in parts:
            offset = int(self.offset_store.query_offset(group_id, topic, partition))
            meta = self._metadata_for(group_id, topic, partition, offset) if offset >= 0 else ""
            out.append((topic, partition, offset, meta, NONE))
        return out

    # ------------------------------------------------------------------ ListGroups / DescribeGroups
    def _offset_groups(self) -> set[str]:
        store = self.offset_store
        if hasattr(store, "all_groups"):
            return set(store.all_groups())
        table = getattr(store, "offset_table", None) or {}
        return {k.partition(_TOPIC_GROUP_SEPARATOR)[2] for k in list(table) if _TOPIC_GROUP_SEPARATOR in k}

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        if not self._active:
            return []
        found: dict[str, tuple[str, str, str]] = {}
        for gid, group in self._groups.items():
            if group.state != DEAD:
                found[gid] = (gid, group.protocol_type or "", group.state)
        for gid in self._offset_groups():
            found.setdefault(gid, (gid, "", EMPTY))
        wanted = {s.lower() for s in states_filter} if states_filter else None
        return sorted(g for g in found.values() if wanted is None or g[2].lower() in wanted)

    def describe_group(self, group_id: str, api_version: int = 0) -> dict:
        def result(error, state="", protocol_type="", protocol="", members=()):
            return {"error_code": error, "group_id": group_id, "state": state,
                    "protocol_type": protocol_type, "protocol": protocol, "members": list(members)}

        if group_id is None:
            return result(INVALID_GROUP_ID)
        if not self._active:
            return result(COORDINATOR_NOT_AVAILABLE)
        group = self._groups.get(group_id)
        if group is None or group.state == DEAD:
            if group_id in self._offset_groups():
                return result(NONE, EMPTY)
            return result(GROUP_ID_NOT_FOUND if api_version >= 6 else NONE, DEAD)
        stable = group.state == STABLE
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "metadata": m.metadata(group.protocol_name or "") if stable else b"",
                    "assignment": m.assignment if stable else b""}
                   for m in group.members.values()]
        return result(NONE, group.state, group.protocol_type or "",
                      (group.protocol_name or "") if stable else "", members)

    # ------------------------------------------------------------------ shutdown
    def unload_groups(self, moved: Callable[[str], bool]) -> int:
        """Forget the groups for which moved(group_id) is true (their coordinator is now another
        node): timers cancelled, parked JoinGroup/SyncGroup calls answered NOT_COORDINATOR, as
        Kafka's coordinator unloads the groups of an offsets partition it resigns. Committed offsets
        stay where they are. Returns how many groups were unloaded."""
        gone = [gid for gid in self._groups if moved(gid)]
        for gid in gone:
            self._drop(self._groups.pop(gid))
        if gone:
            log.info("unloaded %d groups coordinated by another node now", len(gone))
        return len(gone)

    def _drop(self, group: _Group) -> None:
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            if member.hb_timer is not None:
                member.hb_timer.cancel()
                member.hb_timer = None
            fut, member.join_future = member.join_future, None
            _resolve(fut, JoinResult.error(member.member_id, NOT_COORDINATOR))
            sfut, member.sync_future = member.sync_future, None
            _resolve(sfut, SyncResult(NOT_COORDINATOR))
        group.state = DEAD

    def close(self) -> None:
        """Stop: cancel every timer and answer parked JoinGroup/SyncGroup calls with NOT_COORDINATOR."""
        self._active = False
        for group in list(self._groups.values()):
            self._drop(group)
        self._groups.clear()
