"""The log as the Raft core sees it, and the decisions that depend only on its answers.

Two implementations satisfy :class:`ReplicatedLog`: the native
:class:`raftcore.log.SegmentedLog` and :class:`raftcore.raft.memory_log.InMemoryLog` (for the
simulation). The decisions below are plain functions written once, so the two cannot disagree;
one contract test suite runs over both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from raftcore.raft.values import OffsetAndEpoch, ValidOffsetAndEpoch

__all__ = ["ReplicatedLog", "truncate_to_end_offset", "validate_offset_and_epoch"]


@runtime_checkable
class ReplicatedLog(Protocol):
    """What the core needs from a log (Kafka's ReplicatedLog, without snapshots for now)."""

    @property
    def end_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def last_fetched_epoch(self) -> int: ...
    @property
    def flushed_offset(self) -> int: ...

    def append_as_leader(
        self, records: Iterable[Any], epoch: int, *, control: bool = False
    ) -> tuple[int, int]: ...
    def append_batches_as_leader(self, batches: Any, epoch: int) -> tuple[int, int]: ...
    def append_as_follower(self, batches: Any) -> tuple[int, int] | None: ...
    def read(self, offset: int, max_bytes: int = ...) -> Any: ...
    def truncate_to(self, offset: int) -> int: ...
    def truncate_fully_and_start_at(self, offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def initialize_leader_epoch(self, epoch: int) -> None: ...
    def flush(self) -> int: ...


def end_offset_and_epoch(log: ReplicatedLog) -> OffsetAndEpoch:
    """The log's end as KIP-595 compares logs: (end offset, last fetched epoch)."""
    return OffsetAndEpoch(log.end_offset, log.last_fetched_epoch)


def validate_offset_and_epoch(log: ReplicatedLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Does a fetcher's (FetchOffset, LastFetchedEpoch) sit on this log? (KIP-595 fetch
    validation, Kafka's ReplicatedLog.validateOffsetAndEpoch.)

    Valid when ``epoch`` is an epoch of this log that ends at or after ``offset``. Otherwise
    the fetcher diverges: the answer is the largest epoch <= ``epoch`` in this log and where
    it ends, so the fetcher can drop everything past it in one step (KIP-279).
    """
    if log.log_start_offset == 0 and offset == 0:
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 0))
    local_epoch, local_end = log.end_offset_for_epoch(epoch)
    if local_epoch != epoch or local_end < offset:
        return ValidOffsetAndEpoch.diverging(OffsetAndEpoch(local_end, local_epoch))
    return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))


def truncate_to_end_offset(log: ReplicatedLog, diverging: OffsetAndEpoch) -> int:
    """Truncate after the leader said our log diverges (Kafka's truncateToEndOffset).

    ``diverging`` is the leader's (end offset, epoch) of the largest epoch <= ours it knows.
    If our log has that epoch, keep it up to the smaller of the two ends; if not, keep up to
    the end of our own largest epoch below it -- every record of a later epoch may be
    divergent, and the next fetch narrows it further. Returns the truncation offset.
    """
    epoch = diverging.epoch
    if epoch == 0:
        offset = min(diverging.offset, log.end_offset)
    else:
        local_epoch, local_end = log.end_offset_for_epoch(epoch)
        offset = min(local_end, diverging.offset) if local_epoch == epoch else local_end
    log.truncate_to(offset)
    return offset
