"""Three-node clusters on loopback, side by side in one run: raftcore (three node processes,
the producer in this process, acks=all, every append fsynced) against PySyncObj (three node
processes, the workload inside the leader's process, its log in memory).

Workload: 100-byte records in batches of 1,000; committed records per second, and the commit
latency of each batch (p50/p99, in ``extra_info``). Target: raftcore >= 20x PySyncObj.

PySyncObj runs in its best batched mode (one command per batch, appendEntriesUseBatch, 4 MiB
buffers, a 1 ms tick and append period); raftcore's producer keeps up to ``IN_FLIGHT`` batches
unanswered; PySyncObj gets the same number of commands in flight.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftcore.client import Producer
from raftcore.node.local_cluster import LocalCluster, free_ports
from raftcore.security import ClientSecurity
from raftcore.security.certs import make_certs

RECORD_BYTES = 100
BATCH = 1000
IN_FLIGHT = 5
PEER = Path(__file__).parent / "peers" / "pysyncobj_node.py"


def _percentiles(latencies: list[float]) -> dict[str, float]:
    data = sorted(latencies)
    if not data:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {
        "p50_ms": round(data[len(data) // 2], 2),
        "p99_ms": round(data[min(len(data) - 1, int(len(data) * 0.99))], 2),
    }


def _record_stats(benchmark, records: int, runs: list[tuple[float, list[float]]]) -> None:
    best = min(seconds for seconds, _ in runs)
    latencies = [lat for _, lats in runs for lat in lats]
    benchmark.extra_info.update(
        {
            "records": records,
            "records_per_s": round(records / best),
            **_percentiles(latencies),
        }
    )


# ---- raftcore --------------------------------------------------------------------------------


async def _raftcore_run(
    bootstrap: list[str], records: int, first: int, security: ClientSecurity | None = None
) -> tuple[float, list]:
    payload = [(None, bytes([n % 251]) * RECORD_BYTES) for n in range(BATCH)]
    latencies: list[float] = []
    async with Producer(bootstrap, max_in_flight=IN_FLIGHT, security=security) as producer:
        in_flight: set[asyncio.Future] = set()
        started = time.perf_counter()
        sent = 0
        while sent < records or in_flight:
            while sent < records and len(in_flight) < IN_FLIGHT:
                count = min(BATCH, records - sent)
                fut = producer.send_nowait(payload[:count])
                t = time.perf_counter()
                fut.add_done_callback(
                    lambda f, t=t: latencies.append((time.perf_counter() - t) * 1000)
                )
                in_flight.add(fut)
                sent += count
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                fut.result()
        return time.perf_counter() - started, latencies


@pytest.mark.benchmark(group="3-node cluster: commit 100-byte records in batches of 1000")
@pytest.mark.parametrize("transport", ["plaintext", "tls"])
def test_raftcore_cluster_commits(benchmark, tmp_path, scale, transport):
    """``tls``: every connection (client to leader, leader to followers) is mutual TLS with
    EC P-256 certificates from raftcore certs (docs/security.md); the cost of TLS is the ratio
    of the two."""
    records = max(BATCH, int(1_000_000 * scale))
    runs: list[tuple[float, list[float]]] = []
    tls_dir = None
    if transport == "tls":
        tls_dir = tmp_path / "tls"
        make_certs(tls_dir, [1, 2, 3], clients=["bench"])
    with LocalCluster(tmp_path / "raftcore", 3, tls_dir=tls_dir) as cluster:
        cluster.start()
        security = cluster.client_security("bench" if tls_dir else None)
        # warm up: leader, producer id
        asyncio.run(_raftcore_run(cluster.bootstrap, BATCH, 0, security))

        def once():
            runs.append(asyncio.run(_raftcore_run(cluster.bootstrap, records, 0, security)))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
        cluster.stop_all()
    _record_stats(benchmark, records, runs)


# ---- PySyncObj ---------------------------------------------------------------------------------


class _PySyncObjCluster:
    def __init__(self, period_s: float = 0.001) -> None:
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(PEER), a, ",".join(x for x in addrs if x != a), str(period_s)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for a in addrs
        ]

    def ask(self, proc: subprocess.Popen, msg: dict) -> dict:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    def leader(self, timeout_s: float = 30) -> subprocess.Popen:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self.procs:
                status = self.ask(proc, {"cmd": "status"})
                if status["leader"] and status["ready"]:
                    return proc
            time.sleep(0.05)
        raise TimeoutError("PySyncObj elected no leader")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)


@pytest.mark.benchmark(group="3-node cluster: commit 100-byte records in batches of 1000")
def test_pysyncobj_cluster_commits(benchmark, scale):
    records = max(BATCH, int(1_000_000 * scale))
    runs: list[tuple[float, list[float]]] = []
    peers = _PySyncObjCluster()
    try:
        leader = peers.leader()
        command = {
            "cmd": "run",
            "records": records,
            "batch": BATCH,
            "size": RECORD_BYTES,
            "in_flight": IN_FLIGHT,
        }
        peers.ask(leader, {**command, "records": BATCH})  # warm up

        def once():
            reply = peers.ask(leader, command)
            assert not reply["errors"], reply["errors"]
            runs.append((reply["seconds"], reply["latencies_ms"]))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
    finally:
        peers.close()
    _record_stats(benchmark, records, runs)
