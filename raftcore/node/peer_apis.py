"""What each peer serves: its ApiVersions answer, asked on every new connection to it.

Nodes of one release speak the same versions, so the raft RPCs do not negotiate; but nodes of
two releases meet during a rolling upgrade. The release before dynamic voters (KIP-853) serves
no UpdateRaftVoter, and a node closes the connection of a request whose API it does not know --
with the follower's fetch on it. So a request is sent only to a peer that serves its API, or
of which nothing is known yet (the first connection's answer is not in; a node of this release
answers). What a peer serves is kept by node id from one connection's answer to the next: a
node restarted by another release is asked again when the connection to it is opened again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from raftcore.protocol.api import ApiKey

__all__ = ["PeerApis"]

logger = logging.getLogger("raftcore.node.node")


class PeerApis:
    """``ask(peer_id)`` sends ApiVersions on the peer's connection and returns the API keys the
    answer lists (an exception: no answer; the next connection asks again)."""

    def __init__(self, ask: Callable[[int], Awaitable[frozenset[int]]], prefix: str) -> None:
        self._ask = ask
        self.prefix = prefix
        self._served: dict[int, frozenset[int]] = {}
        self._asking: set[int] = set()  # peers whose ApiVersions answer is awaited
        self._tasks: set[asyncio.Task[None]] = set()

    def connected(self, peer_id: int) -> None:
        """A new connection to ``peer_id`` is open: ask what it serves."""
        self._asking.add(peer_id)
        task = asyncio.ensure_future(self._update(peer_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def serves(self, peer_id: int, api_key: int) -> bool:
        """False only when the peer's latest answer lacks ``api_key``."""
        served = self._served.get(peer_id)
        return served is None or api_key in served

    def may_send(self, peer_id: int, api_key: int) -> bool:
        """``serves``, and while the first answer of a new connection is awaited, False: a
        request sent in that window to a node of the previous release closed the connection
        (the upgrade test saw it, the node just started: its first fetch answered before its
        ApiVersions did). Held, the core asks again after its backoff."""
        if peer_id in self._asking and peer_id not in self._served:
            return False
        return self.serves(peer_id, api_key)

    async def _update(self, peer_id: int) -> None:
        try:
            served = await self._ask(peer_id)
        except Exception as exc:  # lost, timed out, an answer that does not parse
            logger.debug("%s ApiVersions of node %d: no answer (%s)", self.prefix, peer_id, exc)
            return
        finally:
            self._asking.discard(peer_id)
        before = self._served.get(peer_id)
        self._served[peer_id] = served
        had = before is None or ApiKey.UPDATE_RAFT_VOTER in before
        if had and ApiKey.UPDATE_RAFT_VOTER not in served and peer_id >= 0:
            logger.info(
                "%s node %d runs a release without dynamic voters (no UpdateRaftVoter): the "
                "voter set stays static until it is upgraded",
                self.prefix,
                peer_id,
            )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
