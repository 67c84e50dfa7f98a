"""Keeps a replica's producer state (:class:`ProducerStateManager`) current with its log, and
on disk in ``<offset>.snapshot`` files (:mod:`raftcore.log.producer_snapshots`), as Kafka's
UnifiedLog keeps its ProducerStateManager.

- Every batch the log takes -- a leader's append or a follower's copy -- is recorded as it is
  written, so a replica that becomes leader has the table already.
- At each segment roll the table is written as of the new segment's base offset, and at a
  clean close as of the log end offset. Opening loads the newest sound file at or below the log
  end offset and replays only the batches after it; a damaged file is logged, deleted, and the
  next older one tried; with none, the whole log is scanned.
- A truncation deletes the files above the new end and reloads from the newest one left.
- Files kept: the newest ``RETAINED_FILES``, and none older than the newest file at or below
  the log start offset (that one still holds the producers whose batches were deleted).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from raftcore.errors import CorruptProducerStateError
from raftcore.kafka.producer_state import ProducerStateManager
from raftcore.log.producer_snapshots import (
    delete_producer_snapshot,
    delete_producer_snapshots_above,
    producer_snapshot_offsets,
    read_producer_snapshot,
    write_producer_snapshot,
)

__all__ = ["RETAINED_FILES", "ProducerStateTracker"]

logger = logging.getLogger(__name__)

RETAINED_FILES = 3


class ProducerStateTracker:
    """The log's observer (:class:`raftcore.log.observer.LogObserver`) for producer state.

    ``loaded_from`` (the offset of the file the last load used, or None) and
    ``replayed_batches`` (how many batches it read from the log) say what a load cost.
    """

    def __init__(self, producers: ProducerStateManager, *, prefix: str = "") -> None:
        self.producers = producers
        self.prefix = prefix
        self.loaded_from: int | None = None
        self.replayed_batches = 0
        self._log: Any = None

    def attach(self, log: Any) -> None:
        """Load the state of an open log and follow it from now on."""
        self._log = log
        end = log.end_offset
        delete_producer_snapshots_above(self._dir, end)  # a crash cut the log below them
        self._load(end)
        self._retain(log.log_start_offset)
        log.set_observer(self)

    @property
    def _dir(self) -> Any:
        return self._log.directory

    # ---- loading -------------------------------------------------------------------------------

    def _load(self, end: int) -> None:
        """The newest sound file at or below ``end``, then the log's batches after it."""
        log = self._log
        for offset in reversed(producer_snapshot_offsets(self._dir)):
            if offset > end:
                continue
            try:
                entries = read_producer_snapshot(self._dir, offset)
            except (CorruptProducerStateError, OSError) as exc:
                logger.warning("%s deleting a bad producer-state file: %s", self.prefix, exc)
                with contextlib.suppress(OSError):
                    delete_producer_snapshot(self._dir, offset)
                continue
            self.producers.restore(entries)
            self.loaded_from = offset
            self.replayed_batches = self.producers.replay(log, offset)
            return
        # No file: the whole log. Producers whose batches lie below the log start are lost.
        self.loaded_from = None
        self.producers.clear()
        self.replayed_batches = self.producers.replay(log, log.log_start_offset)

    # ---- files ---------------------------------------------------------------------------------

    def _write(self, offset: int) -> None:
        try:
            write_producer_snapshot(self._dir, offset, self.producers.entries())
        except OSError:  # no file only means a longer replay at the next open
            logger.warning(
                "%s could not write the producer state as of offset %d",
                self.prefix,
                offset,
                exc_info=True,
            )

    def _retain(self, log_start: int) -> None:
        offsets = producer_snapshot_offsets(self._dir)
        floor = max((o for o in offsets if o <= log_start), default=-1)
        newest = set(offsets[-RETAINED_FILES:])
        for o in offsets:
            if o < floor or o not in newest:
                delete_producer_snapshot(self._dir, o)

    # ---- the log's observer --------------------------------------------------------------------

    def appended(self, scan: Any, start: int, stop: int) -> None:
        self.producers.record_scanned(scan, start, stop)

    def rolled(self, base_offset: int) -> None:
        self._write(base_offset)
        self._retain(self._log.log_start_offset)

    def truncated(self, end_offset: int) -> None:
        delete_producer_snapshots_above(self._dir, end_offset)
        self._load(end_offset)

    def restarted(self, offset: int) -> None:
        # A Raft snapshot replaced the log, and it carries no producer state: start empty
        # (producers that wrote before ``offset`` must start a new sequence), as Kafka's
        # truncateFullyAndStartAt does. The log deleted every file already.
        self.producers.clear()
        self.loaded_from = None

    def log_start_advanced(self, offset: int) -> None:
        self._retain(offset)

    def closing(self, end_offset: int) -> None:
        self._write(end_offset)
