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

from raftcore.raft.states.base import EpochState
from raftcore.raft.states.tally import VoteTally
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import ReplicaKey


class ProspectiveState(VoteTally, EpochState):
    tally_kind = "pre-vote"
    name = "prospective"

    def __init__(
        self,
        epoch: int,
        voters: frozenset[int],
        local_id: int,
        election_deadline: float,
        *,
        leader: int | None = None,
        voted: ReplicaKey | None = None,
        retries: int = 0,
        leader_resigned: bool = False,
    ) -> None:
        super().__init__(epoch, voters)
        self.local_id = local_id
        self.election_deadline = election_deadline
        self.leader = leader  # the leader of this epoch it followed, if any
        self.voted = voted  # the vote it cast in this epoch, if any
        self.retries = retries  # elections lost since it last followed a leader
        # its leader told it that it resigned (EndQuorumEpoch): a voter that refuses this
        # pre-vote naming that leader has not heard yet, and is asked again (vote.py)
        self.leader_resigned = leader_resigned
        self.asked_again: set[int] = set()  # refusals taken as not yet heard, once per voter
        self._start_tally(local_id)

    @property
    def leader_id(self) -> int | None:
        return self.leader

    @property
    def voted_id(self) -> int | None:
        return None if self.voted is None else self.voted.id

    def election_state(self) -> ElectionState:
        # What the state it came from wrote; a transition to Prospective writes nothing.
        if self.leader is not None:
            return ElectionState(epoch=self.epoch, leader_id=self.leader, voters=self.voters)
        if self.voted is not None:
            return ElectionState(
                epoch=self.epoch,
                voted_id=self.voted.id,
                voted_directory_id=self.voted.directory_id,
                voters=self.voters,
            )
        return ElectionState(epoch=self.epoch, voters=self.voters)

    # ---- the pre-vote election ----------------------------------------------------------------

    def election_expired(self, now: int) -> bool:
        return now >= self.election_deadline

    # ---- what it grants -----------------------------------------------------------------------

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool) -> bool:
        # A real vote, as Unattached would (Kafka's unattachedOrProspectiveCanGrantVote): the
        # same candidate again if it voted in this epoch, nobody if it knows the leader.
        if self.voted is not None:
            return candidate == self.voted
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
