"""KIP-595 elections: timeouts, candidacy, the Vote RPC, backoff, and what a restart keeps."""

import pytest
from raft_harness import CLUSTER, Harness, log_with

from raftcore.error_codes import Errors
from raftcore.raft import ElectionState, QuorumConfig, VoteRequest, VoteResponse
from raftcore.raft.states import (
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)
from raftcore.testing import InMemoryLog, MemoryQuorumStateStore


def vote_request(epoch, candidate, last_epoch=0, last_offset=0, voter=1):
    return VoteRequest(CLUSTER, epoch, candidate, last_epoch, last_offset, voter)


# ---- configuration --------------------------------------------------------------------------


def test_config_uses_kafkas_names_and_defaults():
    cfg = QuorumConfig()
    assert (
        cfg.election_timeout_ms,
        cfg.fetch_timeout_ms,
        cfg.election_backoff_max_ms,
        cfg.request_timeout_ms,
        cfg.retry_backoff_ms,
        cfg.append_linger_ms,
    ) == (1000, 2000, 1000, 2000, 20, 25)
    cfg = QuorumConfig.from_properties(
        {
            "controller.quorum.voters": "1@h:1,2@h:2,3@h:3",
            "controller.quorum.election.timeout.ms": "500",
            "quorum.fetch.timeout.ms": 900,
        }
    )
    assert cfg.voters == {1, 2, 3} and cfg.election_timeout_ms == 500
    assert cfg.fetch_timeout_ms == 900 and cfg.check_quorum_timeout_ms == 1350
    with pytest.raises(ValueError, match="unknown quorum config"):
        QuorumConfig.from_properties({"quorum.election.timeout": 1})
    with pytest.raises(ValueError):
        QuorumConfig(fetch_timeout_ms=-1)


def test_a_request_timeout_no_longer_than_the_fetch_long_poll_is_refused():
    """A Fetch's answer may come as late as the leader's long poll: a request timeout at or
    below it would make a follower of an idle leader give up on every fetch."""
    for timeout in (499, 500):
        refused = rf"request_timeout_ms \({timeout}\) must be greater"
        with pytest.raises(ValueError, match=refused):
            QuorumConfig(request_timeout_ms=timeout, fetch_max_wait_ms=500)
    assert QuorumConfig(request_timeout_ms=501, fetch_max_wait_ms=500).request_timeout_ms == 501


# ---- timeouts and candidacy -------------------------------------------------------------------


def test_election_timeout_is_randomized_in_t_to_2t():
    deadlines = set()
    for seed in range(40):
        h = Harness(seed=seed)
        assert isinstance(h.state, UnattachedState)
        delay = h.state.election_deadline - h.now
        assert 1000 <= delay < 2000
        deadlines.add(delay)
    assert len(deadlines) > 20  # actually random


def test_voter_runs_a_pre_vote_then_stands_when_the_election_timeout_expires():
    """KIP-996: the timeout makes it Prospective in the same epoch; a majority of pre-votes
    makes it Candidate in the next."""
    h = Harness()
    h.advance(999)
    assert isinstance(h.state, UnattachedState)
    h.time_out_election()
    assert isinstance(h.state, ProspectiveState) and h.epoch == 0
    h.grant_pre_votes(2)
    assert isinstance(h.state, CandidateState) and h.epoch == 1


def test_candidate_bumps_the_epoch_votes_for_itself_and_persists_the_vote():
    h = Harness(store=MemoryQuorumStateStore())
    h.become_candidate()
    assert h.store.read() == ElectionState(epoch=1, voted_id=1, voters=frozenset({1, 2, 3}))
    assert h.state.granted == {1}


def test_candidate_asks_every_voter_with_its_last_epoch_and_end_offset():
    h = Harness(log=log_with(1, 1, 2))
    h.become_candidate()
    requests = {o.destination: o.message for o in h.take(VoteRequest)}
    assert set(requests) == {2, 3}
    for voter, req in requests.items():
        assert (
            req.candidate_epoch,
            req.candidate_id,
            req.last_offset_epoch,
            req.last_offset,
            req.voter_id,
            req.cluster_id,
        ) == (3, 1, 2, 3, voter, CLUSTER)


def test_a_vote_request_waits_for_the_log_it_claims_to_be_durable():
    # The request advertises (last epoch, end offset); sent before the fsync, a crash could
    # make the claim false after a voter believed it.
    log = log_with(1, 1)
    from raft_harness import batch

    log.append_as_follower(batch(2, 1, n=3))  # not flushed
    h = Harness(log=log)
    h.become_candidate()
    requests = h.take(VoteRequest)
    assert requests and all(o.message.last_offset == 5 and o.after_flush == 5 for o in requests)


def test_a_majority_of_grants_makes_the_candidate_leader():
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_candidate()
    requests = {o.destination: o for o in h.take(VoteRequest)}
    h.respond(requests[2], VoteResponse(Errors.NONE, -1, 1, True))
    assert isinstance(h.state, CandidateState)  # 2 of 5
    h.respond(requests[4], VoteResponse(Errors.NONE, -1, 1, False))
    assert isinstance(h.state, CandidateState)
    h.respond(requests[3], VoteResponse(Errors.NONE, -1, 1, True))
    assert isinstance(h.state, LeaderState) and h.state.granting_voters == {1, 2, 3}


def test_rejection_by_a_majority_starts_a_randomized_exponential_backoff():
    backoffs = set()
    for seed in range(12):
        h = Harness(election_backoff_max_ms=10_000, seed=seed)
        h.become_candidate()
        lost = h.state
        for out in h.take(VoteRequest):
            h.respond(out, VoteResponse(Errors.NONE, -1, 1, False))
        assert lost.backing_off
        backoffs.add(lost.backoff_deadline - h.now)  # retries=1: 100 ms * random[0, 2)
        h.advance(max(0, int(lost.backoff_deadline - h.now)))
        # then a pre-vote first (KIP-996), in the epoch it lost
        assert isinstance(h.state, ProspectiveState) and h.epoch == 1
        h.grant_pre_votes(2, 3)
        assert isinstance(h.state, CandidateState) and h.epoch == 2 and h.state.retries == 2
    assert backoffs == {0, 100}


def test_election_backoff_is_capped_by_election_backoff_max():
    h = Harness(election_backoff_max_ms=150)
    h.become_candidate()
    for _ in range(8):  # keep losing: the span doubles, the cap holds
        state = h.state
        h.advance(int(state.election_deadline - h.now))
        assert state.backing_off and state.backoff_deadline - h.now <= 150
        h.advance(int(state.backoff_deadline - h.now))
        h.grant_pre_votes(2, 3)
    assert h.state.retries >= 8


def test_election_timeout_of_a_candidate_leads_to_backoff_then_a_pre_vote_then_a_new_epoch():
    h = Harness()
    h.become_candidate()
    h.advance(2000)
    assert h.state.backing_off
    h.advance(1000)
    assert isinstance(h.state, ProspectiveState) and h.epoch == 1
    h.grant_pre_votes(2)
    assert h.epoch == 2


# ---- granting votes ----------------------------------------------------------------------------


def test_a_vote_is_granted_to_a_log_at_least_as_up_to_date_epoch_first():
    h = Harness(log=log_with(1, 1, 2))  # end offset 3, last epoch 2
    assert h.request(2, vote_request(5, 2, last_epoch=3, last_offset=1)).vote_granted  # epoch wins
    h = Harness(log=log_with(1, 1, 2))
    assert h.request(2, vote_request(5, 2, last_epoch=2, last_offset=3)).vote_granted  # equal
    h = Harness(log=log_with(1, 1, 2))
    assert not h.request(2, vote_request(5, 2, last_epoch=2, last_offset=2)).vote_granted
    h = Harness(log=log_with(1, 1, 2))
    assert not h.request(2, vote_request(5, 2, last_epoch=1, last_offset=100)).vote_granted


def test_a_vote_is_persisted_before_the_response_leaves():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    response = h.request(2, vote_request(4, 2))
    assert response.vote_granted and response.leader_epoch == 4
    assert store.read() == ElectionState(epoch=4, voted_id=2, voters=frozenset({1, 2, 3}))
    assert isinstance(h.state, VotedState)


def test_a_vote_is_never_granted_twice_in_one_epoch():
    h = Harness()
    assert h.request(2, vote_request(4, 2)).vote_granted
    assert not h.request(3, vote_request(4, 3)).vote_granted
    assert h.request(2, vote_request(4, 2)).vote_granted  # the same candidate, asked again


def test_a_vote_is_never_granted_twice_in_one_epoch_even_after_a_restart():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    assert h.request(2, vote_request(4, 2)).vote_granted
    restarted = Harness(store=store)
    assert isinstance(restarted.state, VotedState) and restarted.state.voted_id == 2
    assert not restarted.request(3, vote_request(4, 3)).vote_granted
    assert restarted.request(2, vote_request(4, 2)).vote_granted


def test_voting_resets_the_election_timer():
    h = Harness(seed=3)
    h.advance(900)
    h.request(2, vote_request(4, 2))
    assert h.state.election_deadline - h.now >= 1000


def test_a_higher_epoch_vote_request_moves_to_that_epoch_before_deciding():
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=1))  # the log's replica had a quorum-state
    h = Harness(log=log_with(1, 3), store=store)
    response = h.request(2, vote_request(7, 2, last_epoch=1, last_offset=1))  # behind
    assert not response.vote_granted and response.leader_epoch == 7
    assert isinstance(h.state, UnattachedState) and h.epoch == 7
    assert store.read().epoch == 7


def test_a_vote_request_from_an_older_epoch_is_fenced():
    h = Harness()
    h.request(2, vote_request(5, 2))
    response = h.request(3, vote_request(4, 3))
    assert response.error_code == Errors.FENCED_LEADER_EPOCH and response.leader_epoch == 5


def test_a_vote_request_whose_last_epoch_is_not_below_its_epoch_is_invalid():
    h = Harness()
    assert h.request(2, vote_request(3, 2, last_epoch=3)).error_code == Errors.INVALID_REQUEST
    assert h.request(2, vote_request(3, 2, last_offset=-1)).error_code == Errors.INVALID_REQUEST


def test_a_vote_request_for_another_replica_is_refused_with_invalid_voter_key():
    h = Harness()
    response = h.request(2, vote_request(3, 2, voter=3))
    assert response.error_code == Errors.INVALID_VOTER_KEY and not response.vote_granted


def test_a_replica_answers_its_voters_whether_or_not_it_counts_itself_one():
    """KIP-853: a voter just added may not have read the record that added it (it may even
    think it an observer of the static voter set): it answers a candidate of its voter set."""
    observer = Harness(node_id=9)
    assert observer.request(1, vote_request(3, 1, voter=9)).error_code == Errors.NONE


def test_a_replica_answers_a_candidate_its_own_voter_set_does_not_know():
    """KIP-853: a candidate just added is not in the voter set of a replica that has not read
    the record that added it; a replica without a live leader answers it all the same when the
    candidate's log is ahead of its own (it holds records this replica has not read)."""
    h = Harness()
    answer = h.request(9, vote_request(3, 9, last_epoch=1, last_offset=5))
    assert answer.error_code == Errors.NONE and answer.vote_granted


def test_an_epoch_that_could_not_be_raised_again_is_an_invalid_request():
    h = Harness()
    answer = h.request(2, vote_request((1 << 31) - 1, 2))
    assert answer.error_code == Errors.INVALID_REQUEST and h.epoch == 0


def test_candidates_leaders_followers_and_resigned_replicas_never_grant():
    h = Harness()
    h.become_candidate()
    assert not h.request(2, vote_request(1, 2)).vote_granted
    h = Harness()
    h.become_leader()
    assert not h.request(2, vote_request(1, 2)).vote_granted
    h = Harness()
    h.begin_quorum_epoch(2, 3)
    assert isinstance(h.state, FollowerState)
    assert not h.request(3, vote_request(3, 3, last_epoch=0)).vote_granted


@pytest.mark.parametrize("rpc", ["vote", "fetch"])
def test_a_raft_request_from_another_cluster_is_refused(rpc):
    h = Harness()
    if rpc == "vote":
        response = h.request(2, VoteRequest("other", 3, 2, 0, 0, 1))
        assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID and not response.vote_granted
    else:
        from raftcore.raft import FetchRequest

        h.become_leader()
        response = h.request(2, FetchRequest("other", 2, 0, 0, h.epoch, 0))
        assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID


# ---- what a restart keeps ----------------------------------------------------------------


def test_a_restarted_former_leader_comes_back_resigned_never_leader():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.become_leader()
    restarted = Harness(store=store, log=h.log)
    assert isinstance(restarted.state, ResignedState) and restarted.epoch == h.epoch
    # it can never vote in that epoch either
    assert not restarted.request(2, vote_request(h.epoch, 2)).vote_granted


def test_a_restart_after_voting_for_itself_comes_back_candidate_in_that_epoch():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.become_candidate()
    restarted = Harness(store=store)
    assert isinstance(restarted.state, CandidateState) and restarted.epoch == 1


def test_a_restart_knowing_the_leader_comes_back_follower():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.begin_quorum_epoch(3, 6)
    restarted = Harness(store=store)
    assert isinstance(restarted.state, FollowerState) and restarted.state.leader == 3


def test_a_stored_epoch_behind_the_logs_epoch_starts_unattached_at_the_logs_epoch():
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=2, voters=frozenset({1, 2, 3})))
    h = Harness(store=store, log=log_with(1, 4))
    assert isinstance(h.state, UnattachedState) and h.epoch == 4
    assert store.read().epoch == 4


def test_a_single_voter_becomes_leader_at_once():
    h = Harness(voters=(1,))
    h.time_out_election()
    assert isinstance(h.state, LeaderState) and h.epoch == 1


def test_an_observer_never_becomes_a_candidate():
    h = Harness(node_id=9)
    h.advance(60_000)
    assert isinstance(h.state, UnattachedState) and h.epoch == 0
    assert not h.take(VoteRequest)


def test_an_empty_log_reports_epoch_zero_and_offset_zero():
    log = InMemoryLog()
    assert (log.last_fetched_epoch, log.end_offset) == (0, 0)


def test_a_refused_connection_to_the_leader_starts_the_election_within_a_fifth_of_the_timeout():
    h = Harness(node_id=2)
    h.begin_quorum_epoch(leader=1, epoch=5)
    assert isinstance(h.state, FollowerState)
    h._take(h.core.peer_unreachable(1, h.now))
    h.advance(h.config.election_timeout_ms // 5)
    assert isinstance(h.state, ProspectiveState) and h.epoch == 5
    h.grant_pre_votes(3)
    assert isinstance(h.state, CandidateState)
    assert h.epoch == 6


def test_a_refused_connection_to_another_voter_changes_no_timer():
    h = Harness(node_id=2)
    h.begin_quorum_epoch(leader=1, epoch=5)
    h._take(h.core.peer_unreachable(3, h.now))
    h.advance(h.config.fetch_timeout_ms - 1)
    assert isinstance(h.state, FollowerState)
    h.advance(1)
    assert isinstance(h.state, ProspectiveState)
