"""Protocol-aware recovery (raftcore.raft.damage; FAST'18 "CTRL"): a replica never serves a batch
it cannot vouch for, repairs a damaged batch from the leader's intact copy, in place, and stays
a voter meanwhile; a leader with damage hands over to a healthy voter.
"""

from __future__ import annotations

from raft_harness import CLUSTER, Harness, RecordingListener, batch, log_with
from test_raft_fetch import follower, reply, take_fetch

from raftcore.error_codes import Errors
from raftcore.raft import EndQuorumEpochRequest, FetchRequest, VoteRequest
from raftcore.raft.damage import Damage, read_intact
from raftcore.raft.states import (
    CandidateState,
    LeaderState,
    ProspectiveState,
    ResignedState,
)
from raftcore.records import scan_batches
from raftcore.testing import InMemoryLog


def sound(data) -> bool:  # type: ignore[no-untyped-def]
    scan = scan_batches(bytes(data), check_crc=True)
    return scan.error is None


def committed_leader(voters=(1, 2, 3), **kw) -> Harness:  # type: ignore[no-untyped-def]
    """Node 1 leads with offsets 0..4 (its LeaderChange at 0, then 4 single-record batches),
    every voter caught up, everything committed."""
    h = Harness(1, voters, **kw)
    if len(voters) > 1:
        h.become_leader()
    else:
        h.time_out_election()
    for _ in range(4):
        h.core.append([(None, b"x")], h.now)
    h.flush()
    for v in voters[1:]:
        h.fetch(v, h.core.log.end_offset, h.epoch)
    assert h.core.high_watermark == h.core.log.end_offset == 5
    h.sent.clear()
    return h


def test_read_intact_serves_the_sound_batches_before_a_damaged_one():
    log = log_with(1, 1, 1, 1)
    log.corrupt(2, 5, 3)
    data, damage = read_intact(log, 0, 1 << 20)
    assert scan_batches(bytes(data)).count == 2 and sound(data)
    assert damage is not None and damage.offset == 2 and "CRC" in damage.reason
    data, damage = read_intact(log, 2, 1 << 20)
    assert len(data) == 0 and damage is not None and damage.offset == 2


def test_a_leader_never_serves_a_damaged_batch_to_a_follower_and_hands_over():
    h = committed_leader()
    h.core.log.corrupt(3, 7, 1)
    response = h.fetch(2, 1, h.epoch)
    assert response is not None and response.ok
    assert sound(response.records)
    assert scan_batches(bytes(response.records)).count == 2  # offsets 1 and 2 only
    assert h.core.damage.damaged.offset == 3
    h.poll()  # a healthy voter leads while this one repairs
    assert isinstance(h.state, ResignedState)
    assert h.take(EndQuorumEpochRequest)


def test_a_leader_alone_with_damage_says_so_and_serves_nothing_damaged(caplog):
    h = committed_leader(voters=(1,))
    h.core.log.corrupt(2, 0, 0)
    with caplog.at_level("ERROR"):
        response = h.fetch(7, 2, h.epoch, is_follower=False)
    assert response is not None and len(response.records) == 0
    assert isinstance(h.state, LeaderState)
    assert "no other replica holds a copy" in caplog.text


def damaged_follower(**kw) -> Harness:  # type: ignore[no-untyped-def]
    """Node 1 follows leader 2 in epoch 5 with batches 0..3 of epoch 1, all committed; the
    batch at offset 2 damaged and reported."""
    h = follower(history=(1, 1, 1, 1), **kw)
    reply(h, take_fetch(h), hw=4)
    h.flush()
    in_flight = take_fetch(h)
    h._take(h.core.report_damage(Damage(2, "test"), h.now))
    reply(h, in_flight, hw=4)  # the next request to the leader is the repair fetch
    return h


def leader_copy(offset: int) -> bytes:
    return batch(offset, 1)


def test_a_damaged_follower_fetches_the_batch_again_and_writes_it_in_place():
    h = damaged_follower()
    h.log.corrupt(2, 9, 4)
    out = take_fetch(h)
    assert out.message.repair and out.message.fetch_offset == 2
    assert out.message.last_fetched_epoch == 1
    reply(h, out, records=leader_copy(2), hw=4)
    assert not h.core.damage
    assert sound(h.log.read(0, 1 << 20))
    assert h.core.damage.repaired == 1
    following = take_fetch(h)
    assert not following.message.repair and following.message.fetch_offset == 4


def test_a_copy_that_does_not_fit_is_refused_and_the_log_left_as_it_was():
    h = damaged_follower()
    before = bytes(h.log.read(0, 1 << 20))
    reply(h, take_fetch(h), records=batch(2, 1, n=2), hw=4)  # a batch of another size
    assert h.core.damage and h.core.damage.unrepairable == 1
    assert bytes(h.log.read(0, 1 << 20)) == before


def test_a_damaged_follower_stays_a_voter_votes_but_never_stands():
    h = damaged_follower()
    h.advance(10 * h.config.fetch_timeout_ms)  # no leader answers
    assert not isinstance(h.state, ProspectiveState | CandidateState | LeaderState)
    assert not [o for o in h.sent if isinstance(o.message, VoteRequest)]
    assert h.core.quorum.is_voter
    vote = h.request(3, VoteRequest(CLUSTER, 6, 3, 1, 4, pre_vote=False))
    assert vote.vote_granted


def test_a_repair_fetch_acknowledges_nothing():
    h = committed_leader()
    h.core.append([(None, b"y")], h.now)
    h.flush()
    hw = h.core.high_watermark
    request = FetchRequest(CLUSTER, 2, 5, h.epoch, h.epoch, 0, repair=True, is_follower=True)
    h.deliver(2, request, 77)
    h.deliver(3, FetchRequest(CLUSTER, 3, 1, h.epoch, h.epoch, 0, repair=True), 78)
    assert h.core.high_watermark == hw  # neither repair fetch counts as reaching offset 6
    [answer] = [o.message for o in h.sent if o.correlation_id == 77]
    assert scan_batches(bytes(answer.records)).count == 1


def test_a_repair_fetch_into_a_diverged_tail_is_answered_with_where_to_truncate():
    h = follower(history=(1, 1, 3, 3))  # offsets 2, 3 from epoch 3, never committed
    reply(h, take_fetch(h), hw=2)
    h.flush()
    in_flight = take_fetch(h)
    h._take(h.core.report_damage(Damage(3, "test"), h.now))
    reply(h, in_flight, hw=2)
    out = take_fetch(h)
    assert out.message.repair
    from raftcore.raft.values import OffsetAndEpoch

    reply(h, out, diverging=OffsetAndEpoch(2, 1), hw=2)  # epoch 3 never held by this leader
    assert h.log.end_offset == 2
    assert not h.core.damage  # truncated away with the tail


def test_the_listener_stops_at_a_damaged_batch_and_goes_on_after_its_repair():
    listener = RecordingListener()
    h = follower(history=(1, 1, 1, 1), listener=listener)
    h.log.corrupt(2, 9, 4)
    reply(h, take_fetch(h), hw=4)
    h.flush()
    assert [o for o, _ in listener.committed] == [0, 1]
    assert h.core.damage.damaged.offset == 2
    reply(h, take_fetch(h), hw=4)
    out = take_fetch(h)
    assert out.message.repair
    reply(h, out, records=leader_copy(2), hw=4)
    h.poll()
    assert [o for o, _ in listener.committed] == [0, 1, 2, 3]


def test_the_repaired_log_serves_again_once_it_leads():
    log = InMemoryLog()
    for e in (1, 1, 1):
        log.append_as_follower(batch(log.end_offset, e))
    log.flush()
    log.corrupt(1, 3, 2)
    log.overwrite_batch(batch(1, 1))
    data, damage = read_intact(log, 0, 1 << 20)
    assert damage is None and scan_batches(bytes(data)).count == 3
    assert Errors.NONE == 0


def test_a_repair_fetch_at_the_leaders_log_end_is_answered_with_a_divergence_there():
    # The fetcher's batch there was never committed: a leader holds every committed record.
    h = committed_leader()
    request = FetchRequest(CLUSTER, 2, 5, h.epoch, h.epoch, 0, repair=True, is_follower=True)
    h.deliver(2, request, 77)
    [answer] = [o.message for o in h.sent if o.correlation_id == 77]
    assert answer.diverging_epoch is not None
    assert (answer.diverging_epoch.offset, answer.diverging_epoch.epoch) == (5, h.epoch)


def test_a_damaged_leader_hands_over_only_to_a_voter_heard_from_within_the_fetch_timeout():
    h = committed_leader()
    h.advance(h.core.config.fetch_timeout_ms + 1)  # voters 2 and 3 fetched long ago
    h.fetch(2, 1, h.epoch)  # voter 2 is heard from, but holds nothing past the damage
    h.core.log.corrupt(3, 7, 1)
    h._take(h.core.report_damage(Damage(3, "test"), h.now))
    h.poll()
    assert isinstance(h.state, LeaderState)  # voter 3 may be a lost disk: no handover to it
    assert h.state.transfer is None


def test_a_damaged_control_batch_stops_the_start_naming_the_way_out():
    from raftcore.errors import CorruptRecordError
    from raftcore.raft.voter_history import VoterHistory

    h = committed_leader()
    h.core.log.corrupt(0, 3, 2)  # the LeaderChange batch
    try:
        VoterHistory(h.core.voter_set).load_log(h.core.log, 0)
    except CorruptRecordError as exc:
        assert "voter set cannot be read" in str(exc) and "empty one" in str(exc)
    else:
        raise AssertionError("a damaged control batch was read as sound")


def test_a_late_answer_to_another_fetch_is_no_repair_and_truncates_nothing():
    # Simulation seed 182: the answer to an earlier fetch (batches further on, of a later
    # epoch) arrived while a repair was asked, and a committed tail was truncated.
    h = damaged_follower()
    h.state.high_watermark = None  # as after a restart, before the leader told it again
    out = take_fetch(h)
    assert out.message.repair
    reply(h, out, records=batch(4, 5))
    assert h.log.end_offset == 4  # nothing truncated
    assert h.core.damage and h.core.damage.damaged.offset == 2
    again = take_fetch(h)
    assert again.message.repair and again.message.fetch_offset == 2
