"""Requests a replica refuses because they contradict what it knows, and how it says so.

A peer's message is input, never a premise: a BeginQuorumEpoch naming another leader of the
epoch this replica already follows, one naming this replica the leader of an epoch it never
led, a Vote from a replica outside the voter set -- each is answered with Kafka's error and
logged once per peer and error each interval (a peer retries every few milliseconds, and
a leader repeats its BeginQuorumEpoch every half fetch timeout). Invariant checks guard this
replica's own state only (:mod:`raftcore.raft.quorum_state`), never what a peer says.

The errors, from Kafka's KafkaRaftClient and KIP-595:

- ``INVALID_REQUEST``: the message names another leader of an epoch whose leader this replica
  knows, or names this replica the leader of an epoch it does not lead. Kafka's
  ``hasConsistentLeader`` throws there; two leaders in one epoch cannot both be right, and the
  one this replica already follows won its epoch before this message came.
- ``INCONSISTENT_VOTER_SET``: a Vote, BeginQuorumEpoch or EndQuorumEpoch from a replica that is
  not a voter of this replica's voter set (KIP-595's ``validateVoterOnlyRequest``). A Vote's
  higher epoch is still adopted first, as Kafka does (:mod:`raftcore.raft.vote` says why); the
  vote is refused.
- ``INVALID_VOTER_KEY`` (KIP-853) stays with the handlers: a request meant for another replica.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors, error_name
from raftcore.log_limit import RepeatLimiter
from raftcore.raft.replicated_log import end_offset_and_epoch
from raftcore.raft.states import FollowerState, LeaderState, ResignedState
from raftcore.raft.values import OffsetAndEpoch
from raftcore.raft.voters import ReplicaKey

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = [
    "Refusals",
    "leader_contradiction",
    "non_voter",
    "refuse_response",
    "refused_leader",
    "sender_contradiction",
]

logger = logging.getLogger("raftcore.raft.core")

REFUSAL_LOG_INTERVAL_MS = 30_000


class Refusals:
    """``refuse(peer, error, line, now)``: log ``line`` (what was refused and why) once per
    (peer, error) every ``every_ms``, with how many were left out, and return ``error``."""

    def __init__(self, prefix: str, every_ms: int = REFUSAL_LOG_INTERVAL_MS) -> None:
        self.prefix = prefix
        self._now = 0
        self._limiter = RepeatLimiter(every_ms / 1000, clock=lambda: self._now / 1000)
        self.count = 0  # every refusal, logged or not

    def refuse(self, peer: int, error: int, line: str, now: int) -> int:
        self.count += 1
        self._now = now
        left_out = self._limiter.admit((peer, error))
        if left_out is not None:
            more = f" (and {left_out} more since)" if left_out else ""
            logger.warning("%s %s (%s)%s", self.prefix, line, error_name(error), more)
        return error


def leader_contradiction(core: RaftCore, leader_id: int | None, epoch: int) -> str | None:
    """What a message saying ``leader_id`` leads ``epoch`` contradicts in this replica's own
    record of the quorum, or None. An older epoch contradicts nothing (it is stale)."""
    quorum = core.quorum
    if leader_id is None or epoch < quorum.epoch:
        return None
    state = quorum.state
    if leader_id == core.node_id:
        if epoch == quorum.epoch and isinstance(state, (LeaderState, ResignedState)):
            return None
        return f"a message naming this replica leader of epoch {epoch}, which it does not lead"
    known = quorum.leader_id
    if epoch == quorum.epoch and known is not None and known != leader_id:
        return f"leader {leader_id} of epoch {epoch}: this replica knows leader {known}"
    return None


def sender_contradiction(core: RaftCore, leader_id: int, epoch: int) -> str | None:
    """What a BeginQuorumEpoch or EndQuorumEpoch from ``leader_id`` for ``epoch`` contradicts,
    or None. A leader tells the other voters, never itself: one naming this replica's id is
    another process under this id, or a forgery, and changes nothing here (the demotion of a
    replica whose id led an epoch it never led is left to answers of its own requests)."""
    if leader_id == core.node_id:
        return f"it names this replica's own id {leader_id} as the leader of epoch {epoch}"
    return leader_contradiction(core, leader_id, epoch)


def non_voter(
    core: RaftCore,
    sender: ReplicaKey,
    epoch: int,
    what: str,
    claimed_log: OffsetAndEpoch | None = None,
) -> str | None:
    """Why a voter-only request from ``sender`` is refused because the sender is not a voter of
    this replica's voter set (the latest in its log, KIP-853), or None.

    A message from the leader this replica already follows in that epoch contradicts nothing
    (a leader removed from the voter set leads until the removal commits, then resigns).

    A replica's voter set may be behind: a voter just added may stand for election before
    this replica has read the record that added it, and if the voters that have it refuse
    the others' votes (their logs are behind) and this one refuses it, no one is elected. So
    a Vote whose candidate's log is strictly ahead of this replica's is judged by the
    candidate's voter set, which this replica cannot see, while this replica has no live
    leader (a leader, or a follower that has fetched from its leader in this epoch, refuses
    it: its voter set is the one in force)."""
    voters = core.voter_set
    if sender.id in voters.ids and (sender.directory_id is None or voters.is_voter(sender)):
        return None  # (a directory id is checked where the request says it: Vote)
    state = core.quorum.state
    if epoch == core.quorum.epoch and core.quorum.leader_id == sender.id:
        return None
    if claimed_log is not None and claimed_log > end_offset_and_epoch(core.log):
        live_leader = isinstance(state, (LeaderState, ResignedState)) or (
            isinstance(state, FollowerState) and state.has_fetched and not state.leader_resigned
        )
        if not live_leader:
            return None
    return f"{what} {sender}: not a voter of {sorted(voters.ids)}"


def refused_leader(core: RaftCore, leader_id: int, epoch: int, api: str, now: int) -> int | None:
    """The error for a BeginQuorumEpoch or EndQuorumEpoch from ``leader_id`` that contradicts
    this replica's record (INVALID_REQUEST) or comes from outside its voter set
    (INCONSISTENT_VOTER_SET, KIP-595's validateVoterOnlyRequest), logged; or None."""
    why = sender_contradiction(core, leader_id, epoch)
    if why is not None:
        line = f"refusing a {api} from {leader_id} in epoch {epoch}: {why}"
        return core.refusals.refuse(leader_id, Errors.INVALID_REQUEST, line, now)
    why = non_voter(core, ReplicaKey(leader_id), epoch, "leader")
    if why is not None:
        line = f"refusing a {api} in epoch {epoch}: {why}"
        return core.refusals.refuse(leader_id, Errors.INCONSISTENT_VOTER_SET, line, now)
    return None


def refuse_response(core: RaftCore, source: int, why: str, now: int) -> bool:
    """A response that contradicts this replica's record: logged, and counted a failure."""
    core.refusals.refuse(
        source, Errors.INVALID_REQUEST, f"ignoring a response from {source}: {why}", now
    )
    return False
