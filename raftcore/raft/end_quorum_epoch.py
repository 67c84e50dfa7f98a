"""EndQuorumEpoch (KIP-595): a resigning leader tells the voters, ranking its successors by
how far they have replicated; the best placed one stands for election at once, the others
after a backoff that grows with their rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftcore.error_codes import Errors
from raftcore.raft.leader_news import handle_common_response, maybe_transition
from raftcore.raft.messages import EndQuorumEpochRequest, EndQuorumEpochResponse
from raftcore.raft.refusals import refused_leader
from raftcore.raft.states import FollowerState, ResignedState

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore


def build_request(core: RaftCore, state: ResignedState) -> EndQuorumEpochRequest:
    return EndQuorumEpochRequest(
        core.config.cluster_id, core.node_id, state.epoch, state.preferred_successors
    )


def _response(core: RaftCore, error: int) -> EndQuorumEpochResponse:
    leader = core.quorum.leader_id
    return EndQuorumEpochResponse(error, -1 if leader is None else leader, core.quorum.epoch)


def election_backoff_ms(position: int, successors: int, max_ms: int) -> int:
    """Kafka's strictExponentialElectionBackoffMs: the first successor runs at once; each next
    waits twice as long as the one before, up to ``max_ms``; one not listed waits ``max_ms``."""
    if position == 0:
        return 0
    if position < 0 or position >= successors:
        return max_ms
    base = max_ms >> (successors - 1)
    return min(max_ms, base << (position - 1))


def handle_request(
    core: RaftCore, request: EndQuorumEpochRequest, now: int
) -> EndQuorumEpochResponse:
    if not core.has_valid_cluster_id(request.cluster_id):
        return _response(core, Errors.INCONSISTENT_CLUSTER_ID)
    error = core.validate_voter_only_request(request.leader_id, request.leader_epoch)
    if error is not None:
        return _response(core, error)
    error = refused_leader(core, request.leader_id, request.leader_epoch, "EndQuorumEpoch", now)
    if error is not None:
        return _response(core, error)
    maybe_transition(  # cannot contradict: refused_leader asked the same
        core,
        request.leader_id,
        request.leader_epoch,
        now,
        f"EndQuorumEpoch from {request.leader_id}",
    )
    state = core.quorum.state
    if isinstance(state, FollowerState) and state.leader == request.leader_id:
        successors = list(request.preferred_successors)
        position = successors.index(core.node_id) if core.node_id in successors else len(successors)
        state.override_fetch_timeout(
            now, election_backoff_ms(position, len(successors), core.config.election_backoff_max_ms)
        )
        # Its leader is gone: the successors' pre-votes may be granted now (Kafka PR #23168,
        # KAFKA-20895; without it a five-voter quorum's first successor gets only its own and
        # the resigned leader's).
        state.leader_resigned = True
    return _response(core, Errors.NONE)


def handle_response(
    core: RaftCore, source: int, response: EndQuorumEpochResponse, now: int
) -> bool:
    handled = handle_common_response(
        core, response.error_code, response.leader_id, response.leader_epoch, now, source=source
    )
    if handled is not None:
        return handled
    state = core.quorum.state
    if isinstance(state, ResignedState) and response.error_code == Errors.NONE:
        state.acknowledge(source)
    return response.error_code == Errors.NONE
