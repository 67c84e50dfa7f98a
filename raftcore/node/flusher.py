"""The node's fsync thread: one dedicated thread that fsyncs the log when asked, off the event
loop, with group commit.

``request()`` (any thread, cheap) marks an fsync as wanted and wakes the thread. Requests that
arrive while an fsync runs are all covered by ONE next fsync: it starts after they were made,
so it covers every append that preceded them. After each fsync the thread hands the outcome
back to the event loop with a single ``call_soon_threadsafe(on_done, error)``; ``error`` is
None on success, else the exception (the thread then stops: a failed fsync stops the node, and
nothing written since may be acknowledged). A ``flush`` that returns False had nothing to
fsync (an earlier fsync covered every append that asked): nothing is handed back then.

It replaces an asyncio task that awaited an ``asyncio.Event`` and called
``run_in_executor`` per fsync (a task wake-up, an executor hand-off and a future resolution on
the loop for each fsync).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Flusher"]


class Flusher:
    def __init__(
        self,
        flush: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[BaseException | None], None],
        *,
        name: str = "raftcore-fsync",
    ) -> None:
        self._flush = flush
        self._loop = loop
        self._on_done = on_done
        self._cond = threading.Condition(threading.Lock())
        self._wanted = False
        self._closed = False
        self.fsyncs = 0  # fsyncs run (for tests and diagnostics)
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """Ask for an fsync of everything appended so far. Already wanted (and not yet
        started: the thread clears the flag just before it fsyncs) means covered."""
        if self._wanted:
            return
        with self._cond:
            self._wanted = True
            self._cond.notify()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Tell the thread to stop after the fsync in progress, if any (does not wait)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def join(self) -> None:
        """Wait until the thread has stopped (blocks: call it off the loop, after close)."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _main(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._wanted and not self._closed:
                    cond.wait()
                if self._closed:
                    return
                self._wanted = False  # requests from now on need the next fsync
            try:
                did = self._flush()
            except BaseException as exc:  # handed to the loop, which stops the node
                self._hand_back(exc)
                return
            if did is not False:
                self.fsyncs += 1
                self._hand_back(None)

    def _hand_back(self, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody left to tell
            self._loop.call_soon_threadsafe(self._on_done, error)
