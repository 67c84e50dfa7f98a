"""Vote (KIP-595): a candidate asks each voter for its vote in a new epoch.

A voter grants at most one vote per epoch -- persisted before the answer leaves -- and only to
a candidate whose log is at least as up to date as its own, compared by last epoch first and
then end offset.

Pre-vote (KIP-996, Vote v2 ``PreVote``): a Prospective asks, in its *current* epoch (Kafka's
buildVoteRequest sends ``quorum.epoch()`` either way), whether the voters would vote for it.
A pre-vote is never persisted and changes no state (except that a higher epoch is adopted
first, as for any Vote); it is granted to an up-to-date log by any replica that has no live
leader: Unattached, Voted, Prospective, Candidate and Resigned replicas, and a Follower that
has not fetched from its leader in this epoch (KAFKA-17641/17642). The Leader refuses.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors
from raftcore.raft.election_backoff import start_election_backoff
from raftcore.raft.leader_news import handle_common_response
from raftcore.raft.messages import VoteRequest, VoteResponse
from raftcore.raft.refusals import non_voter
from raftcore.raft.replicated_log import end_offset_and_epoch
from raftcore.raft.states import CandidateState, ProspectiveState, UnattachedState
from raftcore.raft.values import OffsetAndEpoch
from raftcore.raft.voters import ReplicaKey

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

logger = logging.getLogger(__name__)


def build_request(core: RaftCore, voter_id: int, *, pre_vote: bool = False) -> VoteRequest:
    """A (pre-)vote request to ``voter_id``, naming it by its key in the voter set (KIP-853:
    a replica under that id with another directory answers INVALID_VOTER_KEY, not a vote)."""
    voter = core.quorum.voter_set.key_of(voter_id)
    return VoteRequest(
        cluster_id=core.config.cluster_id,
        candidate_epoch=core.quorum.epoch,  # a pre-vote too: the epoch is not raised to ask
        candidate_id=core.node_id,
        last_offset_epoch=core.log.last_fetched_epoch,
        last_offset=core.log.end_offset,
        voter_id=voter_id,
        pre_vote=pre_vote,
        candidate_directory_id=core.local_key.directory_id,
        voter_directory_id=None if voter is None else voter.directory_id,
    )


def _response(core: RaftCore, error: int, granted: bool = False) -> VoteResponse:
    leader = core.quorum.leader_id
    return VoteResponse(error, -1 if leader is None else leader, core.quorum.epoch, granted)


def handle_request(core: RaftCore, request: VoteRequest, now: int) -> VoteResponse:
    """Kafka's handleVoteRequest, in order: cluster id; a sane last offset and epoch (the
    epoch below the candidate's); the voter-only checks (older epoch fenced, non-voters
    refused); a higher epoch moves us to it first (durably); the request must be meant for
    us; then the vote itself."""
    if not core.has_valid_cluster_id(request.cluster_id):
        return _response(core, Errors.INCONSISTENT_CLUSTER_ID)
    # A candidate raised its epoch past its log's; a Prospective did not, so its log may end
    # in the very epoch it asks in (Kafka's isIllegalEpoch).
    if request.pre_vote:
        illegal_epoch = request.last_offset_epoch > request.candidate_epoch
    else:
        illegal_epoch = request.last_offset_epoch >= request.candidate_epoch
    if request.last_offset < 0 or request.last_offset_epoch < 0 or illegal_epoch:
        return _response(core, Errors.INVALID_REQUEST)
    error = core.validate_voter_only_request(request.candidate_id, request.candidate_epoch)
    if error is not None:
        return _response(core, error)
    candidate = ReplicaKey(request.candidate_id, request.candidate_directory_id)
    candidate_log = OffsetAndEpoch(request.last_offset, request.last_offset_epoch)
    kind = "pre-vote" if request.pre_vote else "vote"
    if request.candidate_id == core.node_id:
        # A candidate asks the other voters, never itself: another process under this id, or
        # a forgery; neither may move this replica's epoch.
        line = f"refusing a {kind} request naming this replica's own id {core.node_id}"
        error = core.refusals.refuse(candidate.id, Errors.INVALID_REQUEST, line, now)
        return _response(core, error)
    # Asked before a higher epoch is adopted: whether this replica has a live leader then
    why = non_voter(core, candidate, request.candidate_epoch, "candidate", candidate_log)
    if request.candidate_epoch > core.quorum.epoch:
        # Adopted even from a replica outside the voter set: a voter removed before it read
        # its removal may be stranded in a higher epoch (it stood for election, or adopted
        # an epoch, while it still counted itself a voter); until the voters pass that epoch it
        # can never learn the leader, and so never its removal (found by the simulation,
        # seed 5350). It is not granted the vote below.
        core.transition_to_unattached(
            request.candidate_epoch, now, f"vote request from {request.candidate_id}"
        )
    if why is not None:
        # KIP-595 validateVoterOnlyRequest: no vote for a replica outside the voter set
        line = f"refusing a {kind} request in epoch {request.candidate_epoch}: {why}"
        error = core.refusals.refuse(candidate.id, Errors.INCONSISTENT_VOTER_SET, line, now)
        return _response(core, error)
    if request.voter_id >= 0 and not ReplicaKey(
        request.voter_id, request.voter_directory_id
    ).addressed_to(core.local_key):
        # KIP-853: the request is for another replica (a disk wiped under this id is a new
        # replica, and must not stand in for the voter the candidate counts)
        return _response(core, Errors.INVALID_VOTER_KEY)
    if core.quorum.joining and not core.quorum.is_voter:
        # formatted to join an existing cluster: no voter of the static set, whatever id the
        # request names, until the voter set in the log takes it in (KIP-853)
        return _response(core, Errors.INVALID_VOTER_KEY)
    up_to_date = candidate_log >= end_offset_and_epoch(core.log)
    state = core.quorum.state
    if request.pre_vote:
        # Binds nothing: no state change, nothing persisted, several may be granted.
        granted = state.can_grant_pre_vote(request.candidate_id, up_to_date)
    else:
        granted = state.can_grant_vote(candidate, up_to_date)
    if (
        not request.pre_vote
        and granted
        and (
            isinstance(state, UnattachedState)
            or (isinstance(state, ProspectiveState) and state.voted is None)
        )
    ):
        # Durable before the answer is returned: the vote survives a crash.
        core.transition_to_voted(candidate, now)
    logger.info(
        "%s %svote for %d in epoch %d %s (its log %s, ours %s)",
        core.prefix,
        "pre-" if request.pre_vote else "",
        request.candidate_id,
        request.candidate_epoch,
        "granted" if granted else "refused",
        candidate_log,
        end_offset_and_epoch(core.log),
    )
    return _response(core, Errors.NONE, granted)


def handle_response(core: RaftCore, source: int, response: VoteResponse, now: int) -> bool:
    if response.error_code == Errors.UNSUPPORTED_VERSION and isinstance(
        core.quorum.state, ProspectiveState
    ):
        # A voter that does not speak Vote v2 cannot pre-vote: run the real election at once,
        # as Kafka's handleVoteResponse does (stronger than counting it as a grant).
        core.transition_to_candidate(now, f"voter {source} does not support pre-vote")
        return True
    handled = handle_common_response(
        core, response.error_code, response.leader_id, response.leader_epoch, now, source=source
    )
    if handled is not None:
        return handled
    if response.error_code != Errors.NONE:
        return False
    state = core.quorum.state
    if isinstance(state, CandidateState) and response.leader_epoch == state.epoch:
        if response.vote_granted:
            state.record_granted(source)
        else:
            state.record_rejected(source)
            if state.is_vote_rejected() and not state.backing_off:
                start_election_backoff(core, state, now, "lost the election")
    elif isinstance(state, ProspectiveState) and response.leader_epoch == state.epoch:
        # Requests are reset on every transition, so this answers our pre-vote.
        if response.vote_granted:
            state.record_granted(source)
        elif (
            state.leader_resigned
            and response.leader_id == state.leader
            and source != state.leader
            and source not in state.asked_again
        ):
            # Refused by a voter still following the leader that resigned to us: our
            # EndQuorumEpoch may have come first, its own on the way (the resigned leader
            # repeats it). Asked once more after the retry backoff rather than the hand-over
            # waiting out an election timeout (a full disk's leader resigned and stopped). Only
            # once: the refusal may be for a log behind its own, which asking again won't change.
            state.asked_again.add(source)
            core.requests.back_off(source, now + core.config.retry_backoff_ms)
        else:
            state.record_rejected(source)
            if state.is_vote_rejected():
                core.transition_after_pre_vote(now, f"pre-vote rejected in epoch {state.epoch}")
    return True
