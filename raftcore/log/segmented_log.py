"""The log's public face: :class:`SegmentedLog` -- appends, reads and durability over the
segments that recovery hands it (see the package docstring for the directory layout and the
invariants every operation keeps); truncation and retention are in
:mod:`raftcore.log.truncation`, snapshots in :mod:`raftcore.log.snapshots`."""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from raftcore._native.records import (
    RecordBatch,
    check_batch_crcs,
    encode_batch,
    iter_batches,
    restamp_batches,
    restamp_scanned,
    scan_batches,
    span_batches,
)
from raftcore.checkpoint import fsync_directory
from raftcore.epoch_cache import EpochEndOffset, LeaderEpochFileCache
from raftcore.errors import (
    CorruptRecordError,
    InvalidAppendError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raftcore.log.checkpoints import _CleanPoint, write_clean_point, write_log_start_offset
from raftcore.log.config import INT32_MAX, LogConfig
from raftcore.log.observer import LogObserver
from raftcore.log.recovery import lock_directory, recover
from raftcore.log.repair import overwrite_batch
from raftcore.log.segment import (
    _epoch_changes,
    _Segment,
    first_discontinuity,
)
from raftcore.log.snapshots import (
    LogRawSnapshotWriter,
    LogSnapshotReader,
    LogSnapshots,
    LogSnapshotWriter,
)
from raftcore.log.truncation import TruncationAndRetention
from raftcore.offsets import OffsetAndEpoch

logger = logging.getLogger(__name__)


class SegmentedLog(TruncationAndRetention):
    """A Kafka-format replicated log on disk. Open it with :meth:`open`.

    Thread-safe: every method takes the log's lock, except that ``flush`` releases it while
    waiting for the disk, so appends go on during an fsync.
    """

    def __init__(self, directory: Path, config: LogConfig) -> None:
        # Use SegmentedLog.open(); this constructor only sets fields.
        self._dir = directory
        self._config = config
        self._lock = threading.RLock()
        self._segments: list[_Segment] = []
        self._bases: list[int] = []
        self._log_start = 0
        self._epochs: LeaderEpochFileCache
        self._last_batch_epoch = -1
        self._clean: _CleanPoint = _CleanPoint(0, 0, 0)
        self._unchecked_bytes = 0  # appended since the clean point last moved
        self._generation = 0  # bumped by rolls and truncations
        self._flushed_offset = 0
        self._dir_dirty = False
        self._lock_fd = -1
        self._closed = False
        self._snapshots: LogSnapshots | None = None  # opened after recovery
        self._observer: LogObserver | None = None

    # ---- opening and recovery ----------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str], **config: Any) -> SegmentedLog:
        """Open (or create) the log in ``directory``, recovering from an unclean shutdown.

        ``config`` holds LogConfig fields (``segment_bytes=...``) or a ``config=LogConfig``.
        """
        cfg = config.pop("config", None)
        if cfg is None:
            cfg = LogConfig(**config)
        elif config:
            raise TypeError("pass either config=LogConfig(...) or keyword settings, not both")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        log = cls(path, cfg)
        log._acquire_directory_lock()
        try:
            log._load()
        except BaseException:
            log._release_directory_lock()
            raise
        return log

    def _acquire_directory_lock(self) -> None:
        self._lock_fd = lock_directory(self._dir)

    def _release_directory_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _load(self) -> None:
        recovered = recover(self._dir, self._config)
        self._segments = recovered.segments
        self._bases = [s.base_offset for s in recovered.segments]
        self._log_start = recovered.log_start
        self._epochs = recovered.epochs
        self._last_batch_epoch = recovered.last_batch_epoch
        self._dir_dirty = recovered.dir_dirty
        active = self._segments[-1]
        end = active.next_offset
        self._flushed_offset = end

        # Everything is now checked: record that, so the next open need not scan it again.
        self._clean = _CleanPoint(end, active.base_offset, active.size)
        self.flush()
        self._write_clean_point()
        self._write_log_start_offset()
        self._snapshots = LogSnapshots.open(self)

    # ---- checkpoints -------------------------------------------------------------------------

    def set_observer(self, observer: LogObserver | None) -> None:
        """Tell ``observer`` of every later append, roll, truncation, log start move and the
        close (:mod:`raftcore.log.observer`); None stops telling."""
        with self._lock:
            self._observer = observer

    def _write_log_start_offset(self) -> None:
        write_log_start_offset(self._dir, self._log_start)

    def _write_clean_point(self) -> None:
        write_clean_point(self._dir, self._clean)
        self._unchecked_bytes = 0

    def _lower_clean_point(self, seg: _Segment, position: int, offset: int) -> None:
        """Before truncating below the clean point, move it down (durably): data written after
        the truncation is unchecked until recovery or a flush says otherwise."""
        c = self._clean
        if seg.base_offset < c.segment_base or (
            seg.base_offset == c.segment_base and position < c.position
        ):
            self._clean = _CleanPoint(offset, seg.base_offset, position)
            self._write_clean_point()

    # ---- properties --------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        """The first offset that can be read."""
        return self._log_start

    @property
    def last_fetched_epoch(self) -> int:
        """The latest leader epoch in the epoch cache: the epoch of the last batch, or the
        epoch a new leader started (KIP-595 ``LastFetchedEpoch``). 0 for an empty log -- epoch
        0 is the primordial epoch, which never has a leader -- or, when it starts at its latest
        snapshot, that snapshot's epoch (KAFKA-10761)."""
        epoch = self._epochs.latest_epoch
        if epoch < 0 and self._snapshots is not None:
            epoch = self._snapshots.epoch_at_start() or 0
        return epoch if epoch >= 0 else 0

    @property
    def flushed_offset(self) -> int:
        """Every offset below this was fsynced by a completed ``flush``."""
        return self._flushed_offset

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (epoch, start offset) pairs, oldest first."""
        with self._lock:
            return self._epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """The largest epoch <= ``epoch`` known to this log and the offset where it ends (the
        start of the next epoch, or the log end offset for the latest one). This is the
        question of KIP-595 fetch validation and KIP-279 truncation.

        For an epoch below every known epoch the answer is (``epoch``, the first epoch's start
        offset); for an epoch above all of them, or an empty cache, it is (last fetched epoch,
        log end offset). Returns a named tuple ``(epoch, end_offset)``.
        """
        with self._lock:
            end = self.end_offset
            result = self._epochs.end_offset_for(epoch, end)
            if result.end_offset < 0:
                return EpochEndOffset((self.last_fetched_epoch, end))
            return result

    def overwrite_batch(self, data: Any) -> tuple[int, int]:
        """Write a sound copy of a damaged batch in place (:mod:`raftcore.log.repair`)."""
        return overwrite_batch(self, data)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch of the record at ``offset`` (-1 if unknown)."""
        with self._lock:
            return self._epochs.epoch_for_offset(offset)

    # ---- appends -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self._dir} is closed")

    def initialize_leader_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` starts at the log end offset, before anything is written in it
        (a new leader does this at once, so it can answer divergence questions about its epoch
        -- Kafka KAFKA-7415)."""
        with self._lock:
            self._check_open()
            latest = self._epochs.latest_epoch
            if epoch < latest:
                raise InvalidAppendError(
                    f"log {self._dir}: epoch {epoch} is older than the latest epoch {latest}"
                )
            self._epochs.assign(epoch, self.end_offset)

    def append_as_leader(
        self,
        records: Iterable[Any],
        epoch: int,
        *,
        compression: str = "none",
        timestamp_ms: int | None = None,
        control: bool = False,
    ) -> tuple[int, int]:
        """Encode ``records`` into one batch at the end of the log, stamped with ``epoch``.

        Records are as for :func:`raftcore.records.encode_batch`. Returns (first offset,
        last offset). The epoch must not be older than the log's latest epoch.
        """
        with self._lock:
            self._check_open()
            if epoch < 0:
                raise InvalidAppendError(f"leader epoch must be >= 0, got {epoch}")
            latest = self._epochs.latest_epoch
            if epoch < latest:
                raise InvalidAppendError(
                    f"log {self._dir}: cannot append in epoch {epoch}, the log is already in "
                    f"epoch {latest}"
                )
            base = self.end_offset
            data = encode_batch(
                records,
                base_offset=base,
                leader_epoch=epoch,
                compression=compression,
                timestamp_ms=timestamp_ms,
                control=control,
            )
            if len(data) > self._config.max_message_bytes:
                raise RecordTooLargeError(
                    f"log {self._dir}: a batch of {len(data)} bytes exceeds max_message_bytes "
                    f"{self._config.max_message_bytes}"
                )
            scan = scan_batches(data, check_crc=False)
            self._write(data, scan, verify=False)
            return base, int(scan.last_offsets[0])

    def append_batches_as_leader(
        self, batches: bytes | bytearray | memoryview, epoch: int, *, checked: Any = None
    ) -> tuple[int, int]:
        """Append batches a producer built: they get offsets from the log end and ``epoch``
        (both outside the CRC, so it stays valid). Nothing is written unless every batch is
        sound. Returns (first offset, last offset).

        ``checked`` is the scan of ``batches`` made when every batch's CRC and records were
        checked before (produce validation): the batches are then restamped where they lie
        (in ``batches`` itself when it is writable) and written without a second walk or CRC
        check. Without it, a copy is restamped, scanned and CRC-checked as it is written."""
        with self._lock:
            self._check_open()
            latest = self._epochs.latest_epoch
            if epoch < max(latest, 0):
                raise InvalidAppendError(
                    f"log {self._dir}: cannot append in epoch {epoch}, the log is already in "
                    f"epoch {latest}"
                )
            base = self.end_offset
            data: Any = None
            if checked is None:
                data, _ = restamp_batches(batches, base, epoch)
                scan = scan_batches(data, check_crc=False)
            else:
                scan = checked  # restamped in place below, once the checks pass
            scan.raise_error()
            if scan.count == 0:
                raise InvalidAppendError(f"log {self._dir}: no batches to append")
            # one batch per produce is the common case: numpy's max costs more than the rest
            biggest = int(scan.sizes[0]) if scan.count == 1 else int(scan.sizes.max())
            if biggest > self._config.max_message_bytes:
                raise RecordTooLargeError(
                    f"log {self._dir}: a batch of {biggest} bytes exceeds max_message_bytes "
                    f"{self._config.max_message_bytes}"
                )
            if checked is not None:
                data, _ = restamp_scanned(batches, scan, base, epoch)
            self._write(data, scan, verify=checked is None)
            return base, int(scan.last_offsets[-1])

    def append_as_follower(
        self, batches: bytes | bytearray | memoryview, *, checked: Any = None
    ) -> tuple[int, int] | None:
        """Append whole batches that already carry offsets and epochs (as a follower copies the
        leader's log). Every batch must pass its CRC check; the first must start at the log
        end offset, each next one must follow the one before, and leader epochs must not
        decrease. Nothing is written unless every batch passes.

        ``checked`` is the scan of ``batches`` made when every batch's CRC and records were
        checked before (a follower's check of what the leader sent): the batches are written
        without a second walk or CRC check.

        Returns (first offset, last offset), or None for an empty buffer.
        """
        with self._lock:
            self._check_open()
            # Structure first (headers only); the CRCs are checked as the bytes are written.
            scan = scan_batches(batches, check_crc=False) if checked is None else checked
            if scan.error is not None:
                raise CorruptRecordError(
                    f"log {self._dir}: refusing a follower append: {scan.error}",
                    scan.error_position,
                )
            if scan.count == 0:
                return None
            end = self.end_offset
            problem = first_discontinuity(scan, end)
            if problem is not None:
                raise InvalidAppendError(
                    f"log {self._dir}: refusing a follower append: {problem[1]}"
                )
            first_epoch = int(scan.epochs[0])
            if first_epoch < 0:
                raise InvalidAppendError(
                    f"log {self._dir}: batch at offset {end} has no leader epoch ({first_epoch})"
                )
            if first_epoch < self._last_batch_epoch:
                raise InvalidAppendError(
                    f"log {self._dir}: batch at offset {end} has leader epoch {first_epoch}, "
                    f"older than the log's last batch epoch {self._last_batch_epoch}"
                )
            self._write(batches, scan, verify=checked is None)
            return end, int(scan.last_offsets[-1])

    def _write(self, data: Any, scan: Any, *, verify: bool) -> None:
        """Write the scanned batches, rolling segments as they fill, then record their epochs.
        With ``verify``, CRCs are checked and nothing is kept unless every batch passes."""
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        ends = scan.positions + scan.sizes
        seg_bytes = self._config.segment_bytes
        seg = self._segments[-1]
        total = int(ends[-1] - scan.positions[0])
        fits = (seg.size == 0 or seg.size + total <= seg_bytes) and int(
            scan.last_offsets[-1]
        ) - seg.base_offset <= INT32_MAX
        if verify and not fits:
            # Spanning segments: check everything before writing anything, so that a bad batch
            # never leaves an earlier segment half-extended.
            bad = check_batch_crcs(view, int(scan.positions[0]), int(ends[-1]))
            if bad >= 0:
                raise CorruptRecordError(
                    f"log {self._dir}: refusing a follower append: the batch at byte {bad} of "
                    f"the input fails its CRC check",
                    bad,
                )
            verify = False
        i, n = 0, scan.count
        observer = self._observer
        if fits:
            seg.append(view, scan, 0, n, self._config.index_interval_bytes, verify=verify)
            if observer is not None:
                observer.appended(scan, 0, n)
            i = n
        while i < n:
            seg = self._segments[-1]
            room = seg_bytes - seg.size
            used = ends[i:] - scan.positions[i]
            j = i + int(np.searchsorted(used, room, side="right"))
            # Relative offsets in the index are int32: roll before they would overflow.
            j = min(
                j,
                i
                + int(
                    np.searchsorted(
                        scan.last_offsets[i:], seg.base_offset + INT32_MAX, side="right"
                    )
                ),
            )
            if j == i:
                if seg.size == 0:
                    j = i + 1  # a batch larger than a segment gets a segment of its own
                else:
                    self._roll()
                    continue
            seg.append(view, scan, i, j, self._config.index_interval_bytes, verify=verify)
            if observer is not None:
                observer.appended(scan, i, j)
            i = j
        for epoch, start in _epoch_changes(scan, scan.count):
            self._epochs.assign(epoch, start)
        self._last_batch_epoch = int(scan.epochs[-1])
        self._unchecked_bytes += total

    def roll(self) -> bool:
        """Seal the active segment now and start a new one (Kafka's ``segment.ms``), unless
        it is empty. Whether it rolled."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size == 0:
                return False
            self._roll()
            return True

    def _roll(self) -> None:
        """Start a new segment at the log end offset. The finished segment is fsynced and its
        index written, and the clean point moves to the new segment."""
        old = self._segments[-1]
        old.finish()
        new = _Segment.create(self._dir, old.next_offset, self._config.segment_bytes)
        fsync_directory(self._dir)
        self._dir_dirty = False
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._generation += 1
        self._clean = _CleanPoint(new.base_offset, new.base_offset, 0)
        self._write_clean_point()
        if self._observer is not None:
            self._observer.rolled(new.base_offset)

    # ---- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = 1 << 20) -> memoryview:
        """Whole batches starting with the batch that holds ``offset``: as many as fit in
        ``max_bytes``, but at least one, and never past the end of that batch's segment.

        Returns a zero-copy, read-only memoryview (empty at the log end offset). Raises
        OffsetOutOfRangeError for an offset below the log start or above the log end.
        """
        with self._lock:
            self._check_open()
            end = self.end_offset
            if offset < self._log_start or offset > end:
                raise OffsetOutOfRangeError(
                    f"log {self._dir}: offset {offset} is outside [{self._log_start}, {end}]"
                )
            if offset == end:
                return memoryview(b"")
            i = bisect.bisect_right(self._bases, offset) - 1
            seg = self._segments[i]
            while seg.next_offset <= offset:  # an empty segment: the data is in the next one
                i += 1
                seg = self._segments[i]
            m = seg.map()
            position = seg.find_position(offset)
            stop = span_batches(m, position, seg.size, max(max_bytes, 1))
            return m.view(position, stop)

    def batches(self, start_offset: int | None = None) -> Iterator[RecordBatch]:
        """Iterate every batch from the one holding ``start_offset`` (default: the log start)
        to the end of the log, as zero-copy RecordBatch views (positions are file positions)."""
        with self._lock:
            self._check_open()
            offset = self._log_start if start_offset is None else start_offset
            plan = []
            for seg in self._segments:
                if seg.next_offset <= offset or seg.size == 0:
                    continue
                m = seg.map()
                position = seg.find_position(max(offset, seg.base_offset))
                plan.append((m.view(position, seg.size), position))
        for view, position in plan:
            yield from iter_batches(view, position)

    # ---- snapshots (KIP-630): the SnapshotLog protocol, done by raftcore.log.snapshots ------

    def _snapshot_store(self) -> LogSnapshots:
        if self._snapshots is None:
            raise LogClosedError(f"log {self._dir} is not open")
        return self._snapshots

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshot_store().latest_id()

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshot_store().earliest_id()

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return self._snapshot_store().ids()

    def create_new_snapshot(
        self,
        snapshot_id: OffsetAndEpoch,
        *,
        last_contained_log_timestamp: int | None = None,
        header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> LogSnapshotWriter | None:
        """``header_records``: the KRaftVersion and Voters records in force at the snapshot's
        end (KIP-853), written after its header."""
        return self._snapshot_store().create(
            snapshot_id, last_contained_log_timestamp, header_records
        )

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> LogRawSnapshotWriter | None:
        return self._snapshot_store().create_unchecked(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> LogSnapshotReader | None:
        return self._snapshot_store().read(snapshot_id)

    def check_snapshot(self, snapshot_id: OffsetAndEpoch, when: str) -> bool:
        """Verify every CRC of the snapshot (header, data batches, footer) now, before it is
        served; a damaged one is set aside (False)."""
        return self._snapshot_store().check(snapshot_id, when, records=False)

    def snapshot_damaged(self, snapshot_id: OffsetAndEpoch) -> bool:
        return self._snapshot_store().is_damaged(snapshot_id)

    def damaged_snapshot_header(self, snapshot_id: OffsetAndEpoch) -> Any:
        """A damaged snapshot's header batch, if intact (LogSnapshots.damaged_header)."""
        return self._snapshot_store().damaged_header(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        return self._snapshot_store().delete_before(snapshot_id)

    def truncate_to_latest_snapshot(self) -> bool:
        return self._snapshot_store().truncate_to_latest()

    # ---- durability --------------------------------------------------------------------------

    def flush(self) -> int:
        """Make everything appended so far durable (fsync of the segment files, and of the
        directory when segments were created or deleted). The lock is not held during the
        fsyncs, so appends go on meanwhile. Returns the offset below which the log is now
        durable."""
        with self._lock:
            self._check_open()
            target = self.end_offset
            generation = self._generation
            active = self._segments[-1]
            candidate = _CleanPoint(target, active.base_offset, active.size)
            fds = []
            try:
                for seg in self._segments:
                    if seg.dirty:
                        fds.append(os.dup(seg.fd))
                        seg.dirty = False
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
        try:
            for fd in fds:
                os.fsync(fd)
            if dir_dirty:
                fsync_directory(self._dir)
        except BaseException:
            with self._lock:
                for seg in self._segments:
                    seg.dirty = seg.fd >= 0
                self._dir_dirty = True
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if generation == self._generation and target > self._flushed_offset:
                self._flushed_offset = target
                # Bound the work of recovery: move the clean point up to what is now durable.
                if self._unchecked_bytes >= self._config.recovery_checkpoint_bytes:
                    self._clean = candidate
                    self._write_clean_point()
            return self._flushed_offset

    def close(self) -> None:
        """Flush, write the indexes and the clean point, and release the directory. Views
        handed out earlier stay readable."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
                for seg in self._segments:
                    seg.persist_index()
                active = self._segments[-1]
                self._clean = _CleanPoint(active.next_offset, active.base_offset, active.size)
                self._write_clean_point()
                if self._observer is not None:
                    self._observer.closing(active.next_offset)
            finally:
                if self._snapshots is not None:
                    self._snapshots.close()
                for seg in self._segments:
                    seg.close_fd()
                    seg.drop_mapping()
                self._closed = True
                self._release_directory_lock()

    def abandon(self) -> None:
        """Close without writing anything more -- no fsync, no index, no clean point -- and
        release the directory: what a node does after a failure it cannot go on from (after a
        failed fsync the page cache may hold what never reached the disk; an fsync that then
        succeeds, or a clean point written past it, would vouch for it). The next open
        recovers the log from its last clean point, as after a crash. Views handed out
        earlier stay readable."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._snapshots is not None:
                    self._snapshots.close()
            finally:
                for seg in self._segments:
                    seg.close_fd()
                    seg.drop_mapping()
                self._closed = True
                self._release_directory_lock()

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SegmentedLog({str(self._dir)!r}, start={self._log_start}, end={self.end_offset}, "
            f"segments={len(self._segments)}, epoch={self.last_fetched_epoch})"
        )
