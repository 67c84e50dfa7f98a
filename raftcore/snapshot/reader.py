"""Reading a frozen snapshot: whole, batch by batch (to restore a state machine), or in byte
slices (to serve FetchSnapshot).

A reader maps the file once. Everything it hands out is zero-copy: record batches and slices
are views of the mapping, and each view keeps the mapping alive, so a view outlives ``close()``
and even the file's deletion (POSIX keeps an unlinked file's pages while they are mapped). For
``os.sendfile`` the reader also keeps the file open: ``fileno()`` and ``slice_range()``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from raftcore._native.segment import MappedFile
from raftcore.errors import SnapshotError, SnapshotPositionError
from raftcore.records import Record, RecordBatch, iter_batches
from raftcore.snapshot.format import SnapshotHeader, SnapshotSummary
from raftcore.snapshot.ids import SnapshotId

__all__ = ["SnapshotReader"]


class SnapshotReader:
    """An open, verified snapshot. Made by ``SnapshotStore.open``; close it (or use ``with``).

    ``summary`` is what verification found (size, epoch, batch and record counts, header).
    """

    def __init__(
        self, path: Path, snapshot_id: SnapshotId, summary: SnapshotSummary, fd: int
    ) -> None:
        self.path = path
        self.snapshot_id = snapshot_id
        self.summary = summary
        self._fd = fd
        self._mapping: MappedFile | None = MappedFile(fd, summary.size)

    @classmethod
    def open_file(
        cls, path: Path, snapshot_id: SnapshotId, summary: SnapshotSummary
    ) -> SnapshotReader:
        """Open ``path``, which verification described as ``summary``. The size must still be
        the verified one (a frozen snapshot is read-only and never rewritten)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size != summary.size:
                raise SnapshotError(
                    f"{path}: {size} bytes now, {summary.size} when it was verified"
                )
            return cls(path, snapshot_id, summary, fd)
        except BaseException:
            os.close(fd)
            raise

    # ---- what it is

    @property
    def size(self) -> int:
        """The snapshot's size in bytes (FetchSnapshot's ``Size``)."""
        return self.summary.size

    @property
    def end_offset(self) -> int:
        """The log offset the snapshot's state is as of (exclusive): its id's end offset."""
        return self.snapshot_id.end_offset

    @property
    def header(self) -> SnapshotHeader:
        return self.summary.header

    @property
    def last_contained_log_timestamp(self) -> int:
        return self.summary.header.last_contained_log_timestamp

    @property
    def closed(self) -> bool:
        return self._mapping is None

    def _map(self) -> MappedFile:
        if self._mapping is None:
            raise SnapshotError(f"{self.path}: the snapshot reader is closed")
        return self._mapping

    # ---- whole reads (restore)

    def batches(self) -> Iterator[RecordBatch]:
        """Every batch in order: the header batch, the data batches, the footer batch."""
        mapping = self._map()
        return iter_batches(mapping.view(0, mapping.size))

    def data_batches(self) -> Iterator[RecordBatch]:
        """The data batches in order (header and footer left out): what a restore applies."""
        for batch in self.batches():
            if not batch.is_control:
                yield batch

    def records(self) -> Iterator[Record]:
        """Every data record in order; ``offset`` is its offset within the snapshot."""
        for batch in self.data_batches():
            yield from batch.records()

    # ---- slices (FetchSnapshot)

    def slice_range(self, position: int, max_bytes: int) -> tuple[int, int]:
        """(position, length) of the chunk FetchSnapshot serves from ``position``: at most
        ``max_bytes``, cut anywhere (Kafka's UnalignedRecords). ``position`` must be inside the
        snapshot (Kafka answers POSITION_OUT_OF_RANGE otherwise)."""
        if not 0 <= position < self.summary.size:
            raise SnapshotPositionError(
                f"{self.path}: position {position} is outside the snapshot's "
                f"{self.summary.size} bytes"
            )
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        return position, min(max_bytes, self.summary.size - position)

    def slice(self, position: int, max_bytes: int) -> memoryview:
        """The chunk at ``position`` of at most ``max_bytes`` as a zero-copy view of the
        mapping (it keeps the mapping alive)."""
        start, length = self.slice_range(position, max_bytes)
        return self._map().view(start, start + length)

    def fileno(self) -> int:
        """The open file, for ``os.sendfile(out, reader.fileno(), *reader.slice_range(...))``."""
        self._map()
        return self._fd

    # ---- lifetime

    def close(self) -> None:
        """Release the reader. Views and batches already handed out stay readable."""
        if self._mapping is not None:
            self._mapping = None
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def __repr__(self) -> str:
        return f"SnapshotReader({self.snapshot_id}, size={self.summary.size}, closed={self.closed})"
