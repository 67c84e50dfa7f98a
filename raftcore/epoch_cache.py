"""The leader-epoch cache and its ``leader-epoch-checkpoint`` file.

Each leader epoch is recorded with the offset of its first record. The cache answers KIP-595's
fetch validation ("does the follower's last fetched epoch end where it thinks?") and KIP-279's
truncation ("where does epoch E end on the leader?"). The search is native
(:class:`raftcore._native.epoch_cache.EpochCache`); this module keeps the file in step.

File format (Kafka's LeaderEpochCheckpointFile): UTF-8 text, line 1 the version ``0``, line 2
the number of entries N, then N lines ``"<epoch> <start offset>"``. It is rewritten whole --
temp file, fsync, rename, directory fsync -- on every change.
"""

from __future__ import annotations

import os
from pathlib import Path

from raftcore._native.epoch_cache import EpochCache, EpochEndOffset
from raftcore.checkpoint import parse_ints, read_checkpoint, write_checkpoint
from raftcore.errors import CorruptCheckpointError

__all__ = ["CHECKPOINT_FILE", "EpochCache", "EpochEndOffset", "LeaderEpochFileCache"]

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0


def read_epoch_checkpoint(path: str | os.PathLike[str]) -> list[tuple[int, int]] | None:
    """The (epoch, start offset) entries of a checkpoint file, or None when it does not exist.
    Raises CorruptCheckpointError naming the file and line on anything malformed."""
    lines = read_checkpoint(path, CHECKPOINT_VERSION)
    if lines is None:
        return None
    if not lines:
        raise CorruptCheckpointError(f"{path}: missing the entry count on line 2")
    try:
        count = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(
            f"{path}: line 2 is {lines[0]!r}, not an entry count"
        ) from None
    if count != len(lines) - 1:
        raise CorruptCheckpointError(f"{path}: says {count} entries but holds {len(lines) - 1}")
    entries = [tuple(parse_ints(path, line, i + 3, 2)) for i, line in enumerate(lines[1:])]
    for i in range(1, len(entries)):
        if entries[i][0] <= entries[i - 1][0] or entries[i][1] < entries[i - 1][1]:
            raise CorruptCheckpointError(
                f"{path}: line {i + 3} ({entries[i][0]} {entries[i][1]}) is out of order"
            )
    return entries  # type: ignore[return-value]


def write_epoch_checkpoint(path: str | os.PathLike[str], entries: list[tuple[int, int]]) -> None:
    write_checkpoint(
        path, CHECKPOINT_VERSION, [str(len(entries)), *(f"{e} {s}" for e, s in entries)]
    )


class LeaderEpochFileCache:
    """The epoch cache of one log, persisted in ``<directory>/leader-epoch-checkpoint`` on
    every change (as Kafka does on assign), so a restarted node still knows where each epoch
    began."""

    def __init__(self, directory: str | os.PathLike[str], *, load: bool = True) -> None:
        self.path = Path(directory) / CHECKPOINT_FILE
        self._cache = EpochCache()
        if load:
            for epoch, start in read_epoch_checkpoint(self.path) or []:
                self._cache.assign(epoch, start)

    def _change(self, operation: str, *args: int) -> bool:
        """Apply a change to a copy, write the copy, and only then adopt it: if the write
        fails, memory still agrees with the file."""
        trial = self._cache.copy()
        changed = bool(getattr(trial, operation)(*args))
        if changed:
            write_epoch_checkpoint(self.path, trial.entries())
            self._cache = trial
        return changed

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (dropping entries that would break
        the order, as Kafka does); persisted before returning when it changed anything."""
        cache = self._cache
        if len(cache) and cache.latest_epoch == epoch and start_offset >= cache.latest_start_offset:
            if start_offset < 0:
                raise ValueError(f"epoch cache entry ({epoch}, {start_offset}): negative offset")
            return False  # the common case on every append: nothing to write
        return self._change("assign", epoch, start_offset)

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``: forget epochs that start at or after it."""
        return self._change("truncate_from_end", end_offset)

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to ``start_offset``: the epoch in force there now starts there."""
        return self._change("truncate_from_start", start_offset)

    def clear(self) -> bool:
        if not len(self._cache):
            return False
        write_epoch_checkpoint(self.path, [])
        self._cache = EpochCache()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's ``endOffsetFor``: (largest epoch <= ``epoch``, where it ends); see
        :meth:`EpochCache.end_offset_for`."""
        return self._cache.end_offset_for(epoch, log_end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        return self._cache.epoch_for_offset(offset)

    @property
    def latest_epoch(self) -> int:
        return self._cache.latest_epoch

    @property
    def native(self) -> EpochCache:
        """The in-memory cache, for read-only use on hot paths."""
        return self._cache

    def entries(self) -> list[tuple[int, int]]:
        return self._cache.entries()

    def __len__(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({str(self.path)!r}, {self._cache.entries()!r})"
