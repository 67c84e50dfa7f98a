"""RaftCore: KRaft's replica logic as a deterministic state machine (Kafka's KafkaRaftClient,
etcd-raft's RawNode in shape).

Inputs: ``handle(source, correlation_id, message, now)`` for every request and response, and
``poll(now)`` for the passage of time; ``append`` on the leader. Outputs: an :class:`Output`
with the messages to send (each perhaps waiting for the log to be durable, see
:class:`Outbound`) and the time of the next deadline. No sockets, threads, sleeps or clocks:
time is passed in, randomness is a constructor argument, the log and the quorum-state store
are collaborators. The same inputs give the same outputs.

A log that refuses a leader's write with an I/O error (an OSError: a full disk, EIO) makes the
leader resign (:meth:`LeaderRequests.cannot_write`): the step goes on, and the append's caller
gets a :class:`LogWriteError` (a NotLeaderError). A damaged batch read back is no exception:
it is never served and is repaired from the leader (:mod:`raftcore.raft.damage`). Any other
exception out of a call -- a follower's append, a repair's write or a quorum-state write that
fails, a damaged control record -- leaves the step half done: the driver must stop this core
(the node exits).

The rules of each RPC live in their own module: :mod:`raftcore.raft.vote`,
:mod:`raftcore.raft.begin_quorum_epoch`, :mod:`raftcore.raft.end_quorum_epoch`,
:mod:`raftcore.raft.fetch`, :mod:`raftcore.raft.fetch_snapshot`; snapshot decisions in
:mod:`raftcore.raft.snapshots`. Transitions live in :class:`QuorumState`, the passage of time
state by state in :mod:`raftcore.raft.polling`, the listener's progress in
:mod:`raftcore.raft.listener`.
"""

from __future__ import annotations

import itertools
import logging
import random as random_module
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError, RaftInvariantError
from raftcore.raft import (
    begin_quorum_epoch,
    end_quorum_epoch,
    fetch,
    fetch_snapshot,
    polling,
    reconfig,
    vote,
)
from raftcore.raft.committed import CommittedOffset
from raftcore.raft.config import QuorumConfig
from raftcore.raft.control_records import leader_change_record
from raftcore.raft.damage import Damage, DamageTracker
from raftcore.raft.leader_requests import LeaderRequests, LogWriteError, NotLeaderError
from raftcore.raft.listener import CommittedBatch, Listener, ListenerFeed
from raftcore.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Outbound,
    RaftRequest,
    RaftResponse,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from raftcore.raft.pending import AppendOutcome
from raftcore.raft.purgatory import FetchPurgatory
from raftcore.raft.quorum_state import QuorumState
from raftcore.raft.quorum_store import QuorumStateStore
from raftcore.raft.read_index import ReadIndexOutcome
from raftcore.raft.refusals import Refusals
from raftcore.raft.replicated_log import ReplicatedLog
from raftcore.raft.request_manager import RequestManager
from raftcore.raft.snapshots import SnapshotManager
from raftcore.raft.states import (
    EpochState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
)
from raftcore.raft.values import LeaderAndEpoch, OffsetAndEpoch
from raftcore.raft.voter_history import VoterHistory, control_records_in
from raftcore.raft.voters import ReplicaKey, VoterEndpoint, VoterSet

__all__ = [
    "CommittedBatch",
    "Listener",
    "LogWriteError",
    "NotLeaderError",
    "Output",
    "RaftCore",
    "RaftInvariantError",
]

logger = logging.getLogger(__name__)

INF = float("inf")
MAX_EPOCH = (1 << 31) - 1  # epochs are int32 on the wire


@dataclass(slots=True)
class Output:
    """What one call into the core produced: messages to send, when to poll next, and the
    verdicts on tracked appends (committed in their epoch, or failed: see
    :mod:`raftcore.raft.pending`). ``snapshot_due``: time to take a snapshot
    (``create_snapshot``, see :mod:`raftcore.raft.snapshots`). ``reads``: the verdicts on
    linearizable reads (:mod:`raftcore.raft.read_index`). ``shutdown_ready``: after
    :meth:`RaftCore.begin_shutdown`, this replica owes the quorum nothing more (it does not
    lead, and a leader that resigned has heard every voter acknowledge its EndQuorumEpoch):
    the driver may close it now. ``log_start_moved``: the log start offset moved forward
    (KIP-630: to a snapshot every replica has fetched past, or the leader's)."""

    messages: list[Outbound] = field(default_factory=list)
    next_deadline: float = INF
    completions: list[AppendOutcome] = field(default_factory=list)
    snapshot_due: bool = False
    reads: list[ReadIndexOutcome] = field(default_factory=list)
    # the verdicts on voter changes and leadership transfers (raftcore.raft.reconfig)
    voter_changes: list[reconfig.ChangeOutcome] = field(default_factory=list)
    shutdown_ready: bool = False
    log_start_moved: bool = False


class RaftCore(LeaderRequests):
    """One replica of the quorum. See the module docstring.

    ``directory_id`` (16 bytes) names this replica's data directory (KIP-853): with the id it
    is the replica's key, so a wiped disk under an old id is a new replica. ``endpoint`` is
    where it listens, as it tells the leader (UpdateRaftVoter, and its fetches as an
    observer). ``committed_offset``: the committed offset this replica checkpointed before
    (0 for a new one); no leader makes it truncate below it (raftcore.raft.committed).
    ``formatted``: the store is a formatted data directory's, which always holds a
    quorum-state, so a missing one is lost even with an empty log. ``joining``: the replica
    was formatted without a voter set (``--no-initial-voters``): it never stands or votes as
    a voter of the static set, only once the voter set in the log names it (KIP-853)."""

    def __init__(
        self,
        node_id: int,
        config: QuorumConfig,
        log: ReplicatedLog,
        store: QuorumStateStore,
        *,
        rng: random_module.Random | None = None,
        listener: Listener | None = None,
        listener_start_offset: int | None = None,
        log_prefix: str | None = None,
        directory_id: bytes | None = None,
        endpoint: VoterEndpoint | None = None,
        committed_offset: int = 0,
        formatted: bool = False,
        joining: bool = False,
        correlation_ids: Iterator[int] | None = None,
    ) -> None:
        """``correlation_ids``: where the ids of this core's requests come from; a node that
        hosts several groups gives them all one source, since their requests share its
        connections and an answer is matched to its request by (peer, correlation id)."""
        self.node_id = node_id
        self.config = config
        self.log = log
        self.store = store
        self.rng = rng or random_module.Random()
        self.prefix = log_prefix or f"[node {node_id}]"
        self.endpoint = endpoint
        self.history = VoterHistory(VoterSet.static(config.voters), prefix=self.prefix)
        self.quorum = QuorumState(
            node_id,
            config,
            store,
            log,
            rng=self.rng,
            log_prefix=self.prefix,
            history=self.history,
            directory_id=directory_id,
            formatted=formatted,
            joining=joining,
        )
        self.requests = RequestManager(config.retry_backoff_ms, config.request_timeout_ms)
        self.feed = ListenerFeed(
            listener,
            log,
            self.quorum,
            listener_start_offset,  # None: a new listener (it loads the latest snapshot)
            prefix=self.prefix,
        )
        self.snapshots = SnapshotManager(self)
        self.damage = DamageTracker(log)  # damaged batches in the log (raftcore.raft.damage)
        # no leader makes this replica truncate below it (raftcore.raft.committed)
        self.committed = CommittedOffset(committed_offset)
        # requests refused for contradicting what this replica knows (raftcore.raft.refusals)
        self.refusals = Refusals(self.prefix)
        self._outbox: list[Outbound] = []
        self._completions: list[AppendOutcome] = []
        self._append_token = 0
        self._read_token = 0
        self._read_outcomes: list[ReadIndexOutcome] = []
        self._change_outcomes: list[reconfig.ChangeOutcome] = []
        self._change_token = 0
        self._correlation_ids = itertools.count(1) if correlation_ids is None else correlation_ids
        self.purgatory = FetchPurgatory(self)
        self.shutting_down = False
        # ((leader, epoch), now) of the last INFO line about fetches from the leader timing out
        self.leader_lost_logged: tuple[tuple[int, int], int] | None = None
        self._started = False

    # ---- public state ------------------------------------------------------------------------

    @property
    def state(self) -> EpochState:
        return self.quorum.state

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.quorum.leader_and_epoch()

    def leader_hint(self) -> LeaderAndEpoch:
        """Who a client should go to: the leader known, except that a leader that resigned
        names nobody (it still calls itself the leader of its epoch, as KIP-595's Resigned
        does, but takes nothing more; the next leader is not known yet)."""
        leader = self.quorum.leader_and_epoch()
        if leader.leader_id == self.node_id and not self.quorum.is_leader():
            return LeaderAndEpoch(None, leader.epoch)
        return leader

    def is_leader(self) -> bool:
        return self.quorum.is_leader()

    def durable_end(self) -> int:
        """The end of what this replica counts as its own in the high watermark: the log's
        flushed offset, or its end offset when the quorum acknowledges unflushed records."""
        if self.config.acknowledge_unflushed:
            return self.log.end_offset
        return self.log.flushed_offset

    @property
    def high_watermark(self) -> int | None:
        """The offset below which everything is committed, as far as this replica knows."""
        return self.quorum.state.high_watermark

    @property
    def committed_offset(self) -> int:
        """The offset below which this replica knows everything is committed, high watermarks
        past and present (raftcore.raft.committed): what the node checkpoints."""
        return self.committed.observe(self.quorum.state.high_watermark)

    @property
    def listener(self) -> Listener | None:
        return self.feed.listener

    @property
    def local_key(self) -> ReplicaKey:
        return self.quorum.local_key

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in force: the latest in the log, committed or not (KIP-853)."""
        return self.history.latest()

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version

    @property
    def listener_next_offset(self) -> int:
        """The next offset the listener will be handed."""
        return self.feed.next_offset

    # ---- entry points ------------------------------------------------------------------------

    def start(self, now: int) -> Output:
        """Read the stored state and start (Kafka's initialize)."""
        self.snapshots.start(now)
        self.committed.started(self.log.end_offset)
        reconfig.load_history(self)  # who votes, before anything asks
        self.quorum.initialize(now)
        self._started = True
        return self._finish(now)

    def handle(
        self, source: int, correlation_id: int, message: RaftRequest | RaftResponse, now: int
    ) -> Output:
        """Process one request or response from ``source``."""
        kind = type(message)
        if kind is FetchRequest:
            fetch.handle_request(self, source, correlation_id, message, now)  # type: ignore[arg-type]
        elif kind is FetchSnapshotRequest:
            self._reply(
                source,
                correlation_id,
                fetch_snapshot.handle_request(self, source, message, now),  # type: ignore[arg-type]
            )
        elif kind is VoteRequest:
            self._reply(source, correlation_id, vote.handle_request(self, message, now))  # type: ignore[arg-type]
        elif kind is BeginQuorumEpochRequest:
            self._reply(
                source,
                correlation_id,
                begin_quorum_epoch.handle_request(self, message, now),  # type: ignore[arg-type]
            )
        elif kind is EndQuorumEpochRequest:
            self._reply(
                source,
                correlation_id,
                end_quorum_epoch.handle_request(self, message, now),  # type: ignore[arg-type]
            )
        elif kind is UpdateVoterRequest:
            self._reply(
                source,
                correlation_id,
                reconfig.handle_update_request(self, message, now),  # type: ignore[arg-type]
            )
        elif kind in _RESPONSE_HANDLERS:
            if self.requests.accept_response(source, correlation_id):
                ok = _RESPONSE_HANDLERS[kind](self, source, message, now)
                if not ok:
                    self.requests.on_failure(source, now)
            else:
                logger.debug(
                    "%s ignoring an unexpected %s from %d (correlation %d)",
                    self.prefix,
                    kind.__name__,
                    source,
                    correlation_id,
                )
        else:
            raise TypeError(f"not a raft message: {message!r}")
        return self._finish(now)

    def poll(self, now: int) -> Output:
        """Let time pass: timers fire, requests go out, commits reach the listener."""
        return self._finish(now)

    # ---- snapshots (raftcore.raft.snapshots) ---------------------------------------------------

    def create_snapshot(self, end_offset: int, now: int) -> Any:
        """After ``Output.snapshot_due``: a writer for the state up to ``end_offset`` (at most
        the listener's next offset), or None if that snapshot exists. Raises
        InvalidSnapshotError for an offset the core refuses."""
        return self.snapshots.create(end_offset, now)

    def snapshot_frozen(self, snapshot_id: OffsetAndEpoch, now: int) -> Output:
        self.snapshots.frozen(snapshot_id, now)
        return self._finish(now)

    def snapshot_abandoned(self, now: int) -> Output:
        self.snapshots.abandoned(now)
        return self._finish(now)

    def rewind_listener(self, now: int) -> Output:
        """The listener lost its state (a damaged state machine, being rebuilt): hand it the
        latest snapshot again, then every committed batch after it (or, with no snapshot, the
        log from its start). See ``ListenerFeed.rewind``."""
        self.feed.rewind()
        return self._finish(now)

    def report_damage(self, damage: Damage, now: int, where: str = "scrubbing") -> Output:
        """A damaged batch in this replica's log (found by the scrubber, by the listener, or
        on the way out): never served; repaired from the leader (raftcore.raft.damage)."""
        self.damage.report(self, damage, now, where)
        return self._finish(now)

    def request_lost(self, destination: int, correlation_id: int, now: int) -> Output:
        """The node lost a request it was asked to send (no connection to ``destination``, or
        the connection went with the request in flight): if it is the one in flight there, it
        failed now, and is retried after ``retry_backoff_ms`` rather than at the timeout."""
        if self.requests.accept_response(destination, correlation_id):
            self.requests.on_failure(destination, now)
        return self._finish(now)

    def peer_unreachable(self, peer_id: int, now: int) -> Output:
        """The node could not connect to ``peer_id``: the connection was refused, so no process
        listens there. A voter following that peer stands for election within a random 0-20%
        of the election timeout instead of waiting out the fetch timeout.

        Kafka waits for the fetch timeout (2 s by default); a refused connection is proof that
        the leader's process is gone, and waiting only lengthens the failover. A network
        partition never refuses connections, so it still goes through the fetch timeout. Timers
        decide liveness only: safety is unchanged.
        """
        state = self.quorum.state
        if isinstance(state, ResignedState) and self.shutting_down:
            # A stopping leader waits for each voter to hear its EndQuorumEpoch; one whose
            # process is gone cannot, and learns the new epoch from the next election when it
            # starts. EndQuorumEpoch only speeds the election up (KIP-595): safety is unchanged.
            state.acknowledge(peer_id)
        if isinstance(state, FollowerState) and state.leader == peer_id and self.quorum.is_voter:
            deadline = now + self.rng.randint(0, self.config.election_timeout_ms // 5)
            if deadline < state.fetch_deadline:
                logger.info(
                    "%s leader %d refuses connections; standing for election within %d ms",
                    self.prefix,
                    peer_id,
                    deadline - now,
                )
                state.fetch_deadline = deadline
        return self._finish(now)

    def resign(self, now: int) -> Output:
        """Step down gracefully (leader only): tell the voters with EndQuorumEpoch, naming the
        best placed successors first."""
        state = self.quorum.state
        if isinstance(state, LeaderState):
            state.resign_requested = True
        return self._finish(now)

    def begin_shutdown(self, now: int) -> Output:
        """Stop taking appends and, if leading, resign first."""
        self.shutting_down = True
        return self.resign(now)

    # ---- helpers used by the RPC modules -----------------------------------------------------

    def next_correlation_id(self) -> int:
        return next(self._correlation_ids)

    def send_request(
        self, destination: int, message: RaftRequest, now: int, after_flush: int = -1
    ) -> None:
        """``after_flush``: the message tells another replica that this one holds offsets below
        it (a Fetch's offset, a Vote's last offset): it leaves once the log is durable that far,
        unless the quorum acknowledges unflushed records."""
        if self.config.acknowledge_unflushed:
            after_flush = -1
        cid = self.next_correlation_id()
        self.requests.on_sent(destination, cid, now)
        self._outbox.append(Outbound(destination, cid, message, after_flush, True))

    def _reply(self, destination: int, correlation_id: int, message: RaftResponse) -> None:
        self._outbox.append(Outbound(destination, correlation_id, message))

    def reply(self, destination: int, correlation_id: int, message: RaftResponse) -> None:
        self._reply(destination, correlation_id, message)

    def has_valid_cluster_id(self, cluster_id: str | None) -> bool:
        """A request without a cluster id is accepted (as Kafka does)."""
        return cluster_id is None or cluster_id == self.config.cluster_id

    def validate_voter_only_request(self, remote_id: int, request_epoch: int) -> int | None:
        """Checks shared by Vote, BeginQuorumEpoch and EndQuorumEpoch: an older epoch is
        fenced; a negative sender id or an epoch that could not be raised again is invalid."""
        if request_epoch < self.quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if remote_id < 0 or request_epoch >= MAX_EPOCH:
            # (an epoch that could not be raised again: no cluster gets there, a client may
            # send it)
            return Errors.INVALID_REQUEST
        # Whether the sender is a voter is asked next, by each handler, with what it knows of
        # the sender (raftcore.raft.refusals.non_voter: a lagging voter set is allowed for).
        # This replica need not be a voter of its own set (KIP-853, as Kafka 3.9): a voter
        # just added has not read the record that added it.
        return None

    def validate_leader_only_request(self, request_epoch: int) -> int | None:
        """Fetch (and FetchSnapshot) go to the leader of the requester's epoch only."""
        if request_epoch < self.quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if request_epoch > self.quorum.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if not self.quorum.is_leader():
            return Errors.NOT_LEADER_OR_FOLLOWER
        if self.shutting_down:
            return Errors.BROKER_NOT_AVAILABLE
        return None

    # ---- transitions with their side effects ---------------------------------------------------

    def _left(self, old: EpochState, now: int) -> None:
        """After any transition: old requests no longer matter; a former leader fails the
        appends it had not seen committed and answers the fetches it held."""
        self.requests.reset()
        if isinstance(old, FollowerState):
            old.drop_snapshot_download()  # a new leader or epoch: the .part is discarded
        if isinstance(old, LeaderState):
            self._abandon_pending(old)
            reconfig.abandon(self, old)
            self.purgatory.release_not_leader()

    def _carry_high_watermark(self, old: EpochState) -> None:
        # Non-leader states keep the high watermark they knew (it never moves back); a new
        # leader starts without one.
        new = self.quorum.state
        if not isinstance(new, LeaderState) and new is not old:
            new.high_watermark = old.high_watermark

    def transition_to_unattached(self, epoch: int, now: int, reason: str) -> None:
        old = self.quorum.state
        self.quorum.transition_to_unattached(epoch, now, reason)
        self._carry_high_watermark(old)
        self._left(old, now)

    def transition_to_follower(self, epoch: int, leader_id: int, now: int, reason: str) -> None:
        old = self.quorum.state
        self.quorum.transition_to_follower(epoch, leader_id, now, reason)
        if self.quorum.state is not old:
            self._carry_high_watermark(old)
            self._left(old, now)

    def transition_to_voted(self, candidate: ReplicaKey, now: int) -> None:
        old = self.quorum.state
        self.quorum.transition_to_voted(candidate, now)
        self._carry_high_watermark(old)
        if isinstance(old, ProspectiveState):
            self._left(old, now)  # its pre-vote is over; late answers are not for Voted

    def transition_to_prospective(self, now: int, reason: str) -> None:
        """KIP-996: ask before raising the epoch. A single voter wins its pre-vote at once."""
        old = self.quorum.state
        self.quorum.transition_to_prospective(now, reason)
        self._carry_high_watermark(old)
        self._left(old, now)  # Kafka resets the connections on becoming Prospective

    def transition_after_pre_vote(self, now: int, reason: str) -> None:
        old = self.quorum.state
        self.quorum.transition_after_pre_vote(now, reason)
        self._carry_high_watermark(old)
        self._left(old, now)

    def transition_to_candidate(self, now: int, reason: str) -> None:
        old = self.quorum.state
        self.quorum.transition_to_candidate(now, reason)
        self._carry_high_watermark(old)
        self._left(old, now)  # pre-vote answers must not count as votes

    def become_leader(self, now: int) -> None:
        """Lead: record the epoch's start in the log (KAFKA-7415), then write the LeaderChange
        control record, so that the high watermark can pass the epoch start as soon as the
        quorum has it."""
        old = self.quorum.state
        epoch_start = self.log.end_offset
        state = self.quorum.transition_to_leader(epoch_start, now)
        self._left(old, now)
        key, value = leader_change_record(self.node_id, state.voters, state.granting_voters)
        try:
            self.log.initialize_leader_epoch(state.epoch)
            self.log.append_as_leader([(key, value)], state.epoch, control=True)
        except OSError as exc:  # a leader that cannot write resigns at once
            self.cannot_write(state, exc, now, "the LeaderChange record")
            return
        logger.info("%s leader of epoch %d from offset %d", self.prefix, state.epoch, epoch_start)

    def resign_leadership(
        self,
        state: LeaderState,
        now: int,
        reason: str,
        successors: tuple[int, ...] | None = None,
    ) -> None:
        """Resign, naming ``successors`` first (default: the other voters, most caught up
        first)."""
        if successors is None:
            successors = state.non_leader_voters_by_descending_fetch_offset()
        self.quorum.transition_to_resigned(successors, now, reason)
        self._carry_high_watermark(state)
        self._left(state, now)
        logger.info("%s resigned epoch %d: %s", self.prefix, state.epoch, reason)

    def on_high_watermark_changed(self, now: int) -> None:
        """The leader's high watermark moved: held fetches that wait for it may go."""
        self.purgatory.high_watermark_moved(now)

    # ---- the voter set in the log (KIP-853, raftcore.raft.voter_history) -----------------------

    def on_appended(self, data: bytes | memoryview, now: int, scan: Any = None) -> None:
        """Batches were appended (a follower's fetch; ``scan``: their scan, if made already):
        KRaftVersion and Voters records among them take effect at once, committed or not."""
        found = control_records_in(data, scan)
        if found:
            self.history.add_all(found)
            self.on_voters_changed(now)

    def on_truncated(self, end_offset: int, now: int) -> None:
        """The log was truncated: a Voters record it removed gives the previous set back."""
        before = self.history.latest()
        self.history.truncate_new(end_offset)
        if self.history.latest() is not before:
            self.on_voters_changed(now)

    def on_voters_changed(self, now: int) -> None:
        reconfig.voters_changed(self, now)

    # ---- voter changes and leadership transfer (raftcore.raft.reconfig) -----------------------

    def add_voter(
        self, key: ReplicaKey, endpoint: VoterEndpoint | None, timeout_ms: int, now: int
    ) -> int:
        """AddRaftVoter (leader only; NotLeaderError elsewhere): a token whose verdict comes in
        a later Output's ``voter_changes``. Poll afterwards."""
        return reconfig.add_voter(self, key, endpoint, timeout_ms, now)

    def remove_voter(self, key: ReplicaKey, timeout_ms: int, now: int) -> int:
        """RemoveRaftVoter (leader only): as :meth:`add_voter`."""
        return reconfig.remove_voter(self, key, timeout_ms, now)

    def transfer_leadership(self, target: int, timeout_ms: int, now: int) -> int:
        """Hand leadership to voter ``target`` once it has caught up (no appends meanwhile),
        then resign naming it first: as :meth:`add_voter`."""
        return reconfig.transfer_leadership(self, target, timeout_ms, now)

    def next_change_token(self) -> int:
        self._change_token += 1
        return self._change_token

    def change_done(self, outcome: reconfig.ChangeOutcome) -> None:
        self._change_outcomes.append(outcome)

    # ---- polling ------------------------------------------------------------------------------

    def _finish(self, now: int) -> Output:
        if not self._started:
            raise RaftcoreError(f"{self.prefix} call start() first")
        deadline = polling.poll(self, now)
        self.committed.observe(self.quorum.state.high_watermark)  # before a new leader's None
        if self.feed.damaged is not None and not self.damage:
            self.feed.resume_after_repair()  # repaired (or truncated away): read on
        self.feed.update()
        if self.feed.damaged is not None and not self.damage:
            self.damage.report(self, self.feed.damaged, now, "replaying committed batches")
            deadline = min(deadline, polling.poll(self, now))  # a leader resigns at once
        if self.purgatory:
            self.purgatory.complete(now, expired_only=True)
        deadline = min(
            deadline,
            self.purgatory.next_deadline(),
            self.requests.next_deadline(),
            self.snapshots.next_deadline(now),
        )
        self._settle_pending()
        out = Output(
            self._outbox,
            max(deadline, now + 1) if deadline != INF else INF,
            self._completions,
            self.snapshots.due(now),
            self._read_outcomes,
            self._change_outcomes,
            self.shutting_down
            and not self.quorum.is_leader()
            and not getattr(self.quorum.state, "unacknowledged", None),
            self.snapshots.take_log_start_moved(),
        )
        self._outbox = []
        self._completions = []
        self._read_outcomes = []
        self._change_outcomes = []
        return out

    def __repr__(self) -> str:
        return f"RaftCore({self.node_id}, {self.quorum.state!r}, end={self.log.end_offset})"


_RESPONSE_HANDLERS: dict[type, Callable[..., bool]] = {
    FetchResponse: fetch.handle_response,
    FetchSnapshotResponse: fetch_snapshot.handle_response,
    VoteResponse: vote.handle_response,
    BeginQuorumEpochResponse: begin_quorum_epoch.handle_response,
    EndQuorumEpochResponse: end_quorum_epoch.handle_response,
    UpdateVoterResponse: reconfig.handle_update_response,
}
