"""Unattached: an epoch with no known leader and no vote cast."""

from __future__ import annotations

from raftcore.raft.states.base import NO_DEADLINE, EpochState
from raftcore.raft.voters import ReplicaKey


class UnattachedState(EpochState):
    name = "unattached"

    def __init__(self, epoch: int, voters: frozenset[int], election_deadline: float) -> None:
        super().__init__(epoch, voters)
        # Observers never start elections: their deadline is infinite.
        self.election_deadline = election_deadline

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool) -> bool:
        # Not yet voted in this epoch: vote for the first candidate whose log is at least as
        # up to date as ours (epoch first, then offset).
        return log_up_to_date

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return log_up_to_date

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    def __repr__(self) -> str:
        deadline = "never" if self.election_deadline == NO_DEADLINE else self.election_deadline
        return f"Unattached(epoch={self.epoch}, election_deadline={deadline})"
