"""Resigned: this replica led this epoch and gave it up (shutdown, resign, lost quorum, or it
restarted after leading). It never leads or votes again in this epoch."""

from __future__ import annotations

from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState


class ResignedState(EpochState):
    name = "resigned"

    def __init__(
        self,
        epoch: int,
        voters: frozenset[int],
        local_id: int,
        election_deadline: float,
        preferred_successors: tuple[int, ...],
    ) -> None:
        super().__init__(epoch, voters)
        self.local_id = local_id
        self.election_deadline = election_deadline
        self.preferred_successors = preferred_successors
        # Voters still to be told with EndQuorumEpoch.
        self.unacknowledged = set(voters) - {local_id}

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    def election_state(self) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.local_id, voters=self.voters)

    def acknowledge(self, voter_id: int) -> None:
        self.unacknowledged.discard(voter_id)

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        # It gave the epoch up: an up-to-date successor may go ahead (KIP-996).
        return log_up_to_date

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    def __repr__(self) -> str:
        return f"Resigned(epoch={self.epoch}, successors={list(self.preferred_successors)})"
