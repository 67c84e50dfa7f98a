"""Checking a sealed segment's bytes again, as the disk holds them now (bit rot, a misdirected
write): the check ``verify-log`` makes of every batch -- header, CRC, offsets following on from
the segment's base offset -- made on a running log, a piece at a time.

The node's scrubber (raftcore.node.scrubber) calls :func:`scrub_segment` on every sealed
segment after the log opens and on a schedule; what it finds goes to the Raft core, which has
the batch repaired from a peer (raftcore.raft.damage). It reads the file through its own
descriptor (never the log's memory map, which a retention may close under it) and only the
bytes the log counts as written.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raftcore._native.records import scan_batches
from raftcore.log.segment import first_discontinuity

__all__ = [
    "SCRUB_PIECE_BYTES",
    "SealedSegment",
    "SegmentDamage",
    "check_segment",
    "scrub_segment",
    "sealed_segments",
]

SCRUB_PIECE_BYTES = 1 << 20  # read and checked at a time
_BATCH_LENGTH = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """A segment the log no longer appends to: its file, first offset, bytes and next offset."""

    path: Path
    base_offset: int
    size: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    """The first damaged batch of a segment: ``offset`` is the one after the last sound batch
    (the damaged batch's base offset, if its header can be trusted)."""

    file: str
    position: int
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file} at byte {self.position} (offset {self.offset}): {self.reason}"


def sealed_segments(log: object) -> list[SealedSegment]:
    """The sealed segments of a segmented log now (all but the active one)."""
    with log._lock:  # type: ignore[attr-defined]
        return [
            SealedSegment(seg.log_path, seg.base_offset, seg.size, seg.next_offset)
            for seg in log._segments[:-1]  # type: ignore[attr-defined]
        ]


def check_segment(
    data: object, expected_first: int, *, base_position: int = 0
) -> tuple[int, int, str | None, int]:
    """Check the batches of ``data`` (a segment's bytes from a batch boundary on) as
    verify-log does: (bytes of sound batches, the offset after them, the problem or None, its
    position in ``data``). A batch cut off by the end of ``data`` is no problem; it is left for
    the next piece (the caller knows whether the segment ends there)."""
    scan = scan_batches(data, check_crc=True)  # type: ignore[arg-type]
    good = scan.count
    problem: str | None = None
    position = 0
    if good:
        found = first_discontinuity(scan, expected_first)
        if found is not None:
            good, problem = found
            position = int(scan.positions[good])
    if problem is None and scan.error is not None and not scan.error.startswith("truncated"):
        problem, position = scan.error, int(scan.error_position)
    if good == 0:
        return 0, expected_first, problem, position
    end = int(scan.positions[good - 1]) + int(scan.sizes[good - 1])
    return end, int(scan.last_offsets[good - 1]) + 1, problem, position


def scrub_segment(
    segment: SealedSegment,
    *,
    piece_bytes: int = SCRUB_PIECE_BYTES,
    pace: Callable[[int], bool] | None = None,
) -> SegmentDamage | None:
    """The first damaged batch of a sealed segment, or None when every batch is sound.
    ``pace(n)`` is called after each piece of ``n`` bytes (it sleeps to keep a rate); when it
    returns False the scrub stops there (None). A segment deleted meanwhile is None."""
    try:
        fd = os.open(segment.path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        position, expected = 0, segment.base_offset
        while position < segment.size:
            want = min(piece_bytes, segment.size - position)
            data = os.pread(fd, want, position)
            if len(data) < want:  # the file is shorter than the log counts
                return _damage(segment, position, expected, "the file ends before the segment")
            good, expected_next, problem, at = check_segment(data, expected)
            if problem is not None:
                return _damage(segment, position + at, expected_next, problem)
            if good == 0:  # one batch longer than the piece: read that batch whole
                if len(data) < 12:
                    return _damage(segment, position, expected, "a batch header cut off")
                _, length = _BATCH_LENGTH.unpack_from(data)
                size = 12 + length
                if length < 0 or position + size > segment.size:
                    why = f"a batch of {size} bytes runs past the segment's end"
                    return _damage(segment, position, expected, why)
                data = os.pread(fd, size, position)
                good, expected_next, problem, at = check_segment(data, expected)
                if problem is not None or good == 0:
                    return _damage(segment, position + at, expected, problem or "unreadable")
            position += good
            expected = expected_next
            if pace is not None and not pace(good):
                return None
        if expected != segment.next_offset:
            why = f"the segment ends at offset {expected}, the log counts {segment.next_offset}"
            return _damage(segment, position, expected, why)
        return None
    finally:
        os.close(fd)


def _damage(segment: SealedSegment, position: int, offset: int, reason: str) -> SegmentDamage:
    return SegmentDamage(segment.path.name, position, offset, reason)
