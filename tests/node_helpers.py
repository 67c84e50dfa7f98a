"""The in-process cluster of the suite: RaftNodes on loopback in the test's own event loop,
spoken to over TCP with our client pieces and raw frames. Every in-process test module builds
its nodes here (``cluster``) rather than writing its own; a module's variations (a listener or
a state machine per node, per-node security, a different quorum, one node or five) are
arguments. Processes (LocalCluster) are in cluster_helpers.py and the ``cluster`` fixture of
conftest.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from raftcore.client.connection import Connection
from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import QuorumConfig

# fetch_max_wait_ms below the request timeout: an idle leader's held fetch is answered in time
FAST = QuorumConfig(
    election_timeout_ms=300, fetch_timeout_ms=600, request_timeout_ms=500, fetch_max_wait_ms=250
)
CLUSTER_ID = "node-tests-cluster"


class Collector:
    """A listener that keeps what was committed, in order."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.leaders: list[tuple[int | None, int]] = []

    def handle_commit(self, batches) -> None:  # type: ignore[no-untyped-def]
        for b in batches:
            self.values.extend(r.value for r in b.records)

    def handle_leader_change(self, leader) -> None:  # type: ignore[no-untyped-def]
        self.leaders.append((leader.leader_id, leader.epoch))


def configs(
    tmp_path: Path,
    cluster_id: str = CLUSTER_ID,
    *,
    size: int = 3,
    quorum: QuorumConfig = FAST,
    per_node: Callable[[int], dict[str, Any]] | None = None,
    **kw: Any,
) -> list[NodeConfig]:
    """``size`` static voters on free loopback ports, node ``i`` in ``tmp_path/node-i``;
    ``kw`` for every node's NodeConfig, ``per_node(i)`` for node ``i``'s own fields."""
    ports = free_ports(size)
    voters = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports)}
    return [
        NodeConfig(
            node_id=i,
            voters=voters,
            data_dir=tmp_path / f"node-{i}",
            cluster_id=cluster_id,
            quorum=quorum,
            **kw,
            **(per_node(i) if per_node is not None else {}),
        )
        for i in voters
    ]


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path,
    *,
    listener: Callable[[], Any] | None = Collector,
    state_machine: Callable[[NodeConfig], Any] | None = None,
    ready: Callable[[list[RaftNode]], Awaitable[Any]] | None = None,
    stop_timeout_s: float = 0.5,
    **kw: Any,
) -> AsyncIterator[list[RaftNode]]:
    """The nodes of :func:`configs` (``kw`` passed on), started in order; stopped when the
    block ends. Each node gets a new ``listener()`` (a :class:`Collector` unless told), or
    ``state_machine(config)`` instead; ``ready(nodes)`` is awaited before the block runs."""
    nodes = [
        RaftNode(
            cfg,
            listener=None if listener is None or state_machine is not None else listener(),
            state_machine=None if state_machine is None else state_machine(cfg),
        )
        for cfg in configs(tmp_path, **kw)
    ]
    try:
        for n in nodes:
            await n.start()
        if ready is not None:
            await ready(nodes)
        yield nodes
    finally:
        for n in nodes:
            await n.stop(timeout_s=stop_timeout_s)


async def leader_of(nodes: list[RaftNode], timeout_s: float = 10.0) -> RaftNode:
    """The leader every running node of ``nodes`` knows (and, all running, the voter set in
    the log: see :func:`_settled`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        leaders = [n for n in nodes if n._started and n.is_leader()]
        if leaders and all(
            n.leader_and_epoch.leader_id == leaders[0].node_id for n in nodes if n._started
        ):
            return await _settled(leaders[0], nodes, min(deadline, loop.time() + 5))
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for a leader every node knows")


async def _settled(leader: RaftNode, nodes: list[RaftNode], deadline: float) -> RaftNode:
    """The leader once the cluster is dynamic (KIP-853): with every voter running, each tells
    it who it is and it writes KRaftVersion 1 and the first Voters record, at a moment of the
    timing's choosing. Tests that count offsets wait for it, committed, so that their offsets
    are theirs alone (a stopped voter leaves the set static: then they go on at once)."""
    loop = asyncio.get_running_loop()
    if not all(n._started for n in nodes):
        return leader
    while loop.time() < deadline and leader.is_leader():
        if leader.core.kraft_version >= 1 and leader.high_watermark == leader.log.end_offset:
            break
        await asyncio.sleep(0.02)
    return leader


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 45))


def bootstrap(node: RaftNode) -> list[str]:
    return [str(node.config.listen)]


async def raw_request(node: RaftNode, key: int, version: int, body) -> object:  # type: ignore[no-untyped-def]
    conn = await Connection.open(node.config.listen.host, node.config.listen.port)
    try:
        return await conn.request(key, version, body, timeout_s=5)
    finally:
        await conn.close()
