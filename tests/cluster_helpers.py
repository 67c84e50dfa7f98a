"""Helpers for tests that run node processes (LocalCluster) and talk to them with our clients.
Every wait has a deadline; every process is ended by its pid when the cluster closes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from raftcore.client import Consumer, Producer, describe_quorum
from raftcore.client.admin import QuorumInfo
from raftcore.errors import RaftcoreError
from raftcore.log import SegmentedLog
from raftcore.node.local_cluster import LocalCluster
from raftcore.security.config import ClientSecurity

# Short timeouts keep failovers fast in tests; the defaults are Kafka's.
FAST = ["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000"]


def key(n: int) -> bytes:
    return b"%08d" % n


def run(coro, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def produce(
    bootstrap: list[str],
    first: int,
    count: int,
    batch: int = 100,
    security: ClientSecurity | None = None,
) -> list[int]:
    """Write records key(first)..key(first+count-1); their offsets."""
    offsets: list[int] = []
    async with Producer(bootstrap, request_timeout_ms=5000, security=security) as producer:
        futures = []
        for start in range(first, first + count, batch):
            recs = [(key(n), b"v" * 20) for n in range(start, min(first + count, start + batch))]
            futures.append(producer.send_nowait(recs))
        for fut in futures:
            lo, hi = await fut
            offsets.extend(range(lo, hi + 1))
    return offsets


async def consume_all(bootstrap: list[str], expected: int, timeout_s: float = 30.0) -> list[bytes]:
    """Keys of the committed records from the start, until ``expected`` arrived."""
    keys: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    async with Consumer(bootstrap, start="earliest", max_wait_ms=200) as consumer:
        while len(keys) < expected:
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed {len(keys)} of {expected} records in {timeout_s} s")
            keys.extend(r.key for r in await consumer.poll())
    return keys


async def quorum(cluster: LocalCluster, timeout_s: float = 20.0) -> QuorumInfo:
    """DescribeQuorum, asked over TLS with the client certificate ``client-test`` when the
    cluster runs TLS (``raftcore certs --clients test``)."""
    security = cluster.client_security(None if cluster.tls_dir is None else "test")
    return await describe_quorum(cluster.bootstrap, timeout_s=timeout_s, security=security)


async def wait_caught_up(
    cluster: LocalCluster, node_ids: list[int], timeout_s: float = 20.0
) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        info = await quorum(cluster)
        ends = {v.replica_id: v.log_end_offset for v in info.voters}
        if all(ends.get(i, -1) >= info.high_watermark for i in node_ids):
            return info.high_watermark
        if time.monotonic() > deadline:
            raise AssertionError(f"not caught up to {info.high_watermark}: {ends}")
        await asyncio.sleep(0.05)


def data_keys(directory: Path) -> list[bytes]:
    """The keys of the data records in a node's log, read from disk (node stopped)."""
    keys: list[bytes] = []
    with SegmentedLog.open(directory / "log") as log:
        for b in log.batches():
            if not b.is_control:
                keys.extend(r.key for r in b.records())
    return keys


def wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RaftcoreError(f"timed out waiting for {what}")
        time.sleep(0.02)
