"""Batched produce throughput of a three-node cluster with one partition against three
partitions whose leaders are three different nodes, side by side in one run.

Both clusters are three node processes on loopback, ``--flush always``, with a one-second
leader imbalance check; the three-partition run first waits until the auto leader rebalance
has spread the leaders (partition p on voter p + 1, as each node's metadata says). Workload:
100-byte records in sends of 1,000, the project's own idempotent producer (acks=all) in this
process, one per partition, each with about 4 MiB of sends queued or in flight
(bench_helpers.send_window); records per second over the whole topic (``records_per_s`` in
``extra_info``) and each send's commit latency (p50/p99). The ratio of the two is the figure
(target: at least 1.3x). All the producers share this process's event loop, and every process
shares the machine's cores: on a machine with fewer cores than processes the ratio is bounded
by the CPU, not by the leaders.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from bench_helpers import percentiles, send_window

from raftcore.client import Producer
from raftcore.client.producer import MAX_IN_FLIGHT
from raftcore.node.local_cluster import LocalCluster

RECORD_BYTES = 100
BATCH = 1000
OUTSTANDING = max(2, (4 << 20) // (BATCH * RECORD_BYTES))
NODE_ARGS = ["--flush", "always", "--leader-imbalance-check-interval-seconds", "1"]
GROUP = "3 nodes, --flush always: 100-byte records in sends of 1,000 over {} partition(s)"


def _spread_leaders(bootstrap: list[str], partitions: int, timeout_s: float = 30.0) -> None:
    """Wait until partition p is led by node p + 1 (the preferred leaders), as Metadata says.

    One partition is never rebalanced (the node moves no leadership when it has one group),
    so there any elected leader will do.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})
    want = {p: p + 1 for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        topic = admin.list_topics("raftcore", timeout=5).topics["raftcore"]
        seen = {p: meta.leader for p, meta in topic.partitions.items()}
        if seen == want or (partitions == 1 and seen.get(0, -1) >= 1):
            return
        time.sleep(0.2)
    raise AssertionError(f"leaders not spread within {timeout_s} s: {seen}, want {want}")


async def _produce(bootstrap: list[str], partitions: int, records: int) -> tuple[float, list]:
    """``records`` in all, split evenly, one producer per partition sending at once."""
    payload = [(None, bytes([n % 251]) * RECORD_BYTES) for n in range(BATCH)]
    latencies: list[float] = []
    producers = [
        Producer(bootstrap, partition=p, max_in_flight=MAX_IN_FLIGHT) for p in range(partitions)
    ]
    for producer in producers:
        await producer.start()
    try:
        each = records // partitions
        started = time.perf_counter()
        await asyncio.gather(
            *(send_window(pr, payload, each, OUTSTANDING, latencies) for pr in producers)
        )
        return time.perf_counter() - started, latencies
    finally:
        for producer in producers:
            await producer.close()


@pytest.mark.parametrize("partitions", [1, 3])
def test_partitions_spread_over_three_leaders_commit(benchmark, tmp_path, scale, partitions):
    pytest.importorskip("confluent_kafka")
    benchmark.group = GROUP.format("1 or 3")
    records = max(BATCH * partitions, int(3_000_000 * scale)) // (BATCH * partitions)
    records *= BATCH * partitions  # whole sends on every partition
    runs: list[tuple[float, list]] = []
    with LocalCluster(
        tmp_path / "raftcore", 3, partitions=partitions, node_args=NODE_ARGS
    ) as cluster:
        cluster.start()
        _spread_leaders(cluster.bootstrap, partitions)
        asyncio.run(_produce(cluster.bootstrap, partitions, BATCH * partitions))  # warm up

        def once():
            runs.append(asyncio.run(_produce(cluster.bootstrap, partitions, records)))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
        cluster.stop_all()
    best = min(seconds for seconds, _ in runs)
    benchmark.extra_info.update(
        {
            "partitions": partitions,
            "records": records,
            "records_per_s": round(records / best),
            "mb_per_s": round(records * RECORD_BYTES / best / 1e6, 1),
            **percentiles([lat for _, lats in runs for lat in lats]),
        }
    )
