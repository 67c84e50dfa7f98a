"""Candidate: this replica runs for leader in this epoch, having voted for itself."""

from __future__ import annotations

from raftcore.raft.states.base import EpochState
from raftcore.raft.states.tally import VoteTally
from raftcore.raft.values import ElectionState


class CandidateState(VoteTally, EpochState):
    name = "candidate"

    def __init__(
        self,
        epoch: int,
        voters: frozenset[int],
        local_id: int,
        retries: int,
        election_deadline: float,
        *,
        local_directory_id: bytes | None = None,
    ) -> None:
        super().__init__(epoch, voters)
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.retries = retries
        self.election_deadline = election_deadline
        self._start_tally(local_id)
        self.backoff_deadline: float | None = None

    def election_state(self) -> ElectionState:
        return ElectionState(
            epoch=self.epoch,
            voted_id=self.local_id,
            voted_directory_id=self.local_directory_id,
            voters=self.voters,
        )

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        # It never votes for another in its epoch, but a pre-vote binds nothing (KIP-996).
        return log_up_to_date

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    @property
    def backing_off(self) -> bool:
        return self.backoff_deadline is not None

    def start_backoff(self, now: int, backoff_ms: int) -> None:
        self.backoff_deadline = now + backoff_ms

    def backoff_complete(self, now: int) -> bool:
        return self.backoff_deadline is not None and now >= self.backoff_deadline

    def __repr__(self) -> str:
        return (
            f"Candidate(epoch={self.epoch}, granted={sorted(self.granted)}, "
            f"rejected={sorted(self.rejected)}, retries={self.retries})"
        )
