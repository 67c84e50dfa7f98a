"""A disk that refuses writes (a full disk: ENOSPC; a failing one: EIO), in the pure core.

The rule (docs/cluster.md, "When a disk fails"): a leader that cannot write resigns at once --
EndQuorumEpoch to the voters, naming the most caught-up first -- so that a voter that can
write leads; the append that failed, and every append still pending, is answered
NOT_LEADER_OR_FOLLOWER naming nobody yet. A replica whose log refuses what it must write as a
follower (the records it fetched) cannot go on: the step raises, and its driver stops it. The
in-memory log plays the full disk (``InMemoryLog.disk_full``)."""

import errno

import pytest
from raft_harness import CLUSTER, Harness, batch, log_with

from raftcore.error_codes import Errors
from raftcore.raft import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    LogWriteError,
    NotLeaderError,
)
from raftcore.raft.messages import UpdateVoterRequest
from raftcore.raft.states import FollowerState, LeaderState, ResignedState
from raftcore.raft.voters import VoterEndpoint


def leader_with_followers(voters=(1, 2, 3, 4)) -> Harness:
    h = Harness(voters=voters, request_timeout_ms=200, fetch_max_wait_ms=100)
    h.become_leader()
    h.flush()
    return h


def test_a_leader_whose_log_refuses_an_append_resigns_naming_the_most_caught_up_first():
    h = leader_with_followers()
    h.core.append([(b"k", b"v")] * 4, h.now)
    h.flush()
    h.fetch(3, 5, h.epoch)
    h.fetch(4, 2, h.epoch)
    h.fetch(2, 1, h.epoch)
    epoch = h.epoch
    h.log.disk_full = True
    with pytest.raises(LogWriteError) as caught:
        h.core.append([(b"k", b"lost")], h.now)
    # the caller learns it is no longer the leader and that no successor is known yet
    assert isinstance(caught.value, NotLeaderError)
    assert caught.value.leader == LeaderAndEpoch(None, epoch)
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.ENOSPC
    assert isinstance(h.state, ResignedState) and h.epoch == epoch
    h.poll()  # the driver polls after the error: the resignation goes out
    sent = {o.destination: o.message for o in h.take(EndQuorumEpochRequest)}
    assert set(sent) == {2, 3, 4}
    assert all(m.preferred_successors == (3, 4, 2) for m in sent.values())
    assert all(m.leader_epoch == epoch for m in sent.values())


def test_produced_batches_the_log_refuses_make_the_leader_resign_too():
    h = leader_with_followers()
    h.log.disk_full = True
    with pytest.raises(LogWriteError):
        h.core.append_batches(batch(0, 0, 3), h.now)
    assert isinstance(h.state, ResignedState)


def test_appends_still_pending_fail_not_leader_naming_nobody_when_the_leader_cannot_write():
    h = leader_with_followers()
    seen = []
    original = h._take

    def take(out):
        seen.extend(out.completions)
        original(out)

    h._take = take
    pending = h.core.append([(b"k", b"v")], h.now)
    h.poll()
    h.log.disk_full = True
    with pytest.raises(LogWriteError):
        h.core.append([(b"k", b"w")], h.now)
    h.poll()
    [outcome] = [o for o in seen if o.appended.token == pending.token]
    assert outcome.error == Errors.NOT_LEADER_OR_FOLLOWER
    assert outcome.leader == LeaderAndEpoch(None, h.epoch)  # a client asks who leads now


def test_a_resigned_leader_names_nobody_to_clients_while_it_calls_itself_leader_of_its_epoch():
    h = leader_with_followers()
    h.log.disk_full = True
    with pytest.raises(LogWriteError):
        h.core.append([(b"k", b"v")], h.now)
    assert h.core.leader_and_epoch() == LeaderAndEpoch(1, h.epoch)  # KIP-595's Resigned
    assert h.core.leader_hint() == LeaderAndEpoch(None, h.epoch)
    with pytest.raises(NotLeaderError) as caught:
        h.core.append([(b"k", b"v")], h.now)
    assert caught.value.leader == LeaderAndEpoch(None, h.epoch)


def test_a_candidate_whose_log_refuses_the_leader_change_record_resigns_at_once():
    h = Harness(log=log_with(1))
    h.become_candidate()
    h.log.disk_full = True
    h.grant_votes(2, 3)  # the step does not raise: the core resigns instead of leading
    assert isinstance(h.state, ResignedState)
    assert h.take(EndQuorumEpochRequest)
    assert not h.take(BeginQuorumEpochRequest)


def test_a_leader_whose_log_refuses_a_voters_record_resigns_and_answers_not_leader():
    """The kraft.version upgrade: once the last voter told the leader who it is, the leader
    writes KRaftVersion and Voters records -- into a log that refuses them here."""
    directory = {n: bytes([n]) * 16 for n in (1, 2, 3)}

    def endpoint(n):
        return VoterEndpoint("PLAINTEXT", "127.0.0.1", 9090 + n)

    def update(n):
        request = UpdateVoterRequest(CLUSTER, h.epoch, n, directory[n], endpoint(n))
        return h.request(n, request, correlation_id=700 + n)

    h = Harness(1, (1, 2, 3), directory_id=directory[1], endpoint=endpoint(1))
    h.become_leader()
    h.flush()
    for n in (2, 3):
        h.fetch(n, h.log.end_offset, h.epoch, directory_id=directory[n], endpoint=endpoint(n))
    assert update(2).error_code == Errors.NONE
    h.log.disk_full = True
    assert update(3).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert isinstance(h.state, ResignedState)
    assert h.core.kraft_version == 0


def test_a_follower_whose_log_refuses_fetched_records_fails_the_step_for_its_driver_to_stop():
    h = Harness(log=log_with(1))
    h.begin_quorum_epoch(2, 5)
    [out] = h.take(FetchRequest)
    h.log.disk_full = True
    response = FetchResponse(Errors.NONE, -1, 0, LeaderAndEpoch(2, 5), batch(1, 5))
    with pytest.raises(OSError) as caught:
        h.respond(out, response)
    assert caught.value.errno == errno.ENOSPC
    assert h.log.end_offset == 1  # nothing of it was written


def test_a_resigned_leader_whose_disk_takes_writes_again_follows_the_next_leader():
    h = leader_with_followers(voters=(1, 2, 3))
    epoch = h.epoch
    h.log.disk_full = True
    with pytest.raises(LogWriteError):
        h.core.append([(b"k", b"v")], h.now)
    h.log.disk_full = False
    h.begin_quorum_epoch(2, epoch + 1)
    assert isinstance(h.state, FollowerState) and h.state.leader == 2
    assert h.take(FetchRequest)


def test_a_leader_keeps_leading_while_its_log_takes_appends():
    h = leader_with_followers()
    h.core.append([(b"k", b"v")], h.now)
    assert isinstance(h.state, LeaderState)
