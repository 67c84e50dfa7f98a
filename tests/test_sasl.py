"""SASL on a node's listener (issue 12, item 5): a three-node cluster in one process whose
listeners require a login (KIP-43/152), spoken to by raftcore.client and by raw frames
(confluent-kafka, kcat and the CLI: test_sasl_clients.py).

The in-process tests use SASL_PLAINTEXT (the login is the same over TLS); SASL_SSL, with
certificates from raftcore certs, is tested with node processes in test_sasl_clients.py."""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from node_helpers import cluster
from sasl_helpers import (
    CLUSTER_ID,
    NODE_PASSWORD,
    USERS,
    Raw,
    client,
    metadata_body,
    run,
    users_file,
    vote_body,
)

from raftcore.client import Consumer, Producer
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security.config import ListenerSecurity
from raftcore.security.sasl import SaslConfigError
from raftcore.security.sasl_client import SaslAuthenticationError
from raftcore.security.scram import ScramClient
from raftcore.security.users import make_user, write_users

pytestmark = pytest.mark.timeout(120)

PROTOCOLS = ["SASL_PLAINTEXT"]  # SASL_SSL: with node processes in tests/test_sasl_clients.py


def security(directory: Path, protocol: str = "SASL_PLAINTEXT", **kw: Any) -> ListenerSecurity:
    kw.setdefault("sasl_node_password", NODE_PASSWORD)
    return ListenerSecurity(protocol=protocol, sasl_users_file=users_file(directory), **kw)


def sasl_nodes(sec: ListenerSecurity | None) -> dict[str, Any]:
    """The shared cluster's arguments for this module's nodes: every listener with ``sec``
    (plaintext for None), no listener, and a leader every node knows before the test runs."""
    return {
        "listener": None,
        "cluster_id": CLUSTER_ID,
        "ready": leader_of,
        **({} if sec is None else {"security": sec}),
    }


async def leader_of(nodes: list[RaftNode], timeout_s: float = 15.0) -> RaftNode:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [n for n in nodes if n.is_leader()]
        if leaders and all(n.leader_and_epoch.leader_id == leaders[0].node_id for n in nodes):
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no leader known to every node (did the nodes log in to each other?)")


def bootstrap(nodes: list[RaftNode]) -> list[str]:
    return [str(n.config.listen) for n in nodes]


# ---- raftcore.client ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_raftcore_client_logs_in_with_plain_and_both_scram_mechanisms_and_produces_and_consumes(
    tmp_path, protocol
):
    """The nodes elect a leader and replicate only by logging in to each other (node-<id> and
    the inter-node password); clients log in with each mechanism."""

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path, protocol))) as nodes:
            sent = []
            for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                async with Producer(bootstrap(nodes), security=client(mech)) as producer:
                    value = mech.encode()
                    await producer.send([(b"k", value)])
                    sent.append(value)
            async with Consumer(bootstrap(nodes), security=client("SCRAM-SHA-512", "bob")) as c:
                got: list[bytes] = []
                deadline = time.monotonic() + 10
                while len(got) < 3 and time.monotonic() < deadline:
                    got.extend(r.value for r in await c.poll())
            assert got == sent
            principals = {str(n.sasl.principal(u)) for n in nodes for u in ("alice", "node-2")}
            assert principals == {"User:alice", "Node:node-2"}

    run(main())


def test_a_wrong_password_fails_at_once_naming_the_user_and_kafkas_reason(tmp_path):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            for mech, reason in (
                ("PLAIN", "Invalid username or password"),
                ("SCRAM-SHA-256", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
            ):
                started = time.monotonic()
                with pytest.raises(SaslAuthenticationError) as info:
                    async with Producer(bootstrap(nodes), security=client(mech, password="nope")):
                        pass
                assert str(info.value).startswith("authentication failed for user alice: ")
                assert reason in str(info.value)
                assert time.monotonic() - started < 5  # not retried until a deadline

    run(main())


def test_a_mechanism_the_listener_does_not_offer_is_named_with_the_offered_ones(tmp_path):
    async def main():
        sec = security(tmp_path, sasl_mechanisms=("SCRAM-SHA-512",))
        async with cluster(tmp_path, **sasl_nodes(sec)) as nodes:
            with pytest.raises(SaslAuthenticationError, match="it offers SCRAM-SHA-512"):
                async with Producer(bootstrap(nodes), security=client("PLAIN")):
                    pass

    run(main())


# ---- Kafka's SaslServerAuthenticator rules, in raw frames ------------------------------------


def test_a_request_before_the_handshake_closes_the_connection_unanswered(tmp_path):
    """Kafka: "Unexpected Kafka request of type METADATA during SASL handshake" -- closed."""

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            for key, version, body in (
                (ApiKey.METADATA, 12, metadata_body()),
                (ApiKey.SASL_AUTHENTICATE, 1, request_spec(36).cls(auth_bytes=b"\0a\0b")),
            ):
                raw = await Raw.open(nodes[0])
                assert await raw.ask(key, version, body) is None
                assert await raw.closed()
            # ApiVersions first is allowed, and names the SASL APIs
            raw = await Raw.open(nodes[0])
            versions = await raw.ask(ApiKey.API_VERSIONS, 3, request_spec(18).cls())
            keys = {k.api_key for k in versions.api_keys}
            assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
            assert await raw.ask(ApiKey.METADATA, 12, metadata_body()) is None
            raw.close()

    run(main())


def test_a_request_other_than_sasl_authenticate_after_the_handshake_is_illegal_sasl_state(
    tmp_path,
):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            raw = await Raw.open(nodes[0])
            assert (await raw.handshake("SCRAM-SHA-256")).error_code == Errors.NONE
            answer = await raw.handshake("SCRAM-SHA-256")
            assert answer.error_code == Errors.ILLEGAL_SASL_STATE
            assert await raw.closed()

    run(main())


def test_an_unsupported_mechanism_gets_33_with_the_enabled_list_then_a_close(tmp_path):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            raw = await Raw.open(nodes[0])
            answer = await raw.handshake("GSSAPI")
            assert answer.error_code == Errors.UNSUPPORTED_SASL_MECHANISM == 33
            assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            assert await raw.closed()

    run(main())


def test_bad_credentials_get_58_with_kafkas_message_then_a_close(tmp_path):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            raw = await Raw.open(nodes[0])
            answer = await raw.login_plain("alice", "wrong")
            assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED == 58
            assert answer.error_message == "Authentication failed: Invalid username or password"
            assert await raw.closed()
            # SCRAM: an unknown user fails at the proof, with Kafka's SCRAM message
            raw = await Raw.open(nodes[0])
            await raw.handshake("SCRAM-SHA-512")
            scram = ScramClient("SCRAM-SHA-512", "mallory", "guess")
            first = await raw.authenticate(scram.first())
            assert first.error_code == Errors.NONE
            answer = await raw.authenticate(scram.final(bytes(first.auth_bytes)))
            assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
            assert answer.error_message == (
                "Authentication failed during authentication due to invalid credentials with "
                "SASL mechanism SCRAM-SHA-512"
            )
            assert await raw.closed()

    run(main())


def test_a_client_retrying_a_wrong_password_is_logged_once_per_30_s_naming_host_port(
    tmp_path, caplog
):
    """librdkafka retries a refused login every ~50 ms (98 times in 5 s, by hand): the node
    logged each one, naming the client as a Python tuple. One INFO line per client host,
    mechanism and reason, naming it host:port; the rest at DEBUG until 30 s have passed."""
    caplog.set_level(logging.DEBUG, logger="raftcore.security.sasl")

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            for _ in range(5):
                raw = await Raw.open(nodes[0])
                answer = await raw.login_plain("alice", "wrong")
                assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
                assert await raw.closed()

    run(main())
    failed = [r for r in caplog.records if "failed PLAIN login from" in r.getMessage()]
    assert len(failed) == 5
    assert [r.levelname for r in failed] == ["INFO"] + ["DEBUG"] * 4
    assert re.search(r"failed PLAIN login from 127\.0\.0\.1:\d+: ", failed[0].getMessage())


def test_after_login_requests_are_served_and_sasl_requests_get_illegal_sasl_state(tmp_path):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("bob", USERS["bob"])).error_code == Errors.NONE
            assert (await raw.ask(ApiKey.METADATA, 12, metadata_body())).cluster_id == CLUSTER_ID
            assert (await raw.handshake("PLAIN")).error_code == Errors.ILLEGAL_SASL_STATE
            again = await raw.authenticate(b"\0bob\0x")
            assert again.error_code == Errors.ILLEGAL_SASL_STATE
            assert (await raw.ask(ApiKey.METADATA, 12, metadata_body())) is not None  # still open
            raw.close()

    run(main())


def test_frames_above_512_kib_close_the_connection_until_the_login(tmp_path):
    """Kafka's sasl.server.max.receive.size: an unauthenticated client cannot make the node
    hold a 100 MiB frame."""

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            big = struct.pack(">i", 600 * 1024) + b"\x00" * 1024  # the start of a big frame
            raw = await Raw.open(nodes[0])
            raw.writer.write(big)
            assert await raw.closed()
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("alice", USERS["alice"])).error_code == Errors.NONE
            raw.writer.write(big)
            with pytest.raises(asyncio.TimeoutError):  # waiting for the rest of the frame
                await asyncio.wait_for(raw.reader.read(1), 0.5)
            raw.close()

    run(main())


def test_a_user_sending_raft_rpcs_gets_cluster_authorization_failed(tmp_path):
    """Raft RPCs are only for the nodes: a logged-in user's Vote changes nothing."""

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            epoch = max(n.leader_and_epoch.epoch for n in nodes)
            raw = await Raw.open(nodes[0])
            await raw.login_plain("alice", USERS["alice"])
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED == 31
            fetch = request_spec(ApiKey.FETCH).cls(replica_id=2, topics=[])
            answer = await raw.ask(ApiKey.FETCH, 12, fetch)
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            assert max(n.leader_and_epoch.epoch for n in nodes) == epoch < 99
            raw.close()

    run(main())


def test_a_client_cannot_pose_as_a_node_without_the_inter_node_password(tmp_path):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            raw = await Raw.open(nodes[0])
            answer = await raw.login_plain("node-2", USERS["alice"])
            assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
            raw = await Raw.open(nodes[0])
            # a node joining the cluster is not a voter yet: the password makes it a node
            assert (await raw.login_plain("node-9", NODE_PASSWORD)).error_code == Errors.NONE
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("node-2", NODE_PASSWORD)).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code != Errors.CLUSTER_AUTHORIZATION_FAILED
            raw.close()

    run(main())


def test_a_user_added_to_the_file_can_log_in_without_a_restart(tmp_path):
    async def main():
        sec = security(tmp_path)
        async with cluster(tmp_path, **sasl_nodes(sec)) as nodes:
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("carol", "c")).error_code == 58
            users = {name: make_user(name, pw) for name, pw in USERS.items()}
            users["carol"] = make_user("carol", "c")
            write_users(sec.sasl_users_file, users)  # type: ignore[arg-type]
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("carol", "c")).error_code == Errors.NONE
            raw.close()

    run(main())


def test_a_listener_without_sasl_answers_sasl_requests_illegal_sasl_state_and_hides_them(
    tmp_path,
):
    async def main():
        async with cluster(tmp_path, **sasl_nodes(None)) as nodes:
            raw = await Raw.open(nodes[0])
            versions = await raw.ask(ApiKey.API_VERSIONS, 3, request_spec(18).cls())
            keys = {k.api_key for k in versions.api_keys}
            assert ApiKey.SASL_HANDSHAKE not in keys and ApiKey.SASL_AUTHENTICATE not in keys
            assert (await raw.handshake("PLAIN")).error_code == Errors.ILLEGAL_SASL_STATE
            assert (await raw.ask(ApiKey.METADATA, 12, metadata_body())) is not None
            raw.close()

    run(main())


def test_a_sasl_listener_that_would_leave_raft_rpcs_unauthenticated_is_refused(tmp_path):
    with pytest.raises(SaslConfigError, match="inter-node password"):
        RaftNode(
            NodeConfig(
                node_id=1,
                voters={1: Endpoint("127.0.0.1", free_ports(1)[0])},
                data_dir=tmp_path / "n",
                cluster_id=CLUSTER_ID,
                security=security(tmp_path, sasl_node_password=None),
            )
        )
    with pytest.raises(SaslConfigError, match="users file"):
        RaftNode(
            NodeConfig(
                node_id=1,
                voters={1: Endpoint("127.0.0.1", free_ports(1)[0])},
                data_dir=tmp_path / "n",
                cluster_id=CLUSTER_ID,
                security=ListenerSecurity(protocol="SASL_PLAINTEXT", sasl_node_password="x"),
            )
        )


def test_requests_before_a_login_are_refused_in_one_line_per_host_and_interval_without_traceback(
    tmp_path, caplog
):
    """Kafka's SaslServerAuthenticator closes a connection whose first request is neither
    ApiVersions nor SaslHandshake, unanswered (and one that sends another API than
    SaslAuthenticate after the handshake). 100 such connections were logged as 100 ERRORs of
    26 lines each (a TypeError writing the missing answer): now one INFO line names the client
    and the request, the next ones are at DEBUG until the interval ends, and that interval's
    next line counts them."""
    caplog.set_level(logging.DEBUG)

    async def main():
        async with cluster(tmp_path, **sasl_nodes(security(tmp_path))) as nodes:
            auth = nodes[0].sasl
            clock = [0.0]
            auth.refusal_lines.clock = lambda: clock[0]
            for i in range(21):
                if i == 20:
                    clock[0] += auth.refusal_lines.every_s  # the interval ends
                raw = await Raw.open(nodes[0])
                assert await raw.ask(ApiKey.METADATA, 12, metadata_body()) is None
                assert await raw.closed()
            # after the handshake too (Kafka: "... during SASL authentication")
            raw = await Raw.open(nodes[0])
            assert (await raw.handshake("PLAIN")).error_code == Errors.NONE
            assert await raw.ask(ApiKey.METADATA, 12, metadata_body()) is None
            assert await raw.closed()

    run(main())
    noisy = [r for r in caplog.records if r.levelno >= logging.INFO and "METADATA" in r.message]
    assert noisy[-1].message.endswith("unexpected METADATA request during SASL authentication")
    noisy.pop()
    assert [r.levelname for r in noisy] == ["INFO", "INFO"]
    assert re.fullmatch(
        r".*closing connection from 127\.0\.0\.1:\d+: unexpected METADATA request during SASL "
        r"handshake",
        noisy[0].message,
    )
    assert noisy[1].message.endswith("(and 19 more from 127.0.0.1 since)")
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
