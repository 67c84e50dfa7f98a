"""Formatting is explicit (Kafka's ``kafka-storage format``): ``raftcore format`` writes
``meta.properties`` (cluster id, node id, a new directory id, the initial voters) and an empty
quorum-state; it refuses a directory already formatted or holding a log. A node never formats
itself: on an unformatted directory it refuses to start with one line saying how to format it,
and on a directory that holds a replica's data but lost its ``meta.properties`` it refuses too
(which replica it was is gone: the operator decides). A directory of a release before
formatting (``meta.properties`` without ``initial.voters``) starts as it always did."""

from __future__ import annotations

import asyncio

import pytest

from raftcore.cli.app import main
from raftcore.endpoints import Endpoint
from raftcore.errors import LostQuorumStateError, RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import (
    META_PROPERTIES,
    check_meta_properties,
    format_data_dir,
    read_meta_properties,
)
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import QuorumConfig

pytestmark = pytest.mark.timeout(60)

CLUSTER = "format-cluster"


def _config(data_dir, node_id=1, voters=(1,)):  # type: ignore[no-untyped-def]
    ports = free_ports(len(voters))
    return NodeConfig(
        node_id=node_id,
        voters={v: Endpoint("127.0.0.1", p) for v, p in zip(voters, ports, strict=True)},
        data_dir=data_dir,
        cluster_id=CLUSTER,
        quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
    )


def _format_cli(capsys, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["format", f"--cluster-id={CLUSTER}", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _start(cfg: NodeConfig) -> None:
    async def run() -> None:
        node = RaftNode(cfg)
        await node.start()
        await node.stop()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_format_writes_the_identity_the_initial_voters_and_an_empty_quorum_state(tmp_path, capsys):
    d = tmp_path / "node-1"
    code, out, _ = _format_cli(
        capsys, "--data-dir", str(d), "--id", "1", "--initial-voters", "1@h:1,2@h:2,3@h:3"
    )
    assert code == 0 and "formatted" in out
    props = read_meta_properties(d)
    assert props is not None
    assert props["cluster.id"] == CLUSTER and props["node.id"] == "1"
    assert props["initial.voters"] == "1,2,3" and len(props["directory.id"]) == 22
    assert '"leaderEpoch":0' in (d / "quorum-state").read_text()
    assert check_meta_properties(_config(d, voters=(1, 2, 3))).initial_voters == {1, 2, 3}


def test_standalone_and_no_initial_voters_record_their_voter_set(tmp_path, capsys):
    assert (
        _format_cli(capsys, "--data-dir", str(tmp_path / "a"), "--id", "4", "--standalone")[0] == 0
    )
    assert read_meta_properties(tmp_path / "a")["initial.voters"] == "4"  # type: ignore[index]
    joined = tmp_path / "b"
    assert (
        _format_cli(capsys, "--data-dir", str(joined), "--id", "3", "--no-initial-voters")[0] == 0
    )
    identity = check_meta_properties(_config(joined, node_id=3, voters=(1, 2, 3)))
    assert identity.joins and identity.initial_voters == frozenset()


@pytest.mark.parametrize(
    "choice",
    [[], ["--standalone", "--no-initial-voters"], ["--standalone", "--initial-voters", "1@h:1"]],
)
def test_format_takes_exactly_one_voter_choice(tmp_path, capsys, choice):
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "format",
                "--data-dir",
                str(tmp_path / "d"),
                f"--cluster-id={CLUSTER}",
                "--id",
                "1",
                *choice,
            ]
        )
    assert exited.value.code == 2
    assert not (tmp_path / "d").exists()


def test_format_refuses_an_id_that_is_not_among_the_initial_voters(tmp_path, capsys):
    code, _, err = _format_cli(
        capsys, "--data-dir", str(tmp_path / "d"), "--id", "4", "--initial-voters", "1@h:1,2@h:2"
    )
    assert code == 2 and "--no-initial-voters" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("held", ["meta.properties", "log", "quorum-state"])
def test_format_refuses_a_formatted_directory_or_one_holding_a_log_with_one_line(
    tmp_path, capsys, held
):
    d = tmp_path / "d"
    format_data_dir(d, cluster_id=CLUSTER, node_id=1, initial_voters=[1])
    (d / "log").mkdir()
    (d / "log" / "00000000000000000000.log").write_bytes(b"x")
    kept = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    for name in {"meta.properties", "log", "quorum-state"} - {held}:
        path = d / name
        if path.is_dir():
            (path / "00000000000000000000.log").unlink()
        else:
            path.unlink()
    code, _, err = _format_cli(capsys, "--data-dir", str(d), "--id", "1", "--standalone")
    assert code == 1 and held in err and len(err.splitlines()) == 1
    for name, data in kept.items():  # nothing rewritten
        if (d / name).exists():
            assert (d / name).read_bytes() == data


def test_format_takes_an_empty_directory_a_new_disk_mounted_there(tmp_path, capsys):
    d = tmp_path / "d"
    (d / "lost+found").mkdir(parents=True)
    assert _format_cli(capsys, "--data-dir", str(d), "--id", "1", "--standalone")[0] == 0


@pytest.mark.unformatted
def test_a_node_refuses_an_unformatted_directory_saying_how_to_format_it(tmp_path):
    cfg = _config(tmp_path / "node-1")
    with pytest.raises(RaftcoreError) as refused:
        _start(cfg)
    line = str(refused.value)
    assert "\n" not in line and "not formatted" in line
    assert "raftcore format" in line and "--initial-voters" in line
    assert "--no-initial-voters" in line
    assert not cfg.data_dir.exists()  # nothing written


@pytest.mark.unformatted
@pytest.mark.parametrize("kept", ["log", "quorum-state"])
def test_a_node_whose_meta_properties_is_lost_refuses_to_start_and_never_formats_itself(
    tmp_path, kept
):
    """Formatted once: a new meta.properties would make it another replica silently (an
    observer in the place of a voter): the operator restores the file or formats anew."""
    cfg = _config(tmp_path / "node-1")
    format_data_dir(cfg.data_dir, cluster_id=CLUSTER, node_id=1, initial_voters=[1])
    _start(cfg)
    if kept == "log":
        (cfg.data_dir / "quorum-state").unlink()
    (cfg.data_dir / META_PROPERTIES).unlink()
    with pytest.raises(RaftcoreError) as refused:
        _start(cfg)
    line = str(refused.value)
    assert "\n" not in line and "meta.properties is missing" in line and kept in line
    assert "--no-initial-voters" in line
    assert not (cfg.data_dir / META_PROPERTIES).exists()


@pytest.mark.unformatted
def test_a_formatted_node_that_lost_its_quorum_state_refuses_to_start_with_an_empty_log(tmp_path):
    cfg = _config(tmp_path / "node-1", voters=(1, 2, 3))
    format_data_dir(cfg.data_dir, cluster_id=CLUSTER, node_id=1, initial_voters=[1, 2, 3])
    (cfg.data_dir / "quorum-state").unlink()
    with pytest.raises(LostQuorumStateError, match="log is empty"):
        _start(cfg)


@pytest.mark.unformatted
def test_a_node_started_with_other_voters_than_it_was_formatted_with_refuses(tmp_path):
    cfg = _config(tmp_path / "node-1", voters=(1, 2, 3))
    format_data_dir(cfg.data_dir, cluster_id=CLUSTER, node_id=1, initial_voters=[1])
    with pytest.raises(RaftcoreError, match=r"initial voters \[1\].*voters \[1, 2, 3\]"):
        _start(cfg)


@pytest.mark.slow
@pytest.mark.unformatted
def test_a_node_formatted_to_join_and_started_with_voters_is_an_observer(tmp_path):
    cfg = _config(tmp_path / "node-1")  # alone in --voters: it would elect itself at once
    format_data_dir(cfg.data_dir, cluster_id=CLUSTER, node_id=1, initial_voters=None)

    async def run() -> None:
        node = RaftNode(cfg)
        await node.start()
        try:
            await asyncio.sleep(1.5)  # five election timeouts: no election, no leader
            assert node.core is not None
            assert node.core.quorum.is_observer and not node.core.quorum.is_leader()
            assert node.core.quorum.epoch == 0
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(run(), 30))


@pytest.mark.unformatted
def test_a_directory_of_a_release_before_formatting_starts_as_before(tmp_path):
    """Upgrade in place: meta.properties without initial.voters (nor a directory id) and a
    quorum-state: the node starts, a voter of its --voters, and elects itself."""
    cfg = _config(tmp_path / "node-1")
    cfg.data_dir.mkdir()
    (cfg.data_dir / META_PROPERTIES).write_text(f"version=1\ncluster.id={CLUSTER}\nnode.id=1\n")
    (cfg.data_dir / "quorum-state").write_text(
        f'{{"clusterId":"{CLUSTER}","leaderId":1,"leaderEpoch":3,"votedId":-1,"data_version":1}}\n'
    )

    async def run() -> None:
        node = RaftNode(cfg)
        await node.start()
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while not (node.core is not None and node.core.quorum.is_leader()):
                assert asyncio.get_running_loop().time() < deadline, "no leader"
                await asyncio.sleep(0.05)
            assert node.core.quorum.epoch > 3
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(run(), 30))
    assert check_meta_properties(cfg).initial_voters is None
