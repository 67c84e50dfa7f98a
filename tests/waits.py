"""Waiting for a named condition: the suite's one way to wait for something to become true.

A test waits for what it needs (a leader, a record applied, a log line, a port), polled until
one generous deadline; when the deadline passes, the failure names what was waited for and
the last thing seen, so a red run on a slow machine says what did not happen. A bare sleep is
kept only where the point is time passing (a timeout, a backoff, a clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.02  # how often a condition is checked; small beside every deadline of the suite


def _named(what: str) -> None:
    if not what:
        raise TypeError("say what is waited for (what=...): a timeout must name it")


class WaitTimeout(AssertionError):
    """The condition named ``what`` did not hold within ``timeout_s``."""

    def __init__(self, what: str, timeout_s: float, last: Any = None) -> None:
        seen = "" if last is None else f" (last seen: {last!r})"
        super().__init__(f"timed out after {timeout_s:g} s waiting for {what}{seen}")
        self.what = what


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float = 30.0,
    what: str = "",
    *,
    poll_s: float = POLL_S,
    last: Callable[[], Any] | None = None,
) -> T:
    """``predicate()`` once it is truthy, checked every ``poll_s`` (blocking: for tests that
    run processes from the test's own thread). ``what`` names the condition (required);
    ``last()``, if given, is put in the failure."""
    _named(what)
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeout(what, timeout_s, None if last is None else last())
        time.sleep(poll_s)


async def until(
    predicate: Callable[[], T | Awaitable[T]],
    timeout_s: float = 30.0,
    what: str = "",
    *,
    poll_s: float = POLL_S,
    last: Callable[[], Any] | None = None,
) -> T:
    """:func:`wait_until` on the running event loop: ``predicate`` may be a coroutine
    function (an answer asked of a node), and the loop runs the nodes meanwhile."""
    _named(what)
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise WaitTimeout(what, timeout_s, None if last is None else last())
        await asyncio.sleep(poll_s)
