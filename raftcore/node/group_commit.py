"""Group commit: the messages the core marks ``after_flush`` (vote grants, append acks) wait
here for the fsync that covers them, and go out once it ran; appends that arrive during an
fsync are covered by the next one. The fsyncs run on the process's fsync threads
(:mod:`raftcore.node.flusher`): after every append with ``flush="always"``, every
``flush_interval_ms`` with ``flush="interval"``. A failed fsync is handed to ``failed``: the
page cache may then hold what never reached the disk, and nothing held is ever sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from raftcore.node.flusher import Flusher

if TYPE_CHECKING:
    from raftcore.log import SegmentedLog
    from raftcore.node.metrics import NodeMetrics
    from raftcore.raft import Outbound

__all__ = ["GroupCommit"]


class GroupCommit:
    def __init__(
        self,
        log: SegmentedLog,
        loop: asyncio.AbstractEventLoop,
        *,
        flush: str,
        flush_interval_ms: int,
        metrics: NodeMetrics,
        send: Callable[[Outbound], None],
        released: Callable[[], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        """``send`` a message that may go; ``released``: held messages went out (the core may
        have more to do); ``failed``: an fsync failed (the node stops)."""
        self.log = log
        self.flush = flush  # "always" or "interval" (NodeConfig)
        self.flush_interval_ms = flush_interval_ms
        self.metrics = metrics
        self._send = send
        self._released = released
        self._failed = failed
        self._held: list[Outbound] = []  # waiting for an fsync
        # fsyncs on the shared pool: from the node's start; requests made before wait until then
        self.flusher = Flusher(self.fsync, loop, self._flushed)
        self._interval_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.flusher.start()
        if self.flush == "interval":
            self._interval_task = asyncio.ensure_future(self._interval_flush_loop())

    def close(self) -> None:
        """Stop fsyncing (the fsync running goes on: :meth:`Flusher.join`); nothing it reports
        from now on is acted on."""
        self.flusher.close()
        if self._interval_task is not None:
            self._interval_task.cancel()

    def submit(self, messages: Iterable[Outbound]) -> None:
        """Send the core's messages, each now or once the fsync covering it ran; with
        ``flush="always"``, ask for that fsync."""
        log = self.log
        flushed = log.flushed_offset
        for message in messages:
            if message.after_flush >= 0 and message.after_flush > flushed:
                self._held.append(message)
            else:
                self._send(message)
        if log.end_offset > log.flushed_offset and self.flush == "always":
            self.flusher.request()

    def fsync(self) -> bool:
        """On the fsync thread: fsync the log, unless (with ``flush="always"``) an earlier fsync
        already covered every append (a request made while it ran, for appends it took)."""
        log = self.log
        if self.flush == "always" and log.end_offset <= log.flushed_offset:
            return False
        self.metrics.timed_flush(log.flush)
        return True

    def _flushed(self, error: BaseException | None) -> None:
        """The fsync thread's report (on the loop): release what waited for it, or stop."""
        if self.flusher.closed:
            return
        if error is not None:
            # the page cache may now hold what never reached the disk: stop, and recover from
            # the disk at the next start (PostgreSQL's fsyncgate; Rebello et al., ATC '20)
            self._failed(error)
            return
        flushed = self.log.flushed_offset
        held, self._held = self._held, []
        for message in held:
            if message.after_flush > flushed:
                self._held.append(message)
            else:
                self._send(message)
        self._released()

    async def _interval_flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_ms / 1000)
            self.flusher.request()
