"""An in-memory ReplicatedLog for the simulation: the same batch bytes, the same epoch cache
(native), the same rules as the segmented log, and a ``crash()`` that loses what was not
flushed -- as a power failure would. It keeps snapshots too (KIP-630, the
:class:`~raftcore.raft.replicated_log.SnapshotLog` half), as bytes in Kafka's snapshot format
(:mod:`raftcore.testing.memory_snapshot`); a frozen snapshot survives a crash, as a fsynced file
would. ``disk_full`` plays a full disk: every append raises OSError(ENOSPC) and writes
nothing, as the segmented log's append does (it cuts back what it wrote)."""

from __future__ import annotations

import bisect
import errno
from collections.abc import Iterable, Sequence
from typing import Any

from raftcore._native.epoch_cache import EpochCache, EpochEndOffset
from raftcore.errors import InvalidAppendError, LogError, OffsetOutOfRangeError, SnapshotError
from raftcore.raft.values import OffsetAndEpoch
from raftcore.records import encode_batch, restamp_batches, scan_batches, sound_batch
from raftcore.testing.memory_snapshot import (
    MemoryRawSnapshotWriter,
    MemorySnapshotReader,
    MemorySnapshotWriter,
)

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
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}  # frozen, by id
        # bit rot (the simulation's disk nemesis): base offset -> the damaged bytes read there;
        # the true bytes stay in _batches, for the simulation's invariants (read_true)
        self._rotted: dict[int, bytes] = {}
        self.disk_full = False  # every append raises OSError(ENOSPC) (a full disk)

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
        if epoch >= 0:
            return epoch
        # An empty log that starts at a snapshot: the snapshot's epoch (KAFKA-10761).
        latest = self.latest_snapshot_id()
        if latest is not None and latest.offset == self._start == self._end:
            return latest.epoch
        return 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._cache.entries()

    # ---- appends -----------------------------------------------------------------------------

    def _check_space(self) -> None:
        if self.disk_full:
            raise OSError(errno.ENOSPC, "No space left on device (the in-memory log's disk)")

    def initialize_leader_epoch(self, epoch: int) -> None:
        self._check_space()  # the segmented log writes its epoch checkpoint file
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

    def append_batches_as_leader(
        self, batches: Any, epoch: int, *, checked: Any = None
    ) -> tuple[int, int]:
        # ``checked`` (the scan of batches checked before) changes nothing here: every
        # append is checked whole.
        if epoch < self._cache.latest_epoch:
            raise InvalidAppendError(f"epoch {epoch} is older than {self._cache.latest_epoch}")
        data, _ = restamp_batches(batches, self._end, epoch)
        first = self._end
        self._add(data, check=True)
        return first, self._end - 1

    def append_as_follower(self, batches: Any, *, checked: Any = None) -> tuple[int, int] | None:
        data = bytes(batches)
        if not data:
            return None
        first = self._end
        self._add(data, check=True)
        return first, self._end - 1

    def _add(self, data: bytes, *, check: bool) -> None:
        self._check_space()
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
        return self._read(offset, max_bytes, self._rotted)

    def read_true(self, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """What was written, whatever rotted since (the simulation's invariants only)."""
        return self._read(offset, max_bytes, None)

    def _read(self, offset: int, max_bytes: int, rotted: dict[int, bytes] | None) -> bytes:
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{self._start}, {self._end}]")
        if offset == self._end:
            return b""
        i = bisect.bisect_right(self._bases, offset) - 1
        j = i + 1
        size = len(self._batches[i])
        while j < len(self._batches) and size + len(self._batches[j]) <= max_bytes:
            size += len(self._batches[j])
            j += 1
        if not rotted:
            return b"".join(self._batches[i:j])
        return b"".join(rotted.get(self._bases[k], self._batches[k]) for k in range(i, j))

    def overwrite_batch(self, data: Any) -> tuple[int, int]:
        """Write a sound copy of a damaged batch in its place (raftcore.log.repair's rules: the
        same offsets, epoch and size)."""
        batch, base, last, epoch = sound_batch(data)
        i = bisect.bisect_left(self._bases, base)
        if i == len(self._bases) or self._bases[i] != base or self._lasts[i] != last:
            raise LogError(f"no batch {base}..{last} in the log to write over")
        if self._epochs[i] != epoch or len(self._batches[i]) != len(batch):
            raise LogError(
                f"the copy of {base}..{last} (epoch {epoch}, {len(batch)} bytes) does not fit "
                f"the batch there (epoch {self._epochs[i]}, {len(self._batches[i])} bytes)"
            )
        self._batches[i] = batch
        self._rotted.pop(base, None)
        return base, last

    def corrupt(self, offset: int, position: int, bit: int) -> None:
        """Flip a bit of the batch holding ``offset`` (bit rot, for the simulation): byte
        ``position`` of the batch from its magic byte on (16: what the CRC and the header
        checks cover), modulo its size, but never its attributes."""
        i = bisect.bisect_right(self._bases, offset) - 1
        data = bytearray(self._rotted.get(self._bases[i], self._batches[i]))
        pos = 16 + position % (len(data) - 16)
        if pos in (21, 22):  # the attributes: a data batch that claims to be a control batch
            pos += 2  # stops the node (its voter set cannot be read), as a damaged Voters record
        data[pos] ^= 1 << (bit % 8)
        self._rotted[self._bases[i]] = bytes(data)

    def rotted(self) -> list[int]:
        """The base offsets of the batches whose bytes rotted (the simulation's view)."""
        return sorted(self._rotted)

    def _forget_rot(self) -> None:
        if self._rotted:
            self._rotted = {b: d for b, d in self._rotted.items() if self._start <= b < self._end}

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
        self._forget_rot()
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it at ``offset``; snapshots below it are forgotten."""
        self._batches.clear()
        self._bases.clear()
        self._lasts.clear()
        self._epochs.clear()
        self._start = self._end = self._flushed = offset
        self._cache.clear()
        self._forget_snapshots_below(offset)
        self._forget_rot()

    # ---- snapshots (KIP-630) ------------------------------------------------------------------

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots, key=_by_offset) if self._snapshots else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return min(self._snapshots, key=_by_offset) if self._snapshots else None

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots, key=_by_offset)

    def create_new_snapshot(
        self,
        snapshot_id: OffsetAndEpoch,
        *,
        last_contained_log_timestamp: int = 0,
        header_records: Sequence[tuple[bytes, bytes]] = (),
    ) -> MemorySnapshotWriter | None:
        """A writer for a snapshot of the state up to ``snapshot_id.offset`` (exclusive); None
        below the log start offset or when it exists. Raises ValueError off a batch boundary
        or with an epoch that is not the epoch of the record at ``offset - 1``."""
        offset = snapshot_id.offset
        if offset < self._start or snapshot_id in self._snapshots:
            return None
        if offset > self._end:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self._end}")
        i = bisect.bisect_left(self._lasts, offset - 1)
        if i == len(self._lasts) or self._lasts[i] != offset - 1:
            raise ValueError(f"snapshot {snapshot_id} does not end at a batch boundary")
        if self._epochs[i] != snapshot_id.epoch:
            raise ValueError(
                f"snapshot {snapshot_id}: the record at {offset - 1} has epoch {self._epochs[i]}"
            )
        return MemorySnapshotWriter(
            snapshot_id,
            self._install_local_snapshot,
            last_contained_log_timestamp=last_contained_log_timestamp,
            timestamp_ms=self._timestamp_ms,
            header_records=header_records,
        )

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> MemoryRawSnapshotWriter | None:
        if snapshot_id in self._snapshots:
            return None
        return MemoryRawSnapshotWriter(snapshot_id, self._install_snapshot)

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshots[snapshot_id] = data

    def _install_local_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """A local snapshot frozen below the log start (a newer one was installed while it
        was written) is dropped, as the segmented log deletes it: SnapshotError."""
        if snapshot_id.offset < self._start:
            raise SnapshotError(
                f"snapshot {snapshot_id} is obsolete: the log starts at {self._start}"
            )
        self._snapshots[snapshot_id] = data

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotReader | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else MemorySnapshotReader(snapshot_id, data)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Advance the log start offset to ``snapshot_id.offset`` (Kafka's
        deleteBeforeSnapshot): only to an existing snapshot, forward, and not past the latest
        snapshot or the log end. Whole batches below it go, and the older snapshots."""
        latest = self.latest_snapshot_id()
        offset = snapshot_id.offset
        if (
            snapshot_id not in self._snapshots
            or latest is None
            or not self._start < offset <= min(latest.offset, self._end)
        ):
            return False
        i = bisect.bisect_right(self._lasts, offset - 1)
        del self._batches[:i], self._bases[:i], self._lasts[:i], self._epochs[:i]
        self._start = offset
        self._flushed = max(self._flushed, offset)
        self._cache.truncate_from_start(offset)
        self._forget_snapshots_below(offset)
        self._forget_rot()
        return True

    def truncate_to_latest_snapshot(self) -> bool:
        """If the latest snapshot is ahead of the log, start the log at its end offset
        (Kafka's truncateToLatestSnapshot)."""
        latest = self.latest_snapshot_id()
        if latest is None:
            return False
        epoch = self._cache.latest_epoch
        epoch = epoch if epoch >= 0 else 0
        if latest.epoch > epoch or (latest.epoch == epoch and latest.offset > self._end):
            self.truncate_fully_and_start_at(latest.offset)
            return True
        return False

    def _forget_snapshots_below(self, offset: int) -> None:
        for sid in [s for s in self._snapshots if s.offset < offset]:
            del self._snapshots[sid]

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
        self._forget_rot()

    def __repr__(self) -> str:
        return (
            f"InMemoryLog(start={self._start}, end={self._end}, flushed={self._flushed}, "
            f"epochs={self._cache.entries()}, snapshots={self.snapshot_ids()})"
        )


def _by_offset(snapshot_id: OffsetAndEpoch) -> tuple[int, int]:
    return (snapshot_id.offset, snapshot_id.epoch)
