"""Writing a snapshot locally: the state machine (and producer state) pour (key, value) records
in, the writer batches them as Kafka's RecordsSnapshotWriter does, and ``freeze`` makes the
file a snapshot.

Batches: the SnapshotHeader alone in the first control batch (offset 0), then data batches of
at most ``max_batch_records`` records (1,024, Kafka's metadata SnapshotEmitter) and at most
``max_batch_bytes`` bytes (8 MiB, Kafka's MAX_BATCH_SIZE_BYTES), then the SnapshotFooter alone
in the last control batch. Offsets run from 0; every batch carries the snapshot's epoch.

Records are encoded as they arrive, a few at a time, into the open batch, so memory stays near
one batch whatever the input: an iterator of a million records is never held whole.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from raftcore.errors import RecordTooLargeError, SnapshotError
from raftcore.records import RECORD_BATCH_OVERHEAD, BatchBuilder
from raftcore.snapshot.format import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    SnapshotHeader,
    SnapshotSummary,
    encode_footer_batch,
    encode_header_batch,
)
from raftcore.snapshot.ids import SnapshotId
from raftcore.snapshot.part import PartFile

__all__ = ["SnapshotWriter"]

# At most this many records are encoded in one step (fewer when the average record seen so far
# says they would not fit): a step past the batch's limit is re-encoded record by record, so
# it bounds both that waste and how far a batch's buffer can overshoot before the check.
_STEP_RECORDS = 256
# Worst-case bytes a record may take beyond its measured size once placed in a batch (its
# offset-delta varint grows up to 2 bytes; slack for the timestamp delta).
_PLACEMENT_SLACK = 8


class SnapshotWriter:
    """Writes one snapshot into a ``.part`` file. Made by ``SnapshotStore.writer``.

    ``append(records)`` any number of times, then ``freeze()`` (verify, fsync, read-only,
    rename, directory fsync) or ``abort()``. Leaving a ``with`` block without ``freeze``
    aborts. After a failed write or freeze the writer is spent and its file deleted.
    """

    def __init__(
        self,
        part: PartFile,
        *,
        last_contained_log_timestamp: int,
        compression: str = "none",
        timestamp_ms: int | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        max_batch_records: int = MAX_BATCH_RECORDS,
        extra_header_records: Sequence[tuple[bytes, bytes]] = (),
        check_records: bool = True,
        on_frozen: Callable[[SnapshotId, SnapshotSummary], None] | None = None,
    ) -> None:
        if max_batch_records < 1:
            raise ValueError(f"max_batch_records must be at least 1, got {max_batch_records}")
        if max_batch_bytes < 1024:
            raise ValueError(f"max_batch_bytes must be at least 1024, got {max_batch_bytes}")
        self._part = part
        self.snapshot_id = part.snapshot_id
        self._epoch = part.snapshot_id.epoch
        self._compression = compression
        self._timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        self._max_records = max_batch_records
        self._max_bytes = max_batch_bytes
        # The uncompressed size a batch may reach: with compression, room for the codec's
        # worst-case growth on incompressible data (zstd's ZSTD_COMPRESSBOUND is n + n/256 +
        # 64 bytes, gzip's less), so the compressed batch stays within max_batch_bytes too.
        self._limit = max_batch_bytes
        if compression != "none":
            self._limit -= (max_batch_bytes >> 7) + 128
        self._check_records = check_records
        self._on_frozen = on_frozen
        self._position = 0
        self._next_offset = 0
        self._builder: BatchBuilder | None = None
        self._batch: list[Any] = []  # the records in the open batch, in order
        # Running average of a record's encoded size, to size each encoding step.
        self._seen_bytes = 0
        self._seen_records = 0
        self._state = "open"
        header = SnapshotHeader(last_contained_log_timestamp)
        self._write(
            encode_header_batch(
                self._epoch,
                header,
                timestamp_ms=self._timestamp_ms,
                extra_records=extra_header_records,
            ),
            records=1 + len(extra_header_records),
        )

    # ---- state

    @property
    def next_offset(self) -> int:
        """The offset (within the snapshot) the next record will get."""
        return self._next_offset + len(self._batch)

    @property
    def size(self) -> int:
        """Bytes written to the file so far (the open batch not included)."""
        return self._position

    @property
    def frozen(self) -> bool:
        return self._state == "frozen"

    def _check_open(self, what: str) -> None:
        if self._state != "open":
            raise SnapshotError(f"snapshot {self.snapshot_id}: {what} on a {self._state} writer")

    # ---- appending

    def append(self, records: Iterable[Any]) -> None:
        """Add records, each (key, value) or (key, value, headers) with bytes-like (or None)
        key and value. A record too large for a batch by itself raises RecordTooLargeError."""
        self._check_open("append")
        try:
            self._append(records)
        except BaseException:
            self.abort()
            raise

    def _append(self, records: Iterable[Any]) -> None:
        it = iter(records)
        while True:
            if self._builder is None:
                self._builder = self._new_builder()
            room = self._max_records - len(self._batch)
            step = min(room, self._step_size())
            chunk = list(itertools.islice(it, step))
            if not chunk:
                return
            before = self._builder.uncompressed_size
            self._builder.extend(chunk)
            if self._builder.uncompressed_size <= self._limit:
                self._batch.extend(chunk)
                self._seen_bytes += self._builder.uncompressed_size - before
                self._seen_records += len(chunk)
                if len(self._batch) >= self._max_records:
                    self._flush()
            else:
                self._overflow(chunk)

    def _step_size(self) -> int:
        """How many records to encode in one step: as many as fit in the open batch at the
        average size seen so far (half of it, for variance), at most _STEP_RECORDS."""
        if self._seen_records == 0:
            return 8
        average = max(1, self._seen_bytes // self._seen_records)
        assert self._builder is not None
        room = self._limit - self._builder.uncompressed_size
        return max(1, min(_STEP_RECORDS, room // (2 * average)))

    def _overflow(self, chunk: list[Any]) -> None:
        """``chunk`` took the open batch past the limit: re-encode the batch without it, then
        place its records one at a time, measured, closing batches as they fill."""
        self._builder = self._new_builder()
        if self._batch:
            self._builder.extend(self._batch)
        for record in chunk:
            probe = BatchBuilder(timestamp_ms=self._timestamp_ms)
            probe.extend((record,))
            need = probe.uncompressed_size - RECORD_BATCH_OVERHEAD + _PLACEMENT_SLACK
            if RECORD_BATCH_OVERHEAD + need > self._limit:
                raise RecordTooLargeError(
                    f"snapshot {self.snapshot_id}: the record at offset {self.next_offset} takes "
                    f"{need - _PLACEMENT_SLACK} bytes, more than a batch of at most "
                    f"{self._max_bytes} bytes can hold"
                )
            if self._batch and self._builder.uncompressed_size + need > self._limit:
                self._flush()
                self._builder = self._new_builder()
            self._builder.extend((record,))
            self._batch.append(record)
            self._seen_bytes += need
            self._seen_records += 1
            if len(self._batch) >= self._max_records:
                self._flush()
                self._builder = self._new_builder()

    def _new_builder(self) -> BatchBuilder:
        return BatchBuilder(
            base_offset=self._next_offset,
            leader_epoch=self._epoch,
            compression=self._compression,
            timestamp_ms=self._timestamp_ms,
        )

    def _flush(self) -> None:
        """Close the open batch and write it."""
        builder, count = self._builder, len(self._batch)
        self._builder = None
        if builder is None or count == 0:
            return
        data = builder.build()
        if len(data) > self._max_bytes:  # the compression margin makes this unreachable
            raise SnapshotError(
                f"snapshot {self.snapshot_id}: a batch of {len(data)} bytes exceeds "
                f"{self._max_bytes} after compression"
            )
        self._batch = []
        self._write(data, records=count)

    def _write(self, data: bytes, *, records: int) -> None:
        self._part.write_at(self._position, data)
        self._position += len(data)
        self._next_offset += records

    # ---- the end

    def freeze(self) -> SnapshotSummary:
        """Write the open batch and the footer, then make the file the snapshot: verify it
        whole, fsync, make it read-only, rename it to ``<id>.checkpoint``, fsync the
        directory. Returns what verification found."""
        self._check_open("freeze")
        try:
            self._flush()
            self._write(
                encode_footer_batch(
                    self._next_offset, self._epoch, timestamp_ms=self._timestamp_ms
                ),
                records=1,
            )
            _, summary = self._part.freeze(check_records=self._check_records)
        except BaseException:
            self.abort()
            raise
        self._state = "frozen"
        if self._on_frozen is not None:
            self._on_frozen(self.snapshot_id, summary)
        return summary

    def abort(self) -> None:
        """Give the snapshot up: its ``.part`` file is deleted. A no-op once frozen."""
        if self._state == "open":
            self._state = "aborted"
            self._builder = None
            self._batch = []
            self._part.discard()

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()

    def __repr__(self) -> str:
        return (
            f"SnapshotWriter({self.snapshot_id}, {self._state}, size={self._position}, "
            f"next_offset={self.next_offset})"
        )
