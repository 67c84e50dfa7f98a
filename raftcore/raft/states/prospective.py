"""Prospective (KIP-996 pre-vote): a voter whose fetch or election timeout expired asks the
voters whether they *would* vote for it, before it raises the epoch.

Nothing about it is persisted: it keeps the epoch, the leader and the vote of the state it
came from, and the quorum-state file keeps saying what that state said (Kafka's
``transitionToProspective`` is a memory-only transition). A majority of pre-vote grants (this
replica included) makes it a Candidate in epoch + 1; a majority of rejections, or the end of
its election timeout, sends it back to Follower (a leader is known), Voted (it voted in this
epoch) or Unattached, in the same epoch.
"""

from __future__ import annotations

import logging

from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState

logger = logging.getLogger(__name__)


class ProspectiveState(EpochState):
    name = "prospective"

    def __init__(
        self,
        epoch: int,
        voters: frozenset[int],
        local_id: int,
        election_deadline: float,
        *,
        leader: int | None = None,
        voted_id: int | None = None,
        retries: int = 0,
    ) -> None:
        super().__init__(epoch, voters)
        self.local_id = local_id
        self.election_deadline = election_deadline
        self.leader = leader  # the leader of this epoch it followed, if any
        self.voted_id = voted_id  # the vote it cast in this epoch, if any
        self.retries = retries  # elections lost since it last followed a leader
        self.granted: set[int] = {local_id}
        self.rejected: set[int] = set()

    @property
    def leader_id(self) -> int | None:
        return self.leader

    def election_state(self) -> ElectionState:
        # What the state it came from wrote; a transition to Prospective writes nothing.
        if self.leader is not None:
            return ElectionState(epoch=self.epoch, leader_id=self.leader, voters=self.voters)
        if self.voted_id is not None:
            return ElectionState(epoch=self.epoch, voted_id=self.voted_id, voters=self.voters)
        return ElectionState(epoch=self.epoch, voters=self.voters)

    # ---- the pre-vote election ----------------------------------------------------------------

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def unrecorded_voters(self) -> set[int]:
        return set(self.voters) - self.granted - self.rejected

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self.rejected:
            logger.warning(
                "voter %d granted a pre-vote after rejecting it in epoch %d; keeping the rejection",
                voter_id,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self.granted:
            logger.warning(
                "voter %d rejected a pre-vote after granting it in epoch %d; keeping the grant",
                voter_id,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.rejected.add(voter_id)

    def is_vote_granted(self) -> bool:
        """A majority (this replica included) would vote for it."""
        return len(self.granted) >= self.majority

    def is_vote_rejected(self) -> bool:
        """Even every voter not heard from could not make a majority any more."""
        return len(self.granted) + len(self.unrecorded_voters()) < self.majority

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    # ---- what it grants -----------------------------------------------------------------------

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        # A real vote, as Unattached would (Kafka's unattachedOrProspectiveCanGrantVote): the
        # same candidate again if it voted in this epoch, nobody if it knows the leader.
        if self.voted_id is not None:
            return candidate_id == self.voted_id
        if self.leader is not None:
            return False
        return log_up_to_date

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return log_up_to_date

    def __repr__(self) -> str:
        return (
            f"Prospective(epoch={self.epoch}, leader={self.leader}, voted={self.voted_id}, "
            f"granted={sorted(self.granted)}, rejected={sorted(self.rejected)})"
        )
