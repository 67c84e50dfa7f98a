"""The segmented log: Kafka record batches in size-rolled segment files, a sparse offset index
per segment, the leader-epoch cache, and crash recovery.

Directory layout (see docs/storage-format.md)::

    00000000000000000000.log     record batches, back to back
    00000000000000000000.index   sparse offset index: (relative offset, position) int32 pairs
    00000000000000004096.log     the next segment, named by its base offset
    ...
    leader-epoch-checkpoint      epoch -> start offset, Kafka's text format
    log-start-offset-checkpoint  the log start offset
    recovery-point-checkpoint    the clean point: bytes before it are durable and checked
    .lock                        held (flock) while the log is open

Invariants kept by every operation:
- segments are contiguous: each segment's base offset is the previous segment's end offset;
- batches within the log have contiguous offsets and non-decreasing leader epochs;
- the log start offset lies in [first segment's base, end offset];
- everything before the recovery point is fsynced and was CRC-checked (by the writer or by
  recovery); recovery checks everything after it, batch by batch, and cuts a torn tail.

Reads return zero-copy memoryviews over a memory map. A view stays readable after the log
is truncated, deleted or closed (it then reads zeros where bytes were truncated away); it does
not see later appends.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import logging
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from raftcore._native.records import (
    RecordBatch,
    check_batch_crcs,
    encode_batch,
    find_batch,
    iter_batches,
    restamp_batches,
    scan_batches,
    span_batches,
)
from raftcore._native.segment import (
    MappedFile,
    check_index,
    index_entries,
    index_floor_position,
    write_at,
)
from raftcore.checkpoint import (
    TMP_SUFFIX,
    fsync_directory,
    parse_ints,
    read_checkpoint,
    write_checkpoint,
)
from raftcore.epoch_cache import EpochEndOffset, LeaderEpochFileCache
from raftcore.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    InvalidAppendError,
    LogClosedError,
    LogError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)

__all__ = ["LogConfig", "SegmentedLog"]

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
DELETED_SUFFIX = ".deleted"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
LOCK_FILE = ".lock"
CHECKPOINT_VERSION = 0
INT32_MAX = 0x7FFFFFFF
# Appends that CRC-check their input do it in pieces of this size, right after writing each
# piece, while its bytes are still in the CPU's last-level cache (see _Segment.append). Smaller
# pieces would stay in L2 but cost more write calls, which is the worse trade on ext4.
VERIFY_PIECE_BYTES = 4 << 20


def segment_file_prefix(base_offset: int) -> str:
    """Kafka's segment file name: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


_KAFKA_LOG_CONFIG_NAMES = {
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Configuration of a segmented log; Kafka's names (``segment.bytes`` is
    ``segment_bytes``) and defaults, except where noted.

    - ``segment_bytes``: roll to a new segment when the active one would grow past this
      (Kafka ``segment.bytes``, default 1 GiB).
    - ``index_interval_bytes``: bytes appended between two offset-index entries
      (Kafka ``index.interval.bytes``, default 4096).
    - ``max_message_bytes``: the largest batch ``append_as_leader`` accepts. Default 8 MiB,
      KRaft's largest batch (Kafka's topic default is 1 MiB).
    - ``recovery_checkpoint_bytes``: after a flush, move the recovery point forward when at
      least this many bytes were made durable since it last moved (bounds the work of recovery
      after a crash). Default 64 MiB.
    """

    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    max_message_bytes: int = 8 << 20
    recovery_checkpoint_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"log config {f.name} must be an int, got {value!r}")
        if not 128 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(
                f"segment_bytes must be in [128, {INT32_MAX}], got {self.segment_bytes}"
            )
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        if self.max_message_bytes < 61:
            raise ValueError(f"max_message_bytes must be >= 61, got {self.max_message_bytes}")
        if self.recovery_checkpoint_bytes < 0:
            raise ValueError("recovery_checkpoint_bytes must be >= 0")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> LogConfig:
        """Build from Kafka-style names (``segment.bytes``) or field names."""
        kwargs: dict[str, int] = {}
        names = {f.name for f in fields(cls)}
        for key, value in props.items():
            name = _KAFKA_LOG_CONFIG_NAMES.get(key, key)
            if name not in names:
                raise ValueError(f"unknown log config {key!r}")
            kwargs[name] = int(value)
        return cls(**kwargs)


class _Segment:
    """One segment: its ``.log`` file (written with pwrite, read through a memory map) and its
    sparse offset index, kept in memory and written to the ``.index`` file lazily (an index is
    rebuilt by recovery, so it needs no fsync of its own)."""

    __slots__ = (
        "base_offset",
        "bytes_since_index",
        "capacity",
        "dirty",
        "fd",
        "index",
        "index_path",
        "index_persisted",
        "log_path",
        "mapping",
        "next_offset",
        "old_mappings",
        "size",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        fd: int,
        size: int,
        next_offset: int,
        index: bytearray,
        index_persisted: int,
        capacity: int,
    ) -> None:
        prefix = segment_file_prefix(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / (prefix + LOG_SUFFIX)
        self.index_path = directory / (prefix + INDEX_SUFFIX)
        self.fd = fd
        self.size = size
        self.next_offset = next_offset
        self.index = index
        self.index_persisted = index_persisted
        self.bytes_since_index = 0
        self.capacity = capacity
        self.mapping: MappedFile | None = None
        # Earlier mappings that may still back views: all are retired before the file shrinks.
        self.old_mappings: list[weakref.ref[MappedFile]] = []
        self.dirty = False

    @classmethod
    def create(cls, directory: Path, base_offset: int, capacity: int) -> _Segment:
        prefix = segment_file_prefix(base_offset)
        fd = os.open(directory / (prefix + LOG_SUFFIX), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / (prefix + INDEX_SUFFIX))
        return cls(
            directory,
            base_offset,
            fd=fd,
            size=0,
            next_offset=base_offset,
            index=bytearray(),
            index_persisted=0,
            capacity=capacity,
        )

    @property
    def index_entries(self) -> int:
        return len(self.index) // 8

    def map(self) -> MappedFile:
        """The mapping for reads. The active segment is mapped past the end of its file, up to
        ``capacity``, so that appends only move the exported size."""
        m = self.mapping
        if m is None or m.capacity < self.size:
            self.drop_mapping()
            if self.fd >= 0:
                m = MappedFile(self.fd, self.size, max(self.capacity, self.size))
            else:
                fd = os.open(self.log_path, os.O_RDONLY)
                try:
                    m = MappedFile(fd, self.size, self.size)
                finally:
                    os.close(fd)
            self.mapping = m
        elif m.size < self.size:
            m.set_size(self.size)
        return m

    def drop_mapping(self) -> None:
        """Stop using the current mapping; remember it while views of it may live."""
        m = self.mapping
        if m is not None:
            if m.exports:
                self.old_mappings = [r for r in self.old_mappings if r() is not None]
                self.old_mappings.append(weakref.ref(m))
            self.mapping = None

    def retire_mappings(self, position: int) -> None:
        """Before the file shrinks to ``position``: make every mapping that may back a view
        safe from the lost pages."""
        self.drop_mapping()
        for ref in self.old_mappings:
            m = ref()
            if m is not None:
                m.retire(position)
        self.old_mappings = []

    def finish(self) -> None:
        """The segment stops being the active one: make it durable and read-only."""
        self.persist_index()
        os.fsync(self.fd)
        self.dirty = False
        self.close_fd()
        self.capacity = self.size
        if self.mapping is not None and self.mapping.capacity > self.size:
            self.drop_mapping()  # remapped at its exact size when next read

    def append(
        self, data: memoryview, scan: Any, lo: int, hi: int, interval: int, *, verify: bool
    ) -> None:
        """Write batches [lo, hi) of ``scan`` (whose positions index ``data``) at the end.

        With ``verify``, every batch's CRC is checked after its bytes are written but before
        they become visible (size, end offset, index): the check then reads bytes the write just
        brought into the CPU cache. A failed check cuts the file back to where this append began
        and raises; nothing was exposed. (A crash in between leaves the bytes past the clean
        point, where recovery checks them again.)
        """
        start = int(scan.positions[lo])
        end = int(scan.positions[hi - 1] + scan.sizes[hi - 1])
        position = self.size
        try:
            piece = start
            while piece < end:
                stop = min(end, piece + VERIFY_PIECE_BYTES) if verify else end
                if verify and stop < end:
                    # cut on a batch boundary
                    k = int(np.searchsorted(scan.positions, stop, side="right")) - 1
                    stop = max(int(scan.positions[k]), int(scan.positions[lo]))
                    if stop <= piece:
                        stop = int(scan.positions[k] + scan.sizes[k])
                write_at(self.fd, data[piece:stop], position + (piece - start))
                if verify:
                    bad = check_batch_crcs(data, piece, stop)
                    if bad >= 0:
                        raise CorruptRecordError(
                            f"refusing an append to segment {self.base_offset}: the batch at "
                            f"byte {bad} of the input fails its CRC check",
                            bad,
                        )
                piece = stop
        except BaseException:
            # Do not leave a partial or unchecked batch behind: cut back to where we began.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, position)
            raise
        shift = position - start
        entries, self.bytes_since_index = index_entries(
            scan.positions[lo:hi] + shift,
            scan.sizes[lo:hi],
            scan.last_offsets[lo:hi],
            self.base_offset,
            self.bytes_since_index,
            interval,
        )
        self.index += entries
        self.size = position + (end - start)
        self.next_offset = int(scan.last_offsets[hi - 1]) + 1
        self.dirty = True
        if self.mapping is not None and self.mapping.capacity >= self.size:
            self.mapping.set_size(self.size)

    def find_position(self, offset: int) -> int:
        """Position of the batch holding ``offset`` (or of the end, if none does)."""
        m = self.map()
        start = index_floor_position(self.index, self.index_entries, offset - self.base_offset)
        return find_batch(m, offset, start, self.size)

    def persist_index(self) -> None:
        """Write index entries not yet in the ``.index`` file."""
        if self.index_persisted == len(self.index):
            return
        flags = os.O_WRONLY | os.O_CREAT
        fd = os.open(self.index_path, flags, 0o644)
        try:
            write_at(fd, memoryview(self.index)[self.index_persisted :], self.index_persisted)
            os.ftruncate(fd, len(self.index))
        finally:
            os.close(fd)
        self.index_persisted = len(self.index)

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the segment at a batch boundary; ``next_offset`` is the offset that follows."""
        # Views handed out before must not fault on the pages the file is about to lose.
        self.retire_mappings(position)
        os.ftruncate(self.fd, position)
        keep = entries_before(self.index, position)
        del self.index[keep * 8 :]
        if self.index_persisted > len(self.index):
            self.index_persisted = len(self.index)
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.index_path, len(self.index))
        self.size = position
        self.next_offset = next_offset
        self.bytes_since_index = 0
        self.dirty = True

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Remove the files. Outstanding views keep their pages (the mapping outlives the
        unlinked file)."""
        self.close_fd()
        self.drop_mapping()
        for path in (self.log_path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def __repr__(self) -> str:
        return (
            f"_Segment(base={self.base_offset}, next={self.next_offset}, size={self.size}, "
            f"index_entries={self.index_entries})"
        )


def entries_before(index: bytearray, position: int) -> int:
    """How many leading index entries point before byte ``position`` (positions increase)."""
    keep = len(index) // 8
    while keep > 0 and int.from_bytes(index[keep * 8 - 4 : keep * 8], "big") >= position:
        keep -= 1
    return keep


def _epoch_changes(scan: Any, n: int) -> list[tuple[int, int]]:
    """(epoch, start offset) for the first of the first ``n`` scanned batches and for every
    batch whose leader epoch differs from the one before it."""
    if n == scan.count:
        return scan.epoch_starts
    return [(e, s) for e, s in scan.epoch_starts if s <= int(scan.base_offsets[n - 1])]


def first_discontinuity(scan: Any, expected_first: int) -> tuple[int, str] | None:
    """Index of the first scanned batch that does not follow its predecessor (offsets
    contiguous, leader epochs non-decreasing), with the reason; None if all follow."""
    first = int(scan.base_offsets[0])
    if first != expected_first:
        return 0, f"batch at offset {first} where offset {expected_first} was expected"
    if scan.discontinuity < 0:
        return None
    return scan.discontinuity, scan.discontinuity_reason


@dataclass(frozen=True, slots=True)
class _CleanPoint:
    """Bytes of segment ``segment_base`` before ``position`` -- and all earlier segments -- are
    durable and were checked; ``offset`` is the offset at that position."""

    offset: int
    segment_base: int
    position: int


class SegmentedLog:
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
        fd = os.open(self._dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogError(f"log directory {self._dir} is in use by another log instance") from None
        self._lock_fd = fd

    def _release_directory_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _load(self) -> None:
        d = self._dir
        for p in list(d.iterdir()):
            if p.name.endswith((DELETED_SUFFIX, TMP_SUFFIX)):
                logger.info("[log %s] removing leftover %s", d, p.name)
                p.unlink()
        bases = []
        for p in d.glob("*" + LOG_SUFFIX):
            stem = p.name[: -len(LOG_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                bases.append(int(stem))
            else:
                logger.warning("[log %s] ignoring file with a foreign name: %s", d, p.name)
        bases.sort()
        known = {segment_file_prefix(b) for b in bases}
        for p in d.glob("*" + INDEX_SUFFIX):
            if p.name[: -len(INDEX_SUFFIX)] not in known:
                logger.info("[log %s] removing index without a segment: %s", d, p.name)
                p.unlink()

        log_start = self._read_log_start_offset()
        clean = self._read_clean_point()

        # Segments wholly below the log start offset are leftovers of an interrupted deletion.
        if log_start is not None:
            while len(bases) > 1 and bases[1] <= log_start:
                logger.info(
                    "[log %s] deleting segment %d below the log start offset %d",
                    d,
                    bases[0],
                    log_start,
                )
                self._unlink_segment_files(bases.pop(0))

        epoch_changes: list[tuple[int, int]] = []
        segments: list[_Segment] = []
        for i, base in enumerate(bases):
            is_last = i == len(bases) - 1
            expected = segments[-1].next_offset if segments else None
            if expected is not None and base != expected:
                logger.warning(
                    "[log %s] segment %d does not start at the previous segment's end %d; "
                    "deleting it and the %d segments after it",
                    d,
                    base,
                    expected,
                    len(bases) - i - 1,
                )
                for b in bases[i:]:
                    self._unlink_segment_files(b)
                break
            seg, torn = self._recover_segment(base, is_last, clean, epoch_changes)
            segments.append(seg)
            if torn and not is_last:
                logger.warning(
                    "[log %s] deleting the %d segments after the torn segment %d",
                    d,
                    len(bases) - i - 1,
                    base,
                )
                for b in bases[i + 1 :]:
                    self._unlink_segment_files(b)
                break

        if not segments:
            start = log_start if log_start is not None else 0
            segments.append(_Segment.create(d, start, self._config.segment_bytes))
            self._dir_dirty = True
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        # The last segment is the active one: it needs a writable descriptor.
        active = segments[-1]
        self._reopen_writable(active)

        first = segments[0].base_offset
        end = active.next_offset
        if log_start is None or log_start < first:
            log_start = first
        if log_start > end:
            logger.warning(
                "[log %s] log start offset %d is past the recovered end %d; using %d",
                d,
                log_start,
                end,
                end,
            )
            log_start = end
        self._log_start = log_start
        self._flushed_offset = end

        self._epochs = self._load_epoch_cache(epoch_changes)
        self._last_batch_epoch = self._find_last_batch_epoch()

        # Everything is now checked: record that, so the next open need not scan it again.
        self._clean = _CleanPoint(end, active.base_offset, active.size)
        self.flush()
        self._write_clean_point()
        self._write_log_start_offset()

    def _unlink_segment_files(self, base: int) -> None:
        prefix = segment_file_prefix(base)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._dir / (prefix + suffix))
        self._dir_dirty = True

    def _recover_segment(
        self,
        base: int,
        is_last: bool,
        clean: _CleanPoint | None,
        epoch_changes: list[tuple[int, int]],
    ) -> tuple[_Segment, bool]:
        """Open one segment, trusting what lies before the clean point and checking every batch
        after it. Returns the segment and whether a torn or corrupt tail was cut off."""
        d = self._dir
        prefix = segment_file_prefix(base)
        log_path = d / (prefix + LOG_SUFFIX)
        fd = os.open(log_path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            m = MappedFile(fd, size, size)
        finally:
            os.close(fd)
        if clean is None or base > clean.segment_base:
            trusted = 0
        elif base < clean.segment_base:
            trusted = size
        else:
            trusted = clean.position if clean.position <= size else 0
        seg = _Segment(
            d,
            base,
            fd=-1,
            size=size,
            next_offset=base,
            index=bytearray(),
            index_persisted=0,
            capacity=size,
        )
        seg.mapping = m
        interval = self._config.index_interval_bytes

        # The trusted prefix: take the index from disk (or rebuild it) and find the offset at
        # the trusted position by walking batch headers from the last index entry.
        if trusted:
            loaded = self._load_index(seg, trusted)
            index = loaded if loaded is not None else bytearray()
            start = index_floor_position(index, len(index) // 8, INT32_MAX)
            walk = scan_batches(m, start, trusted, check_crc=False)
            if walk.error is not None or walk.valid_end != trusted or walk.count == 0:
                logger.warning(
                    "[log %s] segment %d is damaged before its clean point (%s); "
                    "checking all of it",
                    d,
                    base,
                    walk.error or "no batches",
                )
                trusted = 0
            else:
                if loaded is None:
                    index, seg.bytes_since_index = index_entries(
                        walk.positions, walk.sizes, walk.last_offsets, base, 0, interval
                    )
                    index = bytearray(index)
                seg.index = index
                seg.index_persisted = len(index) if loaded is not None else 0
                seg.next_offset = int(walk.last_offsets[-1]) + 1

        # The unchecked rest: every batch must pass its CRC check and follow the one before.
        torn = False
        if trusted < size:
            scan = scan_batches(m, trusted, size, check_crc=True)
            n, valid_end, reason = scan.count, scan.valid_end, scan.error
            if n:
                problem = first_discontinuity(scan, seg.next_offset)
                if problem is not None:
                    n, reason = problem
                    valid_end = int(scan.positions[n])
            if n:
                entries, seg.bytes_since_index = index_entries(
                    scan.positions[:n],
                    scan.sizes[:n],
                    scan.last_offsets[:n],
                    base,
                    seg.bytes_since_index,
                    interval,
                )
                seg.index += entries
                seg.next_offset = int(scan.last_offsets[n - 1]) + 1
                epoch_changes.extend(_epoch_changes(scan, n))
            if valid_end < size:
                torn = True
                logger.warning(
                    "[log %s] truncating segment %d at byte %d (offset %d), dropping %d bytes: %s",
                    d,
                    base,
                    valid_end,
                    seg.next_offset,
                    size - valid_end,
                    reason,
                )
                seg.retire_mappings(valid_end)
                wfd = os.open(log_path, os.O_RDWR)
                try:
                    os.ftruncate(wfd, valid_end)
                    os.fsync(wfd)
                finally:
                    os.close(wfd)
                seg.size = seg.capacity = valid_end
            seg.index_persisted = 0  # the index on disk may describe lost bytes: rewrite it
        return seg, torn

    def _load_index(self, seg: _Segment, trusted: int) -> bytearray | None:
        """The segment's index from disk, cut to entries inside the trusted bytes; None when it
        is missing or unsound (then it is rebuilt)."""
        try:
            raw = seg.index_path.read_bytes()
        except FileNotFoundError:
            logger.info(
                "[log %s] index of segment %d is missing; rebuilding it", self._dir, seg.base_offset
            )
            return None
        usable = len(raw) - len(raw) % 8
        index = bytearray(raw[:usable])
        # Keep the entries that point inside the trusted part.
        keep = entries_before(index, trusted)
        del index[keep * 8 :]
        problem = check_index(index, trusted) if trusted else None
        if problem is not None or usable != len(raw):
            logger.warning(
                "[log %s] index of segment %d is corrupt (%s); rebuilding it",
                self._dir,
                seg.base_offset,
                problem or f"{len(raw) % 8} stray bytes",
            )
            return None
        return index

    def _reopen_writable(self, seg: _Segment) -> None:
        """Make ``seg`` the writable, active segment (its mapping is replaced when it grows)."""
        seg.close_fd()
        seg.fd = os.open(seg.log_path, os.O_RDWR)
        seg.capacity = max(self._config.segment_bytes, seg.size)

    def _load_epoch_cache(self, epoch_changes: list[tuple[int, int]]) -> LeaderEpochFileCache:
        end = self._segments[-1].next_offset
        try:
            cache = LeaderEpochFileCache(self._dir)
            complete = True
        except CorruptCheckpointError as exc:
            logger.warning(
                "[log %s] %s; rebuilding the leader-epoch cache from the log", self._dir, exc
            )
            cache = LeaderEpochFileCache(self._dir, load=False)
            complete = False
        if complete and len(cache) == 0 and end > self._segments[0].base_offset:
            complete = False  # batches but no epochs: the checkpoint was lost
        if not complete:
            epoch_changes = self._scan_all_epochs()
            cache.clear()
        # Repair from the batches recovery checked: the cache must give each of them its own
        # epoch. Only a disagreement is assigned (an agreeing batch may belong to an epoch
        # that started earlier, in the trusted part of the log).
        for epoch, start in epoch_changes:
            if epoch >= 0 and cache.epoch_for_offset(start) != epoch:
                cache.assign(epoch, start)
        cache.truncate_from_end(end)
        cache.truncate_from_start(self._log_start)
        return cache

    def _scan_all_epochs(self) -> list[tuple[int, int]]:
        changes: list[tuple[int, int]] = []
        for seg in self._segments:
            scan = scan_batches(seg.map(), 0, seg.size, check_crc=False)
            if scan.count:
                changes.extend(_epoch_changes(scan, scan.count))
        return changes

    def _find_last_batch_epoch(self) -> int:
        for seg in reversed(self._segments):
            if seg.size == 0:
                continue
            m = seg.map()
            start = index_floor_position(seg.index, seg.index_entries, INT32_MAX)
            scan = scan_batches(m, start, seg.size, check_crc=False)
            if scan.count:
                return int(scan.epochs[-1])
        return -1

    # ---- checkpoints -------------------------------------------------------------------------

    def _read_log_start_offset(self) -> int | None:
        path = self._dir / LOG_START_OFFSET_FILE
        try:
            lines = read_checkpoint(path, CHECKPOINT_VERSION)
            if lines is None:
                return None
            if len(lines) != 1:
                raise CorruptCheckpointError(f"{path}: expected one line, got {len(lines)}")
            return parse_ints(path, lines[0], 2, 1)[0]
        except CorruptCheckpointError as exc:
            logger.warning("[log %s] %s; using the first segment's base offset", self._dir, exc)
            return None

    def _write_log_start_offset(self) -> None:
        write_checkpoint(
            self._dir / LOG_START_OFFSET_FILE, CHECKPOINT_VERSION, [str(self._log_start)]
        )

    def _read_clean_point(self) -> _CleanPoint | None:
        path = self._dir / RECOVERY_POINT_FILE
        try:
            lines = read_checkpoint(path, CHECKPOINT_VERSION)
            if lines is None:
                return None
            if len(lines) != 1:
                raise CorruptCheckpointError(f"{path}: expected one line, got {len(lines)}")
            offset, base, position = parse_ints(path, lines[0], 2, 3)
            return _CleanPoint(offset, base, position)
        except CorruptCheckpointError as exc:
            logger.warning("[log %s] %s; recovering every segment", self._dir, exc)
            return None

    def _write_clean_point(self) -> None:
        c = self._clean
        write_checkpoint(
            self._dir / RECOVERY_POINT_FILE,
            CHECKPOINT_VERSION,
            [f"{c.offset} {c.segment_base} {c.position}"],
        )
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
        0 is the primordial epoch, which never has a leader."""
        epoch = self._epochs.latest_epoch
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
        self, batches: bytes | bytearray | memoryview, epoch: int
    ) -> tuple[int, int]:
        """Append batches a producer built: they get offsets from the log end and ``epoch``
        (both outside the CRC, so it stays valid); every batch's CRC is checked, and nothing is
        written unless all pass. Returns (first offset, last offset)."""
        with self._lock:
            self._check_open()
            latest = self._epochs.latest_epoch
            if epoch < max(latest, 0):
                raise InvalidAppendError(
                    f"log {self._dir}: cannot append in epoch {epoch}, the log is already in "
                    f"epoch {latest}"
                )
            base = self.end_offset
            data, _ = restamp_batches(batches, base, epoch)
            scan = scan_batches(data, check_crc=False)
            scan.raise_error()
            if scan.count == 0:
                raise InvalidAppendError(f"log {self._dir}: no batches to append")
            biggest = int(scan.sizes.max())
            if biggest > self._config.max_message_bytes:
                raise RecordTooLargeError(
                    f"log {self._dir}: a batch of {biggest} bytes exceeds max_message_bytes "
                    f"{self._config.max_message_bytes}"
                )
            self._write(data, scan, verify=True)
            return base, int(scan.last_offsets[-1])

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> tuple[int, int] | None:
        """Append whole batches that already carry offsets and epochs (as a follower copies the
        leader's log). Every batch must pass its CRC check; the first must start at the log
        end offset, each next one must follow the one before, and leader epochs must not
        decrease. Nothing is written unless every batch passes.

        Returns (first offset, last offset), or None for an empty buffer.
        """
        with self._lock:
            self._check_open()
            # Structure first (headers only); the CRCs are checked as the bytes are written.
            scan = scan_batches(batches, check_crc=False)
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
            self._write(batches, scan, verify=True)
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
        if fits:
            seg.append(view, scan, 0, n, self._config.index_interval_bytes, verify=verify)
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
            i = j
        for epoch, start in _epoch_changes(scan, scan.count):
            self._epochs.assign(epoch, start)
        self._last_batch_epoch = int(scan.epochs[-1])
        self._unchecked_bytes += total

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

    # ---- truncation and retention ------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset`` and return the new end offset.

        Batches are never split: when ``offset`` falls inside a batch, that whole batch goes
        and the new end offset is its base offset (below ``offset``). Epoch-cache entries that
        start at or after the new end are removed too -- also when ``offset`` is at or past
        the end (KAFKA-10706). When nothing at or above the log start would remain (``offset``
        below the log start, or inside a batch that begins below it) the log is emptied and
        restarts at ``offset``, as Kafka does.
        """
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"truncation offset must be >= 0, got {offset}")
            end = self.end_offset
            if offset < self._log_start:
                self.truncate_fully_and_start_at(offset)
                return offset
            if offset >= end:
                self._epochs.truncate_from_end(offset)
                return end
            i = bisect.bisect_right(self._bases, offset) - 1
            seg = self._segments[i]
            position = seg.find_position(offset)
            if position < seg.size:
                batch = next(iter_batches(seg.map().view(position, seg.size)))
                new_end = batch.base_offset
            else:
                new_end = seg.next_offset
            if new_end < self._log_start:
                self.truncate_fully_and_start_at(offset)
                return offset
            self._lower_clean_point(seg, position, new_end)
            removed = self._segments[i + 1 :]
            for s in removed:
                s.delete()
            del self._segments[i + 1 :]
            del self._bases[i + 1 :]
            if removed:
                self._reopen_writable(seg)
                self._dir_dirty = True
            seg.truncate(position, new_end)
            self._generation += 1
            os.fsync(seg.fd)
            if self._dir_dirty:
                fsync_directory(self._dir)
                self._dir_dirty = False
            self._epochs.truncate_from_end(new_end)
            self._flushed_offset = min(self._flushed_offset, new_end)
            self._last_batch_epoch = self._find_last_batch_epoch()
            logger.info(
                "[log %s] truncated to offset %d (asked %d, end was %d)",
                self._dir,
                new_end,
                offset,
                end,
            )
            return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the empty log at ``offset``: log start offset =
        end offset = ``offset``, epoch cache cleared (as when a snapshot replaces the log)."""
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            old = self._segments
            # Mark the old segments first, so a crash in the middle leaves nothing ambiguous:
            # *.deleted files are removed on open.
            for s in old:
                s.close_fd()
                s.drop_mapping()
                for path in (s.log_path, s.index_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(path, path.with_name(path.name + DELETED_SUFFIX))
            fsync_directory(self._dir)
            self._log_start = offset
            self._write_log_start_offset()
            new = _Segment.create(self._dir, offset, self._config.segment_bytes)
            self._segments = [new]
            self._bases = [offset]
            self._epochs.clear()
            self._generation += 1
            self._last_batch_epoch = -1
            self._flushed_offset = offset
            self._clean = _CleanPoint(offset, offset, 0)
            self._write_clean_point()
            for s in old:
                for path in (s.log_path, s.index_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path.with_name(path.name + DELETED_SUFFIX))
            fsync_directory(self._dir)
            logger.info(
                "[log %s] truncated fully; the log restarts at offset %d", self._dir, offset
            )

    def set_log_start_offset(self, offset: int) -> bool:
        """Advance the log start offset to ``offset`` (never backwards; at most the end offset)
        and delete the segments that lie wholly below it. Returns whether it moved."""
        with self._lock:
            self._check_open()
            end = self.end_offset
            if offset > end:
                raise OffsetOutOfRangeError(
                    f"log {self._dir}: log start offset {offset} would pass the end offset {end}"
                )
            if offset <= self._log_start:
                return False
            self._log_start = offset
            self._write_log_start_offset()
            self._epochs.truncate_from_start(offset)
            if self._segments[-1].next_offset <= offset and self._segments[-1].size > 0:
                self._roll()
            doomed = 0
            while (
                doomed < len(self._segments) - 1
                and self._segments[doomed + 1].base_offset <= offset
            ):
                doomed += 1
            for s in self._segments[:doomed]:
                s.delete()
            if doomed:
                del self._segments[:doomed]
                del self._bases[:doomed]
                fsync_directory(self._dir)
                if self._clean.segment_base < self._segments[0].base_offset:
                    first = self._segments[0]
                    self._clean = _CleanPoint(first.base_offset, first.base_offset, 0)
                    self._write_clean_point()
            return True

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
