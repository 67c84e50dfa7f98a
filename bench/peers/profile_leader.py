"""Where the leader's CPU goes under load: a py-spy profile of the leader of a 3-node cluster.

Not a test. It starts a ``LocalCluster`` in a temporary directory, drives it from this process
(``--load small``: ``--writers`` Producers each sending 1-record batches one at a time, the
small-writes benchmark's shape; ``--load batched``: one Producer sending 1,000-record batches,
5 in flight, the cluster benchmark's shape), and after a warm-up runs

    py-spy record --pid LEADER_PID --duration SECONDS --rate RATE --format raw --output FILE

on the leader's process. The raw output is Brendan Gregg's collapsed-stack format, which
https://www.speedscope.app opens as is; this script also prints the functions and the files that
hold the most samples (self time), and the writes/s the load reached while profiled.

    python bench/peers/profile_leader.py --load small --writers 256 --seconds 20 --out /tmp/prof

py-spy needs to read the node's memory (root, or ptrace permission over the process); it is taken
from ``--py-spy``, else the PATH, else next to the Python running this script.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from raftcore.client import Producer, describe_quorum
from raftcore.node.local_cluster import LocalCluster

RECORD_BYTES = 100


class Load:
    """The producing side, on its own event loop in a thread, until ``stop``."""

    def __init__(self, bootstrap: list[str], kind: str, writers: int) -> None:
        self.bootstrap = bootstrap
        self.kind = kind
        self.writers = writers
        self.records = 0
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(60)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the caller
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        value = b"p" * RECORD_BYTES
        count = self.writers if self.kind == "small" else 1
        producers = []
        try:
            for i in range(0, count, 64):  # 64 at a time, as the small-writes benchmark
                batch = [Producer(self.bootstrap) for _ in range(min(64, count - i))]
                producers += batch
                await asyncio.gather(*(p.start() for p in batch))
            self.ready.set()
            if self.kind == "small":
                await asyncio.gather(*(self._small(p, value) for p in producers))
            else:
                await self._batched(producers[0], [(None, value)] * 1000)
        finally:
            for producer in producers:
                await producer.close()

    async def _small(self, producer: Producer, value: bytes) -> None:
        while not self.stopping.is_set():
            await producer.send([(None, value)])
            self.records += 1

    async def _batched(self, producer: Producer, batch: list) -> None:
        in_flight: set[asyncio.Future] = set()
        while not self.stopping.is_set() or in_flight:
            while not self.stopping.is_set() and len(in_flight) < 5:
                in_flight.add(producer.send_nowait(batch))
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                fut.result()
                self.records += len(batch)


def _thread_kind(frames: list[str]) -> str:
    """The event loop, a thread-pool worker (the log's fsync and appends handed off the loop),
    or another thread; ``--threads`` makes py-spy put the thread first in every stack."""
    text = ";".join(frames)
    if "run_forever" in text:
        return "event loop thread"
    if "concurrent/futures/thread.py" in text:
        return "thread-pool workers (fsync, work handed off the loop)"
    return "other threads"


def summarize(raw: Path, top: int, samples_per_thread: int) -> str:
    """Self-time by function and by file from py-spy's collapsed stacks; ``samples_per_thread``
    (rate x seconds) is what a thread active all the time would get."""
    by_function: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    by_thread: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        leaf = frames[-1]
        samples = int(count)
        total += samples
        by_thread[_thread_kind(frames)] += samples
        by_function[leaf] += samples
        name, _, where = leaf.partition(" (")
        by_file[where.rsplit(":", 1)[0] or name] += samples
    if total == 0:
        return "no samples (is the leader busy? did py-spy have permission?)"
    lines = [f"{total} samples (a thread counts while py-spy sees it active); by thread:"]
    for kind, samples in by_thread.most_common():
        busy = samples / samples_per_thread
        lines.append(f"  {100 * samples / total:5.1f}%  {kind} (busy {busy:.0%} of the time)")
    lines.append("self time by function:")
    for leaf, samples in by_function.most_common(top):
        lines.append(f"  {100 * samples / total:5.1f}%  {leaf}")
    lines.append("self time by file:")
    for where, samples in by_file.most_common(top):
        lines.append(f"  {100 * samples / total:5.1f}%  {where}")
    return "\n".join(lines)


def find_py_spy(given: str | None) -> str:
    candidates = [given, shutil.which("py-spy"), str(Path(sys.executable).parent / "py-spy")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("py-spy not found: pip install py-spy, or pass --py-spy PATH")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", choices=["small", "batched"], default="small")
    parser.add_argument("--writers", type=int, default=256, help="--load small: writers")
    parser.add_argument("--seconds", type=int, default=20, help="how long py-spy records")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("."), help="where leader.txt goes")
    parser.add_argument("--py-spy", dest="py_spy", default=None)
    parser.add_argument("--node-arg", action="append", default=[], help="extra node argument")
    parser.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    parser.add_argument(
        "--profile-load", action="store_true", help="also profile the producers' process"
    )
    args = parser.parse_args()
    py_spy = find_py_spy(args.py_spy)
    args.out.mkdir(parents=True, exist_ok=True)
    raw = (args.out / "leader.txt").absolute()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp) / "cluster", 3, node_args=args.node_arg or None) as cluster,
    ):
        cluster.start()
        info = asyncio.run(describe_quorum(cluster.bootstrap, timeout_s=30))
        leader_pid = cluster.pid(info.leader_id)
        load = Load(cluster.bootstrap, args.load, args.writers)
        load.start()
        if not load.ready.wait(120) or load.error is not None:
            raise SystemExit(f"the load did not start: {load.error!r}")
        time.sleep(args.warmup)
        before, started = load.records, time.monotonic()
        command = [py_spy, "record", "--pid", str(leader_pid), "--duration", str(args.seconds)]
        command += ["--rate", str(args.rate), "--format", "raw", "--output", str(raw)]
        command += ["--threads"] + (["--native"] if args.native else [])
        load_spy = None
        if args.profile_load:  # the producers' process too (this one), beside the leader
            load_command = command[:]
            load_command[3] = str(os.getpid())
            load_command[-2] = str((args.out / "load.txt").absolute())
            load_spy = subprocess.Popen(load_command, stdout=subprocess.DEVNULL)
        spy = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=args.seconds + 120
        )
        if load_spy is not None:
            load_spy.wait(timeout=120)
        rate = (load.records - before) / (time.monotonic() - started)
        load.stop()
        if load.error is not None:
            raise SystemExit(f"the load failed: {load.error!r}")
        if spy.returncode != 0:
            raise SystemExit(f"py-spy failed ({spy.returncode}): {spy.stderr.strip()}")
    load_name = f"{args.writers} small writers" if args.load == "small" else "batched"
    print(f"leader node {info.leader_id} (pid {leader_pid}), load: {load_name}, {rate:,.0f}/s")
    print(f"collapsed stacks (open in speedscope): {raw}")
    print(summarize(raw, args.top, args.rate * args.seconds))
    if args.profile_load:
        print("\nthe producers' process:")
        print(summarize(args.out / "load.txt", args.top, args.rate * args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
