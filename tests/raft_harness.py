"""Drive one RaftCore by hand: deliver messages, let time pass, look at what it sent.

The other replicas are played by the test, which writes their messages itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from raftcore.error_codes import Errors
from raftcore.raft import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ElectionState,
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    Outbound,
    QuorumConfig,
    RaftCore,
    VoteRequest,
    VoteResponse,
)
from raftcore.raft.states import CandidateState, LeaderState, ProspectiveState
from raftcore.records import encode_batch
from raftcore.testing import InMemoryLog, MemoryQuorumStateStore

CLUSTER = "test-cluster"


@dataclass
class RecordingListener:
    committed: list = field(default_factory=list)  # (offset, value)
    batches: list = field(default_factory=list)
    leaders: list[LeaderAndEpoch] = field(default_factory=list)

    def handle_commit(self, batches: list) -> None:
        self.batches.extend(batches)
        for b in batches:
            self.committed.extend((r.offset, r.value) for r in b.records)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)


class Harness:
    def __init__(
        self,
        node_id: int = 1,
        voters: tuple[int, ...] = (1, 2, 3),
        *,
        log: InMemoryLog | None = None,
        store: MemoryQuorumStateStore | None = None,
        seed: int = 7,
        listener: RecordingListener | None = None,
        start: bool = True,
        directory_id: bytes | None = None,
        endpoint: Any = None,
        committed_offset: int = 0,
        formatted: bool = False,
        joining: bool = False,
        **config: Any,
    ) -> None:
        self.node_id = node_id
        self.now = 1_000
        self.log_start_moves_said = 0  # Outputs that said the log start moved
        self.log = log if log is not None else InMemoryLog()
        if store is None:
            store = MemoryQuorumStateStore()
            if self.log.end_offset > 0 or self.log.log_start_offset > 0:
                # a replica whose log holds records had a quorum-state (one without it is a
                # replica that lost it: LostQuorumStateError, see test_raft_lost_state)
                store.write(ElectionState(epoch=self.log.last_fetched_epoch))
        self.store = store
        defaults = dict(
            election_timeout_ms=1000,
            fetch_timeout_ms=2000,
            election_backoff_max_ms=1000,
            request_timeout_ms=2000,
            retry_backoff_ms=20,
            fetch_max_wait_ms=500,
        )
        defaults.update(config)
        self.config = QuorumConfig(voters=frozenset(voters), cluster_id=CLUSTER, **defaults)
        self.listener = listener if listener is not None else RecordingListener()
        self.core = RaftCore(
            node_id,
            self.config,
            self.log,
            self.store,
            rng=random.Random(seed),
            listener=self.listener,
            directory_id=directory_id,
            endpoint=endpoint,
            committed_offset=committed_offset,
            formatted=formatted,
            joining=joining,
        )
        self.sent: list[Outbound] = []
        self.reads: list = []  # ReadIndexOutcome, in the order the core gave them
        self.changes: list = []  # ChangeOutcome (KIP-853 voter changes, transfers)
        self.deadline = float("inf")
        if start:
            self._take(self.core.start(self.now))

    # ---- driving -----------------------------------------------------------------------------

    def _take(self, out) -> None:
        self.sent.extend(out.messages)
        self.reads.extend(out.reads)
        self.changes.extend(out.voter_changes)
        self.deadline = out.next_deadline
        self.log_start_moves_said += out.log_start_moved

    def poll(self) -> None:
        self._take(self.core.poll(self.now))

    def advance(self, ms: int) -> None:
        self.now += ms
        self.poll()

    def deliver(self, source: int, message: Any, correlation_id: int = 999) -> None:
        self._take(self.core.handle(source, correlation_id, message, self.now))

    def flush(self) -> None:
        self.log.flush()
        self.poll()

    def request(self, source: int, message: Any, correlation_id: int = 4242) -> Any:
        """Deliver a request and return the response to it (asserting there is one)."""
        self.deliver(source, message, correlation_id)
        replies = [
            o
            for o in self.sent
            if o.destination == source and o.correlation_id == correlation_id and not o.is_request
        ]
        assert replies, f"no response to {message!r}; sent {self.sent!r}"
        self.sent.remove(replies[-1])
        return replies[-1].message

    def take(self, kind: type, destination: int | None = None) -> list[Outbound]:
        """Remove and return the sent messages of ``kind`` (to ``destination``)."""
        found = [
            o
            for o in self.sent
            if isinstance(o.message, kind) and (destination is None or o.destination == destination)
        ]
        for o in found:
            self.sent.remove(o)
        return found

    def respond(self, outbound: Outbound, response: Any) -> None:
        self.deliver(outbound.destination, response, outbound.correlation_id)

    # ---- shortcuts -----------------------------------------------------------------------------

    @property
    def state(self):
        return self.core.state

    @property
    def epoch(self) -> int:
        return self.core.epoch

    def time_out_election(self) -> None:
        """Let the election timeout (at most 2T) pass."""
        self.advance(2 * self.config.election_timeout_ms)

    def become_prospective(self) -> None:
        """Let the election timeout pass: a voter first asks for pre-votes (KIP-996)."""
        self.time_out_election()
        assert isinstance(self.state, ProspectiveState), self.state

    def become_candidate(self) -> None:
        """Time out, win the pre-vote, and stand for election (epoch + 1)."""
        self.become_prospective()
        others = [v for v in self.core.quorum.voters if v != self.node_id]
        self.grant_pre_votes(*others)
        assert isinstance(self.state, CandidateState), self.state

    def pre_votes(self) -> list[Outbound]:
        """Remove and return the pre-vote requests sent."""
        found = [o for o in self.sent if isinstance(o.message, VoteRequest) and o.message.pre_vote]
        for o in found:
            self.sent.remove(o)
        return found

    def grant_pre_votes(self, *voters: int, granted: bool = True) -> None:
        for out in self.pre_votes():
            if out.destination in voters:
                self.respond(
                    out, VoteResponse(Errors.NONE, -1, out.message.candidate_epoch, granted)
                )

    def grant_votes(self, *voters: int) -> None:
        for out in self.take(VoteRequest):
            if out.destination in voters and not out.message.pre_vote:
                self.respond(out, VoteResponse(Errors.NONE, -1, out.message.candidate_epoch, True))

    def become_leader(self) -> LeaderState:
        self.become_candidate()
        others = [v for v in self.core.quorum.voters if v != self.node_id]
        self.grant_votes(*others)
        assert isinstance(self.state, LeaderState), self.state
        return self.state

    def fetch(
        self,
        replica: int,
        offset: int,
        last_epoch: int,
        *,
        epoch: int | None = None,
        max_wait_ms: int = 0,
        is_follower: bool = True,
        high_watermark: int = -1,
        correlation_id: int = 4242,
        max_bytes: int = 8 << 20,
        directory_id: bytes | None = None,
        endpoint: Any = None,
    ) -> FetchResponse | None:
        """A fetch from ``replica``; returns the response, or None if the leader holds it."""
        request = FetchRequest(
            CLUSTER,
            replica,
            offset,
            last_epoch,
            self.epoch if epoch is None else epoch,
            max_wait_ms,
            is_follower=is_follower,
            high_watermark=high_watermark,
            max_bytes=max_bytes,
            replica_directory_id=directory_id,
            replica_endpoint=endpoint,
        )
        self.deliver(replica, request, correlation_id)
        replies = [
            o
            for o in self.sent
            if o.destination == replica and o.correlation_id == correlation_id and not o.is_request
        ]
        for r in replies:
            self.sent.remove(r)
        return replies[-1].message if replies else None

    def begin_quorum_epoch(self, leader: int, epoch: int) -> BeginQuorumEpochResponse:
        return self.request(leader, BeginQuorumEpochRequest(CLUSTER, leader, epoch, self.node_id))


def batch(base: int, epoch: int, n: int = 1, value: bytes = b"v") -> bytes:
    return encode_batch(
        [(b"k", value + b"%d" % i) for i in range(n)],
        base_offset=base,
        leader_epoch=epoch,
        timestamp_ms=1,
    )


def log_with(*epochs: int) -> InMemoryLog:
    """A log with one single-record batch per epoch listed (in order), flushed."""
    log = InMemoryLog()
    for epoch in epochs:
        log.append_as_follower(batch(log.end_offset, epoch))
    log.flush()
    return log
