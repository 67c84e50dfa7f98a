"""Coroutines waiting, with a timeout, for the node to say that something moved (the high
watermark, the log start offset): woken all at once, never polled."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Waiters"]


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
