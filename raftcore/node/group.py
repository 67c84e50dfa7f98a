"""A Raft group on a node: one replicated topic-partition and everything a node keeps for it.

The group binds the pure :class:`~raftcore.raft.RaftCore` to its log and its helpers: the
segmented log and its fsyncs (group commit), the timer for the core's next deadline, the
leader's appends and their verdicts, the state machine and its applier (or a listener),
snapshots, producer state, retention, the scrubber, the committed checkpoint, and the group's
:class:`~raftcore.node.partition.NodePartition` for the Kafka API. It is named by its
:class:`~raftcore.topic_partition.TopicPartition`.

What a process has once (listeners, TLS/SASL, the connections to the other nodes, metrics,
admin) belongs to the server, :class:`~raftcore.node.node.RaftNode`, which hands the group what
it needs of it: the metrics, the address book, ``send`` for the core's messages and ``fail``
for a failure the node cannot go on from. The group reads no wall clock for its core: every
step gets the time from the ``clock`` it is given (:mod:`raftcore.node.clock` on a node).

Invariant: a step of the core runs only through :meth:`RaftGroup.run`, and its output is carried
out by :meth:`RaftGroup.drive` before the next step; after a failure (:meth:`halt`) nothing more
is run.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from raftcore.errors import LostQuorumStateError, NodeFailedError, RaftcoreError
from raftcore.kafka.producer_state import ProducerStateManager
from raftcore.kafka.producer_tracker import ProducerStateTracker
from raftcore.log import SegmentedLog
from raftcore.node import fatal, reads
from raftcore.node.appends import LeaderAppends
from raftcore.node.applier import Applier, check_start_offset
from raftcore.node.committed_checkpoint import CommittedCheckpoint, read_committed_offset
from raftcore.node.config import NodeConfig
from raftcore.node.core_listener import CoreListener
from raftcore.node.core_start import start_core
from raftcore.node.data_dir import LOG_DIR, group_directory
from raftcore.node.group_commit import GroupCommit
from raftcore.node.iteration import IterationEnd
from raftcore.node.metrics import NodeMetrics
from raftcore.node.partition import NodePartition
from raftcore.node.peers import AddressBook
from raftcore.node.poll_timer import PollTimer
from raftcore.node.rebuild import StateRebuild
from raftcore.node.retention import Retention
from raftcore.node.scrubber import Scrubber
from raftcore.node.snapshotter import Snapshotter, snapshot_source
from raftcore.node.verdicts import AppendVerdicts
from raftcore.node.waiters import ChangeWaiters, Waiters
from raftcore.raft import Appended, LeaderAndEpoch, NotLeaderError, Output, RaftCore
from raftcore.raft.damage import Damage
from raftcore.raft.messages import Outbound
from raftcore.statemachine.api import StateMachine
from raftcore.topic_partition import TopicPartition

__all__ = ["RaftGroup"]


Step = Callable[[int], Output]  # one step of the core, given the time in ms


class RaftGroup:
    def __init__(
        self,
        config: NodeConfig,
        name: TopicPartition,
        *,
        prefix: str,
        metrics: NodeMetrics,
        address_book: AddressBook,
        clock: Callable[[], int],
        fail: Callable[..., None],
        listener: Any = None,
        state_machine: StateMachine | None = None,
        rng: random.Random | None = None,
        correlation_ids: Iterator[int] | None = None,
        directory: Path | None = None,
    ) -> None:
        """``fail(cause, exc, traceback=None)``: the node cannot go on (it stops, and halts
        its groups: :meth:`halt`). ``clock``: the time in ms given to every step of the core.
        ``listener`` / ``state_machine``: as :class:`~raftcore.node.node.RaftNode` takes them.
        ``correlation_ids``: the node's one source of the ids of its cores' requests (the
        groups' requests share the connections to the peers). ``directory``: where the group
        lives when it is not a partition of ``NodeConfig.topic`` (the metadata group, a topic
        created at run time: :mod:`raftcore.node.topic_dirs`; ``__consumer_offsets``'
        partitions: :mod:`raftcore.node.offsets_groups`)."""
        self.config = config
        self.name = name
        # Where the group keeps its quorum-state, and its log under LOG_DIR: the one place
        # that chooses it (data_dir.group_directory, the layout `raftcore format` writes).
        self.directory = directory or group_directory(config.data_dir, name.topic, name.partition)
        self._correlation_ids = correlation_ids
        self.prefix = prefix
        self.metrics = metrics
        self.clock = clock
        self._fail = fail
        self.listener = listener
        self.state_machine = state_machine
        self.applier: Applier | None = None
        self._snapshot_source = snapshot_source(  # checked now: a clear error, nothing opened
            prefix, config.quorum, state_machine, listener
        )
        self.snapshotter: Snapshotter | None = None
        self.rebuild: StateRebuild | None = None  # of a state machine that finds damage
        self.rng = rng or random.Random()
        self.log: SegmentedLog | None = None
        self.core: RaftCore | None = None
        self.producers = ProducerStateManager()  # current on every replica (producer_tracker)
        self.producer_tracker = ProducerStateTracker(self.producers, prefix=prefix)
        self.leader_changes = 0
        self._seen_state: Any = None  # the core's epoch state after the last step (metrics)
        self.voter_changes = ChangeWaiters()  # admin requests waiting for the core's verdict
        self.scrubber: Scrubber | None = None  # re-reads sealed segments (node.scrubber)
        # the committed offset on disk (raftcore.node.committed_checkpoint)
        self.committed_checkpoint: CommittedCheckpoint | None = None
        self.retention: Retention | None = None  # retention.ms/bytes, segment.ms (node.retention)
        self.group_commit: GroupCommit | None = None  # fsyncs, and what waits for them
        self._poll_timer: PollTimer | None = None  # for the core's next deadline
        self.verdicts = AppendVerdicts(prefix)  # the core's, on tracked appends
        self._appends: LeaderAppends | None = None  # the leader's appends, and their polls
        self.iteration_end: IterationEnd | None = None  # what waits for the end of one
        self.hw_moved = Waiters()  # woken on every step once the high watermark is known
        self._log_start_moved = Waiters()  # woken when the log start moves or the role changes
        self.reads = reads.ReadWaiters()
        self.started = False
        # set as the close begins: no step of the core runs from then on (a connection's late
        # answer must not reach a core whose log is closing)
        self.closing = False
        self.failure: NodeFailedError | None = None  # the node's, once it stops itself
        # set when the core says a stopping leader has told the voters it resigned
        self._shutdown_ready: asyncio.Future[None] | None = None
        self._committed_at_open = 0  # the checkpointed committed offset (open)
        self.partition = NodePartition(self, address_book)  # what the Kafka API sees of it

    # ---- lifecycle ---------------------------------------------------------------------------

    def open(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        directory_id: bytes | None,
        joining: bool,
        send: Callable[[TopicPartition, Outbound], None],
    ) -> tuple[Output, bytes | None]:
        """Open the log, the applier and the core: the core's first output (carried out by
        :meth:`begin`) and the directory id it runs with. ``send(name, message)`` sends what
        the core says, ``name`` this group's. On a failure everything opened is closed again
        and the error raised."""
        cfg = self.config
        self.log = log = SegmentedLog.open(self.directory / LOG_DIR, config=cfg.log)
        try:
            self.producer_tracker.attach(log)
            committed = read_committed_offset(log.directory)  # raftcore.raft.committed
        except Exception:
            log.close()
            raise
        self.group_commit = commit = GroupCommit(
            log,
            loop,
            flush=cfg.flush,
            flush_interval_ms=cfg.flush_interval_ms,
            metrics=self.metrics,
            send=functools.partial(send, self.name),
            released=self.poke,
            failed=lambda e: self._fail(f"fsync of the log failed: {fatal.describe(e)}", e),
        )
        self._poll_timer = PollTimer(loop, self.poke, clock=self.clock)
        self.iteration_end = IterationEnd(loop)
        self._appends = LeaderAppends(
            loop,
            core=self._require_core,
            drive=self.drive,
            poke=self.poke,
            poll_timer=self._poll_timer,
            iteration_end=self.iteration_end,
            verdicts=self.verdicts,
            now=self.clock,
        )
        start_offset = None
        if self.state_machine is not None:
            try:  # resume where the state machine is: never replay, never skip
                start_offset = check_start_offset(
                    self.state_machine.applied_offset, log, self.prefix
                )
            except Exception:
                log.close()
                raise
            self.applier = Applier(
                self.state_machine,
                durable_end=lambda: log.flushed_offset,
                request_flush=commit.flusher.request,
                set_paused=self._pause_listener,
                on_failure=self._state_machine_failed,
                prefix=self.prefix,
            )
            self.applier.on_restored = self.metrics.snapshot_loaded
            self.applier.start()
        try:  # the core reads the quorum-state: it decides whether it may be itself
            core, started, directory_id = start_core(
                cfg,
                log,
                directory=self.directory,
                rng=self.rng,
                listener=CoreListener(self),
                listener_start_offset=start_offset,
                directory_id=directory_id,
                joining=joining,
                prefix=self.prefix,
                committed_offset=committed,
                clock=self.clock,
                correlation_ids=self._correlation_ids,
                # the directory id is the data directory's (meta.properties): only the group
                # that lives there may renew it
                renews_directory_id=self.directory == cfg.data_dir,
            )
        except LostQuorumStateError:
            log.close()
            raise
        self.core = core
        self._committed_at_open = committed
        if self.applier is not None and hasattr(self.state_machine, "on_damaged"):
            self.rebuild = StateRebuild(
                loop,
                rewind_applier=self.applier.rewind,
                rewind_feed=lambda: self.run(core.rewind_listener),
                prefix=self.prefix,
            )
            self.state_machine.on_damaged = self.rebuild.damaged  # type: ignore[union-attr]
        if self._snapshot_source is not None:
            applier = self.applier
            self.snapshotter = Snapshotter(
                self._snapshot_source,
                core,
                self.run,
                wait_applied=None if applier is None else applier.wait_applied,
                prefix=self.prefix,
            )
            self.snapshotter.on_taken = self.metrics.snapshot_taken
        return started, directory_id

    def begin(self, started: Output) -> None:
        """Run: the fsync thread, the core's first output, then the group's background work
        (scrubbing, retention, the committed checkpoint)."""
        cfg, core, log, commit = self.config, self.core, self.log, self.group_commit
        assert core is not None and log is not None and commit is not None  # opened
        commit.start()
        self.started = True
        self.drive(started)
        self.scrubber = Scrubber(
            log,
            bytes_per_second=cfg.log_scrub_bytes_per_second,
            interval_ms=cfg.log_scrub_interval_ms,
            report=lambda damage: self.report_damage(damage, "scrubbing"),
            prefix=self.prefix,
        )
        self.scrubber.start()
        self.retention = Retention(self, cfg.retention)
        self.retention.start()
        self.committed_checkpoint = CommittedCheckpoint(
            log.directory,
            lambda: core.committed_offset,
            interval_ms=cfg.replica_high_watermark_checkpoint_interval_ms,
            written=self._committed_at_open,
            prefix=self.prefix,
        )
        self.committed_checkpoint.start()

    def begin_shutdown(self, down: Callable[[], Iterable[int]]) -> asyncio.Future[None] | None:
        """Tell the core the node stops. A leader resigns (EndQuorumEpoch to the voters; those
        ``down()`` names cannot hear it and are not waited for): the future is done once the core
        says the voters have heard (or a failure ends the wait). None for a non-leader."""
        core = self.core
        assert core is not None
        was_leader = core.is_leader()
        self._shutdown_ready = ready = asyncio.get_running_loop().create_future()
        self.run(core.begin_shutdown)
        if not was_leader:
            return None
        for peer_id in down():
            self.run(functools.partial(core.peer_unreachable, peer_id))
        return ready

    def halt(self, failure: NodeFailedError) -> None:
        """The node stops after ``failure``: no step of the core runs any more, and a stop
        waiting for the resignation waits no more."""
        self.failure = failure
        self._shutdown_is_ready()

    def stop_timers(self) -> None:
        """The first part of a close: nothing the timers, the fsync thread or the background
        work report from now on is acted on."""
        if self._poll_timer is not None:
            self._poll_timer.cancel()
        if self.group_commit is not None:
            self.group_commit.close()
        if self.scrubber is not None:
            self.scrubber.close()
        if self.retention is not None:
            self.retention.close()
        if self.committed_checkpoint is not None:
            self.committed_checkpoint.stop()

    async def close(self) -> None:
        """The rest of the close, once the connections are closed: every waiter fails, the
        state machine stops, the log closes (abandoned after a failure)."""
        self.closing = True
        if self.core is not None:
            self.voter_changes.fail_all(self.core.leader_and_epoch())
        stopped = f"{self.prefix} node stopped"
        if self.failure is not None:
            stopped = str(self.failure)
        self.reads.fail_all(RaftcoreError(stopped))
        self.verdicts.fail_all(stopped)
        if self.rebuild is not None:
            self.rebuild.close()
        if self.snapshotter is not None:
            await self.snapshotter.close()  # before the applier, which it may be waiting for
        if self.applier is not None:
            await self.applier.close()  # after the apply in progress, if any
        if self.log is not None:
            loop = asyncio.get_running_loop()
            if self.group_commit is not None:  # no fsync may run while the log closes
                await loop.run_in_executor(None, self.group_commit.flusher.join)
            if self.failure is None:
                if self.committed_checkpoint is not None:  # at a clean stop, the last one
                    await self.committed_checkpoint.close()
                await loop.run_in_executor(None, self.log.close)
            else:
                # Nothing more is written after a failure: after a failed fsync the page cache
                # may hold what never reached the disk, and a flush that then succeeds, or a
                # clean point written past it, would vouch for it. The next start recovers
                # the log from its last clean point, as after a crash.
                self.log.abandon()
        self.started = False

    # ---- state ---------------------------------------------------------------------------------

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        assert self.core is not None
        return self.core.leader_and_epoch()

    @property
    def leader_hint(self) -> LeaderAndEpoch:
        """Who clients should go to: the leader, but nobody while this node has resigned and
        no successor is known yet (:meth:`RaftCore.leader_hint`)."""
        assert self.core is not None
        return self.core.leader_hint()

    @property
    def high_watermark(self) -> int | None:
        return None if self.core is None else self.core.high_watermark

    def is_leader(self) -> bool:
        return self.core is not None and self.core.is_leader()

    def running_core(self) -> RaftCore | None:
        """The core while the group runs (started, not closing), else None."""
        return self.core if self.started and not self.closing else None

    def _require_core(self) -> RaftCore:
        if self.core is None or not self.started:
            raise RaftcoreError(f"{self.prefix} not started")
        if self.failure is not None:  # stopping: it leads nothing any more
            raise NotLeaderError(LeaderAndEpoch(None, self.core.epoch), str(self.failure))
        return self.core

    # ---- the state machine (raftcore.node.applier) ---------------------------------------------

    def _pause_listener(self, paused: bool) -> None:
        if self.core is not None:
            self.core.feed.paused = paused
            if not paused and self.started:
                self.run(self.core.poll)

    def _state_machine_failed(self, exc: BaseException) -> None:
        # the applier logged what it was applying, with the traceback; the replica stops
        applied = None if self.applier is None else self.applier.applied_offset
        self._fail(
            f"the state machine failed (applied offset {applied}): {fatal.describe(exc)}",
            exc,
            traceback=False,
        )

    # ---- appends (raftcore.node.appends) -------------------------------------------------------

    def appends(self) -> LeaderAppends:
        """The leader's appends; each of its methods asks for the running core too."""
        if self._appends is None:
            raise RaftcoreError(f"{self.prefix} not started")
        return self._appends

    async def wait_committed(self, appended: Appended, timeout_s: float | None = None) -> None:
        """Wait for the core's verdict on a tracked append (:meth:`RaftNode.wait_committed`)."""
        await self.verdicts.wait(appended, timeout_s)

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        """Wait for the high watermark to move (or ``timeout_s``)."""
        await self.hw_moved.wait(timeout_s)

    async def wait_log_start_change(self, timeout_s: float) -> None:
        """Wait for the core to say the log start offset moved, or for this replica's role to
        change (or ``timeout_s``)."""
        await self._log_start_moved.wait(timeout_s)

    # ---- driving the core ----------------------------------------------------------------------

    def drive(self, out: Output) -> None:
        """Do what the core asked: send (now or after the fsync), flush, schedule the poll."""
        commit = self.group_commit
        assert commit is not None  # opened with the log
        self.verdicts.deliver(out.completions)
        if out.shutdown_ready:
            self._shutdown_is_ready()
        if out.log_start_moved:
            self._log_start_moved.wake()
        if out.reads:
            self.reads.deliver(out.reads)
        if out.voter_changes:
            self.voter_changes.deliver(out.voter_changes)
        commit.submit(out.messages)  # now, or once the fsync covering them ran
        assert self._poll_timer is not None  # made with the group commit
        self._poll_timer.schedule(out.next_deadline)
        if out.snapshot_due and self.snapshotter is not None:
            self.snapshotter.due()
        self._after_progress()

    def run(self, step: Step) -> None:
        """Run one step of the core. Any exception out of it stops the node: a
        RaftInvariantError is a bug, never to be papered over, and anything else (a
        follower's log or the quorum-state that cannot be written) left the step half done,
        so the core's state can no longer be trusted. The core handles the failures it can
        survive itself (a leader whose log cannot be written resigns; a damaged batch is
        repaired from the leader; a snapshot download on a full disk is dropped and tried
        again)."""
        if self.failure is not None or self.closing:
            return  # stopped, or closing: nothing more is done
        try:
            self.drive(step(self.clock()))
        except Exception as exc:
            listener_offset = None if self.core is None else self.core.listener_next_offset
            self._fail(fatal.describe(exc, self.log, listener_offset), exc)

    def report_damage(self, damage: Damage, where: str) -> None:
        """A damaged batch in this group's log (raftcore.raft.damage): the core decides."""
        if self.started and self.core is not None:
            core = self.core
            self.run(lambda now: core.report_damage(damage, now, where))

    def poke(self) -> None:
        """Poll the core now (after a request to it whose outcome comes in an Output)."""
        if self.started and self.core is not None:
            self.run(self.core.poll)

    def _shutdown_is_ready(self) -> None:
        if self._shutdown_ready is not None and not self._shutdown_ready.done():
            self._shutdown_ready.set_result(None)

    def _after_progress(self) -> None:
        core = self.core
        assert core is not None
        if core.state is not self._seen_state:  # elections, for the metrics
            self.metrics.state_seen(self.name, self._seen_state, core.state)
            self._seen_state = core.state
            self._log_start_moved.wake()  # a wait for the leader's log start ends
        if self.applier is not None:
            self.applier.progress(core.listener_next_offset)
        if core.high_watermark is None:
            return
        self.hw_moved.wake()
