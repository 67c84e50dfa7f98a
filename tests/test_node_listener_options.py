"""``raftcore node --node-listen``: the options reach the node's configuration, a client
listener at the node's own ``--voters`` entry is refused, and as a process the node binds both
listeners before it writes anything, names both, and serves clients on the client one
(raftcore.node.listeners; the in-process rules are in tests/test_node_listeners.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from cluster_helpers import formatted, produce
from test_cli_node_startup import finish, node_argv, refused, snapshot_of, start_node, voters_argv
from test_node import run
from test_node_listeners import _describe_body, _voter_directories, request_at

from raftcore.cli import main
from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.protocol.api import ApiKey

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


# ---- raftcore node's options ------------------------------------------------------------------


def test_node_listen_options_reach_the_config_and_a_client_listener_on_the_voter_entry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--voters`` name node listeners once ``--node-listen`` is given: a ``--listen`` at this
    node's own entry would send the other nodes' Raft RPCs to a listener that refuses them."""
    import raftcore.node.runner

    configs: list[NodeConfig] = []
    monkeypatch.setattr(
        raftcore.node.runner, "run_node", lambda config, **kw: configs.append(config) or 0
    )
    ports = free_ports(4)
    data = formatted(tmp_path / "d", voters=(1, 2, 3))
    before = snapshot_of(data)
    own = f"127.0.0.1:{ports[0]}"
    client = f"127.0.0.1:{ports[3]}"
    argv = voters_argv(data, 1, ports[:3], f"--listen={client}", f"--node-listen={own}")
    assert main(argv) == 0
    assert configs[0].listen == configs[0].advertised == Endpoint("127.0.0.1", ports[3])
    assert configs[0].node_listen == configs[0].node_advertised == Endpoint("127.0.0.1", ports[0])
    line = refused(
        voters_argv(data, 1, ports[:3], f"--listen={own}", f"--node-listen=0.0.0.0:{ports[0]}"),
        capsys,
        monkeypatch,
    )
    assert f"--listen {own} is node 1's entry in --voters" in line, line
    line = refused(voters_argv(data, 1, ports[:3], f"--node-listen={own}"), capsys, monkeypatch)
    assert "needs a client listener too" in line, line
    line = refused(voters_argv(data, 1, ports[:3], f"--node-advertised={own}"), capsys, monkeypatch)
    assert "--node-advertised is for a node listener" in line, line
    assert snapshot_of(data) == before


# ---- raftcore node, as a process ----------------------------------------------------------------


def test_a_node_listener_port_in_use_fails_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """Both listeners are bound before anything is written into the data directory."""
    data = formatted(tmp_path / "data")
    before = snapshot_of(data)
    (client,) = free_ports(1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        listeners = (f"--listen=127.0.0.1:{client}", f"--node-listen=127.0.0.1:{port}")
        argv = node_argv(data, port, *listeners)
        code, err = finish(start_node(argv, tmp_path))
    assert code != 0
    assert err.strip().splitlines() == [
        f"raftcore node: cannot listen on 127.0.0.1:{port}: address already in use"
    ], err
    assert snapshot_of(data) == before


def test_a_node_with_a_node_listener_names_both_and_serves_clients_on_the_client_one(
    tmp_path: Path,
) -> None:
    node_port, client_port = free_ports(2)
    argv = node_argv(
        formatted(tmp_path / "data"),
        node_port,
        f"--listen=127.0.0.1:{client_port}",
        f"--node-listen=127.0.0.1:{node_port}",
    )
    proc = start_node(argv, tmp_path)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        line = ""
        while not line.startswith("raftcore node 1 listening on"):
            assert time.monotonic() < deadline and proc.poll() is None, "no listening line"
            line = proc.stderr.readline()
        assert (
            f"listening on 127.0.0.1:{client_port} (clients), 127.0.0.1:{node_port} (nodes)" in line
        ), line

        async def write_and_describe() -> None:
            offsets = await produce([f"127.0.0.1:{client_port}"], 0, 3)
            assert len(offsets) == 3
            body = _describe_body()
            on_client = await request_at(
                Endpoint("127.0.0.1", client_port), ApiKey.DESCRIBE_QUORUM, 2, body
            )
            assert set(_voter_directories(on_client).values()) == {bytes(16)}

        run(write_and_describe())
    finally:
        proc.terminate()
        finish(proc)
