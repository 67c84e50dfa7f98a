"""The snapshots of a :class:`~raftcore.log.SegmentedLog` (KIP-630): the snapshot half of the
raft core's log protocol (:class:`raftcore.raft.replicated_log.SnapshotLog`) over the
:class:`~raftcore.snapshot.SnapshotStore` in the log's own directory, as Kafka's
``KafkaMetadataLog`` keeps them beside the segments.

:class:`LogSnapshots` answers for the log, which owns one and delegates to it; it checks ids
against the log exactly as the in-memory log of the simulation does (one contract test suite
runs over both), and adapts the store's writer, receiver and reader to the protocol's
``SnapshotWriter``, ``RawSnapshotWriter`` and ``RawSnapshotReader``. A
:class:`~raftcore.snapshot.SnapshotId` is an :class:`~raftcore.offsets.OffsetAndEpoch`; the
ids handed to the core are plain ones, as the in-memory log's are.

Crash safety: every step leaves a directory that the next open recovers, in Kafka's order
(``KafkaMetadataLog.recoverSnapshots``, then ``truncateToLatestSnapshot``):

- a snapshot is whole, fsynced and renamed before anything refers to it (the store's freeze);
- ``delete_before_snapshot``: the log start offset checkpoint is written, then segments below
  it are deleted, then the older snapshots -- segments or snapshots a crash left below the log
  start offset are deleted at the next open;
- ``truncate_to_latest_snapshot``: the snapshot is verified, then the log is truncated fully
  (segments renamed ``.deleted``, the log start offset written, a new segment) -- a crash
  part-way leaves the snapshot ahead of the log, and the next open truncates again.

Damage: every snapshot is verified whole when the log opens (every batch's CRC, header
first, footer last, the size), and again by a leader before it serves one to a replica
(``check``). One that fails is set aside (``<id>.checkpoint.damaged``, kept for the operator,
one WARNING line naming the file and the position) and never read again; its id stays listed,
damaged, so the log start still stands on it, until a download of the same id from the leader
or a newer snapshot replaces it. A damaged snapshot never stops the log from opening.

A log that has never held a snapshot keeps working without one (retention through
``set_log_start_offset``, as before); once the directory holds a snapshot, a log start offset
above 0 must be reached by one (Kafka's rule at open).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from raftcore.errors import CorruptSnapshotError, SnapshotError
from raftcore.offsets import OffsetAndEpoch
from raftcore.records import Record, iter_batches
from raftcore.snapshot import (
    SnapshotFileKind,
    SnapshotId,
    SnapshotReader,
    SnapshotReceiver,
    SnapshotStore,
    SnapshotSummary,
    SnapshotWriter,
    parse_snapshot_path,
)
from raftcore.snapshot.ids import damaged_path

if TYPE_CHECKING:
    from raftcore.log.segmented_log import SegmentedLog

__all__ = ["LogRawSnapshotWriter", "LogSnapshotReader", "LogSnapshotWriter", "LogSnapshots"]

logger = logging.getLogger(__name__)

# A download's total size is in every FetchSnapshot response, but the protocol's raw writer
# appends bytes alone: the receiver is told a size no snapshot reaches until ``freeze``, which
# announces the bytes received as the size and verifies them whole.
_SIZE_UNTIL_FREEZE = 2**63 - 1


def _core_id(snapshot_id: SnapshotId) -> OffsetAndEpoch:
    return OffsetAndEpoch(snapshot_id.end_offset, snapshot_id.epoch)


def _by_offset(snapshot_id: SnapshotId) -> tuple[int, int]:
    # The in-memory log's order (offset, then epoch); the store's is Kafka's (epoch, then
    # offset). The two agree on every set of snapshots of one log.
    return (snapshot_id.end_offset, snapshot_id.epoch)


class LogSnapshots:
    """The snapshot store of one open log, checked against it. Made by :meth:`open`."""

    def __init__(self, log: SegmentedLog, store: SnapshotStore) -> None:
        self._log = log
        self.store = store
        # One open reader (one fd, one map) per snapshot read, shared by every read_snapshot
        # (a leader serves each FetchSnapshot chunk from it); dropped when the snapshot goes.
        self._readers: dict[OffsetAndEpoch, SnapshotReader] = {}

    @classmethod
    def open(cls, log: SegmentedLog) -> LogSnapshots:
        """Open the store of ``log`` (recovered, not yet used) in Kafka's order: delete
        ``.part`` and ``.deleted`` files and the snapshots below the log start offset; a log
        start offset above 0 must be reached by a snapshot (when the directory holds any);
        then truncate the log to the latest snapshot if that one is ahead of it."""
        start = log.log_start_offset
        holds_snapshots = any(
            found is not None and found.kind is SnapshotFileKind.FROZEN
            for found in map(parse_snapshot_path, log.directory.iterdir())
        )
        store = SnapshotStore(log.directory, log_start_offset=start if holds_snapshots else 0)
        snapshots = cls(log, store)
        if not holds_snapshots:
            return snapshots
        try:
            for snapshot_id in store.ids():
                snapshots.check(_core_id(snapshot_id), "at start")
            if snapshots.truncate_to_latest():
                logger.info(
                    "[log %s] opened at snapshot %s, ahead of the log",
                    log.directory,
                    snapshots.latest_id(),
                )
        except BaseException:
            store.close()
            raise
        return snapshots

    def close(self) -> None:
        """Abort the downloads under way (their ``.part`` files go)."""
        self._readers.clear()  # each closes once its last user lets it go
        self.store.close()

    # ---- listing

    def ids(self) -> list[OffsetAndEpoch]:
        return [_core_id(i) for i in sorted(self.store.ids(), key=_by_offset)]

    def latest_id(self) -> OffsetAndEpoch | None:
        ids = self.store.ids()
        return _core_id(max(ids, key=_by_offset)) if ids else None

    def earliest_id(self) -> OffsetAndEpoch | None:
        ids = self.store.ids()
        return _core_id(min(ids, key=_by_offset)) if ids else None

    def epoch_at_start(self) -> int | None:
        """The latest snapshot's epoch when the log is empty and starts at it (KAFKA-10761:
        the last fetched epoch of such a log), else None."""
        log = self._log
        latest = self.latest_id()
        if latest is not None and latest.offset == log.log_start_offset == log.end_offset:
            return latest.epoch
        return None

    # ---- creating

    def create(
        self,
        snapshot_id: OffsetAndEpoch,
        last_contained_log_timestamp: int | None = None,
        header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> LogSnapshotWriter | None:
        """A writer of a local snapshot, checked as the in-memory log checks: None below the
        log start offset or when it exists; ValueError past the log end, off a batch boundary
        (``offset - 1`` must be the last offset of a batch of this log, KAFKA-14618), or with
        an epoch that is not that batch's. ``last_contained_log_timestamp`` defaults to that
        batch's max timestamp (Kafka reads it from the log the same way)."""
        log = self._log
        offset = snapshot_id.offset
        with log._lock:
            log._check_open()
            start, end = log.log_start_offset, log.end_offset
            if offset < start or snapshot_id in self.store:
                return None
            if offset > end:
                raise ValueError(f"snapshot {snapshot_id} is past the log end {end}")
            if offset - 1 < start:  # the batch ending at offset - 1 is gone (or never was)
                raise ValueError(f"snapshot {snapshot_id} does not end at a batch boundary")
            batch = next(iter_batches(log.read(offset - 1, 1)))
            if batch.last_offset != offset - 1:
                raise ValueError(f"snapshot {snapshot_id} does not end at a batch boundary")
            epoch = batch.partition_leader_epoch
            if epoch != snapshot_id.epoch:
                raise ValueError(
                    f"snapshot {snapshot_id}: the record at {offset - 1} has epoch {epoch}"
                )
            if last_contained_log_timestamp is None:
                last_contained_log_timestamp = batch.max_timestamp
        writer = self.store.writer(
            SnapshotId.of(snapshot_id),
            last_contained_log_timestamp=last_contained_log_timestamp,
            extra_header_records=header_records,
        )
        return LogSnapshotWriter(snapshot_id, writer, self._obsolete_after_freeze)

    def _obsolete_after_freeze(self, snapshot_id: OffsetAndEpoch) -> None:
        """A local snapshot froze below the log start offset (an install moved the log start
        past it while it was written, on another thread): it is deleted, so the earliest
        snapshot stays at the log start, and SnapshotError says why."""
        log = self._log
        with log._lock:
            start = log.log_start_offset
            if snapshot_id.offset >= start:
                return
            self._readers.pop(snapshot_id, None)
            self.store.delete(SnapshotId.of(snapshot_id))
        raise SnapshotError(
            f"snapshot {snapshot_id} is obsolete: the log starts at {start} (a newer snapshot "
            "was installed while it was written); deleted"
        )

    def create_unchecked(self, snapshot_id: OffsetAndEpoch) -> LogRawSnapshotWriter | None:
        """A writer of a snapshot downloaded from the leader, or None when it exists (a
        damaged one is downloaded again). Each call starts a download of its own (one under
        way for the same id is dropped)."""
        if snapshot_id in self.store and not self.is_damaged(snapshot_id):
            return None
        receiver = self.store.receive(SnapshotId.of(snapshot_id), source=object())
        return LogRawSnapshotWriter(snapshot_id, receiver)

    # ---- reading

    def check(self, snapshot_id: OffsetAndEpoch, when: str, *, records: bool = True) -> bool:
        """Verify the frozen snapshot whole, now (``when``: at start, before serving it;
        ``records=False``: every CRC, header and footer, not each record's fields). A damaged
        one is set aside (see the module docstring) and False is returned; True for a sound
        one, or one that is not here."""
        sid = SnapshotId.of(snapshot_id)
        if sid not in self.store:
            return True
        try:
            self.store.verify(sid, records=records)
            return True
        except CorruptSnapshotError as exc:
            self.set_aside(snapshot_id, when, exc)
            return False

    def set_aside(self, snapshot_id: OffsetAndEpoch, when: str, exc: BaseException) -> None:
        """Take a damaged snapshot out of use, with one WARNING line saying what follows."""
        sid = SnapshotId.of(snapshot_id)
        if self.store.is_damaged(sid):
            return
        self._readers.pop(_core_id(sid), None)
        target = self.store.set_aside(sid, str(exc))
        logger.warning(
            "[log %s] snapshot %s is damaged (%s, found %s): set aside as %s; it is never "
            "served or loaded, and is replaced by the next snapshot this node takes or by the "
            "leader's copy",
            self._log.directory,
            sid,
            exc,
            when,
            target.name,
        )

    def is_damaged(self, snapshot_id: OffsetAndEpoch) -> bool:
        return self.store.is_damaged(SnapshotId.of(snapshot_id))

    def damaged_header(self, snapshot_id: OffsetAndEpoch) -> DamagedHeader | None:
        """The header batch of a damaged snapshot, if that batch is intact (its CRC holds):
        the voter set it carries (KIP-853) is still known while the snapshot waits for its
        replacement. None when it is not."""
        path = damaged_path(self.store.directory, SnapshotId.of(snapshot_id))
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 20)
        except OSError:
            return None
        first = next(iter_batches(head), None)
        if first is None or not first.is_control or not first.is_valid():
            return None
        return DamagedHeader(head[: first.size_in_bytes])

    def read(self, snapshot_id: OffsetAndEpoch) -> LogSnapshotReader | None:
        """A reader of the frozen snapshot, or None. The file is verified whole the first
        time this process opens it: a corrupt one raises CorruptSnapshotError and is never
        served or loaded. Every reader of one snapshot shares one open file and map (a
        FetchSnapshot chunk is a view of it, not a copy); ``close`` on one leaves the others
        be, and the file is closed once the snapshot is deleted and nobody holds it."""
        if snapshot_id not in self.store:
            return None
        shared = self._readers.get(snapshot_id)
        if shared is None:
            shared = self.store.open(SnapshotId.of(snapshot_id))
            self._readers[snapshot_id] = shared
        return LogSnapshotReader(snapshot_id, shared, shared=True)

    # ---- moving the log start offset

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Kafka's deleteBeforeSnapshot: advance the log start offset to ``snapshot_id`` iff
        it exists, is not damaged, and ``log_start < offset <= min(latest.offset, end)``; the
        log deletes the segments wholly below it, then the older snapshots go. Returns whether
        it moved."""
        log = self._log
        offset = snapshot_id.offset
        with log._lock:
            log._check_open()
            latest = self.latest_id()
            if (
                snapshot_id not in self.store
                or self.is_damaged(snapshot_id)  # the log start never moves onto one
                or latest is None
                or not log.log_start_offset < offset <= min(latest.offset, log.end_offset)
            ):
                return False
            # The snapshot is durable (frozen) before the log start offset passes it.
            log.set_log_start_offset(offset)
            self.forget_below(offset)
            return True

    def truncate_to_latest(self) -> bool:
        """Kafka's truncateToLatestSnapshot: if the latest snapshot is ahead of the log (a
        later epoch than the log's last, or the same epoch and past its end), verify it and
        start the log, empty, at its end offset. Returns whether it did."""
        log = self._log
        with log._lock:
            log._check_open()
            latest = self.latest_id()
            if latest is None:
                return False
            epoch = max(log._epochs.latest_epoch, 0)
            if not (
                latest.epoch > epoch or (latest.epoch == epoch and latest.offset > log.end_offset)
            ):
                return False
            # Never give the log up for a snapshot that would not load (verified once per
            # process: a download was verified as it froze); a damaged one waits for its
            # replacement from the leader, the log as it is.
            if self.is_damaged(latest):
                return False
            self.store.open(SnapshotId.of(latest)).close()
            log.truncate_fully_and_start_at(latest.offset)
            return True

    def forget_below(self, offset: int) -> None:
        """Delete the snapshots that end below ``offset`` (the log start offset, durable)."""
        for snapshot_id in self.store.ids():
            if snapshot_id.end_offset < offset:
                self._readers.pop(_core_id(snapshot_id), None)  # its users keep their map
                self.store.delete(snapshot_id)

    def __repr__(self) -> str:
        return f"LogSnapshots({str(self.store.directory)!r}, {self.ids()})"


class DamagedHeader:
    """The intact header batch of a damaged snapshot, read as a snapshot reader's first
    bytes are (``size``, ``slice``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    def slice(self, position: int, max_bytes: int) -> memoryview:
        return memoryview(self.data)[position : position + max_bytes]

    def close(self) -> None:
        pass


class LogSnapshotWriter:
    """A local snapshot being written (the protocol's SnapshotWriter over the store's)."""

    def __init__(
        self,
        snapshot_id: OffsetAndEpoch,
        writer: SnapshotWriter,
        after_freeze: Any = None,
    ) -> None:
        self.snapshot_id = snapshot_id
        self._writer = writer
        self._after_freeze = after_freeze

    @property
    def size(self) -> int:
        return self._writer.size

    def append(self, records: Iterable[Any]) -> None:
        self._writer.append(records)

    def freeze(self) -> SnapshotSummary:
        """Footer, verify, fsync, read-only, rename, directory fsync. SnapshotError (and the
        file deleted) if the log start offset passed it meanwhile."""
        summary = self._writer.freeze()
        if self._after_freeze is not None:
            self._after_freeze(self.snapshot_id)
        return summary

    def abort(self) -> None:
        self._writer.abort()

    def __repr__(self) -> str:
        return f"LogSnapshotWriter({self._writer!r})"


class LogRawSnapshotWriter:
    """A snapshot downloaded from the leader (the protocol's RawSnapshotWriter over a
    :class:`~raftcore.snapshot.SnapshotReceiver` and its ``.part`` file)."""

    def __init__(self, snapshot_id: OffsetAndEpoch, receiver: SnapshotReceiver) -> None:
        self.snapshot_id = snapshot_id
        self._receiver = receiver

    @property
    def size(self) -> int:
        return self._receiver.position

    def append(self, data: bytes | memoryview) -> None:
        receiver = self._receiver
        if not receiver.active:
            raise SnapshotError(f"download of snapshot {self.snapshot_id} is over")
        receiver.append(receiver.position, data, size=_SIZE_UNTIL_FREEZE)

    def freeze(self) -> SnapshotSummary:
        """Verify the whole snapshot, then install it. On CorruptSnapshotError nothing is
        installed and the partial bytes are gone."""
        receiver = self._receiver
        if not receiver.active:
            raise SnapshotError(f"download of snapshot {self.snapshot_id} is over")
        receiver.size = receiver.position  # all that came is all there is: verify exactly it
        return receiver.freeze()

    def discard(self) -> None:
        self._receiver.abort()

    def __repr__(self) -> str:
        return f"LogRawSnapshotWriter({self._receiver!r})"


class LogSnapshotReader:
    """A frozen, verified snapshot (the protocol's RawSnapshotReader over the store's
    reader): slices for FetchSnapshot (views of the map), records for a restore. ``close``
    releases the file, unless it is the log's shared reader (see ``LogSnapshots.read``); the
    reader closes it when collected otherwise."""

    def __init__(
        self, snapshot_id: OffsetAndEpoch, reader: SnapshotReader, *, shared: bool = False
    ) -> None:
        self.snapshot_id = snapshot_id
        self.reader = reader
        self._shared = shared  # the log's open reader of this snapshot: close leaves it open

    @property
    def size(self) -> int:
        return self.reader.size

    @property
    def summary(self) -> SnapshotSummary:
        return self.reader.summary

    def slice(self, position: int, max_bytes: int) -> memoryview:
        return self.reader.slice(position, max_bytes)

    def records(self) -> Iterator[Record]:
        """Every data record, in order (header and footer left out); verified at open."""
        return self.reader.records()

    def close(self) -> None:
        if not self._shared:
            self.reader.close()

    def __enter__(self) -> LogSnapshotReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogSnapshotReader({self.snapshot_id}, {self.size} bytes)"
