"""RaftNode: one replica of a raftcore cluster in one asyncio loop.

The node is what a process has once: the listeners (TLS, SASL), TCP (Kafka framing) to the
other nodes (found in the address book, :mod:`raftcore.node.peers`) and from clients, the
metrics, the operator's voter RPCs (:mod:`raftcore.node.admin`), and its Raft groups by
:class:`~raftcore.topic_partition.TopicPartition`. Each group (:mod:`raftcore.node.group`)
binds a pure :class:`~raftcore.raft.RaftCore` to its log and quorum-state in the data
directory, a timer for the core's next deadline and a thread that fsyncs the log off the
event loop.
Messages the core marks ``after_flush`` wait for the fsync that covers them; appends that
arrive during an fsync are covered by the next one (group commit). The node hosts one group
for each partition of the topic ``NodeConfig.topic`` (``NodeConfig.partitions``), all over
the same voters, each electing its own leader; its embedding API works on partition 0. Beside
them (``extra_groups``) it hosts the metadata group, whose leader is the controller
(:mod:`raftcore.node.cluster_metadata`), and a group for each replica of a topic created
through it, over that partition's replicas (:mod:`raftcore.node.topic_groups`).

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
import itertools
import logging
import random
import socket
from collections import ChainMap
from collections.abc import AsyncIterator, Iterable
from typing import Any

from raftcore.errors import NodeFailedError, RaftcoreError
from raftcore.kafka.producer_ids import ProducerIdSource
from raftcore.kafka.producer_state import ProducerStateManager
from raftcore.kafka.producer_tracker import ProducerStateTracker
from raftcore.log import SegmentedLog
from raftcore.node import admin, committed_reads, fatal, forwarding, offsets_groups, reads
from raftcore.node.admin import AutoJoiner
from raftcore.node.applier import Applier
from raftcore.node.clock import now_ms
from raftcore.node.cluster_metadata import ClusterMetadata
from raftcore.node.committed_checkpoint import CommittedCheckpoint
from raftcore.node.config import NodeConfig
from raftcore.node.connection_limits import ConnectionLimits, RequestBudget
from raftcore.node.connection_timeouts import ConnectionTimeouts
from raftcore.node.data_dir import check_meta_properties
from raftcore.node.group import RaftGroup
from raftcore.node.leader_lookup import PeerLeaderLookup
from raftcore.node.listeners import open_node_listener_warning
from raftcore.node.messaging import Messaging
from raftcore.node.metrics import NodeMetrics
from raftcore.node.metrics_http import MetricsServer, serve_metrics
from raftcore.node.partition import kafka_broker
from raftcore.node.peers import SWEEP_EVERY_S, AddressBook, Peers
from raftcore.node.rebalance import LeaderRebalance
from raftcore.node.rebuild import StateRebuild
from raftcore.node.retention import Retention
from raftcore.node.scrubber import Scrubber
from raftcore.node.snapshotter import Snapshotter
from raftcore.node.topic_groups import TopicGroups
from raftcore.node.topic_ids import METADATA_TOPIC, METADATA_TOPIC_ID, TopicIds
from raftcore.node.waiters import ChangeWaiters
from raftcore.raft import Appended, LeaderAndEpoch, RaftCore
from raftcore.raft.damage import Damage
from raftcore.raft.voters import directory_id_text
from raftcore.records import Record
from raftcore.security import tls
from raftcore.security.sasl import SaslAuthenticator
from raftcore.statemachine.api import StateMachine
from raftcore.topic_partition import OFFSETS_TOPIC, TopicPartition

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
        self.prefix = f"[node {config.node_id}]"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[Any] = []  # asyncio.Server or TlsServer: one, or client and node
        # where the other nodes listen, and the connections to them (raftcore.node.peers)
        self.address_book = AddressBook(config)
        self.peers: Peers | None = None
        self.directory_id: bytes | None = None  # this replica's (meta.properties), once started
        self._auto_join = AutoJoiner(self) if config.auto_join else None
        self._housekeeping: asyncio.Task[None] | None = None
        self._rebalance: LeaderRebalance | None = None  # preferred leaders (node.rebalance)
        self._started = False
        self._stopping = False
        self._closing: asyncio.Future[None] | None = None
        self.failure: NodeFailedError | None = None  # why it stopped itself (wait_closed)
        self._ended: asyncio.Future[None] | None = None  # done when it stops running
        self.producer_ids = ProducerIdSource(config.node_id)
        self.metrics = NodeMetrics(self)  # docs/metrics.md
        # One source of correlation ids for every request the node sends (its groups' and its
        # own): they share the connections to a peer, where an answer is matched to its
        # request by (peer, correlation id).
        self.correlation_ids = itertools.count(1)
        # The node's Raft groups by topic-partition: NodeConfig.topic partitions 0..N-1.
        # The Kafka API finds a partition through the broker's lookup, the Raft RPCs theirs
        # in this dict (raftcore.node.messaging); the embedding API works on partition 0,
        # the one that drives the listener or state machine.
        self.group = RaftGroup(
            config,
            TopicPartition(config.topic, 0),
            prefix=self.prefix,
            metrics=self.metrics,
            address_book=self.address_book,
            clock=now_ms,
            fail=self._fail,
            listener=listener,
            state_machine=state_machine,
            rng=rng,
            correlation_ids=self.correlation_ids,
        )
        self.groups: dict[TopicPartition, RaftGroup] = {self.group.name: self.group}
        for index in range(1, config.partitions):
            name = TopicPartition(config.topic, index)
            self.groups[name] = RaftGroup(
                config,
                name,
                prefix=f"[node {config.node_id} {name}]",
                metrics=self.metrics,
                address_book=self.address_book,
                clock=now_ms,
                fail=self._fail,
                rng=None if rng is None else random.Random(rng.getrandbits(64)),
                correlation_ids=self.correlation_ids,
            )
        # The groups beside NodeConfig.topic's (raftcore.node.cluster_metadata): the metadata
        # group, and the replicas of the topics created through it (raftcore.node.topic_groups).
        # The Raft RPCs find every group in ``routes``; ``groups`` stays NodeConfig.topic's.
        self.topic_ids = TopicIds()  # what the Raft RPCs name topics by (raftcore.node.topic_ids)
        self.topic_ids.add(config.topic, config.topic_id)
        self.topic_ids.add(METADATA_TOPIC, METADATA_TOPIC_ID)
        self.extra_groups: dict[TopicPartition, RaftGroup] = {}
        self.routes: ChainMap[TopicPartition, RaftGroup] = ChainMap(self.groups, self.extra_groups)
        self.kafka = kafka_broker(self)  # what the Kafka API sees of the node (raftcore.kafka)
        self.topic_groups = TopicGroups(self)
        self.metadata = ClusterMetadata.for_node(self, rng)  # in extra_groups
        self.kafka.cluster = self.metadata
        self.kafka.leader_lookup = PeerLeaderLookup(self)
        # consumer groups: the __consumer_offsets partitions, in extra_groups
        # (raftcore.node.offsets_groups)
        self.coordinators = offsets_groups.attach(self, rng)
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
            groups=self.routes,
            topic_ids=self.topic_ids,
            admin_handle=lambda header, body: admin.handle(self, header, body),
            correlation_ids=self.correlation_ids,
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
        offsets_groups.prepare_directories(cfg)  # the __consumer_offsets partitions' own
        group = self.group
        started, self.directory_id = group.open(
            self._loop,
            directory_id=identity.directory_id,
            joining=identity.joins,
            send=self.messaging.send,
        )
        first_outputs = {group.name: started}
        try:  # the other groups, with the directory id partition 0 runs with
            # created topics' replicas (topic_dirs) and the ledger of those made here
            self.topic_groups.found_on_disk(formatted_to_join=identity.joins)
            for other in list(self.routes.values()):
                if other is not group:
                    first_outputs[other.name] = other.open(
                        self._loop,
                        directory_id=self.directory_id,
                        # a created topic's replica is a voter of its record's replicas
                        joining=identity.joins
                        and other.name.topic in (cfg.topic, METADATA_TOPIC, OFFSETS_TOPIC),
                        send=self.messaging.send,
                    )[0]
        except BaseException:
            for name in first_outputs:
                self.routes[name].stop_timers()
                await self.routes[name].close()
            raise
        core = group.core
        assert core is not None  # opened
        self.address_book.voters = lambda: core.voter_set
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
        self._started = True
        for name, output in first_outputs.items():
            self.routes[name].begin(output)
        self.coordinators.start()
        self._rebalance = LeaderRebalance.for_node(cfg, self.groups, self.prefix, now_ms)
        self._housekeeping = asyncio.ensure_future(self._housekeeping_loop())
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
            group.log,
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
        # A voter down now cannot hear the resignation: not waited for (a lone leader
        # stops at once). One that goes down meanwhile is told by its refused reconnect.
        peers = self.peers
        readies = [
            ready
            for group in list(self.routes.values())
            if (ready := group.begin_shutdown(lambda: () if peers is None else peers.down()))
            is not None
        ]
        if readies:  # each core says when the voters have heard (a failure ends the wait)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*readies)), timeout_s)
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
        await self.topic_groups.close()
        for group in list(self.routes.values()):
            group.stop_timers()
        await self.coordinators.close()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self._auto_join is not None:
            await self._auto_join.close()
        for server in self._servers:
            server.close()
        await self.messaging.close()
        if self.peers is not None:
            await self.peers.close()
        for group in list(self.routes.values()):
            await group.close()
        self._started = False
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

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
        for group in list(self.routes.values()):
            group.halt(error)  # no step runs any more; a stop waits for no resignation
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())

    async def _housekeeping_loop(self) -> None:
        """Now and once a second: connections to the voters and the leader (open, so that an
        election or a first fetch does not wait for a TLS handshake), none to the ids no longer
        needed (raftcore.node.peers); auto-join; the auto leader rebalance."""
        while True:
            core, peers = self.group.core, self.peers
            if core is not None and peers is not None and self._started:
                peers.keep_open(core.voter_set, core.leader_and_epoch(), self.node_id)
                if self._auto_join is not None:
                    self._auto_join.check()
                if self._rebalance is not None and not self._stopping:
                    self._rebalance.tick()
                self.topic_groups.want_reconcile()  # once the image has caught up
            await asyncio.sleep(SWEEP_EVERY_S)

    def node_ids(self) -> list[int]:
        """The nodes replicas are placed on: partition 0's voters."""
        core = self.group.core
        return sorted(core.voter_set) if core is not None else sorted(self.config.quorum.voters)

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
        return self.group.leader_and_epoch

    @property
    def leader_hint(self) -> LeaderAndEpoch:
        """Who clients should go to: the leader, but nobody while this node has resigned and
        no successor is known yet (:meth:`RaftCore.leader_hint`)."""
        return self.group.leader_hint

    @property
    def high_watermark(self) -> int | None:
        return self.group.high_watermark

    def is_leader(self) -> bool:
        return self.group.is_leader()

    def running_core(self) -> RaftCore | None:
        """The core while the node runs (started, not closed yet), else None."""
        return self.group.running_core()

    # ---- the group's parts, as embedders, tools and tests name them ----------------------------

    @property
    def core(self) -> RaftCore | None:
        return self.group.core

    @property
    def log(self) -> SegmentedLog | None:
        return self.group.log

    @property
    def listener(self) -> Any:
        return self.group.listener

    @listener.setter
    def listener(self, listener: Any) -> None:  # replaced by a test before the start
        self.group.listener = listener

    @property
    def state_machine(self) -> StateMachine | None:
        return self.group.state_machine

    @property
    def applier(self) -> Applier | None:
        return self.group.applier

    @property
    def snapshotter(self) -> Snapshotter | None:
        return self.group.snapshotter

    @property
    def rebuild(self) -> StateRebuild | None:
        return self.group.rebuild

    @property
    def producers(self) -> ProducerStateManager:
        return self.group.producers

    @property
    def producer_tracker(self) -> ProducerStateTracker:
        return self.group.producer_tracker

    @property
    def scrubber(self) -> Scrubber | None:
        return self.group.scrubber

    @property
    def retention(self) -> Retention | None:
        return self.group.retention

    @property
    def committed_checkpoint(self) -> CommittedCheckpoint | None:
        return self.group.committed_checkpoint

    @property
    def voter_changes(self) -> ChangeWaiters:
        return self.group.voter_changes

    @property
    def leader_changes(self) -> int:
        return self.group.leader_changes

    @property
    def rng(self) -> random.Random:
        return self.group.rng

    # ---- the state machine (raftcore.node.applier) ---------------------------------------------

    @property
    def applied_offset(self) -> int | None:
        """Everything committed below it is applied to the state machine (None without one)."""
        applier = self.group.applier
        return None if applier is None else applier.applied_offset

    async def wait_applied(self, offset: int, timeout_s: float | None = None) -> None:
        """Wait until the state machine has applied everything below ``offset``."""
        applier = self.group.applier
        if applier is None:
            raise RaftcoreError(f"{self.prefix} no state machine")
        await applier.wait_applied(offset, timeout_s)

    async def read_index(self, timeout_s: float = 5.0) -> int:
        """The offset a linearizable read waits for (leader only: see :mod:`.reads`)."""
        return await reads.read_index(self, self.group.reads, timeout_s)

    async def linearizable_read_index(self, timeout_s: float = 5.0) -> int:
        """The offset a linearizable read waits for, on any replica: the leader's read index,
        asked of it when this node does not lead (:func:`.reads.read_index_anywhere`)."""
        return await reads.read_index_anywhere(self, timeout_s)

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
        return await self.group.appends().append(batch, wait)

    async def append_tracked(self, records: Iterable[Any]) -> Appended:
        """Append one batch (leader only; NotLeaderError names the leader) without waiting:
        the caller then :meth:`wait_committed` for its verdict."""
        batch = list(records)
        if not batch:
            raise ValueError("append takes at least one record")
        return await self.group.appends().append_tracked(batch)

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
        return self.group.appends().append_batches(batches, track, checked)

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        """Track records already in the leader's log (a retried idempotent batch), as if just
        appended: the caller must then :meth:`wait_committed` for the same verdict."""
        return self.group.appends().watch(first_offset, last_offset)

    def forget(self, appended: Appended) -> None:
        """Stop waiting for the verdict of a tracked append (its waiter went away)."""
        self.group.verdicts.forget(appended)

    async def wait_committed(self, appended: Appended, timeout_s: float | None = None) -> None:
        """Wait for the core's verdict on a tracked append: return once it is committed in
        the epoch that appended it; raise NotLeaderError (naming the leader known then) as
        soon as this node stops leading that epoch, RaftcoreError if the node stops, and
        TimeoutError after ``timeout_s`` (its fate is then unknown to the caller).

        An offset alone is not enough to wait on: a deposed leader's offsets may come to hold
        another leader's records, and a high watermark passing them says nothing about ours.
        """
        await self.group.wait_committed(appended, timeout_s)

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        """Wait for the high watermark to move (or ``timeout_s``)."""
        await self.group.wait_high_watermark_change(timeout_s)

    # ---- driving the core ----------------------------------------------------------------------

    def report_damage(self, damage: Damage, where: str) -> None:
        """A damaged batch in this node's log (raftcore.raft.damage): the core decides."""
        self.group.report_damage(damage, where)

    def poke(self) -> None:
        """Poll the core now (after a request to it whose outcome comes in an Output)."""
        self.group.poke()
