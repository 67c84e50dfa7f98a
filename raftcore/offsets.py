"""(offset, epoch): the one position type of the raft core, the log and the snapshots.

It lives below every layer that uses it and imports nothing of raftcore. A snapshot id
(:class:`raftcore.snapshot.SnapshotId`) is an :class:`OffsetAndEpoch` whose offset is the
snapshot's exclusive end offset; it adds range checks and file names, and equals the plain
value with the same offset and epoch.

The leader-epoch cache answers with its own native (epoch, end offset) pair
(``raftcore._native.epoch_cache.EpochEndOffset``, note the order): a struct sequence made in C
on the fetch validation path, unpacked by name or position where it is read
(:func:`raftcore.raft.replicated_log.validate_offset_and_epoch`); it stays native.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OffsetAndEpoch"]


@dataclass(frozen=True, slots=True, eq=False)
class OffsetAndEpoch:
    """An offset with the epoch of the record before it (or of a snapshot).

    Log positions compare epoch first, then offset: (epoch 5, offset 10) is ahead of
    (epoch 4, offset 100). KIP-595 uses this order to decide whose log is more up to date.

    Two positions are equal when their offsets and epochs are, whichever subclass holds them
    (a :class:`~raftcore.snapshot.SnapshotId` equals the plain value of its id).
    """

    offset: int
    epoch: int

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OffsetAndEpoch):
            return self.offset == other.offset and self.epoch == other.epoch
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.offset, self.epoch))

    def __lt__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) < (other.epoch, other.offset)

    def __le__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) <= (other.epoch, other.offset)

    def __gt__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) > (other.epoch, other.offset)

    def __ge__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) >= (other.epoch, other.offset)
