"""Raft requests that contradict what a node knows, sent to a running in-process cluster by an
anonymous client on PLAINTEXT and by a non-voter's node identity (node-9): its own login on
SASL_PLAINTEXT, or a certificate the cluster's CA signed for node-9 on SASL_SSL. Each is
answered with an error, no node stops, no vote is granted to a non-voter, the leader and its
epoch stay (but for a Vote in a higher epoch: the epoch is adopted, and a voter is elected),
the voter set stays, no voter change is made by a non-administrator, and the records written
before and after read back on every node
(raftcore.raft.refusals, raftcore.security.authorization)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sasl_helpers import NODE_PASSWORD, Raw, run, users_file
from test_node import cluster, leader_of
from test_sasl_identity import nodes_with, plaintext, sasl_ssl

from raftcore.error_codes import Errors
from raftcore.node.node import RaftNode
from raftcore.protocol.api import SUPPORTED_VERSIONS, ApiKey, request_spec
from raftcore.raft.voters import VoterSet
from raftcore.security.certs import make_certs
from raftcore.security.config import ClientSecurity
from raftcore.security.tls import client_context

pytestmark = pytest.mark.timeout(60)

OUTSIDER = 9  # no voter of (1, 2, 3)
VOTERS = (1, 2, 3)
TOPIC = "raftcore"


@dataclass(frozen=True)
class Quorum:
    """What the cluster looks like when the requests start."""

    cluster_id: str
    topic_id: bytes
    leader: int
    epoch: int
    follower: int  # a follower of the leader
    other: int  # the third voter
    voters: VoterSet  # with the voters' directory ids, as DescribeQuorum tells anyone
    end_offset: int  # the leader's

    def directory_of(self, voter: int) -> bytes:
        directory = self.voters[voter].key.directory_id
        assert directory is not None, f"voter {voter} has no directory id yet"
        return directory


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


def add(q: Quorum, voter: int) -> Any:
    cls = request_spec(ApiKey.ADD_RAFT_VOTER).cls
    return cls(
        cluster_id=q.cluster_id,
        timeout_ms=1000,
        voter_id=voter,
        voter_directory_id=random.randbytes(16),
        listeners=[cls.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)],
    )


def remove(q: Quorum, voter: int) -> Any:
    cls = request_spec(ApiKey.REMOVE_RAFT_VOTER).cls
    return cls(cluster_id=q.cluster_id, voter_id=voter, voter_directory_id=q.directory_of(voter))


def update(q: Quorum, voter: int, directory: bytes) -> Any:
    """An UpdateRaftVoter moving ``voter`` to port 1."""
    cls = request_spec(ApiKey.UPDATE_RAFT_VOTER).cls
    return cls(
        cluster_id=q.cluster_id,
        current_leader_epoch=q.epoch,
        voter_id=voter,
        voter_directory_id=directory,
        listeners=[cls.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)],
        k_raft_version_feature=cls.KRaftVersionFeature(
            min_supported_version=0, max_supported_version=1
        ),
    )


def transfer(q: Quorum, target: int) -> Any:
    cls = request_spec(ApiKey.TRANSFER_LEADERSHIP).cls
    return cls(cluster_id=q.cluster_id, target_id=target, timeout_ms=1000)


def replica_fetch(q: Quorum, replica: int, directory: bytes) -> Any:
    """A Fetch as ``replica`` with ``directory``, claiming the leader's whole log (its
    acknowledgement would count toward the high watermark)."""
    cls = request_spec(ApiKey.FETCH).cls
    partition = cls.FetchPartition(
        partition=0,
        current_leader_epoch=q.epoch,
        fetch_offset=q.end_offset,
        last_fetched_epoch=q.epoch,
        partition_max_bytes=65536,
        replica_directory_id=directory,
    )
    return cls(
        cluster_id=q.cluster_id,
        replica_id=replica,
        replica_state=cls.ReplicaState(replica_id=replica, replica_epoch=-1),
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[cls.FetchTopic(topic=TOPIC, topic_id=q.topic_id, partitions=[partition])],
    )


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
    answered anonymously on PLAINTEXT (None: not sent there, where anyone may act as any
    voter and change the voters: docs/security.md, "The node listener") and as node-9."""

    name: str
    to: str
    key: ApiKey
    body: Callable[[Quorum], Any]
    plaintext: int | None
    as_outsider: int
    moves_epoch: bool = False  # a higher epoch is adopted even from a non-voter (its vote refused)


REFUSED = Errors.CLUSTER_AUTHORIZATION_FAILED  # node-9 speaking for another id, or no admin
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
    Case(
        "an UpdateRaftVoter of a replica outside the voter set, to the leader",
        "leader",
        ApiKey.UPDATE_RAFT_VOTER,
        lambda q: update(q, OUTSIDER, random.randbytes(16)),
        Errors.VOTER_NOT_FOUND,
        Errors.VOTER_NOT_FOUND,
    ),
    Case(
        "an UpdateRaftVoter of another voter, with its directory id, to the leader",
        "leader",
        ApiKey.UPDATE_RAFT_VOTER,
        lambda q: update(q, q.follower, q.directory_of(q.follower)),
        None,
        REFUSED,
    ),
    Case(
        "a Fetch as a voter with its directory id, claiming the leader's whole log",
        "leader",
        ApiKey.FETCH,
        lambda q: replica_fetch(q, q.follower, q.directory_of(q.follower)),
        None,
        REFUSED,
    ),
    Case(
        "an AddRaftVoter of another replica, not by an administrator",
        "leader",
        ApiKey.ADD_RAFT_VOTER,
        lambda q: add(q, OUTSIDER + 1),
        None,
        REFUSED,
    ),
    Case(
        "a RemoveRaftVoter of a voter, not by an administrator",
        "leader",
        ApiKey.REMOVE_RAFT_VOTER,
        lambda q: remove(q, q.follower),
        None,
        REFUSED,
    ),
    Case(
        "a TransferLeadership, not by an administrator",
        "leader",
        ApiKey.TRANSFER_LEADERSHIP,
        lambda q: transfer(q, q.follower),
        None,
        REFUSED,
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

Connect = Callable[[RaftNode], Awaitable[Raw]]  # a connection as the sender, logged in


async def quorum_of(nodes: list[RaftNode]) -> Quorum:
    lead = await leader_of(nodes)  # once the voter set, directory ids and all, is in the log
    follower, other = (n.node_id for n in nodes if n is not lead)
    return Quorum(
        lead.config.cluster_id,
        lead.config.topic_id,
        lead.node_id,
        lead.leader_and_epoch.epoch,
        follower,
        other,
        lead.core.voter_set,  # type: ignore[union-attr]
        lead.log.end_offset,
    )


def target(nodes: list[RaftNode], q: Quorum, to: str) -> RaftNode:
    wanted = q.leader if to == "leader" else q.follower
    return next(n for n in nodes if n.node_id == wanted)


def error_of(answer: Any) -> int:
    """The answer's error: its own, else its one partition's."""
    if answer.error_code != Errors.NONE:
        return int(answer.error_code)
    topics = getattr(answer, "topics", None) or getattr(answer, "responses", None)
    if not topics:
        return Errors.NONE
    (topic,) = topics
    (partition,) = topic.partitions
    return int(partition.error_code)


def assert_unharmed(nodes: list[RaftNode], q: Quorum, caplog: Any) -> None:
    """No node stopped, and none gave node 9 a vote or changed the voter set."""
    for n in nodes:
        assert n.failure is None, f"node {n.node_id} stopped: {n.failure}"
        assert n.core.voter_set == q.voters, f"node {n.node_id}: {n.core.voter_set}"  # type: ignore[union-attr]
    granted = [r.getMessage() for r in caplog.records if f"vote for {OUTSIDER}" in r.getMessage()]
    assert not any("granted" in line for line in granted), granted
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def send_all(nodes: list[RaftNode], q: Quorum, connect: Connect, mode: str) -> None:
    for case in CASES:
        wanted = case.plaintext if mode == "plaintext" else case.as_outsider
        if wanted is None:
            continue
        raw = await connect(target(nodes, q, case.to))
        try:
            answer = await raw.ask(case.key, version(case.key), case.body(q))
            assert answer is not None, f"{case.name}: the connection was closed"
            got = error_of(answer)
            assert got == wanted, f"{case.name}: {Errors(got).name}, not {Errors(wanted).name}"
            if case.key == ApiKey.VOTE:
                granted = [p.vote_granted for t in answer.topics for p in t.partitions]
                assert not any(granted), f"{case.name}: vote granted"
        finally:
            raw.close()
        if not case.moves_epoch:
            for n in nodes:
                now = (n.leader_and_epoch.leader_id, n.leader_and_epoch.epoch)
                assert now == (q.leader, q.epoch), f"{case.name}: node {n.node_id} at {now}"
    assert (await leader_of(nodes)).node_id in VOTERS


async def read_back(nodes: list[RaftNode], keys: set[bytes], timeout_s: float = 5.0) -> None:
    """Until every node reads ``keys`` among its committed records."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for n in nodes:
        while not keys <= {r.key for r in await n.read(0)}:
            assert loop.time() < deadline, f"node {n.node_id} does not read {sorted(keys)}"
            await asyncio.sleep(0.02)


async def hostile_round(nodes: list[RaftNode], connect: Connect, mode: str, caplog: Any) -> None:
    """A record written, every request of CASES sent, another record written: the cluster is
    unharmed and both records read back on every node."""
    q = await quorum_of(nodes)
    await target(nodes, q, "leader").write([(b"before", b"1")])
    await send_all(nodes, q, connect, mode)
    await (await leader_of(nodes)).write([(b"after", b"2")])
    await read_back(nodes, {b"before", b"after"})
    assert_unharmed(nodes, q, caplog)


def test_contradicting_raft_requests_from_an_anonymous_client_on_plaintext_harm_no_node(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO)

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await hostile_round(nodes, Raw.open, "plaintext", caplog)

    run(main())
    lines = [r.getMessage() for r in caplog.records if "refusing a" in r.getMessage()]
    assert any("INCONSISTENT_VOTER_SET" in line for line in lines), lines


@contextlib.asynccontextmanager
async def as_node_9(tmp_path: Path, protocol: str) -> AsyncIterator[tuple[list[RaftNode], Connect]]:
    """Voters 1, 2 and 3 on ``protocol``, and how node-9 connects to them: with its own
    login on SASL_PLAINTEXT; with the certificate the cluster's CA signed for node-9 on
    SASL_SSL (``raftcore certs --nodes 1,2,3,9``; a node certificate needs no login)."""
    users = users_file(tmp_path)
    if protocol == "SASL_PLAINTEXT":
        security = {i: plaintext(users) for i in VOTERS}

        async def connect(node: RaftNode) -> Raw:
            raw = await Raw.open(node)
            answer = await raw.login_plain(f"node-{OUTSIDER}", NODE_PASSWORD)
            assert answer.error_code == Errors.NONE, answer
            return raw
    else:
        certs = make_certs(tmp_path / "tls", [*VOTERS, OUTSIDER]).directory
        security = {i: sasl_ssl(certs, users, i) for i in VOTERS}
        tls = client_context(
            ClientSecurity(
                protocol="SASL_SSL",
                ssl_cafile=certs / "ca.pem",
                ssl_certfile=certs / f"node-{OUTSIDER}.pem",
                ssl_keyfile=certs / f"node-{OUTSIDER}.key",
            )
        )

        async def connect(node: RaftNode) -> Raw:
            return await Raw.connect(node.config.listen.host, node.config.listen.port, tls)

    async with nodes_with(tmp_path, security) as nodes:
        yield nodes, connect


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_contradicting_raft_requests_from_a_non_voters_node_identity_harm_no_node(
    tmp_path, caplog, protocol
):
    """node-9 speaks for node 9 only: requests naming another id are refused before the core
    sees them; its own Vote, BeginQuorumEpoch and EndQuorumEpoch are refused as a non-voter's;
    it is no administrator, so it can neither add another replica, remove a voter, nor hand
    leadership over. (It may ask to add itself, as --auto-join does, once it has caught up as
    an observer: the CA decides who is a node.)"""
    caplog.set_level(logging.INFO)

    async def main() -> None:
        async with as_node_9(tmp_path, protocol) as (nodes, connect):
            await hostile_round(nodes, connect, "node-9", caplog)

    run(main())
    lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
    assert any(f"Node:node-{OUTSIDER}, not an administrator" in line for line in lines), lines


def test_a_refused_begin_or_end_quorum_epoch_teaches_no_leader_endpoint(tmp_path):
    """A BeginQuorumEpoch or EndQuorumEpoch names where its leader listens. From node-9's
    certificate on SASL_SSL, one naming node 5 or 6 leader is refused (node-9 speaks for node
    9 only), and the receiver still knows no address for 5 or 6: a refused request would
    otherwise send a joining node, which knows its leader from such words alone, to whatever
    address the sender chose."""

    async def main() -> None:
        async with as_node_9(tmp_path, "SASL_SSL") as (nodes, connect):
            q = await quorum_of(nodes)
            follower = target(nodes, q, "follower")
            for key, body in (
                (ApiKey.BEGIN_QUORUM_EPOCH, begin(q, 5, q.epoch + 1, q.follower)),
                (ApiKey.END_QUORUM_EPOCH, end(q, 6, q.epoch + 1)),
            ):
                raw = await connect(follower)
                try:
                    answer = await raw.ask(key, version(key), body)
                finally:
                    raw.close()
                assert error_of(answer) == REFUSED, key.name
            book = follower.address_book
            assert (book.endpoint_of(5), book.endpoint_of(6)) == (None, None)

    run(main())
