"""The core's verdicts on tracked appends (:mod:`raftcore.raft.pending`), handed to the callers
waiting for them: committed in the epoch that appended the records, or not (the leader changed
first). The core decides; this only keeps a future per tracked append, by its token, and hands
the verdict on a group's batch (:mod:`raftcore.node.append_group`) to each of its parts."""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from raftcore.errors import RaftcoreError
from raftcore.raft import Appended, AppendOutcome, NotLeaderError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["AppendVerdicts"]


def _time_out(fut: asyncio.Future[AppendOutcome]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class AppendVerdicts:
    """The tracked appends whose verdict a caller may wait for, by token."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._futures: dict[int, asyncio.Future[AppendOutcome]] = {}
        # a group's batch token -> its tracked parts (their tokens are ours: negative)
        self._parts: dict[int, list[Appended]] = {}
        self._part_tokens = itertools.count(-1, -1)

    def track(self, appended: Appended, loop: asyncio.AbstractEventLoop) -> Appended:
        """Keep a place for the verdict on ``appended`` (if the core tracks it)."""
        if appended.token is not None:
            self._futures[appended.token] = loop.create_future()
        return appended

    def track_parts(
        self, appended: Appended, parts: list[tuple[int, bool]], loop: asyncio.AbstractEventLoop
    ) -> list[Appended]:
        """Cut ``appended`` (one batch of several callers' records) into consecutive parts of
        ``(record count, tracked)``; each tracked part gets the batch's verdict as its own."""
        out: list[Appended] = []
        tracked: list[Appended] = []
        offset = appended.first_offset
        for count, track in parts:
            last = offset + count - 1
            if track and appended.token is not None:
                part = Appended(offset, last, appended.epoch, next(self._part_tokens))
                self._futures[part.token] = loop.create_future()  # type: ignore[index]
                tracked.append(part)
            else:
                part = Appended(offset, last, appended.epoch)
            out.append(part)
            offset = last + 1
        if offset != appended.last_offset + 1:
            raise ValueError(
                f"{self.prefix} parts of {offset - appended.first_offset} records for {appended}"
            )
        if tracked:
            self._parts[appended.token] = tracked  # type: ignore[index]
        return out

    def forget(self, appended: Appended) -> None:
        if appended.token is not None:
            self._futures.pop(appended.token, None)

    def deliver(self, outcomes: Iterable[AppendOutcome]) -> None:
        """The core's verdicts, from one of its outputs."""
        for outcome in outcomes:
            token = outcome.appended.token
            fut = self._futures.get(token)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(outcome)
            for part in self._parts.pop(token, ()):  # type: ignore[arg-type]
                fut = self._futures.get(part.token)  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    fut.set_result(AppendOutcome(part, outcome.error, outcome.leader))

    def fail_all(self, message: str) -> None:
        """The node stops: no verdict will come."""
        futures, self._futures = self._futures, {}
        self._parts.clear()
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(RaftcoreError(message))
                fut.exception()  # retrieved: nobody may be waiting

    async def wait(self, appended: Appended, timeout_s: float | None) -> None:
        """Return once ``appended`` is committed in its epoch; NotLeaderError as soon as it
        cannot be, TimeoutError after ``timeout_s`` (RaftNode.wait_committed)."""
        if not isinstance(appended, Appended) or appended.token is None:
            raise TypeError(
                "wait_committed takes a tracked Appended (from append(..., wait=...), "
                f"append_batches or watch), not {appended!r}"
            )
        fut = self._futures.get(appended.token)
        if fut is None:
            raise RaftcoreError(f"{self.prefix} no verdict pending for {appended} (waited twice?)")
        # The verdict future itself is awaited (no shield, no wait_for: one loop hop from the
        # verdict to the waiter instead of four); it is forgotten whatever ends the wait.
        timer = None
        if timeout_s is not None:
            timer = asyncio.get_running_loop().call_later(timeout_s, _time_out, fut)
        try:
            outcome = await fut
        finally:
            self._futures.pop(appended.token, None)
            if timer is not None:
                timer.cancel()
        if not outcome.committed:
            raise NotLeaderError(
                outcome.leader,
                f"{self.prefix} offsets {appended.first_offset}..{appended.last_offset} of "
                f"epoch {appended.epoch} were not committed in that epoch; leader is now "
                f"{outcome.leader.leader_id if outcome.leader.known else 'unknown'} in epoch "
                f"{outcome.leader.epoch}",
            )
