"""Follower: this replica knows the leader of this epoch and fetches from it."""

from __future__ import annotations

from typing import Any

from raftcore.errors import RaftInvariantError
from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState


class FollowerState(EpochState):
    name = "follower"

    def __init__(
        self, epoch: int, voters: frozenset[int], leader: int, fetch_timeout_ms: int, now: int
    ) -> None:
        super().__init__(epoch, voters)
        self.leader = leader
        self.fetch_timeout_ms = fetch_timeout_ms
        self.fetch_deadline = now + fetch_timeout_ms
        self.high_watermark: int | None = None
        # A successful fetch from the leader in this epoch; until then it may grant pre-votes
        # (KAFKA-17641/17642: once it has one, it refuses them, so a replica that lost its
        # leader cannot win pre-votes from replicas that still have it).
        self.has_fetched = False
        # The leader told it that it resigned (EndQuorumEpoch): pre-votes may be granted again
        # (Kafka PR #23168, KAFKA-20895, open).
        self.leader_resigned = False
        # KIP-630: the snapshot being downloaded from this leader (a RawSnapshotWriter); while
        # it lasts the follower sends FetchSnapshot instead of Fetch. It dies with this state.
        self.fetching_snapshot: Any = None
        # KIP-853: this voter told this leader who it is (UpdateRaftVoter), or will again then
        self.voter_updated = False
        self.update_voter_at = 0
        # the fetch in flight is a repair fetch (raftcore.raft.damage)
        self.repairing = False

    @property
    def leader_id(self) -> int | None:
        return self.leader

    def election_state(self) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.leader, voters=self.voters)

    def fetch_expired(self, now: int) -> bool:
        return now >= self.fetch_deadline

    def reset_fetch_timeout(self, now: int) -> None:
        """A successful fetch from the leader. Once the leader said it resigned, no fetch
        answer puts the election off again: one it answered before resigning (a held fetch
        is answered as it leaves) may arrive after its EndQuorumEpoch, and must not undo the
        successors' ranked backoff (the hand-over would wait a whole fetch timeout)."""
        if not self.leader_resigned:
            self.fetch_deadline = now + self.fetch_timeout_ms
        self.has_fetched = True

    def override_fetch_timeout(self, now: int, timeout_ms: int) -> None:
        """After the leader resigned (EndQuorumEpoch): stand for election sooner, by rank."""
        self.fetch_deadline = now + timeout_ms

    def can_grant_pre_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return log_up_to_date and (not self.has_fetched or self.leader_resigned)

    def update_high_watermark(self, high_watermark: int | None) -> bool:
        """Set the high watermark; it never moves backwards (a regression is a bug)."""
        if high_watermark is None:
            return False
        if self.high_watermark is not None and high_watermark < self.high_watermark:
            raise RaftInvariantError(
                f"the high watermark would move back from {self.high_watermark} to "
                f"{high_watermark} in epoch {self.epoch}"
            )
        changed = high_watermark != self.high_watermark
        self.high_watermark = high_watermark
        return changed

    def drop_snapshot_download(self) -> None:
        """Forget the download in progress (its partial bytes are discarded)."""
        writer, self.fetching_snapshot = self.fetching_snapshot, None
        if writer is not None:
            writer.discard()

    def __repr__(self) -> str:
        return f"Follower(epoch={self.epoch}, leader={self.leader}, hw={self.high_watermark})"
