"""Asking whichever replica leads, again while an election goes on: the loop that forwarded
writes (:mod:`raftcore.node.forwarding`) and reads on any replica (:mod:`raftcore.node.reads`)
share.

Each attempt gets the time left; it returns the answer, raises :class:`TryAgain` saying why
not yet (no leader known, the one asked does not lead, a connection lost), or raises what is
final. Attempts are ``RETRY_PAUSE_S`` apart; once the deadline passes, TimeoutError says what
was not done and the last reason."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from raftcore.errors import RaftcoreError

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["RETRY_PAUSE_S", "TryAgain", "until_done"]

RETRY_PAUSE_S = 0.05  # between attempts while an election goes on

T = TypeVar("T")


class TryAgain(Exception):
    """This attempt did not get there; ``why`` (for the TimeoutError if none does)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


async def until_done(
    node: RaftNode,
    attempt: Callable[[float], Awaitable[T]],
    *,
    timeout_s: float,
    not_done: str,
) -> T:
    """``await attempt(left_s)`` until it answers, within ``timeout_s``. TimeoutError
    ``"<node> <not_done> within <timeout_s> s (<last why>)"``; RaftcoreError once the node
    does not run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    why = "no leader known"
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"{node.prefix} {not_done} within {timeout_s:g} s ({why})")
        if node.running_core() is None:
            raise RaftcoreError(f"{node.prefix} not running")
        try:
            return await attempt(left)
        except TryAgain as again:
            why = again.why
        await asyncio.sleep(min(RETRY_PAUSE_S, max(0.0, deadline - loop.time())))
