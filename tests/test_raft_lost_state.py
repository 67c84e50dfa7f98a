"""Never vote twice: a replica whose quorum-state is missing or unreadable while its log holds
records may have voted in an epoch it no longer remembers. It never comes back as the voter it
was (raftcore.raft.quorum_state, LostQuorumStateError): with the voter set in the log
(kraft.version 1) it comes back under a new directory id, a new replica that the voter set
takes in by a remove and an add; with a static voter set it refuses to start.
"""

from __future__ import annotations

import pytest
from raft_harness import CLUSTER, Harness, log_with
from test_raft_fetch import reply
from test_raft_reconfig import DIR, dynamic_leader, ep

from raftcore.error_codes import Errors
from raftcore.errors import CorruptCheckpointError, LostQuorumStateError
from raftcore.raft import ElectionState, VoteRequest
from raftcore.raft.messages import FetchRequest, UpdateVoterRequest
from raftcore.raft.voters import ReplicaKey
from raftcore.testing import MemoryQuorumStateStore

NEW_DIR = b"\x77" * 16


class DamagedStore(MemoryQuorumStateStore):
    def read(self):  # type: ignore[no-untyped-def]
        raise CorruptCheckpointError("quorum-state: not JSON")


def test_a_static_voter_without_its_quorum_state_refuses_to_start():
    with pytest.raises(LostQuorumStateError, match="static") as caught:
        Harness(1, (1, 2, 3), log=log_with(1, 2), store=MemoryQuorumStateStore())
    assert caught.value.static


def test_an_unreadable_quorum_state_is_a_lost_one():
    with pytest.raises(LostQuorumStateError, match="unreadable"):
        Harness(1, (1, 2, 3), log=log_with(1, 2), store=DamagedStore())


def test_a_voter_named_by_its_directory_id_without_its_quorum_state_refuses_to_come_back_as_it():
    leader = dynamic_leader()
    with pytest.raises(LostQuorumStateError, match="new directory id") as caught:
        Harness(1, (1, 2, 3), log=leader.log, store=MemoryQuorumStateStore(), directory_id=DIR[1])
    assert not caught.value.static


def test_under_a_new_directory_id_it_is_an_observer_that_never_votes_as_the_old_voter():
    leader = dynamic_leader()
    h = Harness(1, (1, 2, 3), log=leader.log, store=MemoryQuorumStateStore(), directory_id=NEW_DIR)
    assert not h.core.quorum.is_voter
    assert ReplicaKey(1, NEW_DIR) == h.core.local_key
    # a candidate asks voter 1 by the directory id the voter set names: not this replica
    request = VoteRequest(
        CLUSTER, 9, 2, 1, 100, voter_id=1, candidate_directory_id=DIR[2], voter_directory_id=DIR[1]
    )
    assert h.request(2, request).error_code == Errors.INVALID_VOTER_KEY
    h.time_out_election()
    assert not [o for o in h.sent if isinstance(o.message, VoteRequest)]


def test_a_replica_with_an_empty_log_and_no_quorum_state_starts_as_a_new_cluster_does():
    h = Harness(1, (1, 2, 3), store=MemoryQuorumStateStore())
    assert h.core.quorum.is_voter
    h.become_leader()


def test_a_replica_with_its_quorum_state_starts_as_before():
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=2, voted_id=3))
    h = Harness(1, (1, 2, 3), log=log_with(1, 2), store=store, endpoint=ep(1))
    assert h.core.quorum.is_voter and h.epoch == 2


def test_a_formatted_voter_without_its_quorum_state_refuses_to_start_even_with_an_empty_log():
    """A static cluster that never elected a leader: voter 1 voted in epoch 1, then lost its
    quorum-state. Its log is empty, yet it must not start at epoch 0 and vote again in 1."""
    with pytest.raises(LostQuorumStateError, match="log is empty") as caught:
        Harness(1, (1, 2, 3), store=MemoryQuorumStateStore(), formatted=True)
    assert caught.value.static


def test_a_formatted_voter_with_its_quorum_state_and_an_empty_log_starts_as_a_new_cluster_does():
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=0))  # what formatting writes
    h = Harness(1, (1, 2, 3), store=store, formatted=True)
    assert h.core.quorum.is_voter
    h.become_leader()


def _vote_request(epoch: int) -> VoteRequest:
    return VoteRequest(CLUSTER, epoch, 2, 0, 0, voter_id=1)


def test_a_replica_formatted_to_join_never_stands_nor_votes_as_a_voter_of_the_static_set():
    """Formatted with --no-initial-voters and started with the usual --voters: an observer,
    whose election timer never starts an election and who grants no vote, until the voter
    set in the log names it."""
    h = Harness(1, (1, 2, 3), joining=True, directory_id=NEW_DIR)
    assert not h.core.quorum.is_voter
    h.time_out_election()
    assert not [o for o in h.sent if isinstance(o.message, VoteRequest)]
    answer = h.request(2, _vote_request(h.epoch + 1))
    assert not answer.vote_granted
    assert answer.error_code == Errors.INVALID_VOTER_KEY
    assert h.store.read() is None or h.store.read().voted_id is None  # nothing granted


def test_the_same_replica_formatted_as_an_initial_voter_grants_the_vote():
    h = Harness(1, (1, 2, 3), directory_id=NEW_DIR)
    assert h.request(2, _vote_request(h.epoch + 1)).vote_granted


@pytest.mark.parametrize("joining", [False, True], ids=["initial-voter", "joining"])
def test_a_replica_formatted_to_join_never_tells_a_static_leader_it_is_the_voter_of_its_id(
    joining,
):
    """In a static voter set (kraft.version 0) the leader upgrades once every voter told it
    its directory id (UpdateRaftVoter): a replica formatted to join must not be that voter."""
    h = Harness(2, (1, 2, 3), joining=joining, directory_id=NEW_DIR, endpoint=ep(2))
    h.begin_quorum_epoch(1, 5)
    (fetch, *_) = h.take(FetchRequest, destination=1)
    reply(h, fetch, hw=0)
    h.advance(10)
    assert bool(h.take(UpdateVoterRequest)) is not joining
