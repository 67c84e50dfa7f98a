"""TLS (issue 12): the listener with TLS and ssl.client.auth, mutual TLS between the voters (a
peer must hold a certificate of the cluster's CA that names its node id), raft RPCs answered only
for the node the certificate names, and clean refusals of a plaintext client on a TLS port and
of a TLS client on a plaintext port. Nodes run in this process (three RaftNodes on loopback);
the certificates come from raftcore.security.certs, made once for the module."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from node_helpers import _settled, cluster
from waits import until

from raftcore import connect_errors
from raftcore.client import Consumer, Producer
from raftcore.client.connection import Connection, ConnectionClosed
from raftcore.error_codes import Errors
from raftcore.node import raft_wire
from raftcore.node.local_cluster import new_cluster_id, tls_client_security
from raftcore.node.node import RaftNode
from raftcore.protocol.api import decode_response
from raftcore.raft.messages import FetchRequest, Outbound, VoteRequest
from raftcore.security import ClientSecurity, ListenerSecurity, Principal
from raftcore.security.certs import make_certs
from raftcore.security.tls import PeerIdentityError, client_context, principal_of

pytestmark = pytest.mark.timeout(60)

CLUSTER_ID = "tls-tests-cluster"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("tls")
    make_certs(d, [1, 2, 3], clients=["alice"])
    return d


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """Certificates of another cluster: same names, another CA."""
    d = tmp_path_factory.mktemp("other-tls")
    make_certs(d, [1, 2, 3], clients=["alice"])
    return d


def node_tls(certs: Path, node_id: int, auth: str = "required", **kw) -> ListenerSecurity:  # type: ignore[no-untyped-def]
    return ListenerSecurity(
        protocol="SSL",
        ssl_certfile=certs / f"node-{node_id}.pem",
        ssl_keyfile=certs / f"node-{node_id}.key",
        ssl_cafile=certs / "ca.pem",
        ssl_client_auth=auth,
        **kw,
    )


def client_tls(certs: Path, client: str | None = "alice") -> ClientSecurity:
    return tls_client_security(certs, client)


def as_node(certs: Path, node_id: int) -> ClientSecurity:
    """A client presenting node ``node_id``'s own certificate."""
    return replace(
        client_tls(certs, None),
        ssl_certfile=certs / f"node-{node_id}.pem",
        ssl_keyfile=certs / f"node-{node_id}.key",
    )


def secured(security: dict[int, ListenerSecurity]) -> dict[str, Any]:
    """The shared cluster's arguments for this module's nodes: node ``i`` listens with
    ``security[i]`` (plaintext when absent), and no listener."""

    def per_node(node_id: int) -> dict[str, Any]:
        return {"security": security.get(node_id, ListenerSecurity())}

    return {"listener": None, "cluster_id": CLUSTER_ID, "per_node": per_node}


async def leader_among(nodes: list[RaftNode], timeout_s: float = 10.0) -> RaftNode:
    """A leader that every node of ``nodes`` knows."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        leaders = [n for n in nodes if n.is_leader()]
        if leaders and all(n.leader_and_epoch.leader_id == leaders[0].node_id for n in nodes):
            # and the cluster dynamic (KRaftVersion and Voters records committed), so that the
            # tests' offsets are theirs alone
            return await _settled(leaders[0], nodes, min(deadline, loop.time() + 5))
        await asyncio.sleep(0.02)
    raise AssertionError("no leader known to every node")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 45))


def bootstrap(nodes: list[RaftNode]) -> list[str]:
    return [str(n.config.listen) for n in nodes]


async def raw_request(
    node: RaftNode, message: object, security: ClientSecurity | None
) -> tuple[int, object]:
    """Send one raft request encoded by raftcore's own encoder on a fresh connection (TLS as
    ``security`` says); (api key, decoded response body)."""
    api_key, version, frame = raft_wire.encode_request(
        node, Outbound(node.node_id, 7, message, is_request=True)
    )
    ctx = None if security is None else client_context(security)
    ep = node.config.listen
    reader, writer = await asyncio.open_connection(ep.host, ep.port, ssl=ctx)
    try:
        writer.write(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, body = decode_response(api_key, version, await reader.readexactly(size))
        return api_key, body
    finally:
        writer.close()


def _vote(candidate: int) -> VoteRequest:
    return VoteRequest(CLUSTER_ID, 100, candidate, 0, 0, voter_id=1, pre_vote=True)


def _replica_fetch(replica: int) -> FetchRequest:
    return FetchRequest(
        cluster_id=CLUSTER_ID,
        replica_id=replica,
        fetch_offset=0,
        last_fetched_epoch=0,
        current_leader_epoch=-1,
        max_wait_ms=0,
        max_bytes=1024,
    )


# ---- who a certificate is ----------------------------------------------------------------------


def test_a_certificate_naming_node_id_is_that_node_and_any_other_is_a_user():
    node = {"subject": ((("commonName", "node-3"),),), "subjectAltName": (("DNS", "node-3"),)}
    assert principal_of(node) == Principal("node", "node-3", 3)
    by_san = {"subject": ((("commonName", "broker"),),), "subjectAltName": (("DNS", "node-4"),)}
    assert principal_of(by_san).node_id == 4
    two = {"subject": ((("commonName", "node-1"),),), "subjectAltName": (("DNS", "node-2"),)}
    assert principal_of(two) == Principal("user", "node-1")  # names two nodes: neither
    assert principal_of({"subject": ((("commonName", "alice"),),)}) == Principal("user", "alice")
    assert principal_of({}).kind == "anonymous"
    assert principal_of({"subject": ((("commonName", "node-1x"),),)}).kind == "user"


# ---- a mutual-TLS cluster ----------------------------------------------------------------------


def test_a_mutual_tls_cluster_elects_and_commits_what_a_tls_client_with_a_certificate_writes(
    tmp_path, certs
):
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            sec = client_tls(certs)
            async with Producer(bootstrap(nodes), security=sec, request_timeout_ms=5000) as p:
                first, last = await p.send([(b"k%d" % i, b"v%d" % i) for i in range(20)])
            assert (last - first) == 19
            async with Consumer(bootstrap(nodes), security=sec, max_wait_ms=100) as c:
                got: list[bytes] = []
                for _ in range(50):
                    got += [r.value for r in await c.poll()]
                    if len(got) >= 20:
                        break
            assert got == [b"v%d" % i for i in range(20)]
            # every voter replicated it, over TLS connections between them
            for _ in range(100):
                if all(n.high_watermark == last + 1 for n in nodes):
                    break
                await asyncio.sleep(0.02)
            assert [n.high_watermark for n in nodes] == [last + 1] * 3

    run(main())


@pytest.mark.slow
def test_a_peer_whose_certificate_another_ca_signed_fails_the_handshake(
    tmp_path, certs, other_ca, caplog
):
    caplog.set_level(logging.INFO)
    security = {1: node_tls(certs, 1), 2: node_tls(certs, 2), 3: node_tls(other_ca, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            leader = await leader_among(nodes[:2])
            await leader.append([(b"k", b"v")], wait=True)
            # node 3 keeps trying: both sides have refused it, and said so
            tried = ("[node 1] TLS handshake failed from", "[node 3] cannot reach voter 1 at")
            await until(
                lambda: all(line in caplog.text for line in tried),
                30,
                "node 1 and node 3 to log their failed handshakes",
            )
            assert nodes[2].leader_and_epoch.leader_id is None
            assert nodes[2].log is not None and nodes[2].log.end_offset == 0

    run(main())
    assert "[node 1] TLS handshake failed from 127.0.0.1:" in caplog.text
    # node 3's own side: it does not trust the others' certificates either, and says whose
    assert "[node 3] node 1 at 127.0.0.1:" in caplog.text
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
    assert not [r for r in caplog.records if r.exc_info], "a handshake failure is one line"
    # node 3's reachability line says why, not the SSL error's errno 1 ('operation not
    # permitted'): the others were up before it, so the handshake was its first failure
    assert "[node 3] cannot reach voter 1 at 127.0.0.1:" in caplog.text
    assert "(TLS handshake failed: CERTIFICATE_VERIFY_FAILED); retrying" in caplog.text
    assert "operation not permitted" not in caplog.text


@pytest.mark.slow
def test_a_node_holding_another_nodes_certificate_is_refused_both_ways(tmp_path, certs, caplog):
    """Node 3 runs with node-2's certificate (same CA): its Vote and Fetch claim node 3 and are
    answered CLUSTER_AUTHORIZATION_FAILED; the others refuse to talk to it as node 3."""
    caplog.set_level(logging.INFO)
    stolen = replace(
        node_tls(certs, 3), ssl_certfile=certs / "node-2.pem", ssl_keyfile=certs / "node-2.key"
    )
    security = {1: node_tls(certs, 1), 2: node_tls(certs, 2), 3: stolen}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            leader = await leader_among(nodes[:2])
            await leader.append([(b"k", b"v")], wait=True)
            # node 3's fetch timeout passes: it asks for votes, and is refused
            refused = (
                "the connection is Node:node-2, not node-3 (CLUSTER_AUTHORIZATION_FAILED)",
                "its certificate names Node:node-2, not node-3: refusing it",
            )
            await until(
                lambda: all(line in caplog.text for line in refused),
                30,
                "node 3's requests refused as node-2's, logged",
            )
            assert nodes[2].log is not None and nodes[2].log.end_offset == 0

    run(main())
    text = caplog.text
    assert "the connection is Node:node-2, not node-3 (CLUSTER_AUTHORIZATION_FAILED)" in text
    assert "node 3 at 127.0.0.1:" in text
    assert "its certificate names Node:node-2, not node-3: refusing it" in text


def test_a_peer_refused_for_its_certificate_is_named_by_the_reason_not_a_tuple():
    """What a node's reachability line (and a client's 'cannot reach') says of a peer whose
    certificate names another node: the reason, as text. str() of an ssl.SSLError is the
    repr of its arguments, so it read "(('its certificate names ...',))"."""
    reason = "its certificate names Node:node-2, not node-3: refusing it"
    assert connect_errors.describe(PeerIdentityError(reason)) == reason


@pytest.mark.parametrize("message", [_vote(1), _replica_fetch(1)], ids=["vote", "replica-fetch"])
def test_a_user_certificate_cannot_send_raft_rpcs(tmp_path, certs, message, caplog):
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            target = nodes[1]
            _, body = await raw_request(target, message, client_tls(certs, "alice"))
            assert body.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            # the same request with node 1's certificate is answered (by the Raft core)
            _, body = await raw_request(target, message, as_node(certs, 1))
            assert body.error_code != Errors.CLUSTER_AUTHORIZATION_FAILED

    run(main())
    assert "the connection is User:alice, not a node (CLUSTER_AUTHORIZATION_FAILED)" in caplog.text


def test_a_user_certificate_is_refused_before_its_raft_request_is_read(tmp_path, certs):
    """Kafka checks the CLUSTER_ACTION permission before it reads a raft request: a user's
    Vote naming another cluster is answered CLUSTER_AUTHORIZATION_FAILED, not
    INCONSISTENT_CLUSTER_ID, which would tell a stranger something about the cluster; the same
    Vote from node 1 is read and refused for its cluster id."""
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}
    stranger = replace(_vote(1), cluster_id=new_cluster_id())

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            _, body = await raw_request(nodes[1], stranger, client_tls(certs, "alice"))
            assert body.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            _, body = await raw_request(nodes[1], stranger, as_node(certs, 1))
            assert body.error_code == Errors.INCONSISTENT_CLUSTER_ID

    run(main())


def test_raft_rpcs_on_a_plaintext_listener_are_answered_as_before(tmp_path):
    async def main():
        async with cluster(tmp_path, **secured({})) as nodes:
            await leader_among(nodes)
            _, body = await raw_request(nodes[1], _vote(1), None)
            assert body.error_code == Errors.NONE

    run(main())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_tls_listener_reads_a_client_hello_sent_the_moment_it_connects(
    tmp_path, certs, loop_name
):
    """A client sends its ClientHello as soon as it connects. The listener must put TLS on the
    socket before it reads from it, or the hello lands where TLS never sees it and the
    handshake stalls until the client gives up (on uvloop, with the client on the node's own
    loop, it always did). The cluster elects a leader over TLS on that loop, then twenty
    connections in a row must each finish their handshake within 2 s."""
    if loop_name == "uvloop":
        new_loop = pytest.importorskip(
            "uvloop", reason="uvloop is in the test extra"
        ).new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            ctx = client_context(client_tls(certs))
            ep = nodes[0].config.listen
            for _ in range(20):
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(ep.host, ep.port, ssl=ctx), 2
                )
                writer.close()

    loop = new_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 45))
    finally:
        loop.close()


# ---- refusals ----------------------------------------------------------------------------------


def test_a_plaintext_client_on_a_tls_port_is_refused_cleanly(tmp_path, certs, caplog):
    caplog.set_level(logging.INFO)
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            ep = nodes[0].config.listen
            conn = await Connection.open(ep.host, ep.port)
            try:
                with pytest.raises(ConnectionClosed, match="lost"):
                    await asyncio.wait_for(conn.request(18, 0, _api_versions()), 5)
            finally:
                await conn.close()

    run(main())
    lines = [r for r in caplog.records if "TLS handshake failed from 127.0.0.1:" in r.message]
    assert lines and all(r.exc_info is None for r in lines)
    assert lines[0].levelno == logging.WARNING


def test_a_tls_client_on_a_plaintext_port_is_refused_cleanly(tmp_path, certs):
    async def main():
        async with cluster(tmp_path, **secured({})) as nodes:
            ep = nodes[0].config.listen
            ctx = client_context(client_tls(certs))
            with pytest.raises(ConnectionClosed, match=r"cannot reach .* \(TLS handshake failed"):
                await asyncio.wait_for(Connection.open(ep.host, ep.port, ssl=ctx), 5)

    run(main())


def test_a_client_without_a_certificate_is_refused_when_client_auth_is_required(tmp_path, certs):
    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            ep = nodes[0].config.listen
            ctx = client_context(client_tls(certs, client=None))
            with pytest.raises((ConnectionClosed, ssl.SSLError)):
                conn = await Connection.open(ep.host, ep.port, ssl=ctx)
                try:  # TLS 1.3: the server's refusal arrives after the client's handshake
                    await asyncio.wait_for(conn.request(18, 0, _api_versions()), 5)
                finally:
                    await conn.close()

    run(main())


def test_a_client_without_a_certificate_is_served_when_client_auth_is_requested(tmp_path, certs):
    security = {i: node_tls(certs, i, "requested") for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            sec = client_tls(certs, client=None)
            async with Producer(bootstrap(nodes), security=sec, request_timeout_ms=5000) as p:
                first, last = await p.send([(b"k", b"v")])
                assert first == last >= 1  # (past the leader's control records)

    run(main())


def _api_versions():  # type: ignore[no-untyped-def]
    from raftcore.protocol.api import ApiKey, request_spec

    return request_spec(ApiKey.API_VERSIONS).cls()


# ---- the Spark jobs' and the exactly-once writer's connections ---------------------------------


def _props(certs: Path) -> dict[str, str]:
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "client-alice.pem"),
        "ssl.key.location": str(certs / "client-alice.key"),
    }


def test_spark_options_take_the_client_security_in_librdkafkas_names(certs):
    from raftcore.spark.options import ReadOptions, SparkSourceError, WriteOptions

    opts = ReadOptions.parse({"bootstrap": "127.0.0.1:1", **_props(certs)})
    assert opts.security == client_tls(certs)
    assert WriteOptions.parse({"bootstrap": "127.0.0.1:1", **_props(certs)}).security.uses_tls
    assert ReadOptions.parse({"bootstrap": "127.0.0.1:1"}).security.protocol == "PLAINTEXT"
    with pytest.raises(SparkSourceError, match=r"ssl\.ca\.location: no such file"):
        ReadOptions.parse({"bootstrap": "127.0.0.1:1", "ssl.ca.location": "/nonexistent.pem"})


def test_the_job_source_and_the_exactly_once_writer_reach_a_mutual_tls_cluster(tmp_path, certs):
    from raftcore.client.resumable import write_exactly_once
    from raftcore.spark.job_source import JobSource

    security = {i: node_tls(certs, i) for i in (1, 2, 3)}

    async def main():
        async with cluster(tmp_path, **secured(security)) as nodes:
            await leader_among(nodes)
            result = await write_exactly_once(
                bootstrap(nodes),
                "tls-writer",
                [[(b"k", b"v")] * 3],
                security=client_tls(certs),
                request_timeout_ms=5000,
            )
            assert result.rows == 3
            source = JobSource.of(",".join(bootstrap(nodes)), None, security=_props(certs))
            loop = asyncio.get_running_loop()
            start, end = await loop.run_in_executor(None, source.committed_range)
            assert (start, end) == (0, result.last_offset + 1)
            batch = await loop.run_in_executor(None, source.batch_at, result.last_offset)
            assert batch.last_offset == result.last_offset

    run(main())


def test_a_client_that_does_not_trust_the_nodes_certificate_fails_fast(certs, other_ca):
    """A client given another CA (or a node's certificate it cannot verify) fails every
    handshake the same way: it says so after its short grace, as for a refused connection;
    it retried for its whole timeout (10 s for the CLI) before saying it."""
    from raftcore.client.cluster import ClusterClient, UnreachableError
    from raftcore.security.tls import server_context

    async def main() -> tuple[str, float]:
        context = server_context(node_tls(certs, 1, auth="requested"))
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        client = ClusterClient(
            [f"127.0.0.1:{port}"], request_timeout_ms=8000, security=client_tls(other_ca)
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await client.refresh_metadata()
        except UnreachableError as exc:
            return str(exc), loop.time() - started
        finally:
            await client.close()
            server.close()
        raise AssertionError("no error")

    message, elapsed = run(main())
    assert "(TLS handshake failed: CERTIFICATE_VERIFY_FAILED)" in message, message
    assert elapsed < 2.5, f"gave up after {elapsed:.2f} s"


def test_a_client_closing_right_after_the_handshake_logs_no_asyncio_warning(certs, caplog):
    """A peer that checks a node's certificate and hangs up at once (a node refusing a voter
    that holds another node's certificate, a TLS health check) made the accepting node log
    asyncio's "returning true from eof_received() has no effect when using ssl", a WARNING
    that names nothing, once per connection: the end of stream reached the stream protocol
    before start_tls had told it that it runs over TLS. (The listener now wraps the socket in
    TLS before reading, raftcore.node.tls_listener, so the protocol knows from the start.)"""
    from raftcore.node.tls_listener import serve_tls
    from raftcore.security.tls import server_context

    caplog.set_level(logging.WARNING)

    async def main() -> int:
        context = server_context(node_tls(certs, 1, auth="requested"))
        done = 0

        async def handle(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, principal: Principal
        ) -> None:
            nonlocal done
            await reader.read(16)
            writer.close()
            done += 1

        server = await serve_tls(handle, context, "[node 1]", host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        client = client_context(replace(client_tls(certs, None), ssl_check_hostname=False))
        for _ in range(5):
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            writer.close()
        while done < 5:
            await asyncio.sleep(0.01)
        server.close()
        return done

    assert run(main()) == 5
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_client_retrying_a_failing_handshake_is_logged_once_per_30_s(certs, caplog):
    """librdkafka retries a refused handshake every ~50 ms and a refused node every second:
    the node logged a WARNING per attempt. One line per client host and reason, then the
    count of the others once 30 s have passed."""
    from raftcore.node.tls_listener import serve_tls
    from raftcore.security import tls

    caplog.set_level(logging.DEBUG, logger="raftcore.node.tls_listener")
    now = [1000.0]

    def failures() -> int:
        return sum("TLS handshake failed from" in r.getMessage() for r in caplog.records)

    async def main() -> int:
        context = tls.server_context(node_tls(certs, 1))  # client certificates required

        async def handle(reader, writer, principal):  # type: ignore[no-untyped-def]
            writer.close()  # never reached: every handshake fails

        server = await serve_tls(
            handle, context, "[node 1]", host="127.0.0.1", port=0, clock=lambda: now[0]
        )
        port = server.sockets[0].getsockname()[1]
        client = client_context(replace(client_tls(certs, None), ssl_check_hostname=False))
        for attempt in range(6):
            now[0] += 30.0 if attempt == 4 else 1.0  # the 5th attempt: 33 s after the 1st
            with contextlib.suppress(OSError, ssl.SSLError):
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
                await asyncio.sleep(0.05)
                writer.close()
            while failures() <= attempt:
                await asyncio.sleep(0.01)
        server.close()
        return failures()

    assert run(main()) == 6
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if "TLS handshake failed from 127.0.0.1:" in r.getMessage() and r.levelno > logging.DEBUG
    ]
    assert [level for level, _ in lines] == ["WARNING", "WARNING"], lines
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in lines[0][1]
    assert lines[1][1].endswith("(and 3 more from 127.0.0.1 since)"), lines[1][1]
