"""``raftcore certs``, the node's TLS options and the clients' ``--command-config`` (issue 12),
and confluent-kafka (librdkafka) with ``security.protocol=SSL`` against node processes made from
those certificates. Every process is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import running_cluster

import raftcore
from raftcore.cli import main
from raftcore.node.local_cluster import LocalCluster, free_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SOURCE = str(Path(raftcore.__file__).parent.parent)
FAST = ["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000"]


def raftcore_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    return subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        cwd=cwd,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("certs") / "tls"
    assert main(["certs", "--out", str(d), "--nodes", "1,2,3", "--clients", "alice"]) == 0
    return d


# ---- raftcore certs ----------------------------------------------------------------------------


def test_certs_writes_a_ca_and_node_and_client_pairs_with_private_keys_0600(certs):
    names = sorted(p.name for p in certs.iterdir())
    assert names == sorted(
        ["ca.pem", "ca.key", "client-alice.pem", "client-alice.key"]
        + [f"node-{i}.{ext}" for i in (1, 2, 3) for ext in ("pem", "key")]
    )
    for key in certs.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((certs / "node-2.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "node-2" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_certs_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = str(tmp_path / "tls")
    assert main(["certs", "--out", out, "--nodes", "1"]) == 0
    before = (tmp_path / "tls" / "node-1.pem").read_bytes()
    capsys.readouterr()
    assert main(["certs", "--out", out, "--nodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"raftcore certs: {tmp_path / 'tls' / 'node-1.pem'} exists (--force to overwrite)"
    assert (tmp_path / "tls" / "node-1.pem").read_bytes() == before
    assert main(["certs", "--out", out, "--nodes", "1", "--force"]) == 0
    assert (tmp_path / "tls" / "node-1.pem").read_bytes() != before


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ("1,x", "--nodes takes node ids like 1,2,3, got 'x' in '1,x'"),
        ("1,1", "--nodes names node 1 twice"),
        ("", "--nodes takes node ids like 1,2,3, got '' in ''"),
    ],
)
def test_certs_with_bad_nodes_is_a_one_line_error(tmp_path, capsys, nodes, message):
    assert main(["certs", "--out", str(tmp_path / "tls"), "--nodes", nodes]) == 2
    assert capsys.readouterr().err == f"raftcore certs: {message}\n"
    assert not (tmp_path / "tls").exists() or not any((tmp_path / "tls").iterdir())


def test_certs_refuses_a_client_named_like_a_node(tmp_path, capsys):
    assert main(["certs", "--out", str(tmp_path), "--nodes", "1", "--clients", "node-2"]) == 2
    assert "'node-2' is a node's name" in capsys.readouterr().err


# ---- the node's options, checked before it starts ----------------------------------------------


def _node_args(tmp_path: Path, *extra: str) -> list[str]:
    port = free_ports(1)[0]
    return [
        "node",
        "--id",
        "1",
        "--voters",
        f"1@127.0.0.1:{port},2@127.0.0.1:{port + 1}",
        "--data-dir",
        str(tmp_path / "data"),
        "--cluster-id",
        "c1",
        *extra,
    ]


def test_node_tls_options_are_checked_before_the_node_starts(tmp_path, certs, capsys):
    def refused(*extra: str) -> str:
        assert main(_node_args(tmp_path, *extra)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert not (tmp_path / "data").exists()  # nothing was started
        return err

    ssl = ["--listeners", "SSL://127.0.0.1:0"]
    ca = ["--ssl-cafile", str(certs / "ca.pem")]
    missing = refused(*ssl, "--ssl-certfile", str(tmp_path / "nope.pem"), *ca)
    assert f"no such file: {tmp_path / 'nope.pem'}" in missing
    mismatch = refused(
        *ssl,
        "--ssl-certfile",
        str(certs / "node-1.pem"),
        "--ssl-keyfile",
        str(certs / "node-2.key"),
        *ca,
    )
    assert "cannot use certificate" in mismatch and "node-2.key" in mismatch
    node1 = [
        "--ssl-certfile",
        str(certs / "node-1.pem"),
        "--ssl-keyfile",
        str(certs / "node-1.key"),
    ]
    assert "ssl.client.auth=none" in refused(*ssl, *node1, *ca, "--ssl-client-auth", "none")
    assert "--ssl-certfile given for a PLAINTEXT listener" in refused(*node1)
    assert "not both" in refused(*ssl, "--listen", "127.0.0.1:1", *node1, *ca)
    assert "PROTOCOL://host:port" in refused("--listeners", "TLS://127.0.0.1:1")
    config = tmp_path / "server.properties"
    config.write_text("listeners=SSL://127.0.0.1:1\nssl.keystore.type=JKS\n")
    assert "only PEM files" in refused("--config", str(config))


def test_command_config_with_a_bad_property_is_a_one_line_error(tmp_path, capsys):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SSL\nssl.ca.locaton=/x\n")
    assert main(["produce", "--bootstrap", "127.0.0.1:1", "--command-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown property ssl.ca.locaton" in err


# ---- node processes from `raftcore certs`, and the CLI clients ---------------------------------


def _client_config(path: Path, certs: Path, client: str | None) -> Path:
    lines = ["security.protocol=SSL", f"ssl.ca.location={certs / 'ca.pem'}"]
    if client:
        lines += [
            f"ssl.certificate.location={certs / f'client-{client}.pem'}",
            f"ssl.key.location={certs / f'client-{client}.key'}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_certs_output_runs_a_mutual_tls_cluster_that_the_cli_clients_use(tmp_path, certs):
    config = _client_config(tmp_path / "alice.properties", certs, "alice")
    with LocalCluster(tmp_path / "cluster", 3, node_args=FAST, tls_dir=certs) as cluster:
        cluster.start()
        boot = ",".join(cluster.bootstrap)
        produced = raftcore_cli(
            "produce", "--bootstrap", boot, "--command-config", str(config), "a", "b", "c",
            cwd=tmp_path,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        assert "produced 3 records" in produced.stderr
        consumed = raftcore_cli(
            "consume", "--bootstrap", boot, "--command-config", str(config), "--max", "3",
            cwd=tmp_path,
        )  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.split() == ["a", "b", "c"]
        described = raftcore_cli(
            "describe-quorum", "--bootstrap", boot, "--command-config", str(config), cwd=tmp_path
        )
        assert described.returncode == 0, described.stderr


# ---- confluent-kafka (librdkafka) with security.protocol=SSL -----------------------------------


def _ck_config(boot: str, certs: Path, client: str | None) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": boot,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
    }
    if client:
        config["ssl.certificate.location"] = str(certs / f"client-{client}.pem")
        config["ssl.key.location"] = str(certs / f"client-{client}.key")
    return config


def _ck_produce_consume(config: dict[str, object], values: list[bytes]) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    errors: list[object] = []
    producer = Producer(
        {
            **config,
            "acks": "all",
            "message.timeout.ms": 20000,
            "error_cb": errors.append,
        }
    )
    delivered: list[object] = []
    for value in values:
        producer.produce(
            "raftcore", value=value, partition=0, on_delivery=lambda e, m: delivered.append(e)
        )
    assert producer.flush(30) == 0, errors
    assert delivered == [None] * len(values), delivered
    consumer = Consumer({**config, "group.id": "tls-test", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("raftcore", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        return got
    finally:
        consumer.close()


@pytest.fixture
def single_node(tmp_path, certs, request):  # type: ignore[no-untyped-def]
    """One node on SSL with the ssl.client.auth of the test's parameter."""
    auth = request.param
    with running_cluster(
        tmp_path / "cluster", 1, node_args=["--ssl-client-auth", auth], tls_dir=certs
    ) as cluster:
        yield cluster, auth


@pytest.mark.parametrize("single_node", ["required"], indirect=True)
def test_confluent_kafka_with_a_client_certificate_produces_and_consumes_over_tls(
    single_node, certs
):
    cluster, _ = single_node
    config = _ck_config(cluster.bootstrap[0], certs, "alice")
    assert _ck_produce_consume(config, [b"one", b"two"]) == [b"one", b"two"]


@pytest.mark.parametrize("single_node", ["requested", "none"], indirect=True)
def test_confluent_kafka_without_a_client_certificate_is_served_unless_one_is_required(
    single_node, certs
):
    cluster, _ = single_node
    config = _ck_config(cluster.bootstrap[0], certs, None)
    assert _ck_produce_consume(config, [b"x"]) == [b"x"]


@pytest.mark.parametrize("single_node", ["required"], indirect=True)
def test_confluent_kafka_without_a_client_certificate_is_refused_when_one_is_required(
    single_node, certs
):
    from confluent_kafka import KafkaException, Producer

    cluster, _ = single_node
    errors: list[object] = []
    producer = Producer(
        {**_ck_config(cluster.bootstrap[0], certs, None), "error_cb": errors.append}
    )
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)
    producer.poll(1)  # serves error_cb
    assert errors, "librdkafka reports the broker down"
    log = cluster.log_tail(1, 50)
    assert "TLS handshake failed from 127.0.0.1:" in log
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in log
    assert "Traceback" not in log


def test_demo_with_tls_runs_the_whole_demo_over_mutual_tls(tmp_path):
    import io

    from raftcore.cli.demo import run_demo

    out = io.StringIO()
    result = run_demo(str(tmp_path / "demo"), records=2000, batch=100, tls=True, out=out)
    assert result.ok, (result.problems, out.getvalue())
    assert "mutual TLS on every connection" in out.getvalue()
    node_log = (tmp_path / "demo" / "node-1.log").read_text()
    assert "listening on SSL://127.0.0.1:" in node_log


# ---- property files ----------------------------------------------------------------------------


def test_a_node_config_file_gives_the_listener_and_the_command_line_wins(tmp_path, certs):
    import argparse

    from raftcore.security.node_options import node_listener

    config = tmp_path / "server.properties"
    config.write_text(
        "# Kafka-style\n"
        "listeners=SSL://127.0.0.1:9093\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={certs / 'node-1.pem'}\n"
        f"ssl.key.location={certs / 'node-1.key'}\n"
        f"ssl.truststore.location={certs / 'ca.pem'}\n"
        "ssl.client.auth=requested\n"
    )
    args = argparse.Namespace(
        config=str(config),
        listen=None,
        listeners=None,
        ssl_certfile=None,
        ssl_keyfile=None,
        ssl_cafile=None,
        ssl_client_auth=None,
    )
    listen, security = node_listener(args, 3)
    assert listen == "127.0.0.1:9093"
    assert (security.protocol, security.ssl_client_auth) == ("SSL", "requested")
    assert security.ssl_cafile == certs / "ca.pem"
    args.ssl_client_auth = "required"
    assert node_listener(args, 3)[1].ssl_client_auth == "required"
    # without ssl.client.auth: required on SSL; requested on SASL_SSL (clients log in with SASL)
    lines = [line for line in config.read_text().splitlines() if "client.auth" not in line]
    config.write_text("\n".join(lines) + "\n")
    args.ssl_client_auth = None
    assert node_listener(args, 3)[1].ssl_client_auth == "required"
    args.listeners = "SASL_SSL://127.0.0.1:9093"
    assert node_listener(args, 3)[1].ssl_client_auth == "requested"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("security.protocol\n", "2: expected key=value"),
        ("security.protocol=SSL\nsecurity.protocol=SSL\n", "3: security.protocol is set twice"),
        ("security.protocol=TLS\n", "security.protocol must be one of"),
    ],
)
def test_a_bad_client_properties_file_names_the_line_or_the_property(tmp_path, text, message):
    from raftcore.security.client_config import ClientConfigError, load_client_security

    path = tmp_path / "client.properties"
    path.write_text("# a comment\n" + text)
    with pytest.raises(ClientConfigError, match=message):
        load_client_security(path)
