"""Three-node clusters on loopback, side by side in one run: raftcore (three node processes,
``--flush always``: every append fsynced before it counts; the project's own idempotent
producer in this process, acks=all) against PySyncObj (three node processes, the workload
inside the leader's process, its log in memory).

Workload: 100-byte records sent in batches of 1,000 and of 10,000 records (one ``send()`` or
one PySyncObj command each); committed records per second and MB/s (of record values), and the
commit latency of each batch from ``send()`` to its acknowledgement (p50/p99, in
``extra_info``). Targets (issue 13): raftcore >= 2,000,000 records/s and >= 7x PySyncObj.

raftcore's producer keeps a sliding window of ``IN_FLIGHT`` (16) requests unanswered and packs
queued sends into requests of up to 1 MiB (raftcore.client.producer); the benchmark keeps
about 4 MiB of sends queued or in flight (``_outstanding``), so a batch's latency includes its
wait in the producer's queue. PySyncObj runs in its best batched mode (one command per batch,
appendEntriesUseBatch, 4 MiB buffers, a 1 ms tick and append period) with ``PEER_IN_FLIGHT``
commands in flight.
"""

from __future__ import annotations

import asyncio

import pytest
from bench_helpers import NODE_BUILDS, node_env, percentiles, send_window
from peers.pysyncobj_cluster import PySyncObjCluster

from raftcore.client import Producer
from raftcore.client.producer import MAX_IN_FLIGHT
from raftcore.node.local_cluster import LocalCluster
from raftcore.security import ClientSecurity
from raftcore.security.certs import make_certs

RECORD_BYTES = 100
BATCHES = [1000, 10_000]
IN_FLIGHT = MAX_IN_FLIGHT  # requests; raftcore nodes remember 16 batches per producer
MAX_REQUEST_BYTES = 1 << 20
OUTSTANDING_BYTES = 4 << 20
PEER_IN_FLIGHT = 5  # PySyncObj commands in flight
GROUP = "3-node cluster, --flush always: commit 100-byte records in batches of {}"


def _record_stats(benchmark, records: int, runs: list[tuple[float, list[float]]]) -> None:
    best = min(seconds for seconds, _ in runs)
    latencies = [lat for _, lats in runs for lat in lats]
    benchmark.extra_info.update(
        {
            "records": records,
            "records_per_s": round(records / best),
            "mb_per_s": round(records * RECORD_BYTES / best / 1e6, 1),
            **percentiles(latencies),
        }
    )


def _outstanding(batch: int) -> int:
    """Sends kept queued or in flight: about ``OUTSTANDING_BYTES`` of records. More only
    lengthens the queue (and the latency) without more records/s (a trial on a busy 2-core
    machine: batches of 1,000 gave ~1.0M/s with 48 outstanding, ~0.9M/s with 144)."""
    return max(2, OUTSTANDING_BYTES // (batch * RECORD_BYTES))


# ---- raftcore --------------------------------------------------------------------------------


async def _raftcore_run(
    bootstrap: list[str], records: int, batch: int, security: ClientSecurity | None = None
) -> tuple[float, list]:
    payload = [(None, bytes([n % 251]) * RECORD_BYTES) for n in range(batch)]
    latencies: list[float] = []
    outstanding = _outstanding(batch)
    async with Producer(
        bootstrap,
        max_in_flight=IN_FLIGHT,
        max_request_bytes=MAX_REQUEST_BYTES,
        security=security,
    ) as producer:
        seconds = await send_window(producer, payload, records, outstanding, latencies)
        return seconds, latencies


@pytest.mark.parametrize(
    ("batch", "transport"),
    [
        (1000, "plaintext"),
        (10_000, "plaintext"),
        (1000, "tls"),
        (10_000, "tls"),
        (1000, "uvloop"),
        (10_000, "uvloop"),
    ],
)
@pytest.mark.parametrize("build", NODE_BUILDS)
def test_raftcore_cluster_commits(benchmark, tmp_path, scale, batch, transport, build):
    """``tls``: every connection (client to leader, leader to followers) is mutual TLS with
    EC P-256 certificates from raftcore certs (docs/security.md); the cost of TLS is the ratio
    of the two (batches of 1,000). ``uvloop``: plaintext, the nodes on uvloop's event loop
    (``raftcore node --event-loop uvloop``); skipped without the uvloop package."""
    if transport == "uvloop":
        pytest.importorskip("uvloop", reason="--event-loop uvloop needs: pip install uvloop")
    benchmark.group = GROUP.format(batch)
    records = max(batch, int(2_000_000 * scale))
    runs: list[tuple[float, list[float]]] = []
    tls_dir = None
    if transport == "tls":
        tls_dir = tmp_path / "tls"
        make_certs(tls_dir, [1, 2, 3], clients=["bench"])
    node_args = ["--flush", "always"]
    if transport == "uvloop":
        node_args += ["--event-loop", "uvloop"]
    with LocalCluster(
        tmp_path / "raftcore", 3, tls_dir=tls_dir, node_args=node_args, env=node_env(build)
    ) as cluster:
        cluster.start()
        security = cluster.client_security("bench" if tls_dir else None)
        # warm up: leader, producer id
        asyncio.run(_raftcore_run(cluster.bootstrap, batch, batch, security))

        def once():
            runs.append(asyncio.run(_raftcore_run(cluster.bootstrap, records, batch, security)))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
        cluster.stop_all()
    _record_stats(benchmark, records, runs)


# ---- PySyncObj ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", BATCHES)
def test_pysyncobj_cluster_commits(benchmark, scale, batch):
    benchmark.group = GROUP.format(batch)
    records = max(batch, int(2_000_000 * scale))
    runs: list[tuple[float, list[float]]] = []
    peers = PySyncObjCluster()
    try:
        leader = peers.leader()
        command = {
            "cmd": "run",
            "records": records,
            "batch": batch,
            "size": RECORD_BYTES,
            "in_flight": PEER_IN_FLIGHT,
        }
        peers.ask(leader, {**command, "records": batch})  # warm up

        def once():
            reply = peers.ask(leader, command)
            assert not reply["errors"], reply["errors"]
            runs.append((reply["seconds"], reply["latencies_ms"]))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
    finally:
        peers.close()
    _record_stats(benchmark, records, runs)
