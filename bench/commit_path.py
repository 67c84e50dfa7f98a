"""Diagnostic (not a test): what one 1-record acks=all Produce costs the leader.

Runs three RaftNodes in this process, each on its own thread and event loop (so the leader's
loop and its Python calls can be told apart from the followers'), and the project's Producer on
the main thread, sending one 1-record batch at a time (acks=all, idempotent). It reports, per
commit, averaged over ``--requests`` sequential Produce requests after a warm-up:

- latency p50 / p99 of the Produce as the client sees it;
- event-loop hops on the leader: callbacks its loop ran (``asyncio.Handle._run``: task steps,
  ``call_soon`` / ``call_soon_threadsafe`` callbacks, timers, transport reads), with the
  callbacks that ran most;
- loop iterations (``_run_once``: one ``epoll`` wait each) on the leader;
- the leader's Raft fetch traffic: fetches received, answered with records, answered for a
  high-watermark move only, parked;
- with ``--profile``: Python calls per commit on the leader and on a follower (cProfile,
  counted on that node's thread only).

Usage: ``PYTHONPATH=. python bench/commit_path.py [--requests 2000] [--profile]``. The figures
are noisy on a shared machine; docs/benchmarks.md ("Commit path") has the ones we measured.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import pstats
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_helpers import formatted

from raftcore.client import Producer
from raftcore.endpoints import Endpoint
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft import fetch

_counting: dict[str, Any] = {"thread": None, "on": False}
_handles: collections.Counter[str] = collections.Counter()
_iterations = [0]
_fetches: collections.Counter[str] = collections.Counter()


def _describe(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return f"task {owner.get_coro().__qualname__}"  # type: ignore[union-attr]
    return getattr(callback, "__qualname__", repr(callback))


def _install_counters() -> None:
    """Wrap the loop's callback runner and iteration, counting on the leader's thread only."""
    run_handle = asyncio.events.Handle._run
    run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def counted_run(self: Any) -> None:
        if _counting["on"] and threading.get_ident() == _counting["thread"]:
            _handles[_describe(self)] += 1
        run_handle(self)

    def counted_once(self: Any) -> None:
        if _counting["on"] and threading.get_ident() == _counting["thread"]:
            _iterations[0] += 1
        run_once(self)

    asyncio.events.Handle._run = counted_run  # type: ignore[method-assign]
    asyncio.base_events.BaseEventLoop._run_once = counted_once  # type: ignore[attr-defined]

    try_complete = fetch.try_complete
    handle_request = fetch.handle_request

    def counted_try_complete(core: Any, request: Any, now: int, **options: Any) -> Any:
        response = try_complete(core, request, now, **options)
        if _counting["on"] and core.is_leader():
            if response is None:
                _fetches["parked"] += 1
            elif len(response.records):
                _fetches["answered with records"] += 1
            else:
                _fetches["answered without records"] += 1
        return response

    def counted_handle_request(core: Any, *args: Any) -> None:
        if _counting["on"] and core.is_leader():
            _fetches["received"] += 1
        handle_request(core, *args)

    fetch.try_complete = counted_try_complete  # type: ignore[assignment]
    fetch.handle_request = counted_handle_request  # type: ignore[assignment]


class Cluster:
    """Three nodes, one thread and loop each."""

    def __init__(self, root: Path) -> None:
        ports = free_ports(3)
        self.voters = {i + 1: Endpoint("127.0.0.1", p) for i, p in enumerate(ports)}
        self.nodes: dict[int, RaftNode] = {}
        self.loops: dict[int, asyncio.AbstractEventLoop] = {}
        self.threads: dict[int, int] = {}
        self.root = root

    def start(self) -> None:
        for node_id in self.voters:
            ready = threading.Event()
            threading.Thread(target=self._run, args=(node_id, ready), daemon=True).start()
            if not ready.wait(30):
                raise RuntimeError(f"node {node_id} did not start in 30 s")

    def _run(self, node_id: int, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        config = NodeConfig(
            node_id=node_id,
            voters=self.voters,
            data_dir=self.root / f"node-{node_id}",
            cluster_id="commit-path-diagnostic",
        )
        node = RaftNode(formatted(config))
        self.nodes[node_id], self.loops[node_id] = node, loop
        self.threads[node_id] = threading.get_ident()
        loop.run_until_complete(node.start())
        ready.set()
        loop.run_forever()

    def on(self, node_id: int, fn: Any) -> Any:
        """Run ``fn()`` on a node's loop thread and return its result."""
        done = threading.Event()
        box: list[Any] = []
        self.loops[node_id].call_soon_threadsafe(lambda: (box.append(fn()), done.set()))
        if not done.wait(10):
            raise RuntimeError(f"node {node_id}'s loop did not answer in 10 s")
        return box[0]

    def stop(self) -> None:
        for node_id, node in self.nodes.items():
            loop = self.loops[node_id]
            asyncio.run_coroutine_threadsafe(node.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)


async def _measure(cluster: Cluster, requests: int, profile: bool) -> None:
    bootstrap = [str(v) for v in cluster.voters.values()]
    record = [(b"k", b"v" * 100)]
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        for _ in range(200):  # warm-up: connections, leader discovery, producer id
            await producer.send(record)
        leader = next(i for i, n in cluster.nodes.items() if n.is_leader())
        follower = next(i for i in cluster.nodes if i != leader)

        latencies = []
        for _ in range(requests):
            started = time.perf_counter()
            await producer.send(record)
            latencies.append(time.perf_counter() - started)
        latencies.sort()
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        print(
            "latency of one 1-record acks=all Produce: "
            f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"
        )

        _counting["thread"] = cluster.threads[leader]
        _counting["on"] = True
        for _ in range(requests):
            await producer.send(record)
        _counting["on"] = False
        hops = sum(_handles.values())
        print(f"leader event-loop hops per commit: {hops / requests:.2f}")
        print(f"leader loop iterations per commit: {_iterations[0] / requests:.2f}")
        for name, count in _handles.most_common(12):
            print(f"  {count / requests:6.2f}  {name}")
        print("leader Raft fetches per commit:")
        for name, count in sorted(_fetches.items()):
            print(f"  {count / requests:6.2f}  {name}")

        if profile:
            profiles = {leader: cProfile.Profile(), follower: cProfile.Profile()}
            for node_id, prof in profiles.items():
                cluster.on(node_id, prof.enable)  # profiles that node's thread only
            for _ in range(requests):
                await producer.send(record)
            for node_id, prof in profiles.items():
                cluster.on(node_id, prof.disable)
            for node_id, prof in profiles.items():
                stats = pstats.Stats(prof)
                calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
                role = "leader" if node_id == leader else "follower"
                print(f"{role}: {calls / requests:.0f} Python calls per commit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="count Python calls (cProfile)")
    args = parser.parse_args()
    _install_counters()
    with tempfile.TemporaryDirectory(prefix="commit-path-") as root:
        cluster = Cluster(Path(root))
        cluster.start()
        try:
            asyncio.run(_measure(cluster, args.requests, args.profile))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
