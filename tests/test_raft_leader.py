"""KIP-595 leadership: the epoch's first record, the high watermark, BeginQuorumEpoch, check
quorum, and graceful resignation with EndQuorumEpoch."""

import logging

from raft_harness import CLUSTER, Harness, log_with

from raftcore.error_codes import Errors
from raftcore.raft import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    NotLeaderError,
)
from raftcore.raft.control_records import LeaderChangeMessage
from raftcore.raft.states import LeaderState, ResignedState
from raftcore.records import ControlRecordType, iter_batches
from raftcore.testing import MemoryQuorumStateStore


def test_a_new_leader_writes_a_leader_change_record_of_type_2_first_in_its_epoch():
    h = Harness(log=log_with(1, 1))
    state = h.become_leader()
    assert state.epoch_start_offset == 2
    [batch] = list(iter_batches(h.log.read(2)))
    assert batch.is_control and batch.control_type == ControlRecordType.LEADER_CHANGE == 2
    assert batch.partition_leader_epoch == h.epoch
    [record] = list(batch.records())
    message = LeaderChangeMessage.decode(record.value)
    # 3's grant arrived after 1 and 2 had made a majority: the record names who elected it
    assert (message.leader_id, message.voters, message.granting_voters) == (1, (1, 2, 3), (1, 2))


def test_leader_change_message_matches_kafkas_flexible_v0_bytes():
    # Version 0, LeaderId 1, Voters [1, 2], GrantingVoters [1]; compact arrays and tag sections
    expected = bytes.fromhex("000000000001030000000100000000020002000000010000")
    assert LeaderChangeMessage(1, (1, 2), (1,)).encode() == expected
    assert LeaderChangeMessage.decode(expected) == LeaderChangeMessage(1, (1, 2), (1,))


def test_a_new_leader_records_its_epoch_start_before_writing():
    # KAFKA-7415: the epoch cache knows the new epoch from the first moment.
    h = Harness(log=log_with(1, 1))
    h.become_leader()
    assert h.log.epoch_entries()[-1] == (h.epoch, 2)


def test_the_leader_persists_itself_as_leader_before_acting():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.become_leader()
    assert store.read().leader_id == 1 and store.read().epoch == h.epoch


def test_a_new_leader_sends_begin_quorum_epoch_to_every_voter_at_once():
    h = Harness()
    h.become_leader()
    sent = {o.destination: o.message for o in h.take(BeginQuorumEpochRequest)}
    assert set(sent) == {2, 3}
    assert all(
        (m.leader_id, m.leader_epoch, m.cluster_id) == (1, h.epoch, CLUSTER) for m in sent.values()
    )


def test_begin_quorum_epoch_repeats_every_half_fetch_timeout():
    h = Harness(fetch_timeout_ms=2000)
    h.become_leader()
    for out in h.take(BeginQuorumEpochRequest):
        h.respond(out, BeginQuorumEpochResponse(Errors.NONE, 1, h.epoch))
    h.advance(999)
    assert not h.take(BeginQuorumEpochRequest)
    h.advance(1)
    assert {o.destination for o in h.take(BeginQuorumEpochRequest)} == {2, 3}


def test_a_new_leader_starts_without_a_high_watermark():
    h = Harness(log=log_with(1, 1, 1))
    h.become_leader()
    assert h.core.high_watermark is None


def test_the_high_watermark_is_the_offset_a_majority_has():
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_leader()
    h.core.append([(b"k", b"v")] * 9, h.now)  # offsets 1..9 after the LeaderChange at 0
    h.flush()
    h.fetch(2, 10, h.epoch)
    assert h.core.high_watermark is None  # leader + 1 of 5
    h.fetch(3, 4, h.epoch)
    assert h.core.high_watermark == 4  # leader, 2, 3 have >= 4
    h.fetch(4, 7, h.epoch)
    assert h.core.high_watermark == 7


def test_the_high_watermark_waits_for_a_record_of_the_leaders_own_epoch():
    # KIP-595 (KAFKA-12619): the majority offset must pass the epoch start strictly, i.e.
    # the LeaderChange record must be committed, before anything is exposed.
    h = Harness(log=log_with(1, 1, 1))  # 3 records from epoch 1
    h.become_leader()
    state = h.state
    assert state.epoch_start_offset == 3
    h.flush()
    h.fetch(2, 3, 1)  # a majority has 3 = the epoch start: not enough
    assert h.core.high_watermark is None
    h.fetch(2, 4, h.epoch)  # now the LeaderChange record (offset 3) is on a majority
    assert h.core.high_watermark == 4


def test_the_leader_counts_its_own_log_only_once_flushed():
    h = Harness()
    h.become_leader()
    h.core.append([(b"k", b"v")], h.now)
    h.fetch(2, 2, h.epoch)
    h.fetch(3, 2, h.epoch)
    assert h.core.high_watermark == 2  # followers alone are a majority of 3
    h = Harness(voters=(1, 2, 3, 4, 5))
    h.become_leader()
    h.core.append([(b"k", b"v")], h.now)
    h.fetch(2, 2, h.epoch)
    h.fetch(3, 2, h.epoch)
    assert h.core.high_watermark is None  # the leader's write is not durable yet
    h.flush()
    assert h.core.high_watermark == 2


def test_a_leader_acknowledging_unflushed_records_counts_its_own_log_at_once():
    # flush="interval": the core itself counts the appended records as durable (the node no
    # longer disguises its log as flushed)
    h = Harness(voters=(1, 2, 3, 4, 5), acknowledge_unflushed=True)
    h.become_leader()
    h.core.append([(b"k", b"v")], h.now)
    h.fetch(2, 2, h.epoch)
    h.fetch(3, 2, h.epoch)
    assert h.log.flushed_offset < 2
    assert h.core.high_watermark == 2


def test_the_high_watermark_never_moves_backwards():
    h = Harness()
    h.become_leader()
    h.core.append([(b"k", b"v")] * 4, h.now)
    h.flush()
    h.fetch(2, 5, h.epoch)
    assert h.core.high_watermark == 5
    h.fetch(2, 2, h.epoch)  # a stale, reordered fetch
    assert h.core.high_watermark == 5


def test_the_leader_resigns_when_no_majority_fetched_within_one_and_a_half_fetch_timeouts():
    # KAFKA-15489: check quorum.
    h = Harness(fetch_timeout_ms=2000)
    h.become_leader()
    h.advance(2999)
    assert isinstance(h.state, LeaderState)
    h.advance(1)
    assert isinstance(h.state, ResignedState)


def test_a_leader_resigning_on_check_quorum_names_the_voters_it_did_not_hear_from(caplog):
    """An operator whose leader resigned must learn which voters went silent (a hung or
    partitioned node refuses nothing, so no connection error names it): the log said only
    'no majority fetched within 3000 ms'."""
    h = Harness(voters=(1, 2, 3, 4, 5), fetch_timeout_ms=2000)
    h.become_leader()
    h.fetch(2, h.log.end_offset, h.epoch)
    h.fetch(3, h.log.end_offset, h.epoch)  # a majority: the check-quorum round starts over
    h.advance(1000)
    h.fetch(3, h.log.end_offset, h.epoch)  # only 3 in the new round
    caplog.set_level(logging.INFO, logger="raftcore.raft.core")
    h.advance(2000)
    assert isinstance(h.state, ResignedState)
    (line,) = [r.getMessage() for r in caplog.records if "resigned epoch" in r.getMessage()]
    assert line.endswith(
        "not heard from: voter 2 (last fetched 3000 ms ago), voter 4 (never fetched), "
        "voter 5 (never fetched)"
    ), line


def test_fetches_from_a_majority_keep_the_leader_in_office():
    h = Harness(fetch_timeout_ms=2000)
    h.become_leader()
    for _ in range(5):
        h.advance(1000)
        h.fetch(2, h.log.end_offset, h.epoch)
    assert isinstance(h.state, LeaderState)


def test_observer_fetches_do_not_keep_the_leader_in_office():
    h = Harness(fetch_timeout_ms=2000)
    h.become_leader()
    for _ in range(3):
        h.advance(1000)
        h.fetch(9, h.log.end_offset, h.epoch, is_follower=False)
    assert isinstance(h.state, ResignedState)


def test_a_single_voter_leader_never_resigns_on_check_quorum():
    h = Harness(voters=(1,))
    h.time_out_election()
    h.advance(60_000)
    assert isinstance(h.state, LeaderState)


def test_graceful_resignation_sends_end_quorum_epoch_with_successors_by_progress():
    h = Harness(voters=(1, 2, 3, 4), request_timeout_ms=200, fetch_max_wait_ms=100)
    h.become_leader()
    h.core.append([(b"k", b"v")] * 5, h.now)
    h.fetch(3, 6, h.epoch)
    h.fetch(4, 3, h.epoch)
    h.fetch(2, 1, h.epoch)
    h._take(h.core.resign(h.now))
    assert isinstance(h.state, ResignedState)
    sent = {o.destination: o for o in h.take(EndQuorumEpochRequest)}
    assert set(sent) == {2, 3, 4}
    assert all(o.message.preferred_successors == (3, 4, 2) for o in sent.values())
    # until each voter has answered, the resigned leader tells it again
    h.respond(sent[2], EndQuorumEpochResponse(Errors.NONE, 1, h.epoch))
    h.advance(200)  # the requests to 3 and 4 time out
    h.advance(20)  # and after the retry backoff go again
    assert isinstance(h.state, ResignedState)
    assert {o.destination for o in h.take(EndQuorumEpochRequest)} == {3, 4}


def test_a_stopping_leader_is_ready_to_close_once_every_voter_heard_it_resign():
    # the driver closes when the core says so (Output.shutdown_ready), instead of polling
    h = Harness(voters=(1, 2, 3))
    h.become_leader()
    out = h.core.begin_shutdown(h.now)
    h._take(out)
    assert not out.shutdown_ready  # voters 2 and 3 have not been told yet
    sent = {o.destination: o for o in h.take(EndQuorumEpochRequest)}
    out = h.core.handle(
        2, sent[2].correlation_id, EndQuorumEpochResponse(Errors.NONE, 1, h.epoch), h.now
    )
    assert not out.shutdown_ready
    out = h.core.handle(
        3, sent[3].correlation_id, EndQuorumEpochResponse(Errors.NONE, 1, h.epoch), h.now
    )
    assert out.shutdown_ready


def test_a_stopping_follower_is_ready_to_close_at_once():
    h = Harness()
    h.begin_quorum_epoch(2, 5)
    assert h.core.begin_shutdown(h.now).shutdown_ready


def test_a_resigned_leader_takes_no_appends_and_answers_fetches_not_leader():
    h = Harness()
    h.become_leader()
    h._take(h.core.resign(h.now))
    try:
        h.core.append([(b"k", b"v")], h.now)
        raise AssertionError("append on a resigned leader")
    except NotLeaderError as exc:
        assert exc.leader.epoch == h.epoch
    response = h.fetch(2, 0, 0)
    assert response.error_code == Errors.NOT_LEADER_OR_FOLLOWER
