"""The quorum-state file and the one owner of transitions."""

import json
import logging
import re

import pytest
from raft_harness import Harness

import raftcore.raft.quorum_state as quorum_state_module
from raftcore.errors import CorruptCheckpointError
from raftcore.raft import ElectionState, FileQuorumStateStore
from raftcore.raft.quorum_state import TRANSITIONS, IllegalTransitionError
from raftcore.raft.voters import ReplicaKey
from raftcore.testing import InMemoryLog, MemoryQuorumStateStore


def test_the_transition_table_in_the_docstring_is_the_one_the_code_enforces():
    doc = quorum_state_module.__doc__
    pairs = re.findall(r"^\s+(\w+)\s+->\s+(\w+):", doc, re.MULTILINE)
    table: dict[str, set[str]] = {}
    for src, dst in pairs:
        table.setdefault(src, set()).add(dst)
    assert table == {k: set(v) for k, v in TRANSITIONS.items()}


def test_an_illegal_transition_raises():
    h = Harness()
    with pytest.raises(IllegalTransitionError):
        h.core.quorum.transition_to_leader(0, h.now)  # unattached -> leader
    h.become_leader()
    with pytest.raises(IllegalTransitionError):
        h.core.quorum.transition_to_voted(ReplicaKey(2), h.now)


def test_every_transition_is_logged_at_debug_with_epoch_and_reason(caplog):
    with caplog.at_level(logging.DEBUG, logger="raftcore.raft.quorum_state"):
        h = Harness()
        h.become_leader()
    lines = [r.getMessage() for r in caplog.records if "->" in r.getMessage()]
    assert any(
        "unattached -> Prospective(epoch=0" in line and "election timeout" in line for line in lines
    )
    assert any(
        "prospective -> Candidate(epoch=1" in line and "pre-vote granted" in line for line in lines
    )
    assert any(
        "candidate -> Leader(epoch=1" in line and "won the election" in line for line in lines
    )


def test_a_durable_transition_writes_the_store_before_switching():
    writes = []

    class SpyStore(MemoryQuorumStateStore):
        def write(self, state):
            writes.append((state, type(h.core.quorum.state).__name__))
            super().write(state)

    h = Harness(store=SpyStore())
    h.become_prospective()
    assert writes == []  # Prospective is kept in memory only: nothing stored changes
    h.grant_pre_votes(2, 3)
    # written while the in-memory state was still the old one
    assert writes[-1] == (
        ElectionState(1, voted_id=1, voters=frozenset({1, 2, 3})),
        "ProspectiveState",
    )


def test_resigned_is_kept_in_memory_only():
    store = MemoryQuorumStateStore()
    h = Harness(store=store)
    h.become_leader()
    before = store.writes
    h._take(h.core.resign(h.now))
    assert store.writes == before


# ---- the file --------------------------------------------------------------------------------


def test_the_quorum_state_file_has_kafkas_field_names_and_data_version(tmp_path):
    """QuorumStateData v1 (KIP-853): no voters (they live in the log); a vote names the
    candidate's directory id, as Kafka writes uuids."""
    store = FileQuorumStateStore(tmp_path, cluster_id="c1")
    store.write(ElectionState(epoch=5, leader_id=2))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data == {
        "clusterId": "c1",
        "leaderId": 2,
        "leaderEpoch": 5,
        "votedId": -1,
        "data_version": 1,
    }
    assert store.read() == ElectionState(epoch=5, leader_id=2)
    voted = ElectionState(epoch=6, voted_id=3, voted_directory_id=bytes(range(1, 17)))
    store.write(voted)
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data["votedDirectoryId"] == "AQIDBAUGBwgJCgsMDQ4PEA"
    assert store.read() == voted


def test_a_quorum_state_file_of_data_version_0_still_reads(tmp_path):
    (tmp_path / "quorum-state").write_text(
        '{"clusterId":"c1","leaderId":2,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}\n'
    )
    store = FileQuorumStateStore(tmp_path, cluster_id="c1")
    assert store.read() == ElectionState(epoch=5, leader_id=2, voters=frozenset({1, 2, 3}))


def test_the_quorum_state_file_is_replaced_atomically_and_leaves_no_temp_file(tmp_path):
    store = FileQuorumStateStore(tmp_path)
    store.write(ElectionState(epoch=1, voted_id=3))
    store.write(ElectionState(epoch=2, voted_id=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]
    assert store.read().voted_id == 1


def test_a_vote_survives_a_restart_through_the_file(tmp_path):
    store = FileQuorumStateStore(tmp_path)
    h = Harness(store=store, log=InMemoryLog())
    from raftcore.raft import VoteRequest

    assert h.request(2, VoteRequest("test-cluster", 4, 2, 0, 0, 1)).vote_granted
    restarted = Harness(store=FileQuorumStateStore(tmp_path))
    assert not restarted.request(3, VoteRequest("test-cluster", 4, 3, 0, 0, 1)).vote_granted


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "[]",
        '{"leaderEpoch": 1}',
        '{"leaderEpoch": "x", "data_version": 0}',
        '{"leaderEpoch": 1, "data_version": 7}',
        '{"leaderEpoch": 1, "leaderId": 2, "votedId": 3, "data_version": 0}',
    ],
)
def test_a_corrupt_quorum_state_file_raises_naming_the_file(tmp_path, content):
    (tmp_path / "quorum-state").write_text(content)
    with pytest.raises(CorruptCheckpointError, match="quorum-state"):
        FileQuorumStateStore(tmp_path).read()


def test_only_the_first_line_is_read(tmp_path):
    store = FileQuorumStateStore(tmp_path)
    store.write(ElectionState(epoch=3, voted_id=2))
    with open(tmp_path / "quorum-state", "a") as f:
        f.write("trailing garbage\n")
    assert store.read().epoch == 3
