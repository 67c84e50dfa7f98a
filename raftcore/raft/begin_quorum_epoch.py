"""BeginQuorumEpoch (KIP-595): a new leader tells every voter, and keeps telling them (every
half fetch timeout) as a heartbeat for leader discovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftcore.error_codes import Errors
from raftcore.raft.leader_news import handle_common_response, maybe_transition
from raftcore.raft.messages import BeginQuorumEpochRequest, BeginQuorumEpochResponse
from raftcore.raft.refusals import refused_leader
from raftcore.raft.states import LeaderState, ProspectiveState
from raftcore.raft.voters import ReplicaKey

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore


def build_request(core: RaftCore, voter_id: int) -> BeginQuorumEpochRequest:
    voter = core.quorum.voter_set.key_of(voter_id)
    return BeginQuorumEpochRequest(
        core.config.cluster_id,
        core.node_id,
        core.quorum.epoch,
        voter_id,
        None if voter is None else voter.directory_id,
    )


def _response(core: RaftCore, error: int) -> BeginQuorumEpochResponse:
    leader = core.quorum.leader_id
    return BeginQuorumEpochResponse(error, -1 if leader is None else leader, core.quorum.epoch)


def handle_request(
    core: RaftCore, request: BeginQuorumEpochRequest, now: int
) -> BeginQuorumEpochResponse:
    if not core.has_valid_cluster_id(request.cluster_id):
        return _response(core, Errors.INCONSISTENT_CLUSTER_ID)
    error = core.validate_voter_only_request(request.leader_id, request.leader_epoch)
    if error is not None:
        return _response(core, error)
    if request.voter_id >= 0 and not ReplicaKey(
        request.voter_id, request.voter_directory_id
    ).addressed_to(core.local_key):
        return _response(core, Errors.INVALID_VOTER_KEY)  # meant for another replica (KIP-853)
    error = refused_leader(core, request.leader_id, request.leader_epoch, "BeginQuorumEpoch", now)
    if error is not None:
        return _response(core, error)
    maybe_transition(  # cannot contradict: refused_leader asked the same
        core,
        request.leader_id,
        request.leader_epoch,
        now,
        f"BeginQuorumEpoch from {request.leader_id}",
    )
    state = core.quorum.state
    if (
        isinstance(state, ProspectiveState)
        and state.leader == request.leader_id
        and state.epoch == request.leader_epoch
    ):
        # The leader it gave up on is alive and reaches it: follow it again instead of
        # waiting out the pre-vote (raftcore; Kafka leaves a Prospective that already knows
        # the leader to its election timeout or a majority of rejections).
        core.transition_to_follower(
            request.leader_epoch, request.leader_id, now, "its leader is alive (BeginQuorumEpoch)"
        )
    return _response(core, Errors.NONE)


def handle_response(
    core: RaftCore, source: int, response: BeginQuorumEpochResponse, now: int
) -> bool:
    handled = handle_common_response(
        core, response.error_code, response.leader_id, response.leader_epoch, now, source=source
    )
    if handled is not None:
        return handled
    if response.error_code != Errors.NONE:
        return False
    state = core.quorum.state
    if isinstance(state, LeaderState):
        state.acknowledged.add(source)
        core.reads_confirmed(state.reads.on_answered(source))
    return True
