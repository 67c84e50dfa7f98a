"""RaftNode: one replica of a raftcore cluster in one asyncio loop.

It binds the pure :class:`~raftcore.raft.RaftCore` to the world: the segmented log and the
quorum-state file in the data directory, TCP (Kafka framing) to the other nodes (found in the
address book, :mod:`raftcore.node.peers`) and from clients, a timer for the core's next
deadline, and a thread that fsyncs the log off the event loop. Messages the core marks
``after_flush`` wait for the fsync that covers them; appends that arrive during an fsync are
covered by the next one (group commit).

Embedding API::

    node = RaftNode(NodeConfig(node_id=1, voters=..., data_dir=..., cluster_id=...))
    await node.start()
    first, last = await node.append([(b"key", b"value")], wait=True)  # committed, or raises
    await node.stop()                                        # resigns gracefully if leading

``append(..., wait=True)`` returns once the core says the records are committed in the epoch
that appended them, and raises :class:`NotLeaderError` (naming the new leader) as soon as this
node stops leading that epoch: the core decides (:mod:`raftcore.raft.pending`), the node only
hands its verdict to the waiting caller.

A node that cannot go on stops itself: a step of the core that raised (a follower's log or
the quorum-state that cannot be written, a broken invariant), a failed fsync, a failed state
machine. A damaged batch in its log is not such a failure: the core never serves it and
repairs it from the leader (:mod:`raftcore.raft.damage`, the :class:`Scrubber`). A node that
stops logs one CRITICAL line naming the cause, closes everything without writing to its log
again, and :meth:`RaftNode.wait_closed` raises :class:`~raftcore.errors.NodeFailedError` with
that line.
An embedder awaits it beside its own work and treats it as ``raftcore node`` does, which exits
with status 1 (:mod:`raftcore.node.runner`)::

    try:
        await node.wait_closed()  # returns after node.stop(); raises if the node failed
    except NodeFailedError:
        await node.stop()  # waits for the close the failure began
        raise

A leader whose log refuses an append (a full disk) is not stopped: the core resigns
(:class:`~raftcore.raft.LogWriteError`), a voter that can write takes over, and this node goes
on as a follower if its disk takes writes again by then, or stops at its first write that
fails (docs/cluster.md, "When a disk fails").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any

from raftcore.errors import LostQuorumStateError, NodeFailedError, RaftcoreError
from raftcore.kafka.producer_ids import ProducerIdSource
from raftcore.kafka.producer_state import ProducerStateManager
from raftcore.kafka.producer_tracker import ProducerStateTracker
from raftcore.log import SegmentedLog
from raftcore.node import admin, committed_reads, fatal, forwarding, reads
from raftcore.node.admin import AutoJoiner, ChangeWaiters
from raftcore.node.appends import LeaderAppends
from raftcore.node.applier import Applier, check_start_offset
from raftcore.node.clock import now_ms
from raftcore.node.committed_checkpoint import CommittedCheckpoint, read_committed_offset
from raftcore.node.config import NodeConfig
from raftcore.node.connection_limits import ConnectionLimits, RequestBudget
from raftcore.node.connection_timeouts import ConnectionTimeouts
from raftcore.node.core_listener import CoreListener
from raftcore.node.core_start import start_core
from raftcore.node.data_dir import (
    LOG_DIR,
    check_meta_properties,
)
from raftcore.node.group_commit import GroupCommit
from raftcore.node.iteration import IterationEnd
from raftcore.node.listeners import open_node_listener_warning
from raftcore.node.messaging import Messaging
from raftcore.node.metrics import NodeMetrics
from raftcore.node.metrics_http import MetricsServer, serve_metrics
from raftcore.node.partition import kafka_broker
from raftcore.node.peers import SWEEP_EVERY_S, AddressBook, Peers
from raftcore.node.poll_timer import PollTimer
from raftcore.node.rebuild import StateRebuild
from raftcore.node.retention import Retention
from raftcore.node.scrubber import Scrubber
from raftcore.node.snapshotter import Snapshotter, snapshot_source
from raftcore.node.verdicts import AppendVerdicts
from raftcore.node.waiters import Waiters
from raftcore.raft import (
    Appended,
    LeaderAndEpoch,
    NotLeaderError,
    Output,
    RaftCore,
)
from raftcore.raft.damage import Damage
from raftcore.raft.voters import directory_id_text
from raftcore.records import Record
from raftcore.security import tls
from raftcore.security.sasl import SaslAuthenticator
from raftcore.statemachine.api import StateMachine

__all__ = ["RaftNode"]

logger = logging.getLogger(__name__)


class RaftNode:
    def __init__(
        self,
        config: NodeConfig,
        *,
        listener: Any = None,
        state_machine: StateMachine | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``listener`` gets committed batches on the loop, from the log start
        (:class:`raftcore.raft.Listener`); a ``state_machine`` gets them on its own thread,
        from its applied offset (:mod:`raftcore.statemachine`). One or the other."""
        if listener is not None and state_machine is not None:
            raise ValueError("a node drives one listener: give listener= or state_machine=")
        self.config = config
        self.listener = listener
        self.state_machine = state_machine
        self.applier: Applier | None = None
        self.prefix = f"[node {config.node_id}]"
        self._snapshot_source = snapshot_source(  # checked now: a clear error, nothing opened
            self.prefix, config.quorum, state_machine, listener
        )
        self.snapshotter: Snapshotter | None = None
        self.rebuild: StateRebuild | None = None  # of a state machine that finds damage
        self.rng = rng or random.Random()
        self.log: SegmentedLog | None = None
        self.core: RaftCore | None = None
        self.producers = ProducerStateManager()  # current on every replica (producer_tracker)
        self.producer_tracker = ProducerStateTracker(self.producers, prefix=self.prefix)
        self.leader_changes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[Any] = []  # asyncio.Server or TlsServer: one, or client and node
        # where the other nodes listen, and the connections to them (raftcore.node.peers)
        self.address_book = AddressBook(config)
        self.peers: Peers | None = None
        self.directory_id: bytes | None = None  # this replica's (meta.properties), once started
        self.voter_changes = ChangeWaiters()  # admin requests waiting for the core's verdict
        self._auto_join = AutoJoiner(self) if config.auto_join else None
        self._housekeeping: asyncio.Task[None] | None = None
        self.scrubber: Scrubber | None = None  # re-reads sealed segments (node.scrubber)
        # the committed offset on disk (raftcore.node.committed_checkpoint)
        self.committed_checkpoint: CommittedCheckpoint | None = None
        self.retention: Retention | None = None  # retention.ms/bytes, segment.ms (node.retention)
        self._group_commit: GroupCommit | None = None  # fsyncs, and what waits for them
        self._poll_timer: PollTimer | None = None  # for the core's next deadline
        self._verdicts = AppendVerdicts(self.prefix)  # the core's, on tracked appends
        self._appends: LeaderAppends | None = None  # the leader's appends, and their polls
        self.iteration_end: IterationEnd | None = None  # what waits for the end of one
        self._hw_moved = Waiters()  # woken on every step once the high watermark is known
        self._log_start_moved = Waiters()  # woken when the log start moves or the role changes
        self._started = False
        self._stopping = False
        self._closing: asyncio.Future[None] | None = None
        # set when the core says a stopping leader has told the voters it resigned
        self._shutdown_ready: asyncio.Future[None] | None = None
        self.failure: NodeFailedError | None = None  # why it stopped itself (wait_closed)
        self._ended: asyncio.Future[None] | None = None  # done when it stops running
        self._reads = reads.ReadWaiters()
        self.producer_ids = ProducerIdSource(config.node_id)
        self.metrics = NodeMetrics(self)  # docs/metrics.md
        self.kafka = kafka_broker(self)  # what the Kafka API sees of the node (raftcore.kafka)
        self.metrics_server: MetricsServer | None = None
        self.metrics_address: tuple[str, int] | None = None  # where they are served
        # bound by the runner before anything is written (metrics_http.bind_metrics), or None
        self.metrics_socket: socket.socket | None = None
        # SASL logins on the listener (None without SASL): reads the users file now
        self.sasl = SaslAuthenticator.for_node(config, self.prefix)
        # the connections and the messages on them, within their bounds (raftcore.node.messaging)
        self.messaging = Messaging(
            config,
            prefix=self.prefix,
            address_book=self.address_book,
            metrics=self.metrics,
            kafka=self.kafka,
            sasl=self.sasl,
            running_core=self.running_core,
            run=self._run,
            admin_handle=lambda header, body: admin.handle(self, header, body),
        )

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(
        self,
        *,
        listen_socket: socket.socket | None = None,
        node_listen_socket: socket.socket | None = None,
    ) -> None:
        """Open the data directory and the log, connect to the peers, listen. ``listen_socket``
        / ``node_listen_socket``: sockets already bound to the listen address and the node
        listener's (:mod:`raftcore.node.preflight`)."""
        cfg = self.config
        server_tls = peer_tls = None
        if cfg.security.uses_tls:  # before anything is opened: a ValueError naming the file
            server_tls = tls.server_context(cfg.security)
            peer_tls = tls.peer_context(cfg.security)
        self._loop = asyncio.get_running_loop()
        identity = check_meta_properties(cfg)  # formatted, and for this node: or refused
        self.directory_id = identity.directory_id
        self.log = SegmentedLog.open(cfg.data_dir / LOG_DIR, config=cfg.log)
        try:
            self.producer_tracker.attach(self.log)
            committed = read_committed_offset(self.log.directory)  # raftcore.raft.committed
        except Exception:
            self.log.close()
            raise
        self._group_commit = commit = GroupCommit(
            self.log,
            self._loop,
            flush=cfg.flush,
            flush_interval_ms=cfg.flush_interval_ms,
            metrics=self.metrics,
            send=self.messaging.send,
            released=self.poke,
            failed=lambda e: self._fail(f"fsync of the log failed: {fatal.describe(e)}", e),
            name=f"raftcore-fsync-{cfg.node_id}",
        )
        self._poll_timer = PollTimer(self._loop, self.poke)
        self.iteration_end = IterationEnd(self._loop)
        self._appends = LeaderAppends(
            self._loop,
            core=self._require_core,
            drive=self._drive,
            poke=self.poke,
            poll_timer=self._poll_timer,
            iteration_end=self.iteration_end,
            verdicts=self._verdicts,
        )
        start_offset = None
        if self.state_machine is not None:
            try:  # resume where the state machine is: never replay, never skip
                start_offset = check_start_offset(
                    self.state_machine.applied_offset, self.log, self.prefix
                )
            except Exception:
                self.log.close()
                raise
            log = self.log
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
            core, started, self.directory_id = start_core(
                cfg,
                self.log,
                rng=self.rng,
                listener=CoreListener(self),
                listener_start_offset=start_offset,
                directory_id=self.directory_id,
                joining=identity.joins,
                prefix=self.prefix,
                committed_offset=committed,
            )
        except LostQuorumStateError:
            self.log.close()
            raise
        self.core = core
        self.address_book.voters = lambda: core.voter_set
        if self.applier is not None and hasattr(self.state_machine, "on_damaged"):
            self.rebuild = StateRebuild(
                self._loop,
                rewind_applier=self.applier.rewind,
                rewind_feed=lambda: self._run(core.rewind_listener),
                prefix=self.prefix,
            )
            self.state_machine.on_damaged = self.rebuild.damaged  # type: ignore[union-attr]
        if self._snapshot_source is not None:
            applier = self.applier
            self.snapshotter = Snapshotter(
                self._snapshot_source,
                core,
                self._run,
                wait_applied=None if applier is None else applier.wait_applied,
                prefix=self.prefix,
            )
            self.snapshotter.on_taken = self.metrics.snapshot_taken
        self.peers = Peers(
            self.address_book,
            self.prefix,
            self.messaging.peer_callbacks,
            tls_context=peer_tls,
            login=None if self.sasl is None else self.sasl.peer_login,
        )
        self._servers = await self.messaging.listen(
            self.peers, server_tls, listen_socket, node_listen_socket
        )
        if cfg.metrics_port is not None:  # a port in use closes all this and fails the start
            try:
                self.metrics_server = await serve_metrics(self)
            except RaftcoreError:
                await self._close()
                raise
        self._ended = self._loop.create_future()
        commit.start()
        self._started = True
        self._drive(started)
        self._housekeeping = asyncio.ensure_future(self._housekeeping_loop())
        self.scrubber = Scrubber(
            self.log,
            bytes_per_second=cfg.log_scrub_bytes_per_second,
            interval_ms=cfg.log_scrub_interval_ms,
            report=lambda damage: self.report_damage(damage, "scrubbing"),
            prefix=self.prefix,
        )
        self.scrubber.start()
        self.retention = Retention(self, cfg.retention)
        self.retention.start()
        self.committed_checkpoint = CommittedCheckpoint(
            self.log.directory,
            lambda: core.committed_offset,
            interval_ms=cfg.replica_high_watermark_checkpoint_interval_ms,
            written=committed,
            prefix=self.prefix,
        )
        self.committed_checkpoint.start()
        open_warning = open_node_listener_warning(cfg)
        if open_warning is not None:
            logger.warning("%s %s", self.prefix, open_warning)
        logger.info(
            "%s listening on %s://%s%s, directory id %s, voters %r (kraft.version %d), log %s",
            self.prefix,
            cfg.security.protocol,
            cfg.listen,
            "" if cfg.node_listen is None else f" (clients), {cfg.node_listen} (nodes)",
            directory_id_text(self.directory_id),
            core.voter_set,
            core.kraft_version,
            self.log,
        )

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Stop: a leader resigns first (EndQuorumEpoch to the voters), then everything
        closes. Waits at most ``timeout_s`` for the resignation to be told. After a failure
        (:attr:`failure`), waits for the close the failure began."""
        if self._closing is not None:  # closing already (a failure, or another stop)
            if not self._closing.done():
                await asyncio.shield(self._closing)
            return
        if not self._started or self._stopping:
            return
        self._stopping = True
        core = self.core
        assert core is not None
        was_leader = core.is_leader()
        assert self._loop is not None
        self._shutdown_ready = ready = self._loop.create_future()
        self._run(core.begin_shutdown)
        if was_leader and self.peers is not None:
            # A voter down now cannot hear the resignation: not waited for (a lone leader
            # stops at once). One that goes down meanwhile is told by its refused reconnect.
            for peer_id in self.peers.down():
                self._run(lambda now, peer_id=peer_id: core.peer_unreachable(peer_id, now))
        if was_leader:  # the core says when the voters have heard (a failure ends it, too)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        if self._closing is None:
            # awaited unshielded: a caller that gives up (cancelled) cancels the close, too
            self._closing = asyncio.ensure_future(self._close())
            await self._closing
        elif not self._closing.done():  # a failure began it meanwhile
            await asyncio.shield(self._closing)

    async def wait_closed(self) -> None:
        """Wait until the node stops running: return once :meth:`stop` has closed it; raise
        :class:`~raftcore.errors.NodeFailedError` (its message the CRITICAL line the node
        logged, ``__cause__`` the error) as soon as it stops itself after a failure it cannot
        go on from. The close that failure began goes on; ``await node.stop()`` waits for
        it. Returns at once on a node never started."""
        if self._ended is not None:
            await asyncio.shield(self._ended)

    async def _close(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.close()
        if self._poll_timer is not None:
            self._poll_timer.cancel()
        if self._group_commit is not None:
            self._group_commit.close()  # nothing it reports from now on is acted on
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self.scrubber is not None:
            self.scrubber.close()
        if self.retention is not None:
            self.retention.close()
        if self.committed_checkpoint is not None:
            self.committed_checkpoint.stop()
        if self._auto_join is not None:
            await self._auto_join.close()
        for server in self._servers:
            server.close()
        await self.messaging.close()
        if self.peers is not None:
            await self.peers.close()
        if self.core is not None:
            self.voter_changes.fail_all(self.core.leader_and_epoch())
        stopped = f"{self.prefix} node stopped"
        if self.failure is not None:
            stopped = str(self.failure)
        self._reads.fail_all(RaftcoreError(stopped))
        self._verdicts.fail_all(stopped)
        if self.rebuild is not None:
            self.rebuild.close()
        if self.snapshotter is not None:
            await self.snapshotter.close()  # before the applier, which it may be waiting for
        if self.applier is not None:
            await self.applier.close()  # after the apply in progress, if any
        if self.log is not None:
            loop = asyncio.get_running_loop()
            if self._group_commit is not None:  # no fsync may run while the log closes
                await loop.run_in_executor(None, self._group_commit.flusher.join)
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
        self._started = False
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    # ---- the connections (raftcore.node.messaging) ---------------------------------------------

    @property
    def limits(self) -> ConnectionLimits:
        return self.messaging.limits

    @property
    def timeouts(self) -> ConnectionTimeouts:
        return self.messaging.timeouts

    @property
    def request_budget(self) -> RequestBudget:
        return self.messaging.request_budget

    async def request_peer(
        self, peer_id: int, api_key: int, version: int, body: Any, timeout_s: float
    ) -> Any:
        """Send the node's own request to ``peer_id``; the answer's body (ConnectionError,
        TimeoutError): :meth:`Messaging.request_peer`."""
        return await self.messaging.request_peer(peer_id, api_key, version, body, timeout_s)

    def metrics_text(self) -> bytes:
        """The node's metrics in Prometheus' text format (docs/metrics.md), for an embedder
        that serves them itself. Call it on the node's event loop."""
        return self.metrics.text()

    # ---- state ---------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.config.node_id

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

    # ---- the state machine (raftcore.node.applier) ---------------------------------------------

    @property
    def applied_offset(self) -> int | None:
        """Everything committed below it is applied to the state machine (None without one)."""
        return None if self.applier is None else self.applier.applied_offset

    async def wait_applied(self, offset: int, timeout_s: float | None = None) -> None:
        """Wait until the state machine has applied everything below ``offset``."""
        if self.applier is None:
            raise RaftcoreError(f"{self.prefix} no state machine")
        await self.applier.wait_applied(offset, timeout_s)

    async def read_index(self, timeout_s: float = 5.0) -> int:
        """The offset a linearizable read waits for (leader only: see :mod:`.reads`)."""
        return await reads.read_index(self, self._reads, timeout_s)

    async def linearizable_read_index(self, timeout_s: float = 5.0) -> int:
        """The offset a linearizable read waits for, on any replica: the leader's read index,
        asked of it when this node does not lead (:func:`.reads.read_index_anywhere`)."""
        return await reads.read_index_anywhere(self, timeout_s)

    def _pause_listener(self, paused: bool) -> None:
        if self.core is not None:
            self.core.feed.paused = paused
            if not paused and self._started:
                self._run(self.core.poll)

    def _state_machine_failed(self, exc: BaseException) -> None:
        # the applier logged what it was applying, with the traceback; the replica stops
        applied = None if self.applier is None else self.applier.applied_offset
        self._fail(
            f"the state machine failed (applied offset {applied}): {fatal.describe(exc)}",
            exc,
            traceback=False,
        )

    # ---- appends -------------------------------------------------------------------------------

    async def append(self, records: Iterable[Any], *, wait: bool = False) -> Appended:
        """Append one batch of records (leader only; NotLeaderError names the leader). Returns
        the :class:`Appended` (it unpacks as ``first, last``). With ``wait``, return once it is
        committed in its epoch; NotLeaderError if leadership of that epoch ends first.

        The calls made in one loop iteration are written together, as one batch
        (:mod:`raftcore.node.append_group`); each still gets its own offsets, consecutive, and
        its own verdict."""
        batch = list(records)
        if not batch:
            raise ValueError("append takes at least one record")
        return await self._leader_appends().append(batch, wait)

    async def append_tracked(self, records: Iterable[Any]) -> Appended:
        """Append one batch (leader only; NotLeaderError names the leader) without waiting:
        the caller then :meth:`wait_committed` for its verdict."""
        batch = list(records)
        if not batch:
            raise ValueError("append takes at least one record")
        return await self._leader_appends().append_tracked(batch)

    async def write(
        self, records: Iterable[Any], *, timeout_s: float = 10.0, forward: bool = True
    ) -> Appended:
        """Commit one batch of records from any replica: appended here when this node leads,
        else forwarded to the leader (:mod:`raftcore.node.forwarding`); returns once it is
        committed. ``forward=False`` refuses instead (NotLeaderError names the leader).
        TimeoutError after ``timeout_s``."""
        batch = list(records)
        if not batch:
            raise ValueError("write takes at least one record")
        return await forwarding.write(self, batch, timeout_s, forward)

    async def read(
        self,
        from_offset: int,
        max_bytes: int = committed_reads.DEFAULT_MAX_BYTES,
        *,
        linearizable: bool = False,
        timeout_s: float = 5.0,
    ) -> list[Record]:
        """Committed records of this replica's log from ``from_offset`` (whole batches up to
        ``max_bytes``, at least one; control records skipped); empty at the committed end.
        ``linearizable``: first the leader's read index (on any replica, see
        :mod:`raftcore.node.committed_reads`). OffsetOutOfRangeError names the log start."""
        return await committed_reads.read(
            self, from_offset, max_bytes, linearizable=linearizable, timeout_s=timeout_s
        )

    def records(self, from_offset: int = 0) -> AsyncIterator[Record]:
        """Every committed record from ``from_offset`` on, as this replica learns it is
        committed; ends with RaftcoreError when the node stops."""
        return committed_reads.records(self, from_offset)

    def append_batches(self, batches: Any, *, track: bool = True, checked: Any = None) -> Appended:
        """Append producer-built batches (leader only), as Produce does (``checked``: their
        scan, made when their CRCs and records were validated). With ``track``, the caller
        must then :meth:`wait_committed` for its verdict."""
        return self._leader_appends().append_batches(batches, track, checked)

    def append_batches_in_parts(
        self, batches: Any, checked: Any, counts: list[int]
    ) -> list[Appended]:
        """Append several producers' batches in one write (a Produce group,
        :mod:`raftcore.kafka.produce_group`): one tracked append for the core, cut into
        consecutive parts of ``counts`` records, each with its own verdict to wait for."""
        return self._leader_appends().append_batches_in_parts(batches, checked, counts)

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        """Track records already in the leader's log (a retried idempotent batch), as if just
        appended: the caller must then :meth:`wait_committed` for the same verdict."""
        return self._leader_appends().watch(first_offset, last_offset)

    def _leader_appends(self) -> LeaderAppends:
        if self._appends is None:  # each of its methods asks for the running core too
            raise RaftcoreError(f"{self.prefix} not started")
        return self._appends

    def forget(self, appended: Appended) -> None:
        """Stop waiting for the verdict of a tracked append (its waiter went away)."""
        self._verdicts.forget(appended)

    async def wait_committed(self, appended: Appended, timeout_s: float | None = None) -> None:
        """Wait for the core's verdict on a tracked append: return once it is committed in
        the epoch that appended it; raise NotLeaderError (naming the leader known then) as
        soon as this node stops leading that epoch, RaftcoreError if the node stops, and
        TimeoutError after ``timeout_s`` (its fate is then unknown to the caller).

        An offset alone is not enough to wait on: a deposed leader's offsets may come to hold
        another leader's records, and a high watermark passing them says nothing about ours.
        """
        await self._verdicts.wait(appended, timeout_s)

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        """Wait for the high watermark to move (or ``timeout_s``)."""
        await self._hw_moved.wait(timeout_s)

    async def wait_log_start_change(self, timeout_s: float) -> None:
        """Wait for the core to say the log start offset moved, or for this replica's role to
        change (or ``timeout_s``)."""
        await self._log_start_moved.wait(timeout_s)

    def running_core(self) -> RaftCore | None:
        """The core while the node runs (started, not closed yet), else None."""
        return self.core if self._started else None

    def _require_core(self) -> RaftCore:
        if self.core is None or not self._started:
            raise RaftcoreError(f"{self.prefix} not started")
        if self.failure is not None:  # stopping: it leads nothing any more
            raise NotLeaderError(LeaderAndEpoch(None, self.core.epoch), str(self.failure))
        return self.core

    # ---- driving the core ----------------------------------------------------------------------

    _now = staticmethod(now_ms)  # the core's clock (raftcore.node.clock)

    def _drive(self, out: Output) -> None:
        """Do what the core asked: send (now or after the fsync), flush, schedule the poll."""
        commit = self._group_commit
        assert commit is not None  # opened with the log
        self._verdicts.deliver(out.completions)
        if out.shutdown_ready:
            self._shutdown_is_ready()
        if out.log_start_moved:
            self._log_start_moved.wake()
        if out.reads:
            self._reads.deliver(out.reads)
        if out.voter_changes:
            self.voter_changes.deliver(out.voter_changes)
        commit.submit(out.messages)  # now, or once the fsync covering them ran
        assert self._poll_timer is not None  # made with the group commit
        self._poll_timer.schedule(out.next_deadline)
        if out.snapshot_due and self.snapshotter is not None:
            self.snapshotter.due()
        self._after_progress()

    def _run(self, step: Any) -> None:
        """Run one step of the core. Any exception out of it stops the node: a
        RaftInvariantError is a bug, never to be papered over, and anything else (a
        follower's log or the quorum-state that cannot be written) left the step half done,
        so the core's state can no longer be trusted. The core handles the failures it can
        survive itself (a leader whose log cannot be written resigns; a damaged batch is
        repaired from the leader; a snapshot download on a full disk is dropped and tried
        again)."""
        if self.failure is not None:
            return  # stopped: nothing more is done
        try:
            self._drive(step(self._now()))
        except Exception as exc:
            listener_offset = None if self.core is None else self.core.listener_next_offset
            self._fail(fatal.describe(exc, self.log, listener_offset), exc)

    def report_damage(self, damage: Damage, where: str) -> None:
        """A damaged batch in this node's log (raftcore.raft.damage): the core decides."""
        if self._started and self.core is not None:
            core = self.core
            self._run(lambda now: core.report_damage(damage, now, where))

    def poke(self) -> None:
        """Poll the core now (after a request to it whose outcome comes in an Output)."""
        if self._started and self.core is not None:
            self._run(self.core.poll)

    async def _housekeeping_loop(self) -> None:
        """Now and once a second: connections to the voters and the leader (open, so that an
        election or a first fetch does not wait for a TLS handshake), none to the ids no longer
        needed (raftcore.node.peers); auto-join."""
        while True:
            core, peers = self.core, self.peers
            if core is not None and peers is not None and self._started:
                peers.keep_open(core.voter_set, core.leader_and_epoch(), self.node_id)
                if self._auto_join is not None:
                    self._auto_join.check()
            await asyncio.sleep(SWEEP_EVERY_S)

    def _fail(self, cause: str, exc: BaseException, *, traceback: bool | None = None) -> None:
        """Stop after a failure the node cannot go on from: one CRITICAL line naming
        ``cause``, everything closed without writing to the log again, and
        :meth:`wait_closed` raises. The traceback is logged too (at ERROR, before) for what
        may be a bug, and only at DEBUG for a fault of the disk. The first failure wins."""
        if self.failure is not None:
            logger.debug("%s after the failure, also: %s", self.prefix, cause, exc_info=exc)
            return
        if traceback is None:
            traceback = not fatal.is_environment_fault(exc)
        if traceback:
            logger.error("%s the failure that stops the node:", self.prefix, exc_info=exc)
        else:
            logger.debug("%s the failure that stops the node:", self.prefix, exc_info=exc)
        line = f"{self.prefix} cannot go on, stopping: {cause}"
        logger.critical("%s", line)
        error = NodeFailedError(line)
        error.__cause__ = exc
        self.failure = error
        self._stopping = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_exception(error)
            self._ended.exception()  # retrieved: nobody need be waiting
        self._shutdown_is_ready()  # a stop waiting for the resignation waits no more
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())

    def _shutdown_is_ready(self) -> None:
        if self._shutdown_ready is not None and not self._shutdown_ready.done():
            self._shutdown_ready.set_result(None)

    def _after_progress(self) -> None:
        core = self.core
        assert core is not None
        if core.state is not self.metrics.seen_state:  # elections, for the metrics
            self.metrics.state_seen(core.state)
            self._log_start_moved.wake()  # a wait for the leader's log start ends
        if self.applier is not None:
            self.applier.progress(core.listener_next_offset)
        if core.high_watermark is None:
            return
        self._hw_moved.wake()
