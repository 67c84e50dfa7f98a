"""What every message says about the leader and the epoch, before its own content (Kafka's
maybeTransition and maybeHandleCommonResponse): a higher epoch is adopted, a leader learned is
followed, and what would mean two leaders in one epoch is refused. A message naming this
replica's id the leader of an epoch it never knew, on a replica that started without a
quorum-state, is a new disk under an old id (KIP-853): it stops acting as a voter."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftInvariantError
from raftcore.raft.states import LeaderState, ResignedState

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["handle_common_response", "maybe_transition"]

logger = logging.getLogger("raftcore.raft.core")


def maybe_transition(
    core: RaftCore, leader_id: int | None, epoch: int, now: int, reason: str
) -> None:
    """Follow what a message says about the leader of ``epoch`` (Kafka's maybeTransition),
    refusing what would mean two leaders in one epoch."""
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
        return
    if leader_id is not None and epoch == quorum.epoch:
        known = quorum.leader_id
        if leader_id == core.node_id and not isinstance(quorum.state, (LeaderState, ResignedState)):
            raise RaftInvariantError(
                f"{core.prefix} a message names this replica leader of epoch {epoch}, "
                f"but it is {quorum.state!r}"
            )
        if known is not None and known != leader_id:
            raise RaftInvariantError(
                f"{core.prefix} epoch {epoch}: leader {leader_id} reported, {known} known"
            )
    if epoch > quorum.epoch:
        if leader_id is not None and leader_id != core.node_id:
            core.transition_to_follower(epoch, leader_id, now, reason)
        elif leader_id == core.node_id:
            raise RaftInvariantError(
                f"{core.prefix} a message names this replica leader of future epoch {epoch}"
            )
        else:
            core.transition_to_unattached(epoch, now, reason)
    elif leader_id is not None and quorum.leader_id is None and leader_id != core.node_id:
        core.transition_to_follower(epoch, leader_id, now, reason)


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
    core: RaftCore, error: int, leader_id: int, epoch: int, now: int
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
        maybe_transition(
            core, leader, epoch, now, f"a response in epoch {epoch} ({error_name(error)})"
        )
        return True
    if leader is not None and core.quorum.leader_id is None and leader != core.node_id:
        core.transition_to_follower(epoch, leader, now, f"{leader} leads epoch {epoch}")
        return None if error == Errors.NONE else True
    if error == Errors.BROKER_NOT_AVAILABLE:
        return False
    if error == Errors.INVALID_REQUEST:
        raise RaftInvariantError(f"{core.prefix} a peer found our request invalid")
    if error == Errors.INCONSISTENT_CLUSTER_ID:
        logger.error("%s a peer belongs to another cluster (INCONSISTENT_CLUSTER_ID)", core.prefix)
        return False
    return None
