"""What retention needs to know of a segmented log's segments: offsets, size, and the
timestamps of the first batch and of the newest record (Kafka keeps the latter in its time
index; raftcore reads them from the batch headers).

Each segment's headers are walked once: the walk resumes where it stopped, so a check reads
only what was appended since the last one (a truncation below that point starts it over).
Only headers are read (``scan_batches`` without CRCs): the scrubber and the readers check
the bytes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore._native.records import scan_batches

if TYPE_CHECKING:
    from raftcore.log.segmented_log import SegmentedLog

__all__ = ["SegmentTimes"]


@dataclass
class _Walked:
    to: int = 0  # byte position the walk reached
    first: int = -1
    newest: int = -1


class SegmentTimes:
    """Per-segment timestamps of one log, read lazily and kept between calls."""

    def __init__(self) -> None:
        self._walked: dict[int, _Walked] = {}
        self._lock = threading.Lock()

    def segments(self, log: SegmentedLog) -> list[tuple[int, int, int, int, int]]:
        """``(base offset, end offset, size in bytes, first batch's timestamp, newest record's
        timestamp)`` for every segment, oldest first (-1 timestamps for an empty one)."""
        out = []
        with log._lock, self._lock:
            log._check_open()
            bases = set()
            for seg in log._segments:
                bases.add(seg.base_offset)
                w = self._walked.setdefault(seg.base_offset, _Walked())
                if seg.size < w.to:  # truncated below the walk
                    w.to, w.first, w.newest = 0, -1, -1
                if seg.size > w.to:
                    scan = scan_batches(seg.map(), w.to, seg.size, check_crc=False)
                    if scan.count:
                        if w.first < 0:
                            w.first = int(scan.max_timestamps[0])
                        w.newest = max(w.newest, int(scan.max_timestamps[: scan.count].max()))
                    w.to = scan.valid_end
                out.append((seg.base_offset, seg.next_offset, seg.size, w.first, w.newest))
            for gone in set(self._walked) - bases:
                del self._walked[gone]
        return out
