"""The tally of an election, shared by Candidate (votes) and Prospective (pre-votes, KIP-996):
who granted, who rejected, and whether a majority is won or out of reach."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class VoteTally:
    """Mixed into a state with ``epoch``, ``voters`` and ``local_id``; call
    :meth:`_start_tally` in its constructor."""

    epoch: int
    voters: frozenset[int]
    tally_kind = "vote"  # in log messages

    def _start_tally(self, local_id: int) -> None:
        # its own vote counts when it is one of the voters it asks (a replica whose removal is
        # not committed may stand, KIP-853, but counts by the set without it)
        self.granted: set[int] = {local_id} & set(self.voters)
        self.rejected: set[int] = set()

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def unrecorded_voters(self) -> set[int]:
        return set(self.voters) - self.granted - self.rejected

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self.rejected:
            logger.warning(
                "voter %d granted a %s after rejecting it in epoch %d; keeping the rejection",
                voter_id,
                self.tally_kind,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self.granted:
            logger.warning(
                "voter %d rejected a %s after granting it in epoch %d; keeping the grant",
                voter_id,
                self.tally_kind,
                self.epoch,
            )
            return
        if voter_id in self.voters:
            self.rejected.add(voter_id)

    def is_vote_granted(self) -> bool:
        """A majority (this replica included) granted."""
        return len(self.granted) >= self.majority

    def is_vote_rejected(self) -> bool:
        """Even every voter not heard from could not make a majority any more."""
        return len(self.granted) + len(self.unrecorded_voters()) < self.majority
