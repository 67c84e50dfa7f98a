"""SASL with clients nobody here wrote, and the CLI (issue 12, item 5): three ``raftcore node``
processes started with ``--sasl-users`` and ``--sasl-node-password-file``; confluent-kafka and
kcat log in with SCRAM, the CLI's client commands with ``--command-config``. Every process is
ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sasl_helpers import CLUSTER_ID, NODE_PASSWORD, USERS, client, run, users_file

import raftcore
from raftcore.node.local_cluster import LocalCluster, free_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL"])
def sasl_processes(tmp_path_factory, request):
    """SASL_PLAINTEXT: the nodes log in to each other as node-<id> with the inter-node password.
    SASL_SSL (the issue's "SASL for clients over TLS"): ``--listeners SSL://`` with the
    certificates of ``raftcore certs``, which ``--sasl-users`` turns into SASL_SSL; the nodes
    prove who they are by their certificates, the clients log in over TLS."""
    directory = tmp_path_factory.mktemp("sasl-cluster")
    users = users_file(directory)
    args = [
        "--election-timeout-ms",
        "500",
        "--fetch-timeout-ms",
        "1000",
        "--sasl-users",
        str(users),
    ]
    tls_dir = None
    if request.param == "SASL_SSL":
        from raftcore.security.certs import make_certs

        tls_dir = make_certs(directory / "tls", [1, 2, 3]).directory
    else:
        password_file = directory / "node-password"
        password_file.write_text(NODE_PASSWORD + "\n")
        password_file.chmod(0o600)
        args += ["--sasl-node-password-file", str(password_file)]
    c = LocalCluster(directory / "cluster", 3, node_args=args, tls_dir=tls_dir)
    c.sasl_protocol = request.param  # type: ignore[attr-defined]
    try:
        c.start()
        run(_wait_for_leader(c))
        yield c
    finally:
        c.close()


def _props(c: LocalCluster) -> dict[str, str]:
    """The protocol a client of ``c`` uses, with the CA it trusts on SASL_SSL."""
    props = {"security.protocol": c.sasl_protocol}  # type: ignore[attr-defined]
    if c.tls_dir is not None:
        props["ssl.ca.location"] = str(c.tls_dir / "ca.pem")
    return props


def _client(c: LocalCluster, mechanism: str) -> Any:
    sec = client(mechanism)
    if c.tls_dir is None:
        return sec
    return dataclasses.replace(sec, protocol="SASL_SSL", ssl_cafile=c.tls_dir / "ca.pem")


async def _wait_for_leader(c: LocalCluster) -> None:
    from raftcore.client import describe_quorum

    info = await describe_quorum(c.bootstrap, timeout_s=30, security=_client(c, "SCRAM-SHA-256"))
    assert info.leader_id in (1, 2, 3)


def _ck_config(c: LocalCluster, mechanism: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(c.bootstrap),
        **_props(c),
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
        *[arg for key, value in _props(sasl_processes).items() for arg in ("-X", f"{key}={value}")],
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
        "".join(f"{key}={value}\n" for key, value in _props(sasl_processes).items())
        + f"sasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\nsasl.password={USERS['alice']}\n"
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
    password = tmp_path / "pw"
    password.write_text("secret\n")
    missing = tmp_path / "missing.json"
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
        str(missing),
        "--sasl-node-password-file",
        str(password),
    )
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"raftcore node: error: cannot read the users file {missing}: No such file or directory"
    ]
