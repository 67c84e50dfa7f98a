"""Linearizable reads in the core (raftcore.raft.read_index): the read index is the high
watermark, confirmed by a majority answering a BeginQuorumEpoch sent after the read arrived."""

from __future__ import annotations

import pytest
from raft_harness import Harness

from raftcore.error_codes import Errors
from raftcore.raft import BeginQuorumEpochRequest, BeginQuorumEpochResponse, NotLeaderError
from raftcore.raft.states import LeaderState


def committed(voters=(1, 2, 3)) -> Harness:
    """Node 1 leads, one record committed; the first heartbeats answered and gone."""
    h = Harness(voters=voters)
    h.become_leader()
    h.flush()
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    for v in voters[1:]:
        h.fetch(v, h.log.end_offset, h.epoch)
    h.poll()
    assert h.core.high_watermark == h.log.end_offset
    for out in h.take(BeginQuorumEpochRequest):
        h.respond(out, BeginQuorumEpochResponse(Errors.NONE, 1, h.epoch))
    h.reads.clear()
    return h


def answer(
    h: Harness, voter: int, error: int = Errors.NONE, epoch: int | None = None, leader: int = 1
) -> None:
    (out,) = h.take(BeginQuorumEpochRequest, voter)
    h.respond(out, BeginQuorumEpochResponse(error, leader, h.epoch if epoch is None else epoch))


def test_a_read_index_is_the_high_watermark_confirmed_by_a_majority_round():
    h = committed()
    h.advance(1)
    read = h.core.read_index(h.now)
    assert read.index == h.core.high_watermark
    h.poll()
    assert h.reads == []
    answer(h, 2)  # the leader and voter 2: a majority of three
    (verdict,) = h.reads
    assert verdict.read == read and verdict.error == Errors.NONE
    assert h.take(BeginQuorumEpochRequest, 3)  # sent, not needed


def test_an_answer_to_a_begin_quorum_epoch_sent_before_the_read_does_not_confirm_it():
    """A voter may have voted for another leader after it answered an older request: only a
    request sent at or after the read counts."""
    h = committed()
    h.advance(h.config.fetch_timeout_ms // 2)  # the heartbeat goes now
    (before,) = h.take(BeginQuorumEpochRequest, 2)
    h.take(BeginQuorumEpochRequest, 3)  # lost
    h.advance(1)
    h.core.read_index(h.now)
    h.poll()
    assert h.take(BeginQuorumEpochRequest, 2) == []  # one in flight per voter: wait for it
    h.respond(before, BeginQuorumEpochResponse(Errors.NONE, 1, h.epoch))
    assert h.reads == []  # sent before the read: it confirms nothing
    h.poll()
    answer(h, 2)  # the round's own request, sent once the old one was answered
    assert [r.error for r in h.reads] == [Errors.NONE]


def test_a_leader_deposed_before_its_round_completes_fails_the_read_with_the_new_leader():
    h = committed()
    h.advance(1)
    read = h.core.read_index(h.now)
    h.poll()
    answer(h, 2, Errors.FENCED_LEADER_EPOCH, epoch=h.epoch + 1, leader=3)
    assert not isinstance(h.state, LeaderState)
    (verdict,) = h.reads
    assert verdict.read == read and verdict.error == Errors.NOT_LEADER_OR_FOLLOWER
    assert verdict.leader.epoch == read.epoch + 1


def test_a_lone_voter_confirms_a_read_at_once():
    h = Harness(voters=(1,))
    h.advance(3 * h.config.election_timeout_ms)
    assert isinstance(h.state, LeaderState)
    h.flush()
    read = h.core.read_index(h.now)
    h.poll()
    assert [r.read for r in h.reads] == [read]


def test_a_read_before_the_first_commit_of_the_epoch_takes_the_epoch_start_offset():
    h = Harness()
    h.become_leader()
    assert h.core.high_watermark is None
    read = h.core.read_index(h.now)
    assert read.index == h.state.epoch_start_offset


def test_a_read_on_a_follower_raises_not_leader():
    h = Harness()
    h.begin_quorum_epoch(2, 5)
    with pytest.raises(NotLeaderError):
        h.core.read_index(h.now)
