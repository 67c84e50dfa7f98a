"""The log as the Raft core sees it, and the decisions that depend only on its answers.

Two implementations satisfy :class:`ReplicatedLog`: the native
:class:`raftcore.log.SegmentedLog` and :class:`raftcore.testing.memory_log.InMemoryLog` (for the
simulation). The decisions below are plain functions written once, so the two cannot disagree;
one contract test suite runs over both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from raftcore.raft.values import OffsetAndEpoch, ValidOffsetAndEpoch

__all__ = [
    "RawSnapshotReader",
    "RawSnapshotWriter",
    "ReplicatedLog",
    "SnapshotLog",
    "SnapshotWriter",
    "divergence_end_offset",
    "holds_snapshot_prefix",
    "install_snapshot",
    "snapshot_log",
    "truncate_to_end_offset",
    "validate_offset_and_epoch",
]


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
    def append_batches_as_leader(
        self, batches: Any, epoch: int, *, checked: Any = None
    ) -> tuple[int, int]: ...
    def append_as_follower(
        self, batches: Any, *, checked: Any = None
    ) -> tuple[int, int] | None: ...
    def read(self, offset: int, max_bytes: int = ...) -> Any: ...
    def truncate_to(self, offset: int) -> int: ...
    def truncate_fully_and_start_at(self, offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def initialize_leader_epoch(self, epoch: int) -> None: ...
    def flush(self) -> int: ...
    def epoch_for_offset(self, offset: int) -> int: ...
    def overwrite_batch(self, data: Any) -> tuple[int, int]: ...


class SnapshotWriter(Protocol):
    """A snapshot being written locally from the state machine (Kafka's SnapshotWriter; the
    file-backed one is :class:`raftcore.snapshot.writer.SnapshotWriter`). Records are
    (key, value) pairs; ``freeze`` adds the footer, verifies and installs the snapshot;
    ``abort`` leaves nothing behind."""

    snapshot_id: Any

    def append(self, records: Iterable[Any]) -> None: ...
    def freeze(self) -> Any: ...
    def abort(self) -> None: ...


class RawSnapshotWriter(Protocol):
    """A snapshot being downloaded from the leader (Kafka's RawSnapshotWriter over a ``.part``
    file): unaligned bytes appended in order. ``freeze`` verifies the whole snapshot first --
    every batch's CRC, the header first and the footer last, nothing after it -- and raises
    :class:`~raftcore.errors.CorruptSnapshotError` leaving nothing installed (the partial
    bytes are discarded); ``discard`` drops the partial bytes."""

    snapshot_id: OffsetAndEpoch

    @property
    def size(self) -> int: ...
    def append(self, data: bytes | memoryview) -> None: ...
    def freeze(self) -> Any: ...
    def discard(self) -> None: ...


class RawSnapshotReader(Protocol):
    """A frozen snapshot (Kafka's RawSnapshotReader plus the record iteration of its
    RecordsSnapshotReader): ``slice`` serves FetchSnapshot, ``records`` restores a state."""

    snapshot_id: OffsetAndEpoch

    @property
    def size(self) -> int: ...
    def slice(self, position: int, max_bytes: int) -> bytes | memoryview: ...
    def records(self) -> Iterator[Any]: ...


@runtime_checkable
class SnapshotLog(Protocol):
    """The snapshot half of Kafka's ReplicatedLog (KIP-630), which a log that keeps snapshots
    adds to :class:`ReplicatedLog`. A log without these methods never has snapshots (the core
    then refuses a configuration that would take them).

    - ``latest_snapshot_id()`` / ``earliest_snapshot_id()``: the newest and oldest frozen
      snapshot, or None. Ids are (end offset exclusive, epoch of the record at end - 1).
    - ``create_new_snapshot(id)``: a :class:`SnapshotWriter`, or None when ``id.offset`` is
      below the log start offset or the snapshot exists. Raises ValueError when the id is not
      at a batch boundary of this log (``id.offset - 1`` is the last offset of a batch) or
      its epoch is not the epoch of that record. (The core checks the high watermark.)
    - ``create_new_snapshot_unchecked(id)``: a :class:`RawSnapshotWriter` for a download, or
      None when the snapshot exists. No validation against the log.
    - ``read_snapshot(id)``: a :class:`RawSnapshotReader`, or None.
    - ``delete_before_snapshot(id)``: advance the log start offset to ``id.offset`` iff the
      snapshot exists and ``log_start_offset < id.offset <= min(latest.offset, end_offset)``;
      drop the batches (segments) wholly below it and the older snapshots. Returns whether it
      moved.
    - ``truncate_to_latest_snapshot()``: if the latest snapshot is ahead of the log (its epoch
      above the log's last epoch, or the same epoch and its offset past the log end), truncate
      the log fully and start it at the snapshot's end offset; returns whether it did.
    - ``epoch_for_offset(offset)``: the epoch of the record at ``offset`` (-1 if unknown).

    With snapshots: ``last_fetched_epoch`` of an empty log that starts at the latest snapshot
    is that snapshot's epoch; ``read(offset)`` below the log start offset raises
    OffsetOutOfRangeError (no record below it is ever served); snapshots survive a crash.
    """

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...
    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...
    def create_new_snapshot(
        self,
        snapshot_id: OffsetAndEpoch,
        *,
        header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> SnapshotWriter | None: ...
    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None: ...
    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None: ...
    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool: ...
    def truncate_to_latest_snapshot(self) -> bool: ...
    def epoch_for_offset(self, offset: int) -> int: ...


def snapshot_log(log: ReplicatedLog) -> SnapshotLog | None:
    """``log`` if it keeps snapshots, else None."""
    return log if isinstance(log, SnapshotLog) else None  # type: ignore[return-value]


def end_offset_and_epoch(log: ReplicatedLog) -> OffsetAndEpoch:
    """The log's end as KIP-595 compares logs: (end offset, last fetched epoch)."""
    return OffsetAndEpoch(log.end_offset, log.last_fetched_epoch)


def validate_offset_and_epoch(log: ReplicatedLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Does a fetcher's (FetchOffset, LastFetchedEpoch) sit on this log? (KIP-595 fetch
    validation, Kafka's ReplicatedLog.validateOffsetAndEpoch.)

    KIP-630 first: when the log has a snapshot at its start, the fetcher is sent the latest
    snapshot if it fetches below the log start offset, at the log start offset with a last
    fetched epoch other than that snapshot's, or with an epoch older than that snapshot's
    (the log no longer holds what it would need to compare). Then KIP-595: valid when
    ``epoch`` is an epoch of this log that ends at or after ``offset``. Otherwise the fetcher
    diverges: the answer is the largest epoch <= ``epoch`` in this log and where it ends, so
    the fetcher can drop everything past it in one step (KIP-279). An empty fetcher of a log
    that starts at 0 is always valid: the bootstrap snapshot (0, 0) is never served.
    """
    start = log.log_start_offset
    if start == 0 and offset == 0:
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 0))
    earliest_id = getattr(log, "earliest_snapshot_id", None)
    earliest = earliest_id() if earliest_id is not None else None
    if earliest is not None and (
        offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch
    ):
        latest = log.latest_snapshot_id()  # type: ignore[attr-defined]
        return ValidOffsetAndEpoch.snapshot(latest)
    local_epoch, local_end = log.end_offset_for_epoch(epoch)
    if local_epoch != epoch or local_end < offset:
        return ValidOffsetAndEpoch.diverging(OffsetAndEpoch(local_end, local_epoch))
    return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))


def divergence_end_offset(log: ReplicatedLog, diverging: OffsetAndEpoch) -> int:
    """Where :func:`truncate_to_end_offset` would cut the log, without cutting it.

    ``diverging`` is the leader's (end offset, epoch) of the largest epoch <= ours it knows.
    If our log has that epoch, keep it up to the smaller of the two ends; if not, keep up to
    the end of our own largest epoch below it -- every record of a later epoch may be
    divergent, and the next fetch narrows it further.
    """
    epoch = diverging.epoch
    if epoch == 0:
        return min(diverging.offset, log.end_offset)
    local_epoch, local_end = log.end_offset_for_epoch(epoch)
    return min(local_end, diverging.offset) if local_epoch == epoch else local_end


def truncate_to_end_offset(log: ReplicatedLog, diverging: OffsetAndEpoch) -> int:
    """Truncate after the leader said our log diverges (Kafka's truncateToEndOffset), at
    :func:`divergence_end_offset`. Returns the truncation offset. (The core first refuses a
    truncation below the committed offset: raftcore.raft.committed.)"""
    offset = divergence_end_offset(log, diverging)
    log.truncate_to(offset)
    return offset


def holds_snapshot_prefix(log: SnapshotLog, snapshot_id: OffsetAndEpoch) -> bool:
    """Does the log already hold what ``snapshot_id`` covers -- it starts at that snapshot,
    or it reaches the snapshot's end with the snapshot's epoch on the record before it? Such
    a log is never truncated by :func:`install_snapshot`."""
    rlog: Any = log
    start, end = rlog.log_start_offset, rlog.end_offset
    offset = snapshot_id.offset
    if offset == start:
        return log.earliest_snapshot_id() == snapshot_id
    return start < offset <= end and log.epoch_for_offset(offset - 1) == snapshot_id.epoch


def install_snapshot(log: SnapshotLog, snapshot_id: OffsetAndEpoch) -> bool:
    """Make the log start at a snapshot downloaded from the leader, unless the log already
    holds exactly that prefix. Returns whether the log was truncated.

    Kafka's truncateToLatestSnapshot covers a log that is behind the snapshot; a log that
    reaches the snapshot's end offset with a different epoch there (an uncommitted tail of an
    older leader, which the leader answered with the snapshot rather than a divergence) is
    truncated fully too, instead of Kafka's IllegalStateException: everything below the
    snapshot's end is committed and the snapshot holds it. A snapshot older than the log
    start changes nothing: the log start offset never moves backwards.
    """
    if log.truncate_to_latest_snapshot():
        return True
    rlog: Any = log
    offset = snapshot_id.offset
    if offset < rlog.log_start_offset:
        # The log starts past this snapshot (at a newer one): what it holds covers more, and
        # starting over at the older one would move the log start offset backwards.
        return False
    if holds_snapshot_prefix(log, snapshot_id):
        return False
    rlog.truncate_fully_and_start_at(offset)
    return True
