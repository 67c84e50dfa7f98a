"""The timer for the Raft core's next deadline: the core says, in each output, when it next
has something to do (an election timeout, a fetch to send, a linger that ends); one timer
waits for the earliest such deadline and then polls the core. A later deadline never delays
an earlier one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftcore.node.clock import now_ms

__all__ = ["PollTimer"]


class PollTimer:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        poll: Callable[[], None],
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._loop = loop
        self._poll = poll  # polls the core, if the node runs
        self._clock = clock  # the core's clock, which its deadlines are on
        self._handle: asyncio.TimerHandle | None = None
        self._at = float("inf")  # the deadline waited for (ms, the core's clock)

    def schedule(self, deadline: float) -> None:
        """Poll at ``deadline`` (ms, on the core's ``clock``), unless a poll
        already waits for that or earlier; ``inf``: nothing to do."""
        if deadline >= self._at or deadline == float("inf"):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = deadline
        delay = max(0.0, (deadline - self._clock()) / 1000)
        self._handle = self._loop.call_later(delay, self._fire)

    def soon(self) -> None:
        """Poll once the loop has run what is ready now (the other requests that arrived in
        this iteration), however many ask."""
        self.schedule(self._clock())

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _fire(self) -> None:
        self._handle = None
        self._at = float("inf")
        self._poll()
