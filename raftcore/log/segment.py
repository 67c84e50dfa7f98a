"""One segment of the log -- its ``.log`` file, memory map and sparse offset index -- and the
helpers that read batch scans and indexes for the log."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from raftcore._native.records import check_batch_crcs, find_batch, scan_batches
from raftcore._native.segment import MappedFile, index_entries, index_floor_position, write_at
from raftcore.errors import CorruptRecordError
from raftcore.log.config import INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, segment_file_prefix

# Appends that CRC-check their input do it in pieces of this size, right after writing each
# piece, while its bytes are still in the CPU's last-level cache (see _Segment.append). Smaller
# pieces would stay in L2 but cost more write calls, which is the worse trade on ext4.
VERIFY_PIECE_BYTES = 4 << 20


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
        except BaseException as exc:
            # Do not leave a partial or unchecked batch behind: cut back to where we began.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, position)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(self.log_path)  # a failed write names its file
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

    def reopen_writable(self, segment_bytes: int) -> None:
        """Make this the writable, active segment (its mapping is replaced when it grows)."""
        self.close_fd()
        self.fd = os.open(self.log_path, os.O_RDWR)
        self.capacity = max(segment_bytes, self.size)

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


def find_last_batch_epoch(segments: Sequence[_Segment]) -> int:
    """The leader epoch of the log's last batch (-1 for an empty log)."""
    for seg in reversed(segments):
        if seg.size == 0:
            continue
        m = seg.map()
        start = index_floor_position(seg.index, seg.index_entries, INT32_MAX)
        scan = scan_batches(m, start, seg.size, check_crc=False)
        if scan.count:
            return int(scan.epochs[-1])
    return -1
