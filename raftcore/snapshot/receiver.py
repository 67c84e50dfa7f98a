"""Receiving a snapshot from the leader in FetchSnapshot chunks (KIP-630).

The follower asks for the bytes from ``position`` on; each response carries the snapshot's
total ``Size`` and an arbitrary slice of its bytes (not aligned to batches). The receiver
appends each slice at its position in a ``.part`` file and, once ``position == size``,
``freeze`` verifies the whole file (size, every CRC, header first, footer last, offsets, epoch)
before renaming it into place. Kafka freezes without any check and then truncates the log to
the snapshot; a torn or corrupt download would replace the follower's log.

A lost connection loses nothing: the store keeps the receiver (its ``.part`` file and
position) while the process lives, and ``SnapshotStore.receive`` of the same id resumes it.
Bytes from a different leader may come from a different file of the same id (another
compression, other timestamps), so a resumed download must come from the same ``source``;
otherwise it starts over. At start, the store deletes ``.part`` files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftcore.errors import SnapshotError, SnapshotPositionError
from raftcore.snapshot.format import SnapshotSummary
from raftcore.snapshot.ids import SnapshotId
from raftcore.snapshot.part import PartFile

__all__ = ["SnapshotReceiver"]


class SnapshotReceiver:
    """A snapshot being downloaded. Made (or resumed) by ``SnapshotStore.receive``.

    ``position`` is where the next chunk must start (FetchSnapshot's Position); ``size`` is
    the total announced by the first response (None before it); ``source`` is who sends it.
    """

    def __init__(
        self,
        part: PartFile,
        *,
        source: Any = None,
        check_records: bool = True,
        on_done: Callable[[SnapshotReceiver, SnapshotSummary | None], None] | None = None,
    ) -> None:
        self._part = part
        self.snapshot_id: SnapshotId = part.snapshot_id
        self.source = source
        self.size: int | None = None
        self._check_records = check_records
        self._on_done = on_done
        self._state = "open"

    @property
    def position(self) -> int:
        """Bytes received so far: the Position of the next FetchSnapshot request."""
        return self._part.size

    @property
    def complete(self) -> bool:
        """Every byte of the announced size has arrived; ``freeze`` may be called."""
        return self.size is not None and self._part.size == self.size

    @property
    def active(self) -> bool:
        return self._state == "open"

    def _check_open(self, what: str) -> None:
        if self._state != "open":
            raise SnapshotError(f"snapshot {self.snapshot_id}: {what} on a {self._state} receiver")

    def append(self, position: int, data: bytes | bytearray | memoryview, *, size: int) -> bool:
        """Write a FetchSnapshot chunk: ``data`` at ``position`` of a snapshot of ``size``
        bytes. Returns whether the snapshot is now complete.

        The chunk must start at ``self.position`` and end within ``size``, and ``size`` must
        be the one of the first chunk (Kafka asserts the same); otherwise
        SnapshotPositionError, with nothing written -- the caller drops the response, or
        ``abort``s and starts again.
        """
        self._check_open("append")
        if size <= 0:
            raise SnapshotPositionError(f"snapshot {self.snapshot_id}: announced size {size}")
        if self.size is not None and size != self.size:
            raise SnapshotPositionError(
                f"snapshot {self.snapshot_id}: a chunk says the size is {size}, earlier ones "
                f"{self.size}"
            )
        length = len(memoryview(data).cast("B"))
        if position != self._part.size:
            raise SnapshotPositionError(
                f"snapshot {self.snapshot_id}: a chunk at position {position}, expected "
                f"{self._part.size}"
            )
        if position + length > size:
            raise SnapshotPositionError(
                f"snapshot {self.snapshot_id}: a chunk of {length} bytes at {position} runs past "
                f"the size {size}"
            )
        self.size = size
        if length:
            try:
                self._part.write_at(position, data)
            except BaseException:
                self.abort()
                raise
        return self.complete

    def freeze(self) -> SnapshotSummary:
        """Verify the whole download and rename it into place (fsyncs included). A download
        that fails verification is deleted and CorruptSnapshotError raised: fetch it again
        from position 0. Raises SnapshotPositionError, keeping the bytes, when incomplete."""
        self._check_open("freeze")
        if not self.complete:
            raise SnapshotPositionError(
                f"snapshot {self.snapshot_id}: only {self._part.size} of "
                f"{self.size if self.size is not None else '?'} bytes received"
            )
        try:
            _, summary = self._part.freeze(
                expected_size=self.size, check_records=self._check_records
            )
        except BaseException:
            self._finish("failed", None)
            raise
        self._finish("frozen", summary)
        return summary

    def abort(self) -> None:
        """Give the download up: the ``.part`` file is deleted."""
        if self._state == "open":
            self._part.discard()
            self._finish("aborted", None)

    def _finish(self, state: str, summary: SnapshotSummary | None) -> None:
        self._state = state
        if self._on_done is not None:
            self._on_done(self, summary)

    def __repr__(self) -> str:
        return (
            f"SnapshotReceiver({self.snapshot_id}, {self._state}, position={self.position}, "
            f"size={self.size}, source={self.source!r})"
        )
