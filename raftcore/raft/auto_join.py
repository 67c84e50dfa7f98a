"""When a replica that is not a voter asks its leader to add it (Kafka's
``controller.quorum.auto.join.enable``, KAFKA-19078): decided here, from the core's state; the
driver sends the AddRaftVoter and tells :class:`AutoJoin` it did.

A replica asks when all of these hold:

- the voter set lives in the log (kraft.version 1: a static voter set cannot change);
- it knows its directory id and its endpoint (the leader adds a voter by both);
- its id is not in the voter set: neither as itself nor under another directory id (a wiped
  disk under a voter's id, or a voter not yet removed: an operator removes that one first --
  a replica never removes another to make room for itself);
- it follows a leader and is not downloading a snapshot;
- it has caught up with what it knows: its log reaches the high watermark it was told (the
  leader still checks that it caught up within the fetch timeout);
- no voter change is pending in its log (one change at a time: it would be refused).

It asks at most once per fetch timeout: a refusal (not caught up yet, another change in
flight) is retried then. A voter an operator removed asks again while it runs with auto-join
on (KAFKA-19850 in Kafka): stop it before removing it, or run it without.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore.raft.states import FollowerState
from raftcore.raft.voters import ReplicaKey, VoterEndpoint

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["AutoJoin", "JoinRequest"]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """Ask ``leader`` (of ``epoch``) to add ``key``, listening at ``endpoint``."""

    leader: int
    epoch: int
    key: ReplicaKey
    endpoint: VoterEndpoint


class AutoJoin:
    """The decision (see the module docstring) and its retry timer."""

    def __init__(self, retry_ms: int) -> None:
        self.retry_ms = retry_ms
        self.next_attempt = 0

    def due(self, core: RaftCore, now: int) -> JoinRequest | None:
        """What to send now, or None."""
        if now < self.next_attempt:
            return None
        request = wanted(core)
        if request is not None:
            self.next_attempt = now + self.retry_ms
        return request


def wanted(core: RaftCore) -> JoinRequest | None:
    """The AddRaftVoter this replica should send for itself, or None (the rules above)."""
    key, endpoint = core.local_key, core.endpoint
    if core.kraft_version < 1 or key.directory_id is None or endpoint is None:
        return None
    if key.id in core.voter_set:
        return None
    state = core.state
    if not isinstance(state, FollowerState) or state.fetching_snapshot is not None:
        return None
    hw = state.high_watermark
    if hw is None or core.log.end_offset < hw or core.history.uncommitted_change(hw):
        return None
    return JoinRequest(state.leader, state.epoch, key, endpoint)
