"""Reads that must see every write acknowledged before they began (linearizable reads): the
read index of Raft's section 6.4.

A linearizable read asks the leader for a read index -- an offset at or above everything
committed when the read arrived -- then waits until the local state machine has applied up to
it, and reads locally. Only the leader can give one; any other replica answers where the
leader is (KIP-951: its id, epoch and endpoint), so that the caller retries there.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from raftcore.errors import RaftcoreError
from raftcore.raft import LeaderAndEpoch, NotLeaderError

if TYPE_CHECKING:
    from raftcore.node.config import Endpoint
    from raftcore.node.node import RaftNode

__all__ = ["NotLeaderForReadError", "read_index"]


class NotLeaderForReadError(NotLeaderError):
    """A linearizable read asked of a replica that does not lead. ``leader`` (id and epoch) and
    ``endpoint`` (None when unknown) say where to ask instead."""

    def __init__(self, leader: LeaderAndEpoch, endpoint: Endpoint | None, message: str) -> None:
        super().__init__(leader, message)
        self.endpoint = endpoint


async def read_index(node: RaftNode, timeout_s: float = 5.0) -> int:
    """The read index of a linearizable read on ``node``: the leader's high watermark, once it
    has committed a record of its own epoch (before that, its high watermark may lag what
    earlier leaders committed; KIP-595 gives a new leader none until then).

    This answer trusts that ``node`` still leads. The confirmation Raft asks for -- one round
    of heartbeats acknowledged by a majority after the read arrived, so that a leader cut off
    from the quorum and already replaced cannot answer with its stale high watermark -- belongs
    in the core and is not there yet; until it is, such a deposed leader can answer from its
    old state until check-quorum makes it resign (``check_quorum_timeout_ms``).

    Raises NotLeaderForReadError on any other replica, naming the leader it knows.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        core = node.core
        if core is None or not node._started:
            raise RaftcoreError(f"{node.prefix} not started")
        if not core.is_leader():
            leader = core.leader_and_epoch()
            leader_id = leader.leader_id
            endpoint = None if leader_id is None else node.config.endpoint_of(leader_id)
            if leader.leader_id == node.config.node_id:
                where = "this node, which no longer leads it (an election is due)"
            elif leader.known:
                where = f"node {leader.leader_id} at {endpoint}"
            else:
                where = "not known yet"
            raise NotLeaderForReadError(
                leader,
                endpoint,
                f"{node.prefix} a linearizable read needs the leader; the leader of epoch "
                f"{leader.epoch} is {where}",
            )
        hw = core.high_watermark
        if hw is not None:
            return hw
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(
                f"{node.prefix} leader of epoch {core.epoch} has not committed its epoch's "
                f"first record within {timeout_s} s: no read index yet"
            )
        await node.wait_high_watermark_change(min(left, 0.1))
