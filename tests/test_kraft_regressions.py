"""Regression tests for bugs Kafka's KRaft had to fix (KRAFT.md section 7), where the rule is
not already pinned by a test elsewhere. docs/raft.md maps every listed bug to its test."""

from raft_harness import Harness, batch, log_with

from raftcore.error_codes import Errors
from raftcore.raft import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    OffsetAndEpoch,
)
from raftcore.raft.states import FollowerState
from raftcore.testing import InMemoryLog


def test_kafka_13884_an_observer_also_flushes_before_it_acknowledges():
    h = Harness(node_id=9)
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, -1, 0, LeaderAndEpoch(2, 4)))
    [fetch] = h.take(FetchRequest, destination=2)
    h.respond(fetch, FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(2, 4), batch(0, 4, 2)))
    [next_fetch] = h.take(FetchRequest, destination=2)
    assert next_fetch.message.fetch_offset == 2 and next_fetch.after_flush == 2


def test_kafka_10706_truncation_to_the_end_still_cleans_the_epoch_cache():
    # A former leader recorded its epoch at its end offset but wrote nothing in it; the new
    # leader's DivergingEpoch points exactly at that end. The empty epoch must go, or the
    # follower reports it forever as its last epoch and never converges.
    log = log_with(1, 1)
    log.initialize_leader_epoch(3)  # epoch 3 starts at 2, no records
    h = Harness(log=log)
    h.begin_quorum_epoch(2, 4)
    [out] = h.take(FetchRequest)
    assert out.message.last_fetched_epoch == 3
    h.respond(
        out,
        FetchResponse(
            Errors.NONE, -1, 0, LeaderAndEpoch(2, 4), diverging_epoch=OffsetAndEpoch(2, 1)
        ),
    )
    assert log.epoch_entries() == [(1, 0)]
    [out] = h.take(FetchRequest)
    assert (out.message.fetch_offset, out.message.last_fetched_epoch) == (2, 1)


def test_kafka_16529_a_replica_never_accepts_a_second_leader_for_an_epoch():
    """Kafka throws there; a peer's message is input, so it is refused (INVALID_REQUEST) and
    the replica goes on following the leader it knows."""
    h = Harness()
    h.begin_quorum_epoch(2, 5)
    answer = h.request(3, BeginQuorumEpochRequest("test-cluster", 3, 5, 1))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert isinstance(h.state, FollowerState) and h.state.leader == 2


def test_a_message_naming_this_replica_leader_when_it_is_not_is_ignored():
    """Kafka throws there; here the answer is a peer's and is counted a failed request, the
    replica unchanged. (On a replica the voter set names by its own directory id; under a
    static voter set, or one that names another directory under this id, it is another
    replica's leadership: a wiped or replaced disk, see test_raft_reconfig.)"""
    from test_raft_reconfig import DIR, dynamic_leader

    leader = dynamic_leader()  # node 1's log: the voter set names 2 by DIR[2]
    h = Harness(2, (1, 2, 3), log=leader.log, directory_id=DIR[2])
    h.begin_quorum_epoch(1, 5)
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, -1, 0, LeaderAndEpoch(2, 6)))
    assert (h.epoch, h.state.leader_id) == (5, 1) and h.core.quorum.is_voter


def test_an_invalid_request_answer_is_a_failed_request_not_a_local_bug():
    """Kafka treats it as fatal; it is a peer's verdict, and a peer may be wrong or lying."""
    h = Harness()
    h.begin_quorum_epoch(2, 5)
    [out] = h.take(FetchRequest)
    h.respond(out, FetchResponse(Errors.INVALID_REQUEST, -1, 0, LeaderAndEpoch(2, 5)))
    assert (h.epoch, h.state.leader_id) == (5, 2)


def test_epoch_churn_an_observer_that_cannot_reach_the_voters_keeps_its_epoch():
    # The bitnami/charts#20403 symptom: a misconfigured observer bumped epochs forever.
    h = Harness(node_id=9)
    for _ in range(50):
        h.advance(1000)
    assert h.epoch == 0


def test_a_candidate_that_cannot_win_does_not_hold_back_the_others():
    # The election timer keeps running when a higher epoch arrives (Kafka keeps the remaining
    # time): a candidate whose log is behind cannot keep resetting everyone's timeout.
    h = Harness(log=log_with(1, 1, 1))
    start = h.state.election_deadline
    from raftcore.raft import VoteRequest

    for epoch in range(1, 6):
        h.advance(100)
        assert not h.request(2, VoteRequest("test-cluster", epoch, 2, 0, 0, 1)).vote_granted
    assert h.state.election_deadline == start


def test_the_in_memory_and_native_logs_share_one_validation_rule(tmp_path):
    from raftcore.log import SegmentedLog
    from raftcore.raft import validate_offset_and_epoch

    native = SegmentedLog.open(tmp_path)
    memory = InMemoryLog()
    for log in (native, memory):
        for epoch in (1, 1, 3):
            log.append_as_follower(batch(log.end_offset, epoch))
    for offset in range(5):
        for epoch in range(5):
            assert validate_offset_and_epoch(native, offset, epoch) == validate_offset_and_epoch(
                memory, offset, epoch
            ), (offset, epoch)
    native.close()
