"""The end of the current event-loop iteration: callbacks that run once the loop has run what
is ready now -- the other requests that arrived together -- all in one loop hop, however many
ask. What gathers the work of one iteration (Produce's group append, the embedded appends'
group, the node's shared poll) waits for it here, so that they share the hop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

__all__ = ["IterationEnd"]

logger = logging.getLogger(__name__)


class IterationEnd:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._callbacks: list[Callable[[], None]] = []

    def add(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at the end of this iteration, after those added before it."""
        if not self._callbacks:
            self._loop.call_soon(self._run)
        self._callbacks.append(callback)

    def _run(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a bug: the others still run
                logger.exception("end-of-iteration callback %r failed", callback)
