"""What the damage checks cost, each side by side with the same path without it, in one run.

- CRC-on-serve: a leader serving 64 MiB of its log (batches of 1,000 records of 100 bytes, as
  the cluster benchmark writes them) in fetch answers of 1 MiB (a consumer's
  ``max.partition.fetch.bytes``) and of 10 MiB (``replica.fetch.response.max.bytes``): each
  answer read with ``read_intact`` (header, CRC, offsets of every batch checked) against the
  plain ``log.read`` (zero-copy views, nothing checked). The fetch offsets are what a fetcher
  would send, worked out untimed.
- The listener's read (every node hands committed batches to its listener): the high
  watermark moving on one batch at a time over those 64 MiB, the listener reading 1 MiB from
  its next offset at each step and copying what it takes -- checked up to the high watermark
  (``read_intact(..., end_offset)``), against the plain read (which takes the whole 1 MiB),
  and against the check of the whole 1 MiB (what it cost before the check stopped at the
  mark: up to 1 MiB checked per step for ~126 KB taken).
- The scrubber's CPU: one unpaced scrub of the same 64 MiB as sealed segments
  (``scrub_segment``: ``pread`` and checks) against ``pread`` of the same files.
- The cluster: bench/test_bench_cluster.py's workload (3 nodes, ``--flush always``, 100-byte
  records in batches of 1,000, acks=all), 16 MiB segments, in three node configurations --
  unchecked (the nodes' ``read_intact`` replaced by the plain read, in these node processes
  only; scrubber off), checked (scrubber off), and checked with the scrubber at its default
  16 MiB/s starting a pass every second, so it reads sealed segments throughout the run
  (with the default interval of a day it is idle after its first pass).
"""

from __future__ import annotations

import asyncio
import os
import urllib.request

import pytest
from bench_helpers import filled_log
from test_bench_cluster import _raftcore_run, _record_stats

from raftcore.log import SegmentedLog
from raftcore.log.scrub import scrub_segment, sealed_segments
from raftcore.node.local_cluster import LocalCluster, free_ports
from raftcore.raft.damage import read_intact
from raftcore.raft.listener import LISTENER_READ_BYTES
from raftcore.records import scan_batches

SERVE_GROUP = "serve 64 MiB in fetch answers of {} MiB"
LISTENER_GROUP = "the listener follows the high watermark over 64 MiB, one batch a step"
SCRUB_GROUP = "scrub 64 MiB of sealed segments, unpaced"
CLUSTER_GROUP = "3-node cluster, --flush always, batches of 1,000: damage checks on and off"


@pytest.fixture(scope="module")
def written(request):
    """A log of 64 MiB (1 MiB in smoke mode) in 9 segments, all but the last sealed."""
    total = (1 if request.config.getoption("benchmark_disable") else 64) << 20
    with filled_log("damage", total, segments=8) as log:
        yield log


def fetch_offsets(log: SegmentedLog, max_bytes: int) -> list[int]:
    """The fetch offsets of a fetcher reading the whole log in answers of ``max_bytes``."""
    offsets, offset = [], 0
    while offset < log.end_offset:
        offsets.append(offset)
        scan = scan_batches(log.read(offset, max_bytes), check_crc=False)
        offset = int(scan.last_offsets[scan.count - 1]) + 1
    return offsets


def serve(read, log: SegmentedLog, offsets: list[int], max_bytes: int) -> int:
    served = 0
    for offset in offsets:
        data = read(log, offset, max_bytes)
        served += len(data)
    return served


def plain(log: SegmentedLog, offset: int, max_bytes: int):  # type: ignore[no-untyped-def]
    return log.read(offset, max_bytes)


def checked(log: SegmentedLog, offset: int, max_bytes: int):  # type: ignore[no-untyped-def]
    data, damage = read_intact(log, offset, max_bytes)
    assert damage is None
    return data


@pytest.mark.parametrize("mib", [1, 10])
@pytest.mark.parametrize("read", [checked, plain], ids=["read_intact", "plain-read"])
def test_serve(benchmark, written, mib, read):
    benchmark.group = SERVE_GROUP.format(mib)
    offsets = fetch_offsets(written, mib << 20)
    served = benchmark(serve, read, written, offsets, mib << 20)
    assert served == written.size_in_bytes
    benchmark.extra_info["mib"] = round(served / (1 << 20), 1)


def listener_steps(log: SegmentedLog) -> list[tuple[int, int]]:
    """(next offset, high watermark) of a listener at the log's end: the mark moves on one
    batch at a time (as in the cluster, where one produce of 1,000 records commits at once)."""
    ends: list[int] = []
    while (ends[-1] if ends else 0) < log.end_offset:
        scan = scan_batches(log.read(ends[-1] if ends else 0, 1 << 20), check_crc=False)
        ends += [int(last) + 1 for last in scan.last_offsets[: scan.count]]
    return list(zip([0, *ends[:-1]], ends, strict=True))


def follow(read, log: SegmentedLog, steps: list[tuple[int, int]]) -> int:
    """The listener's read at every step: 1 MiB from its next offset, copied."""
    copied = 0
    for offset, hw in steps:
        copied += len(bytes(read(log, offset, LISTENER_READ_BYTES, hw)))
    return copied


def plain_to_any_end(log: SegmentedLog, offset: int, max_bytes: int, hw: int):  # type: ignore[no-untyped-def]
    return log.read(offset, max_bytes)


def checked_to_the_high_watermark(log: SegmentedLog, offset: int, max_bytes: int, hw: int):  # type: ignore[no-untyped-def]
    data, damage = read_intact(log, offset, max_bytes, hw)
    assert damage is None
    return data


def checked_to_any_end(log: SegmentedLog, offset: int, max_bytes: int, hw: int):  # type: ignore[no-untyped-def]
    data, damage = read_intact(log, offset, max_bytes)
    assert damage is None
    return data


@pytest.mark.parametrize(
    "read",
    [checked_to_the_high_watermark, plain_to_any_end, checked_to_any_end],
    ids=["read_intact-to-hw", "plain-read", "read_intact-1MiB"],
)
def test_listener_follows(benchmark, written, read):
    benchmark.group = LISTENER_GROUP
    steps = listener_steps(written)
    assert steps[-1][1] == written.end_offset
    copied = benchmark(follow, read, written, steps)
    benchmark.extra_info["copied_mib"] = round(copied / (1 << 20), 1)


def pread_all(paths: list[tuple[str, int]]) -> int:
    total = 0
    for path, size in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while position < size:
                piece = os.pread(fd, min(1 << 20, size - position), position)
                position += len(piece)
        finally:
            os.close(fd)
        total += size
    return total


@pytest.mark.benchmark(group=SCRUB_GROUP)
def test_scrub_segments(benchmark, written):
    segments = sealed_segments(written)

    def scrub() -> int:
        for segment in segments:
            assert scrub_segment(segment) is None
        return sum(s.size for s in segments)

    assert benchmark(scrub) > 0


@pytest.mark.benchmark(group=SCRUB_GROUP)
def test_pread_segments(benchmark, written):
    paths = [(str(s.path), s.size) for s in sealed_segments(written)]
    assert benchmark(pread_all, paths) > 0


# ---- the cluster ------------------------------------------------------------------------------

# The node processes of the "unchecked" configuration run raftcore with read_intact replaced by
# the plain read (the function's code swapped, so every module that imported it sees it).
UNCHECKED = """
import runpy
import raftcore.raft.damage as damage

def _plain(log, offset, max_bytes, end_offset=None):
    return log.read(offset, max_bytes), None

damage.read_intact.__code__ = _plain.__code__
runpy.run_module("raftcore", run_name="__main__", alter_sys=True)
"""


class _UncheckedCluster(LocalCluster):
    def command(self, node_id: int, cluster_id: str | None = None) -> list[str]:
        cmd = super().command(node_id, cluster_id)
        at = cmd.index("-m")
        return [cmd[0], "-c", UNCHECKED, *cmd[at + 2 :]]


SCRUB_OFF = ["--log-scrub-bytes-per-second", "0"]
SCRUB_DEFAULT_RATE_EVERY_SECOND = ["--log-scrub-interval-ms", "1000"]  # 16 MiB/s: the default


@pytest.mark.parametrize("config", ["unchecked", "checked", "checked-scrubbing"])
def test_cluster_commits(benchmark, tmp_path, scale, config):
    benchmark.group = CLUSTER_GROUP
    batch = 1000
    records = max(batch, int(2_000_000 * scale))
    runs: list[tuple[float, list[float]]] = []
    node_args = ["--flush", "always", "--segment-bytes", str(16 << 20)]
    node_args += SCRUB_DEFAULT_RATE_EVERY_SECOND if config == "checked-scrubbing" else SCRUB_OFF
    kind = _UncheckedCluster if config == "unchecked" else LocalCluster
    with kind(tmp_path / "raftcore", 3, node_args=node_args) as cluster:
        metrics = dict(zip(cluster.node_ids, free_ports(3), strict=True))
        for node_id, port in metrics.items():
            cluster.node_own_args[node_id] = ["--metrics-port", str(port)]
        cluster.start()
        asyncio.run(_raftcore_run(cluster.bootstrap, batch, batch))  # warm up

        def once():
            runs.append(asyncio.run(_raftcore_run(cluster.bootstrap, records, batch)))

        benchmark.pedantic(once, rounds=3 if not benchmark.disabled else 1, iterations=1)
        scrubbed = sum(scrubbed_bytes(cluster.host, port) for port in metrics.values())
        cluster.stop_all()
    _record_stats(benchmark, records, runs)
    benchmark.extra_info["scrubbed_mib"] = round(scrubbed / (1 << 20), 1)
    if config != "checked-scrubbing":
        assert scrubbed == 0
    elif not benchmark.disabled:
        assert scrubbed > 0  # the scrubber read sealed segments during the run


def scrubbed_bytes(host: str, port: int) -> int:
    """raftcore_log_scrubbed_bytes of one node (docs/metrics.md)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("raftcore_log_scrubbed_bytes"):
                return int(float(line.split()[-1]))
    raise AssertionError(f"no raftcore_log_scrubbed_bytes at {host}:{port}")
