"""Who a SASL login is, in-process: a node is the node its certificate names on SASL_SSL (a
login never makes one), and on SASL_PLAINTEXT the node whose own credentials logged in; a
login costs the same work whether or not the user exists, runs off the event loop, and a
client retrying a refused login is logged once per 30 s. Node processes, a forged Vote and
the move of a running cluster to per-node credentials: tests/test_sasl_per_node.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from node_helpers import FAST, cluster
from sasl_helpers import (
    CLUSTER_ID,
    NODE_PASSWORD,
    USERS,
    Raw,
    metadata_body,
    plain_token,
    run,
    vote_body,
)

from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports, tls_client_security
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security import scram as scram_module
from raftcore.security.certs import make_certs
from raftcore.security.config import ClientSecurity, ListenerSecurity
from raftcore.security.sasl import SaslConfigError
from raftcore.security.scram import ScramClient, make_credential
from raftcore.security.tls import client_context
from raftcore.security.users import UsersFile, make_node_user, make_user, write_users_file

pytestmark = pytest.mark.timeout(120)

OWN = {1: "node-1-own-secret", 2: "node-2-own-secret", 3: "node-3-own-secret"}


def write_file(
    directory: Path, own: tuple[int, ...] = (), shared: bool = False, iterations: int = 8192
) -> Path:
    """A users file with alice and bob, the own credentials of the nodes ``own``, and the
    shared node password's (NODE_PASSWORD) when ``shared``."""
    users = {name: make_user(name, pw, iterations=iterations) for name, pw in USERS.items()}
    for node_id in own:
        users[f"node-{node_id}"] = make_node_user(node_id, OWN[node_id], iterations=iterations)
    contents = UsersFile(users, make_node_user(None, NODE_PASSWORD) if shared else None)
    path = directory / "users.json"
    write_users_file(path, contents)
    return path


def plaintext(users: Path, password: str = NODE_PASSWORD) -> ListenerSecurity:
    return ListenerSecurity(
        protocol="SASL_PLAINTEXT", sasl_users_file=users, sasl_node_password=password
    )


def nodes_with(tmp_path: Path, security: dict[int, ListenerSecurity], leader: bool = True) -> Any:
    """The shared in-process cluster (node_helpers.cluster) of ``len(security)`` voters, node
    ``i`` listening with ``security[i]`` (ids 1..n), no listener; with ``leader``, a leader
    every node knows before the block runs."""

    def per_node(node_id: int) -> dict[str, Any]:
        return {"security": security[node_id]}

    assert sorted(security) == list(range(1, len(security) + 1)), sorted(security)
    return cluster(
        tmp_path,
        size=len(security),
        listener=None,
        cluster_id=CLUSTER_ID,
        quorum=FAST,
        per_node=per_node,
        ready=leader_of if leader else None,
    )


async def leader_of(nodes: list[RaftNode], timeout_s: float = 15.0) -> RaftNode:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [n for n in nodes if n.is_leader()]
        if leaders and all(n.leader_and_epoch.leader_id == leaders[0].node_id for n in nodes):
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no leader known to every node (did the nodes log in to each other?)")


def epochs(nodes: list[RaftNode]) -> list[tuple[int, int | None]]:
    return [(n.leader_and_epoch.epoch, n.leader_and_epoch.leader_id) for n in nodes]


async def scram_login(raw: Raw, mechanism: str, user: str, password: str) -> Any:
    assert (await raw.handshake(mechanism)).error_code == Errors.NONE
    client = ScramClient(mechanism, user, password)
    first = await raw.authenticate(client.first())
    if first is None or first.error_code != Errors.NONE:
        return first
    return await raw.authenticate(client.final(bytes(first.auth_bytes)))


# ---- SASL_SSL: the certificate is the node ----------------------------------------------------


def sasl_ssl(
    certs: Path, users: Path, node_id: int, password: str | None = None
) -> ListenerSecurity:
    """Node ``node_id``'s SASL_SSL listener: its certificate from ``certs`` (``raftcore
    certs``), client certificates requested (users log in instead), ``users`` to log in."""
    return ListenerSecurity(
        protocol="SASL_SSL",
        ssl_certfile=certs / f"node-{node_id}.pem",
        ssl_keyfile=certs / f"node-{node_id}.key",
        ssl_cafile=certs / "ca.pem",
        ssl_client_auth="requested",
        sasl_users_file=users,
        sasl_node_password=password,
    )


@pytest.mark.slow
def test_a_sasl_login_as_a_node_on_sasl_ssl_is_not_a_node(tmp_path):
    """On SASL_SSL a node is the node its certificate names. The password the nodes used to
    share (still configured here, as the docs once set SASL_SSL up) logs in as node-2 only on
    a connection that already holds node 2's certificate; from anywhere else -- no
    certificate, a user's, another node's -- it is refused, and nothing moves the epoch."""
    certs = make_certs(tmp_path / "tls", [1, 2, 3], clients=["alice"]).directory
    users = write_file(tmp_path)

    def listener(node_id: int) -> ListenerSecurity:
        return sasl_ssl(certs, users, node_id, NODE_PASSWORD)

    def tls(cert: str | None) -> Any:
        sec = tls_client_security(certs, None)
        if cert is not None:
            sec = ClientSecurity(
                protocol="SASL_SSL",
                ssl_cafile=certs / "ca.pem",
                ssl_certfile=certs / f"{cert}.pem",
                ssl_keyfile=certs / f"{cert}.key",
            )
        return client_context(sec)

    async def main():
        async with nodes_with(tmp_path, {i: listener(i) for i in (1, 2, 3)}) as nodes:
            target = nodes[0].config.listen
            for cert in (None, "client-alice", "node-3"):
                raw = await Raw.connect(target.host, target.port, tls(cert))
                answer = await raw.login_plain("node-2", NODE_PASSWORD)
                assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED, cert
                assert await raw.closed()
                raw = await Raw.connect(target.host, target.port, tls(cert))
                answer = await scram_login(raw, "SCRAM-SHA-512", "node-2", NODE_PASSWORD)
                assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED, cert
            # a logged-in user's Vote is refused as before
            raw = await Raw.connect(target.host, target.port, tls("client-alice"))
            assert (await raw.login_plain("alice", USERS["alice"])).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            raw.close()
            # node 2's certificate with a user's login is that user
            raw = await Raw.connect(target.host, target.port, tls("node-2"))
            assert (await raw.login_plain("alice", USERS["alice"])).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            raw.close()
            # node 2's certificate with node 2's login (a node of an older raftcore): node 2
            raw = await Raw.connect(target.host, target.port, tls("node-2"))
            assert (await raw.login_plain("node-2", NODE_PASSWORD)).error_code == Errors.NONE
            raw.close()
            # the nodes themselves did not log in: their certificates are enough
            assert all(n.sasl.peer_login is None for n in nodes)

    run(main())


# ---- SASL_PLAINTEXT: each node its own credentials --------------------------------------------


def test_once_a_node_has_its_own_credentials_no_other_password_logs_in_as_it(tmp_path, caplog):
    """Three nodes with their own passwords (the file still keeps the shared one's
    credentials): they elect a leader logging in with their own, and node-2 is refused with
    the shared password, node 3's, or a user's, by PLAIN and SCRAM alike."""
    caplog.set_level(logging.INFO, logger="raftcore.security.sasl")
    users = write_file(tmp_path, own=(1, 2, 3), shared=True)

    async def main():
        sec = {i: plaintext(users, OWN[i]) for i in (1, 2, 3)}
        async with nodes_with(tmp_path, sec) as nodes:
            for password in (NODE_PASSWORD, OWN[3], USERS["alice"]):
                raw = await Raw.open(nodes[0])
                answer = await raw.login_plain("node-2", password)
                assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED, password
                raw = await Raw.open(nodes[0])
                answer = await scram_login(raw, "SCRAM-SHA-256", "node-2", password)
                assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED, password
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("node-2", OWN[2])).error_code == Errors.NONE
            raw.close()
            # node 3's own login speaks for node 3 only
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("node-3", OWN[3])).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
            raw.close()
            assert max(epoch for epoch, _ in epochs(nodes)) < 99

    run(main())
    assert "shared inter-node password" not in caplog.text  # nobody warned, nobody used it


def test_a_node_without_its_own_credentials_logs_in_with_the_shared_password_and_is_warned_about(
    tmp_path, caplog
):
    """Half-way through moving to per-node credentials: nodes 1 and 2 have their own, node 3
    still holds the shared password, whose credentials the file keeps. The cluster works;
    every node says at start, in one WARNING line, that node-3 is anyone's who holds it."""
    caplog.set_level(logging.INFO)
    users = write_file(tmp_path, own=(1, 2), shared=True)

    async def main():
        sec = {1: plaintext(users, OWN[1]), 2: plaintext(users, OWN[2]), 3: plaintext(users)}
        async with nodes_with(tmp_path, sec) as nodes:
            leader = await leader_of(nodes)
            assert all(n.leader_and_epoch.leader_id == leader.node_id for n in nodes)

    run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    shared = [w for w in warnings if "shared inter-node password" in w]
    assert len(shared) == 3, shared  # one line per node
    assert all("node-3 has no credentials of its own" in w for w in shared), shared
    assert all("raftcore users add-node" in w and "docs/security.md" in w for w in shared)
    logins = [r.getMessage() for r in caplog.records if "logged in" in r.getMessage()]
    assert any("Node:node-3" in m and "with the shared inter-node password" in m for m in logins)
    assert not any("Node:node-1" in m and "shared" in m for m in logins)


def test_a_cluster_set_up_with_one_shared_password_keeps_working_and_says_so_at_start(
    tmp_path, caplog
):
    caplog.set_level(logging.WARNING)
    users = write_file(tmp_path)

    async def main():
        async with nodes_with(tmp_path, {i: plaintext(users) for i in (1, 2, 3)}):
            pass

    run(main())
    shared = [r.getMessage() for r in caplog.records if "shared inter-node" in r.getMessage()]
    assert len(shared) == 3 and all(
        "node-1, node-2 and node-3 have no credentials of their own" in m for m in shared
    ), shared


def test_a_node_with_its_own_credentials_says_when_the_others_cannot_log_in_to_it(tmp_path, caplog):
    """Step 1 of the move to per-node credentials forgotten: node 1 has its own, nodes 2 and
    3 still share a password whose credentials the file does not keep."""
    users = write_file(tmp_path, own=(1,))
    ports = free_ports(3)
    config = NodeConfig(
        node_id=1,
        voters={i: Endpoint("127.0.0.1", p) for i, p in zip((1, 2, 3), ports, strict=True)},
        data_dir=tmp_path / "n",
        cluster_id=CLUSTER_ID,
        security=plaintext(users, OWN[1]),
    )
    with caplog.at_level(logging.WARNING):
        RaftNode(config)
    assert "node-2 and node-3 have no credentials of their own in" in caplog.text
    assert "cannot log in to this node" in caplog.text


def test_a_node_whose_password_file_does_not_hold_its_own_password_does_not_start(tmp_path):
    users = write_file(tmp_path, own=(1,))
    config = NodeConfig(
        node_id=1,
        voters={1: Endpoint("127.0.0.1", free_ports(1)[0])},
        data_dir=tmp_path / "n",
        cluster_id=CLUSTER_ID,
        security=plaintext(users, NODE_PASSWORD),
    )
    with pytest.raises(SaslConfigError, match="is not node-1's"):
        RaftNode(config)


# ---- the same work for every login, off the event loop -----------------------------------------


@contextlib.asynccontextmanager
async def one_node(tmp_path: Path, users: Path):  # type: ignore[no-untyped-def]
    async with nodes_with(tmp_path, {1: plaintext(users)}) as nodes:
        yield nodes[0]


def test_a_plain_login_does_the_same_pbkdf2_work_whether_or_not_the_user_exists(tmp_path):
    """An existing user with a wrong password, an unknown user, a user without PLAIN
    credentials and a node name that is no voter: one PBKDF2 of the users' iteration count
    each, on the login threads (timing would tell who exists otherwise: 1.1 ms against
    0.15 ms)."""
    users = write_file(tmp_path)
    contents = UsersFile(
        {
            "alice": make_user("alice", USERS["alice"]),
            "scram-only": make_user("scram-only", "x", mechanisms=("SCRAM-SHA-256",)),
        }
    )
    write_users_file(users, contents)

    async def main():
        async with one_node(tmp_path, users) as node:
            work: list[tuple[int, str]] = []

            def counted(name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
                work.append((iterations, threading.current_thread().name))
                return hashlib.pbkdf2_hmac(name, password, salt, iterations)

            node.sasl.pbkdf2 = counted
            for user, password, code in (
                ("alice", USERS["alice"], Errors.NONE),
                ("alice", "wrong", Errors.SASL_AUTHENTICATION_FAILED),
                ("mallory", "wrong", Errors.SASL_AUTHENTICATION_FAILED),
                ("scram-only", "x", Errors.SASL_AUTHENTICATION_FAILED),
                ("node-7", "wrong", Errors.SASL_AUTHENTICATION_FAILED),
            ):
                work.clear()
                raw = await Raw.open(node)
                assert (await raw.login_plain(user, password)).error_code == code, user
                raw.close()
                assert [w[0] for w in work] == [8192], (user, work)
                assert work[0][1].startswith("raftcore-login"), work

    run(main())


def test_an_unknown_scram_user_gets_the_users_iteration_count_and_the_same_proof_check(
    tmp_path, monkeypatch
):
    """The server-first message of an unknown user carries the iteration count the users
    have (8192 here, not the 4096 minimum), and its proof is checked like a wrong password's,
    up to the same comparison."""
    users = write_file(tmp_path)
    compared: list[int] = []
    real = scram_module.hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        compared.append(len(a))
        return real(a, b)

    async def main():
        async with one_node(tmp_path, users) as node:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                seen = []
                for user in ("alice", "mallory"):
                    raw = await Raw.open(node)
                    await raw.handshake(mechanism)
                    client = ScramClient(mechanism, user, "wrong")
                    first = await raw.authenticate(client.first())
                    attrs = dict(
                        p.split("=", 1) for p in bytes(first.auth_bytes).decode().split(",")
                    )
                    final = client.final(bytes(first.auth_bytes))
                    compared.clear()
                    monkeypatch.setattr(scram_module.hmac, "compare_digest", counting)
                    answer = await raw.authenticate(final)
                    monkeypatch.setattr(scram_module.hmac, "compare_digest", real)
                    assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
                    seen.append((attrs["i"], len(attrs["s"]), list(compared)))
                assert seen[0] == seen[1], (mechanism, seen)
                assert seen[0][0] == "8192"

    run(main())


def test_an_unknown_scram_user_s_server_first_message_has_a_real_user_s_shape_per_mechanism(
    tmp_path,
):
    """Users could be listed before logging in: a real user's SCRAM-SHA-256 and SCRAM-SHA-512
    salts differ (each credential has its own), an unknown user's were the same bytes. Per
    mechanism, an unknown user's server-first message now has the shape of a real one's (the
    nonce's length, the salt's length, the iteration count), with a salt of its own for each
    mechanism that stays the same from one login to the next. The users here have 20-byte
    salts and 4096 iterations for SHA-512 (a file made elsewhere), 32 bytes and 8192 for
    SHA-256."""
    users = tmp_path / "users.json"

    def user(name: str, password: str) -> Any:
        made = make_user(name, password, mechanisms=("SCRAM-SHA-256",))
        sha512 = make_credential("SCRAM-SHA-512", password, iterations=4096, salt=os.urandom(20))
        return dataclasses.replace(made, scram={**made.scram, "SCRAM-SHA-512": sha512})

    write_users_file(users, UsersFile({n: user(n, p) for n, p in USERS.items()}))

    async def server_first(node: RaftNode, mechanism: str, name: str) -> dict[str, str]:
        raw = await Raw.open(node)
        await raw.handshake(mechanism)
        first = await raw.authenticate(ScramClient(mechanism, name, "guess").first())
        raw.close()
        text = bytes(first.auth_bytes).decode()
        return dict(p.split("=", 1) for p in text.split(","))

    async def main():
        async with one_node(tmp_path, users) as node:
            salts: dict[str, dict[str, bytes]] = {}
            for name in ("alice", "mallory"):
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    attrs = await server_first(node, mechanism, name)
                    again = await server_first(node, mechanism, name)
                    assert again["s"] == attrs["s"] and again["i"] == attrs["i"]
                    salt = base64.b64decode(attrs["s"])
                    shape = (len(attrs["r"]), len(salt), attrs["i"])
                    salts.setdefault(name, {})[mechanism] = salt
                    expected = (
                        (len(attrs["r"]), 32, "8192")
                        if mechanism == "SCRAM-SHA-256"
                        else (len(attrs["r"]), 20, "4096")
                    )
                    assert shape == expected, (name, mechanism, shape)
            for name, by_mechanism in salts.items():
                assert by_mechanism["SCRAM-SHA-256"] != by_mechanism["SCRAM-SHA-512"], name
                assert by_mechanism["SCRAM-SHA-512"] not in by_mechanism["SCRAM-SHA-256"], name

    run(main())


@pytest.mark.slow
def test_a_login_hashing_a_password_does_not_hold_up_other_connections_and_answers_in_order(
    tmp_path, monkeypatch
):
    """A PLAIN login whose PBKDF2 takes a second: another connection's ApiVersions is answered
    meanwhile, and the Metadata the client sent right behind its login is answered after the
    login, in order."""
    real = hashlib.pbkdf2_hmac

    def slow(name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
        if password == b"slow-password":
            time.sleep(1.0)
        return real(name, password, salt, iterations)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", slow)
    users = tmp_path / "users.json"
    write_users_file(users, UsersFile({"slow": make_user("slow", "slow-password")}))

    async def main():
        async with one_node(tmp_path, users) as node:
            slow_raw = await Raw.open(node)
            assert (await slow_raw.handshake("PLAIN")).error_code == Errors.NONE
            auth_cls = request_spec(ApiKey.SASL_AUTHENTICATE).cls
            login = slow_raw.frame(
                ApiKey.SASL_AUTHENTICATE,
                1,
                auth_cls(auth_bytes=plain_token("slow", "slow-password")),
            )
            login_cid = slow_raw.cid
            metadata = slow_raw.frame(ApiKey.METADATA, 12, metadata_body())
            started = time.monotonic()
            slow_raw.writer.write(login + metadata)  # pipelined
            await asyncio.sleep(0.1)
            other = await Raw.open(node)
            versions = await other.ask(ApiKey.API_VERSIONS, 3, request_spec(18).cls())
            assert versions.error_code == Errors.NONE
            assert time.monotonic() - started < 0.8, "the loop waited for the login's PBKDF2"
            other.close()
            answer = await slow_raw.answer(ApiKey.SASL_AUTHENTICATE, 1, login_cid)
            assert answer.error_code == Errors.NONE
            assert time.monotonic() - started >= 0.9
            served = await slow_raw.answer(ApiKey.METADATA, 12)
            assert served.cluster_id == CLUSTER_ID
            slow_raw.close()

    run(main())


# ---- one line per 30 s ---------------------------------------------------------------------------


def test_a_client_retrying_a_refused_login_gets_one_line_per_30_s_from_any_module(tmp_path, caplog):
    """A wrong password five times, a mechanism the node does not offer five times, a
    request before the handshake five times (a PLAINTEXT client at a SASL listener): one
    line at INFO or above each, from the sasl module or the transport together; the rest at
    DEBUG."""
    caplog.set_level(logging.DEBUG)
    users = write_file(tmp_path)

    async def main():
        async with one_node(tmp_path, users) as node:
            for _ in range(5):
                raw = await Raw.open(node)
                assert (await raw.login_plain("alice", "wrong")).error_code == 58
                assert await raw.closed()
            for _ in range(5):
                raw = await Raw.open(node)
                assert (await raw.handshake("GSSAPI")).error_code == 33
                assert await raw.closed()
            for _ in range(5):
                raw = await Raw.open(node)
                assert await raw.ask(ApiKey.METADATA, 12, metadata_body()) is None
                assert await raw.closed()

    run(main())
    client_lines = [
        r
        for r in caplog.records
        if "from 127.0.0.1:" in r.getMessage() and "logged in" not in r.getMessage()
    ]
    loud = [r.getMessage() for r in client_lines if r.levelno >= logging.INFO]
    assert len(loud) == 3, loud
    assert "failed PLAIN login" in loud[0] and "wrong password or no such user" in loud[0]
    assert "'GSSAPI' is not enabled" in loud[1]
    assert "unexpected METADATA request during SASL handshake" in loud[2]
    assert len(client_lines) > 15  # the others are there, at DEBUG
