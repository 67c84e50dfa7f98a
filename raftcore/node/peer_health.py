"""Whether a node can reach each of its peers, told to the operator without flooding the log.

A peer connection retries every 50 ms to 1 s while its peer is down; logging each attempt
would bury everything else, and logging none left a node whose peers were down saying only
"election timed out". So, per peer: the first failed attempt at WARNING
(``cannot reach voter 2 at 127.0.0.1:9092 (connection refused); retrying``), then at most one
line per ``every_s`` (30 s) while it stays down, and one INFO line when it is reached again.
A new reason (a peer that refused and now fails its TLS handshake) is told at once, at most
one line per ``REASON_CHANGE_EVERY_S``, so a reason that flips cannot flood the log either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from raftcore import connect_errors

__all__ = ["PeerReachability", "call_both"]

logger = logging.getLogger("raftcore.node.node")

REASON_CHANGE_EVERY_S = 1.0


class PeerReachability:
    """The reachability log of one peer. ``failed(exc)`` after each failed connection attempt,
    ``connected()`` each time a connection is up. ``clock`` returns seconds (monotonic)."""

    def __init__(
        self,
        prefix: str,
        what: str,
        address: str,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        quiet: bool = False,
    ) -> None:
        """``quiet``: lines at DEBUG only (another connection to the same peer says them)."""
        self.prefix = prefix
        self._warning = logger.debug if quiet else logger.warning
        self._info = logger.debug if quiet else logger.info
        self.what = what  # "voter 2"
        self.address = address
        self.every_s = every_s
        self.clock = clock
        self.failures = 0  # attempts failed since the peer was last reached
        self._down_since: float | None = None
        self._last_logged: float | None = None
        self._logged_reason: str | None = None  # the reason the last line gave

    def failed(self, exc: BaseException) -> None:
        now = self.clock()
        self.failures += 1
        reason = connect_errors.describe(exc)
        if self._last_logged is None:
            self._down_since = self._last_logged = now
            self._logged_reason = reason
            self._warning(
                "%s cannot reach %s at %s (%s); retrying",
                self.prefix,
                self.what,
                self.address,
                reason,
            )
        elif reason != self._logged_reason and now - self._last_logged >= REASON_CHANGE_EVERY_S:
            self._last_logged, self._logged_reason = now, reason
            self._warning(
                "%s cannot reach %s at %s now (%s); retrying",
                self.prefix,
                self.what,
                self.address,
                reason,
            )
        elif now - self._last_logged >= self.every_s:
            self._last_logged, self._logged_reason = now, reason
            assert self._down_since is not None
            self._warning(
                "%s still cannot reach %s at %s (%s): %d attempts in %.0f s; retrying",
                self.prefix,
                self.what,
                self.address,
                reason,
                self.failures,
                now - self._down_since,
            )

    def connected(self) -> None:
        if self._last_logged is not None:
            assert self._down_since is not None
            self._info(
                "%s reached %s at %s again (after %d failed attempts in %.0f s)",
                self.prefix,
                self.what,
                self.address,
                self.failures,
                self.clock() - self._down_since,
            )
        self.failures = 0
        self._down_since = self._last_logged = self._logged_reason = None


def call_both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    """One callback that calls ``first``, then ``second``."""

    def both() -> None:
        first()
        second()

    return both
