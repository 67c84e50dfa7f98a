"""The one line a node that cannot go on says (STYLE: "a node that cannot go on exits,
non-zero, with one line saying why").

:func:`describe` turns the error that stopped the node into that line's cause: an I/O error
as the OS gave it (errno, what was written, the file), damage the core could not route around
(a record it must parse does not; a damaged batch itself is repaired, raftcore.raft.damage)
with the segment file, byte position and offset of the first batch that fails its CRC check,
a broken invariant or a bug with its type, a leader's request to truncate committed records
(raftcore.raft.committed) with what to do. Faults of the environment (a disk that is full,
failing or damaged) need no traceback; anything else is a bug, whose traceback the node logs
too.
"""

from __future__ import annotations

import bisect
import contextlib
from typing import Any

from raftcore.errors import CorruptRecordError, RaftInvariantError, TruncationRefusedError
from raftcore.log.config import LOG_SUFFIX, segment_file_prefix

__all__ = ["describe", "is_environment_fault"]

# How far past the listener's offset a damaged batch is looked for (its feed reads 1 MiB).
SEARCH_BYTES = 16 << 20


def is_environment_fault(exc: BaseException) -> bool:
    """A disk that is full, failing or damaged, or lost with a majority of the voters' (a
    leader asking to truncate committed records) -- not a bug: no traceback is needed."""
    return isinstance(exc, (OSError, CorruptRecordError, TruncationRefusedError))


def describe(exc: BaseException, log: Any = None, from_offset: int | None = None) -> str:
    """The cause, in one line. ``log`` and ``from_offset``: where a damaged batch is looked
    for (the first batch from there that fails its CRC check is named with its file)."""
    if isinstance(exc, OSError):
        return f"I/O error: {exc}"
    if isinstance(exc, CorruptRecordError):
        site = _damaged_batch(log, from_offset)
        return f"damaged log: {exc}" + (f" ({site})" if site else "")
    if isinstance(exc, RaftInvariantError):
        return f"invariant violated: {exc}"
    if isinstance(exc, TruncationRefusedError):
        return f"refusing to truncate committed records: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _damaged_batch(log: Any, from_offset: int | None) -> str | None:
    """``segment <file>, byte <position>, batch at offset <offset>`` of the first batch from
    ``from_offset`` that fails its CRC check in a segmented log (looking at most
    ``SEARCH_BYTES`` far), or None."""
    if log is None or from_offset is None or not hasattr(log, "segment_base_offsets"):
        return None
    offset, searched = from_offset, 0
    with contextlib.suppress(Exception):  # best effort: the line is written either way
        try:
            for batch in log.batches(from_offset):
                if not batch.is_valid():
                    where = _segment_file(log, batch.base_offset)
                    return f"{where}, byte {batch.position}, batch at offset {batch.base_offset}"
                offset = batch.next_offset
                searched += batch.size_in_bytes
                if searched > SEARCH_BYTES:
                    break
        except CorruptRecordError as exc:  # a batch whose very framing is damaged
            return f"{_segment_file(log, offset)}, byte {exc.position}, after offset {offset - 1}"
    return None


def _segment_file(log: Any, offset: int) -> str:
    bases = log.segment_base_offsets()
    base = bases[max(0, bisect.bisect_right(bases, offset) - 1)]
    return f"segment {log.directory / (segment_file_prefix(base) + LOG_SUFFIX)}"
