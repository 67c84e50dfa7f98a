"""A peer's message is input, never a premise (raftcore.raft.refusals): a request that
contradicts what a replica knows is answered with Kafka's error and logged once per peer and
interval; the replica neither fails nor changes its state. Vote, BeginQuorumEpoch and
EndQuorumEpoch from outside the voter set are refused (KIP-595's validateVoterOnlyRequest)."""

from __future__ import annotations

import logging

from raft_harness import CLUSTER, Harness
from test_raft_reconfig import DIR, dynamic_leader

from raftcore.error_codes import Errors
from raftcore.raft import FetchRequest, FetchResponse, LeaderAndEpoch, VoteRequest, VoteResponse
from raftcore.raft.messages import BeginQuorumEpochRequest, EndQuorumEpochRequest
from raftcore.raft.states import FollowerState, LeaderState
from raftcore.raft.voters import VoterSet

OUTSIDER = 9  # not a voter of (1, 2, 3)


def follower_of_2(epoch: int = 3) -> Harness:
    """Node 1 follows leader 2 of ``epoch`` and has fetched from it."""
    h = Harness()
    assert h.begin_quorum_epoch(2, epoch).error_code == Errors.NONE
    (fetch,) = h.take(FetchRequest)
    h.respond(fetch, FetchResponse(Errors.NONE, 0, 0, LeaderAndEpoch(2, epoch)))
    assert isinstance(h.state, FollowerState) and h.state.has_fetched
    return h


def refusal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]


# ---- what contradicts the replica's record of the quorum -----------------------------------


def test_a_begin_quorum_epoch_naming_another_leader_of_the_current_epoch_is_refused_not_fatal():
    h = Harness()
    h.become_leader()
    answer = h.request(2, BeginQuorumEpochRequest(CLUSTER, 2, h.epoch, 1))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert (answer.leader_id, answer.leader_epoch) == (1, h.epoch)
    assert isinstance(h.state, LeaderState)


def test_a_begin_quorum_epoch_naming_another_leader_at_a_follower_is_refused():
    h = follower_of_2()
    answer = h.request(3, BeginQuorumEpochRequest(CLUSTER, 3, 3, 1))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert h.state.leader_id == 2 and h.epoch == 3


def test_a_begin_quorum_epoch_naming_the_receiver_leader_of_a_future_epoch_is_refused():
    """The receiver would know: it writes its quorum-state before it leads. Its voter set names
    it by its directory id, so the message is a forgery, not news of a wiped disk."""
    h = dynamic_leader()
    epoch = h.epoch
    answer = h.request(2, BeginQuorumEpochRequest(CLUSTER, 1, epoch + 5, 1, DIR[1]))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert h.epoch == epoch and isinstance(h.state, LeaderState) and h.core.quorum.is_voter


def test_an_end_quorum_epoch_naming_another_leader_of_the_current_epoch_is_refused():
    h = follower_of_2()
    answer = h.request(3, EndQuorumEpochRequest(CLUSTER, 3, 3, (1,)))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert h.state.leader_id == 2 and not h.state.leader_resigned


def test_a_vote_request_naming_the_receivers_own_id_is_refused():
    h = follower_of_2()
    answer = h.request(1, VoteRequest(CLUSTER, 9, 1, 3, 100, 1))
    assert answer.error_code == Errors.INVALID_REQUEST and h.epoch == 3


def test_a_response_naming_another_leader_of_the_current_epoch_is_a_failed_request():
    """Kafka's hasConsistentLeader throws; here the answer is a peer's, and is ignored."""
    h = follower_of_2()
    h.advance(1)
    (fetch,) = h.take(FetchRequest)
    h.respond(
        fetch,
        FetchResponse(Errors.FENCED_LEADER_EPOCH, -1, 0, LeaderAndEpoch(3, 3)),
    )
    assert h.state.leader_id == 2 and h.epoch == 3


def test_invalid_request_in_an_answer_is_a_failed_request_not_fatal():
    h = Harness()
    h.become_candidate()
    epoch = h.epoch
    (ask, *_) = h.take(VoteRequest)
    h.respond(ask, VoteResponse(Errors.INVALID_REQUEST, -1, epoch, False))
    assert h.epoch == epoch


# ---- who votes -----------------------------------------------------------------------------


def test_a_vote_request_from_outside_the_voter_set_never_wins_even_claiming_a_longer_log():
    """The leader's voter set is the one in force. Its higher epoch is adopted (a voter removed
    before it read its removal may be stranded in a higher epoch, and must be passed), but the
    vote in that epoch is still free for a voter."""
    h = Harness()
    h.become_leader()
    epoch = h.epoch
    answer = h.request(OUTSIDER, VoteRequest(CLUSTER, epoch + 1, OUTSIDER, epoch, 10**9, 1))
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET and not answer.vote_granted
    assert h.epoch == epoch + 1
    assert h.request(2, VoteRequest(CLUSTER, epoch + 1, 2, epoch, 10**9, 1)).vote_granted


def test_a_follower_with_a_live_leader_refuses_a_vote_from_outside_the_voter_set():
    """A live leader means its voter set is current: a longer log claimed by a non-voter is no
    sign that this replica's set is behind."""
    h = follower_of_2()
    answer = h.request(OUTSIDER, VoteRequest(CLUSTER, 4, OUTSIDER, 3, 10**9, 1))
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET and not answer.vote_granted
    assert h.request(3, VoteRequest(CLUSTER, 4, 3, 3, 10**9, 1)).vote_granted


def test_a_vote_from_outside_the_voter_set_with_a_log_no_longer_than_ours_is_refused():
    """Its voter set is no newer than ours: it is not a voter."""
    h = Harness()
    answer = h.request(OUTSIDER, VoteRequest(CLUSTER, 3, OUTSIDER, 0, 0, 1))
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET and not answer.vote_granted
    assert h.request(2, VoteRequest(CLUSTER, 3, 2, 0, 0, 1)).vote_granted


def test_a_vote_from_a_voters_id_with_another_directory_id_is_refused():
    """KIP-853: the voter is (id, directory id); the same id on another disk is not it."""
    h = dynamic_leader()
    epoch = h.epoch
    other_disk = b"\xee" * 16
    request = VoteRequest(CLUSTER, epoch + 1, 2, epoch, 10**9, 1, candidate_directory_id=other_disk)
    answer = h.request(2, request)
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET and not answer.vote_granted
    real = VoteRequest(CLUSTER, epoch + 1, 3, epoch, 10**9, 1, candidate_directory_id=DIR[3])
    assert h.request(3, real).vote_granted


def test_a_begin_quorum_epoch_from_outside_the_voter_set_is_refused():
    h = follower_of_2()
    answer = h.request(OUTSIDER, BeginQuorumEpochRequest(CLUSTER, OUTSIDER, 7, 1))
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET
    assert h.epoch == 3 and h.state.leader_id == 2


def test_an_end_quorum_epoch_from_outside_the_voter_set_is_refused():
    h = Harness()
    answer = h.request(OUTSIDER, EndQuorumEpochRequest(CLUSTER, OUTSIDER, 7, (1,)))
    assert answer.error_code == Errors.INCONSISTENT_VOTER_SET and h.epoch == 0


def test_the_leader_this_replica_follows_is_heard_after_its_removal():
    """A leader removed from the voter set leads until the removal commits, then resigns: its
    messages in its own epoch contradict nothing."""
    h = follower_of_2()
    h.core.history.latest = lambda: VoterSet.static((1, 3))  # the removal, read from its log
    answer = h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 3, (3, 1)))
    assert answer.error_code == Errors.NONE and h.state.leader_resigned


# ---- how it is said ------------------------------------------------------------------------


def test_refusals_are_logged_once_per_peer_and_error_each_interval(caplog):
    h = Harness()
    h.become_leader()
    caplog.set_level(logging.WARNING, logger="raftcore.raft.core")
    for _ in range(100):
        h.request(2, BeginQuorumEpochRequest(CLUSTER, 2, h.epoch, 1))
        h.request(OUTSIDER, VoteRequest(CLUSTER, h.epoch, OUTSIDER, 0, 0, 1))
    lines = refusal_lines(caplog)
    assert len(lines) == 2, lines
    assert "leader 2 of epoch" in lines[0] and "INVALID_REQUEST" in lines[0]
    assert "candidate 9" in lines[1] and "INCONSISTENT_VOTER_SET" in lines[1]
    h.advance(30_000)
    h.request(2, BeginQuorumEpochRequest(CLUSTER, 2, h.epoch, 1))
    lines = refusal_lines(caplog)
    assert len(lines) == 3 and "(and 99 more since)" in lines[2], lines
