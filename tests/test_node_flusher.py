"""The node's fsync thread (raftcore.node.flusher): group commit (every request made while an
fsync runs is covered by one next fsync), one hand-back to the loop per fsync, and a failed
fsync stops the node."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from test_node import cluster, leader_of, run

from raftcore.errors import RaftcoreError
from raftcore.node.flusher import Flusher

pytestmark = pytest.mark.timeout(60)


class SlowFsync:
    """A flush that blocks its first call until released, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.started.set()
        self.release.wait(10)


def test_requests_made_during_an_fsync_are_all_covered_by_one_next_fsync():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fsync = SlowFsync()
        reports: list[tuple[BaseException | None, bool]] = []
        all_reported = asyncio.Event()

        def on_done(error: BaseException | None) -> None:
            reports.append((error, threading.current_thread() is threading.main_thread()))
            if len(reports) == 2:
                all_reported.set()

        flusher = Flusher(fsync, loop, on_done)
        flusher.start()
        try:
            flusher.request()
            assert await loop.run_in_executor(None, fsync.started.wait, 5)
            for _ in range(10):  # appends arriving while the first fsync runs
                flusher.request()
            fsync.release.set()
            await asyncio.wait_for(all_reported.wait(), 5)
            await asyncio.sleep(0.05)  # no further fsync follows
        finally:
            flusher.close()
            await loop.run_in_executor(None, flusher.join)
        assert fsync.calls == 2 and flusher.fsyncs == 2
        assert reports == [(None, True), (None, True)]  # each handed back on the loop's thread

    run(main())


def test_an_fsync_requested_before_the_thread_starts_runs_once_it_starts():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        calls: list[int] = []
        flusher = Flusher(lambda: calls.append(1), loop, lambda error: done.set())
        flusher.request()
        flusher.start()
        try:
            await asyncio.wait_for(done.wait(), 5)
        finally:
            flusher.close()
            await loop.run_in_executor(None, flusher.join)
        assert calls == [1]

    run(main())


def test_an_fsync_with_nothing_new_is_not_reported_to_the_loop():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reports: list[BaseException | None] = []
        calls: list[int] = []

        def nothing_to_do() -> bool:
            calls.append(1)
            return False

        flusher = Flusher(nothing_to_do, loop, reports.append)
        flusher.start()
        try:
            flusher.request()
            deadline = loop.time() + 5
            while not calls and loop.time() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
        finally:
            flusher.close()
            await loop.run_in_executor(None, flusher.join)
        assert calls == [1] and reports == [] and flusher.fsyncs == 0

    run(main())


def test_a_node_fsyncs_only_when_something_was_appended_since_the_last_fsync(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"v")], wait=True)
            log = leader.log
            assert log is not None and log.end_offset == log.flushed_offset
            real_flush, fsyncs = log.flush, []

            def counted_flush() -> int:
                fsyncs.append(log.end_offset)
                return real_flush()

            log.flush = counted_flush  # type: ignore[method-assign]
            commit = leader.group.group_commit
            assert commit is not None
            assert commit.fsync() is False and fsyncs == []  # nothing new: no fsync
            await leader.append([(b"k", b"w")], wait=True)
            assert fsyncs and log.flushed_offset == log.end_offset  # the append was fsynced

    run(main())


def test_a_failed_fsync_stops_the_node(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"before")], wait=True)

            real_flush = leader.log.flush  # type: ignore[union-attr]
            failures: list[int] = []

            def failing_flush() -> int:  # fails once (the log's own close fsyncs again)
                if not failures:
                    failures.append(1)
                    raise OSError(5, "Input/output error (planted)")
                return real_flush()

            leader.log.flush = failing_flush  # type: ignore[union-attr,method-assign]
            with contextlib.suppress(RaftcoreError):  # the node may stop before the verdict
                await asyncio.wait_for(leader.append([(b"k", b"after")], wait=True), 5)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while leader._started and loop.time() < deadline:
                await asyncio.sleep(0.02)
            assert failures and not leader._started, "the node kept running after a failed fsync"

    run(main())


def test_many_logs_share_a_few_fsync_threads_and_one_logs_fsyncs_never_overlap():
    """Eight logs' flushers on a pool of three threads, each asked again while its fsync
    runs: every request is covered by an fsync that began after it, no two fsyncs of one log
    run at once, and at most three threads ever run (a node with a thousand partitions has a
    handful of fsync threads)."""
    from raftcore.node.flusher import FsyncPool

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pool = FsyncPool(3, name="test-fsync")
        lock = threading.Lock()
        running: dict[int, int] = {}
        overlaps: list[int] = []
        threads: set[str] = set()
        asked = [0] * 8  # requests made per log
        covered = [0] * 8  # the requests made before its latest fsync began
        reported = [0] * 8

        def fsync_of(log: int):  # type: ignore[no-untyped-def]
            def fsync() -> None:
                with lock:
                    covered[log] = asked[log]
                    running[log] = running.get(log, 0) + 1
                    if running[log] > 1:
                        overlaps.append(log)
                    threads.add(threading.current_thread().name)
                threading.Event().wait(0.005)
                with lock:
                    running[log] -= 1

            return fsync

        def on_done_of(log: int):  # type: ignore[no-untyped-def]
            def on_done(error: BaseException | None) -> None:
                assert error is None
                reported[log] += 1

            return on_done

        flushers = [Flusher(fsync_of(n), loop, on_done_of(n), pool=pool) for n in range(8)]
        for flusher in flushers:
            flusher.start()
        for _ in range(60):
            for n, flusher in enumerate(flushers):
                with lock:
                    asked[n] += 1
                flusher.request()
            await asyncio.sleep(0.001)
        deadline = loop.time() + 20
        while covered != asked and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for flusher in flushers:
            flusher.close()
        for flusher in flushers:
            await loop.run_in_executor(None, flusher.join)
        assert covered == asked, "a request no fsync began after"
        assert overlaps == []
        assert 1 <= len(threads) <= 3 and all(t.startswith("test-fsync-") for t in threads)
        assert all(r >= 1 for r in reported)

    run(main())
