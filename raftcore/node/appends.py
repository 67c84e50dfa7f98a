"""The leader's appends as the node takes them, and the core's verdict on each: the embedding
API's ``append`` (the calls of one loop iteration written as one batch,
:mod:`raftcore.node.append_group`), Produce's batches (alone, or a group's parts,
:mod:`raftcore.kafka.produce_group`) and retried batches watched again. The core decides;
this writes, polls and keeps the verdicts (:mod:`raftcore.node.verdicts`).

The first append of a loop iteration is polled at once (one request alone waits for nothing);
the others of that iteration share one poll once the loop has run them, so that their fetch
answers, fsync and verdicts go out in one step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftcore.node.append_group import AppendGroup
from raftcore.raft import Appended, LogWriteError

if TYPE_CHECKING:
    from raftcore.node.iteration import IterationEnd
    from raftcore.node.poll_timer import PollTimer
    from raftcore.node.verdicts import AppendVerdicts
    from raftcore.raft import Output, RaftCore

__all__ = ["LeaderAppends"]


class LeaderAppends:
    """``core()`` is the running core (it raises when the node does not run); ``drive`` acts on
    a core output; ``poke`` polls the core soon (its EndQuorumEpoch requests, after a
    resignation)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        core: Callable[[], RaftCore],
        drive: Callable[[Output], None],
        poke: Callable[[], None],
        poll_timer: PollTimer,
        iteration_end: IterationEnd,
        verdicts: AppendVerdicts,
        now: Callable[[], int],
    ) -> None:
        self._loop = loop
        self._core = core
        self._drive = drive
        self._poke = poke
        self._poll_timer = poll_timer
        self._iteration_end = iteration_end
        self.verdicts = verdicts
        self._now = now  # the group's clock
        self._group = AppendGroup(loop, self._append_now, verdicts, iteration_end.add)
        self._polled_in_iteration = False

    async def append(self, batch: list[Any], wait: bool) -> Appended:
        """RaftNode.append: ``batch`` goes into this iteration's group."""
        self._core()
        appended = await self._group.add(batch, wait)
        if wait:
            await self.verdicts.wait(appended, None)
        return appended

    async def append_tracked(self, batch: list[Any]) -> Appended:
        """RaftNode.append_tracked: into this iteration's group; the caller waits for the
        verdict (wait_committed)."""
        self._core()
        return await self._group.add(batch, True)

    def _append_now(self, records: list[Any], track: bool) -> Appended:
        """One batch on the leader, now (the group's write; tracked by the group)."""
        core = self._core()
        appended = self._resigns_on_write_failure(core.append, records, track)
        self._drive(core.poll(self._now()))
        return appended

    def append_batches(self, batches: Any, track: bool, checked: Any) -> Appended:
        """RaftNode.append_batches."""
        core = self._core()
        appended = self._resigns_on_write_failure(
            core.append_batches, batches, track, checked=checked
        )
        self.verdicts.track(appended, self._loop)
        self._poll_after_append(core)
        return appended

    def append_batches_in_parts(
        self, batches: Any, checked: Any, counts: list[int]
    ) -> list[Appended]:
        """RaftNode.append_batches_in_parts."""
        core = self._core()
        appended = self._resigns_on_write_failure(
            core.append_batches, batches, True, checked=checked
        )
        parts = self.verdicts.track_parts(appended, [(c, True) for c in counts], self._loop)
        self._poll_after_append(core)
        return parts

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        """RaftNode.watch."""
        core = self._core()
        appended = core.watch(first_offset, last_offset, self._now())
        self.verdicts.track(appended, self._loop)
        self._drive(core.poll(self._now()))
        return appended

    def _poll_after_append(self, core: RaftCore) -> None:
        if self._polled_in_iteration:
            self._poll_timer.soon()
            return
        self._polled_in_iteration = True
        self._iteration_end.add(self._next_iteration)
        self._drive(core.poll(self._now()))

    def _next_iteration(self) -> None:
        self._polled_in_iteration = False

    def _resigns_on_write_failure(
        self, append: Any, data: Any, track: bool, **options: Any
    ) -> Appended:
        """``append(data, now, track=track, **options)``; a log that cannot be written made the
        core resign (LogWriteError, a NotLeaderError): its EndQuorumEpoch requests go out now."""
        try:
            return append(data, self._now(), track=track, **options)  # type: ignore[no-any-return]
        except LogWriteError:
            self._poke()
            raise
