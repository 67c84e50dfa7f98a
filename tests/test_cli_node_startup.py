"""``raftcore node`` starts cleanly or fails cleanly (issue 12): a node that cannot start says
why in one line and leaves its data directory as it found it; "listening on" is printed once
the port accepts connections; a peer that cannot be reached is named, without a line per
retry; the demo keeps its data and node logs when it fails."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import formatted

import raftcore
from raftcore.cli import main
from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports, new_cluster_id
from raftcore.node.node import RaftNode
from raftcore.node.peer_health import PeerReachability
from raftcore.raft.config import QuorumConfig

pytestmark = pytest.mark.slow

SOURCE = str(Path(raftcore.__file__).parent.parent)


def node_argv(data_dir: Path, port: int, *extra: str) -> list[str]:
    return [
        "node",
        "--id=1",
        f"--voters=1@127.0.0.1:{port}",
        f"--data-dir={data_dir}",
        "--cluster-id=c",
        *extra,
    ]


def start_node(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "raftcore", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SOURCE},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def snapshot_of(path: Path) -> dict[str, bytes]:
    """Every file of a data directory and its bytes."""
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_an_unformatted_data_directory_is_refused_with_one_line_saying_how_to_format_it(
    tmp_path: Path,
) -> None:
    """A node never formats itself (raftcore format): absent or empty, nothing is written."""
    for data in (tmp_path / "absent", tmp_path / "empty"):
        if data.name == "empty":
            data.mkdir()
        (port,) = free_ports(1)
        code, err = finish(start_node(node_argv(data, port), tmp_path))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(f"raftcore node: error: {data} is not formatted; "), err
        assert "--initial-voters" in lines[0] and "--no-initial-voters" in lines[0]
        assert contents(data) == ([] if data.name == "empty" else None)


def contents(path: Path) -> list[str] | None:
    """What a data directory holds: None when it does not exist."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else None


# ---- failures leave the data directory as it was -----------------------------------------------


def test_a_port_in_use_fails_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    data = formatted(tmp_path / "data")
    before = snapshot_of(data)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, err = finish(start_node(node_argv(data, port), tmp_path))
    assert code != 0
    assert err.strip().splitlines() == [
        f"raftcore node: cannot listen on 127.0.0.1:{port}: address already in use"
    ], err
    assert snapshot_of(data) == before


def test_a_metrics_port_in_use_fails_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """The metrics port is bound with the listener, before the data directory is touched:
    a node whose --metrics-port was taken left log/ behind."""
    data = formatted(tmp_path / "data")
    before = snapshot_of(data)
    (port,) = free_ports(1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        metrics = taken.getsockname()[1]
        proc = start_node(node_argv(data, port, f"--metrics-port={metrics}"), tmp_path)
        code, err = finish(proc)
    assert code != 0
    assert err.strip().splitlines() == [
        f"raftcore node: [node 1] cannot serve metrics on 127.0.0.1:{metrics}: "
        "Address already in use"
    ], err
    assert snapshot_of(data) == before


def test_a_file_as_the_data_directory_is_one_line_not_errno_17(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.write_text("mine\n")
    (port,) = free_ports(1)
    assert main(node_argv(data, port)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"raftcore node: error: --data-dir {data}: not a directory (a file is in the way)"
    ]
    assert data.read_text() == "mine\n"


def test_a_data_directory_below_a_file_cannot_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "sub" / "data"
    (port,) = free_ports(1)
    assert main(node_argv(data, port)) == 2
    assert "cannot be created" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == ""


def test_an_unwritable_data_directory_fails_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, permissions do not stop writes: os.access stands in for an unwritable
    directory (the check is what decides; the node never runs)."""
    import raftcore.node.runner

    data = tmp_path / "data"
    data.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == data else real_access(p, mode)
    )
    ran = []
    monkeypatch.setattr(raftcore.node.runner, "run_node", lambda *a, **kw: ran.append(a) or 0)
    (port,) = free_ports(1)
    assert main(node_argv(data, port)) == 2
    assert (
        capsys.readouterr().err.strip() == f"raftcore node: error: --data-dir {data}: not writable"
    )
    assert ran == [] and contents(data) == []


def test_a_data_directory_that_cannot_be_created_names_the_option(tmp_path: Path) -> None:
    """/proc/nope: as root the preflight's permission check passes; the node never creates
    its directory (it must be formatted), so it says so in one line, never a bare
    "[Errno 2] No such file or directory: '/proc/nope'"."""
    (port,) = free_ports(1)
    code, err = finish(start_node(node_argv(Path("/proc/nope"), port), tmp_path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "raftcore node: error: /proc/nope is not formatted"
    ), err
    assert "Errno" not in err


# ---- a node that would pass for another is refused (issue 24) ----------------------------------


def voters_argv(data: Path, node_id: int, ports: list[int], *extra: str) -> list[str]:
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports, 1))
    argv = ["node", f"--id={node_id}", f"--voters={voters}", f"--data-dir={data}"]
    return [*argv, "--cluster-id=c", *extra]


def refused(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """The one error line of a node refused before it runs (run_node stands in: a node that
    ran would show as exit 0)."""
    import raftcore.node.runner

    monkeypatch.setattr(raftcore.node.runner, "run_node", lambda *a, **kw: 0)
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("listen", [False, True], ids=["no-listen", "own-listen"])
def test_a_node_id_missing_from_the_voters_is_refused_naming_the_option(
    tmp_path: Path,
    listen: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--id 4` with voters 1-3 and a --listen of its own started, a fourth node no voter
    knew of; without --listen the message named no option."""
    ports = free_ports(4)
    data = tmp_path / "data"
    extra = [f"--listen=127.0.0.1:{ports[3]}"] if listen else []
    line = refused(voters_argv(data, 4, ports[:3], *extra), capsys, monkeypatch)
    assert line.startswith("raftcore node: error: --id 4 is not in --voters (1, 2, 3): "), line
    assert "--bootstrap" in line and "--observer" in line
    assert not data.exists()


def test_a_node_started_as_an_observer_may_be_missing_from_the_voters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception the refusal makes: a node that only replicates, as Kafka's brokers do
    beside a static controller quorum (--bootstrap is the other way, test_membership_processes)."""
    import raftcore.node.runner

    configs: list[NodeConfig] = []
    monkeypatch.setattr(
        raftcore.node.runner, "run_node", lambda config, **kw: configs.append(config) or 0
    )
    ports = free_ports(4)
    listen = f"--listen=127.0.0.1:{ports[3]}"
    formatted(tmp_path / "d", node_id=4, voters=None)
    assert main(voters_argv(tmp_path / "d", 4, ports[:3], "--observer", listen)) == 0
    assert configs[0].node_id == 4 and 4 not in configs[0].voters
    assert configs[0].listen == Endpoint("127.0.0.1", ports[3])
    assert "--observer needs --listen" in refused(
        voters_argv(tmp_path / "d", 4, ports[:3], "--observer"), capsys, monkeypatch
    )
    assert "--observer: node 2 is in --voters" in refused(
        voters_argv(tmp_path / "d", 2, ports[:3], "--observer"), capsys, monkeypatch
    )


@pytest.mark.parametrize(
    ("node_id", "option"),
    [(4, "--listen"), (2, "--listen"), (2, "--advertised")],
    ids=["observer-listen", "voter-listen", "voter-advertised"],
)
def test_a_listen_or_advertised_address_of_another_voter_is_refused_naming_the_option(
    tmp_path: Path,
    node_id: int,
    option: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Today's case: `--id 4` with voters 1-3 started on voter 1's address and ran on."""
    ports = free_ports(3)
    observer = ["--observer"] if node_id == 4 else []
    address = f"127.0.0.1:{ports[0]}"
    argv = voters_argv(tmp_path / "d", node_id, ports, f"{option}={address}", *observer)
    line = refused(argv, capsys, monkeypatch)
    assert line == (
        f"raftcore node: error: {option} {address} is voter 1's address in --voters, "
        f"not node {node_id}'s"
    )


@pytest.mark.parametrize("mismatch", ["node", "cluster"])
def test_a_data_directory_of_another_node_or_cluster_is_refused_naming_the_options(
    tmp_path: Path, mismatch: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before the port is bound (here it is taken: the identity is what is reported)
    and as a usage error; it was `raftcore node: d1 belongs to node 1, not 2; refusing to
    start`, exit 1, once the listener was up, naming neither --data-dir nor --id."""
    data = tmp_path / "data"
    data.mkdir()
    meta = "version=1\ncluster.id=c\nnode.id=1\ndirectory.id=DK8pD_mQab9jL0f_hhNORA\n"
    (data / "meta.properties").write_text(meta)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        if mismatch == "node":
            argv = voters_argv(data, 2, [port, port + 1])
            expected = f"--data-dir {data} belongs to node 1, not --id 2; refusing to start"
        else:
            argv = [*node_argv(data, port), "--cluster-id=other"]
            expected = (
                f"--data-dir {data} belongs to cluster 'c', not --cluster-id 'other'; "
                "refusing to start"
            )
        assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"raftcore node: error: {expected}"]
    assert (data / "meta.properties").read_text() == meta and contents(data) == ["meta.properties"]


# ---- "listening on" once it listens -------------------------------------------------------------


def test_listening_is_printed_only_once_the_port_accepts_connections(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    proc = start_node(node_argv(formatted(tmp_path / "data"), port), tmp_path)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        line = ""
        while not line.startswith("raftcore node 1 listening on"):
            assert time.monotonic() < deadline and proc.poll() is None, "no listening line"
            line = proc.stderr.readline()
        # At once, no retry: the line promises a bound port.
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        assert f"raftcore node 1 listening on 127.0.0.1:{port}" in line
    finally:
        proc.terminate()
        finish(proc)


# ---- unreachable peers, named, rate-limited ----------------------------------------------------


def test_an_unreachable_peer_is_logged_once_then_every_30_s_and_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    health = PeerReachability("[node 1]", "voter 2", "127.0.0.1:9092", clock=lambda: now[0])
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)")
    with caplog.at_level(logging.INFO, logger="raftcore.node.node"):
        for _ in range(100):  # 100 s of retries, one a second
            health.failed(refused)
            now[0] += 1.0
        health.connected()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == (
        "WARNING",
        "[node 1] cannot reach voter 2 at 127.0.0.1:9092 (connection refused); retrying",
    )
    assert [level for level, _ in lines] == ["WARNING"] * 4 + ["INFO"]  # at 0, 30, 60, 90 s
    assert "still cannot reach voter 2 at 127.0.0.1:9092 (connection refused)" in lines[1][1]
    assert lines[-1] == (
        "INFO",
        "[node 1] reached voter 2 at 127.0.0.1:9092 again (after 100 failed attempts in 100 s)",
    )


def test_a_peer_that_fails_for_a_new_reason_is_told_at_once_but_not_per_flip(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused, then a TLS handshake that fails (a peer restarted with the wrong certificate):
    the new reason must not wait the 30 s (the audit saw it kept back); reasons that flip
    every attempt are told at most once a second."""
    import ssl

    now = [0.0]
    health = PeerReachability("[node 1]", "voter 2", "127.0.0.1:9092", clock=lambda: now[0])
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)")
    tls = ssl.SSLError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    tls.reason = "CERTIFICATE_VERIFY_FAILED"
    with caplog.at_level(logging.INFO, logger="raftcore.node.node"):
        for _ in range(5):  # refused for 5 s
            health.failed(refused)
            now[0] += 1.0
        health.failed(tls)  # the new reason, at 5 s
        for i in range(40):  # 4 s of flipping every 0.1 s
            now[0] += 0.1
            health.failed(tls if i % 2 else refused)
    lines = [r.getMessage() for r in caplog.records]
    assert "(connection refused); retrying" in lines[0]
    assert "now (" in lines[1] and "CERTIFICATE_VERIFY_FAILED" in lines[1], lines
    assert 2 <= len(lines) <= 2 + 5, lines  # the flips: at most one line a second


def test_a_node_whose_peers_are_down_names_each_once_not_per_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ports = free_ports(3)
    voters = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports)}
    config = NodeConfig(
        node_id=1,
        voters=voters,
        data_dir=tmp_path / "node-1",
        cluster_id=new_cluster_id(),
        quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
    )

    async def run() -> tuple[int, bool]:
        node = RaftNode(config)
        await node.start()
        try:
            await asyncio.sleep(2.0)
            retries = node.peers.connections[2].connection._failures
            server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", ports[1])
            try:
                deadline = time.monotonic() + 5
                while (
                    not node.peers.connections[2].connection.connected.is_set()
                    and time.monotonic() < deadline
                ):
                    await asyncio.sleep(0.05)
                return retries, node.peers.connections[2].connection.connected.is_set()
            finally:
                server.close()
        finally:
            await node.stop(timeout_s=0.5)

    with caplog.at_level(logging.INFO, logger="raftcore.node.node"):
        retries, reconnected = asyncio.run(asyncio.wait_for(run(), 30))
    messages = [r.getMessage() for r in caplog.records if r.name == "raftcore.node.node"]
    assert retries >= 4 and reconnected
    for peer in (2, 3):
        line = (
            f"[node 1] cannot reach voter {peer} at 127.0.0.1:{ports[peer - 1]} "
            "(connection refused); retrying"
        )
        assert messages.count(line) == 1, messages
    assert not any("still cannot reach" in m for m in messages)
    back = [m for m in messages if "reached voter 2" in m]
    assert len(back) == 1 and f"at 127.0.0.1:{ports[1]} again" in back[0]


# ---- the demo keeps what it needs to be debugged -------------------------------------------------


def test_a_failed_demo_keeps_its_data_and_node_logs_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import tempfile

    import raftcore.cli.demo
    from raftcore.errors import RaftcoreError

    async def failing_write(cluster, result, **kw):  # type: ignore[no-untyped-def]
        raise RaftcoreError("a write failed: planted")

    monkeypatch.setattr(raftcore.cli.demo, "_write", failing_write)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = io.StringIO()
    with pytest.raises(RaftcoreError, match="planted"):
        raftcore.cli.demo.run_demo(records=100, batch=10, out=out)
    (root,) = tmp_path.glob("raftcore-demo-*")
    assert sorted(p.name for p in root.glob("node-?.log")) == [
        "node-1.log",
        "node-2.log",
        "node-3.log",
    ]
    assert (root / "node-1" / "meta.properties").exists()
    assert f"the demo failed; data and node logs kept in {root}" in out.getvalue()


# ---- the bounds on connections ------------------------------------------------------------------


def test_the_connection_bounds_reach_the_nodes_config_and_help_names_kafkas_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import raftcore.node.runner

    configs: list[NodeConfig] = []
    monkeypatch.setattr(
        raftcore.node.runner, "run_node", lambda config, **kw: configs.append(config) or 0
    )
    (port,) = free_ports(1)
    assert main(node_argv(formatted(tmp_path / "a"), port)) == 0
    bounds = (
        "max_connections",
        "max_connections_per_ip",
        "connections_max_idle_ms",
        "login_timeout_ms",
        "frame_receive_timeout_ms",
        "queued_max_request_bytes",
    )
    defaults = NodeConfig(
        node_id=1, voters={1: Endpoint("127.0.0.1", port)}, data_dir=tmp_path, cluster_id="c"
    )
    assert [getattr(configs[0], b) for b in bounds] == [getattr(defaults, b) for b in bounds]
    assert (
        main(
            node_argv(
                formatted(tmp_path / "b"),
                port,
                "--max-connections=100",
                "--max-connections-per-ip=10",
                "--connections-max-idle-ms=60000",
                "--login-timeout-ms=2000",
                "--frame-receive-timeout-ms=5000",
                "--queued-max-request-bytes=1_000_000",
            )
        )
        == 0
    )
    assert [getattr(configs[1], b) for b in bounds] == [100, 10, 60_000, 2000, 5000, 1_000_000]
    with pytest.raises(SystemExit):
        main(["node", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for kafka_name in (
        "max.connections;",
        "max.connections.per.ip",
        "connections.max.idle.ms",
        "queued.max.request.bytes",
    ):
        assert kafka_name in help_text, kafka_name


def test_an_open_files_limit_below_the_nodes_need_fails_in_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """``ulimit -n`` (soft and hard) below what the node needs: one line saying what it needs,
    what is allowed and what to change, before the port or the directory is touched."""
    data = formatted(tmp_path / "data")
    before = snapshot_of(data)
    port = free_ports(1)[0]
    limited = (  # the limit set in the child itself, then raftcore as ``python -m raftcore``
        "import resource, runpy, sys; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)); "
        "sys.argv[0] = 'raftcore'; runpy.run_module('raftcore', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", limited, *node_argv(data, port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": SOURCE},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    code, err = finish(proc)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("raftcore node: this node needs about 1024 open files"), err
    assert "may open 200 (hard limit 200)" in lines[0] and "ulimit -n 1024" in lines[0], err
    assert snapshot_of(data) == before


def test_a_soft_open_files_limit_below_the_nodes_need_is_raised_to_the_hard_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    from raftcore.node import preflight

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: set_to.append(limits))
    config = NodeConfig(
        node_id=1,
        voters={1: Endpoint("127.0.0.1", 9092)},
        data_dir=Path("unused"),
        cluster_id="c",
        partitions=100,
    )
    assert preflight.open_files_needed(config) == 768 + 256 + 4 * 99
    preflight.check_open_files(config)
    assert set_to == [(4096, 4096)]
    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, 1024))  # hard too low
    with pytest.raises(preflight.OpenFilesError, match=r"needs about 1420 .* may open 256"):
        preflight.check_open_files(config)
    one = dataclasses.replace(config, partitions=1)  # the usual ulimit -n 1024 is enough
    assert preflight.open_files_needed(one) == 1024
