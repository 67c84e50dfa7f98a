"""Helpers for tests that run node processes (LocalCluster) and talk to them with our clients.
Every wait has a deadline; every process is ended by its pid when the cluster closes.

A test module gets its cluster from the ``cluster`` fixture of conftest.py, told by a
``pytest.mark.cluster(...)`` mark what to start (:func:`running_cluster`'s arguments);
in-process nodes are in node_helpers.py."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from waits import until, wait_until

from raftcore.client import Consumer, Producer, describe_quorum
from raftcore.client.admin import QuorumInfo
from raftcore.error_codes import Errors
from raftcore.log import SegmentedLog
from raftcore.node.local_cluster import LocalCluster
from raftcore.security.config import ClientSecurity

# Short timeouts keep failovers fast in tests; the defaults are Kafka's.
FAST = ["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000"]


@contextlib.contextmanager
def running_cluster(
    directory: Path,
    size: int = 3,
    *,
    node_args: list[str] | None = None,
    ready: Callable[[LocalCluster], Any] | None = None,
    **kw: Any,
) -> Iterator[LocalCluster]:
    """``size`` node processes in ``directory`` (``node_args``: :data:`FAST` unless told;
    ``kw``: LocalCluster's), each listening, and ``ready(cluster)`` done, before the block.
    After it, every process this cluster started is gone: a stopped (SIGSTOP) node is let go
    on first, then each is killed by its pid."""
    c = LocalCluster(directory, size, node_args=FAST if node_args is None else node_args, **kw)
    try:
        c.start()
        if ready is not None:
            ready(c)
        yield c
    finally:
        for node_id in c.node_ids:
            if c.alive(node_id):
                os.kill(c.pid(node_id), signal.SIGCONT)
        c.close()
        alive = [pid for pid in c.started_pids if _exists(pid)]
        assert not alive, f"processes of the cluster in {directory} still run: {alive}"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def a_leader(cluster: LocalCluster) -> None:
    """Readiness: a leader answers DescribeQuorum."""
    run(quorum(cluster))


def voters_in_the_log(cluster: LocalCluster) -> None:
    """Readiness: the voter set lives in the log (:func:`wait_dynamic`)."""
    run(wait_dynamic(cluster))


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


async def wait_dynamic(cluster: LocalCluster, timeout_s: float = 30.0) -> None:
    """Until the voter set lives in the log (kraft.version 1, no change pending): a fresh
    cluster's leader writes its two control records once every voter has reported who it is,
    which may come after a test's first records on a loaded machine."""
    seen: list[QuorumInfo] = []

    async def dynamic() -> bool:
        seen[:] = [await quorum(cluster)]
        return seen[0].kraft_version == 1 and seen[0].pending_change is None

    await until(
        dynamic,
        timeout_s,
        "the voter set in the log (kraft.version 1, no change pending)",
        poll_s=0.05,
        last=lambda: seen[-1] if seen else None,
    )


async def wait_caught_up(
    cluster: LocalCluster, node_ids: list[int], timeout_s: float = 20.0
) -> int:
    """The high watermark, once every node of ``node_ids`` has its log up to it."""
    seen: list[QuorumInfo] = []

    async def caught_up() -> bool:
        info = await quorum(cluster)
        seen[:] = [info]
        ends = {v.replica_id: v.log_end_offset for v in info.voters}
        return all(ends.get(i, -1) >= info.high_watermark for i in node_ids)

    await until(
        caught_up,
        timeout_s,
        f"nodes {node_ids} to catch up to the high watermark",
        poll_s=0.05,
        last=lambda: seen[-1] if seen else None,
    )
    return seen[-1].high_watermark


def data_keys(directory: Path) -> list[bytes]:
    """The keys of the data records in a node's log, read from disk (node stopped)."""
    keys: list[bytes] = []
    with SegmentedLog.open(directory / "log") as log:
        for b in log.batches():
            if not b.is_control:
                keys.extend(r.key for r in b.records())
    return keys


# The suite's wait for a named condition (tests/waits.py), as this module's users call it.
wait_for = wait_until


# ---- a writer that keeps writing while the cluster changes -----------------------------------

# The answers a client retries at the new leader: all a writer may see while nodes come and go.
LEADER_CHANGE = {
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH,
    Errors.LEADER_NOT_AVAILABLE,
}


class Writer:
    """A producer (acks=all, idempotent) on a thread of its own, writing key(0), key(1), ...
    in sends of ``batch`` records, at most ``window`` sends unanswered. It keeps every
    acknowledged send's offsets and every error code an answer carried."""

    def __init__(self, bootstrap: list[str], batch: int = 20, window: int = 8) -> None:
        self.bootstrap = bootstrap
        self.batch = batch
        self.window = window
        self.acked: list[tuple[int, int, int]] = []  # (first key, first offset, last offset)
        self.errors: Counter[int] = Counter()  # error codes answered to produce requests
        self.lost: list[str] = []  # requests that got no answer (a connection closed)
        self.failures: list[BaseException] = []  # sends that failed for good
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def count(self) -> int:
        return len(self.acked) * self.batch

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 60) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the writer did not finish its sends"

    async def _main(self) -> None:
        writer = self

        class Watched(Producer):
            def _handle(self, batch: Any, resp: Any) -> str:  # type: ignore[override]
                error = resp.responses[0].partition_responses[0].error_code
                if error != Errors.NONE:
                    writer.errors[error] += 1
                return super()._handle(batch, resp)

            def _answered(self, batch: Any, answer: Any, leader_id: int) -> str:  # type: ignore[override]
                if answer.cancelled() or answer.exception() is not None:
                    writer.lost.append(f"node {leader_id}: {answer.exception()!r}")
                return super()._answered(batch, answer, leader_id)

        async with Watched(self.bootstrap, request_timeout_ms=10_000) as producer:
            pending: list[tuple[int, asyncio.Future[Any]]] = []
            n = 0
            while not self._stop.is_set() or pending:
                if not self._stop.is_set() and len(pending) < self.window:
                    records = [(key(i), b"v" * 20) for i in range(n, n + self.batch)]
                    pending.append((n, producer.send_nowait(records)))
                    n += self.batch
                    await asyncio.sleep(0.005)
                    continue
                first, fut = pending.pop(0)
                try:
                    lo, hi = await fut
                except Exception as exc:
                    self.failures.append(exc)
                    continue
                self.acked.append((first, lo, hi))


def check_acknowledged(writer: Writer, keys: list[bytes]) -> None:
    """``keys`` (the log's data records, in order) are the writer's, each acknowledged send
    there once, in order, at the offsets it was acknowledged at."""
    total = writer.count
    assert keys == [key(n) for n in range(total)]
    offsets = {}
    for first, lo, hi in writer.acked:
        assert hi - lo + 1 == writer.batch
        offsets[first] = lo
    assert sorted(offsets) == list(range(0, total, writer.batch))
    firsts = sorted(offsets)
    assert all(offsets[a] < offsets[b] for a, b in itertools.pairwise(firsts))


def formatted(data_dir: Path, node_id: int = 1, cluster_id: str = "c", voters: Any = (1,)) -> Path:
    """``data_dir`` formatted as ``raftcore format`` does (``voters``: the initial voters'
    ids, None for a node that joins): a node refuses an unformatted directory."""
    from raftcore.node.data_dir import format_data_dir

    initial = None if voters is None else list(voters)
    format_data_dir(data_dir, cluster_id=cluster_id, node_id=node_id, initial_voters=initial)
    return data_dir
