"""Pre-vote (KIP-996; Kafka's KafkaRaftClientPreVoteTest, KAFKA-17641/17642), rule by rule.

A voter whose fetch or election timeout expires becomes Prospective in the same epoch and asks
the voters, in that epoch, whether they would vote for it. Only a majority of grants raises
the epoch; a replica cut off from the others therefore keeps its epoch and cannot force an
election when it comes back.
"""

import logging

from raft_harness import CLUSTER, Harness, log_with

from raftcore.error_codes import Errors
from raftcore.raft import (
    BeginQuorumEpochRequest,
    ElectionState,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    VoteRequest,
    VoteResponse,
)
from raftcore.raft.states import (
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)
from raftcore.testing import MemoryQuorumStateStore

VOTERS = frozenset({1, 2, 3})


def pre_vote(epoch, candidate, last_epoch=0, last_offset=0, voter=1):
    return VoteRequest(CLUSTER, epoch, candidate, last_epoch, last_offset, voter, pre_vote=True)


def follower(leader=2, epoch=5, **kw):
    h = Harness(**kw)
    h.begin_quorum_epoch(leader, epoch)
    return h


def fetch_once(h):
    """One successful fetch from the leader."""
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(out.destination, h.epoch)))


# ---- the Prospective: asking first ---------------------------------------------------------


def test_a_follower_that_loses_its_leader_says_which_leader_at_info(caplog):
    """A hung or partitioned leader refuses nothing, so no connection warning names it; the
    node's log at its default level said only 'leader is now unknown'."""
    h = follower()
    caplog.set_level(logging.INFO, logger="raftcore.raft")
    h.advance(h.config.fetch_timeout_ms)
    assert isinstance(h.state, ProspectiveState)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert f"no fetch response from leader 2 within {h.config.fetch_timeout_ms} ms" in "".join(
        lines
    ), lines


def test_a_follower_cut_off_from_a_leader_the_others_follow_says_so_every_30_s_not_each_time(
    caplog,
):
    """Its pre-votes are rejected (the others still hear the leader), it follows the same
    leader again and times out again: one INFO line, then one per 30 s."""
    h = follower(request_timeout_ms=200, fetch_max_wait_ms=100)
    caplog.set_level(logging.INFO, logger="raftcore.raft")
    for _ in range(25):  # 25 rounds of about 2.2 s
        h.advance(h.config.fetch_timeout_ms)
        assert isinstance(h.state, ProspectiveState)
        h.grant_pre_votes(2, 3, granted=False)
        assert isinstance(h.state, FollowerState) and h.state.leader == 2
        h.advance(200)
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.INFO and "no fetch response from leader 2" in r.getMessage()
    ]
    assert len(lines) == 2, lines  # at the start and once 30 s later


def test_a_follower_whose_fetch_times_out_asks_for_pre_votes_in_its_own_epoch():
    """Kafka's buildVoteRequest sends quorum.epoch() for a pre-vote: the epoch is not raised
    to ask, and nothing is written."""
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=3))  # the log's replica had a quorum-state
    h = follower(store=store, log=log_with(1, 3))
    stored = store.read()
    h.advance(h.config.fetch_timeout_ms)
    assert isinstance(h.state, ProspectiveState) and h.epoch == 5 and h.state.leader == 2
    requests = {o.destination: o.message for o in h.pre_votes()}
    assert set(requests) == {2, 3}
    for voter, req in requests.items():
        assert (req.candidate_epoch, req.candidate_id, req.last_offset_epoch, req.last_offset) == (
            5,
            1,
            3,
            2,
        )
        assert req.pre_vote and req.voter_id == voter
    assert store.read() == stored


def test_an_isolated_follower_that_times_out_never_raises_its_epoch():
    """No answers at all: Prospective, back to Follower of the same leader when the election
    times out, Prospective again after the next fetch timeout -- epoch 5 throughout."""
    h = follower()
    for _ in range(10):
        h.advance(h.config.fetch_timeout_ms)
        assert isinstance(h.state, ProspectiveState)
        h.sent.clear()
        h.time_out_election()
        assert isinstance(h.state, FollowerState) and h.state.leader == 2
        assert h.epoch == 5
        h.sent.clear()


def test_an_unattached_voter_that_times_out_asks_first_and_keeps_its_epoch():
    h = Harness()
    h.time_out_election()
    assert isinstance(h.state, ProspectiveState) and h.epoch == 0
    h.time_out_election()  # nobody answers
    assert h.epoch == 0 and isinstance(h.state, (UnattachedState, ProspectiveState))


def test_a_majority_of_pre_vote_grants_makes_it_candidate_in_the_next_epoch():
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_prospective()
    outs = {o.destination: o for o in h.pre_votes()}
    h.respond(outs[2], VoteResponse(Errors.NONE, -1, 0, True))
    assert isinstance(h.state, ProspectiveState)
    h.respond(outs[3], VoteResponse(Errors.NONE, -1, 0, True))
    assert isinstance(h.state, CandidateState) and h.epoch == 1
    # the real election follows: Vote requests without PreVote, in the new epoch
    votes = h.take(VoteRequest)
    assert votes and all(not o.message.pre_vote and o.message.candidate_epoch == 1 for o in votes)


def test_a_majority_of_rejections_sends_a_former_follower_back_to_its_leader():
    h = follower()
    h.advance(h.config.fetch_timeout_ms)
    for out in h.pre_votes():
        h.respond(out, VoteResponse(Errors.NONE, 2, 5, False))
    assert isinstance(h.state, FollowerState) and h.state.leader == 2 and h.epoch == 5


def test_a_majority_of_rejections_leaves_an_unattached_voter_unattached_in_its_epoch():
    h = Harness()
    h.request(2, VoteRequest(CLUSTER, 4, 2, 0, 0, 1))  # learns epoch 4, votes for 2
    h.request(3, VoteRequest(CLUSTER, 5, 3, 0, 0, 1))  # epoch 5, votes for 3
    assert isinstance(h.state, VotedState) and h.epoch == 5
    h.time_out_election()
    assert isinstance(h.state, ProspectiveState) and h.state.voted_id == 3
    for out in h.pre_votes():
        h.respond(out, VoteResponse(Errors.NONE, -1, 5, False))
    # back to what it knew: its vote stands, epoch unchanged
    assert isinstance(h.state, VotedState) and h.state.voted_id == 3 and h.epoch == 5


def test_a_prospective_whose_election_times_out_goes_back_without_raising_the_epoch():
    h = Harness()
    h.become_prospective()
    h.advance(int(h.state.election_deadline - h.now) - 1)
    assert isinstance(h.state, ProspectiveState)
    h.advance(1)
    # Unattached with its election timer spent: a new pre-vote round at once, same epoch
    assert isinstance(h.state, ProspectiveState) and h.epoch == 0
    assert h.pre_votes()


def test_a_prospective_that_hears_of_a_leader_follows_it():
    """KAFKA-17642 (testProspectiveReceivesBeginQuorumRequest): a leader of its epoch found
    while asking ends the pre-vote."""
    h = Harness()
    h.request(2, VoteRequest(CLUSTER, 4, 2, 0, 0, 1))
    h.time_out_election()
    assert isinstance(h.state, ProspectiveState) and h.epoch == 4
    h.begin_quorum_epoch(leader=2, epoch=4)
    assert isinstance(h.state, FollowerState) and h.state.leader == 2 and h.epoch == 4


def test_a_prospective_answered_with_a_newer_leader_follows_it():
    h = follower()
    h.advance(h.config.fetch_timeout_ms)
    [out, *_] = h.pre_votes()
    h.respond(out, VoteResponse(Errors.FENCED_LEADER_EPOCH, 3, 6, False))
    assert isinstance(h.state, FollowerState) and h.state.leader == 3 and h.epoch == 6


def test_a_prospective_whose_leader_announces_itself_follows_it_again():
    """raftcore: BeginQuorumEpoch from the leader it gave up on, in its epoch, ends the
    pre-vote at once (Kafka waits for the election timeout or the rejections)."""
    h = follower()
    h.advance(h.config.fetch_timeout_ms)
    assert isinstance(h.state, ProspectiveState)
    h.begin_quorum_epoch(leader=2, epoch=5)
    assert isinstance(h.state, FollowerState) and h.state.leader == 2 and h.epoch == 5
    assert h.take(FetchRequest)


def test_a_voter_that_does_not_speak_pre_vote_sends_the_prospective_to_candidate_at_once():
    """Kafka's handleVoteResponse: UNSUPPORTED_VERSION while Prospective -> Candidate."""
    h = Harness()
    h.become_prospective()
    [out, *_] = h.pre_votes()
    h.respond(out, VoteResponse(Errors.UNSUPPORTED_VERSION, -1, -1, False))
    assert isinstance(h.state, CandidateState) and h.epoch == 1


def test_late_pre_vote_answers_are_not_counted_as_votes():
    """Requests are reset on the way to Candidate (Kafka resets its connections), so a
    pre-vote grant arriving late cannot elect it."""
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_prospective()
    outs = {o.destination: o for o in h.pre_votes()}
    h.respond(outs[2], VoteResponse(Errors.NONE, -1, 0, True))
    h.respond(outs[3], VoteResponse(Errors.NONE, -1, 0, True))
    assert isinstance(h.state, CandidateState) and h.epoch == 1
    h.respond(outs[4], VoteResponse(Errors.NONE, -1, 1, True))
    h.respond(outs[5], VoteResponse(Errors.NONE, -1, 1, True))
    assert isinstance(h.state, CandidateState) and h.state.granted == {1}


def test_a_lost_election_backs_off_then_asks_again_in_the_epoch_it_lost():
    h = Harness()
    h.become_candidate()
    for out in h.take(VoteRequest):
        h.respond(out, VoteResponse(Errors.NONE, -1, 1, False))
    h.advance(int(h.state.backoff_deadline - h.now))
    assert isinstance(h.state, ProspectiveState) and h.epoch == 1


def test_a_restart_during_a_pre_vote_comes_back_as_the_state_before_it():
    store = MemoryQuorumStateStore()
    h = follower(store=store)
    h.advance(h.config.fetch_timeout_ms)
    assert isinstance(h.state, ProspectiveState)
    restarted = Harness(store=store, log=h.log)
    assert isinstance(restarted.state, FollowerState) and restarted.epoch == 5


def test_a_single_voter_wins_its_own_pre_vote_and_leads():
    h = Harness(voters=(1,))
    h.time_out_election()
    assert isinstance(h.state, LeaderState) and h.epoch == 1


def test_a_resigned_leader_leaves_by_a_new_epoch_then_asks_first():
    """KIP-996: Resigned never runs a pre-vote in the epoch it led; its election timeout
    makes it Unattached in epoch + 1, and it asks before standing in epoch + 2."""
    h = Harness()
    h.become_leader()
    h._take(h.core.resign(h.now))
    assert isinstance(h.state, ResignedState) and h.epoch == 1
    h.time_out_election()
    assert isinstance(h.state, ProspectiveState) and h.epoch == 2
    assert all(o.message.candidate_epoch == 2 for o in h.pre_votes())


# ---- the voter: granting pre-votes -------------------------------------------------------------


def test_a_pre_vote_is_granted_to_an_up_to_date_log_and_changes_nothing():
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=1))  # the log's replica had a quorum-state
    h = Harness(store=store, log=log_with(1, 1, 2))
    h.request(3, VoteRequest(CLUSTER, 3, 3, 1, 1, 1))  # adopt epoch 3, refuse (log behind)
    before = store.read()
    assert h.request(2, pre_vote(3, 2, last_epoch=2, last_offset=3)).vote_granted
    assert h.request(3, pre_vote(3, 3, last_epoch=2, last_offset=5)).vote_granted  # several
    assert isinstance(h.state, UnattachedState) and store.read() == before
    # and the real vote of the epoch is still free
    assert h.request(3, VoteRequest(CLUSTER, 3, 3, 2, 5, 1)).vote_granted


def test_a_pre_vote_is_refused_to_a_log_behind_ours_epoch_first():
    h = Harness(log=log_with(1, 1, 2))
    assert not h.request(2, pre_vote(2, 2, last_epoch=2, last_offset=2)).vote_granted
    assert not h.request(2, pre_vote(2, 2, last_epoch=1, last_offset=100)).vote_granted


def test_a_follower_that_has_fetched_from_its_leader_refuses_pre_votes():
    """KAFKA-17641/17642 (Vanlightly's ping-pong): a replica that still has a live leader does
    not help another replica depose it."""
    h = follower()
    assert h.request(3, pre_vote(5, 3)).vote_granted  # not fetched yet in this epoch
    fetch_once(h)
    response = h.request(3, pre_vote(5, 3))
    assert not response.vote_granted and response.leader_id == 2
    assert isinstance(h.state, FollowerState) and h.epoch == 5


def test_a_successor_refused_by_a_voter_still_following_the_resigned_leader_asks_it_again():
    """A resigning leader's EndQuorumEpoch reaches its first successor before the other
    follower; that follower refuses the pre-vote naming the leader that resigned. The
    successor asks it again after the retry backoff instead of waiting out an election
    timeout (the full-disk hand-over: the resigned leader has stopped and answers nothing)."""
    h = follower(leader=2, epoch=5)
    fetch_once(h)
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (1, 3)))
    resigned_at = h.now
    h.poll()
    assert isinstance(h.state, ProspectiveState) and h.epoch == 5
    outs = {o.destination: o for o in h.pre_votes()}
    h.respond(outs[3], VoteResponse(Errors.NONE, 2, 5, False))  # 3 has not heard yet
    assert isinstance(h.state, ProspectiveState) and 3 not in h.state.rejected
    assert not [o for o in h.pre_votes() if o.destination == 3]  # not at once: backed off
    h.advance(h.config.retry_backoff_ms)
    [again] = [o for o in h.pre_votes() if o.destination == 3]
    h.respond(again, VoteResponse(Errors.NONE, -1, 5, True))  # its EndQuorumEpoch arrived
    assert isinstance(h.state, CandidateState) and h.epoch == 6
    assert h.now - resigned_at < h.config.election_timeout_ms // 2


def test_a_second_refusal_naming_the_resigned_leader_counts_as_a_rejection():
    """Asked again once only: the refusal may be for a log behind the voter's own."""
    h = follower(leader=2, epoch=5)
    fetch_once(h)
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (1, 3)))
    h.poll()
    [out] = [o for o in h.pre_votes() if o.destination == 3]
    h.respond(out, VoteResponse(Errors.NONE, 2, 5, False))
    h.advance(h.config.retry_backoff_ms)
    [again] = [o for o in h.pre_votes() if o.destination == 3]
    h.respond(again, VoteResponse(Errors.NONE, 2, 5, False))
    assert 3 in h.state.rejected


def test_a_fetch_answered_before_the_leader_resigned_does_not_put_the_election_off():
    """A held fetch is answered as the leader resigns; arriving after its EndQuorumEpoch,
    it must not reset the fetch timeout that the EndQuorumEpoch shortened by rank."""
    h = follower(leader=2, epoch=5, fetch_timeout_ms=3000, election_backoff_max_ms=100)
    [held] = h.take(FetchRequest)
    h.respond(held, FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(2, 5)))
    [late] = h.take(FetchRequest)
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (3, 1)))  # second: waits 100 ms
    h.respond(late, FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(2, 5)))
    h.advance(100)
    assert isinstance(h.state, ProspectiveState)


def test_a_pre_vote_refused_by_the_resigned_leader_itself_counts_as_a_rejection():
    """The resigned leader knows it resigned: its refusal (our log is behind its own) is
    final, and is not asked again."""
    h = follower(leader=2, epoch=5)
    fetch_once(h)
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (1, 3)))
    h.poll()
    outs = {o.destination: o for o in h.pre_votes()}
    h.respond(outs[2], VoteResponse(Errors.NONE, 2, 5, False))
    assert isinstance(h.state, ProspectiveState) and 2 in h.state.rejected
    h.advance(h.config.retry_backoff_ms)
    assert not [o for o in h.pre_votes() if o.destination == 2]


def test_a_pre_vote_refused_naming_a_leader_that_did_not_resign_counts_as_a_rejection():
    h = follower(leader=2, epoch=5)
    h.advance(h.config.fetch_timeout_ms)  # timed out: its leader never said it resigned
    assert isinstance(h.state, ProspectiveState)
    for out in h.pre_votes():
        h.respond(out, VoteResponse(Errors.NONE, 2, 5, False))
    assert isinstance(h.state, FollowerState) and h.state.leader == 2


def test_a_follower_told_that_its_leader_resigned_grants_pre_votes_again():
    """Kafka PR #23168 (KAFKA-20895, open): after EndQuorumEpoch from its leader the
    successors' pre-votes must be able to win in a quorum of five."""
    h = follower(voters=(1, 2, 3, 4, 5), fetch_timeout_ms=10_000, election_backoff_max_ms=1000)
    fetch_once(h)
    assert not h.request(3, pre_vote(5, 3)).vote_granted
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (3, 1, 4, 5)))
    assert isinstance(h.state, FollowerState)
    assert h.request(3, pre_vote(5, 3)).vote_granted


def test_the_leader_refuses_every_pre_vote():
    h = Harness()
    h.become_leader()
    response = h.request(2, pre_vote(1, 2, last_epoch=1, last_offset=100))
    assert not response.vote_granted and response.leader_id == 1
    assert isinstance(h.state, LeaderState)


def test_a_candidate_grants_pre_votes_but_keeps_its_own_vote():
    h = Harness()
    h.become_candidate()
    assert h.request(2, pre_vote(1, 2)).vote_granted
    assert not h.request(2, VoteRequest(CLUSTER, 1, 2, 0, 0, 1)).vote_granted
    assert isinstance(h.state, CandidateState)


def test_a_resigned_leader_grants_pre_votes_to_up_to_date_logs():
    h = Harness()
    h.become_leader()
    h._take(h.core.resign(h.now))
    end = h.log.end_offset
    assert h.request(2, pre_vote(1, 2, last_epoch=1, last_offset=end)).vote_granted
    assert not h.request(2, pre_vote(1, 2, last_epoch=0, last_offset=0)).vote_granted


def test_a_voter_that_voted_grants_pre_votes_but_never_a_second_vote():
    h = Harness()
    assert h.request(2, VoteRequest(CLUSTER, 4, 2, 0, 0, 1)).vote_granted
    assert h.request(3, pre_vote(4, 3)).vote_granted
    assert not h.request(3, VoteRequest(CLUSTER, 4, 3, 0, 0, 1)).vote_granted


def test_a_prospective_grants_a_real_vote_durably_and_stops_asking():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.become_prospective()
    assert h.request(2, VoteRequest(CLUSTER, 0 + 1, 2, 0, 0, 1)).vote_granted  # epoch 1
    assert isinstance(h.state, VotedState) and h.epoch == 1
    assert store.read() == ElectionState(epoch=1, voted_id=2, voters=VOTERS)


def test_a_pre_vote_in_a_higher_epoch_moves_the_voter_to_that_epoch_first():
    h = follower()
    response = h.request(3, pre_vote(6, 3))
    assert response.vote_granted and response.leader_epoch == 6
    assert isinstance(h.state, UnattachedState) and h.epoch == 6


def test_a_pre_vote_from_an_older_epoch_is_fenced():
    h = follower()
    response = h.request(3, pre_vote(4, 3))
    assert response.error_code == Errors.FENCED_LEADER_EPOCH and response.leader_epoch == 5
    assert not response.vote_granted


def test_a_pre_vote_may_end_its_log_in_the_epoch_it_asks_in_but_not_past_it():
    """Kafka's isIllegalEpoch: lastEpoch > replicaEpoch for a pre-vote, >= for a vote."""
    h = follower(log=log_with(1, 5))
    assert h.request(3, pre_vote(5, 3, last_epoch=5, last_offset=2)).error_code == Errors.NONE
    bad = h.request(3, pre_vote(5, 3, last_epoch=6, last_offset=2))
    assert bad.error_code == Errors.INVALID_REQUEST
    real = h.request(3, VoteRequest(CLUSTER, 5, 3, 5, 2, 1))
    assert real.error_code == Errors.INVALID_REQUEST


def test_begin_quorum_epoch_still_works_for_the_leader_of_a_prospective():
    h = follower()
    h.advance(h.config.fetch_timeout_ms)
    response = h.request(2, BeginQuorumEpochRequest(CLUSTER, 2, 5, 1))
    assert response.error_code == Errors.NONE
