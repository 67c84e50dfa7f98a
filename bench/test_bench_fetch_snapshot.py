"""FetchSnapshot between two nodes on loopback, against a plain socket copy of the same file.

One group, a 100 MiB snapshot (16-byte keys, 1,008-byte random values, no compression):

- ``fetch snapshot``: a leader node (one voter, its log starting at the snapshot) and, each
  round, a fresh observer with an empty data directory: from ``observer.start()`` until it has
  installed the snapshot -- the Fetch that names the snapshot, FetchSnapshot in
  ``fetch_max_bytes`` (8 MiB) chunks served as views of the leader's map, each chunk written to
  the ``.part`` file, then verification of the whole file (every CRC and every record), fsync,
  rename and the log start moved. Both nodes run in one event loop on a thread of their own.
- ``socket.sendfile``: the snapshot file sent by one thread with ``socket.sendfile`` and
  received by another into a buffer, over loopback: the floor no protocol can beat.

Target (issue 10): >= 200 MiB/s (``MiB_per_s_median`` in ``extra_info``; the ratio to the
floor is of the medians). Files go to RAFTCORE_BENCH_DIR, else /dev/shm, so the figures
are CPU and loopback, not the disk.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from bench_helpers import formatted

from raftcore.endpoints import Endpoint
from raftcore.log import SegmentedLog
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import OffsetAndEpoch, QuorumConfig

GROUP = "FetchSnapshot of a 100 MiB snapshot on loopback"
ROUNDS = 5
KEY_BYTES = 16
VALUE_BYTES = 1008
CLUSTER_ID = "bench-fetch-snapshot"
QUORUM = QuorumConfig(election_timeout_ms=200, fetch_timeout_ms=2000, request_timeout_ms=5000)
BENCH_DIR = os.environ.get("RAFTCORE_BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else None
)
_MEDIANS: dict[str, float] = {}


class _Loop:
    """An event loop on a thread of its own, for nodes that outlive one round."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout_s: float = 300.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _wait(predicate, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.001)


def _build_leader_dir(cfg: NodeConfig, snapshot_bytes: int, loop: _Loop) -> OffsetAndEpoch:
    """A leader's data directory whose log starts at a snapshot of ``snapshot_bytes``."""

    async def write_some() -> None:
        node = RaftNode(cfg)
        await node.start()
        await _wait(node.is_leader, 30)
        await node.append([(b"k%d" % i, b"v") for i in range(10)], wait=True)
        await node.stop()

    loop.run(write_some())
    values = [os.urandom(VALUE_BYTES) for _ in range(256)]
    pairs = snapshot_bytes // (KEY_BYTES + VALUE_BYTES + 8)
    with SegmentedLog.open(cfg.data_dir / "log") as log:
        sid = OffsetAndEpoch(log.end_offset, log.epoch_for_offset(log.end_offset - 1))
        writer = log.create_new_snapshot(sid)
        for start in range(0, pairs, 4096):
            writer.append(
                [(b"%016d" % i, values[i % 256]) for i in range(start, min(pairs, start + 4096))]
            )
        writer.freeze()
        assert log.delete_before_snapshot(sid)
    return sid


@pytest.fixture(scope="module")
def leader(request):
    """(loop, leader node, snapshot id, snapshot path, size, workdir)."""
    scale = 0.01 if request.config.getoption("benchmark_disable") else 1.0
    workdir = Path(tempfile.mkdtemp(prefix="raftcore-bench-fetch-snapshot-", dir=BENCH_DIR))
    loop = _Loop()
    (port,) = free_ports(1)
    voters = {1: Endpoint("127.0.0.1", port)}
    cfg = NodeConfig(
        node_id=1, voters=voters, data_dir=workdir / "leader", cluster_id=CLUSTER_ID, quorum=QUORUM
    )
    sid = _build_leader_dir(formatted(cfg), int((100 << 20) * scale), loop)
    node = RaftNode(cfg)

    async def start() -> None:
        await node.start()
        await _wait(node.is_leader, 30)

    loop.run(start())
    assert node.log is not None
    (path,) = (node.log.directory).glob("*.checkpoint")
    try:
        yield loop, node, sid, path, path.stat().st_size, workdir
    finally:
        loop.run(node.stop())
        loop.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _ratio(benchmark, name: str, size: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # smoke mode
        return
    median = stats.stats.median
    _MEDIANS[name] = median
    benchmark.extra_info["bytes"] = size
    benchmark.extra_info["MiB_per_s_median"] = round(size / median / (1 << 20))
    benchmark.extra_info["MiB_per_s_best"] = round(size / stats.stats.min / (1 << 20))
    if name == "fetch" and "floor" in _MEDIANS:
        benchmark.extra_info["ratio_to_sendfile"] = round(median / _MEDIANS["floor"], 2)


@pytest.mark.benchmark(group=GROUP)
def test_plain_socket_sendfile_of_the_same_file(benchmark, leader):
    _, _, _, path, size, _ = leader

    def copy() -> int:
        server = socket.create_server(("127.0.0.1", 0))
        received = [0]

        def receive() -> None:
            conn, _ = server.accept()
            buf = bytearray(8 << 20)
            view = memoryview(buf)
            with conn:
                while received[0] < size:
                    n = conn.recv_into(view)
                    if not n:
                        break
                    received[0] += n

        thread = threading.Thread(target=receive)
        thread.start()
        with socket.create_connection(server.getsockname()) as client, open(path, "rb") as f:
            client.sendfile(f)
        thread.join()
        server.close()
        return received[0]

    assert benchmark.pedantic(copy, rounds=ROUNDS) == size
    _ratio(benchmark, "floor", size)


@pytest.mark.benchmark(group=GROUP)
def test_fetch_snapshot_between_two_nodes(benchmark, leader):
    loop, node, sid, _, size, workdir = leader
    rounds = iter(range(1_000))

    def setup():
        for old in workdir.glob("observer-*"):
            shutil.rmtree(old, ignore_errors=True)
        (port,) = free_ports(1)
        cfg = NodeConfig(
            node_id=2,
            voters=node.config.voters,
            listen=Endpoint("127.0.0.1", port),
            data_dir=workdir / f"observer-{next(rounds)}",
            cluster_id=CLUSTER_ID,
            quorum=QUORUM,
        )
        return (cfg,), {}

    async def fetch(cfg: NodeConfig) -> int:
        observer = RaftNode(formatted(cfg, joining=True))
        await observer.start()
        try:
            core = observer.core
            assert core is not None
            await _wait(lambda: core.snapshots.installed >= 1, 120)
            assert observer.log is not None
            return observer.log.log_start_offset
        finally:
            await observer.stop()

    def run(cfg: NodeConfig) -> int:
        return loop.run(fetch(cfg))

    assert benchmark.pedantic(run, setup=setup, rounds=ROUNDS) == sid.offset
    _ratio(benchmark, "fetch", size)
