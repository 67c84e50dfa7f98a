"""Ask every node, in parallel and with a short timeout, what it knows: Metadata gives each
node's leader and epoch (a candidate's epoch too), DescribeQuorum from whoever claims to lead
gives the high watermark, every replica's log end (voters and observers) and the voter set in
force, each voter with its directory id (KIP-853). A paused or partitioned node just does
not answer in time; a stale leader answers with its old epoch (the newest epoch wins)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from raftcore.client.connection import Connection
from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security.config import ClientSecurity
from raftcore.security.tls import client_context

__all__ = ["NodeView", "Prober", "QuorumView"]

METADATA_VERSION = 12
DESCRIBE_QUORUM_VERSION = 2


@dataclass(frozen=True)
class NodeView:
    node_id: int
    leader_id: int  # -1: none known
    epoch: int


@dataclass
class QuorumView:
    views: dict[int, NodeView] = field(default_factory=dict)  # the nodes that answered
    leader_id: int = -1  # the leader of the newest epoch that describes itself as one
    leader_epoch: int = -1
    high_watermark: int = -1
    # from the leader's DescribeQuorum: each node's log end (voters' and observers'; the
    # highest when one id has two replicas, a wiped disk's old key and its new one)
    log_ends: dict[int, int] = field(default_factory=dict)
    voters: dict[int, bytes | None] = field(default_factory=dict)  # id -> directory id
    pending_change: str | None = None  # a voter change not committed yet, in words
    kraft_version: int = -1

    @property
    def max_epoch(self) -> int:
        epochs = [v.epoch for v in self.views.values()]
        return max([self.leader_epoch, *epochs], default=-1)

    def converged(self, node_ids: list[int]) -> bool:
        """One leader every node names in the same epoch, and every voter's log end equal to
        the leader's and to the high watermark."""
        if self.leader_id < 0 or set(self.views) != set(node_ids):
            return False
        if any(
            v.leader_id != self.leader_id or v.epoch != self.leader_epoch
            for v in self.views.values()
        ):
            return False
        ends = [self.log_ends.get(i, -1) for i in node_ids]
        return all(e == self.high_watermark for e in ends) and self.high_watermark >= 0

    def summary(self) -> str:
        views = " ".join(
            f"n{i}:{'L' if v.leader_id == i else v.leader_id}@{v.epoch}"
            for i, v in sorted(self.views.items())
        )
        return (
            f"leader={self.leader_id} epoch={self.leader_epoch} hw={self.high_watermark} "
            f"ends={dict(sorted(self.log_ends.items()))} views=[{views}]"
        )


def _directory(replica) -> bytes | None:  # type: ignore[no-untyped-def]
    raw = bytes(replica.replica_directory_id or b"")
    return None if raw in (b"", bytes(16)) else raw


class Prober:
    """Persistent connections to each node (reopened after a failure); use from one event
    loop."""

    def __init__(
        self,
        endpoints: dict[int, str],
        topic: str = "raftcore",
        security: ClientSecurity | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.topic = topic
        self.security = security or ClientSecurity()
        self.ssl = client_context(self.security) if self.security.uses_tls else None
        self._conns: dict[int, Connection] = {}

    async def _conn(self, node_id: int, timeout_s: float) -> Connection:
        conn = self._conns.get(node_id)
        if conn is None or conn.closed:
            host, _, port = self.endpoints[node_id].rpartition(":")
            conn = await Connection.open(
                host,
                int(port),
                timeout_s=timeout_s,
                client_id="rcf-probe",
                security=self.security,
                ssl=self.ssl,
            )
            self._conns[node_id] = conn
        return conn

    async def _ask(self, node_id: int, key: int, version: int, body: object, timeout_s: float):  # type: ignore[no-untyped-def]
        try:
            conn = await self._conn(node_id, timeout_s)
            return await conn.request(key, version, body, timeout_s=timeout_s)
        except (OSError, asyncio.TimeoutError, ConnectionError, Exception):
            conn = self._conns.pop(node_id, None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            return None

    async def metadata(self, node_id: int, timeout_s: float) -> NodeView | None:
        cls = request_spec(ApiKey.METADATA).cls
        body = cls(
            topics=[cls.MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False
        )
        resp = await self._ask(node_id, ApiKey.METADATA, METADATA_VERSION, body, timeout_s)
        if resp is None:
            return None
        for t in resp.topics:
            for p in t.partitions:
                if t.name == self.topic and p.partition_index == 0:
                    return NodeView(node_id, p.leader_id, p.leader_epoch)
        return None

    async def describe(self, node_id: int, timeout_s: float):  # type: ignore[no-untyped-def]
        cls = request_spec(ApiKey.DESCRIBE_QUORUM).cls
        body = cls(
            topics=[
                cls.TopicData(
                    topic_name=self.topic, partitions=[cls.PartitionData(partition_index=0)]
                )
            ]
        )
        resp = await self._ask(
            node_id, ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, body, timeout_s
        )
        if resp is None or resp.error_code != Errors.NONE:
            return None
        p = resp.topics[0].partitions[0]
        return p if p.error_code == Errors.NONE else None

    async def probe(self, node_ids: list[int] | None = None, timeout_s: float = 1.0) -> QuorumView:
        ids = list(self.endpoints) if node_ids is None else node_ids
        views = await asyncio.gather(*(self.metadata(i, timeout_s) for i in ids))
        out = QuorumView(views={v.node_id: v for v in views if v is not None})
        # Whoever names itself leader is asked; the newest epoch wins.
        claimants = sorted(
            {v.node_id for v in out.views.values() if v.leader_id == v.node_id},
            key=lambda i: -out.views[i].epoch,
        )
        for node_id in claimants:
            p = await self.describe(node_id, timeout_s)
            if p is None:
                continue
            out.leader_id = p.leader_id
            out.leader_epoch = p.leader_epoch
            out.high_watermark = p.high_watermark
            for r in [*p.observers, *p.current_voters]:
                end = max(r.log_end_offset, out.log_ends.get(r.replica_id, -1))
                out.log_ends[r.replica_id] = end
            out.voters = {r.replica_id: _directory(r) for r in p.current_voters}
            out.pending_change = p.pending_voter_change
            out.kraft_version = p.k_raft_version
            break
        return out

    async def close(self) -> None:
        for conn in self._conns.values():
            with contextlib.suppress(Exception):
                await conn.close()
        self._conns.clear()


def probe_once(
    endpoints: dict[int, str], timeout_s: float = 1.0, security: ClientSecurity | None = None
) -> QuorumView:
    """A probe from synchronous code (its own event loop)."""

    async def go() -> QuorumView:
        prober = Prober(endpoints, security=security)
        try:
            return await asyncio.wait_for(prober.probe(timeout_s=timeout_s), timeout_s * 3 + 1)
        finally:
            await prober.close()

    try:
        return asyncio.run(go())
    except asyncio.TimeoutError:
        return QuorumView()
