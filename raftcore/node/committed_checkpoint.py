"""The node's high watermark checkpoint: the core's committed offset on disk
(raftcore.raft.committed), so that a restarted replica still refuses a leader that would
truncate committed records.

Kafka writes its ``replication-offset-checkpoint`` every
``replica.high.watermark.checkpoint.interval.ms`` (5 s) and at a clean shutdown; so does the
node, into ``<data-dir>/log/high-watermark-checkpoint`` (written whole and fsynced, renamed
over the old one: :func:`raftcore.checkpoint.write_atomically`), in a worker thread, off the
commit path. The committed offset is a lower bound: a checkpoint that lags protects fewer
records and refuses no healthy leader, so it never costs an fsync per commit. It only grows.

At start: no file is a new replica (0). A file that cannot be read stops the start with one
line naming it. Read as 0 it would let the one case it exists for -- a leader elected by a
majority that lost its disks -- truncate this replica's committed records, perhaps the last
copy; Kafka likewise takes a log directory offline whose checkpoint it cannot read. The
operator who knows the cluster is healthy removes the file (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from raftcore.errors import CorruptCheckpointError
from raftcore.log.checkpoints import read_high_watermark, write_high_watermark
from raftcore.log.config import HIGH_WATERMARK_FILE

__all__ = ["CommittedCheckpoint", "read_committed_offset"]

logger = logging.getLogger(__name__)


def read_committed_offset(log_dir: Path) -> int:
    """The committed offset checkpointed in ``log_dir``: 0 without the file. Raises
    CorruptCheckpointError with the line to stop on for a file that cannot be read."""
    try:
        found = read_high_watermark(log_dir)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(
            f"{exc}; it holds the offset below which this replica's records are committed, "
            f"and without it a leader could truncate them: if the cluster's other voters are "
            f"healthy, remove {log_dir / HIGH_WATERMARK_FILE} and start again (it is written "
            f"anew), see docs/operations.md"
        ) from None
    return 0 if found is None else found


class CommittedCheckpoint:
    """Writes ``committed()`` to ``log_dir`` every ``interval_ms`` when it grew, and at
    :meth:`close`. A write that fails (a full disk) is logged and tried at the next interval:
    the file on disk is still a lower bound."""

    def __init__(
        self,
        log_dir: Path,
        committed: Callable[[], int],
        *,
        interval_ms: int,
        written: int,
        prefix: str,
    ) -> None:
        self.log_dir = log_dir
        self.committed = committed
        self.interval_ms = interval_ms
        self.written = written  # what the file holds
        self.prefix = prefix
        self.writes = 0
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()  # one write at a time (a cancelled loop's may go on)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            await asyncio.to_thread(self._write_if_grown, self.committed())

    def _write_if_grown(self, offset: int) -> None:
        # ``offset`` is read on the event loop: the core is never touched from this thread
        with self._lock:
            if offset <= self.written:
                return
            try:
                write_high_watermark(self.log_dir, offset)
            except OSError as exc:
                logger.warning(
                    "%s cannot write the high watermark checkpoint: %s", self.prefix, exc
                )
                return
            self.written = offset
            self.writes += 1

    def stop(self) -> None:
        """Stop the periodic writes (at any close)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def close(self) -> None:
        """At a clean stop: stop, then write the committed offset one last time."""
        self.stop()
        await asyncio.to_thread(self._write_if_grown, self.committed())
