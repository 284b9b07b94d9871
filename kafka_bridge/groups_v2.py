"""ConsumerGroupCoordinator: Kafka's next-generation consumer group protocol (KIP-848,
ConsumerGroupHeartbeat / ConsumerGroupDescribe) as pure logic over the shared offset table.

The broker computes the assignment (server-side assignors "uniform" and "range"), each member
reconciles towards its target one heartbeat at a time: partitions to give up are revoked first,
and a partition moves to its new owner only once the old owner has said (in a heartbeat's
TopicPartitions) that it no longer holds it. Epochs follow Kafka's GroupMetadataManager: the
group epoch goes up when the membership, a subscription or the subscribed topics' partition
counts change; the target assignment is computed for that epoch; a member takes the target
epoch when it has nothing left to revoke. Static members (``group.instance.id``) leaving with
epoch -2 keep their partitions for the session timeout, and a new member id with the same
instance id takes them over; an instance id held by a live member gets UNRELEASED_INSTANCE_ID.
Regex subscriptions use Python's ``re`` (Kafka uses RE2/J: the syntax the two share - classes,
alternation, repetition, anchors - behaves the same; RE2's lack of backreferences is not
enforced here) and are matched with ``fullmatch`` against the broker's visible topics.

Offsets are committed to the broker's ConsumerOffsetManager through the classic coordinator's
``commit_offsets_unchecked`` after ``validate_commit`` has checked member id and epoch, so
RocketMQ tools (``rmq admin consumerProgress``) see a KIP-848 group like any other.

Dead members are found lazily: each heartbeat or describe of a group first removes members
whose session timed out and members that held partitions to revoke past their rebalance
timeout (Kafka fences them the same way); that expiry, group listing and the first heartbeat
checks come from GroupRegistry (group_registry.py), shared with the share groups. No sockets,
no wire codec, no timers.
"""
from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .group_registry import GroupRegistry, HeartbeatResult
from .protocol import error_codes as ec

TP = tuple[str, int]
ASSIGNORS = ("uniform", "range")


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    topic_names: list[str] = field(default_factory=list)
    regex: str | None = None
    epoch: int = 0
    prev_epoch: int = -1
    assigned: set = field(default_factory=set)          # partitions the member may use now
    revoking: set = field(default_factory=set)          # told to give up, not yet confirmed
    last_seen: float = 0.0
    revoke_since: float = 0.0
    left_static: bool = False                            # left with epoch -2, partitions kept
    last_sent: frozenset | None = None


class _ConsumerGroup:
    def __init__(self, group_id: str, assignor: str):
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.assignor = assignor
        self.members: dict[str, _Member] = {}
        self.target: dict[str, set] = {}
        self.metadata: tuple = ()      # ((topic, partitions), ...) the target was computed for

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.assigned != self.target.get(m.member_id, set())
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"


def _compile(regex: str):
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {regex!r}: {exc}") from None


# ------------------------------------------------------------------------------- assignors
def assign_uniform(subs: dict[str, set[str]], partitions: dict[str, int],
                   current: dict[str, set]) -> dict[str, set]:
    """Spread every subscribed partition over the members subscribed to its topic so counts
    differ by at most one where subscriptions allow; a partition stays with its current owner
    when that owner is among the least loaded candidates (sticky)."""
    out: dict[str, set] = {m: set() for m in subs}
    owner = {tp: m for m, tps in current.items() if m in subs for tp in tps}
    tps = sorted((t, p) for t, n in partitions.items() for p in range(n))
    members = sorted(subs)
    # quota per member for the homogeneous case keeps stickiness from unbalancing the group
    for tp in tps:
        cands = [m for m in members if tp[0] in subs[m]]
        if not cands:
            continue
        low = min(len(out[m]) for m in cands)
        best = [m for m in cands if len(out[m]) == low]
        prev = owner.get(tp)
        pick = prev if prev in best else best[0]
        out[pick].add(tp)
    # second pass: move partitions from members above the fair share to members below it
    for _ in range(len(tps)):
        loads = sorted(members, key=lambda m: len(out[m]))
        if not loads or len(out[loads[-1]]) - len(out[loads[0]]) <= 1:
            break
        hi, lo = loads[-1], loads[0]
        movable = sorted(tp for tp in out[hi] if tp[0] in subs[lo])
        if not movable:
            break
        tp = movable[-1]
        out[hi].discard(tp)
        out[lo].add(tp)
    return out


def assign_range(subs: dict[str, set[str]], partitions: dict[str, int],
                 current: dict[str, set]) -> dict[str, set]:
    """Per topic, contiguous ranges of partitions to the subscribed members in member-id order
    (the first n % k members get one more), so co-partitioned topics line up."""
    out: dict[str, set] = {m: set() for m in subs}
    for topic, n in sorted(partitions.items()):
        cands = sorted(m for m in subs if topic in subs[m])
        if not cands:
            continue
        per, extra = divmod(n, len(cands))
        p = 0
        for i, m in enumerate(cands):
            k = per + (1 if i < extra else 0)
            out[m].update((topic, q) for q in range(p, p + k))
            p += k
    return out


_ASSIGN = {"uniform": assign_uniform, "range": assign_range}


class ConsumerGroupCoordinator(GroupRegistry):
    """The KIP-848 groups of one broker. `topics()` returns {topic: partition count} of the
    topics a consumer may subscribe to; `clock` is time.monotonic (tests may pass their own)."""

    UNKNOWN_MEMBER = "Member {member_id} is not a member of group {group_id}."
    groups: dict[str, _ConsumerGroup]

    def __init__(self, topics: Callable[[], dict[str, int]], offset_commit: Callable | None = None, *,
                 heartbeat_interval_ms: int = 5000, session_timeout_ms: int = 45_000,
                 default_assignor: str = "uniform", max_size: int = 2**31 - 1,
                 clock: Callable[[], float] = time.monotonic):
        if default_assignor not in ASSIGNORS:
            raise ValueError(f"kafkaConsumerGroupAssignor: expected one of {', '.join(ASSIGNORS)}, "
                             f"got {default_assignor!r}")
        super().__init__(heartbeat_interval_ms=heartbeat_interval_ms, session_timeout_ms=session_timeout_ms,
                         clock=clock)
        self.topics = topics
        self.offset_commit = offset_commit
        self.default_assignor = default_assignor
        self.max_size = max_size

    # owns(group_id) (from GroupRegistry) is True when `group_id` is a consumer-protocol group
    # with members: a classic JoinGroup for it gets INCONSISTENT_GROUP_PROTOCOL.

    # ---------------------------------------------------------------- heartbeat
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                  rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                  topic_names: list[str] | None = None, regex: str | None = None,
                  assignor: str | None = None, owned: Iterable[TP] | None = None,
                  client_id: str = "", client_host: str = "") -> HeartbeatResult:
        now = self.clock()
        bad = self._check_heartbeat(group_id, member_epoch, -2)
        if bad is not None:
            return bad
        if member_epoch == 0 and (rebalance_timeout_ms == -1 or (topic_names is None and regex is None)):
            return HeartbeatResult(ec.INVALID_REQUEST, error_message="RebalanceTimeoutMs and a subscription "
                                   "(SubscribedTopicNames or SubscribedTopicRegex) must be set when joining.")
        if member_epoch != 0 and not member_id:
            return HeartbeatResult(ec.INVALID_REQUEST, error_message="MemberId can't be empty.")
        if assignor is not None and assignor not in ASSIGNORS:
            return HeartbeatResult(ec.UNSUPPORTED_ASSIGNOR,
                                   error_message=f"ServerAssignor {assignor} is not supported. Supported "
                                   f"assignors: {', '.join(ASSIGNORS)}.")
        if regex:
            try:
                _compile(regex)
            except ValueError as exc:
                return HeartbeatResult(ec.INVALID_REGULAR_EXPRESSION, error_message=str(exc))
        g = self._group_for_heartbeat(group_id, member_id, member_epoch,
                                      lambda: _ConsumerGroup(group_id, assignor or self.default_assignor))
        if isinstance(g, HeartbeatResult):
            return g
        self._expire(g, now)

        if member_epoch in (-1, -2):
            return self._leave(g, member_id, member_epoch, instance_id)

        if member_epoch == 0:
            res = self._join(g, member_id, instance_id, client_id, client_host, now)
            if isinstance(res, HeartbeatResult):
                return res
            m = res
        else:
            m = g.members.get(member_id)
            if m is None or m.left_static:
                return self._unknown_member(group_id, member_id)
            if member_epoch != m.epoch and not (member_epoch == m.prev_epoch and owned is not None
                                                and set(owned) <= m.assigned | m.revoking):
                self._remove(g, m)
                return HeartbeatResult(ec.FENCED_MEMBER_EPOCH,
                                       error_message=f"The member epoch {member_epoch} of {member_id} is fenced "
                                       f"(the group has it at {m.epoch}).")
        m.last_seen = now
        if rack_id is not None:
            m.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = rebalance_timeout_ms
        if topic_names is not None and sorted(topic_names) != sorted(m.topic_names):
            m.topic_names = list(topic_names)
            g.epoch += 1
        if regex is not None and (regex or None) != m.regex:
            m.regex = regex or None
            g.epoch += 1
        if assignor is not None and assignor != g.assignor:
            g.assignor = assignor
            g.epoch += 1
        if owned is not None:
            owned = set(owned)
            m.revoking &= owned  # what the member no longer reports is released
        self._refresh_target(g)
        self._reconcile(g, m, now)
        cur = frozenset(m.assigned)
        send = member_epoch == 0 or cur != m.last_sent or (owned is not None and owned != m.assigned)
        m.last_sent = cur
        assignment = None
        if send:
            assignment = {}
            for t, p in sorted(cur):
                assignment.setdefault(t, []).append(p)
        return HeartbeatResult(ec.NONE, m.member_id, m.epoch, self.heartbeat_interval_ms, assignment)

    def _join(self, g: _ConsumerGroup, member_id: str, instance_id: str | None, client_id: str,
              client_host: str, now: float):
        member_id = member_id or uuid.uuid4().hex
        if instance_id:
            old = next((x for x in g.members.values() if x.instance_id == instance_id), None)
            if old is not None and old.member_id != member_id:
                if not old.left_static:
                    return HeartbeatResult(ec.UNRELEASED_INSTANCE_ID,
                                           error_message=f"Static member {old.member_id} with instance id "
                                           f"{instance_id} is not released.")
                # the new member takes over the static member's epoch and partitions
                del g.members[old.member_id]
                g.target[member_id] = g.target.pop(old.member_id, set())
                old.member_id, old.left_static, old.client_id, old.client_host = (
                    member_id, False, client_id, client_host)
                old.last_sent = None
                g.members[member_id] = old
                return old
        m = g.members.get(member_id)
        if m is None:
            if len(g.members) >= self.max_size:
                return HeartbeatResult(ec.GROUP_MAX_SIZE_REACHED,
                                       error_message=f"The group {g.group_id} has reached its maximum size.")
            m = g.members[member_id] = _Member(member_id, instance_id, client_id, client_host)
        else:  # a known member re-joining (after a fence or a lost connection) starts empty
            m.assigned, m.revoking, m.epoch, m.prev_epoch, m.last_sent = set(), set(), 0, -1, None
        g.epoch += 1
        return m

    def _leave(self, g: _ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None):
        m = g.members.get(member_id)
        if m is None:
            return self._unknown_member(g.group_id, member_id)
        if member_epoch == -2 and m.instance_id:
            m.left_static = True  # keeps its partitions until the session timeout
            m.last_seen = self.clock()
        else:
            self._remove(g, m)
        return HeartbeatResult(ec.NONE, member_id, member_epoch, self.heartbeat_interval_ms)

    # GroupRegistry._prune forgets groups left without members (their offsets stay in the offset
    # table): _idle is GroupRegistry's "no members".

    def _remove(self, g: _ConsumerGroup, m: _Member) -> None:
        g.members.pop(m.member_id, None)
        g.target.pop(m.member_id, None)
        g.epoch += 1

    def _remove_member(self, g: _ConsumerGroup, m: _Member) -> None:
        self._remove(g, m)

    def _fenced(self, g: _ConsumerGroup, m: _Member, now: float) -> bool:
        # a member that did not revoke within its rebalance timeout is fenced
        return bool(m.revoking) and now - m.revoke_since > m.rebalance_timeout_ms / 1000

    # ---------------------------------------------------------------- assignment
    def _subscription(self, m: _Member, topics: dict[str, int]) -> set[str]:
        subs = {t for t in m.topic_names if t in topics}
        if m.regex:
            rx = _compile(m.regex)
            subs |= {t for t in topics if rx.fullmatch(t)}
        return subs

    def _refresh_target(self, g: _ConsumerGroup) -> None:
        topics = self.topics()
        subs = {mid: self._subscription(m, topics) for mid, m in g.members.items()}
        wanted = set().union(*subs.values()) if subs else set()
        meta = tuple(sorted((t, topics[t]) for t in wanted))
        if meta != g.metadata:
            g.metadata = meta
            g.epoch += 1
        if g.assignment_epoch == g.epoch and set(g.target) == set(g.members):
            return
        g.target = _ASSIGN[g.assignor](subs, dict(meta), g.target)
        g.assignment_epoch = g.epoch

    def _reconcile(self, g: _ConsumerGroup, m: _Member, now: float) -> None:
        target = g.target.get(m.member_id, set())
        if m.epoch == g.assignment_epoch and m.assigned == target and not m.revoking:
            return
        revoke = m.assigned - target
        if revoke:  # first the member gives up what it must, at its current epoch
            m.assigned &= target
            m.revoking |= revoke
            m.revoke_since = now
            return
        if m.revoking:
            return
        held = set()
        for o in g.members.values():
            if o is not m:
                held |= o.assigned | o.revoking
        m.assigned |= {tp for tp in target if tp not in held}
        if m.epoch != g.assignment_epoch:
            m.prev_epoch, m.epoch = m.epoch, g.assignment_epoch

    # ---------------------------------------------------------------- offsets
    def validate_commit(self, group_id: str, member_id: str, member_epoch: int) -> int | None:
        """None when `group_id` is not a consumer-protocol group (the classic rules apply);
        otherwise the error code of an OffsetCommit with this member id and epoch."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        self._expire(g)
        if not g.members:
            return None if member_epoch < 0 and not member_id else ec.UNKNOWN_MEMBER_ID
        if member_epoch < 0 and not member_id:
            return ec.UNKNOWN_MEMBER_ID  # simple commits are for empty groups only
        m = g.members.get(member_id)
        if m is None or m.left_static:
            return ec.UNKNOWN_MEMBER_ID
        if member_epoch > m.epoch:
            return ec.FENCED_MEMBER_EPOCH
        if member_epoch < m.epoch and member_epoch != m.prev_epoch:
            return ec.STALE_MEMBER_EPOCH
        return ec.NONE

    # ---------------------------------------------------------------- describe
    def describe(self, group_id: str) -> dict | None:
        g = self.groups.get(group_id)
        if g is None:
            return None
        self._expire(g)
        self._refresh_target(g)

        def tps(parts) -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for t, p in sorted(parts):
                out.setdefault(t, []).append(p)
            return out
        return {"group_id": g.group_id, "state": g.state(), "group_epoch": g.epoch,
                "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "topic_names": list(m.topic_names), "regex": m.regex,
                             "assignment": tps(m.assigned), "target": tps(g.target.get(m.member_id, ()))}
                            for m in g.members.values()]}
