"""The node's answer to ``Output.snapshot_due`` (KIP-630): the state machine writes a snapshot
on a worker thread while the event loop goes on, and the core is told how it ended.

The core is single-threaded: only the loop touches it. One snapshot runs at a time:

1. ``due()`` (the node saw ``Output.snapshot_due``) starts a task, unless one runs or a failed
   one is still backing off. The task first waits until the state machine has applied what
   the listener had read when the snapshot came due (the applier trails the core's listener:
   it applies on its own thread), so the snapshot holds what the core counted.
2. On the worker thread, ``source.snapshot(writer)``. Its first call, ``writer.start(end)``,
   hops to the loop for ``core.create_snapshot(end, now)`` -- the core checks the offset (a
   batch boundary, past the latest snapshot, at most the listener's next offset) and hands
   back the log's writer; the thread waits for the answer. The appends, then ``freeze()``
   (verify, fsync, rename), run on the thread.
3. Back on the loop: ``core.snapshot_frozen(id, now)``, and the Output is driven (the leader
   may move its log start offset). On any failure -- the state machine raised, the core
   refused the offset, the disk is full, the node is stopping -- the log's writer is aborted
   (its ``.part`` goes), the reason is logged, ``core.snapshot_abandoned(now)``, and no new
   snapshot starts for ``RETRY_MS``.

``source`` is the state machine, or a listener with a ``snapshot(writer)`` of its own (called
on the worker thread while the loop goes on delivering commits: it must take a consistent view,
as :class:`~raftcore.statemachine.DictStateMachine` does under its lock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raftcore.errors import RaftcoreError
from raftcore.raft import Output, RaftCore
from raftcore.raft.snapshots import InvalidSnapshotError
from raftcore.statemachine.checksums import DamagedValueError

__all__ = ["Snapshotter", "snapshot_source"]

logger = logging.getLogger(__name__)

RETRY_MS = 1000


def snapshot_source(prefix: str, quorum: Any, state_machine: Any, listener: Any) -> Any:
    """What writes the node's snapshots (``quorum``: its QuorumConfig): the state machine,
    else a listener with ``snapshot(writer)``, else, for a node that only replicates the log
    and takes snapshots on request only, :class:`LogOnlySnapshots`; None with snapshots off.
    Snapshots on with nothing to snapshot is a configuration error, said at once."""
    if not quorum.takes_snapshots:
        return None
    if state_machine is not None:
        return state_machine
    if listener is not None and callable(getattr(listener, "snapshot", None)):
        return listener
    if listener is None and not quorum.snapshots_enabled:
        return LogOnlySnapshots()
    raise RaftcoreError(
        f"{prefix} snapshots are configured (snapshot_min_records, snapshot_min_bytes or "
        "snapshot_interval_ms) but the node has nothing to snapshot: give it a state_machine, "
        "or a listener with snapshot(writer)"
    )


class LogOnlySnapshots:
    """The snapshots of a node that only replicates the log: no state, so a snapshot is its
    header (the voter set) alone, at what the core had read when it came due. It marks where
    the log may start (DeleteRecords, retention); a replica that fetches it has nothing to
    load, and the records below it are gone, as a Kafka topic's are after retention."""

    def snapshot(self, writer: Any) -> None:
        writer.start(writer.wanted_end)


class _Stopped(RaftcoreError):
    """The node stops: the snapshot in progress is given up."""


class _Exists(RaftcoreError):
    """The core already holds a snapshot at that offset: nothing to write."""


class _LoopWriter:
    """The writer handed to ``source.snapshot``: ``start`` asks the core (on the loop) for the
    log's writer; ``append`` writes into it on the calling thread."""

    def __init__(self, owner: Snapshotter, wanted_end: int) -> None:
        self.owner = owner
        # where a source with no state of its own puts the snapshot: the log start asked for
        # (DeleteRecords, retention, the leader's log start), else what the core had read
        self.wanted_end = wanted_end
        self.log_writer: Any = None

    def start(self, end_offset: int) -> None:
        if self.log_writer is not None:
            raise RaftcoreError(f"snapshot writer started twice ({end_offset})")
        owner = self.owner
        future = asyncio.run_coroutine_threadsafe(owner._create(end_offset), owner.loop)
        self.log_writer = future.result()

    def append(self, records: Sequence[Any]) -> None:
        if self.log_writer is None:
            raise RaftcoreError("snapshot writer: append before start(end_offset)")
        if self.owner.closing:
            raise _Stopped(f"{self.owner.prefix} the node is stopping")
        self.log_writer.append(records)


class Snapshotter:
    """Takes the node's snapshots, one at a time, off the loop. See the module docstring."""

    def __init__(
        self,
        source: Any,
        core: RaftCore,
        run: Callable[[Callable[[int], Output]], None],
        *,
        wait_applied: Callable[[int], Any] | None,
        prefix: str = "",
    ) -> None:
        """``run(step)`` drives one step of the core on the loop (the node's ``_run``);
        ``wait_applied(offset)`` waits until the state machine applied up to ``offset`` (None
        for a listener, which is up to date on the loop)."""
        self.source = source
        self.core = core
        self.run = run
        self.wait_applied = wait_applied
        self.prefix = prefix
        self.loop = asyncio.get_running_loop()
        self.closing = False
        self._task: asyncio.Task[None] | None = None
        self._writing = False  # the worker thread has the snapshot (not cancellable)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"snapshot{prefix}")
        self._retry_at = 0.0
        self._retry_handle: asyncio.TimerHandle | None = None
        self.taken = 0
        self.failed = 0
        self.last_error: BaseException | None = None
        self.on_taken: Callable[[float], None] | None = None  # seconds a snapshot took

    @staticmethod
    def _now() -> int:
        return int(time.monotonic() * 1000)

    @property
    def running(self) -> bool:
        return self._task is not None

    def due(self) -> None:
        """The core raised ``snapshot_due``: start one, unless one runs or backs off."""
        if self._task is not None or self.closing or self._now() < self._retry_at:
            return
        read_to = self.core.listener_next_offset
        wanted = self.core.snapshots.wanted_end()
        self._task = asyncio.ensure_future(self._take(read_to, wanted))

    async def _take(self, read_to: int, wanted_end: int) -> None:
        writer = _LoopWriter(self, wanted_end)
        try:
            if self.wait_applied is not None:
                await self.wait_applied(read_to)
            if self.closing:
                return
            self._writing = True
            started = time.perf_counter()
            snapshot_id = await self.loop.run_in_executor(self._executor, self._write, writer)
        except BaseException as exc:  # every failure (and a cancel) gives the snapshot up
            self._give_up(writer, exc)
            return
        finally:
            self._task = None
            self._writing = False
        self.taken += 1
        if self.on_taken is not None:
            self.on_taken(time.perf_counter() - started)
        logger.info("%s took snapshot %r", self.prefix, snapshot_id)
        if not self.closing:
            self.run(lambda now: self.core.snapshot_frozen(snapshot_id, now))

    def _write(self, writer: _LoopWriter) -> Any:
        """On the worker thread: the whole state into the log's writer, then freeze it."""
        self.source.snapshot(writer)
        log_writer = writer.log_writer
        if log_writer is None:
            raise RaftcoreError(
                f"{self.prefix} {type(self.source).__name__}.snapshot returned without calling "
                "writer.start(end_offset)"
            )
        if self.closing:
            raise _Stopped(f"{self.prefix} the node is stopping")
        log_writer.freeze()  # verify, fsync, rename: the snapshot exists from here on
        return log_writer.snapshot_id

    async def _create(self, end_offset: int) -> Any:
        """On the loop, for the worker thread: the core checks ``end_offset`` and gives the
        log's writer."""
        if self.closing:
            raise _Stopped(f"{self.prefix} the node is stopping")
        log_writer = self.core.create_snapshot(end_offset, self._now())
        if log_writer is None:
            raise _Exists(f"{self.prefix} the snapshot at {end_offset} exists already")
        return log_writer

    def _give_up(self, writer: _LoopWriter, exc: BaseException) -> None:
        if writer.log_writer is not None:
            try:
                writer.log_writer.abort()
            except Exception:
                logger.exception("%s aborting the snapshot's writer failed", self.prefix)
        if isinstance(exc, (_Stopped, asyncio.CancelledError)) or self.closing:
            logger.info("%s snapshot given up: the node is stopping", self.prefix)
            return
        if isinstance(exc, (_Exists, InvalidSnapshotError)):
            # Nothing new applied since the latest snapshot (control batches only), or taken
            # already: not a failure, but nothing to retry at once either.
            logger.info("%s no snapshot taken: %s", self.prefix, exc)
        elif isinstance(exc, DamagedValueError):
            # never written with a damaged value; the state machine is being rebuilt
            self.failed += 1
            self.last_error = exc
            logger.warning(
                "%s snapshot given up, retrying in %d ms: %s", self.prefix, RETRY_MS, exc
            )
        else:
            self.failed += 1
            self.last_error = exc
            logger.error(
                "%s snapshot failed, retrying in %d ms: %r",
                self.prefix,
                RETRY_MS,
                exc,
                exc_info=exc,
            )
        self._retry_at = self._now() + RETRY_MS
        self.run(self.core.snapshot_abandoned)
        self._retry_handle = self.loop.call_later(RETRY_MS / 1000, self._retry)

    def _retry(self) -> None:
        self._retry_handle = None
        if not self.closing:
            self.run(self.core.poll)  # snapshot_due again, if it still is

    async def close(self) -> None:
        """Give up the snapshot in progress (at its next append) and wait for its thread."""
        self.closing = True
        if self._retry_handle is not None:
            self._retry_handle.cancel()
        task = self._task
        if task is not None:
            if not self._writing:
                task.cancel()  # still waiting for the applier, which stops after us
            await asyncio.gather(task, return_exceptions=True)
        self._executor.shutdown(wait=True)
