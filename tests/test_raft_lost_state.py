"""Never vote twice: a replica whose quorum-state is missing or unreadable while its log holds
records may have voted in an epoch it no longer remembers. It never comes back as the voter it
was (raftcore.raft.quorum_state, LostQuorumStateError): with the voter set in the log
(kraft.version 1) it comes back under a new directory id, a new replica that the voter set
takes in by a remove and an add; with a static voter set it refuses to start.
"""

from __future__ import annotations

import pytest
from raft_harness import CLUSTER, Harness, log_with
from test_raft_reconfig import DIR, dynamic_leader, ep

from raftcore.error_codes import Errors
from raftcore.errors import CorruptCheckpointError, LostQuorumStateError
from raftcore.raft import ElectionState, VoteRequest
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
