"""A node process's resident memory under connection attacks (docs/security.md, "Bounds"),
measured from /proc/<pid>/status: RssAnon, the anonymous part of VmRSS (the log's mmap is
file-backed: a fetch touches it without costing the heap anything). One ``raftcore node``
process per test, on loopback, ended by its pid. The attacks themselves are in
connection_attacks.py (also a script: the figures in the docs)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from cluster_helpers import FAST, consume_all, produce, run, running_cluster
from connection_attacks import (
    close_all,
    count_closed,
    fill_log,
    memory_kib,
    non_reading_fetch,
    partial_frames,
)

from raftcore.client.connection import Connection
from raftcore.node.local_cluster import LocalCluster
from raftcore.protocol.api import ApiKey, request_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MIB = 1 << 20


@pytest.fixture
def node_process(tmp_path, request):  # type: ignore[no-untyped-def]
    """A single-voter cluster; ``request.param``: (node arguments, TLS or not)."""
    args, use_tls = getattr(request, "param", ([], False))
    tls_dir = None
    if use_tls:
        from raftcore.security.certs import make_certs

        tls_dir = make_certs(tmp_path / "tls", [1], clients=["test"]).directory

    def ten_records(c: LocalCluster) -> None:
        run(produce(c.bootstrap, 0, 10, security=c.client_security("test")))

    directory = tmp_path / "cluster"
    with running_cluster(
        directory, 1, node_args=FAST + args, tls_dir=tls_dir, ready=ten_records
    ) as cluster:
        yield cluster


def anon_mib(pid: int) -> float:
    return memory_kib(pid)["RssAnon"] / 1024


def address(cluster: LocalCluster) -> tuple[str, int]:
    host, port = cluster.endpoint(1).rsplit(":", 1)
    return host, int(port)


async def api_versions(cluster: LocalCluster) -> None:
    host, port = address(cluster)
    conn = await Connection.open(host, port, timeout_s=5)
    try:
        cls = request_spec(ApiKey.API_VERSIONS).cls
        await conn.request(ApiKey.API_VERSIONS, 3, cls(), timeout_s=5)
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "node_process", [(["--queued-max-request-bytes", str(32 * MIB)], False)], indirect=True
)
def test_partial_frames_held_by_many_connections_take_no_more_than_the_request_budget(
    node_process,
):
    """queued.max.request.bytes (32 MiB here): 40 connections each announce 8 MiB and send
    6 MiB of it, then wait. The frames that started while the budget had room are held (at
    most the budget plus one frame); the others wait, their connections not read, and the
    node serves other clients meanwhile. (Before, the node held all 240 MiB.)"""
    cluster = node_process
    pid = cluster.pid(1)
    host, port = address(cluster)

    async def main() -> tuple[float, float, float, int]:
        before = anon_mib(pid)
        conns = await partial_frames(host, port, 40, 8 * MIB, 6 * MIB, within_s=3.0)
        await asyncio.sleep(0.5)
        during = anon_mib(pid)
        await api_versions(cluster)  # the node keeps serving
        await produce(cluster.bootstrap, 10, 100)
        assert len(await consume_all(cluster.bootstrap, 110, timeout_s=10)) == 110
        closed = await count_closed(conns)
        await close_all(conns)
        await asyncio.sleep(1.0)
        return before, during, anon_mib(pid), closed

    before, during, after, closed = run(main())
    print(f"RssAnon {before:.0f} MiB -> {during:.0f} with the frames held -> {after:.0f} after")
    assert closed == 0, "the waiting connections are left open, not closed"
    assert during - before < 32 + 8 + 16, f"{during - before:.0f} MiB held for partial frames"
    # (frames under 32 MiB may come from the heap, which keeps a little of what was freed)
    assert after - before < 24, f"{after - before:.0f} MiB still held after the clients left"


def test_the_memory_of_a_closed_connections_frames_comes_back_at_once(node_process):
    """Five connections each send 40 MiB of a 50 MiB frame, then hang up: a second later the
    node's memory is back (before, the frames' buffers were in reference cycles that only the
    cyclic garbage collector freed, and 200 MiB stayed resident after the clients left)."""
    cluster = node_process
    pid = cluster.pid(1)
    host, port = address(cluster)

    async def main() -> tuple[float, float, float]:
        before = anon_mib(pid)
        conns = await partial_frames(host, port, 5, 50 * MIB, 40 * MIB, within_s=10.0)
        await asyncio.sleep(0.3)
        during = anon_mib(pid)
        await close_all(conns)
        await asyncio.sleep(1.0)
        return before, during, anon_mib(pid)

    before, during, after = run(main())
    print(f"RssAnon {before:.0f} MiB -> {during:.0f} with the frames held -> {after:.0f} after")
    assert during - before > 150, "the frames were not even held (the attack did not work)"
    assert after - before < 16, f"{after - before:.0f} MiB still held after the clients left"


@pytest.mark.parametrize("node_process", [([], True)], indirect=True)
def test_tls_clients_that_do_not_read_large_fetch_answers_cost_the_node_about_a_piece_each(
    node_process,
):
    """Four consumers over TLS each ask for 2 GiB (MaxBytes and PartitionMaxBytes 2^31-1) and
    read nothing: each answer is capped at 55 MiB (fetch.max.bytes), and the node holds about
    a piece of each plus the transports' high-water marks. (Before, an answer was as large as
    the segment, and the TLS layer encrypted it whole into its buffer and copied that into the
    socket transport's: a request over a 292 MiB segment raised the node's memory by 1.16 GiB,
    four clients by 2.6-3.2 GiB.)"""
    cluster = node_process
    pid = cluster.pid(1)
    host, port = address(cluster)
    security = cluster.client_security("test")
    from raftcore.security.tls import client_context

    tls = client_context(security)
    tls.check_hostname = False
    topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"raftcore:{cluster.cluster_id}:raftcore").bytes

    async def main() -> tuple[float, float, float]:
        await fill_log(cluster.bootstrap, 60, security)
        await asyncio.sleep(0.5)
        before = anon_mib(pid)
        conns = [
            await non_reading_fetch(host, port, topic_id, (1 << 31) - 1, tls=tls) for _ in range(4)
        ]
        await asyncio.sleep(2.0)
        during = anon_mib(pid)
        await close_all(conns)
        await asyncio.sleep(0.5)
        await api_versions_tls(cluster)
        return before, during, anon_mib(pid)

    before, during, after = run(main())
    print(f"RssAnon {before:.0f} MiB -> {during:.0f} while not read -> {after:.0f} after")
    assert during - before < 24, f"{during - before:.0f} MiB held for four unread answers"


async def api_versions_tls(cluster: LocalCluster) -> None:
    from raftcore.client import describe_quorum

    info = await describe_quorum(
        cluster.bootstrap, timeout_s=10, security=cluster.client_security("test")
    )
    assert info.leader_id == 1
