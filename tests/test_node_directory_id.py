"""Replica identity on disk (KIP-853): a data directory gets a random directory id when it is
first formatted, keeps it, and a directory written before directory ids existed gets one on its
first start with this release; the node names its replica by it."""

from __future__ import annotations

import asyncio
import os

import pytest

from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import (
    META_PROPERTIES,
    check_meta_properties,
    format_data_dir,
    read_directory_id,
)
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import QuorumConfig
from raftcore.raft.voters import VoterEndpoint, directory_id_text, parse_directory_id

pytestmark = pytest.mark.timeout(60)


def _config(data_dir, node_id=1, port=9091):  # type: ignore[no-untyped-def]
    return NodeConfig(
        node_id=node_id,
        voters={node_id: Endpoint("127.0.0.1", port)},
        data_dir=data_dir,
        cluster_id="dir-id-cluster",
        quorum=QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=600),
    )


def _format(data_dir) -> bytes:  # type: ignore[no-untyped-def]
    return format_data_dir(data_dir, cluster_id="dir-id-cluster", node_id=1, initial_voters=[1])


def _props(data_dir) -> dict[str, str]:  # type: ignore[no-untyped-def]
    lines = (data_dir / META_PROPERTIES).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_a_new_data_directory_is_formatted_with_a_random_directory_id(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    id_a = _format(first)
    id_b = _format(second)  # created
    assert len(id_a) == 16 and id_a != bytes(16)
    assert id_a != id_b  # drawn at random: a wiped disk is a new replica
    text = _props(first)["directory.id"]
    assert len(text) == 22 and "=" not in text  # Kafka's uuid text: base64url, no padding
    assert parse_directory_id(text) == id_a
    assert _props(first)["cluster.id"] == "dir-id-cluster" and _props(first)["node.id"] == "1"


def test_the_directory_id_is_kept_across_restarts(tmp_path):
    written = _format(tmp_path)
    assert check_meta_properties(_config(tmp_path)).directory_id == written
    before = (tmp_path / META_PROPERTIES).read_bytes()
    assert check_meta_properties(_config(tmp_path)).directory_id == written
    assert (tmp_path / META_PROPERTIES).read_bytes() == before  # not rewritten
    assert read_directory_id(tmp_path) == written


def test_a_meta_properties_written_before_directory_ids_gets_one_in_place(tmp_path):
    old = "version=1\ncluster.id=dir-id-cluster\nnode.id=1\n"
    (tmp_path / META_PROPERTIES).write_text(old)
    given = check_meta_properties(_config(tmp_path)).directory_id
    text = (tmp_path / META_PROPERTIES).read_text()
    assert text.startswith(old)  # the old lines as they were, the id added after them
    assert _props(tmp_path)["directory.id"] == directory_id_text(given)
    # atomically: no temporary left (beside the metadata group made at the same start)
    assert sorted(os.listdir(tmp_path)) == ["__cluster_metadata-0", META_PROPERTIES]
    assert check_meta_properties(_config(tmp_path)).directory_id == given  # and kept from then on


def test_a_meta_properties_without_a_final_newline_is_upgraded_line_by_line(tmp_path):
    (tmp_path / META_PROPERTIES).write_text("version=1\ncluster.id=dir-id-cluster\nnode.id=1")
    given = check_meta_properties(_config(tmp_path)).directory_id
    assert _props(tmp_path) == {
        "version": "1",
        "cluster.id": "dir-id-cluster",
        "node.id": "1",
        "directory.id": directory_id_text(given),
        "cluster.metadata": "1",  # the metadata group made at the same start (docs/topics.md)
    }


@pytest.mark.parametrize("bad", ["", "AAAAAAAAAAAAAAAAAAAAAA", "not-an-id", "x" * 30])
def test_a_directory_id_that_is_not_one_refuses_to_start_naming_the_file(tmp_path, bad):
    (tmp_path / META_PROPERTIES).write_text(
        f"version=1\ncluster.id=dir-id-cluster\nnode.id=1\ndirectory.id={bad}\n"
    )
    with pytest.raises(RaftcoreError, match=r"meta\.properties: directory\.id"):
        check_meta_properties(_config(tmp_path))


def test_the_node_names_its_replica_by_its_directory_id_and_advertised_endpoint(tmp_path):
    cfg = _config(tmp_path / "node", port=free_ports(1)[0])

    async def main():  # type: ignore[no-untyped-def]
        node = RaftNode(cfg)
        await node.start()
        try:
            core = node.core
            assert core is not None
            assert core.local_key.id == 1
            assert core.local_key.directory_id == read_directory_id(cfg.data_dir)
            assert core.endpoint == VoterEndpoint("PLAINTEXT", "127.0.0.1", cfg.listen.port)  # type: ignore[union-attr]
        finally:
            await node.stop()
        again = RaftNode(cfg)
        await again.start()
        try:
            assert again.core.local_key == core.local_key  # type: ignore[union-attr]
        finally:
            await again.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
