"""The auto-joining replica's log (raftcore.node.admin.AutoJoiner): once its addition is
committed it says so, even when the answer to its AddRaftVoter was an error (the leader
changed while the change was in flight, and the next leader committed it)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from raftcore.error_codes import Errors
from raftcore.node.admin import AutoJoiner
from raftcore.raft.voters import ReplicaKey, Voter, VoterSet

ME = ReplicaKey(4, bytes(range(1, 17)))
OTHERS = [Voter(ReplicaKey(i, bytes([i]) * 16)) for i in (1, 2, 3)]


def joiner(voters: VoterSet, *, pending: bool) -> tuple[AutoJoiner, SimpleNamespace]:
    core = SimpleNamespace(
        voter_set=voters,
        local_key=ME,
        endpoint=None,  # (no endpoint: the decision never asks again here)
        kraft_version=1,
        high_watermark=10,
        history=SimpleNamespace(uncommitted_change=lambda hw: pending),
        state=None,
    )
    node = SimpleNamespace(
        core=core,
        prefix="[node 4]",
        config=SimpleNamespace(quorum=SimpleNamespace(fetch_timeout_ms=1000)),
    )
    return AutoJoiner(node), core  # type: ignore[arg-type]


def said(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.getMessage() for r in caplog.records if "auto-join" in r.getMessage()]


def test_a_replica_whose_auto_join_answer_was_an_error_says_once_that_its_addition_committed(
    caplog,
):
    caplog.set_level(logging.INFO, logger="raftcore.node.admin")
    j, core = joiner(VoterSet(OTHERS), pending=False)
    j._last = (Errors.NOT_LEADER_OR_FOLLOWER, "the leader stopped before the change was committed")
    j.check()
    assert said(caplog) == []  # not a voter
    core.voter_set = VoterSet([*OTHERS, Voter(ME)])
    core.history.uncommitted_change = lambda hw: True
    j.check()
    assert said(caplog) == []  # a voter of a change not committed yet
    core.history.uncommitted_change = lambda hw: False
    j.check()
    j.check()
    assert said(caplog) == [
        f"[node 4] auto-join: added as voter {ME}: committed, though the answer was "
        "NOT_LEADER_OR_FOLLOWER"
    ]


def test_a_replica_told_it_was_added_says_nothing_more(caplog):  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="raftcore.node.admin")
    j, _ = joiner(VoterSet([*OTHERS, Voter(ME)]), pending=False)
    j._last = (Errors.NONE, None)  # "added as voter" was logged with the answer
    j.check()
    assert said(caplog) == []
