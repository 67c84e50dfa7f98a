"""Lines that a misbehaving peer would repeat many times a second, logged once per key and
then once per interval with the count of those left out (a client retrying a refused TLS
handshake or a wrong password: librdkafka tries again every ~50 ms)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

__all__ = ["RepeatLimiter"]


class RepeatLimiter:
    """``admit(key)``: None when a line for ``key`` was logged less than ``every_s`` ago (it is
    counted); else the number of lines left out since the last one, and the interval starts
    again. At most ``remembered`` keys are kept (then all are forgotten)."""

    def __init__(
        self,
        every_s: float = 30.0,
        *,
        clock: Callable[[], float] | None = None,
        remembered: int = 4096,
    ) -> None:
        """``clock``: seconds, monotonic (default ``time.monotonic``; the Raft core passes its
        own ``now``, so this module imports no clock for it)."""
        if clock is None:
            import time

            clock = time.monotonic
        self.every_s = every_s
        self.clock = clock
        self.remembered = remembered
        self._last: dict[Hashable, list[float]] = {}  # key -> [when logged, left out since]

    def admit(self, key: Hashable) -> int | None:
        now = self.clock()
        seen = self._last.get(key)
        if seen is not None and now - seen[0] < self.every_s:
            seen[1] += 1
            return None
        if len(self._last) >= self.remembered:
            self._last.clear()
        self._last[key] = [now, 0]
        return 0 if seen is None else int(seen[1])

    @staticmethod
    def since(left_out: int, host: str) -> str:
        """The suffix naming what was left out: `` (and 57 more from HOST since)``."""
        return f" (and {left_out} more from {host} since)" if left_out else ""
