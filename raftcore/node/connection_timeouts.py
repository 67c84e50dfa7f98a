"""Connections that hold a node's resources without using them are closed, by a check on a
coarse timer (no timer per read or per connection):

- ``connections.max.idle.ms`` (Kafka's name and default, 10 min): no byte received and none
  sent for that long (an answer the client does not read is not sent);
- the login timeout: on a SASL listener, a connection that has not logged in this long
  after it was accepted (the TLS handshake, on SASL_SSL, counts against the same time; it
  has its own timer in :mod:`raftcore.node.tls_listener`);
- the frame receive timeout: a frame whose first bytes arrived and whose last have not, this
  long after (a slowloris sending a byte at a time). Time spent not reading, because the
  node is not (the connection's requests are in flight, or the request budget is spent), does
  not count.

Each check is exact to one period of the timer (a quarter of the shortest timeout, at most a
second). A connection closed for one of them is aborted: what it had not sent yet is dropped
with it (a client that does not read would otherwise keep the transport's buffer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from raftcore.log_limit import RepeatLimiter

__all__ = ["CLOSE_REASONS", "FRAME_TIMEOUT", "IDLE", "LOGIN_TIMEOUT", "ConnectionTimeouts"]

logger = logging.getLogger(__name__)

IDLE = "idle"
LOGIN_TIMEOUT = "login_timeout"
FRAME_TIMEOUT = "frame_timeout"
CLOSE_REASONS = (IDLE, LOGIN_TIMEOUT, FRAME_TIMEOUT)
LOG_EVERY_S = 30.0  # per client host and reason (idle closes are logged at DEBUG only)
MAX_PERIOD_S = 1.0


class _Watch:
    """What the timer saw of one connection at its last look."""

    __slots__ = ("active_at", "activity", "frame", "frame_since")

    def __init__(self, now: float, activity: Any) -> None:
        self.activity = activity
        self.active_at = now
        self.frame: int | None = None  # the partial frame being watched (its number)
        self.frame_since = now


class ConnectionTimeouts:
    """Closes the connections in ``connections`` (ServerConnections, the node's own set)
    that break a timeout; ``closed`` counts them by reason. :meth:`start` on the loop,
    :meth:`close` to stop."""

    def __init__(
        self,
        connections: Collection[Any],
        *,
        idle_ms: int,
        login_ms: int,
        frame_ms: int,
        prefix: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connections = connections
        self.idle_s = idle_ms / 1000
        self.login_s = login_ms / 1000
        self.frame_s = frame_ms / 1000
        self.prefix = prefix
        self.clock = clock
        self.period_s = max(0.01, min(MAX_PERIOD_S, min(idle_ms, login_ms, frame_ms) / 4000))
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)
        self._seen: dict[Any, _Watch] = {}
        self._log = RepeatLimiter(LOG_EVERY_S, clock=clock)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._seen.clear()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                self.check(self.clock())
            except Exception:  # a bug here must not stop the checks for good
                logger.exception("%s checking the connections' timeouts failed", self.prefix)

    def check(self, now: float) -> None:
        """Look at every connection once; close those past a timeout."""
        seen, fresh = self._seen, {}
        for conn in list(self.connections):
            if conn.closed:
                continue
            watch = seen.get(conn)
            activity = conn.activity()
            if watch is None:
                watch = _Watch(now, activity)
            elif activity != watch.activity:
                watch.activity, watch.active_at = activity, now
            reason = self._broken(conn, watch, now)
            if reason is None:
                fresh[conn] = watch
            else:
                self._close(conn, *reason)
        self._seen = fresh

    def _broken(self, conn: Any, watch: _Watch, now: float) -> tuple[str, str] | None:
        deadline = conn.login_deadline
        if deadline is not None:
            if conn.logged_in():
                conn.login_deadline = None
            elif now >= deadline:
                return LOGIN_TIMEOUT, f"not logged in after {self.login_s:g} s (login timeout)"
        frame = conn.partial_frame()
        if frame is None or frame != watch.frame:
            watch.frame, watch.frame_since = frame, now
        elif now - watch.frame_since >= self.frame_s:
            return FRAME_TIMEOUT, (
                f"a frame still incomplete after {self.frame_s:g} s (frame receive timeout)"
            )
        if now - watch.active_at >= self.idle_s:
            return IDLE, f"idle for {self.idle_s:g} s (connections.max.idle.ms)"
        return None

    def _close(self, conn: Any, reason: str, why: str) -> None:
        self.closed[reason] += 1
        address = conn.address
        host = address.rpartition(":")[0] or address
        left_out = self._log.admit((host, reason)) if reason != IDLE else None
        line = f"{self.prefix} closing connection from {address}: {why}"
        if left_out is None:
            logger.debug("%s", line)
        else:
            logger.info("%s%s", line, RepeatLimiter.since(left_out, host))
        conn.close(abort=True)
