"""The directory mode: a node's files, read-only, with no node running (or beside a running
one: segments are append-only, and nothing here takes the log's ``.lock`` or runs recovery).

What counts as committed. A node's files do not record the high watermark: raftcore keeps it
in memory, as KRaft does (Kafka's ``replication-offset-checkpoint`` has no counterpart here),
and the clean point (``recovery-point-checkpoint``) says what is durable, not what is
committed. What the files do prove committed is the end offset of the newest frozen snapshot
(KIP-630: a snapshot is taken at or below the high watermark). So the directory mode reads up
to that offset, or up to ``endOffset`` when the caller gives the committed offset it knows (the
high watermark ``raftcore describe-quorum`` printed, say), and never past the last whole batch
in the files. Without either it refuses, rather than guess.

The path must be readable at the same place on the executors (a local run, or a shared
filesystem), as with any file source.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from raftcore._native.records import scan_batches
from raftcore._native.segment import MappedFile
from raftcore.log.checkpoints import read_log_start_offset
from raftcore.logtools import segment_files, snapshot_files
from raftcore.snapshot import SnapshotFileKind
from raftcore.spark.options import SparkSourceError

__all__ = ["LogFiles", "log_directory"]

META_PROPERTIES = "meta.properties"  # raftcore.node.data_dir, not imported: it pulls the node


def log_directory(path: str) -> Path:
    """The log directory of a node's data directory (``DIR/log``), or ``path`` itself when it
    is a log directory (it holds segments)."""
    d = Path(path)
    if not d.is_dir():
        raise SparkSourceError(f"{path} is not a directory (expected a raftcore data directory)")
    if (d / META_PROPERTIES).is_file() and (d / "log").is_dir():
        return d / "log"
    if segment_files(d):
        return d
    raise SparkSourceError(
        f"{path} is not a raftcore data directory: no {META_PROPERTIES} with a log/ "
        "directory beside it, and no log segments (000...0.log) in it"
    )


def _map(path: Path) -> MappedFile | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        return MappedFile(fd, size) if size else None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class LogFiles:
    directory: Path

    @classmethod
    def open(cls, path: str) -> LogFiles:
        return cls(log_directory(path))

    def log_start(self) -> int:
        segments = segment_files(self.directory)
        first = segments[0][0] if segments else 0
        recorded = read_log_start_offset(self.directory)
        return first if recorded is None else max(first, recorded)

    def log_end(self) -> int:
        """One past the last offset of the last whole, well-formed batch in the files."""
        for _, path in reversed(segment_files(self.directory)):
            m = _map(path)
            if m is None:
                continue
            scan = scan_batches(m, check_crc=False)  # type: ignore[arg-type]
            if scan.count:
                return int(scan.last_offsets[scan.count - 1]) + 1
        return self.log_start()

    def snapshot_end(self) -> int | None:
        """End offset of the newest frozen snapshot: committed, by KIP-630."""
        ends = [
            s.snapshot_id.end_offset
            for s in snapshot_files(self.directory)
            if s.kind is SnapshotFileKind.FROZEN
        ]
        return max(ends) if ends else None

    def committed_end(self, end_offset: int | None) -> int:
        """The end of what may be read: ``end_offset`` (the caller vouches that it is
        committed) or the newest snapshot's end offset, within the files' last whole batch."""
        limit = end_offset if end_offset is not None else self.snapshot_end()
        if limit is None:
            raise SparkSourceError(
                f"{self.directory}: the files do not record a committed offset (no snapshot); "
                "give the high watermark the cluster reported (raftcore describe-quorum) as "
                ".option('endOffset', N) to spark.read, or as --end / --offset to raftcore "
                "spark export / snapshot; or read the running cluster with bootstrap"
            )
        return min(limit, self.log_end())

    def first_offset_at(self, timestamp: int, start: int, end: int) -> int:
        """The base offset of the first data batch in ``[start, end)`` with a record at or after
        ``timestamp`` (by the batches' max timestamps), or ``end``."""
        for batches in self._scans(start, end):
            scan, _ = batches
            n = scan.count
            control = (scan.attributes[:n] & 0x20) != 0
            hits = np.flatnonzero((scan.max_timestamps[:n] >= timestamp) & ~control)
            for i in hits:
                if scan.last_offsets[i] >= start and scan.base_offsets[i] < end:
                    return max(start, int(scan.base_offsets[i]))
        return end

    def _scans(self, start: int, end: int) -> Iterator[tuple[Any, Any]]:
        segments = segment_files(self.directory)
        for i, (base, path) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            if base >= end or (next_base is not None and next_base <= start):
                continue
            m = _map(path)
            if m is None:
                if next_base is not None and base < start:
                    continue
                raise SparkSourceError(
                    f"{path} is gone or empty while offsets {max(start, base)}..{end - 1} were "
                    "to be read from it (the node deleted it after the read was planned?)"
                )
            yield scan_batches(m, check_crc=False), m  # type: ignore[arg-type]

    def read_range(self, start: int, end: int) -> Iterator[memoryview]:
        """Buffers of whole batches covering ``[start, end)``, one per segment (the first may
        begin before ``start``, the last end after ``end``)."""
        if end <= start:
            return
        covered = start
        for scan, m in self._scans(start, end):
            n = scan.count
            last = scan.last_offsets[:n]
            first = int(np.searchsorted(last, start, "left"))
            stop = int(np.searchsorted(scan.base_offsets[:n], end, "left"))
            if first >= stop:
                continue
            lo = int(scan.positions[first])
            hi = int(scan.positions[stop - 1] + scan.sizes[stop - 1])
            covered = int(last[stop - 1]) + 1
            yield memoryview(m)[lo:hi]
        if covered < end:
            raise SparkSourceError(
                f"{self.directory}: offsets {covered}..{end - 1} are not in the files "
                "(deleted, truncated or damaged after the read was planned)"
            )
