"""Raft requests that contradict what a node knows, sent to a running in-process cluster by an
anonymous client on PLAINTEXT and by a non-voter's node identity (node-9) on SASL_PLAINTEXT:
each is answered with an error, no node stops, no vote is granted to a non-voter, the leader
and its epoch stay (but for a Vote in a higher epoch: the epoch is adopted, and a voter is
elected), and no voter change is made by a non-administrator
(raftcore.raft.refusals, raftcore.security.authorization)."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sasl_helpers import NODE_PASSWORD, Raw, run, users_file
from test_node import cluster, leader_of
from test_sasl_identity import nodes_with, plaintext

from raftcore.error_codes import Errors
from raftcore.node.node import RaftNode
from raftcore.protocol.api import SUPPORTED_VERSIONS, ApiKey, request_spec

pytestmark = pytest.mark.timeout(60)

OUTSIDER = 9  # no voter of (1, 2, 3)
TOPIC = "raftcore"


@dataclass(frozen=True)
class Quorum:
    """What the cluster looks like when the requests start."""

    cluster_id: str
    leader: int
    epoch: int
    follower: int  # a follower of the leader
    other: int  # the third voter


def version(key: ApiKey) -> int:
    return SUPPORTED_VERSIONS[key][1]


def vote(q: Quorum, candidate: int, epoch: int, voter: int, voter_dir: bytes | None = None) -> Any:
    cls = request_spec(ApiKey.VOTE).cls
    partition = cls.PartitionData(
        partition_index=0,
        candidate_epoch=epoch,
        candidate_id=candidate,
        last_offset_epoch=epoch - 1,
        last_offset=10**9,  # claims a longer log than anyone's
    )
    if voter_dir is not None:
        partition.voter_directory_id = voter_dir
    return cls(
        cluster_id=q.cluster_id,
        voter_id=voter,
        topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
    )


def begin(q: Quorum, leader: int, epoch: int, voter: int) -> Any:
    cls = request_spec(ApiKey.BEGIN_QUORUM_EPOCH).cls
    partition = cls.PartitionData(partition_index=0, leader_id=leader, leader_epoch=epoch)
    return cls(
        cluster_id=q.cluster_id,
        voter_id=voter,
        topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
        leader_endpoints=[cls.LeaderEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1)],
    )


def end(q: Quorum, leader: int, epoch: int) -> Any:
    cls = request_spec(ApiKey.END_QUORUM_EPOCH).cls
    partition = cls.PartitionData(
        partition_index=0,
        leader_id=leader,
        leader_epoch=epoch,
        preferred_candidates=[cls.ReplicaInfo(candidate_id=OUTSIDER)],
    )
    return cls(
        cluster_id=q.cluster_id,
        topics=[cls.TopicData(topic_name=TOPIC, partitions=[partition])],
        leader_endpoints=[cls.LeaderEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1)],
    )


def remove(q: Quorum, voter: int) -> Any:
    cls = request_spec(ApiKey.REMOVE_RAFT_VOTER).cls
    return cls(cluster_id=q.cluster_id, voter_id=voter, voter_directory_id=bytes(16))


def fetch_snapshot(q: Quorum, replica: int, offset: int, epoch: int) -> Any:
    cls = request_spec(ApiKey.FETCH_SNAPSHOT).cls
    partition = cls.PartitionSnapshot(
        partition=0,
        current_leader_epoch=q.epoch,
        snapshot_id=cls.SnapshotId(end_offset=offset, epoch=epoch),
        position=0,
    )
    return cls(
        cluster_id=q.cluster_id,
        replica_id=replica,
        max_bytes=1 << 20,
        topics=[cls.TopicSnapshot(name=TOPIC, partitions=[partition])],
    )


@dataclass(frozen=True)
class Case:
    """A request, the node it goes to (``"leader"`` or ``"follower"``), and what it is
    answered anonymously on PLAINTEXT and as node-9 on SASL_PLAINTEXT."""

    name: str
    to: str
    key: ApiKey
    body: Callable[[Quorum], Any]
    plaintext: int
    as_outsider: int
    moves_epoch: bool = False  # a higher epoch is adopted even from a non-voter (its vote refused)


REFUSED = Errors.CLUSTER_AUTHORIZATION_FAILED  # node-9 speaking for another id
CASES = [
    Case(
        "a BeginQuorumEpoch naming another leader of the current epoch, to the leader",
        "leader",
        ApiKey.BEGIN_QUORUM_EPOCH,
        lambda q: begin(q, q.follower, q.epoch, q.leader),
        Errors.INVALID_REQUEST,
        REFUSED,
    ),
    Case(
        "a BeginQuorumEpoch naming another leader of the current epoch, to a follower",
        "follower",
        ApiKey.BEGIN_QUORUM_EPOCH,
        lambda q: begin(q, q.other, q.epoch, q.follower),
        Errors.INVALID_REQUEST,
        REFUSED,
    ),
    Case(
        "a BeginQuorumEpoch naming the receiver leader of a future epoch",
        "follower",
        ApiKey.BEGIN_QUORUM_EPOCH,
        lambda q: begin(q, q.follower, q.epoch + 5, q.follower),
        Errors.INVALID_REQUEST,
        REFUSED,
    ),
    Case(
        "an EndQuorumEpoch naming another leader of the current epoch",
        "follower",
        ApiKey.END_QUORUM_EPOCH,
        lambda q: end(q, q.other, q.epoch),
        Errors.INVALID_REQUEST,
        REFUSED,
    ),
    Case(
        "a Vote meant for another replica (voter directory id)",
        "follower",
        ApiKey.VOTE,
        lambda q: vote(q, q.other, q.epoch, q.follower, voter_dir=random.randbytes(16)),
        Errors.INVALID_VOTER_KEY,
        REFUSED,
    ),
    Case(
        "a Vote from outside the voter set, to the leader",
        "leader",
        ApiKey.VOTE,
        lambda q: vote(q, OUTSIDER, q.epoch, q.leader),
        Errors.INCONSISTENT_VOTER_SET,
        Errors.INCONSISTENT_VOTER_SET,
    ),
    Case(
        "a Vote from outside the voter set, to a follower",
        "follower",
        ApiKey.VOTE,
        lambda q: vote(q, OUTSIDER, q.epoch, q.follower),
        Errors.INCONSISTENT_VOTER_SET,
        Errors.INCONSISTENT_VOTER_SET,
    ),
    Case(
        "a BeginQuorumEpoch from outside the voter set",
        "follower",
        ApiKey.BEGIN_QUORUM_EPOCH,
        lambda q: begin(q, OUTSIDER, q.epoch + 1, q.follower),
        Errors.INCONSISTENT_VOTER_SET,
        Errors.INCONSISTENT_VOTER_SET,
    ),
    Case(
        "an EndQuorumEpoch from outside the voter set",
        "follower",
        ApiKey.END_QUORUM_EPOCH,
        lambda q: end(q, OUTSIDER, q.epoch + 1),
        Errors.INCONSISTENT_VOTER_SET,
        Errors.INCONSISTENT_VOTER_SET,
    ),
    Case(  # found by the raft wire fuzz: the leader stopped on a file name of epoch -1
        "a FetchSnapshot of a snapshot of epoch -1",
        "leader",
        ApiKey.FETCH_SNAPSHOT,
        lambda q: fetch_snapshot(q, OUTSIDER, 3, -1),
        Errors.SNAPSHOT_NOT_FOUND,
        Errors.SNAPSHOT_NOT_FOUND,
    ),
    Case(  # last: the cluster elects again, and not node 9
        "a Vote from outside the voter set, in a higher epoch, to the leader",
        "leader",
        ApiKey.VOTE,
        lambda q: vote(q, OUTSIDER, q.epoch + 1, q.leader),
        Errors.INCONSISTENT_VOTER_SET,
        Errors.INCONSISTENT_VOTER_SET,
        moves_epoch=True,
    ),
]


async def quorum_of(nodes: list[RaftNode]) -> Quorum:
    lead = await leader_of(nodes)
    follower, other = (n.node_id for n in nodes if n is not lead)
    return Quorum(
        lead.config.cluster_id, lead.node_id, lead.leader_and_epoch.epoch, follower, other
    )


def target(nodes: list[RaftNode], q: Quorum, to: str) -> RaftNode:
    wanted = q.leader if to == "leader" else q.follower
    return next(n for n in nodes if n.node_id == wanted)


def assert_unharmed(nodes: list[RaftNode], q: Quorum, caplog: Any) -> None:
    """No node stopped, and none gave node 9 a vote or a place in the voter set."""
    for n in nodes:
        assert n.failure is None, f"node {n.node_id} stopped: {n.failure}"
        assert OUTSIDER not in n.core.voter_set  # type: ignore[union-attr]
    granted = [r.getMessage() for r in caplog.records if f"vote for {OUTSIDER}" in r.getMessage()]
    assert not any("granted" in line for line in granted), granted
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def send_all(nodes: list[RaftNode], q: Quorum, login: Any, mode: str) -> None:
    for case in CASES:
        raw = await Raw.open(target(nodes, q, case.to))
        try:
            if login is not None:
                await login(raw)
            answer = await raw.ask(case.key, version(case.key), case.body(q))
            assert answer is not None, f"{case.name}: the connection was closed"
            wanted = case.plaintext if mode == "plaintext" else case.as_outsider
            got = answer.error_code
            if got == Errors.NONE:
                (topic,) = answer.topics
                (partition,) = topic.partitions
                got = partition.error_code
            assert got == wanted, f"{case.name}: {Errors(got).name}, not {Errors(wanted).name}"
        finally:
            raw.close()
        if not case.moves_epoch:
            for n in nodes:
                now = (n.leader_and_epoch.leader_id, n.leader_and_epoch.epoch)
                assert now == (q.leader, q.epoch), f"{case.name}: node {n.node_id} at {now}"
    assert (await leader_of(nodes)).node_id != OUTSIDER


@contextlib.asynccontextmanager
async def sasl_cluster(tmp_path: Path) -> AsyncIterator[list[RaftNode]]:
    security = plaintext(users_file(tmp_path))
    async with nodes_with(tmp_path, {1: security, 2: security, 3: security}) as nodes:
        yield nodes


async def as_node_9(raw: Raw) -> None:
    answer = await raw.login_plain(f"node-{OUTSIDER}", NODE_PASSWORD)
    assert answer.error_code == Errors.NONE, answer


def test_contradicting_raft_requests_from_an_anonymous_client_on_plaintext_harm_no_node(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO)

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            q = await quorum_of(nodes)
            await send_all(nodes, q, None, "plaintext")
            assert_unharmed(nodes, q, caplog)

    run(main())
    lines = [r.getMessage() for r in caplog.records if "refusing a" in r.getMessage()]
    assert any("INCONSISTENT_VOTER_SET" in line for line in lines), lines


def test_contradicting_raft_requests_from_a_non_voters_node_identity_harm_no_node(tmp_path, caplog):
    """node-9's login speaks for node 9 only: requests naming another id are refused before
    the core sees them; its own Vote, BeginQuorumEpoch and EndQuorumEpoch are refused as a
    non-voter's; it can neither remove a voter nor add another replica."""
    caplog.set_level(logging.INFO)

    async def main() -> None:
        async with sasl_cluster(tmp_path) as nodes:
            q = await quorum_of(nodes)
            await send_all(nodes, q, as_node_9, "sasl")
            lead = target(nodes, q, "leader")
            before = lead.core.voter_set  # type: ignore[union-attr]
            raw = await Raw.open(lead)
            try:
                await as_node_9(raw)
                key = ApiKey.REMOVE_RAFT_VOTER
                answer = await raw.ask(key, version(key), remove(q, q.follower))
                assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            finally:
                raw.close()
            assert lead.core.voter_set == before  # type: ignore[union-attr]
            assert_unharmed(nodes, q, caplog)

    run(main())
