"""The snapshots of one log directory (Kafka keeps them beside the segments, and so do we).

- Start (``SnapshotStore(directory, log_start_offset=...)``): ``.part`` files (a write or
  download a crash interrupted) and ``.deleted`` files (a deletion it interrupted) are
  removed, and so are snapshots below the log start offset, as Kafka's
  ``KafkaMetadataLog.recoverSnapshots`` does; with a log start offset above 0 some snapshot
  must reach it, else the directory is inconsistent.
- Listing: ``ids()``, ``latest_id()``, ``earliest_id()``, ``in``, ``size_of()``.
- Reading: ``open(id)`` verifies the file whole the first time this process opens it (every
  CRC, header first, footer last, size) and returns a SnapshotReader; ``open_latest()``.
- Writing locally: ``writer(id, ...)``; receiving from a leader: ``receive(id, source=...)``,
  resumable while the process lives. Both verify the whole file before it is renamed.
- Damage: ``set_aside(id, why)`` renames a snapshot that failed its checks to
  ``<id>.checkpoint.damaged`` (kept for the operator, never deleted by the store). Its id
  stays listed, *damaged*, until a newer snapshot makes it obsolete (``delete``) or a
  sound copy of the same id is frozen (``receive``, ``writer``): the raft layer still knows
  where the log start stands, but ``open`` and ``verify`` refuse it (CorruptSnapshotError).
  At start a ``.damaged`` file at or above the log start offset is listed damaged again.
- Deleting: ``delete(id)`` and ``delete_before(id)`` rename ``<id>.checkpoint`` to
  ``<id>.checkpoint.deleted`` and then unlink it (Kafka's markForDelete, then its delayed
  delete; readers already open keep their mapping, so there is no need to wait). As in Kafka,
  neither fsyncs the directory: a deletion a crash undoes is redone at the next start.

The store does not know the log. The raft layer decides which ids are valid (a snapshot id
must end at a batch boundary of the log, KAFKA-14618/14619/17713), when the log start offset
moves, and which snapshot to delete before; this layer keeps the files honest.

Thread-safety: the store's own bookkeeping is locked; each writer, receiver and reader has a
single owner.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raftcore.errors import (
    CorruptLogError,
    CorruptSnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
)
from raftcore.offsets import OffsetAndEpoch
from raftcore.snapshot.format import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    SnapshotSummary,
    verify_snapshot_file,
)
from raftcore.snapshot.ids import (
    SnapshotFileKind,
    SnapshotId,
    damaged_path,
    deleted_path,
    parse_snapshot_path,
    snapshot_path,
)
from raftcore.snapshot.part import PartFile
from raftcore.snapshot.reader import SnapshotReader
from raftcore.snapshot.receiver import SnapshotReceiver
from raftcore.snapshot.writer import SnapshotWriter

__all__ = ["SnapshotStore"]

log = logging.getLogger(__name__)


class SnapshotStore:
    """The snapshot files of ``directory`` (the log's directory)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        log_start_offset: int = 0,
        check_records: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # check_records: verification walks every record as well as the CRCs (see verify).
        self._check_records = check_records
        self._lock = threading.Lock()
        self._ids: set[SnapshotId] = set()
        self._verified: dict[SnapshotId, SnapshotSummary] = {}
        self._receivers: dict[SnapshotId, SnapshotReceiver] = {}
        # ids whose file failed its checks and was set aside: listed, never opened
        self._damaged: dict[SnapshotId, str] = {}
        self._recover(log_start_offset)

    # ---- start

    def _recover(self, log_start_offset: int) -> None:
        removed = []
        damaged: list[SnapshotId] = []
        for entry in sorted(self.directory.iterdir()):
            found = parse_snapshot_path(entry)
            if found is None:
                continue
            if (
                found.kind is SnapshotFileKind.FROZEN
                and found.snapshot_id.end_offset >= log_start_offset
            ):
                self._ids.add(found.snapshot_id)
                continue
            if found.kind is SnapshotFileKind.DAMAGED:  # the operator's: never removed here
                if found.snapshot_id.end_offset >= log_start_offset:
                    damaged.append(found.snapshot_id)
                continue
            try:
                entry.unlink()
            except FileNotFoundError:
                continue
            removed.append(entry.name)
        if removed:
            log.info(
                "%s: removed %d unneeded snapshot file(s): %s",
                self.directory,
                len(removed),
                ", ".join(removed),
            )
        for snapshot_id in damaged:
            if snapshot_id not in self._ids:  # (a frozen copy of the same id replaced it)
                self._ids.add(snapshot_id)
                self._damaged[snapshot_id] = (
                    f"set aside as {damaged_path(self.directory, snapshot_id)}"
                )
        if log_start_offset > 0 and not any(i.end_offset >= log_start_offset for i in self._ids):
            raise CorruptLogError(
                f"{self.directory}: the log starts at offset {log_start_offset} but no snapshot "
                f"reaches it (latest: {self.latest_id()})"
            )

    # ---- listing

    def ids(self) -> list[SnapshotId]:
        """Every frozen snapshot's id, oldest first (Kafka's order: epoch, then offset)."""
        with self._lock:
            return sorted(self._ids)

    def latest_id(self) -> SnapshotId | None:
        with self._lock:
            return max(self._ids, default=None)

    def earliest_id(self) -> SnapshotId | None:
        with self._lock:
            return min(self._ids, default=None)

    def __contains__(self, snapshot_id: object) -> bool:
        if not isinstance(snapshot_id, OffsetAndEpoch):
            if not (hasattr(snapshot_id, "offset") and hasattr(snapshot_id, "epoch")):
                return False
            snapshot_id = OffsetAndEpoch(snapshot_id.offset, snapshot_id.epoch)
        snapshot_id = SnapshotId.of(snapshot_id)
        with self._lock:
            return snapshot_id in self._ids

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)

    def path_of(self, snapshot_id: SnapshotId) -> Path:
        """Where the frozen snapshot ``snapshot_id`` lives (whether or not it exists)."""
        snapshot_id = SnapshotId.of(snapshot_id)
        return snapshot_path(self.directory, snapshot_id)

    def size_of(self, snapshot_id: SnapshotId) -> int:
        """The snapshot's size in bytes (for retention by size); SnapshotNotFoundError."""
        snapshot_id = SnapshotId.of(snapshot_id)
        self._require(snapshot_id)
        if self.is_damaged(snapshot_id):
            return damaged_path(self.directory, snapshot_id).stat().st_size
        return self.path_of(snapshot_id).stat().st_size

    # ---- damage

    def is_damaged(self, snapshot_id: SnapshotId) -> bool:
        """Whether ``snapshot_id`` failed its checks and was set aside."""
        with self._lock:
            return SnapshotId.of(snapshot_id) in self._damaged

    def damaged_ids(self) -> list[SnapshotId]:
        with self._lock:
            return sorted(self._damaged)

    def _refuse_damaged(self, snapshot_id: SnapshotId) -> None:
        with self._lock:
            why = self._damaged.get(snapshot_id)
        if why is not None:
            raise CorruptSnapshotError(
                f"{self.directory}: snapshot {snapshot_id} is damaged ({why})",
                str(damaged_path(self.directory, snapshot_id)),
            )

    def set_aside(self, snapshot_id: SnapshotId, why: str) -> Path:
        """Take a snapshot that failed its checks out of use: renamed to
        ``<id>.checkpoint.damaged`` (kept, never read again), listed as damaged. Readers
        already open keep their map. Returns the new path."""
        snapshot_id = SnapshotId.of(snapshot_id)
        target = damaged_path(self.directory, snapshot_id)
        with self._lock:
            if snapshot_id in self._damaged or snapshot_id not in self._ids:
                return target
            self._verified.pop(snapshot_id, None)
            self._damaged[snapshot_id] = f"{why}; set aside as {target.name}"
        os.replace(self.path_of(snapshot_id), target)
        return target

    def _forget_damaged(self, snapshot_id: SnapshotId) -> bool:
        """A damaged id leaves the listing (a newer snapshot made it obsolete); its
        ``.damaged`` file stays."""
        with self._lock:
            if self._damaged.pop(snapshot_id, None) is None:
                return False
            self._ids.discard(snapshot_id)
        return True

    def _require(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self:
            raise SnapshotNotFoundError(f"{self.directory}: no snapshot {snapshot_id}")

    # ---- reading

    def verify(self, snapshot_id: SnapshotId, *, records: bool = True) -> SnapshotSummary:
        """Verify the frozen snapshot whole, now, and remember the result. Raises
        CorruptSnapshotError (naming file and position) or SnapshotNotFoundError.
        ``records=False``: the structure and every CRC, not every record's fields (what a
        leader checks again before serving a snapshot it verified when it was made)."""
        snapshot_id = SnapshotId.of(snapshot_id)
        self._require(snapshot_id)
        self._refuse_damaged(snapshot_id)
        summary = verify_snapshot_file(
            self.path_of(snapshot_id),
            snapshot_id=snapshot_id,
            check_records=self._check_records and records,
        )
        with self._lock:
            self._verified[snapshot_id] = summary
        return summary

    def open(self, snapshot_id: SnapshotId, *, verify: bool = False) -> SnapshotReader:
        """A reader of the frozen snapshot ``snapshot_id``, for a restore or to serve
        FetchSnapshot. The file is verified whole the first time this process opens it (or
        always, with ``verify``): a corrupt snapshot raises CorruptSnapshotError, and is never
        served or loaded. A snapshot this process wrote or received was verified then."""
        snapshot_id = SnapshotId.of(snapshot_id)
        self._refuse_damaged(snapshot_id)
        with self._lock:
            summary = None if verify else self._verified.get(snapshot_id)
        if summary is None:
            summary = self.verify(snapshot_id)
        return SnapshotReader.open_file(self.path_of(snapshot_id), snapshot_id, summary)

    def open_latest(self) -> SnapshotReader | None:
        """A reader of the latest snapshot, or None when there is none."""
        latest = self.latest_id()
        return None if latest is None else self.open(latest)

    # ---- writing

    def writer(
        self,
        snapshot_id: SnapshotId,
        *,
        last_contained_log_timestamp: int,
        compression: str = "none",
        timestamp_ms: int | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        max_batch_records: int = MAX_BATCH_RECORDS,
        extra_header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> SnapshotWriter:
        """A writer of a new local snapshot ``snapshot_id`` (Kafka's createSnapshot). The raft
        layer has checked the id (at most the high watermark, at a batch boundary of the log,
        valid against the log's epochs). SnapshotExistsError if it is already frozen here.

        ``last_contained_log_timestamp``: append time of the log record at
        ``snapshot_id.end_offset - 1``; ``timestamp_ms``: the batches' timestamp (default now);
        ``compression``: "none" (Kafka's default), "zstd" or "gzip";
        ``extra_header_records``: KRaftVersion / Voters control records for the header batch.
        """
        snapshot_id = SnapshotId.of(snapshot_id)
        # a damaged one is written again: listed (damaged) until the new one is frozen
        if snapshot_id in self and not self.is_damaged(snapshot_id):
            raise SnapshotExistsError(f"{self.directory}: snapshot {snapshot_id} already exists")
        part = PartFile(self.directory, snapshot_id)
        try:
            writer = SnapshotWriter(
                part,
                last_contained_log_timestamp=last_contained_log_timestamp,
                compression=compression,
                timestamp_ms=timestamp_ms,
                max_batch_bytes=max_batch_bytes,
                max_batch_records=max_batch_records,
                extra_header_records=extra_header_records,
                check_records=self._check_records,
                on_frozen=self._frozen,
            )
        except BaseException:
            part.discard()
            raise
        return writer

    def receive(self, snapshot_id: SnapshotId, *, source: Any = None) -> SnapshotReceiver:
        """The receiver of snapshot ``snapshot_id`` from a leader: a new one, or the one
        already under way if it comes from the same ``source`` (e.g. the leader's id), so a
        download resumes at ``receiver.position`` after a lost connection. A download under way
        from another source is dropped and started over. SnapshotExistsError if the snapshot
        is already frozen here (Kafka: "already stored")."""
        snapshot_id = SnapshotId.of(snapshot_id)
        # a damaged one is downloaded again: listed (damaged) until the copy is frozen
        if snapshot_id in self and not self.is_damaged(snapshot_id):
            raise SnapshotExistsError(f"{self.directory}: snapshot {snapshot_id} already exists")
        with self._lock:
            current = self._receivers.get(snapshot_id)
        if current is not None:
            if current.active and current.source == source:
                return current
            current.abort()
        receiver = SnapshotReceiver(
            PartFile(self.directory, snapshot_id),
            source=source,
            check_records=self._check_records,
            on_done=self._received,
        )
        with self._lock:
            self._receivers[snapshot_id] = receiver
        return receiver

    def receiving(self) -> list[SnapshotReceiver]:
        """The downloads under way."""
        with self._lock:
            return list(self._receivers.values())

    def _frozen(self, snapshot_id: SnapshotId, summary: SnapshotSummary) -> None:
        with self._lock:
            self._ids.add(snapshot_id)
            self._damaged.pop(snapshot_id, None)  # replaced by a sound copy
            self._verified[snapshot_id] = summary
        log.info(
            "%s: snapshot %s frozen (%d bytes, %d records)",
            self.directory,
            snapshot_id,
            summary.size,
            summary.record_count,
        )

    def _received(self, receiver: SnapshotReceiver, summary: SnapshotSummary | None) -> None:
        with self._lock:
            if self._receivers.get(receiver.snapshot_id) is receiver:
                del self._receivers[receiver.snapshot_id]
        if summary is not None:
            self._frozen(receiver.snapshot_id, summary)

    # ---- deleting

    def delete(self, snapshot_id: SnapshotId) -> bool:
        """Delete one snapshot: rename to ``.deleted``, then unlink. Returns whether it was
        there. Readers already open stay readable."""
        snapshot_id = SnapshotId.of(snapshot_id)
        if self._forget_damaged(snapshot_id):
            log.info(
                "%s: forgot damaged snapshot %s (its .damaged file stays)",
                self.directory,
                snapshot_id,
            )
            return True
        with self._lock:
            if snapshot_id not in self._ids:
                return False
            self._ids.discard(snapshot_id)
            self._verified.pop(snapshot_id, None)
        source = self.path_of(snapshot_id)
        doomed = deleted_path(self.directory, snapshot_id)
        try:
            os.replace(source, doomed)
        except FileNotFoundError:
            log.warning("%s: snapshot %s vanished before its deletion", self.directory, snapshot_id)
            return False
        try:
            doomed.unlink()
        except OSError as exc:  # removed at the next start
            log.warning("%s: cannot unlink %s: %s", self.directory, doomed, exc)
        log.info("%s: deleted snapshot %s", self.directory, snapshot_id)
        return True

    def delete_before(self, snapshot_id: SnapshotId) -> list[SnapshotId]:
        """Delete every snapshot older than ``snapshot_id`` -- the snapshot the log start offset
        now stands on (Kafka's deleteBeforeSnapshot forgets the snapshots below it). The
        snapshot itself must exist, so the latest one is never deleted. Returns the ids
        deleted."""
        snapshot_id = SnapshotId.of(snapshot_id)
        with self._lock:
            if snapshot_id not in self._ids:
                raise SnapshotNotFoundError(
                    f"{self.directory}: no snapshot {snapshot_id} to delete the older ones before"
                )
            older = sorted(i for i in self._ids if i < snapshot_id)
        return [i for i in older if self.delete(i)]

    # ---- the end

    def close(self) -> None:
        """Abort the downloads under way (their ``.part`` files are deleted)."""
        for receiver in self.receiving():
            receiver.abort()

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.directory)!r}, snapshots={len(self)})"
