"""Voted: this replica voted for a candidate in this epoch and knows no leader yet."""

from __future__ import annotations

from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import ReplicaKey


class VotedState(EpochState):
    name = "voted"

    def __init__(
        self, epoch: int, voters: frozenset[int], voted: ReplicaKey, election_deadline: float
    ) -> None:
        super().__init__(epoch, voters)
        self.voted = voted
        self.election_deadline = election_deadline

    @property
    def voted_id(self) -> int:
        return self.voted.id

    def election_state(self) -> ElectionState:
        return ElectionState(
            epoch=self.epoch,
            voted_id=self.voted.id,
            voted_directory_id=self.voted.directory_id,
            voters=self.voters,
        )

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool) -> bool:
        # One vote per epoch: only the same candidate gets it again (a retried request), the
        # same replica: another directory under that id is another replica (KIP-853).
        return candidate == self.voted

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        # A pre-vote binds nothing: any up-to-date log, whoever got the vote (KIP-996).
        return log_up_to_date

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    def __repr__(self) -> str:
        return f"Voted(epoch={self.epoch}, voted_for={self.voted})"
