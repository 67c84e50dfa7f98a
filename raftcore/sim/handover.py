"""How long a full disk's leader takes to hand over: from the moment a leader whose disk is
full resigns (EndQuorumEpoch to the voters) to the first leader of a later epoch. A leader
whose node stopped on its full disk says nothing, and is replaced after a fetch timeout.

A resigned leader's first successor should lead within a few round trips: the successor's
pre-vote may reach the other follower before that follower's EndQuorumEpoch does, and it is
asked again rather than waiting out an election timeout (:mod:`raftcore.raft.vote`). Other
faults of the same run (partitions, crashes) can make a hand-over slow for good reasons, so
these are counts to compare between cores, not an invariant; a hand-over during which a node
stopped is not counted.
"""

from __future__ import annotations

from raftcore.raft.states import LeaderState
from raftcore.sim.scenario import Scenario

__all__ = ["HandOvers", "full_disk_scenario"]


class HandOvers:
    """``left(epoch, now)`` when a full disk's leader resigns; ``observe(state, now)`` after
    each step of any replica; ``stats`` counts hand-overs by how long they took."""

    def __init__(self, election_timeout_ms: int) -> None:
        self.election_timeout_ms = election_timeout_ms
        self._pending: tuple[int, int] | None = None  # (epoch left, when)
        self.stats = {
            "hand-overs": 0,
            "within half an election timeout": 0,
            "over an election timeout": 0,
        }

    def left(self, epoch: int, now: int) -> None:
        if self._pending is None:
            self._pending = (epoch, now)

    def observe(self, state: object, now: int) -> None:
        """A replica's state after a step: a leader of a later epoch ends the hand-over."""
        if self._pending is None or not isinstance(state, LeaderState):
            return
        epoch, since = self._pending
        if state.epoch <= epoch:
            return
        self._pending = None
        took = now - since
        self.stats["hand-overs"] += 1
        if took <= self.election_timeout_ms // 2:
            self.stats["within half an election timeout"] += 1
        if took > self.election_timeout_ms:
            self.stats["over an election timeout"] += 1

    def forget(self) -> None:
        """A node stopped on its full disk, or the faults stopped (the heal): what is pending
        is not measured (an election with a voter down may rightly wait a timeout)."""
        self._pending = None


def full_disk_scenario(seed: int) -> Scenario:
    """Full disks and nothing else (no partitions, crashes or drops; 1-40 ms delays): every
    hand-over of a resigned leader is measured against the rule, 3 and 5 voters alternating."""
    return Scenario(
        seed=seed,
        voters=3 if seed % 2 else 5,
        delay_ms=(1, 40),
        full_disks=True,
        full_disk_every_ms=(1500, 6000),
        full_disk_ms=(200, 4000),
        heal_ms=5_000,  # (time to converge after the faults; the rule is checked before)
    )
