"""Retention on a node: every ``check_interval_ms`` (and once at start), each replica rolls
its active segment when ``segment.ms`` says so, and the leader asks its core to let the log
go below what ``retention.ms`` and ``retention.bytes`` allow. The decision is
:func:`raftcore.raft.retention.retention_target`; the move follows KIP-630's rules in the core
(:meth:`raftcore.raft.RaftCore.retain_below`), as DeleteRecords does: a snapshot covering the
offset, then the log start, once no replica needs the records or the snapshot is
``max_replication_lag_ms`` old. Followers follow the leader's log start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from raftcore.log.segment_times import SegmentTimes
from raftcore.raft.retention import RetentionConfig, SegmentInfo, retention_target, should_roll

if TYPE_CHECKING:
    from raftcore.node.group import RaftGroup

__all__ = ["Retention"]

logger = logging.getLogger(__name__)


class Retention:
    def __init__(self, group: RaftGroup, config: RetentionConfig) -> None:
        self.group = group
        self.config = config
        self.times = SegmentTimes()
        self.requests = 0  # times the core took a retention target (metrics)
        self.rolled = 0  # active segments sealed by segment.ms (metrics)
        self._requested = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.config.enabled or self.config.segment_ms > 0:
            self._task = asyncio.ensure_future(self._loop())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                self.check()
            except Exception:  # a closed log at shutdown, a disk error: the next check retries
                logger.exception("%s retention check failed", self.group.prefix)
            await asyncio.sleep(self.config.check_interval_ms / 1000)

    def check(self, now_ms: int | None = None) -> None:
        group, cfg = self.group, self.config
        core, log = group.core, group.log
        if core is None or log is None or log.closed or group.failure is not None:
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        segments = [SegmentInfo(*s) for s in self.times.segments(log)]
        if segments and should_roll(segments[-1], cfg, now) and log.roll():
            self.rolled += 1
            logger.info(
                "%s segment %d rolled: its first record is older than segment.ms %d",
                group.prefix,
                segments[-1].base_offset,
                cfg.segment_ms,
            )
            segments = [SegmentInfo(*s) for s in self.times.segments(log)]
        if not cfg.enabled or not core.is_leader():
            return
        target = retention_target(segments, cfg, now, core.high_watermark)
        if target is None or target[0] <= max(self._requested, log.log_start_offset):
            return
        offset, why = target
        if core.retain_below(offset, why):
            self._requested = offset
            self.requests += 1
            logger.info(
                "%s %s: the log may go below offset %d (%d segment(s)); the log start follows "
                "a snapshot there",
                group.prefix,
                why,
                offset,
                sum(1 for s in segments if s.end_offset <= offset),
            )
            group.poke()  # the snapshot it may need is due
