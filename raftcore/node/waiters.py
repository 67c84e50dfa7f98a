"""Coroutines waiting for the node to say that something moved: :class:`Waiters` (the high
watermark, the log start offset), woken all at once, never polled, with a timeout;
:class:`ChangeWaiters` (the core's verdict on a voter change, by its token)."""

from __future__ import annotations

import asyncio
import contextlib

from raftcore.error_codes import Errors
from raftcore.raft.reconfig import ChangeOutcome
from raftcore.raft.values import LeaderAndEpoch

__all__ = ["ChangeWaiters", "Waiters"]


class Waiters:
    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[asyncio.Event] = []

    def __len__(self) -> int:
        """How many wait now."""
        return len(self._events)

    async def wait(self, timeout_s: float) -> None:
        """Until the next :meth:`wake`, or ``timeout_s``."""
        event = asyncio.Event()
        self._events.append(event)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            if event in self._events:
                self._events.remove(event)

    def wake(self) -> None:
        for event in self._events:
            event.set()


class ChangeWaiters:
    """The requests waiting for the core's verdict on a voter change, by its token."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[ChangeOutcome]] = {}

    def wait_for(self, token: int) -> asyncio.Future[ChangeOutcome]:
        fut = self._waiting[token] = asyncio.get_running_loop().create_future()
        return fut

    def deliver(self, outcomes: list[ChangeOutcome]) -> None:
        for outcome in outcomes:
            fut = self._waiting.pop(outcome.token, None)
            if fut is not None and not fut.done():
                fut.set_result(outcome)

    def forget(self, token: int) -> None:
        self._waiting.pop(token, None)

    def fail_all(self, leader: LeaderAndEpoch) -> None:
        """The node stops: whatever was in flight may still commit under another leader."""
        waiting, self._waiting = self._waiting, {}
        for token, fut in waiting.items():
            if not fut.done():
                fut.set_result(
                    ChangeOutcome(
                        token,
                        Errors.NOT_LEADER_OR_FOLLOWER,
                        "the leader stopped before the change was committed; it may still be",
                        leader,
                    )
                )
