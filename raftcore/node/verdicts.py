"""The core's verdicts on tracked appends (:mod:`raftcore.raft.pending`), handed to the callers
waiting for them: committed in the epoch that appended the records, or not (the leader changed
first). The core decides; this only keeps a future per tracked append, by its token."""

from __future__ import annotations

import asyncio
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

    def track(self, appended: Appended, loop: asyncio.AbstractEventLoop) -> Appended:
        """Keep a place for the verdict on ``appended`` (if the core tracks it)."""
        if appended.token is not None:
            self._futures[appended.token] = loop.create_future()
        return appended

    def forget(self, appended: Appended) -> None:
        if appended.token is not None:
            self._futures.pop(appended.token, None)

    def deliver(self, outcomes: Iterable[AppendOutcome]) -> None:
        """The core's verdicts, from one of its outputs."""
        for outcome in outcomes:
            fut = self._futures.get(outcome.appended.token)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(outcome)

    def fail_all(self, message: str) -> None:
        """The node stops: no verdict will come."""
        futures, self._futures = self._futures, {}
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
