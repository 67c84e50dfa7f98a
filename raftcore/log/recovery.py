"""Opening a log directory: the directory lock, and recovery from an unclean shutdown.

Recovery (see docs/storage-format.md) trusts what lies before the clean point and checks every
batch after it; it cuts a torn or corrupt tail, deletes what an interrupted operation left
behind, rebuilds indexes and repairs the leader-epoch cache. It builds the state that a
:class:`~raftcore.log.SegmentedLog` then owns.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from raftcore._native.records import scan_batches
from raftcore._native.segment import MappedFile, check_index, index_entries, index_floor_position
from raftcore.checkpoint import TMP_SUFFIX
from raftcore.epoch_cache import LeaderEpochFileCache
from raftcore.errors import CorruptCheckpointError, LogError
from raftcore.log.checkpoints import _CleanPoint, read_clean_point, read_log_start_offset
from raftcore.log.config import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOCK_FILE,
    LOG_SUFFIX,
    LogConfig,
    segment_file_prefix,
)
from raftcore.log.segment import (
    _epoch_changes,
    _Segment,
    entries_before,
    find_last_batch_epoch,
    first_discontinuity,
)

logger = logging.getLogger(__name__)


def lock_directory(directory: Path) -> int:
    """Take the directory's ``.lock`` (flock), so that one log at a time has it open. Returns
    the descriptor that holds the lock; closing it releases the directory."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogError(f"log directory {directory} is in use by another log instance") from None
    return fd


@dataclass(slots=True)
class RecoveredLog:
    """What recovery found: contiguous, checked segments (the last one open for writing), the
    log start offset, the repaired epoch cache and the epoch of the last batch.
    ``dir_dirty``: files were created or deleted, so the directory still needs an fsync."""

    segments: list[_Segment]
    log_start: int
    epochs: LeaderEpochFileCache
    last_batch_epoch: int
    dir_dirty: bool


def recover(directory: Path, config: LogConfig) -> RecoveredLog:
    """Recover the log in ``directory`` (which the caller has locked)."""
    return _Recovery(directory, config).run()


class _Recovery:
    """One recovery of one directory."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self._dir = directory
        self._config = config
        self._dir_dirty = False

    def run(self) -> RecoveredLog:
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

        log_start = read_log_start_offset(d)
        clean = read_clean_point(d)

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
        # The last segment is the active one: it needs a writable descriptor.
        active = segments[-1]
        active.reopen_writable(self._config.segment_bytes)

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

        epochs = self._load_epoch_cache(segments, log_start, epoch_changes)
        last_batch_epoch = find_last_batch_epoch(segments)
        return RecoveredLog(segments, log_start, epochs, last_batch_epoch, self._dir_dirty)

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
                    entries, seg.bytes_since_index = index_entries(
                        walk.positions, walk.sizes, walk.last_offsets, base, 0, interval
                    )
                    index = bytearray(entries)
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

    def _load_epoch_cache(
        self, segments: list[_Segment], log_start: int, epoch_changes: list[tuple[int, int]]
    ) -> LeaderEpochFileCache:
        end = segments[-1].next_offset
        try:
            cache = LeaderEpochFileCache(self._dir)
            complete = True
        except CorruptCheckpointError as exc:
            logger.warning(
                "[log %s] %s; rebuilding the leader-epoch cache from the log", self._dir, exc
            )
            cache = LeaderEpochFileCache(self._dir, load=False)
            complete = False
        if complete and len(cache) == 0 and end > segments[0].base_offset:
            complete = False  # batches but no epochs: the checkpoint was lost
        if not complete:
            epoch_changes = _scan_all_epochs(segments)
            cache.clear()
        # Repair from the batches recovery checked: the cache must give each of them its own
        # epoch. Only a disagreement is assigned (an agreeing batch may belong to an epoch
        # that started earlier, in the trusted part of the log).
        for epoch, start in epoch_changes:
            if epoch >= 0 and cache.epoch_for_offset(start) != epoch:
                cache.assign(epoch, start)
        cache.truncate_from_end(end)
        cache.truncate_from_start(log_start)
        return cache


def _scan_all_epochs(segments: list[_Segment]) -> list[tuple[int, int]]:
    changes: list[tuple[int, int]] = []
    for seg in segments:
        scan = scan_batches(seg.map(), 0, seg.size, check_crc=False)
        if scan.count:
            changes.extend(_epoch_changes(scan, scan.count))
    return changes
