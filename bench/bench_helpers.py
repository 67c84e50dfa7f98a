"""What several benchmarks share: a producer's sliding window of sends, and latency
percentiles. (A helper module, not a benchmark: pytest collects only ``test_*.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50 and p99 (rounded to 0.01) of ``latencies``, NaN when there are none."""
    data = sorted(latencies)
    if not data:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {
        "p50_ms": round(data[len(data) // 2], 2),
        "p99_ms": round(data[min(len(data) - 1, int(len(data) * 0.99))], 2),
    }


async def send_window(
    producer: Any,
    payload: list,
    records: int,
    outstanding: int,
    latencies: list[float] | None = None,
) -> float:
    """Send ``records`` records in sends of ``payload`` (the last one cut short), keeping up to
    ``outstanding`` sends queued or in flight; with ``latencies``, each send's ms from queued
    to acknowledged. Returns the seconds from the first send to the last acknowledgement."""
    batch = len(payload)
    in_flight: set[asyncio.Future] = set()
    started = time.perf_counter()
    sent = 0
    while sent < records or in_flight:
        while sent < records and len(in_flight) < outstanding:
            count = min(batch, records - sent)
            fut = producer.send_nowait(payload[:count])
            if latencies is not None:
                t = time.perf_counter()
                fut.add_done_callback(
                    lambda f, t=t: latencies.append((time.perf_counter() - t) * 1000)
                )
            in_flight.add(fut)
            sent += count
        done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            fut.result()
    return time.perf_counter() - started


# Another commit's checkout (its native modules built in place: setup.py build_ext --inplace)
# whose node processes run beside this one's in the cluster benchmarks, in one run: how the
# node compares with before. The client side (the producers) is this checkout's in both.
BASELINE = os.environ.get("RAFTCORE_BENCH_BASELINE")
NODE_BUILDS = ["this", "baseline"] if BASELINE else ["this"]


def node_env(build: str) -> dict[str, str] | None:
    """The environment of a benchmark's node processes: None (this checkout's), or the
    baseline checkout's first on the import path."""
    if build == "this":
        return None
    assert BASELINE is not None
    return {**os.environ, "PYTHONPATH": BASELINE}


# Logs the benchmarks write go to memory where there is a tmpfs: the disk is not what they time.
BENCH_DIR = os.environ.get("RAFTCORE_BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else None
)
RECORDS_100B = [(None, bytes([i % 251]) * 100) for i in range(1000)]  # one batch: 1,000 x 100 B


@contextlib.contextmanager
def filled_log(name: str, total_bytes: int, segments: int) -> Iterator[Any]:
    """A SegmentedLog in a temporary directory holding ``total_bytes`` of 1,000-record batches
    in about ``segments`` segments (all but the last sealed), flushed; removed afterwards."""
    from raftcore.log import SegmentedLog
    from raftcore.records import encode_batch

    directory = tempfile.mkdtemp(prefix=f"raftcore-bench-{name}-", dir=BENCH_DIR)
    log = SegmentedLog.open(os.path.join(directory, "log"), segment_bytes=total_bytes // segments)
    try:
        offset = 0
        while log.size_in_bytes < total_bytes:
            log.append_as_follower(encode_batch(RECORDS_100B, base_offset=offset, leader_epoch=1))
            offset += len(RECORDS_100B)
        log.flush()
        yield log
    finally:
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def formatted(cfg: Any, *, joining: bool = False) -> Any:
    """``cfg``'s data directory formatted as ``raftcore format`` does, unless it already is (a
    node never formats itself): with the configured voters as the first voter set, or none
    for a replica that ``joining`` an existing cluster. Returns ``cfg``."""
    from pathlib import Path

    from raftcore.node.data_dir import META_PROPERTIES, format_data_dir

    if not (Path(cfg.data_dir) / META_PROPERTIES).exists():
        format_data_dir(
            cfg.data_dir,
            cluster_id=cfg.cluster_id,
            node_id=cfg.node_id,
            initial_voters=None if joining else list(cfg.voters),
        )
    return cfg
