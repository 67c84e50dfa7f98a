"""An in-memory ReplicatedLog for the simulation: the same batch bytes, the same epoch cache
(native), the same rules as the segmented log, and a ``crash()`` that loses what was not
flushed -- as a power failure would."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from raftcore._native.epoch_cache import EpochCache, EpochEndOffset
from raftcore.errors import InvalidAppendError, OffsetOutOfRangeError
from raftcore.records import encode_batch, restamp_batches, scan_batches

__all__ = ["InMemoryLog"]


class InMemoryLog:
    """Batches kept as bytes in a list. Appends are validated like the segmented log's
    (contiguous offsets, non-decreasing epochs, CRC on follower appends)."""

    def __init__(self, timestamp_ms: int = 0) -> None:
        self._batches: list[bytes] = []
        self._bases: list[int] = []
        self._lasts: list[int] = []
        self._epochs: list[int] = []
        self._start = 0
        self._end = 0
        self._flushed = 0
        self._cache = EpochCache()
        self._timestamp_ms = timestamp_ms

    # ---- state -------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def last_fetched_epoch(self) -> int:
        epoch = self._cache.latest_epoch
        return epoch if epoch >= 0 else 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._cache.entries()

    # ---- appends -----------------------------------------------------------------------------

    def initialize_leader_epoch(self, epoch: int) -> None:
        if epoch < self._cache.latest_epoch:
            raise InvalidAppendError(f"epoch {epoch} is older than {self._cache.latest_epoch}")
        self._cache.assign(epoch, self._end)

    def append_as_leader(
        self, records: Iterable[Any], epoch: int, *, control: bool = False
    ) -> tuple[int, int]:
        if epoch < self._cache.latest_epoch:
            raise InvalidAppendError(f"epoch {epoch} is older than {self._cache.latest_epoch}")
        data = encode_batch(
            records,
            base_offset=self._end,
            leader_epoch=epoch,
            control=control,
            timestamp_ms=self._timestamp_ms,
        )
        first = self._end
        self._add(data, check=False)
        return first, self._end - 1

    def append_batches_as_leader(self, batches: Any, epoch: int) -> tuple[int, int]:
        if epoch < self._cache.latest_epoch:
            raise InvalidAppendError(f"epoch {epoch} is older than {self._cache.latest_epoch}")
        data, _ = restamp_batches(batches, self._end, epoch)
        first = self._end
        self._add(data, check=True)
        return first, self._end - 1

    def append_as_follower(self, batches: Any) -> tuple[int, int] | None:
        data = bytes(batches)
        if not data:
            return None
        first = self._end
        self._add(data, check=True)
        return first, self._end - 1

    def _add(self, data: bytes, *, check: bool) -> None:
        scan = scan_batches(data, check_crc=check)
        scan.raise_error()
        if int(scan.base_offsets[0]) != self._end:
            raise InvalidAppendError(
                f"batch at offset {int(scan.base_offsets[0])}, log end is {self._end}"
            )
        if scan.discontinuity >= 0:
            raise InvalidAppendError(scan.discontinuity_reason)
        if self._epochs and int(scan.epochs[0]) < self._epochs[-1]:
            raise InvalidAppendError(f"epoch {int(scan.epochs[0])} after {self._epochs[-1]}")
        for k in range(scan.count):
            pos, size = int(scan.positions[k]), int(scan.sizes[k])
            self._batches.append(data[pos : pos + size])
            self._bases.append(int(scan.base_offsets[k]))
            self._lasts.append(int(scan.last_offsets[k]))
            self._epochs.append(int(scan.epochs[k]))
        for epoch, start in scan.epoch_starts:
            self._cache.assign(epoch, start)
        self._end = self._lasts[-1] + 1

    # ---- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = 1 << 20) -> bytes:
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{self._start}, {self._end}]")
        if offset == self._end:
            return b""
        i = bisect.bisect_right(self._bases, offset) - 1
        out = [self._batches[i]]
        size = len(out[0])
        for batch in self._batches[i + 1 :]:
            if size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
        return b"".join(out)

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        result = self._cache.end_offset_for(epoch, self._end)
        if result.end_offset < 0:
            return EpochEndOffset((self.last_fetched_epoch, self._end))
        return result

    def epoch_for_offset(self, offset: int) -> int:
        return self._cache.epoch_for_offset(offset)

    # ---- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        if offset < self._start:
            self.truncate_fully_and_start_at(offset)
            return offset
        if offset >= self._end:
            self._cache.truncate_from_end(offset)
            return self._end
        i = bisect.bisect_right(self._bases, offset) - 1
        new_end = self._bases[i]
        if new_end < self._start:
            self.truncate_fully_and_start_at(offset)
            return offset
        del self._batches[i:], self._bases[i:], self._lasts[i:], self._epochs[i:]
        self._end = new_end
        self._flushed = min(self._flushed, new_end)
        self._cache.truncate_from_end(new_end)
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._batches.clear()
        self._bases.clear()
        self._lasts.clear()
        self._epochs.clear()
        self._start = self._end = self._flushed = offset
        self._cache.clear()

    # ---- durability --------------------------------------------------------------------------

    def flush(self) -> int:
        self._flushed = self._end
        return self._flushed

    def crash(self) -> None:
        """Lose everything that was not flushed (the epoch cache with it)."""
        if self._flushed < self._end:
            i = bisect.bisect_left(self._bases, self._flushed)
            del self._batches[i:], self._bases[i:], self._lasts[i:], self._epochs[i:]
            self._end = self._lasts[-1] + 1 if self._lasts else self._start
        self._cache.truncate_from_end(self._end)

    def __repr__(self) -> str:
        return (
            f"InMemoryLog(start={self._start}, end={self._end}, flushed={self._flushed}, "
            f"epochs={self._cache.entries()})"
        )
