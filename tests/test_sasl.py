"""SASL on a node's listener (issue 12, item 5): a three-node cluster whose listeners require a
login (KIP-43/152), spoken to by raftcore.client, by raw frames, and (in the slow tests, node
processes) by confluent-kafka and kcat.

The in-process tests are parametrised by listener protocol; SASL_SSL joins SASL_PLAINTEXT once
the TLS work is merged (the login is the same over TLS)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from raftcore.client import Consumer, Producer
from raftcore.error_codes import Errors
from raftcore.node.config import Endpoint, NodeConfig
from raftcore.node.local_cluster import LocalCluster, free_ports
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, decode_response, encode_request, request_spec
from raftcore.raft import QuorumConfig
from raftcore.security.config import ClientSecurity, ListenerSecurity
from raftcore.security.sasl import SaslConfigError
from raftcore.security.sasl_client import SaslAuthenticationError
from raftcore.security.scram import ScramClient
from raftcore.security.users import make_user, write_users

pytestmark = pytest.mark.timeout(120)

FAST = QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600, request_timeout_ms=500)
CLUSTER_ID = "sasl-tests-cluster"
NODE_PASSWORD = "inter-node-secret"
PROTOCOLS = ["SASL_PLAINTEXT"]  # + "SASL_SSL" once TLS is merged
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def users_file(directory: Path) -> Path:
    path = directory / "users.json"
    write_users(path, {name: make_user(name, pw) for name, pw in USERS.items()})
    return path


def security(directory: Path, protocol: str = "SASL_PLAINTEXT", **kw: Any) -> ListenerSecurity:
    kw.setdefault("sasl_node_password", NODE_PASSWORD)
    return ListenerSecurity(protocol=protocol, sasl_users_file=users_file(directory), **kw)


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, sec: ListenerSecurity | None):  # type: ignore[no-untyped-def]
    ports = free_ports(3)
    voters = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports)}
    nodes = [
        RaftNode(
            NodeConfig(
                node_id=i,
                voters=voters,
                data_dir=tmp_path / f"node-{i}",
                cluster_id=CLUSTER_ID,
                quorum=FAST,
                **({} if sec is None else {"security": sec}),
            )
        )
        for i in voters
    ]
    try:
        for n in nodes:
            await n.start()
        await leader_of(nodes)
        yield nodes
    finally:
        for n in nodes:
            await n.stop(timeout_s=0.5)


async def leader_of(nodes: list[RaftNode], timeout_s: float = 15.0) -> RaftNode:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [n for n in nodes if n.is_leader()]
        if leaders and all(n.leader_and_epoch.leader_id == leaders[0].node_id for n in nodes):
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no leader known to every node (did the nodes log in to each other?)")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 60))


def client(mechanism: str, user: str = "alice", password: str | None = None) -> ClientSecurity:
    return ClientSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=USERS.get(user, "") if password is None else password,
    )


def bootstrap(nodes: list[RaftNode]) -> list[str]:
    return [str(n.config.listen) for n in nodes]


# ---- raw frames ----------------------------------------------------------------------------------


class Raw:
    """One connection, requests one at a time; ``ask`` returns the answer's body, or None when
    the node closed the connection without answering."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.cid = reader, writer, 0

    @classmethod
    async def open(cls, node: RaftNode) -> Raw:
        return cls(*await asyncio.open_connection(node.config.listen.host, node.config.listen.port))

    async def ask(self, key: int, version: int, body: Any) -> Any:
        self.cid += 1
        frame = encode_request(key, version, self.cid, "raw-test", body)
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        try:
            (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
            data = await asyncio.wait_for(self.reader.readexactly(size), 5)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        cid, answer = decode_response(key, version, data)
        assert cid == self.cid
        return answer

    async def closed(self) -> bool:
        """True when the node closed the connection (within 5 s)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()

    async def handshake(self, mechanism: str, version: int = 1) -> Any:
        cls = request_spec(ApiKey.SASL_HANDSHAKE).cls
        return await self.ask(ApiKey.SASL_HANDSHAKE, version, cls(mechanism=mechanism))

    async def authenticate(self, token: bytes, version: int = 1) -> Any:
        cls = request_spec(ApiKey.SASL_AUTHENTICATE).cls
        return await self.ask(ApiKey.SASL_AUTHENTICATE, version, cls(auth_bytes=token))

    async def login_plain(self, user: str, password: str) -> Any:
        assert (await self.handshake("PLAIN")).error_code == Errors.NONE
        return await self.authenticate(b"\x00" + user.encode() + b"\x00" + password.encode())


def metadata_body() -> Any:
    cls = request_spec(ApiKey.METADATA).cls
    return cls(topics=None, allow_auto_topic_creation=False)


def vote_body(candidate: int) -> Any:
    cls = request_spec(ApiKey.VOTE).cls
    partition = cls.PartitionData(
        partition_index=0,
        candidate_epoch=99,
        candidate_id=candidate,
        last_offset_epoch=99,
        last_offset=10**9,
    )
    return cls(
        cluster_id=CLUSTER_ID,
        voter_id=1,
        topics=[cls.TopicData(topic_name="raftcore", partitions=[partition])],
    )


# ---- raftcore.client ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_raftcore_client_logs_in_with_plain_and_both_scram_mechanisms_and_produces_and_consumes(
    tmp_path, protocol
):
    """The nodes elect a leader and replicate only by logging in to each other (node-<id> and
    the inter-node password); clients log in with each mechanism."""

    async def main():
        async with cluster(tmp_path, security(tmp_path, protocol)) as nodes:
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
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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
        async with cluster(tmp_path, sec) as nodes:
            with pytest.raises(SaslAuthenticationError, match="it offers SCRAM-SHA-512"):
                async with Producer(bootstrap(nodes), security=client("PLAIN")):
                    pass

    run(main())


# ---- Kafka's SaslServerAuthenticator rules, in raw frames ------------------------------------


def test_a_request_before_the_handshake_closes_the_connection_unanswered(tmp_path):
    """Kafka: "Unexpected Kafka request of type METADATA during SASL handshake" -- closed."""

    async def main():
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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
        async with cluster(tmp_path, security(tmp_path)) as nodes:
            raw = await Raw.open(nodes[0])
            assert (await raw.handshake("SCRAM-SHA-256")).error_code == Errors.NONE
            answer = await raw.handshake("SCRAM-SHA-256")
            assert answer.error_code == Errors.ILLEGAL_SASL_STATE
            assert await raw.closed()

    run(main())


def test_an_unsupported_mechanism_gets_33_with_the_enabled_list_then_a_close(tmp_path):
    async def main():
        async with cluster(tmp_path, security(tmp_path)) as nodes:
            raw = await Raw.open(nodes[0])
            answer = await raw.handshake("GSSAPI")
            assert answer.error_code == Errors.UNSUPPORTED_SASL_MECHANISM == 33
            assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            assert await raw.closed()

    run(main())


def test_bad_credentials_get_58_with_kafkas_message_then_a_close(tmp_path):
    async def main():
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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


def test_after_login_requests_are_served_and_sasl_requests_get_illegal_sasl_state(tmp_path):
    async def main():
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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
        async with cluster(tmp_path, security(tmp_path)) as nodes:
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
        async with cluster(tmp_path, security(tmp_path)) as nodes:
            raw = await Raw.open(nodes[0])
            answer = await raw.login_plain("node-2", USERS["alice"])
            assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("node-9", NODE_PASSWORD)).error_code == (
                Errors.SASL_AUTHENTICATION_FAILED  # not a voter
            )
            raw = await Raw.open(nodes[0])
            assert (await raw.login_plain("node-2", NODE_PASSWORD)).error_code == Errors.NONE
            answer = await raw.ask(ApiKey.VOTE, 1, vote_body(candidate=2))
            assert answer.error_code != Errors.CLUSTER_AUTHORIZATION_FAILED
            raw.close()

    run(main())


def test_a_user_added_to_the_file_can_log_in_without_a_restart(tmp_path):
    async def main():
        sec = security(tmp_path)
        async with cluster(tmp_path, sec) as nodes:
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
        async with cluster(tmp_path, None) as nodes:
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


# ---- node processes: raftcore node --sasl-users, the CLI, confluent-kafka, kcat ------------------


@pytest.fixture(scope="module")
def sasl_processes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sasl-cluster")
    users = users_file(directory)
    password_file = directory / "node-password"
    password_file.write_text(NODE_PASSWORD + "\n")
    password_file.chmod(0o600)
    args = [
        "--election-timeout-ms",
        "500",
        "--fetch-timeout-ms",
        "1000",
        "--sasl-users",
        str(users),
        "--sasl-node-password-file",
        str(password_file),
    ]
    c = LocalCluster(directory / "cluster", 3, node_args=args)
    try:
        c.start()
        run(_wait_for_leader(c))
        yield c
    finally:
        c.close()


async def _wait_for_leader(c: LocalCluster) -> None:
    from raftcore.client import describe_quorum

    info = await describe_quorum(c.bootstrap, timeout_s=30, security=client("SCRAM-SHA-256"))
    assert info.leader_id in (1, 2, 3)


def _ck_config(c: LocalCluster, mechanism: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(c.bootstrap),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def test_confluent_kafka_produces_and_consumes_with_scram_sha_512(sasl_processes):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    conf = _ck_config(sasl_processes, "SCRAM-SHA-512", USERS["alice"])
    errors: list[Any] = []
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    values = [b"ck-sasl-%03d" % n for n in range(50)]
    for v in values:
        producer.produce(
            "raftcore",
            value=v,
            partition=0,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not errors
    consumer = Consumer({**conf, "group.id": "sasl-test", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("raftcore", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(values) <= set(got):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert [v for v in got if v.startswith(b"ck-sasl-")] == values
    finally:
        consumer.close()


def test_confluent_kafka_with_a_wrong_password_sees_sasl_authentication_failed(sasl_processes):
    from confluent_kafka import KafkaError, Producer

    seen: list[Any] = []
    conf = _ck_config(sasl_processes, "SCRAM-SHA-512", "wrong")
    producer = Producer({**conf, "error_cb": seen.append})
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not seen:
            producer.poll(0.2)
        assert seen, "no error reported within 15 s"
        err = seen[0]
        assert err.code() == KafkaError._AUTHENTICATION, err
        assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err.str(), err.str()
    finally:
        producer.flush(0)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produces_and_consumes_with_scram_sha_256(sasl_processes):
    kcat = shutil.which("kcat")
    assert kcat is not None
    common = [
        "-b",
        ",".join(sasl_processes.bootstrap),
        "-t",
        "raftcore",
        "-p",
        "0",
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-256",
        "-X",
        "sasl.username=bob",
        "-X",
        f"sasl.password={USERS['bob']}",
    ]
    lines = [f"kcat-sasl-{n}" for n in range(20)]
    out = subprocess.run(
        [kcat, *common, "-P"],
        input="\n".join(lines) + "\n",
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [kcat, *common, "-C", "-o", "beginning", "-e", "-q"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith("kcat-sasl-")] == lines


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    import raftcore

    env = dict(os.environ, PYTHONPATH=str(Path(raftcore.__file__).parent.parent))
    return subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )


def test_cli_client_commands_log_in_from_command_config_and_a_refusal_is_one_line(
    sasl_processes, tmp_path
):
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username=alice\nsasl.password={USERS['alice']}\n"
    )
    bootstrap = ",".join(sasl_processes.bootstrap)
    out = _cli(tmp_path, "produce", "--bootstrap", bootstrap, "--command-config", str(config), "x")
    assert out.returncode == 0, out.stderr
    out = _cli(
        tmp_path, "describe-quorum", "--bootstrap", bootstrap, "--command-config", str(config)
    )
    assert out.returncode == 0 and "leader" in out.stdout.lower(), out.stderr

    config.write_text(config.read_text().replace(USERS["alice"], "wrong"))
    out = _cli(tmp_path, "produce", "--bootstrap", bootstrap, "--command-config", str(config), "x")
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "raftcore produce: authentication failed for user alice: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    ]
    out = _cli(tmp_path, "describe-quorum", "--bootstrap", bootstrap, "--timeout-ms", "1500")
    assert out.returncode == 1, "a client without credentials is not served"


def test_raftcore_node_refuses_sasl_without_the_inter_node_password(tmp_path):
    users = users_file(tmp_path)
    port = free_ports(1)[0]
    out = _cli(
        tmp_path,
        "node",
        "--id",
        "1",
        "--voters",
        f"1@127.0.0.1:{port}",
        "--data-dir",
        str(tmp_path / "d"),
        "--cluster-id",
        CLUSTER_ID,
        "--sasl-users",
        str(users),
    )
    assert out.returncode == 2
    assert "--sasl-node-password-file" in out.stderr and "raft" in out.stderr
