"""KIP-853 in the core: the voter set in the log, replicas named by (id, directory id), and the
rules of AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter and leadership transfer.

Each test drives one RaftCore by hand (tests/raft_harness.py); the other replicas are played by
the test. ``dynamic_leader`` builds a leader whose static voter set has been upgraded to
kraft.version 1 the way a running cluster does it: every voter told the leader who it is.
"""

from __future__ import annotations

import pytest
from raft_harness import CLUSTER, Harness, batch

from raftcore.error_codes import Errors
from raftcore.raft import FetchResponse, LeaderAndEpoch, VoteRequest, VoteResponse
from raftcore.raft.control_records import kraft_version_record, voters_record
from raftcore.raft.leader_requests import NotLeaderError
from raftcore.raft.messages import BeginQuorumEpochRequest, UpdateVoterRequest
from raftcore.raft.states import FollowerState, LeaderState, ResignedState
from raftcore.raft.voter_history import control_records_in
from raftcore.raft.voters import ReplicaKey, Voter, VoterEndpoint, VoterSet
from raftcore.records import BatchBuilder

DIR = {n: bytes([n]) * 16 for n in range(1, 10)}  # each replica's directory id
WIPED = b"\xee" * 16  # a directory formatted anew under an old id


def ep(n: int) -> VoterEndpoint:
    return VoterEndpoint("PLAINTEXT", "127.0.0.1", 9090 + n)


def key(n: int, directory: bytes | None = None) -> ReplicaKey:
    return ReplicaKey(n, DIR[n] if directory is None else directory)


def voters(*ids: int) -> VoterSet:
    return VoterSet(Voter(key(n), (ep(n),)) for n in ids)


def catch_up(h: Harness, *replicas: int, directory: dict[int, bytes] | None = None) -> None:
    """Each replica fetches to the leader's end (acknowledging it)."""
    for r in replicas:
        d = (directory or {}).get(r, DIR[r])
        h.fetch(r, h.log.end_offset, h.log.last_fetched_epoch, directory_id=d, endpoint=ep(r))
    h.flush()


def report(h: Harness, *replicas: int) -> None:
    """Each voter tells the leader who it is (UpdateRaftVoter)."""
    for r in replicas:
        answer = h.request(
            r, UpdateVoterRequest(CLUSTER, h.epoch, r, DIR[r], ep(r)), correlation_id=700 + r
        )
        assert answer.error_code == Errors.NONE, answer


def dynamic_leader(ids=(1, 2, 3), **config) -> Harness:
    """Node 1 leads ``ids`` at kraft.version 1, every voter caught up, the upgrade committed."""
    h = Harness(1, ids, directory_id=DIR[1], endpoint=ep(1), **config)
    h.become_leader()
    h.flush()
    others = [n for n in ids if n != 1]
    catch_up(h, *others)  # the high watermark is known: changes may be made
    report(h, *others)
    assert h.core.kraft_version == 1
    catch_up(h, *others)  # the upgrade commits
    assert not h.core.history.uncommitted_change(h.core.high_watermark)
    h.changes.clear()
    return h


def voters_in(data) -> list[VoterSet]:  # type: ignore[no-untyped-def]
    from raftcore.raft.control_records import decode_voters
    from raftcore.records import ControlRecordType

    return [
        decode_voters(v)
        for _, kind, v in control_records_in(data)
        if kind == ControlRecordType.KRAFT_VOTERS
    ]


# ---- the voter set lives in the log --------------------------------------------------------------


def test_a_static_voter_set_upgrades_to_kraft_version_1_once_every_voter_told_who_it_is():
    h = Harness(1, (1, 2, 3), directory_id=DIR[1], endpoint=ep(1))
    h.become_leader()
    h.flush()
    catch_up(h, 2, 3)
    report(h, 2)
    assert h.core.kraft_version == 0  # voter 3 has not told it yet
    report(h, 3)
    assert h.core.kraft_version == 1
    assert h.core.voter_set == voters(1, 2, 3)
    # one control batch: KRaftVersion 1, then the first Voters record
    assert voters_in(h.log.read(0, 1 << 20)) == [voters(1, 2, 3)]


def test_the_voter_set_in_force_is_the_latest_voters_record_uncommitted_included():
    h = dynamic_leader(ids=(1, 2, 3, 4, 5))
    catch_up(h, 6)
    h.core.add_voter(key(6), ep(6), 10_000, h.now)
    assert h.core.history.uncommitted_change(h.core.high_watermark)  # not committed yet
    assert h.core.voter_set == voters(1, 2, 3, 4, 5, 6)  # and yet in force
    assert h.state.voters == frozenset({1, 2, 3, 4, 5, 6})


def test_a_follower_takes_a_voters_record_into_force_the_moment_it_appends_it():
    h = Harness(2, (1, 2, 3), directory_id=DIR[2], endpoint=ep(2))
    h.begin_quorum_epoch(1, 1)
    out = h.take(type(h.sent[0].message))  # its first fetch
    change = BatchBuilder(base_offset=0, leader_epoch=1, timestamp_ms=1, control=True)
    for k, v in (kraft_version_record(1), voters_record(voters(1, 2, 3, 4))):
        change.append(k, v)
    h.respond(out[0], FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(1, 1), change.build()))
    assert h.core.voter_set == voters(1, 2, 3, 4) and h.core.kraft_version == 1


def test_a_truncation_that_removes_a_voters_record_gives_the_previous_set_back():
    h = Harness(2, (1, 2, 3), directory_id=DIR[2], endpoint=ep(2))
    h.begin_quorum_epoch(1, 1)
    h.log.append_as_follower(batch(0, 1))
    change = BatchBuilder(base_offset=1, leader_epoch=1, timestamp_ms=1, control=True)
    for k, v in (kraft_version_record(1), voters_record(voters(1, 2, 3, 4))):
        change.append(k, v)
    data = change.build()
    h.log.append_as_follower(data)
    h.core.on_appended(data, h.now)
    assert 4 in h.core.voter_set
    h.log.flush()
    h.sent.clear()
    h.begin_quorum_epoch(3, 2)  # a new leader whose log ends epoch 1 at offset 1
    (out,) = [o for o in h.sent if o.is_request]
    h.respond(
        out,
        FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(3, 2), diverging_epoch=_epoch_end(1, 1)),
    )
    assert h.log.end_offset == 1
    assert h.core.voter_set == VoterSet.static({1, 2, 3}) and h.core.kraft_version == 0


def _epoch_end(offset: int, epoch: int):  # type: ignore[no-untyped-def]
    from raftcore.raft import OffsetAndEpoch

    return OffsetAndEpoch(offset, epoch)


def test_the_voter_set_is_written_at_the_head_of_every_snapshot_and_read_back_on_restart():
    from raftcore.raft.reconfig import snapshot_header_records
    from raftcore.records import ControlRecordType

    h = dynamic_leader(snapshot_min_records=1)
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    catch_up(h, 2, 3)
    end = h.core.high_watermark
    writer = h.core.create_snapshot(end, h.now)
    writer.append([(b"a", b"b")])
    writer.freeze()
    sid = writer.snapshot_id
    h.core.snapshot_frozen(sid, h.now)
    kinds = [kind for kind, _ in snapshot_header_records(h.log.read_snapshot(sid))]
    assert kinds == [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS]
    # a replica that starts from this snapshot alone (its log moved past the records) knows
    # the voters
    h.log.delete_before_snapshot(sid)
    restarted = Harness(1, (1, 2, 3), log=h.log, store=h.store, directory_id=DIR[1])
    assert restarted.core.voter_set == voters(1, 2, 3) and restarted.core.kraft_version == 1


# ---- replica identity ----------------------------------------------------------------------------


def test_a_vote_request_for_another_directory_under_this_id_is_invalid_voter_key():
    """A disk wiped under an old id is a new replica: a candidate's request names the voter's
    directory id, and the new replica answers INVALID_VOTER_KEY, never a vote."""
    h = Harness(2, (1, 2, 3), directory_id=WIPED)
    request = VoteRequest(
        CLUSTER, 1, 1, 0, 0, voter_id=2, candidate_directory_id=DIR[1], voter_directory_id=DIR[2]
    )
    answer = h.request(1, request)
    assert answer.error_code == Errors.INVALID_VOTER_KEY and not answer.vote_granted
    assert h.store.read() is None or h.store.read().voted_id is None


def test_a_candidate_asks_each_voter_by_its_directory_id():
    h = dynamic_leader()
    h.core.resign(h.now)
    h.advance(5_000)
    h.sent.clear()
    h.advance(5_000)
    asked = {o.destination: o.message.voter_directory_id for o in h.take(VoteRequest)}
    assert asked and all(asked[n] == DIR[n] for n in asked)


def test_begin_quorum_epoch_for_another_directory_is_invalid_voter_key():
    h = Harness(2, (1, 2, 3), directory_id=WIPED)
    answer = h.request(1, BeginQuorumEpochRequest(CLUSTER, 1, 1, 2, DIR[2]))
    assert answer.error_code == Errors.INVALID_VOTER_KEY
    assert not isinstance(h.state, FollowerState)


def test_a_fetch_from_a_voters_id_with_another_directory_counts_for_nothing():
    h = dynamic_leader()
    hw = h.core.high_watermark
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    end = h.log.end_offset
    catch_up(h, 2, directory={2: WIPED})  # voter 2's id, a wiped disk: an observer
    assert h.core.high_watermark == hw
    assert ReplicaKey(2, WIPED) in h.state.observer_states
    catch_up(h, 3)  # a real voter: the majority
    assert h.core.high_watermark == end


def test_a_wiped_replica_told_it_led_an_epoch_acts_as_an_observer():
    """A replica that started without a quorum-state is told, in a voter's answer, that its id
    led epoch 3: it is a new disk under an old id, not that leader; it neither fails nor stands
    for election."""
    h = Harness(1, (1, 2, 3), directory_id=WIPED)
    assert not h.take(VoteRequest)
    h.time_out_election()
    (ask, *_) = h.pre_votes()
    h.respond(ask, VoteResponse(Errors.NONE, 1, 3, False))  # names 1 the leader of 3
    assert h.epoch == 3 and not h.core.quorum.is_voter
    h.time_out_election()
    assert not h.take(VoteRequest)


def test_a_begin_quorum_epoch_naming_the_receivers_own_id_changes_nothing():
    """A leader tells the other voters, never itself: a BeginQuorumEpoch naming the receiver's
    own id the leader comes from no leader, and neither demotes it nor moves its epoch."""
    h = Harness(1, (1, 2, 3), directory_id=WIPED)
    answer = h.request(2, BeginQuorumEpochRequest(CLUSTER, 1, 3, 1, None))
    assert answer.error_code == Errors.INVALID_REQUEST
    assert h.epoch == 0 and h.core.quorum.is_voter


# ---- AddRaftVoter ---------------------------------------------------------------------------


def test_add_voter_before_a_commit_in_the_leaders_epoch_is_request_timed_out():
    h = Harness(1, (1, 2, 3), directory_id=DIR[1], endpoint=ep(1))
    h.become_leader()
    h.core.add_voter(key(4), ep(4), 10_000, h.now)
    h.poll()
    (outcome,) = h.changes
    assert outcome.error == Errors.REQUEST_TIMED_OUT and "committed" in outcome.message


def test_add_voter_to_a_static_voter_set_is_unsupported_version():
    h = Harness(1, (1, 2, 3), directory_id=DIR[1], endpoint=ep(1))
    h.become_leader()
    h.flush()
    catch_up(h, 2, 3)
    h.core.add_voter(key(4), ep(4), 10_000, h.now)
    h.poll()
    assert h.changes[0].error == Errors.UNSUPPORTED_VERSION


def test_add_voter_of_an_id_already_a_voter_is_duplicate_voter():
    h = dynamic_leader()
    h.core.add_voter(key(2, WIPED), ep(2), 10_000, h.now)
    h.poll()
    assert h.changes[0].error == Errors.DUPLICATE_VOTER


def test_a_replica_that_has_not_caught_up_is_not_added_and_nothing_changes():
    h = dynamic_leader()
    end_before = h.log.end_offset
    h.fetch(4, 0, 0, directory_id=DIR[4], endpoint=ep(4))  # far behind
    h.core.add_voter(key(4), None, 10_000, h.now)
    h.poll()
    (outcome,) = h.changes
    assert outcome.error == Errors.REQUEST_TIMED_OUT and "caught up" in outcome.message
    assert h.log.end_offset == end_before and h.core.voter_set == voters(1, 2, 3)


def test_an_added_voter_is_committed_by_the_majority_of_the_new_set():
    h = dynamic_leader()
    catch_up(h, 4)  # an observer, caught up
    token = h.core.add_voter(key(4), None, 10_000, h.now)  # its endpoint from its fetches
    h.poll()
    assert h.core.voter_set == voters(1, 2, 3, 4)
    catch_up(h, 2)  # 2 of 4 (the leader and 2): not a majority of the new set
    assert not h.changes
    catch_up(h, 3)
    (outcome,) = h.changes
    assert (outcome.token, outcome.error) == (token, Errors.NONE)


def test_one_voter_change_at_a_time():
    h = dynamic_leader()
    catch_up(h, 4, 5)
    h.core.add_voter(key(4), None, 10_000, h.now)
    h.core.add_voter(key(5), None, 10_000, h.now)  # the first is not committed yet
    h.poll()
    (outcome,) = h.changes
    assert outcome.error == Errors.REQUEST_TIMED_OUT and "in flight" in outcome.message
    assert 5 not in h.core.voter_set


def test_a_change_not_committed_in_time_fails_and_stays_in_the_log():
    h = dynamic_leader()
    catch_up(h, 4)
    h.core.add_voter(key(4), None, 1_000, h.now)
    h.advance(1_001)
    (outcome,) = h.changes
    assert outcome.error == Errors.REQUEST_TIMED_OUT and "may still be" in outcome.message
    assert h.core.voter_set == voters(1, 2, 3, 4)  # the record is in the log, in force


# ---- RemoveRaftVoter ------------------------------------------------------------------------


def test_remove_voter_of_an_unknown_replica_is_voter_not_found():
    h = dynamic_leader()
    h.core.remove_voter(key(2, WIPED), 10_000, h.now)
    h.poll()
    assert h.changes[0].error == Errors.VOTER_NOT_FOUND


def test_a_leader_that_removed_itself_resigns_once_the_removal_is_committed():
    h = dynamic_leader()
    token = h.core.remove_voter(key(1), 10_000, h.now)
    h.poll()
    assert isinstance(h.state, LeaderState)  # it leads until then, by the new set
    catch_up(h, 2)
    assert isinstance(h.state, LeaderState)  # 1 of the 2 voters {2, 3}
    catch_up(h, 3)
    assert isinstance(h.state, ResignedState)
    assert h.changes[0].token == token and h.changes[0].error == Errors.NONE
    assert not h.core.quorum.is_voter


def test_a_voter_whose_removal_is_not_committed_may_stand_but_counts_by_the_new_set():
    """The leader removed itself and lost the lead before the change committed: its log may
    be the only one with the change, so it stands -- and counts votes of the set without it."""
    h = dynamic_leader()
    h.core.remove_voter(key(1), 10_000, h.now)
    h.poll()
    h.advance(10_000)  # no fetches: check quorum makes it resign
    assert not isinstance(h.state, LeaderState)
    assert h.core.quorum.is_voter
    h.advance(10_000)
    h.advance(10_000)
    asked = {o.destination for o in h.sent if isinstance(o.message, VoteRequest)}
    assert asked and 1 not in asked and asked <= {2, 3}


# ---- leadership transfer --------------------------------------------------------------------


def test_a_transfer_stops_appends_and_resigns_naming_the_target_once_it_caught_up():
    h = dynamic_leader()
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    token = h.core.transfer_leadership(3, 10_000, h.now)
    with pytest.raises(NotLeaderError):
        h.core.append([(b"k", b"x")], h.now)
    catch_up(h, 2)
    assert isinstance(h.state, LeaderState)  # 3 has not caught up
    catch_up(h, 3)
    assert isinstance(h.state, ResignedState)
    assert h.state.preferred_successors[0] == 3
    assert (h.changes[0].token, h.changes[0].error) == (token, Errors.NONE)


def test_a_transfer_to_a_replica_that_does_not_catch_up_times_out_and_appends_resume():
    h = dynamic_leader()
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    h.core.transfer_leadership(3, 1_000, h.now)
    h.advance(1_001)
    assert h.changes[0].error == Errors.REQUEST_TIMED_OUT
    assert isinstance(h.state, LeaderState)
    h.core.append([(b"k", b"x")], h.now)  # appends again


# ---- bounds -----------------------------------------------------------------------------------


def test_the_leader_forgets_observers_silent_for_five_minutes_and_keeps_at_most_1024():
    """Any id may fetch (a client on the network too): what the leader keeps of observers is
    bounded in time and in count."""
    from raftcore.raft.states.leader import MAX_OBSERVERS, OBSERVER_SESSION_MS

    h = Harness(1, (1,), directory_id=DIR[1])  # a lone voter: no check quorum to lose
    h.time_out_election()
    h.flush()
    assert isinstance(h.state, LeaderState)
    h.fetch(9, 0, 0, directory_id=DIR[9])
    assert ReplicaKey(9, DIR[9]) in h.state.observer_states
    h.advance(OBSERVER_SESSION_MS + 1)
    assert ReplicaKey(9, DIR[9]) not in h.state.observer_states
    for n in range(MAX_OBSERVERS + 50):
        h.now += 1
        h.fetch(100 + n, 0, 0, correlation_id=n)
    h.poll()
    assert len(h.state.observer_states) == MAX_OBSERVERS
    assert ReplicaKey(100 + MAX_OBSERVERS + 49) in h.state.observer_states  # the newest stay


def test_a_snapshot_download_does_not_make_a_lagging_replica_count_as_caught_up():
    """Caught up is a Fetch reaching the leader's end (or the end the leader had at the
    replica's previous Fetch); a FetchSnapshot in between is no Fetch (found by the
    simulation: a replica that had fetched 4 offsets long ago downloaded a snapshot, fetched at
    its end -- past those 4 -- and was added as caught up at the download's time)."""
    from raftcore.raft.messages import FetchSnapshotRequest

    h = dynamic_leader(snapshot_min_records=1, max_replication_lag_ms=1)
    h.fetch(4, 0, 0, directory_id=DIR[4], endpoint=ep(4))  # far behind, long ago
    for _ in range(5):
        h.advance(1_000)
        catch_up(h, 2, 3)  # the voters keep the leader's quorum
    for _ in range(20):
        h.core.append([(b"k", b"v")], h.now)
    h.flush()
    catch_up(h, 2, 3)
    writer = h.core.create_snapshot(h.core.high_watermark, h.now)
    writer.freeze()
    h.core.snapshot_frozen(writer.snapshot_id, h.now)
    h.advance(10)
    catch_up(h, 2, 3)
    sid = writer.snapshot_id
    assert h.log.log_start_offset == sid.offset
    h.core.append([(b"k", b"later")], h.now)  # the leader moves on
    h.flush()
    catch_up(h, 2, 3)
    h.request(4, FetchSnapshotRequest(CLUSTER, 4, h.epoch, sid, 0, replica_directory_id=DIR[4]))
    h.fetch(4, sid.offset, sid.epoch, directory_id=DIR[4], endpoint=ep(4))  # behind the end
    h.core.add_voter(ReplicaKey(4, DIR[4]), None, 10_000, h.now)
    h.poll()
    assert h.changes[-1].error == Errors.REQUEST_TIMED_OUT, h.changes[-1]


def test_a_voter_removed_on_purpose_says_so_in_words_that_do_not_read_as_a_failure(caplog):
    """The line used to be ``voter set now ... (a voter)`` on the replica just removed."""
    h = dynamic_leader()
    with caplog.at_level("INFO", logger="raftcore.raft.reconfig"):
        h.core.remove_voter(key(1), 10_000, h.now)
        h.poll()
        catch_up(h, 2, 3)
    lines = [r.getMessage() for r in caplog.records if "voter set now" in r.getMessage()]
    assert lines[0].endswith(
        "this node is removed from the voters; it votes until the removal is committed"
    )
    assert not any("(a voter)" in line for line in lines)
