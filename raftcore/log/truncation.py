"""Truncation and retention of the segmented log, part of :class:`SegmentedLog`: a follower
truncating a diverged suffix (whole batches only), a full truncation when a snapshot replaces
the log, and the log start offset moving forward with the segments wholly below it deleted.
Each keeps the package's invariants: checkpoints durable before the files they describe go,
``*.deleted`` names for what a crash may leave half removed."""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from raftcore._native.records import iter_batches
from raftcore.checkpoint import fsync_directory
from raftcore.errors import OffsetOutOfRangeError
from raftcore.log.checkpoints import _CleanPoint
from raftcore.log.config import DELETED_SUFFIX
from raftcore.log.producer_snapshots import delete_producer_snapshots_above
from raftcore.log.segment import _Segment, find_last_batch_epoch

__all__ = ["TruncationAndRetention"]

logger = logging.getLogger("raftcore.log.segmented_log")


class TruncationAndRetention:
    """Mixed into SegmentedLog, whose state it changes under its lock."""

    _lock: Any
    _dir: Any
    _config: Any
    _segments: list[Any]
    _bases: list[int]
    _epochs: Any
    _log_start: int
    _generation: int
    _flushed_offset: int
    _last_batch_epoch: int
    _clean: Any
    _dir_dirty: bool
    _snapshots: Any
    _observer: Any
    end_offset: Any

    if TYPE_CHECKING:  # SegmentedLog's own methods, which these steps call

        def _check_open(self) -> None: ...
        def _roll(self) -> None: ...
        def _write_log_start_offset(self) -> None: ...
        def _write_clean_point(self) -> None: ...
        def _lower_clean_point(self, seg: _Segment, position: int, offset: int) -> None: ...

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
                seg.reopen_writable(self._config.segment_bytes)
                self._dir_dirty = True
            seg.truncate(position, new_end)
            self._generation += 1
            os.fsync(seg.fd)
            if self._dir_dirty:
                fsync_directory(self._dir)
                self._dir_dirty = False
            self._epochs.truncate_from_end(new_end)
            self._flushed_offset = min(self._flushed_offset, new_end)
            self._last_batch_epoch = find_last_batch_epoch(self._segments)
            if self._observer is not None:
                self._observer.truncated(new_end)
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
        end offset = ``offset``, epoch cache cleared, snapshots below ``offset`` deleted (as
        when a snapshot replaces the log)."""
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            old = self._segments
            # Producer-state files describe the old log: they go first, observer or not (a
            # snapshot ahead of the log is installed at open, before any observer).
            delete_producer_snapshots_above(self._dir, -1)
            # Mark the old segments first, so a crash in the middle leaves nothing ambiguous:
            # *.deleted files are removed on open.
            for s in old:
                s.close_fd()
                s.drop_mapping()
                for path in (s.log_path, s.index_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(path, path.with_name(path.name + DELETED_SUFFIX))
            fsync_directory(self._dir)
            # Epochs before the log start offset: a crash between them leaves no stale epoch
            # on an empty log at the new start.
            self._epochs.clear()
            self._log_start = offset
            self._write_log_start_offset()
            new = _Segment.create(self._dir, offset, self._config.segment_bytes)
            self._segments = [new]
            self._bases = [offset]
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
            if self._snapshots is not None:  # after the log start offset is durable
                self._snapshots.forget_below(offset)
            if self._observer is not None:
                self._observer.restarted(offset)
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
            # Nothing below the log start offset is read again (a snapshot holds it).
            self._flushed_offset = max(self._flushed_offset, offset)
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
            if self._observer is not None:
                self._observer.log_start_advanced(offset)
            return True
