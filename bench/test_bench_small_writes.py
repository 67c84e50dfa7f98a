"""Small writes, side by side in one run: raftcore against a 3-member etcd cluster on loopback.

Workload (issue 13): one 100-byte record per request, acknowledged once committed (raftcore:
acks=all with every append fsynced, ``--flush always``; etcd: a put answers after a quorum
fsynced its WAL entry), with 1, 16, 256 and 1,024 concurrent writers. Writes per second over
a fixed number of writes, and the latency of each write (p50/p99 in ``extra_info``); one
benchmark group per writer count, and the etcd benchmark's ``extra_info`` has raftcore's
writes/s of the same count and ``raftcore_over_etcd`` (> 1: raftcore is faster).

The same client shape on both sides: every writer has its own TCP connection to the leader and
sends one request at a time, waiting for the answer before the next; the connections are opened
and warmed up (one write each) before the clock starts, and all writers run in this process's
event loop. raftcore: a writer is one :class:`raftcore.client.Producer` (idempotent, acks=-1)
sending 1-record batches. etcd: a writer is one HTTP/1.1 keep-alive connection to the gRPC
gateway (``POST /v3/kv/put``, JSON, a new key per write), see ``peers/etcd_cluster.py``.

etcd comes from the PATH (Debian: ``apt install etcd-server``); without it the etcd half skips,
saying so. Nothing is installed by the benchmark.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import pytest
from bench_helpers import NODE_BUILDS, node_env, percentiles
from peers.etcd_cluster import EtcdCluster, EtcdWriter, etcd_binary

from raftcore.client import Producer
from raftcore.node.local_cluster import LocalCluster

RECORD_BYTES = 100
WRITERS = [1, 16, 256, 1024]
# writes per round for each writer count: ~5-10 s a round at the rates
WRITES = {1: 3_000, 16: 16_000, 256: 40_000, 1024: 60_000}
ROUNDS = 3
# raftcore's figures by (event loop, writer count), for the ratios the etcd benchmark of the
# same count records
RAFTCORE: dict[tuple[str, int], dict] = {}

Write = Callable[[int], Awaitable[object]]


async def _drive(writes: list[Write], total: int, latencies: list[float]) -> float:
    """Every writer takes the next write number until ``total`` are done, one at a time;
    returns the wall-clock seconds for all of them."""
    counter = itertools.count()

    async def writer(write: Write) -> None:
        while (n := next(counter)) < total:
            t = time.perf_counter()
            await write(n)
            latencies.append((time.perf_counter() - t) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in writes))
    return time.perf_counter() - started


def _run_rounds(benchmark, loop, writes: list[Write], total: int) -> dict:
    who = "1 writer" if len(writes) == 1 else f"{len(writes)} writers"
    benchmark.group = f"small writes: 1 record per request, acks=all, {who}"
    runs: list[float] = []
    latencies: list[float] = []

    def once() -> None:
        runs.append(loop.run_until_complete(_drive(writes, total, latencies)))

    benchmark.pedantic(once, rounds=1 if benchmark.disabled else ROUNDS, iterations=1)
    assert len(latencies) == total * len(runs)
    best = min(runs)
    median = sorted(runs)[len(runs) // 2]
    benchmark.extra_info.update(
        {
            "writers": len(writes),
            "writes": total,
            "writes_per_s": round(total / median),
            "best_writes_per_s": round(total / best),
            **percentiles(latencies),
        }
    )
    return benchmark.extra_info


async def _close_all(connections: list) -> None:
    await asyncio.gather(*(c.close() for c in connections))


def _total(writers: int, scale: float) -> int:
    return max(2 * writers, int(WRITES[writers] * scale))


# ---- raftcore ---------------------------------------------------------------------------------


@pytest.fixture(
    scope="module",
    params=[(loop, build) for loop in ("asyncio", "uvloop") for build in NODE_BUILDS],
    ids=lambda p: p[0] if p[1] == "this" else f"{p[0]}-baseline",
)
def raftcore_cluster(request, tmp_path_factory):
    """The nodes on asyncio's event loop, then on uvloop's (``--event-loop uvloop``; skipped
    without the uvloop package); each also as the checkout RAFTCORE_BENCH_BASELINE names."""
    loop_name, build = request.param
    if loop_name == "uvloop":
        pytest.importorskip("uvloop", reason="--event-loop uvloop needs: pip install uvloop")
    # 1,024 writers are over 1,024 connections from one host (Kafka's default bounds: 256 from
    # one host; raftcore's: 768 in all)
    args = ["--event-loop", loop_name, "--max-connections", "4096"]
    args += ["--max-connections-per-ip", "4096"]
    with LocalCluster(
        tmp_path_factory.mktemp("raftcore"), 3, node_args=args, env=node_env(build)
    ) as cluster:
        cluster.start()
        cluster.event_loop = loop_name  # type: ignore[attr-defined]
        cluster.build = build  # type: ignore[attr-defined]
        yield cluster


@pytest.mark.parametrize("writers", WRITERS)
def test_raftcore_small_writes(benchmark, raftcore_cluster, scale, writers):
    loop_name = raftcore_cluster.event_loop
    value = b"r" * RECORD_BYTES
    loop = asyncio.new_event_loop()
    producers: list[Producer] = []
    try:

        async def open_all() -> None:
            for _ in range(writers):
                producers.append(Producer(raftcore_cluster.bootstrap, request_timeout_ms=30_000))
            for i in range(0, writers, 64):  # 64 at a time
                await asyncio.gather(*(p.start() for p in producers[i : i + 64]))
            await asyncio.gather(*(p.send([(None, value)]) for p in producers))  # warm up

        loop.run_until_complete(asyncio.wait_for(open_all(), 120))

        def make(producer: Producer) -> Write:
            async def write(n: int) -> object:
                return await producer.send([(None, value)])

            return write

        stats = _run_rounds(benchmark, loop, [make(p) for p in producers], _total(writers, scale))
        if raftcore_cluster.build == "this":  # the etcd ratios are this checkout's
            RAFTCORE[(loop_name, writers)] = stats
    finally:
        loop.run_until_complete(_close_all(producers))
        loop.close()


# ---- etcd ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory):
    if etcd_binary() is None:
        pytest.skip(
            "etcd is not on the PATH: install Debian's etcd-server (apt install etcd-server) "
            "to compare small writes with a 3-member etcd cluster"
        )
    with EtcdCluster(tmp_path_factory.mktemp("etcd")) as cluster:
        cluster.start()
        yield cluster


@pytest.mark.parametrize("writers", WRITERS)
def test_etcd_small_writes(benchmark, etcd_cluster, scale, writers):
    value = b"e" * RECORD_BYTES
    port = etcd_cluster.client_ports[etcd_cluster.leader_index()]
    loop = asyncio.new_event_loop()
    clients = [EtcdWriter(etcd_cluster.host, port) for _ in range(writers)]
    prefix = f"bench/{writers}/{time.monotonic_ns()}/".encode()
    try:

        async def open_all() -> None:
            await asyncio.gather(*(c.connect() for c in clients))
            await asyncio.gather(*(c.put(prefix + b"warm", value) for c in clients))

        loop.run_until_complete(asyncio.wait_for(open_all(), 120))

        def make(client: EtcdWriter) -> Write:
            async def write(n: int) -> object:
                return await client.put(b"%s%d" % (prefix, n), value)

            return write

        stats = _run_rounds(benchmark, loop, [make(c) for c in clients], _total(writers, scale))
        for loop_name in ("asyncio", "uvloop"):
            ours = RAFTCORE.get((loop_name, writers))
            if ours is not None:  # raftcore ran first in this session: the side-by-side ratio
                prefix = "raftcore" if loop_name == "asyncio" else "raftcore_uvloop"
                stats[f"{prefix}_writes_per_s"] = ours["writes_per_s"]
                ratio = ours["writes_per_s"] / stats["writes_per_s"]
                stats[f"{prefix}_over_etcd"] = round(ratio, 2)
    finally:
        loop.run_until_complete(_close_all(clients))
        loop.close()
