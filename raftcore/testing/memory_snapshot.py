"""Snapshots of the in-memory log: whole snapshots held as bytes, in Kafka's snapshot format
(:mod:`raftcore.snapshot.format`: a header control batch, data batches, a footer control
batch), so the simulation serves, downloads and verifies the same bytes a file would hold.

- :class:`MemorySnapshotWriter`: the state machine writes (key, value) records; ``freeze``
  frames them, verifies the result and installs it in the log.
- :class:`MemoryRawSnapshotWriter`: a download, unaligned bytes in order; ``freeze``
  verifies the whole snapshot before installing it, and installs nothing if it fails.
- :class:`MemorySnapshotReader`: slices for FetchSnapshot, records for a restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from raftcore.errors import SnapshotError
from raftcore.raft.values import OffsetAndEpoch
from raftcore.records import Record, encode_batch, iter_batches
from raftcore.snapshot.format import (
    MAX_BATCH_RECORDS,
    SnapshotHeader,
    SnapshotSummary,
    encode_footer_batch,
    encode_header_batch,
    verify_snapshot,
)

__all__ = ["MemoryRawSnapshotWriter", "MemorySnapshotReader", "MemorySnapshotWriter"]

Install = Callable[[OffsetAndEpoch, bytes], None]


class MemorySnapshotWriter:
    """Writes one snapshot of the state machine; nothing is visible until ``freeze``."""

    def __init__(
        self,
        snapshot_id: OffsetAndEpoch,
        install: Install,
        *,
        last_contained_log_timestamp: int = 0,
        timestamp_ms: int = 0,
        max_batch_records: int = MAX_BATCH_RECORDS,
        header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self.snapshot_id = snapshot_id
        self._install: Install | None = install
        self._timestamp_ms = timestamp_ms
        self._max = max_batch_records
        self._chunks = [
            encode_header_batch(
                snapshot_id.epoch,
                SnapshotHeader(last_contained_log_timestamp),
                timestamp_ms=timestamp_ms,
                extra_records=header_records,
            )
        ]
        # offsets inside a snapshot run from 0 (the header batch) without gaps
        self._next = 1 + len(header_records)
        self._open: list[Any] = []

    @property
    def size(self) -> int:
        return sum(len(c) for c in self._chunks)

    def append(self, records: Iterable[Any]) -> None:
        if self._install is None:
            raise SnapshotError(f"snapshot {self.snapshot_id} is frozen or aborted")
        for record in records:
            self._open.append(record)
            if len(self._open) >= self._max:
                self._drain()

    def _drain(self) -> None:
        if self._open:
            self._chunks.append(
                encode_batch(
                    self._open,
                    base_offset=self._next,
                    leader_epoch=self.snapshot_id.epoch,
                    timestamp_ms=self._timestamp_ms,
                )
            )
            self._next += len(self._open)
            self._open = []

    def freeze(self) -> SnapshotSummary:
        install = self._install
        if install is None:
            raise SnapshotError(f"snapshot {self.snapshot_id} is frozen or aborted")
        self._drain()
        self._chunks.append(
            encode_footer_batch(self._next, self.snapshot_id.epoch, timestamp_ms=self._timestamp_ms)
        )
        data = b"".join(self._chunks)
        self._install = None
        summary = verify_snapshot(data, snapshot_id=self.snapshot_id, name=str(self.snapshot_id))
        install(self.snapshot_id, data)
        return summary

    def abort(self) -> None:
        self._install = None
        self._chunks = []

    def __repr__(self) -> str:
        return f"MemorySnapshotWriter({self.snapshot_id})"


class MemoryRawSnapshotWriter:
    """A snapshot downloaded from the leader, chunk by chunk (Kafka's ``.part`` file)."""

    def __init__(
        self,
        snapshot_id: OffsetAndEpoch,
        install: Install,
        *,
        verify: Callable[..., Any] = verify_snapshot,
    ) -> None:
        self.snapshot_id = snapshot_id
        self._install: Install | None = install
        self._verify = verify
        self._data = bytearray()

    @property
    def size(self) -> int:
        return len(self._data)

    def append(self, data: bytes | memoryview) -> None:
        if self._install is None:
            raise SnapshotError(f"download of snapshot {self.snapshot_id} is over")
        self._data += data

    def freeze(self) -> SnapshotSummary:
        """Verify the whole snapshot, then install it. On CorruptSnapshotError nothing is
        installed and the partial bytes are gone."""
        install = self._install
        if install is None:
            raise SnapshotError(f"download of snapshot {self.snapshot_id} is over")
        data = bytes(self._data)
        self.discard()
        summary = self._verify(data, snapshot_id=self.snapshot_id, name=f"{self.snapshot_id}.part")
        install(self.snapshot_id, data)
        return summary

    def discard(self) -> None:
        self._install = None
        self._data = bytearray()

    def __repr__(self) -> str:
        return f"MemoryRawSnapshotWriter({self.snapshot_id}, {len(self._data)} bytes)"


class MemorySnapshotReader:
    """A frozen snapshot: its bytes, sliced for FetchSnapshot or iterated for a restore."""

    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshot_id = snapshot_id
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    def slice(self, position: int, max_bytes: int) -> bytes:
        if not 0 <= position < len(self.data):
            raise SnapshotError(
                f"position {position} is outside snapshot {self.snapshot_id} "
                f"({len(self.data)} bytes)"
            )
        return self.data[position : position + max_bytes]

    def records(self) -> Iterator[Record]:
        """Every data record, in order (header and footer left out), CRC-checked."""
        for batch in iter_batches(self.data):
            batch.validate()
            if not batch.is_control:
                yield from batch.records()

    def __repr__(self) -> str:
        return f"MemorySnapshotReader({self.snapshot_id}, {len(self.data)} bytes)"
