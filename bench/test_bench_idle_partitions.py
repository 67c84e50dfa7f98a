"""What an idle partition costs: three node processes on loopback hosting N partitions of one
topic (``--partitions N``, every node a replica of each, about N/3 leaders each once the auto
leader rebalance has spread them), nothing written, measured over a window after the start
settles.

Per node: CPU (user + system, from ``/proc/<pid>/stat``) as a percentage of one core over the
window, resident memory, open file descriptors and threads; ``extra_info`` holds each, and
the memory per replica (the node's resident memory above the one-partition run's, divided by
its further partitions). The figure of the topics issue: at 1,000 partitions, at most 5% of a core
and 256 KiB per idle replica (docs/benchmarks.md has the measured figures and why).

Smoke mode runs 1 and 8 partitions over a 2-second window (the figures mean little); a real
run 1, 100 and 1,000 over 60 seconds (the 1,000-partition start takes minutes on 2 cores
today)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from raftcore.node.local_cluster import LocalCluster

SETTLE_S = 5.0  # after every partition has a leader: the first fetches and rebalance (smoke: 1)
_ONE_PARTITION_RSS_KIB: list[int] = []  # the 1-partition run's, when it ran first


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _counts(pid: int) -> tuple[int, int]:
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.parametrize("partitions", [1, 8, 100, 1000])
def test_idle_partitions_cost_per_node(benchmark, tmp_path, scale, partitions):
    smoke = benchmark.disabled
    if (smoke and partitions > 8) or (not smoke and partitions == 8):
        pytest.skip("smoke mode runs 1 and 8 partitions; a real run 1, 100 and 1,000")
    window_s = 2.0 if smoke else 60.0
    benchmark.group = "idle partitions: 3 nodes, every node a replica of each, nothing written"
    measured: dict[str, object] = {}
    with LocalCluster(tmp_path / "raftcore", 3, partitions=partitions) as cluster:
        started = time.monotonic()
        cluster.start(timeout_s=60 + partitions * 0.5)
        start_s = time.monotonic() - started
        time.sleep(1.0 if smoke else SETTLE_S)
        pids = [cluster.pid(node_id) for node_id in (1, 2, 3)]

        def window() -> None:
            before = [_cpu_s(pid) for pid in pids]
            began = time.monotonic()
            time.sleep(window_s)
            spent = time.monotonic() - began
            after = [_cpu_s(pid) for pid in pids]
            measured["cpu_percent"] = [
                round(100 * (b - a) / spent, 1) for a, b in zip(before, after, strict=True)
            ]

        benchmark.pedantic(window, rounds=1, iterations=1)
        rss = [_status_kib(pid, "VmRSS") for pid in pids]
        counts = [_counts(pid) for pid in pids]
        cluster.stop_all()
    benchmark.extra_info.update(
        {
            "partitions": partitions,
            "start_s": round(start_s, 1),
            "window_s": window_s,
            **measured,
            "rss_kib": rss,
            "fds": [fds for fds, _ in counts],
            "threads": [threads for _, threads in counts],
        }
    )
    if partitions == 1:
        _ONE_PARTITION_RSS_KIB[:] = [max(rss)]
    elif _ONE_PARTITION_RSS_KIB:  # the memory per replica: above a one-partition node's
        base = _ONE_PARTITION_RSS_KIB[0]
        benchmark.extra_info["kib_per_replica"] = round((max(rss) - base) / (partitions - 1))
