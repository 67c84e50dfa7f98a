"""Writing a damaged batch again, in place, from another replica's copy (protocol-aware
recovery: raftcore.raft.damage decides, this does the bytes).

The copy replaces the damaged batch only when it is, byte for byte, what the damaged one must
have been: one sound batch (CRC, header), the same base offset as the batch that stood there
(the end of the sound batch before it tells where that was), the epoch the epoch cache has for
it, and exactly the room it took -- the batch after it (if any) starts where the copy ends,
with the next offset. Committed batches are the same bytes on every replica, so a sound copy
from the leader always fits; anything else is refused and the log left as it was.
"""

from __future__ import annotations

import bisect
import os
import struct
from typing import Any

from raftcore._native.records import scan_batches
from raftcore._native.segment import index_floor_position, write_at
from raftcore.errors import LogError
from raftcore.records import sound_batch

__all__ = ["overwrite_batch"]

_I64 = struct.Struct(">q")


def overwrite_batch(log: Any, data: Any) -> tuple[int, int]:
    """Write the copy ``data`` over the damaged batch at its offsets in the segmented ``log``
    and fsync; (base, last offset). LogError, naming what does not fit, otherwise."""
    batch, base, last, epoch = sound_batch(data)
    with log._lock:
        log._check_open()
        if not log.log_start_offset <= base < log.end_offset:
            raise LogError(
                f"offset {base} is not in the log [{log.log_start_offset}, {log.end_offset})"
            )
        expected = log._epochs.epoch_for_offset(base)
        if expected >= 0 and expected != epoch:
            raise LogError(f"the copy of offset {base} has epoch {epoch}, the log {expected}")
        seg = log._segments[bisect.bisect_right(log._bases, base) - 1]
        m = seg.map()
        start = index_floor_position(seg.index, seg.index_entries, base - seg.base_offset)
        position = _position_of(m, start, seg.size, base, seg.base_offset)
        end = position + len(batch)
        if end > seg.size:
            raise LogError(f"the copy of {base}..{last} ({len(batch)} bytes) runs past its segment")
        if end < seg.size:
            (following,) = _I64.unpack_from(bytes(m.view(end, end + 8)))
            if following != last + 1:
                raise LogError(
                    f"the copy of {base}..{last} ({len(batch)} bytes) does not end where the "
                    f"next batch starts (offset {following} found there)"
                )
        # a sealed segment has no descriptor of its own (its map holds a read-only one)
        fd = seg.fd if seg.fd >= 0 else os.open(seg.log_path, os.O_WRONLY)
        try:
            write_at(fd, batch, position)
            os.fsync(fd)
        finally:
            if fd != seg.fd:
                os.close(fd)
    return base, last


def _position_of(m: Any, start: int, end: int, base: int, segment_base: int) -> int:
    """Where the batch of base offset ``base`` stands in a segment: walking the sound headers
    from ``start``, the batch that starts with ``base``, or the first unreadable one right
    after a batch ending at ``base - 1``."""
    scan = scan_batches(m, start, end, check_crc=False)
    for k in range(scan.count):
        if int(scan.base_offsets[k]) == base:
            return int(scan.positions[k])
        if int(scan.base_offsets[k]) > base:
            break
    good = scan.count
    if scan.error is not None and (
        (good and int(scan.last_offsets[good - 1]) == base - 1)
        or (good == 0 and start == 0 and base == segment_base)
    ):
        return int(scan.error_position)
    raise LogError(f"no batch starts at offset {base} in its segment (scan: {scan.error})")
