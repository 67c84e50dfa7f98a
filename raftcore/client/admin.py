"""DescribeQuorum from the leader, as data and as the table Kafka's ``kafka-metadata-quorum
describe --status / --replication`` prints: every replica by id and directory id (KIP-853),
where it listens, and (raftcore's own fields) the kraft.version in force and the voter change
not done yet."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from raftcore.client.cluster import ClusterClient
from raftcore.client.connection import ConnectionClosed
from raftcore.connect_errors import describe
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft.voters import directory_id_text
from raftcore.security.config import ClientSecurity

__all__ = [
    "QuorumInfo",
    "ReplicaInfo",
    "describe_quorum",
    "describe_quorum_with",
    "format_quorum",
]

DESCRIBE_QUORUM_VERSION = 2


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    replica_id: int
    log_end_offset: int
    lag: int
    last_fetch_ms: int  # wall clock, -1 unknown
    last_caught_up_ms: int
    voter: bool
    directory_id: bytes | None = None  # None: not known (a static voter that never fetched)
    endpoint: str | None = None  # "NAME://host:port", None: not known

    @property
    def key_text(self) -> str:
        """``4`` or ``4:<directory id>``, as the nodes' log lines name replicas."""
        if self.directory_id is None:
            return str(self.replica_id)
        return f"{self.replica_id}:{directory_id_text(self.directory_id)}"


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: list[ReplicaInfo]
    kraft_version: int = -1  # -1: the leader did not say (not a raftcore node)
    pending_change: str | None = None  # a voter change or transfer not done yet, in words

    @property
    def voters(self) -> list[ReplicaInfo]:
        return [r for r in self.replicas if r.voter]

    @property
    def observers(self) -> list[ReplicaInfo]:
        return [r for r in self.replicas if not r.voter]


async def describe_quorum(
    bootstrap: list[str],
    *,
    topic: str = "raftcore",
    partition: int = 0,
    timeout_s: float = 10.0,
    security: ClientSecurity | None = None,
) -> QuorumInfo:
    """Ask the leader of ``partition`` (found through Metadata) to describe its quorum: each
    partition is a Raft group of its own."""
    cluster = ClusterClient(
        bootstrap,
        topic=topic,
        partition=partition,
        request_timeout_ms=int(timeout_s * 1000),
        security=security,
    )
    try:
        return await describe_quorum_with(cluster, topic=topic, timeout_s=timeout_s)
    finally:
        await cluster.close()


async def describe_quorum_with(
    cluster: ClusterClient, *, topic: str = "raftcore", timeout_s: float = 10.0
) -> QuorumInfo:
    """:func:`describe_quorum` on a client the caller keeps (``describe-quorum --watch``
    asks again and again on the same connections). The partition is the client's."""
    deadline = time.monotonic() + timeout_s
    attempt = 0
    why = ""  # the last attempt's leader and what went wrong, for the final message
    while True:
        await cluster.refresh_metadata(max(0.02, deadline - time.monotonic()))
        leader = cluster.leader
        try:
            # bounded by what is left: a silent leader (a hung process) must not hold the
            # caller past its timeout (the connection's own request timeout is 30 s)
            info = await asyncio.wait_for(
                _describe_once(cluster, topic), max(0.02, deadline - time.monotonic())
            )
        except (ConnectionClosed, OSError, asyncio.TimeoutError, _NotLeader) as exc:
            info = None
            if leader is not None and leader.leader_id in cluster.nodes:
                where = cluster.nodes[leader.leader_id]
                reason = "not the leader any more" if isinstance(exc, _NotLeader) else None
                why = f": node {leader.leader_id} at {where} ({reason or describe(exc)})"
        if info is not None:
            return info
        attempt += 1
        left = deadline - time.monotonic()
        if left > 0:
            await asyncio.sleep(min(cluster.backoff_s(attempt), left))
        if deadline - time.monotonic() <= 0.01:  # no round that would start at the deadline
            raise RaftcoreError(f"no leader answered DescribeQuorum within {timeout_s:g} s{why}")


class _NotLeader(Exception):
    pass


async def _describe_once(cluster: ClusterClient, topic: str) -> QuorumInfo:
    conn, _ = await cluster.leader_connection()
    cls = request_spec(ApiKey.DESCRIBE_QUORUM).cls
    body = cls(
        topics=[
            cls.TopicData(
                topic_name=topic,
                partitions=[cls.PartitionData(partition_index=cluster.partition)],
            )
        ]
    )
    resp = await conn.request(ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, body)
    if resp.error_code != Errors.NONE:
        raise RaftcoreError(f"DescribeQuorum: {error_name(resp.error_code)}")
    p = resp.topics[0].partitions[0]
    if p.error_code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE):
        raise _NotLeader()
    if p.error_code != Errors.NONE:
        raise RaftcoreError(f"DescribeQuorum: {error_name(p.error_code)}")
    leader_end = max((r.log_end_offset for r in p.current_voters), default=-1)
    for r in p.current_voters:
        if r.replica_id == p.leader_id:
            leader_end = r.log_end_offset

    listeners = {
        n.node_id: f"{n.listeners[0].name}://{n.listeners[0].host}:{n.listeners[0].port}"
        for n in (resp.nodes or [])
        if n.listeners
    }

    def info(r: Any, voter: bool) -> ReplicaInfo:
        end = r.log_end_offset
        directory = bytes(r.replica_directory_id or b"")
        if voter:
            endpoint = listeners.get(r.replica_id)
        elif r.listener is not None:
            endpoint = f"{r.listener.name}://{r.listener.host}:{r.listener.port}"
        else:
            endpoint = None
        return ReplicaInfo(
            replica_id=r.replica_id,
            log_end_offset=end,
            lag=max(0, leader_end - end) if end >= 0 else -1,
            last_fetch_ms=r.last_fetch_timestamp,
            last_caught_up_ms=r.last_caught_up_timestamp,
            voter=voter,
            directory_id=None if directory in (b"", bytes(16)) else directory,
            endpoint=endpoint,
        )

    replicas = [info(r, True) for r in p.current_voters] + [info(r, False) for r in p.observers]
    return QuorumInfo(
        p.leader_id,
        p.leader_epoch,
        p.high_watermark,
        replicas,
        p.k_raft_version,
        p.pending_voter_change,
    )


def _ago(ts_ms: int, now_ms: int) -> str:
    if ts_ms < 0:
        return "never"
    return f"{max(0, now_ms - ts_ms)} ms ago"


def format_quorum(info: QuorumInfo, now_ms: int | None = None) -> str:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    version = "?" if info.kraft_version < 0 else str(info.kraft_version)
    if info.kraft_version == 0:
        version += " (static voters: they move into the log once every voter runs this release)"
    lines = [
        f"LeaderId:       {info.leader_id}",
        f"LeaderEpoch:    {info.leader_epoch}",
        f"HighWatermark:  {info.high_watermark}",
        f"CurrentVoters:  {[r.replica_id for r in info.voters]}",
        f"CurrentObservers: {[r.replica_id for r in info.observers]}",
        f"KRaftVersion:   {version}",
        f"PendingChange:  {info.pending_change or 'none'}",
        "",
    ]
    header = (
        "NodeId",
        "DirectoryId",
        "Endpoint",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    )
    rows = [header]
    for r in info.replicas:
        status = (
            "Leader" if r.replica_id == info.leader_id else ("Follower" if r.voter else "Observer")
        )
        rows.append(
            (
                str(r.replica_id),
                directory_id_text(r.directory_id),
                r.endpoint or "-",
                str(r.log_end_offset),
                str(r.lag) if r.lag >= 0 else "?",
                _ago(r.last_fetch_ms, now),
                _ago(r.last_caught_up_ms, now),
                status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
