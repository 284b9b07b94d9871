"""GroupRegistry: the membership bookkeeping that the KIP-848 consumer-group coordinator
(groups_v2.py) and the KIP-932 share-group coordinator (share.py) have in common.

Both keep ``groups`` (group id -> a group object with ``group_id``, ``members`` and ``state()``),
members with a ``last_seen`` clock reading, and find dead members lazily: whenever a group is
looked at, members silent for longer than the session timeout are removed (a subclass may fence
more, see ``_fenced``, and decides what removing means, see ``_remove_member``). Both answer a
heartbeat with a HeartbeatResult and share its first checks (group id, member epoch range) and
the way a heartbeat for a group that does not exist yet creates it (only a join, epoch 0, may),
forgetting idle groups first. Pure logic: no sockets, no wire codec, no timers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .protocol import error_codes as ec


@dataclass
class HeartbeatResult:
    error_code: int
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: dict[str, list[int]] | None = None  # topic -> partitions; None = unchanged
    error_message: str | None = None


class GroupRegistry:
    """Groups of one kind on one broker. Subclasses set ``UNKNOWN_MEMBER`` (the message of an
    UNKNOWN_MEMBER_ID answer, formatted with member_id and group_id) and implement
    ``_remove_member`` and ``_idle``."""

    UNKNOWN_MEMBER = "Member {member_id} is unknown."

    def __init__(self, *, heartbeat_interval_ms: int, session_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic):
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self.groups: dict = {}

    # ---------------------------------------------------------------- hooks
    def _remove_member(self, g, m) -> None:
        """Take member `m` out of group `g` (it timed out or was fenced)."""
        raise NotImplementedError

    def _fenced(self, g, m, now: float) -> bool:
        """True when a member whose session is alive must go all the same."""
        return False

    def _idle(self, g) -> bool:
        """True when group `g` (its members expired) holds nothing worth keeping in memory."""
        return not g.members

    # ---------------------------------------------------------------- membership
    def _expire(self, g, now: float | None = None) -> None:
        """Remove the members of `g` whose session timed out (or that `_fenced` names)."""
        now = self.clock() if now is None else now
        limit = self.session_timeout_ms / 1000
        for m in list(g.members.values()):
            if now - m.last_seen > limit or self._fenced(g, m, now):
                self._remove_member(g, m)

    def _prune(self) -> None:
        """Forget idle groups (group ids that clients make up must not pile up in memory); called
        when a group is created."""
        now = self.clock()
        for gid, g in list(self.groups.items()):
            self._expire(g, now)
            if self._idle(g):
                del self.groups[gid]

    def owns(self, group_id: str) -> bool:
        """True when a group of this kind with live members holds `group_id`."""
        g = self.groups.get(group_id)
        if g is None:
            return False
        self._expire(g)
        return bool(g.members)

    def list_groups(self) -> list[tuple[str, str]]:
        """[(group id, state)] of every group, dead members removed first."""
        out = []
        for g in list(self.groups.values()):
            self._expire(g)
            out.append((g.group_id, g.state()))
        return out

    # ---------------------------------------------------------------- heartbeat answers
    def _unknown_member(self, group_id: str, member_id: str) -> HeartbeatResult:
        return HeartbeatResult(ec.UNKNOWN_MEMBER_ID,
                               error_message=self.UNKNOWN_MEMBER.format(member_id=member_id, group_id=group_id))

    @staticmethod
    def _check_heartbeat(group_id: str, member_epoch: int, lowest_epoch: int) -> HeartbeatResult | None:
        """The error answer for an empty group id or a member epoch below `lowest_epoch`, or None."""
        if not group_id:
            return HeartbeatResult(ec.INVALID_GROUP_ID, error_message="GroupId can't be empty.")
        if member_epoch < lowest_epoch:
            return HeartbeatResult(ec.INVALID_REQUEST, error_message=f"MemberEpoch {member_epoch} is invalid.")
        return None

    def _group_for_heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                             new_group: Callable[[], object]):
        """The group a heartbeat is for, created with `new_group()` (after idle groups are
        forgotten) when a member joins (epoch 0) a group id not known yet; the UNKNOWN_MEMBER_ID
        answer when a heartbeat with another epoch names an unknown group."""
        g = self.groups.get(group_id)
        if g is None:
            if member_epoch != 0:
                return self._unknown_member(group_id, member_id)
            self._prune()
            g = self.groups[group_id] = new_group()
        return g
