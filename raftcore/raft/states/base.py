"""What every epoch state has."""

from __future__ import annotations

from raftcore.raft.values import ElectionState
from raftcore.raft.voters import ReplicaKey

NO_DEADLINE = float("inf")


class EpochState:
    """An epoch and this replica's role in it."""

    name = "?"

    def __init__(self, epoch: int, voters: frozenset[int]) -> None:
        self.epoch = epoch
        self.voters = voters
        # The highest offset known committed; carried across transitions by the core (a new
        # leader starts without one).
        self.high_watermark: int | None = None

    @property
    def leader_id(self) -> int | None:
        return None

    def election_state(self) -> ElectionState:
        """What the quorum-state file says about this state."""
        return ElectionState(epoch=self.epoch, voters=self.voters)

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool) -> bool:
        """KIP-595: would this state vote for ``candidate`` (its id and directory id), whose
        log is (or is not) at least as up to date as ours, in this epoch?"""
        return False

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        """KIP-996: would this state tell ``candidate_id`` (a Prospective in this epoch) that it
        would vote for it? A pre-vote is never persisted and may be granted to several. The
        Leader never grants."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epoch={self.epoch})"
