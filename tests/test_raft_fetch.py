"""KIP-595 fetch validation on the leader and KIP-279 truncation on the follower."""

import pytest
from raft_harness import CLUSTER, Harness, batch, log_with

from raftcore.error_codes import Errors
from raftcore.errors import TruncationRefusedError
from raftcore.raft import (
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    OffsetAndEpoch,
    RaftInvariantError,
    truncate_to_end_offset,
    validate_offset_and_epoch,
)
from raftcore.raft.states import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    UnattachedState,
)
from raftcore.raft.values import ValidationKind
from raftcore.raft.voters import ReplicaKey
from raftcore.records import iter_batches
from raftcore.testing import InMemoryLog

# ---- the leader: epochs ------------------------------------------------------------------------


def leader_at_epoch(epoch_history=(1, 1, 2, 2, 4), voters=(1, 2, 3)):
    """A leader whose log holds one record per listed epoch, then its LeaderChange."""
    h = Harness(log=log_with(*epoch_history), voters=voters)
    h.become_leader()
    h.flush()
    return h


def test_fetch_with_an_older_epoch_gets_fenced_leader_epoch_and_the_current_leader():
    h = leader_at_epoch()
    response = h.fetch(2, 0, 0, epoch=h.epoch - 1)
    assert response.error_code == Errors.FENCED_LEADER_EPOCH
    assert response.current_leader == LeaderAndEpoch(1, h.epoch) and response.records == b""


def test_fetch_with_a_newer_epoch_gets_unknown_leader_epoch():
    h = leader_at_epoch()
    response = h.fetch(2, 0, 0, epoch=h.epoch + 1)
    assert response.error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_fetch_at_a_follower_gets_not_leader_or_follower_with_the_leader_it_knows():
    h = Harness()
    h.begin_quorum_epoch(3, 5)
    response = h.fetch(2, 0, 0, epoch=5)
    assert response.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader == LeaderAndEpoch(3, 5)


@pytest.mark.parametrize(
    ("offset", "last_epoch", "max_wait"),
    [(-1, 0, 0), (0, -1, 0), (0, 0, -1)],
)
def test_fetch_with_negative_fields_is_an_invalid_request(offset, last_epoch, max_wait):
    h = leader_at_epoch()
    response = h.fetch(2, offset, last_epoch, max_wait_ms=max_wait)
    assert response.error_code == Errors.INVALID_REQUEST


def test_fetch_whose_last_fetched_epoch_is_above_its_current_epoch_is_invalid():
    h = leader_at_epoch()
    assert h.fetch(2, 1, h.epoch + 1).error_code == Errors.INVALID_REQUEST


# ---- the leader: divergence --------------------------------------------------------------------


def test_fetch_with_diverging_epoch_returns_end_offset_of_largest_smaller_epoch():
    # leader log epochs: 1 1 2 2 4 | 5(LeaderChange); the fetcher says its last epoch is 3
    h = leader_at_epoch()
    response = h.fetch(2, 7, 3)
    assert response.diverging_epoch == OffsetAndEpoch(offset=4, epoch=2)
    assert response.records == b"" and response.error_code == Errors.NONE


def test_fetch_past_the_end_of_its_epoch_on_the_leader_is_diverging():
    h = leader_at_epoch()
    response = h.fetch(2, 3, 1)  # epoch 1 ends at 2 on the leader
    assert response.diverging_epoch == OffsetAndEpoch(offset=2, epoch=1)


def test_fetch_on_the_leaders_log_is_valid_and_returns_records_from_the_offset():
    h = leader_at_epoch()
    response = h.fetch(2, 2, 1)
    assert response.diverging_epoch is None
    assert [b.base_offset for b in iter_batches(response.records)] == [2, 3, 4, 5]


def test_a_replicas_fetch_answer_holds_at_most_replica_fetch_response_max_bytes():
    """Whatever a replica asks for, the leader's answer holds at most
    replica.fetch.response.max.bytes; the first batch comes whole even when larger (KIP-74)."""
    log = InMemoryLog()
    for _ in range(20):
        log.append_as_follower(batch(log.end_offset, 1, value=b"v" * 500))
    log.flush()
    h = Harness(log=log, replica_fetch_response_max_bytes=2000)
    h.become_leader()
    h.flush()
    response = h.fetch(2, 0, 0, max_bytes=(1 << 31) - 1)
    sizes = [b.size_in_bytes for b in iter_batches(response.records)]
    assert len(sizes) >= 2 and sum(sizes) <= 2000
    tight = Harness(log=log_with(1, 1), replica_fetch_response_max_bytes=1)
    tight.become_leader()
    tight.flush()
    assert len(list(iter_batches(tight.fetch(2, 0, 0, max_bytes=1 << 30).records))) == 1


def test_validate_offset_and_epoch_follows_kafkas_rules():
    log = log_with(1, 1, 3, 3)
    kinds = {
        (0, 0): ValidationKind.VALID,
        (2, 1): ValidationKind.VALID,
        (3, 1): ValidationKind.DIVERGING,
        (3, 2): ValidationKind.DIVERGING,
        (4, 3): ValidationKind.VALID,
        (5, 3): ValidationKind.DIVERGING,
    }
    for (offset, epoch), kind in kinds.items():
        assert validate_offset_and_epoch(log, offset, epoch).kind is kind, (offset, epoch)
    assert validate_offset_and_epoch(log, 3, 2).offset_and_epoch == OffsetAndEpoch(2, 1)


# ---- the leader: who counts ---------------------------------------------------------------


def test_an_observer_gets_records_but_never_moves_the_high_watermark():
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_leader()
    h.core.append([(b"k", b"v")] * 3, h.now)
    h.flush()
    response = h.fetch(9, 0, 0, is_follower=False)
    assert response.error_code == Errors.NONE and len(response.records) > 0
    h.fetch(9, 4, h.epoch, is_follower=False)
    h.fetch(8, 4, h.epoch, is_follower=False)
    assert h.core.high_watermark is None
    assert h.state.observer_states[ReplicaKey(9)].end_offset == 4


def test_a_fetch_from_a_self_declared_voter_outside_the_voter_set_gets_inconsistent_voter_set():
    # The KIP-595 draft's NOT_FOLLOWER: the records are good, but the sender must step down.
    h = leader_at_epoch()
    response = h.fetch(9, 0, 0, is_follower=True)
    assert response.error_code == Errors.INCONSISTENT_VOTER_SET
    assert len(response.records) > 0
    assert h.core.high_watermark is None


def test_last_caught_up_time_is_kept_per_replica():
    h = leader_at_epoch()
    h.fetch(2, 6, h.epoch)  # caught up now
    first = h.now
    assert h.state.voter_states[2].last_caught_up_ms == first
    h.core.append([(b"k", b"v")], h.now)
    h.advance(100)
    h.fetch(2, 6, h.epoch)  # behind: the end moved to 7
    assert h.state.voter_states[2].last_caught_up_ms == first
    h.advance(100)
    h.fetch(2, 7, h.epoch)  # reached the end it was shown at the last fetch
    assert h.state.voter_states[2].last_caught_up_ms == h.now


# ---- the leader: long poll -----------------------------------------------------------------


def test_a_fetch_with_nothing_to_return_waits_for_records():
    h = leader_at_epoch()
    assert h.fetch(2, 6, h.epoch, max_wait_ms=500, high_watermark=6) is None
    h.core.append([(b"k", b"new")], h.now)
    h.poll()
    [out] = [o for o in h.sent if o.destination == 2 and isinstance(o.message, FetchResponse)]
    assert [b.base_offset for b in iter_batches(out.message.records)] == [6]


def test_a_fetch_with_nothing_to_return_is_answered_empty_after_max_wait():
    h = leader_at_epoch()
    assert h.fetch(2, 6, h.epoch, max_wait_ms=500, high_watermark=6) is None
    h.advance(499)
    assert not [o for o in h.sent if isinstance(o.message, FetchResponse)]
    h.advance(1)
    [out] = [o for o in h.sent if isinstance(o.message, FetchResponse)]
    assert out.message.records == b""


def _fetch_held_when_the_high_watermark_moves(**config):
    """A leader of five; 3 has everything and knows hw 1, so its fetch is held; then 2's
    fetch moves the hw to 2. Returns the harness, with what went out since then."""
    h = Harness(voters=(1, 2, 3, 4, 5), **config)
    h.become_leader()
    h.flush()
    h.fetch(2, 1, h.epoch)
    h.fetch(3, 1, h.epoch)
    assert h.core.high_watermark == 1
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    # 3 has everything and knows hw 1: nothing to say yet
    assert h.fetch(3, 2, h.epoch, max_wait_ms=500, high_watermark=1, correlation_id=7) is None
    h.sent.clear()
    # 1, 2, 3 now have offset 1: the hw moves to 2 (a long poll, as followers send)
    h.fetch(2, 2, h.epoch, max_wait_ms=500, high_watermark=1, correlation_id=8)
    assert h.core.high_watermark == 2
    return h


def _answers_to_3(h):
    return [
        o.message for o in h.sent if o.destination == 3 and isinstance(o.message, FetchResponse)
    ]


def test_a_held_fetch_is_answered_when_the_high_watermark_passes_what_the_follower_knows():
    """KIP-1166 (Fetch v18's HighWatermark), with no linger: the hw alone is news."""
    h = _fetch_held_when_the_high_watermark_moves(high_watermark_linger_ms=0)
    assert [m.high_watermark for m in _answers_to_3(h)] == [2]


def test_a_fetch_whose_only_news_is_the_high_watermark_is_held_for_the_linger():
    """The high watermark alone is worth an answer only once the linger is over (and long
    before the fetch's MaxWaitMs): records arriving within it would have carried it."""
    h = _fetch_held_when_the_high_watermark_moves(high_watermark_linger_ms=5)
    assert _answers_to_3(h) == []
    assert h.deadline <= h.now + 5
    h.advance(4)
    assert _answers_to_3(h) == []
    h.advance(1)
    [answer] = _answers_to_3(h)
    assert answer.high_watermark == 2 and answer.records == b""


def test_records_within_the_linger_carry_the_high_watermark_in_one_answer():
    h = _fetch_held_when_the_high_watermark_moves(high_watermark_linger_ms=5)
    h.advance(2)
    h.core.append([(b"k", b"w")], h.now)
    h.poll()
    [answer] = _answers_to_3(h)
    assert answer.high_watermark == 2
    assert [b.base_offset for b in iter_batches(answer.records)] == [2]
    h.advance(10)
    assert len(_answers_to_3(h)) == 1  # nothing more for the hw: it was told


def test_a_fresh_fetch_that_moves_the_high_watermark_waits_for_the_linger_too():
    """The fetch that moves the hw (its sender has the records, and not the new hw) is
    held like the others, then told."""
    h = _fetch_held_when_the_high_watermark_moves(high_watermark_linger_ms=5)
    answers_to_2 = [
        o for o in h.sent if o.destination == 2 and isinstance(o.message, FetchResponse)
    ]
    assert answers_to_2 == []
    h.advance(5)
    answers_to_2 = [
        o for o in h.sent if o.destination == 2 and isinstance(o.message, FetchResponse)
    ]
    assert [o.message.high_watermark for o in answers_to_2] == [2]


def test_held_fetches_are_answered_not_leader_when_the_leader_steps_down():
    h = leader_at_epoch()
    assert h.fetch(2, 6, h.epoch, max_wait_ms=500, high_watermark=6) is None
    h.begin_quorum_epoch(3, h.epoch + 1)
    [out] = [o for o in h.sent if isinstance(o.message, FetchResponse)]
    assert out.message.error_code == Errors.NOT_LEADER_OR_FOLLOWER


# ---- the follower -----------------------------------------------------------------------


def follower(history=(), leader=2, epoch=5, **kw):
    h = Harness(log=log_with(*history), **kw)
    h.begin_quorum_epoch(leader, epoch)
    return h


def take_fetch(h):
    [out] = h.take(FetchRequest)
    return out


def reply(h, out, *, records=b"", hw=-1, diverging=None, error=Errors.NONE, leader=None):
    leader = leader or LeaderAndEpoch(out.destination, h.epoch)
    h.respond(out, FetchResponse(error, hw, 0, leader, records, diverging))


def test_a_follower_fetches_from_its_end_with_its_last_epoch_after_flushing():
    h = follower(history=(1, 3))
    out = take_fetch(h)
    m = out.message
    assert (
        m.fetch_offset,
        m.last_fetched_epoch,
        m.current_leader_epoch,
        m.replica_id,
        m.is_follower,
        m.cluster_id,
    ) == (2, 3, 5, 1, True, CLUSTER)
    # KAFKA-10533: the fetch offset is an acknowledgement; it waits for the fsync
    assert out.after_flush == 2


def test_a_follower_acknowledging_unflushed_records_fetches_without_waiting_for_the_fsync():
    h = follower(history=(1, 3), acknowledge_unflushed=True)
    out = take_fetch(h)
    assert out.message.fetch_offset == 2
    assert out.after_flush == -1


def test_a_follower_truncates_on_diverging_epoch_and_fetches_again():
    h = follower(history=(1, 1, 3, 3))  # leader has 1 1 2 ...
    reply(h, take_fetch(h), diverging=OffsetAndEpoch(2, 1))
    assert h.log.end_offset == 2
    out = take_fetch(h)
    assert (out.message.fetch_offset, out.message.last_fetched_epoch) == (2, 1)


def test_a_follower_converges_in_one_round_per_divergent_epoch():
    # KIP-279: fast fail-overs left the follower with epochs 2, 3, 4 the leader never had
    # (leader: epochs 1 1 5 5). Each round drops at least one divergent epoch.
    leader_log = log_with(1, 1, 5, 5)
    h = follower(history=(1, 1, 2, 3, 3, 4), leader=2, epoch=6)
    rounds = 0
    while True:
        out = take_fetch(h)
        v = validate_offset_and_epoch(
            leader_log, out.message.fetch_offset, out.message.last_fetched_epoch
        )
        if v.kind is ValidationKind.VALID:
            break
        rounds += 1
        reply(h, out, diverging=v.offset_and_epoch)
    assert h.log.end_offset == 2 and rounds <= 3


def test_truncate_to_end_offset_uses_the_smaller_end_when_both_logs_have_the_epoch():
    log = log_with(1, 1, 1, 1)
    assert truncate_to_end_offset(log, OffsetAndEpoch(2, 1)) == 2
    log = log_with(1, 1)
    assert truncate_to_end_offset(log, OffsetAndEpoch(5, 1)) == 2
    log = log_with(1, 3, 3)  # no epoch 2 here: keep up to the end of epoch 1
    assert truncate_to_end_offset(log, OffsetAndEpoch(4, 2)) == 1
    log = log_with(1, 1, 1)
    assert truncate_to_end_offset(log, OffsetAndEpoch(1, 0)) == 1


def test_a_follower_appends_records_and_its_high_watermark_is_min_of_leaders_and_its_end():
    h = follower()
    reply(h, take_fetch(h), records=batch(0, 5, 3), hw=10)
    assert h.log.end_offset == 3 and h.core.high_watermark == 3


def test_a_follower_told_a_lower_high_watermark_stops():
    # Within an epoch the leader's high watermark only grows: a lower one is a bug somewhere.
    h = follower()
    reply(h, take_fetch(h), records=batch(0, 5, 3), hw=3)
    h.flush()
    with pytest.raises(RaftInvariantError, match="move back"):
        reply(h, take_fetch(h), hw=2)


def test_a_follower_refuses_to_truncate_below_its_high_watermark():
    h = follower()
    reply(h, take_fetch(h), records=batch(0, 5, 3), hw=3)
    h.flush()
    with pytest.raises(TruncationRefusedError, match="to offset 1, below the committed offset 3"):
        reply(h, take_fetch(h), diverging=OffsetAndEpoch(1, 5))
    assert h.log.end_offset == 3


def test_a_follower_truncates_before_it_updates_its_high_watermark():
    # KAFKA-14704: a diverging answer truncates; its high watermark is not applied.
    h = follower(history=(1, 1, 3, 3))
    reply(h, take_fetch(h), diverging=OffsetAndEpoch(2, 1), hw=4)
    assert h.log.end_offset == 2 and h.core.high_watermark is None


def test_a_follower_refuses_records_from_an_epoch_later_than_its_leaders():
    # KAFKA-18723
    h = follower(epoch=5)
    reply(h, take_fetch(h), records=batch(0, 7, 2), hw=2)
    assert h.log.end_offset == 0


def test_a_follower_refuses_corrupt_records_and_keeps_going():
    h = follower()
    data = bytearray(batch(0, 5, 2))
    data[-1] ^= 1
    reply(h, take_fetch(h), records=bytes(data))
    assert h.log.end_offset == 0 and isinstance(h.state, FollowerState)


def test_a_voter_follower_runs_a_pre_vote_when_the_fetch_timeout_expires():
    """KIP-996: Prospective in the same epoch; Candidate only once a majority would vote."""
    h = follower(fetch_timeout_ms=2000)
    h.advance(1999)
    assert isinstance(h.state, FollowerState)
    h.advance(1)
    assert isinstance(h.state, ProspectiveState) and h.epoch == 5
    h.grant_pre_votes(3)
    assert isinstance(h.state, CandidateState) and h.epoch == 6


def test_successful_fetches_keep_a_follower_from_standing():
    h = follower(fetch_timeout_ms=2000)
    for _ in range(5):
        h.advance(1000)
        reply(h, take_fetch(h))
    assert isinstance(h.state, FollowerState)


def test_an_observer_follower_never_stands_for_election():
    h = Harness(node_id=9)
    [out] = h.take(FetchRequest)
    reply(h, out, error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(2, 4))
    assert isinstance(h.state, FollowerState)
    h.advance(30_000)  # no fetch answers at all
    assert isinstance(h.state, FollowerState) and h.epoch == 4


def test_an_observer_whose_leader_went_silent_asks_a_voter_who_leads_now():
    h = Harness(node_id=9, fetch_timeout_ms=2000)
    [out] = h.take(FetchRequest)
    reply(h, out, error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(2, 4))
    h.take(FetchRequest)
    h.advance(2000)  # leader 2 answers nothing for a whole fetch timeout
    asks = [o for o in h.take(FetchRequest) if o.destination != 2]
    assert asks and asks[0].destination in (1, 3) and asks[0].message.max_wait_ms == 0
    reply(h, asks[0], error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(3, 5))
    assert isinstance(h.state, FollowerState) and (h.state.leader, h.epoch) == (3, 5)


def test_an_observer_told_of_a_leader_by_begin_quorum_epoch_follows_it():
    """KIP-853: the sender may count it a voter (added by a record it has not read yet)."""
    h = Harness(node_id=9)
    assert h.begin_quorum_epoch(2, 4).error_code == Errors.NONE
    assert isinstance(h.state, FollowerState) and h.state.leader == 2


def test_a_follower_told_it_is_not_a_voter_keeps_the_records_and_stops_standing():
    h = follower(fetch_timeout_ms=2000)
    reply(h, take_fetch(h), records=batch(0, 5, 2), hw=2, error=Errors.INCONSISTENT_VOTER_SET)
    assert h.log.end_offset == 2
    assert h.core.quorum.is_observer
    h.advance(30_000)
    assert not isinstance(h.state, CandidateState)


def test_a_response_naming_a_newer_leader_moves_the_follower_at_once():
    h = follower(epoch=5)
    reply(h, take_fetch(h), error=Errors.FENCED_LEADER_EPOCH, leader=LeaderAndEpoch(3, 7))
    assert isinstance(h.state, FollowerState) and (h.state.leader, h.epoch) == (3, 7)
    reply(h, take_fetch(h), error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(None, 8))
    assert isinstance(h.state, UnattachedState) and h.epoch == 8


def test_a_late_duplicate_response_is_ignored():
    h = follower()
    out = take_fetch(h)
    reply(h, out, records=batch(0, 5, 2), hw=2)
    reply(h, out, records=batch(0, 5, 2), hw=2)  # the same answer again
    assert h.log.end_offset == 2


def test_end_quorum_epoch_makes_the_first_preferred_successor_stand_at_once():
    h = follower(leader=2, epoch=5, election_backoff_max_ms=1000, fetch_timeout_ms=5000)
    h.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (1, 3)))
    h.advance(0)
    assert isinstance(h.state, ProspectiveState) and h.epoch == 5
    h2 = follower(leader=2, epoch=5, election_backoff_max_ms=1000, fetch_timeout_ms=5000)
    h2.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (3, 1)))
    h2.advance(499)
    assert isinstance(h2.state, FollowerState)  # second in line waits 1000 >> 1 = 500 ms
    h2.advance(1)
    assert isinstance(h2.state, ProspectiveState)


def test_an_observer_without_a_leader_asks_a_voter_and_follows_the_answer():
    h = Harness(node_id=9)
    [out] = h.take(FetchRequest)
    assert out.destination in (1, 2, 3) and out.message.max_wait_ms == 0
    reply(h, out, error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(2, 4))
    assert isinstance(h.state, FollowerState) and h.state.leader == 2


def test_the_in_memory_log_loses_unflushed_data_on_a_crash():
    log = InMemoryLog()
    log.append_as_follower(batch(0, 1, 2))
    log.flush()
    log.append_as_follower(batch(2, 1, 2))
    log.crash()
    assert log.end_offset == 2


def test_a_refused_connection_to_its_leader_changes_no_timer_of_an_observer():
    h = Harness(node_id=9, fetch_timeout_ms=2000, election_timeout_ms=1000)
    [out] = h.take(FetchRequest)
    reply(h, out, error=Errors.NOT_LEADER_OR_FOLLOWER, leader=LeaderAndEpoch(2, 4))
    h.take(FetchRequest)
    h._take(h.core.peer_unreachable(2, h.now))
    h.advance(1000)  # past a voter's shortened wait (<= 200 ms), short of the fetch timeout
    assert isinstance(h.state, FollowerState) and h.state.leader == 2
    assert not [o for o in h.take(FetchRequest) if o.destination != 2]
