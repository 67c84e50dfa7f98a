"""Small immutable values of the Raft core: result types instead of bare ints and tuples.

:class:`OffsetAndEpoch` is defined below the core, in :mod:`raftcore.offsets` (the log and the
snapshots use it too), and re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raftcore.offsets import OffsetAndEpoch  # the shared position type, re-exported here

__all__ = [
    "ElectionState",
    "LeaderAndEpoch",
    "OffsetAndEpoch",
    "ValidOffsetAndEpoch",
    "ValidationKind",
]


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """Who leads, as far as this node knows: ``leader_id`` is None when unknown."""

    leader_id: int | None
    epoch: int

    @property
    def known(self) -> bool:
        return self.leader_id is not None


class ValidationKind(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """The answer to "does (offset, epoch) sit on this log?" (Kafka's ValidOffsetAndEpoch).

    - ``valid()``: yes, the fetcher may read from ``offset``;
    - ``diverging(e)``: no, the fetcher's log diverges; ``e`` is the largest epoch <= its
      epoch in this log and where that epoch ends (the fetcher truncates there);
    - ``snapshot(id)``: the offset is below the log start; fetch snapshot ``id``.
    """

    kind: ValidationKind
    offset_and_epoch: OffsetAndEpoch

    @classmethod
    def valid(cls, offset_and_epoch: OffsetAndEpoch | None = None) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.VALID, offset_and_epoch or OffsetAndEpoch(-1, -1))

    @classmethod
    def diverging(cls, offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.DIVERGING, offset_and_epoch)

    @classmethod
    def snapshot(cls, snapshot_id: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.SNAPSHOT, snapshot_id)


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What the quorum-state file holds: the epoch and either the leader or this node's vote
    in it (never both; the vote names the candidate's directory id too, KIP-853), and the
    voter set of kraft.version 0 (informational)."""

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voters: frozenset[int] = frozenset()
    voted_directory_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")
        if self.leader_id is not None and self.voted_id is not None:
            raise ValueError("an election state holds a leader or a vote, not both")

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id

    def has_voted(self) -> bool:
        return self.voted_id is not None
