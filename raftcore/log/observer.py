"""What a :class:`~raftcore.log.SegmentedLog` tells the one observer it may have
(``log.set_observer``), so state derived from the log's batches -- the producer state -- can
follow it without scanning it again.

Every call is made with the log's lock held, on the thread that changed the log, after the
change is done; the observer may read the log (the lock is re-entrant) but must not change it.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LogObserver"]


class LogObserver(Protocol):
    def appended(self, scan: Any, start: int, stop: int) -> None:
        """Batches ``start..stop-1`` of ``scan`` (a ``scan_batches`` result, offsets as
        written) are now in the log. One append may be told in pieces, a roll between them."""

    def rolled(self, base_offset: int) -> None:
        """A new segment starts at ``base_offset``: every batch below it has been told, and
        the finished segment is fsynced."""

    def truncated(self, end_offset: int) -> None:
        """The batches at and above ``end_offset`` were removed; the log now ends there."""

    def restarted(self, offset: int) -> None:
        """Every batch was removed and the log, empty, starts at ``offset`` (a snapshot
        replaced it). The log deleted the producer-state files too, before the segments."""

    def log_start_advanced(self, offset: int) -> None:
        """The log start offset moved up to ``offset``; segments below it were deleted."""

    def closing(self, end_offset: int) -> None:
        """The log is flushed up to ``end_offset`` and about to close (a clean shutdown)."""
