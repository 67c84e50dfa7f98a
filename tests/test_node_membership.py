"""The voter set at run time on embedded nodes (KIP-853): a node joins through a bootstrap
server (over mutual TLS too, where a bootstrap server may be any node), is added and votes;
who may add, remove and hand over (an administrator named by --admin-principals, a node adding
itself; PLAINTEXT trusts its network); peers come from the voter set and a removed voter's
connection is closed; Metadata and DescribeQuorum list the voter set, not the static voters."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from node_helpers import cluster
from sasl_helpers import NODE_PASSWORD, users_file
from waits import until

from raftcore.client.cluster import ClusterClient
from raftcore.client.connection import Connection
from raftcore.client.voters import add_voter, remove_voter
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node import peers as peers_module
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports, tls_client_security
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import QuorumConfig
from raftcore.security import ClientSecurity, ListenerSecurity
from raftcore.security.certs import make_certs
from raftcore.security.tls import client_context

pytestmark = pytest.mark.timeout(90)

# a request timeout above the fetch max wait (500 ms): a parked fetch is answered in time
FAST = QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=800, request_timeout_ms=1000)
CLUSTER_ID = "membership-tests"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("tls")
    make_certs(d, [1, 2, 3, 4], clients=["alice", "mallory"])
    return d


def node_tls(certs: Path, node_id: int) -> ListenerSecurity:
    return ListenerSecurity(
        protocol="SSL",
        ssl_certfile=certs / f"node-{node_id}.pem",
        ssl_keyfile=certs / f"node-{node_id}.key",
        ssl_cafile=certs / "ca.pem",
        ssl_client_auth="required",
    )


def as_node(certs: Path, node_id: int) -> ClientSecurity:
    return replace(
        tls_client_security(certs, None),
        ssl_certfile=certs / f"node-{node_id}.pem",
        ssl_keyfile=certs / f"node-{node_id}.key",
    )


def sasl(tmp_path: Path) -> ListenerSecurity:
    return ListenerSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_users_file=users_file(tmp_path),
        sasl_node_password=NODE_PASSWORD,
    )


def membership_nodes(security: Callable[[int], ListenerSecurity] | None = None) -> dict[str, Any]:
    """The shared cluster's arguments for this module's three static voters: node ``i``
    listens with ``security(i)`` (plaintext without), no listener, this module's quorum, and
    the voter set in the log before the test runs (:func:`dynamic`)."""

    def per_node(node_id: int) -> dict[str, Any]:
        return {"security": security(node_id) if security else ListenerSecurity()}

    return {
        "listener": None,
        "cluster_id": CLUSTER_ID,
        "quorum": FAST,
        "per_node": per_node,
        "ready": dynamic,
    }


async def joiner(tmp_path: Path, through: RaftNode, node_id: int = 4, **kw: Any) -> RaftNode:
    """A node started with --bootstrap (``through``'s address) only."""
    node = RaftNode(
        NodeConfig(
            node_id=node_id,
            voters={},
            bootstrap=(through.config.listen,),  # type: ignore[arg-type]
            listen=Endpoint("127.0.0.1", free_ports(1)[0]),
            data_dir=tmp_path / f"node-{node_id}",
            cluster_id=CLUSTER_ID,
            quorum=FAST,
            **kw,
        )
    )
    await node.start()
    return node


def leader(nodes: list[RaftNode]) -> RaftNode | None:
    found = [n for n in nodes if n._started and n.is_leader() and n.high_watermark is not None]
    return found[0] if len(found) == 1 else None


async def dynamic(nodes: list[RaftNode]) -> RaftNode:
    """The leader, once the voter set lives in the log (kraft.version 1, committed)."""

    def ready() -> RaftNode | None:
        lead = leader(nodes)
        if lead is None or lead.core.kraft_version < 1:  # type: ignore[union-attr]
            return None
        return None if lead.core.history.uncommitted_change(lead.high_watermark) else lead  # type: ignore[union-attr]

    return await until(ready, what="the voter set in the log")


def caught_up(lead: RaftNode, replica: RaftNode) -> bool:
    """Has the leader seen ``replica`` (an observer) reach its log end?"""
    state = lead.core.state  # type: ignore[union-attr]
    seen = getattr(state, "observer_states", {}).get(replica.core.local_key)  # type: ignore[union-attr]
    return seen is not None and seen.last_caught_up_ms >= 0


def addresses(nodes: list[RaftNode]) -> list[str]:
    return [str(n.config.listen) for n in nodes if n._started]


# ---- joining -----------------------------------------------------------------------------------


def test_a_node_joining_through_a_bootstrap_server_over_mutual_tls_is_added_and_votes(
    tmp_path, certs
):
    """Node 4 knows only node 1's address and certificate authority: node 1 (any node's
    certificate will do for a bootstrap server) tells it who leads; it fetches from the leader
    as an observer, an administrator adds it, and it counts: with the leader gone, the two old
    voters left need its vote for a majority of four."""

    async def main() -> None:
        async with cluster(
            tmp_path,
            **membership_nodes(lambda i: node_tls(certs, i)),
            admin_principals=frozenset({"User:alice"}),
        ) as nodes:
            lead = await dynamic(nodes)
            await lead.append([(b"before", b"4")], wait=True)
            new = await joiner(tmp_path, nodes[0], security=node_tls(certs, 4))
            try:
                await until(lambda: caught_up(lead, new), what="node 4 to catch up as an observer")
                assert not new.core.quorum.is_voter  # type: ignore[union-attr]
                assert new.core.leader_and_epoch().leader_id == lead.node_id  # type: ignore[union-attr]
                result = await add_voter(
                    addresses(nodes), 4, timeout_s=10, security=tls_client_security(certs, "alice")
                )
                assert result.ok, result.line
                assert "added node 4 (directory id" in result.line
                everyone = [*nodes, new]
                await until(
                    lambda: all(4 in n.core.voter_set for n in everyone),
                    what="every node to know",  # type: ignore[union-attr]
                )
                assert new.core.quorum.is_voter  # type: ignore[union-attr]
                key = new.core.local_key  # type: ignore[union-attr]
                assert lead.core.voter_set[4].key == key  # type: ignore[union-attr]
                await lead.stop()
                rest = [n for n in everyone if n is not lead]
                successor = await until(lambda: leader(rest), what="a leader of the other three")
                await successor.append([(b"after", b"4")], wait=True)  # 3 of 4 voted
            finally:
                await new.stop(timeout_s=0.5)

    asyncio.run(asyncio.wait_for(main(), 60))


# ---- who may change the voter set ------------------------------------------------------------


async def _ask(node: RaftNode, key: int, body: Any, security: ClientSecurity) -> Any:
    ssl = client_context(security) if security.uses_tls else None
    ep = node.config.listen
    conn = await Connection.open(ep.host, ep.port, ssl=ssl, security=security)  # type: ignore[union-attr]
    try:
        return await conn.request(key, 0, body, timeout_s=10)
    finally:
        await conn.close()


def _admin_requests() -> list[tuple[int, Any]]:
    add = request_spec(ApiKey.ADD_RAFT_VOTER).cls
    remove = request_spec(ApiKey.REMOVE_RAFT_VOTER).cls
    transfer = request_spec(ApiKey.TRANSFER_LEADERSHIP).cls
    return [  # each names node 9, which is nobody: an authorized one changes nothing
        (
            ApiKey.ADD_RAFT_VOTER,
            add(
                cluster_id=CLUSTER_ID,
                timeout_ms=1000,
                voter_id=9,
                voter_directory_id=bytes(16),
                listeners=[],
            ),
        ),
        (
            ApiKey.REMOVE_RAFT_VOTER,
            remove(cluster_id=CLUSTER_ID, voter_id=9, voter_directory_id=bytes(16)),
        ),
        (ApiKey.TRANSFER_LEADERSHIP, transfer(cluster_id=CLUSTER_ID, timeout_ms=1000, target_id=9)),
    ]


AUTHORIZED = {  # what the leader answers each of those
    ApiKey.ADD_RAFT_VOTER: Errors.REQUEST_TIMED_OUT,  # node 9 never fetched: nothing changed
    ApiKey.REMOVE_RAFT_VOTER: Errors.VOTER_NOT_FOUND,
    ApiKey.TRANSFER_LEADERSHIP: Errors.VOTER_NOT_FOUND,
}


def _add_itself(node_id: int) -> Any:
    add = request_spec(ApiKey.ADD_RAFT_VOTER).cls
    return add(
        cluster_id=CLUSTER_ID,
        timeout_ms=1000,
        voter_id=node_id,
        voter_directory_id=bytes(16),
        listeners=[],
    )


def test_on_a_tls_listener_only_an_administrator_may_change_the_voters_and_a_node_add_itself(
    tmp_path, certs, caplog
):
    """A node's certificate speaks for its own id only: node 2's cannot add, remove or hand
    over to node 9; node 4's may ask to add node 4 (auto-join)."""

    async def main() -> None:
        async with cluster(
            tmp_path,
            **membership_nodes(lambda i: node_tls(certs, i)),
            admin_principals=frozenset({"User:alice"}),
        ) as nodes:
            lead = await dynamic(nodes)
            before = lead.core.voter_set  # type: ignore[union-attr]
            for key, body in _admin_requests():
                for refused_to in (tls_client_security(certs, "mallory"), as_node(certs, 2)):
                    refused = await _ask(lead, key, body, refused_to)
                    assert refused.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
                answer = await _ask(lead, key, body, tls_client_security(certs, "alice"))
                assert answer.error_code == AUTHORIZED[key], answer.error_message
            answer = await _ask(lead, ApiKey.ADD_RAFT_VOTER, _add_itself(4), as_node(certs, 4))
            assert answer.error_code == Errors.REQUEST_TIMED_OUT, answer.error_message
            assert lead.core.voter_set == before and lead.is_leader()  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(main(), 60))
    assert "the connection is User:mallory, not an administrator" in caplog.text
    assert "an ADD_RAFT_VOTER of node 9 from" in caplog.text


def test_on_sasl_only_an_administrator_may_change_the_voters_told_why_and_a_node_add_itself(
    tmp_path,
):
    def login(user: str, password: str) -> ClientSecurity:
        return ClientSecurity(
            protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_username=user,
            sasl_password=password,
        )

    async def main() -> None:
        async with cluster(
            tmp_path,
            **membership_nodes(lambda i: sasl(tmp_path)),
            admin_principals=frozenset({"User:alice"}),
        ) as nodes:
            lead = await dynamic(nodes)
            for key, body in _admin_requests():
                for refused_to in (login("bob", "bob-secret"), login("node-2", NODE_PASSWORD)):
                    refused = await _ask(lead, key, body, refused_to)
                    assert refused.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
                    # the command prints the answer's message: it names the option to set
                    assert refused.error_message.endswith("names User:alice)"), (
                        refused.error_message
                    )
                    assert "--admin-principals may" in refused.error_message
                answer = await _ask(lead, key, body, login("alice", "alice-secret"))
                assert answer.error_code == AUTHORIZED[key], answer.error_message
            itself = login("node-9", NODE_PASSWORD)
            answer = await _ask(lead, ApiKey.ADD_RAFT_VOTER, _add_itself(9), itself)
            assert answer.error_code == Errors.REQUEST_TIMED_OUT, answer.error_message

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_plaintext_cluster_trusts_its_network_with_voter_changes(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, **membership_nodes()) as nodes:
            lead = await dynamic(nodes)
            for key, body in _admin_requests():
                answer = await _ask(lead, key, body, ClientSecurity())
                assert answer.error_code == AUTHORIZED[key], answer.error_message
                follower = next(n for n in nodes if n is not lead)
                answer = await _ask(follower, key, body, ClientSecurity())
                assert answer.error_code == Errors.NOT_LEADER_OR_FOLLOWER
                assert f"node {lead.node_id} at" in answer.error_message

    asyncio.run(asyncio.wait_for(main(), 60))


# ---- peers and what clients are told ---------------------------------------------------------


def test_a_removed_voter_is_no_peer_and_no_broker_and_an_added_one_is(tmp_path, monkeypatch):
    monkeypatch.setattr(peers_module, "IDLE_CLOSE_S", 0.5)

    async def main() -> None:
        async with cluster(tmp_path, **membership_nodes()) as nodes:
            lead = await dynamic(nodes)
            new = await joiner(tmp_path, nodes[1])
            try:
                await until(lambda: caught_up(lead, new), what="node 4 to catch up")
                assert (await add_voter(addresses(nodes), 4, timeout_s=10)).ok
                gone = next(n for n in nodes if n is not lead)
                result = await remove_voter(addresses([*nodes, new]), gone.node_id, timeout_s=10)
                assert result.ok, result.line
                await gone.stop()
                lead = await until(
                    lambda: leader([n for n in [*nodes, new] if n is not gone]), what="a leader"
                )
                await until(
                    lambda: (
                        gone.node_id not in lead.peers.connections  # type: ignore[union-attr]
                        and 4 in lead.peers.connections
                    ),  # type: ignore[union-attr]
                    what="the removed voter's connection to close",
                )
                client = ClusterClient([str(lead.config.listen)], request_timeout_ms=5000)
                try:
                    await client.refresh_metadata()
                    assert 4 in client.nodes and gone.node_id not in client.nodes
                    assert client.nodes[4] == new.config.listen
                finally:
                    await client.close()
            finally:
                await new.stop(timeout_s=0.5)

    asyncio.run(asyncio.wait_for(main(), 60))
