"""The node's state-machine driver: committed batches from the core, applied off the event loop,
in order, each once.

The core hands committed batches to the node's listener on the event loop. The applier queues
them and applies them on its own thread (one thread: applies never overlap), because an apply
can take long -- an LMDB commit with fsync takes milliseconds to tens of them -- and the loop
must go on answering fetches and heartbeats meanwhile. Batches that queued up during one apply
go into the next one together (one transaction, one fsync: group commit), up to
``max_apply_bytes``.

Rules it keeps:

- **In order, once.** The queue is taken from the front only after the apply of that part
  returned; nothing is re-queued. After each apply the state machine's ``applied_offset`` must
  be the end of what it was given, or the applier stops (a state machine that lies about its
  offset would be resumed from the wrong place on restart).
- **Durable in the log first.** A batch is applied only once the local log has fsynced it
  (``durable_end``), so a state machine that kept more than the log after a crash is
  impossible: on restart the log holds everything from the state machine's applied offset on.
  (With ``flush="interval"`` the applier asks for the fsync instead of waiting for the timer.)
- **Bounded.** More than ``max_backlog_bytes`` queued pauses the core's delivery
  (``set_paused(True)``); it resumes from where it stopped once half of it is applied.
- **A failed apply stops it.** An exception from ``apply`` (a full LMDB map, a bug, a corrupt
  record) is not skipped and not retried: the state machine's state is whatever its atomic
  apply left (nothing of the failed call), the error is kept in ``failure``, every waiter gets
  it, and ``on_failure`` stops the node -- a replica whose state stopped following its log must
  not serve reads or lead. A restart retries from the applied offset, after the cause (e.g. the
  map size) is fixed; the log still holds the batch.

``applied_offset`` here is the state machine's, moved on past control batches (which never
reach the state machine) once everything handed over has been applied; ``wait_applied(offset)``
waits for it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from raftcore.errors import RaftcoreError
from raftcore.raft.replicated_log import snapshot_log
from raftcore.statemachine.api import SnapshotReader, StateMachine, StateMachineError

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch

__all__ = ["Applier", "check_start_offset"]

logger = logging.getLogger(__name__)

MAX_BACKLOG_BYTES = 64 << 20
MAX_APPLY_BYTES = 16 << 20


def check_start_offset(applied_offset: int, log: Any, prefix: str = "") -> int:
    """Where a state machine resumes: its applied offset, if the log can continue from it.

    Beyond the log's end: the state machine holds records the log lost (or the log is not the
    one it was built from); below the log start offset: the records it needs next are gone
    from the log, and only a snapshot can bring it on -- the core's listener feed loads the
    latest one (``handle_load_snapshot``) if the log has one."""
    if applied_offset < 0:
        raise StateMachineError(f"{prefix} the state machine's applied offset {applied_offset} < 0")
    if applied_offset > log.end_offset:
        raise StateMachineError(
            f"{prefix} the state machine has applied up to offset {applied_offset}, beyond the "
            f"log's end {log.end_offset}: the log lost records the state machine holds, or "
            "belongs to another state; refusing to start"
        )
    snapshots = snapshot_log(log)
    latest = None if snapshots is None else snapshots.latest_snapshot_id()
    if applied_offset < log.log_start_offset and latest is None:
        raise StateMachineError(
            f"{prefix} the state machine has applied up to offset {applied_offset}, but the "
            f"log starts at {log.log_start_offset}: the records in between are gone; restore "
            "a snapshot first"
        )
    return applied_offset


class EmptySnapshot:
    """No state, as of offset 0: what a rebuild starts from when no snapshot is loaded."""

    end_offset = 0

    def __iter__(self) -> Iterator[list[tuple[bytes, bytes | None]]]:
        return iter(())


def _close(reader: Any) -> None:
    close = getattr(reader, "close", None)
    if close is not None:
        close()


class Applier:
    """Applies committed batches to ``state_machine`` on its own thread. See the module
    docstring. ``durable_end`` gives the log's fsynced end; ``request_flush`` asks for an fsync;
    ``set_paused`` holds or resumes the core's delivery; ``on_failure`` is told once of a
    failed apply."""

    def __init__(
        self,
        state_machine: StateMachine,
        *,
        durable_end: Callable[[], int],
        request_flush: Callable[[], None],
        set_paused: Callable[[bool], None],
        on_failure: Callable[[BaseException], None],
        prefix: str = "",
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
        max_apply_bytes: int = MAX_APPLY_BYTES,
    ) -> None:
        self.state_machine = state_machine
        self.prefix = prefix
        self._durable_end = durable_end
        self._request_flush = request_flush
        self._set_paused = set_paused
        self._on_failure = on_failure
        self.max_backlog_bytes = max_backlog_bytes
        self.max_apply_bytes = max_apply_bytes
        self._queue: deque[CommittedBatch] = deque()
        self._queued_bytes = 0
        self._restore: SnapshotReader | None = None  # a snapshot to load before the queue
        self._paused = False
        self._applied = state_machine.applied_offset
        self._delivered_end = self._applied  # the core's listener offset (control batches too)
        self._busy = False
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tiebreak = itertools.count()
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.failure: BaseException | None = None
        self.applies = 0  # calls of state_machine.apply
        self.batches_applied = 0
        self.on_restored: Callable[[float], None] | None = None  # seconds a restore took

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"apply{self.prefix}")
        self._task = asyncio.ensure_future(self._run())

    # ---- from the core, on the loop --------------------------------------------------------

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        if self.failure is not None or self._closing:
            return  # stopped: the node is closing; the log keeps them for the next start
        self._queue.extend(batches)
        self._queued_bytes += sum(b.size_in_bytes for b in batches)
        if not self._paused and self._queued_bytes > self.max_backlog_bytes:
            self._paused = True
            self._set_paused(True)
        self._wake.set()

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        """Load a snapshot (KIP-630; the core's listener feed asks when the log no longer holds
        the records after the applied offset): ``restore(reader)`` on the applier thread, after
        the apply in progress and before the batches handed over after this call. Queued batches
        below the snapshot's end are dropped: the snapshot holds their effect. The applier closes
        the reader (if it has ``close``) once restored."""
        if self.failure is not None or self._closing:
            return
        end = reader.end_offset
        if self._restore is not None:  # a newer snapshot replaces one not begun yet
            _close(self._restore)
        kept = [b for b in self._queue if b.last_offset >= end]
        self._queued_bytes = sum(b.size_in_bytes for b in kept)
        self._queue = deque(kept)
        self._restore = reader
        self._wake.set()  # (resuming delivery waits for the run loop: we are inside the core)

    def rewind(self) -> None:
        """The state machine is rebuilt (:mod:`raftcore.node.rebuild`): what is queued is
        dropped (the core's feed hands it over again), and the state is first reset to an
        empty one at offset 0, on the applier thread after the apply in progress. The feed
        then hands over the latest snapshot, which replaces the reset, and the batches after
        it."""
        if self.failure is not None or self._closing:
            return
        self._queue.clear()
        self._queued_bytes = 0
        if self._restore is not None:
            _close(self._restore)
        self._restore = EmptySnapshot()
        if self._paused:
            self._paused = False
            self._set_paused(False)
        self._wake.set()

    def progress(self, delivered_end: int) -> None:
        """The core's listener offset after a step (it also passes control batches), and a
        chance to apply what the last fsync made durable."""
        if delivered_end != self._delivered_end:
            self._delivered_end = delivered_end
            self._notify()
        if self._queue:
            self._wake.set()

    # ---- state ---------------------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """Everything below it is applied (control batches included, once the data batches
        handed over before them are)."""
        if (
            self._queue
            or self._busy
            or self._restore is not None
            or self.failure is not None
            or self._closing
        ):
            return self._applied  # (once stopped, batches handed over may have been dropped)
        return max(self._applied, self._delivered_end)

    @property
    def backlog(self) -> int:
        """Batches queued, not yet applied."""
        return len(self._queue)

    async def wait_applied(self, offset: int, timeout_s: float | None = None) -> None:
        """Return once everything below ``offset`` is applied; raise StateMachineError if
        applying failed, RaftcoreError if the node stops first, TimeoutError after
        ``timeout_s``."""
        self._raise_if_failed()
        if self.applied_offset >= offset:
            return
        if self._closing:
            raise RaftcoreError(f"{self.prefix} node stopped before offset {offset} was applied")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._tiebreak), fut))
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self._stopped_error()

    def _stopped_error(self) -> RaftcoreError:
        if self.failure is None:
            return RaftcoreError(f"{self.prefix} node stopped")
        error = StateMachineError(
            f"{self.prefix} the state machine failed and stopped at offset {self._applied}: "
            f"{self.failure!r}"
        )
        error.__cause__ = self.failure
        return error

    def _notify(self) -> None:
        applied = self.applied_offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= applied:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)

    # ---- applying, on the applier's thread -----------------------------------------------------

    def _take(self) -> list[CommittedBatch]:
        """The queued batches the log has made durable, from the front, up to
        ``max_apply_bytes`` (at least one)."""
        durable = self._durable_end()
        queue = self._queue
        taken: list[CommittedBatch] = []
        size = 0
        while queue and queue[0].last_offset < durable:
            if taken and size + queue[0].size_in_bytes > self.max_apply_bytes:
                break
            batch = queue.popleft()
            size += batch.size_in_bytes
            taken.append(batch)
        self._queued_bytes -= size
        return taken

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            while (self._queue or self._restore is not None) and not self._closing:
                if self._restore is not None:
                    if not await self._load(loop, self._restore):
                        return
                    self._maybe_resume()
                    continue
                batches = self._take()
                if not batches:
                    self._request_flush()  # wait for the log's fsync (progress() wakes us)
                    break
                self._busy = True
                try:
                    await loop.run_in_executor(self._executor, self._apply, batches)
                except Exception as exc:
                    self._busy = False
                    self._fail(
                        exc, f"apply offsets {batches[0].first_offset}..{batches[-1].last_offset}"
                    )
                    return
                self._busy = False
                self._applied = batches[-1].last_offset + 1
                self.applies += 1
                self.batches_applied += len(batches)
                self._maybe_resume()
                self._notify()
            self._notify()

    def _maybe_resume(self) -> None:
        if self._paused and self._queued_bytes <= self.max_backlog_bytes // 2:
            self._paused = False
            self._set_paused(False)

    async def _load(self, loop: asyncio.AbstractEventLoop, reader: SnapshotReader) -> bool:
        self._restore = None
        self._busy = True
        started = time.perf_counter()
        try:
            await loop.run_in_executor(self._executor, self._restore_from, reader)
        except Exception as exc:
            self._busy = False
            self._fail(exc, f"restore snapshot {reader.end_offset}")
            return False
        self._busy = False
        if self.on_restored is not None:
            self.on_restored(time.perf_counter() - started)
        self._applied = reader.end_offset
        logger.info("%s restored a snapshot: applied offset %d", self.prefix, self._applied)
        self._notify()
        return True

    def _restore_from(self, reader: SnapshotReader) -> None:
        try:
            self.state_machine.restore(reader)
        finally:
            _close(reader)
        if self.state_machine.applied_offset != reader.end_offset:
            raise StateMachineError(
                f"{self.prefix} after restoring snapshot {reader.end_offset} the state machine "
                f"says its applied offset is {self.state_machine.applied_offset}"
            )

    def _apply(self, batches: list[CommittedBatch]) -> None:
        sm = self.state_machine
        sm.apply(batches)
        end = batches[-1].last_offset + 1
        if sm.applied_offset != end:
            raise StateMachineError(
                f"{self.prefix} after applying batches {batches[0].base_offset}..{end - 1} the "
                f"state machine says its applied offset is {sm.applied_offset}, not {end}"
            )

    def _fail(self, exc: BaseException, what: str) -> None:
        self.failure = exc
        logger.error(  # the node's one CRITICAL line follows (on_failure)
            "%s the state machine failed to %s (applied offset stays %d); applying stops and "
            "the node stops",
            self.prefix,
            what,
            self._applied,
            exc_info=exc,
        )
        self._fail_waiters()
        self._on_failure(exc)

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(self._stopped_error())
                fut.exception()  # retrieved: the waiter may have gone

    # ---- stopping ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop after the apply in progress (never in the middle of one); queued batches stay
        in the log for the next start."""
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            await asyncio.gather(task, return_exceptions=True)
        self._fail_waiters()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
