"""What every message says about the leader and the epoch, before its own content (Kafka's
maybeTransition and maybeHandleCommonResponse): a higher epoch is adopted, a leader learned is
followed, and what would mean two leaders in one epoch is refused. A message naming this
replica's id the leader of an epoch it never knew, on a replica that started without a
quorum-state, is a new disk under an old id (KIP-853): it stops acting as a voter."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors, error_name
from raftcore.raft.refusals import leader_contradiction, refuse_response
from raftcore.raft.states import LeaderState, ResignedState

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["handle_common_response", "maybe_transition"]

logger = logging.getLogger("raftcore.raft.core")


def maybe_transition(
    core: RaftCore, leader_id: int | None, epoch: int, now: int, reason: str
) -> str | None:
    """Follow what a message says about the leader of ``epoch`` (Kafka's maybeTransition).
    Returns None when followed (or nothing to follow), else what the message contradicts in
    this replica's record (:func:`raftcore.raft.refusals.leader_contradiction`): then nothing
    changed, and the caller refuses it. Kafka's hasConsistentLeader throws there; a peer's
    message is input, so a contradiction is the peer's error, never this replica's exit."""
    quorum = core.quorum
    if leader_id is not None and leader_id == core.node_id and _not_our_leadership(core, epoch):
        # Another replica under this id led that epoch (a new or wiped disk, KIP-853): this
        # one is not the voter that led it, and acts as an observer until the log says more.
        quorum.demote(
            f"a replica with id {core.node_id} led epoch {epoch}, which this replica never "
            "led: its disk is not that replica's (wiped or replaced), so it is another replica"
        )
        if epoch > quorum.epoch:
            core.transition_to_unattached(epoch, now, reason)
        return None
    contradiction = leader_contradiction(core, leader_id, epoch)
    if contradiction is not None:
        return contradiction
    if epoch > quorum.epoch:
        if leader_id is not None:
            core.transition_to_follower(epoch, leader_id, now, reason)  # not us: checked above
        else:
            core.transition_to_unattached(epoch, now, reason)
    elif (
        epoch == quorum.epoch
        and leader_id is not None
        and quorum.leader_id is None
        and leader_id != core.node_id
    ):
        core.transition_to_follower(epoch, leader_id, now, reason)
    return None


def _not_our_leadership(core: RaftCore, epoch: int) -> bool:
    """A message names this replica's id the leader of ``epoch``, which this replica never led:
    another replica under this id did -- the disk this one replaced (wiped, or its
    quorum-state lost) -- unless the voter set names this very replica by its directory id, in
    which case only a bug can say so (KIP-853)."""
    quorum = core.quorum
    named = core.history.latest().key_of(core.node_id)
    if named is not None and named.directory_id is not None and named == core.local_key:
        return False
    if epoch > quorum.epoch:
        return True  # it would know: it writes its quorum-state before it leads
    return epoch == quorum.epoch and not isinstance(quorum.state, (LeaderState, ResignedState))


def handle_common_response(
    core: RaftCore, error: int, leader_id: int, epoch: int, now: int, *, source: int
) -> bool | None:
    """What every response says before its own content (Kafka's maybeHandleCommonResponse).

    Returns True/False when the response is fully handled (success/failure), or None when
    its own handler should go on.
    """
    leader = None if leader_id < 0 else leader_id
    if epoch < core.quorum.epoch or error == Errors.UNKNOWN_LEADER_EPOCH:
        return True  # stale
    if epoch > core.quorum.epoch or error in (
        Errors.FENCED_LEADER_EPOCH,
        Errors.NOT_LEADER_OR_FOLLOWER,
    ):
        refused = maybe_transition(
            core, leader, epoch, now, f"a response in epoch {epoch} ({error_name(error)})"
        )
        return True if refused is None else refuse_response(core, source, refused, now)
    if leader is not None and core.quorum.leader_id is None and leader != core.node_id:
        core.transition_to_follower(epoch, leader, now, f"{leader} leads epoch {epoch}")
        return None if error == Errors.NONE else True
    if error == Errors.BROKER_NOT_AVAILABLE:
        return False
    if error == Errors.INVALID_REQUEST:
        # Kafka treats it as fatal; it is a peer's verdict, and a peer may be wrong or lying
        core.refusals.refuse(source, error, f"node {source} found our request invalid", now)
        return False
    if error == Errors.INCONSISTENT_CLUSTER_ID:
        logger.error("%s a peer belongs to another cluster (INCONSISTENT_CLUSTER_ID)", core.prefix)
        return False
    return None
