"""Candidate: this replica runs for leader in this epoch, having voted for itself."""

from __future__ import annotations

import logging

from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState

logger = logging.getLogger(__name__)


class CandidateState(EpochState):
    name = "candidate"

    def __init__(
        self,
        epoch: int,
        voters: frozenset[int],
        local_id: int,
        retries: int,
        election_deadline: float,
    ) -> None:
        super().__init__(epoch, voters)
        self.local_id = local_id
        self.retries = retries
        self.election_deadline = election_deadline
        self.granted: set[int] = {local_id}
        self.rejected: set[int] = set()
        self.backoff_deadline: float | None = None

    def election_state(self) -> ElectionState:
        return ElectionState(epoch=self.epoch, voted_id=self.local_id, voters=self.voters)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def unrecorded_voters(self) -> set[int]:
        return set(self.voters) - self.granted - self.rejected

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self.rejected:
            logger.warning(
                "voter %d granted after rejecting in epoch %d; keeping the rejection",
                voter_id,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self.granted:
            logger.warning(
                "voter %d rejected after granting in epoch %d; keeping the grant",
                voter_id,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.rejected.add(voter_id)

    def is_vote_granted(self) -> bool:
        """A majority (this replica included) granted."""
        return len(self.granted) >= self.majority

    def is_vote_rejected(self) -> bool:
        """Even every outstanding voter could not make a majority any more."""
        return len(self.granted) + len(self.unrecorded_voters()) < self.majority

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
