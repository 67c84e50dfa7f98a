"""Retention by time and by size (Kafka's ``retention.ms``, ``retention.bytes`` and
``segment.ms``): which prefix of the log may go. A pure decision over what the log reports of
its segments; the log start then moves by KIP-630's rules, as for DeleteRecords
(:meth:`raftcore.raft.snapshots.SnapshotManager.request_log_start`): a snapshot covering the
offset is taken, and the leader moves its log start there once every replica has fetched past
it or the snapshot is ``max_replication_lag_ms`` old. Followers follow the leader's log start.

Kafka's rules (``UnifiedLog.deleteOldSegments``), by whole segments, oldest first:

- **time**: a segment may go once its newest record's timestamp is more than ``retention_ms``
  old; the first segment that is not stops the walk (later ones are kept even if older, as
  Kafka does, so that the log stays a prefix cut);
- **size**: the oldest segments go while the log stays at least ``retention_bytes`` without
  them;
- never the active (last) segment: ``segment_ms`` rolls it once its first record is that old,
  so that time retention can reach it (Kafka rolls it too);
- never past the high watermark: only committed records go.

-1 turns a rule off (Kafka's default for ``retention.bytes``; raftcore's for
``retention.ms`` as well: the log is kept until told otherwise, where Kafka's topics keep seven
days).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RetentionConfig", "SegmentInfo", "retention_target", "should_roll"]


@dataclass(frozen=True)
class RetentionConfig:
    """``retention_ms`` / ``retention_bytes`` (-1: off), ``segment_ms`` (-1: off; roll the
    active segment once its first record is this old), ``check_interval_ms`` (Kafka's
    ``log.retention.check.interval.ms``, 5 minutes)."""

    retention_ms: int = -1
    retention_bytes: int = -1
    segment_ms: int = -1
    check_interval_ms: int = 300_000

    def __post_init__(self) -> None:
        for name in ("retention_ms", "retention_bytes", "segment_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < -1 or value == 0:
                raise ValueError(f"{name} must be -1 (off) or positive, got {value!r}")
        if not isinstance(self.check_interval_ms, int) or self.check_interval_ms <= 0:
            raise ValueError(f"check_interval_ms must be positive, got {self.check_interval_ms!r}")

    @property
    def enabled(self) -> bool:
        return self.retention_ms > 0 or self.retention_bytes > 0


@dataclass(frozen=True)
class SegmentInfo:
    """One segment as the log reports it: ``base_offset``, ``end_offset`` (one past its last
    record), ``size_bytes``, and the timestamps of its first batch and its newest record (-1
    for an empty segment)."""

    base_offset: int
    end_offset: int
    size_bytes: int
    first_timestamp: int
    max_timestamp: int


def retention_target(
    segments: Sequence[SegmentInfo],
    config: RetentionConfig,
    now_ms: int,
    high_watermark: int | None,
) -> tuple[int, str] | None:
    """The offset below which the log may go, and why (``"retention.ms"`` or
    ``"retention.bytes"``); None when nothing may. ``segments`` oldest first, the last one the
    active segment; ``now_ms`` wall-clock time (records carry wall-clock timestamps)."""
    if not config.enabled or high_watermark is None or len(segments) < 2:
        return None
    sealed = [s for s in segments[:-1] if s.end_offset <= high_watermark]
    by_time = 0
    if config.retention_ms > 0:
        for s in sealed:
            if s.max_timestamp < 0 or now_ms - s.max_timestamp <= config.retention_ms:
                break
            by_time += 1
    by_size = 0
    if config.retention_bytes > 0:
        excess = sum(s.size_bytes for s in segments) - config.retention_bytes
        for s in sealed:
            if excess - s.size_bytes < 0:
                break
            excess -= s.size_bytes
            by_size += 1
    count = max(by_time, by_size)
    if count == 0:
        return None
    reason = "retention.ms" if by_time >= by_size else "retention.bytes"
    return sealed[count - 1].end_offset, reason


def should_roll(active: SegmentInfo, config: RetentionConfig, now_ms: int) -> bool:
    """``segment.ms``: roll the active segment once its first record is that old (an empty
    one never)."""
    return (
        config.segment_ms > 0
        and active.end_offset > active.base_offset
        and active.first_timestamp >= 0
        and now_ms - active.first_timestamp > config.segment_ms
    )
