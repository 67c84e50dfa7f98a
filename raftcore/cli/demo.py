"""``raftcore demo``: a three-node cluster on loopback survives the SIGKILL of its leader.

1. start three node processes (``raftcore node``) in a temporary or given directory;
2. write records through the idempotent producer, acks=all, with a progress bar;
3. midway, SIGKILL the leader; keep writing through the failover;
4. restart the killed node; wait until every node has caught up; stop the nodes;
5. read the three logs from disk: every acknowledged record must be there exactly once, in
   the order it was written, and the three logs must hold the same records;
6. print a summary: records, throughput, commit latency p50/p99, elections, time without a
   leader.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from raftcore.client import Producer, describe_quorum
from raftcore.errors import RaftcoreError
from raftcore.logtools import Progress
from raftcore.node.local_cluster import LocalCluster

__all__ = ["DemoResult", "run_demo"]

KEY_WIDTH = 12  # record keys are the record's number, zero-padded
DEMO_CLIENT = "demo"  # the client certificate of --tls


@dataclass
class DemoResult:
    records: int = 0
    acked: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    killed: int | None = None
    failover_s: float | None = None
    epochs: tuple[int, int] = (0, 0)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.acked == self.records

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))]


def _record(n: int, size: int) -> tuple[bytes, bytes]:
    key = str(n).zfill(KEY_WIDTH).encode()
    return key, (key * (size // KEY_WIDTH + 1))[:size]


async def _write(
    cluster: LocalCluster,
    result: DemoResult,
    *,
    records: int,
    batch: int,
    size: int,
    kill_at: float,
    restart_at: float,
    progress: Progress,
    out: object,
) -> None:
    security = cluster.client_security(DEMO_CLIENT)  # PLAINTEXT unless --tls
    producer = Producer(cluster.bootstrap, acks=-1, max_in_flight=5, security=security)
    await producer.start()
    start_epoch = producer.cluster.leader.epoch if producer.cluster.leader else 0
    leader0 = producer.cluster.leader.leader_id if producer.cluster.leader else -1
    print(f"leader: node {leader0} in epoch {start_epoch}", file=out, flush=True)
    killed_epoch: int | None = None
    t_kill = 0.0
    started = time.perf_counter()
    progress.restart_clock()
    in_flight: set[asyncio.Future[tuple[int, int]]] = set()
    next_record = 0
    loop = asyncio.get_running_loop()

    def on_done(fut: asyncio.Future[tuple[int, int]], count: int, sent: float) -> None:
        in_flight.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            return
        now = time.perf_counter()
        result.acked += count
        result.latencies_ms.append((now - sent) * 1000)
        leader = producer.cluster.leader
        if (
            killed_epoch is not None
            and result.failover_s is None
            and leader is not None
            and leader.epoch > killed_epoch
        ):
            result.failover_s = now - t_kill
        progress(result.acked, records)

    try:
        while next_record < records or in_flight:
            while next_record < records and len(in_flight) < 5:
                count = min(batch, records - next_record)
                recs = [_record(n, size) for n in range(next_record, next_record + count)]
                next_record += count
                fut = producer.send_nowait(recs)
                sent = time.perf_counter()
                fut.add_done_callback(lambda f, c=count, s=sent: on_done(f, c, s))
                in_flight.add(fut)
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                exc = fut.exception()
                if exc is not None:
                    raise RaftcoreError(f"a write failed: {exc}")
            if killed_epoch is None and result.acked >= kill_at * records:
                leader = producer.cluster.leader
                assert leader is not None
                result.killed = leader.leader_id
                killed_epoch = leader.epoch
                t_kill = time.perf_counter()
                cluster.kill(leader.leader_id, signal.SIGKILL)
                progress.interrupt(
                    f"SIGKILL node {leader.leader_id} (the leader, epoch {leader.epoch}) "
                    f"after {result.acked:,} records"
                )
            if (
                result.killed is not None
                and not cluster.alive(result.killed)
                and result.acked >= restart_at * records
            ):
                await loop.run_in_executor(None, cluster.start_node, result.killed)
                progress.interrupt(f"restarted node {result.killed}")
        result.seconds = time.perf_counter() - started
        leader = producer.cluster.leader
        result.epochs = (start_epoch, leader.epoch if leader else -1)
    finally:
        await producer.close()


async def _wait_caught_up(cluster: LocalCluster, timeout_s: float) -> int:
    """Until every voter's log end offset has reached the high watermark. Returns it."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await describe_quorum(
            cluster.bootstrap, timeout_s=10, security=cluster.client_security(DEMO_CLIENT)
        )
        if all(v.log_end_offset >= info.high_watermark for v in info.voters):
            return info.high_watermark
        if time.monotonic() > deadline:
            lagging = {v.replica_id: v.log_end_offset for v in info.voters}
            raise RaftcoreError(
                f"voters did not catch up to {info.high_watermark} in {timeout_s} s: {lagging}"
            )
        await asyncio.sleep(0.1)


def _check_logs(cluster: LocalCluster, result: DemoResult) -> list[int]:
    """Read every node's log from disk; every record 0..N-1 exactly once, in order, and the
    same on every node. Returns each node's count of data records."""
    from raftcore.log import SegmentedLog

    counts = []
    reference: list[bytes] | None = None
    for node_id in cluster.node_ids:
        keys: list[bytes] = []
        with SegmentedLog.open(cluster.data_dir(node_id) / "log") as log:
            for b in log.batches():
                if not b.is_control:
                    keys.extend(r.key for r in b.records())
        counts.append(len(keys))
        expected = [str(n).zfill(KEY_WIDTH).encode() for n in range(result.records)]
        if keys != expected:
            seen = set()
            dups = sum(1 for k in keys if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            missing = len(set(expected) - set(keys))
            result.problems.append(
                f"node {node_id}: {len(keys)} records, {dups} duplicated, {missing} missing"
                + ("" if dups or missing else ", out of order")
            )
        if reference is None:
            reference = keys
        elif keys != reference:
            result.problems.append(f"node {node_id}'s log differs from node 1's")
    return counts


def run_demo(
    directory: str | None = None,
    *,
    records: int = 200_000,
    batch: int = 1000,
    size: int = 100,
    kill_at: float = 0.5,
    restart_at: float = 0.75,
    keep: bool = False,
    out: object = None,
    tls: bool = False,
) -> DemoResult:
    """``tls``: make a CA and certificates in ``<directory>/tls`` (raftcore certs) and run
    everything over mutual TLS: the nodes with each other, the producer with its certificate."""
    if records < 1 or batch < 1 or size < KEY_WIDTH:
        raise ValueError(f"need records >= 1, batch >= 1 and size >= {KEY_WIDTH}")
    stream = sys.stdout if out is None else out
    temporary = directory is None
    root = Path(tempfile.mkdtemp(prefix="raftcore-demo-")) if temporary else Path(directory)
    if not temporary and root.exists() and any(root.iterdir()):
        raise RaftcoreError(f"{root} is not empty; give a new or empty directory")
    result = DemoResult(records=records)
    print(f"raftcore demo: 3 nodes on loopback, data in {root}", file=stream, flush=True)
    tls_dir = None
    if tls:
        from raftcore.security.certs import make_certs

        tls_dir = make_certs(root / "tls", [1, 2, 3], clients=[DEMO_CLIENT]).directory
        print(f"  TLS: certificates in {tls_dir}, mutual TLS on every connection", file=stream)
    cluster = LocalCluster(root, 3, tls_dir=tls_dir)
    finished = False
    try:
        cluster.start()
        for i in cluster.node_ids:
            print(
                f"  node {i}: pid {cluster.pid(i)}, {cluster.endpoint(i)}, "
                f"log {cluster.log_file(i)}",
                file=stream,
            )
        progress = Progress("writing", stream, unit="records", plain_every=0.1)
        asyncio.run(
            _write(
                cluster,
                result,
                records=records,
                batch=batch,
                size=size,
                kill_at=kill_at,
                restart_at=restart_at,
                progress=progress,
                out=stream,
            )
        )
        hw = asyncio.run(_wait_caught_up(cluster, 60))
        print(f"all three nodes caught up to offset {hw}; stopping them", file=stream)
        cluster.stop_all()
        counts = _check_logs(cluster, result)
        print(f"records on disk per node: {counts}", file=stream)
        finished = True
    finally:
        cluster.close()
        if not finished:  # an exception is on its way: say where to look, delete nothing
            print(f"\nthe demo failed; {_kept(cluster)}", file=stream, flush=True)
    _summary(result, stream)
    if temporary and not keep and result.ok:
        shutil.rmtree(root, ignore_errors=True)
    elif not result.ok or keep:
        print(f"({_kept(cluster)})", file=stream)
    return result


def _kept(cluster: LocalCluster) -> str:
    """Where a kept demo's data directories and node logs are."""
    logs = ", ".join(cluster.log_file(i).name for i in cluster.node_ids)
    return (
        f"data and node logs kept in {cluster.directory} (each node's output: {logs}; "
        f"its data: node-N/, readable with `raftcore dump-log {cluster.data_dir(1)}`)"
    )


def _summary(r: DemoResult, out: object) -> None:
    rate = r.acked / r.seconds if r.seconds else 0.0
    lines = [
        "",
        "summary",
        f"  records acknowledged:     {r.acked:,} of {r.records:,}",
        f"  throughput:               {rate:,.0f} records/s ({r.seconds:.2f} s, with a failover)",
        f"  commit latency p50 / p99: {r.percentile(0.5):.1f} / {r.percentile(0.99):.1f} ms "
        "per batch",
        f"  leader epochs:            {r.epochs[0]} -> {r.epochs[1]} "
        f"({r.epochs[1] - r.epochs[0]} election(s) after the first)",
        f"  killed:                   node {r.killed}",
        "  time without a leader:    "
        + (
            f"{r.failover_s * 1000:.0f} ms (SIGKILL to first commit under the new leader)"
            if r.failover_s is not None
            else "n/a"
        ),
        "  check:                    "
        + (
            "every acknowledged record exactly once, in order, on all three nodes"
            if r.ok
            else "FAILED: " + "; ".join(r.problems)
        ),
    ]
    print("\n".join(lines), file=out, flush=True)
