"""A snapshot's ``.part`` file, and the one way it becomes a snapshot.

Freezing follows Kafka's ``FileRawSnapshotWriter.freeze`` and adds the check Kafka skips:

1. verify the whole file (``verify_snapshot``: size, framing, every CRC, header first, footer
   last, offsets, epoch) -- a torn or corrupt file is deleted, never renamed;
2. fsync the file;
3. make it read-only (0o444);
4. rename ``<id>-<tail>.checkpoint.part`` to ``<id>.checkpoint``;
5. fsync the directory, so the name survives a crash.

A ``.checkpoint`` file therefore only ever exists whole. A ``.part`` file left by a crash is
deleted when the store opens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path

from raftcore._native.segment import MappedFile, write_at
from raftcore.checkpoint import fsync_directory
from raftcore.errors import CorruptSnapshotError, SnapshotError
from raftcore.snapshot.format import SnapshotSummary, verify_snapshot
from raftcore.snapshot.ids import PART_SUFFIX, SnapshotId, snapshot_path

__all__ = ["PartFile"]

log = logging.getLogger(__name__)

FROZEN_MODE = 0o444


class PartFile:
    """An open ``.part`` file of snapshot ``snapshot_id`` in ``directory``: positional writes,
    then ``freeze`` or ``discard``. Not thread-safe; one owner (a writer or a receiver)."""

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        self.snapshot_id = snapshot_id
        self.directory = directory
        # A random tail, as Kafka's Files.createTempFile: two writers of one id never meet.
        path = directory / f"{snapshot_id.stem}-{secrets.token_hex(8)}{PART_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.path = path
        self._fd = fd
        self._done = False  # frozen or discarded
        self.size = 0

    @property
    def closed(self) -> bool:
        """Frozen or discarded: no more writes."""
        return self._done

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``position``; the size grows to the end of the write."""
        if self._done:
            raise SnapshotError(f"{self.path}: the .part file is closed")
        n = write_at(self._fd, data, position)
        self.size = max(self.size, position + n)

    def freeze(
        self, *, expected_size: int | None = None, check_records: bool = True
    ) -> tuple[Path, SnapshotSummary]:
        """Verify, fsync, make read-only, rename into place, fsync the directory. Returns the
        frozen file's path and what verification found. On CorruptSnapshotError (or any
        other failure) the ``.part`` file is deleted and the error raised."""
        if self._done:
            raise SnapshotError(f"{self.path}: the .part file is closed")
        target = snapshot_path(self.directory, self.snapshot_id)
        try:
            summary = self._verify(expected_size, check_records)
            os.fsync(self._fd)
            os.fchmod(self._fd, FROZEN_MODE)
            os.close(self._fd)
            self._fd = -1
            os.replace(self.path, target)
        except BaseException:
            self.discard()
            raise
        self._done = True
        fsync_directory(self.directory)
        return target, summary

    def _verify(self, expected_size: int | None, check_records: bool) -> SnapshotSummary:
        name = str(self.path)
        if self.size == 0:
            raise CorruptSnapshotError(f"{name}: the snapshot is empty at byte position 0", name, 0)
        mapping = MappedFile(self._fd, self.size)
        return verify_snapshot(
            mapping.view(0, self.size),
            snapshot_id=self.snapshot_id,
            expected_size=expected_size,
            check_records=check_records,
            name=name,
        )

    def discard(self) -> None:
        """Close and delete the ``.part`` file (a no-op once frozen or discarded)."""
        if self._done:
            return
        self._done = True
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # the store removes it at the next start
            log.warning("cannot delete %s: %s", self.path, exc)

    def __repr__(self) -> str:
        return f"PartFile({str(self.path)!r}, size={self.size}, closed={self.closed})"
