"""A node listener apart from the client listener (raftcore.node.listeners): Raft RPCs are
served on the node listener only, the client listener refuses them; DescribeQuorum there names
no directory ids but to administrators; Metadata and KIP-951's leader endpoints name client
listeners; PLAINTEXT Raft traffic off loopback is a warning at start. In-process, three
RaftNodes on loopback, as tests/test_node.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import consume_all, key, produce
from test_node import CLUSTER_ID as CLUSTER_ID_SHARED
from test_node import FAST, Collector, _produce_body, cluster, leader_of, run
from test_tls import as_node, client_tls, node_tls

from raftcore.client import Producer, describe_quorum
from raftcore.client.connection import Connection
from raftcore.client.voters import add_voter, remove_voter
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node import raft_wire
from raftcore.node.config import NodeConfig
from raftcore.node.listeners import Role, open_node_listener_warning
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.protocol.api import RAFT_ONLY_APIS, ApiKey, decode_request, request_spec
from raftcore.raft.messages import FetchRequest, Outbound, VoteRequest
from raftcore.records import encode_batch
from raftcore.security import ListenerSecurity
from raftcore.security.certs import make_certs
from raftcore.security.tls import client_context

pytestmark = pytest.mark.timeout(60)

CLUSTER_ID = "listener-tests-cluster"


def listener_configs(
    tmp_path: Path, security: dict[int, ListenerSecurity] | None = None, **kw: Any
) -> list[NodeConfig]:
    """Three nodes, each with a client listener and a node listener; ``--voters`` name the
    node listeners. ``security``: each node's, both listeners' (default PLAINTEXT)."""
    ports = free_ports(6)
    nodes = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports[:3])}
    clients = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports[3:])}
    return [
        NodeConfig(
            node_id=i,
            voters=nodes,
            data_dir=tmp_path / f"node-{i}",
            cluster_id=CLUSTER_ID,
            quorum=FAST,
            listen=clients[i],
            node_listen=nodes[i],
            **({} if security is None else {"security": security[i]}),
            **kw,
        )
        for i in nodes
    ]


@contextlib.asynccontextmanager
async def listener_cluster(  # type: ignore[no-untyped-def]
    tmp_path: Path, security: dict[int, ListenerSecurity] | None = None, **kw: Any
):
    configs = listener_configs(tmp_path, security, **kw)
    nodes = [RaftNode(cfg, listener=Collector()) for cfg in configs]
    try:
        for n in nodes:
            await n.start()
        yield nodes
    finally:
        for n in nodes:
            await n.stop(timeout_s=0.5)


async def request_at(
    address: Endpoint, key: int, version: int, body: Any, security: Any = None
) -> Any:
    ctx = None if security is None else client_context(security)
    conn = await Connection.open(address.host, address.port, ssl=ctx, security=security)
    try:
        return await conn.request(key, version, body, timeout_s=5)
    finally:
        await conn.close()


def forged(node: RaftNode, message: Any) -> tuple[int, int, Any]:
    """(key, version, body) of ``message`` as node ``node`` would send it to a peer."""
    key, version, frame = raft_wire.encode_request(node, Outbound(1, 7, message, is_request=True))
    return key, version, decode_request(frame)[1]


def _describe_body() -> Any:
    cls = request_spec(ApiKey.DESCRIBE_QUORUM).cls
    return cls(
        topics=[
            cls.TopicData(topic_name="raftcore", partitions=[cls.PartitionData(partition_index=0)])
        ]
    )


def _voter_directories(answer: Any) -> dict[int, bytes]:
    part = answer.topics[0].partitions[0]
    assert part.error_code == Errors.NONE
    return {v.replica_id: bytes(v.replica_directory_id) for v in part.current_voters}


async def _dynamic(leader: RaftNode) -> None:
    """Wait until the voter set is in the log (KIP-853): every voter has its directory id."""
    for _ in range(500):
        if leader.core.kraft_version >= 1 and all(  # type: ignore[union-attr]
            v.key.directory_id
            for v in leader.core.voter_set.values()  # type: ignore[union-attr]
        ):
            return
        await _sleep()
    raise AssertionError("the voter set never moved into the log")


async def _sleep() -> None:
    await asyncio.sleep(0.02)


# ---- Raft RPCs on a client listener -------------------------------------------------------------


def test_raft_rpcs_on_a_client_listener_are_refused_and_never_reach_the_core(tmp_path, caplog):
    """Kafka's broker listeners never serve the controller's RPCs. A Vote for a future epoch,
    a BeginQuorumEpoch and a replica Fetch acknowledging far past the log end, each sent to
    the leader's client listener with a real voter's id and directory id, are answered
    CLUSTER_AUTHORIZATION_FAILED: no epoch moves, the high watermark stays below the log end,
    and one line is logged for the connection."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            follower = next(n for n in nodes if n is not leader)
            epoch = leader.leader_and_epoch.epoch
            end = leader.log.end_offset  # type: ignore[union-attr]
            vote = VoteRequest(
                cluster_id=CLUSTER_ID,
                candidate_epoch=epoch + 50,
                candidate_id=follower.node_id,
                last_offset_epoch=epoch + 50,
                last_offset=10**9,
                voter_id=leader.node_id,
                candidate_directory_id=follower.directory_id,
            )
            fetch = FetchRequest(
                cluster_id=CLUSTER_ID,
                replica_id=follower.node_id,
                fetch_offset=end + 10**6,
                last_fetched_epoch=epoch,
                current_leader_epoch=epoch,
                max_wait_ms=0,
                is_follower=True,
                replica_directory_id=follower.directory_id,
            )
            client = leader.config.listen
            assert client is not None
            caplog.set_level(logging.WARNING, logger="raftcore.node.listeners")
            conn = await Connection.open(client.host, client.port)
            try:
                for message in (vote, fetch):
                    key, version, body = forged(follower, message)
                    answer = await conn.request(key, version, body, timeout_s=5)
                    assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED, key
            finally:
                await conn.close()
            assert leader.is_leader() and leader.leader_and_epoch.epoch == epoch
            assert leader.high_watermark is not None and leader.high_watermark <= end
            assert leader.messaging.raft_refusals.refused == 2
            lines = [r for r in caplog.records if "refusing" in r.getMessage()]
            assert len(lines) == 1, [r.getMessage() for r in lines]
            assert "node listener only" in lines[0].getMessage()
            # The same Vote on the node listener reaches the core (it is answered there).
            node_listener = leader.config.node_listen
            assert node_listener is not None
            key, version, body = forged(follower, vote)
            answer = await request_at(node_listener, key, version, body)
            assert answer.error_code == Errors.NONE

    run(main())


def test_api_versions_on_a_client_listener_leaves_out_the_raft_rpcs(tmp_path):
    """As Kafka's broker listeners list no controller RPC: on a client listener ApiVersions
    lists Fetch, Produce and the rest, and none of Vote, BeginQuorumEpoch, EndQuorumEpoch,
    FetchSnapshot, UpdateRaftVoter; the node listener lists them."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            node = nodes[0]
            cls = request_spec(ApiKey.API_VERSIONS).cls
            body = cls(client_software_name="test", client_software_version="1")
            assert node.config.listen is not None and node.config.node_listen is not None
            on_client = await request_at(node.config.listen, ApiKey.API_VERSIONS, 3, body)
            on_node = await request_at(node.config.node_listen, ApiKey.API_VERSIONS, 3, body)
            client_keys = {k.api_key for k in on_client.api_keys}
            node_keys = {k.api_key for k in on_node.api_keys}
            assert not client_keys & RAFT_ONLY_APIS
            assert node_keys >= RAFT_ONLY_APIS
            assert {ApiKey.FETCH, ApiKey.PRODUCE, ApiKey.METADATA} <= client_keys
            assert node_keys - client_keys == RAFT_ONLY_APIS

    run(main())


# ---- DescribeQuorum ---------------------------------------------------------------------------


def test_describe_quorum_on_a_client_listener_names_no_directory_ids_for_a_non_admin(tmp_path):
    """A voter's directory id is what a forged follower needs: on a client listener an anonymous
    caller gets the zero uuid for every replica, while on the node listener DescribeQuorum is
    whole."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            body = _describe_body()
            assert leader.config.listen is not None and leader.config.node_listen is not None
            on_client = await request_at(leader.config.listen, ApiKey.DESCRIBE_QUORUM, 2, body)
            on_node = await request_at(leader.config.node_listen, ApiKey.DESCRIBE_QUORUM, 2, body)
            assert set(_voter_directories(on_client).values()) == {bytes(16)}
            assert _voter_directories(on_node) == {n.node_id: n.directory_id for n in nodes}
            # the voters' endpoints it lists are the node listeners (KIP-853's voter endpoints)
            listed = {n.node_id: n.listeners[0].port for n in on_client.nodes}
            assert listed == {n.node_id: n.config.node_listen.port for n in nodes}  # type: ignore[union-attr]

    run(main())


def test_describe_quorum_on_a_client_listener_names_directory_ids_to_an_administrator(tmp_path):
    """An administrator (``--admin-principals``) sees the whole table on a client listener: on
    PLAINTEXT every caller is User:ANONYMOUS, so naming it an administrator shows the rule."""

    async def main() -> None:
        async with listener_cluster(
            tmp_path, admin_principals=frozenset({"User:ANONYMOUS"})
        ) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            assert leader.config.listen is not None
            body = _describe_body()
            answer = await request_at(leader.config.listen, ApiKey.DESCRIBE_QUORUM, 2, body)
            assert _voter_directories(answer) == {n.node_id: n.directory_id for n in nodes}

    run(main())


# ---- replication over node listeners, clients on client listeners -------------------------------


def test_nodes_replicate_over_node_listeners_and_clients_are_told_client_listeners(tmp_path):
    """Produce and consume through the client listeners while the voters replicate over their
    node listeners; Metadata from any node, and KIP-951's leader endpoints in a follower's
    NOT_LEADER answer, name client listeners, never node listeners."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            clients = {n.node_id: n.config.listen for n in nodes}
            node_ports = {n.config.node_listen.port for n in nodes}  # type: ignore[union-attr]
            bootstrap = [str(e) for e in clients.values()]
            offsets = await produce(bootstrap, 0, 20, batch=5)
            assert len(offsets) == 20
            got = await consume_all(bootstrap, 20, timeout_s=20)
            assert got == [key(n) for n in range(20)]
            # the voters' connections to the leader came in on its node listener
            roles = {c.listener_role for c in leader.messaging.connections}
            assert Role.NODE in roles
            assert leader.messaging.raft_refusals.refused == 0
            for n in nodes:  # every node names every broker by its client listener
                meta_cls = request_spec(ApiKey.METADATA).cls
                body = meta_cls(topics=[meta_cls.MetadataRequestTopic(name="raftcore")])
                answer = await request_at(clients[n.node_id], ApiKey.METADATA, 12, body)
                brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
                assert brokers == {i: (e.host, e.port) for i, e in clients.items()}, n.node_id
                assert not node_ports & {port for _, port in brokers.values()}
            follower = next(n for n in nodes if n is not leader)
            answer = await request_at(
                clients[follower.node_id],
                ApiKey.PRODUCE,
                10,
                _produce_body(encode_batch([(b"k", b"v")])),
            )
            assert answer.responses[0].partition_responses[0].error_code == (
                Errors.NOT_LEADER_OR_FOLLOWER
            )
            hint = {e.node_id: (e.host, e.port) for e in answer.node_endpoints}
            own = clients[leader.node_id]
            assert hint == {leader.node_id: (own.host, own.port)}

    run(main())


# ---- configuration and the warning --------------------------------------------------------------


def _config(tmp_path: Path, **kw: Any) -> NodeConfig:
    voters = {1: Endpoint("127.0.0.1", 9192)}
    return NodeConfig(node_id=1, voters=voters, data_dir=tmp_path, cluster_id="c", **kw)


def test_a_node_listener_needs_a_client_listener_on_another_address(tmp_path):
    with pytest.raises(ValueError, match="needs a client listener too"):
        _config(tmp_path, node_listen=Endpoint("127.0.0.1", 9192))
    with pytest.raises(ValueError, match=r"both 127\.0\.0\.1:9192"):
        _config(
            tmp_path,
            listen=Endpoint("127.0.0.1", 9192),
            node_listen=Endpoint("127.0.0.1", 9192),
        )
    cfg = _config(
        tmp_path, listen=Endpoint("127.0.0.1", 9092), node_listen=Endpoint("0.0.0.0", 9192)
    )
    # clients are told the client listener; the nodes, this voter's entry in --voters
    assert cfg.advertised == Endpoint("127.0.0.1", 9092)
    assert cfg.node_advertised == Endpoint("127.0.0.1", 9192)
    shared = _config(tmp_path)
    voter = Endpoint("127.0.0.1", 9192)
    assert shared.listen == shared.advertised == shared.node_advertised == voter


def test_plaintext_raft_traffic_off_loopback_is_a_warning_naming_what_anyone_can_do(tmp_path):
    separate = _config(
        tmp_path, listen=Endpoint("127.0.0.1", 9092), node_listen=Endpoint("0.0.0.0", 9192)
    )
    warning = open_node_listener_warning(separate)
    assert warning is not None
    assert "node listener 0.0.0.0:9192 is PLAINTEXT" in warning
    assert "vote" in warning and "high watermark" in warning
    shared = _config(tmp_path, listen=Endpoint("10.1.2.3", 9092))
    warning = open_node_listener_warning(shared)
    assert warning is not None and "--node-listen" in warning
    # loopback, or a node listener on loopback while clients are served elsewhere: nothing
    assert open_node_listener_warning(_config(tmp_path)) is None
    assert (
        open_node_listener_warning(
            _config(tmp_path, listen=Endpoint("0.0.0.0", 9092), node_listen=Endpoint("::1", 9192))
        )
        is None
    )


def test_a_node_whose_node_listener_is_plaintext_off_loopback_warns_once_at_start(tmp_path, caplog):
    async def main() -> None:
        node_port, client_port = free_ports(2)
        cfg = NodeConfig(
            node_id=1,
            voters={1: Endpoint("127.0.0.1", node_port)},
            data_dir=tmp_path / "n1",
            cluster_id=CLUSTER_ID,
            quorum=FAST,
            listen=Endpoint("127.0.0.1", client_port),
            node_listen=Endpoint("0.0.0.0", node_port),
        )
        node = RaftNode(cfg, listener=Collector())
        caplog.set_level(logging.WARNING, logger="raftcore.node.node")
        await node.start()
        try:
            await leader_of([node])
        finally:
            await node.stop(timeout_s=0.5)
        lines = [r for r in caplog.records if "is PLAINTEXT" in r.getMessage()]
        assert len(lines) == 1
        assert lines[0].levelno == logging.WARNING

    run(main())


# ---- raftcore's own quorum tools on a client listener -------------------------------------------


def test_quorum_tools_work_through_client_listeners_without_directory_ids(tmp_path):
    """``raftcore quorum describe``, ``remove-voter`` and ``add-voter`` pointed at client
    listeners, as a caller who is no administrator: the table names no directory ids, a voter
    is removed by its id alone, and added back by its id (the leader names the directory that
    fetches as it)."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            bootstrap = [str(n.config.listen) for n in nodes]
            info = await describe_quorum(bootstrap, timeout_s=10)
            assert {v.replica_id for v in info.voters} == {1, 2, 3}
            assert all(v.directory_id is None for v in info.voters)
            gone = next(n for n in nodes if n is not leader)
            removed = await remove_voter(bootstrap, gone.node_id, timeout_s=10)
            assert removed.ok, removed.line
            assert gone.node_id not in leader.core.voter_set  # type: ignore[union-attr]
            for _ in range(250):  # add-voter needs it fetching as an observer
                if (await add_voter(bootstrap, gone.node_id, timeout_s=10)).ok:
                    break
                await _sleep()
            back = leader.core.voter_set.key_of(gone.node_id)  # type: ignore[union-attr]
            assert back is not None and back.directory_id == gone.directory_id

    run(main())


def test_a_node_that_joins_through_node_listeners_is_added_with_its_node_listener(tmp_path):
    """A fourth node joins through the voters' node listeners (``--bootstrap``) with listeners
    of its own; added by its id through a client listener, the voter set records its node
    listener (where the others reach it), and Metadata names its client listener."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await _dynamic(leader)
            node_port, client_port = free_ports(2)
            new = RaftNode(
                NodeConfig(
                    node_id=4,
                    voters={},
                    bootstrap=tuple(n.config.node_listen for n in nodes),  # type: ignore[misc]
                    data_dir=tmp_path / "node-4",
                    cluster_id=CLUSTER_ID,
                    quorum=FAST,
                    listen=Endpoint("127.0.0.1", client_port),
                    node_listen=Endpoint("127.0.0.1", node_port),
                ),
                listener=Collector(),
            )
            await new.start()
            try:
                bootstrap = [str(n.config.listen) for n in nodes]
                for _ in range(250):  # once it fetches as an observer
                    if (await add_voter(bootstrap, 4, timeout_s=10)).ok:
                        break
                    await _sleep()
                recorded = leader.core.voter_set.endpoint_of(4)  # type: ignore[union-attr]
                assert recorded is not None
                assert (recorded.host, recorded.port) == ("127.0.0.1", node_port)
                meta_cls = request_spec(ApiKey.METADATA).cls
                body = meta_cls(topics=[meta_cls.MetadataRequestTopic(name="raftcore")])
                assert leader.config.listen is not None
                for _ in range(250):
                    answer = await request_at(leader.config.listen, ApiKey.METADATA, 12, body)
                    brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
                    if 4 in brokers:
                        break
                    await _sleep()
                assert brokers[4] == ("127.0.0.1", client_port)
            finally:
                await new.stop(timeout_s=0.5)

    run(main())


def test_a_client_endpoint_told_on_a_shared_plaintext_listener_is_not_believed(tmp_path):
    """On the one listener of a PLAINTEXT cluster anyone may send a replica Fetch: the client
    endpoint it tells must not send clients elsewhere. Metadata goes on naming each voter by
    the listener it shares with its peers, and the leader tells no fetcher the forged one."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            await follower.stop(timeout_s=0.5)  # its own fetches would set things right
            fetch = FetchRequest(
                cluster_id=CLUSTER_ID_SHARED,
                replica_id=follower.node_id,
                fetch_offset=0,
                last_fetched_epoch=0,
                current_leader_epoch=leader.leader_and_epoch.epoch,
                max_wait_ms=0,
                replica_directory_id=follower.directory_id,
            )
            key, version, body = forged(follower, fetch)
            body.client_endpoint = type(body.client_endpoint)(host="203.0.113.9", port=9999)
            assert leader.config.listen is not None
            await request_at(leader.config.listen, key, version, body)
            meta_cls = request_spec(ApiKey.METADATA).cls
            meta = meta_cls(topics=[meta_cls.MetadataRequestTopic(name="raftcore")])
            answer = await request_at(leader.config.listen, ApiKey.METADATA, 12, meta)
            brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
            real = follower.config.listen
            assert real is not None
            assert brokers[follower.node_id] == (real.host, real.port)
            # nor is it passed on to the fetchers (a node with a node listener would use it)
            told = dict(leader.address_book.told_client_endpoints())
            assert told.get(follower.node_id) != Endpoint("203.0.113.9", 9999)

    run(main())


def test_client_endpoints_are_kept_for_voters_only(tmp_path):
    """Fetches naming any id may reach a node listener; the client endpoints kept, and told to
    every fetcher, are the voters' alone (as many as voters)."""

    async def main() -> None:
        async with listener_cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            assert leader.config.node_listen is not None
            for replica in range(100, 120):
                fetch = FetchRequest(
                    cluster_id=CLUSTER_ID,
                    replica_id=replica,
                    fetch_offset=0,
                    last_fetched_epoch=0,
                    current_leader_epoch=leader.leader_and_epoch.epoch,
                    max_wait_ms=0,
                )
                key, version, body = forged(follower, fetch)
                body.client_endpoint = type(body.client_endpoint)(host="203.0.113.9", port=9999)
                await request_at(leader.config.node_listen, key, version, body)
            told = dict(leader.address_book.told_client_endpoints())
            assert set(told) <= {n.node_id for n in nodes}
            assert set(leader.address_book.clients_learned) <= {n.node_id for n in nodes}

    run(main())


# ---- TLS on both listeners -------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    make_certs(d, [1, 2, 3], clients=["alice"])
    return d


def test_a_mutual_tls_cluster_replicates_over_node_listeners_and_refuses_raft_on_client_ones(
    tmp_path: Path, certs: Path
) -> None:
    """Both listeners are SSL: the voters replicate over their node listeners with their
    certificates, a client with its certificate writes through the client listeners, and on a
    client listener even a node's own certificate may not send Raft RPCs."""
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main() -> None:
        async with listener_cluster(tmp_path, security) as nodes:
            leader = await leader_of(nodes)
            bootstrap = [str(n.config.listen) for n in nodes]
            sec = client_tls(certs)
            async with Producer(bootstrap, security=sec, request_timeout_ms=5000) as producer:
                first, last = await producer.send([(b"k%d" % i, b"v") for i in range(20)])
            assert last - first == 19
            for _ in range(250):
                if all(n.high_watermark == leader.high_watermark for n in nodes):
                    break
                await _sleep()
            assert all(n.high_watermark is not None and n.high_watermark > last for n in nodes)
            follower = next(n for n in nodes if n is not leader)
            fetch = FetchRequest(
                cluster_id=CLUSTER_ID,
                replica_id=follower.node_id,
                fetch_offset=leader.log.end_offset + 1000,  # type: ignore[union-attr]
                last_fetched_epoch=leader.leader_and_epoch.epoch,
                current_leader_epoch=leader.leader_and_epoch.epoch,
                max_wait_ms=0,
                replica_directory_id=follower.directory_id,
            )
            key, version, body = forged(follower, fetch)
            assert leader.config.listen is not None
            answer = await request_at(
                leader.config.listen, key, version, body, as_node(certs, follower.node_id)
            )
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            assert leader.messaging.raft_refusals.refused == 1

    run(main())
