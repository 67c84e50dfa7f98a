"""Fsyncing the logs off the event loop, with group commit: one :class:`Flusher` per log (a
Raft group's), run by the few threads of one :class:`FsyncPool` that every group of the
process shares, so a node with a thousand partitions has a handful of fsync threads, not a
thousand.

``request()`` (any thread, cheap) marks an fsync of that log as wanted and queues the flusher
once. Requests that arrive while its fsync runs are all covered by ONE next fsync: it starts
after they were made, so it covers every append that preceded them. A flusher runs on one
pool thread at a time (it is queued at most once, and queued again only after its fsync
ended), so its fsyncs never overlap; different logs' fsyncs run side by side (fsync releases
the GIL). After each fsync the outcome goes back to the event loop with a single
``call_soon_threadsafe(on_done, error)``; ``error`` is None on success, else the exception
(the flusher then runs no more: a failed fsync stops the node, and nothing written since may
be acknowledged). A ``flush`` that returns False had nothing to fsync (an earlier fsync
covered every append that asked): nothing is handed back then.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["FSYNC_THREADS", "SHARED_POOL", "Flusher", "FsyncPool"]

# Threads of the process's pool: fsyncs of this many logs run at once. A few are enough to
# keep a disk's queue busy (NVMe and cloud volumes gain from a handful in flight); each more
# is a thread waiting.
FSYNC_THREADS = 4


class FsyncPool:
    """A few threads that run the fsyncs of many logs' flushers, in the order asked. Its
    threads start with the first flusher queued, and are daemons: a pool outlives every node
    of the process, idle."""

    def __init__(self, threads: int = FSYNC_THREADS, *, name: str = "raftcore-fsync") -> None:
        self.size = threads
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Flusher] = deque()
        self._threads: list[threading.Thread] = []
        self._busy = 0  # threads running a flusher now

    def submit(self, flusher: Flusher) -> None:
        with self._cond:
            self._queue.append(flusher)
            if len(self._threads) < self.size and len(self._queue) > self._idle:
                self._start_thread()
            self._cond.notify()

    @property
    def _idle(self) -> int:  # under _cond
        return len(self._threads) - self._busy

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._main, name=f"{self.name}-{len(self._threads) + 1}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _main(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._queue:
                    cond.wait()
                flusher = self._queue.popleft()
                self._busy += 1
            try:
                flusher._run()
            finally:
                with cond:
                    self._busy -= 1

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads are not there; new ones start on demand."""
        self._cond = threading.Condition(threading.Lock())
        self._queue.clear()
        self._threads.clear()
        self._busy = 0


SHARED_POOL = FsyncPool()  # the process's: its threads start with the first fsync
os.register_at_fork(after_in_child=SHARED_POOL._after_fork)


class Flusher:
    def __init__(
        self,
        flush: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[BaseException | None], None],
        *,
        pool: FsyncPool | None = None,
    ) -> None:
        self._flush = flush
        self._loop = loop
        self._on_done = on_done
        self._pool = pool if pool is not None else SHARED_POOL
        self._cond = threading.Condition(threading.Lock())
        self._wanted = False  # an fsync asked for and not begun yet
        self._queued = False  # in the pool's queue or running there (under _cond)
        self._started = False
        self._closed = False
        self._failed = False
        self.fsyncs = 0  # fsyncs run (for tests and diagnostics)

    def start(self) -> None:
        """Requests made before now are fsynced from now on."""
        with self._cond:
            self._started = True
            self._queue_if_wanted()

    def request(self) -> None:
        """Ask for an fsync of everything appended so far. Already wanted (and not yet begun:
        the pool thread clears the flag just before it fsyncs) means covered."""
        if self._wanted:
            return
        with self._cond:
            self._wanted = True
            self._queue_if_wanted()

    def _queue_if_wanted(self) -> None:  # under _cond
        if self._wanted and self._started and not self._queued:
            if self._closed or self._failed:
                return
            self._queued = True
            self._pool.submit(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Run no fsync after the one in progress, if any (does not wait for it)."""
        with self._cond:
            self._closed = True

    def join(self) -> None:
        """Wait until no fsync of this flusher runs or is queued (blocks: call it off the
        loop, after close)."""
        with self._cond:
            while self._queued:
                self._cond.wait()

    def _run(self) -> None:
        """On a pool thread: one fsync, if still wanted, then queued again when asked for
        meanwhile."""
        cond = self._cond
        with cond:
            if self._closed or self._failed or not self._wanted:
                self._queued = False
                cond.notify_all()
                return
            self._wanted = False  # requests from now on need the next fsync
        error: BaseException | None = None
        did: Any = None
        try:
            did = self._flush()
        except BaseException as exc:  # handed to the loop, which stops the node
            error = exc
        with cond:
            if error is not None:
                self._failed = True
            elif did is not False:
                self.fsyncs += 1
        if error is not None or did is not False:
            self._hand_back(error)  # before the next fsync can begin: reports in order
        with cond:
            self._queued = False
            self._queue_if_wanted()  # asked for during this fsync: once more
            cond.notify_all()

    def _hand_back(self, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody left to tell
            self._loop.call_soon_threadsafe(self._on_done, error)
