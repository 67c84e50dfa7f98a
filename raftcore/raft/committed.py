"""The committed offset: no leader makes a replica remove a record below it.

Kafka keeps each replica's high watermark in a checkpoint (``replication-offset-checkpoint``,
written every ``replica.high.watermark.checkpoint.interval.ms``) and its log refuses to
truncate below the high watermark. Here the committed offset is the highest of the high
watermark this replica knows now and the one it was started with (the node reads it back from
its checkpoint, raftcore.node.committed_checkpoint), never above the log's end at start (a
crash may take an unflushed tail the checkpoint counted; Kafka caps its checkpoint the same
way). It never moves back while the core runs, not even when a new leader starts without a
high watermark.

Why a refusal is safe: a leader holds every committed record (KIP-595's vote rule), so a
healthy quorum never asks a follower to drop one -- a DivergingEpoch ends at or past every
committed offset the follower knows, and a snapshot is sent only past them or onto a log that
holds its prefix. A request that would drop one proves that the leader was elected without the
committed records: a majority of the voters lost their disks and came back empty (KIP-279's
truncation would then erase every acknowledged record of this replica, the last copy). The
core refuses before the log is touched: :class:`~raftcore.errors.TruncationRefusedError` out
of the call, and the node stops with its message, keeping the log for the operator
(docs/operations.md).

A lower bound is enough: a checkpoint that lags only protects fewer records, never refuses a
healthy leader. So the node writes it off the commit path, never an fsync per commit.
"""

from __future__ import annotations

from raftcore.errors import TruncationRefusedError

__all__ = ["CommittedOffset"]


class CommittedOffset:
    """The offset below which this replica knows every record is committed."""

    __slots__ = ("_offset",)

    def __init__(self, persisted: int = 0) -> None:
        if persisted < 0:
            raise ValueError(f"a committed offset is not negative: {persisted}")
        self._offset = persisted

    @property
    def offset(self) -> int:
        return self._offset

    def started(self, log_end_offset: int) -> None:
        """At start: what the log no longer holds (an unflushed tail lost in a crash) it
        cannot protect."""
        self._offset = min(self._offset, log_end_offset)

    def observe(self, high_watermark: int | None) -> int:
        """Take in the high watermark known now; the committed offset after it."""
        if high_watermark is not None and high_watermark > self._offset:
            self._offset = high_watermark
        return self._offset

    def check(
        self, offset: int, high_watermark: int | None, *, leader: int, epoch: int, what: str
    ) -> None:
        """Raise TruncationRefusedError if a leader's request would remove records from
        ``offset`` on while the committed offset is above it. ``what``: the request, as the
        stop line says it ("truncate the log", "install a snapshot")."""
        committed = self.observe(high_watermark)
        if offset < committed:
            raise TruncationRefusedError(leader, epoch, offset, committed, what)
