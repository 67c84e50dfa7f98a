"""QuorumState: the one owner of a replica's epoch state and of every transition.

Each transition that a restart must remember is written to the quorum-state store *before*
the in-memory state changes (Kafka's durableTransitionTo), so a vote, once promised, survives
a crash. Resigned is the only state kept in memory alone (a restarted former leader comes back
Resigned from the stored "leader = self").

Transition table (from -> to: when). The code below checks every transition against
``TRANSITIONS``, and a test checks this table against ``TRANSITIONS``.

    unattached -> unattached: a higher epoch is seen
    unattached -> voted: a vote is granted in this epoch
    unattached -> candidate: the election timeout expires (voters only)
    unattached -> follower: the leader of this or a higher epoch is learned
    voted      -> unattached: a higher epoch is seen
    voted      -> candidate: the election timeout expires
    voted      -> follower: the leader of this or a higher epoch is learned
    candidate  -> unattached: a higher epoch is seen
    candidate  -> candidate: the election was lost or timed out and the backoff ended
    candidate  -> leader: a majority granted its vote
    candidate  -> follower: the leader of this or a higher epoch is learned
    follower   -> unattached: a higher epoch is seen
    follower   -> candidate: the fetch timeout expires (voters only)
    follower   -> follower: the leader of a higher epoch is learned
    leader     -> unattached: a higher epoch is seen
    leader     -> follower: the leader of a higher epoch is learned
    leader     -> resigned: shutdown, resignation, or a majority stopped fetching
    resigned   -> unattached: a higher epoch is seen (observers: epoch + 1 on timeout)
    resigned   -> candidate: the election timeout expires (voters only)
    resigned   -> follower: the leader of a higher epoch is learned
"""

from __future__ import annotations

import logging
import random as random_module

from raftcore.errors import RaftcoreError
from raftcore.raft.config import QuorumConfig
from raftcore.raft.quorum_store import QuorumStateStore
from raftcore.raft.replicated_log import ReplicatedLog
from raftcore.raft.states import (
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    ResignedState,
    UnattachedState,
    VotedState,
)
from raftcore.raft.states.base import NO_DEADLINE
from raftcore.raft.values import ElectionState, LeaderAndEpoch

__all__ = ["TRANSITIONS", "IllegalTransitionError", "QuorumState"]

logger = logging.getLogger(__name__)

TRANSITIONS: dict[str, frozenset[str]] = {
    "unattached": frozenset({"unattached", "voted", "candidate", "follower"}),
    "voted": frozenset({"unattached", "candidate", "follower"}),
    "candidate": frozenset({"unattached", "candidate", "leader", "follower"}),
    "follower": frozenset({"unattached", "candidate", "follower"}),
    "leader": frozenset({"unattached", "follower", "resigned"}),
    "resigned": frozenset({"unattached", "candidate", "follower"}),
}


class IllegalTransitionError(RaftcoreError):
    """A transition the protocol forbids: a bug, never a network condition."""


class QuorumState:
    def __init__(
        self,
        local_id: int,
        config: QuorumConfig,
        store: QuorumStateStore,
        log: ReplicatedLog,
        *,
        rng: random_module.Random,
        log_prefix: str = "",
    ) -> None:
        self.local_id = local_id
        self.config = config
        self.voters = config.voters
        self.store = store
        self.log = log
        self.rng = rng
        self.prefix = log_prefix or f"[node {local_id}]"
        self.demoted = False  # told by a leader that it is not a voter (INCONSISTENT_VOTER_SET)
        self.state: EpochState = UnattachedState(0, self.voters, NO_DEADLINE)

    # ---- questions --------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def is_voter(self) -> bool:
        return self.local_id in self.voters and not self.demoted

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.state.leader_id, self.state.epoch)

    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    def random_election_timeout_ms(self) -> int:
        """Kafka's randomized election timeout: T + random[0, T)."""
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t) if t > 0 else 0

    def _election_deadline(self, now: int) -> float:
        return now + self.random_election_timeout_ms() if self.is_voter else NO_DEADLINE

    # ---- start ------------------------------------------------------------------------------

    def initialize(self, now: int) -> None:
        """Pick the starting state from the store and the log (Kafka's QuorumState.initialize).

        - a stored epoch below the log's last epoch: Unattached in the log's epoch;
        - stored "leader = self": Resigned in that epoch -- never Leader again, so no
          (epoch, offset) pair can be reused even if unflushed data was lost;
        - stored "voted for self": Candidate in that epoch;
        - stored vote for another: Voted (the vote stands);
        - stored leader: Follower; otherwise Unattached.
        """
        stored = self.store.read()
        log_epoch = self.log.last_fetched_epoch
        if stored is None:
            stored = ElectionState(epoch=0, voters=self.voters)
        if stored.epoch < log_epoch:
            logger.info(
                "%s stored epoch %d is behind the log's epoch %d",
                self.prefix,
                stored.epoch,
                log_epoch,
            )
            state: EpochState = UnattachedState(
                log_epoch, self.voters, self._election_deadline(now)
            )
            self._persist(state)
        elif stored.leader_id is not None and stored.leader_id == self.local_id:
            state = ResignedState(
                stored.epoch, self.voters, self.local_id, self._election_deadline(now), ()
            )
        elif stored.voted_id is not None and stored.voted_id == self.local_id and self.is_voter:
            state = CandidateState(
                stored.epoch, self.voters, self.local_id, 1, self._election_deadline(now)
            )
        elif stored.voted_id is not None:
            state = VotedState(
                stored.epoch, self.voters, stored.voted_id, self._election_deadline(now)
            )
        elif stored.leader_id is not None:
            state = FollowerState(
                stored.epoch, self.voters, stored.leader_id, self.config.fetch_timeout_ms, now
            )
        else:
            state = UnattachedState(stored.epoch, self.voters, self._election_deadline(now))
        logger.info("%s starting as %r", self.prefix, state)
        self.state = state

    # ---- transitions --------------------------------------------------------------------------

    def _persist(self, state: EpochState) -> None:
        self.store.write(state.election_state())

    def _switch(self, new: EpochState, reason: str, *, durable: bool = True) -> None:
        old = self.state
        if new.name not in TRANSITIONS[old.name]:
            raise IllegalTransitionError(
                f"{self.prefix} illegal transition {old.name} -> {new.name} "
                f"(epoch {old.epoch} -> {new.epoch}): {reason}"
            )
        if new.epoch < old.epoch:
            raise IllegalTransitionError(
                f"{self.prefix} epoch would go back from {old.epoch} to {new.epoch} ({reason})"
            )
        if durable:
            self._persist(new)  # before the switch: the file never lags the memory
        self.state = new
        logger.debug("%s %s -> %r: %s", self.prefix, old.name, new, reason)

    def transition_to_unattached(self, epoch: int, now: int, reason: str) -> None:
        if epoch <= self.epoch:
            raise IllegalTransitionError(
                f"{self.prefix} unattached needs a higher epoch than {self.epoch}, got {epoch}"
            )
        state = self.state
        if self.is_voter and isinstance(state, (UnattachedState, VotedState, CandidateState)):
            # Keep the election timer running: a candidate that cannot win (its log is behind)
            # must not hold everyone else off by bumping the epoch again and again.
            deadline = state.election_deadline
        else:
            deadline = self._election_deadline(now)
        self._switch(UnattachedState(epoch, self.voters, deadline), reason)

    def transition_to_voted(self, candidate_id: int, now: int) -> None:
        state = self.state
        if not isinstance(state, UnattachedState):
            raise IllegalTransitionError(f"{self.prefix} cannot vote from {state!r}")
        self._switch(
            VotedState(state.epoch, self.voters, candidate_id, self._election_deadline(now)),
            f"granted the vote to {candidate_id}",
        )

    def transition_to_candidate(self, now: int, reason: str) -> CandidateState:
        if not self.is_voter:
            raise IllegalTransitionError(f"{self.prefix} an observer cannot be a candidate")
        retries = self.state.retries + 1 if isinstance(self.state, CandidateState) else 1
        new = CandidateState(
            self.epoch + 1, self.voters, self.local_id, retries, self._election_deadline(now)
        )
        self._switch(new, reason)
        return new

    def transition_to_leader(self, epoch_start_offset: int, now: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState) or not state.is_vote_granted():
            raise IllegalTransitionError(f"{self.prefix} cannot lead from {state!r}")
        new = LeaderState(
            state.epoch,
            self.voters,
            local_id=self.local_id,
            epoch_start_offset=epoch_start_offset,
            granting_voters=frozenset(state.granted),
            check_quorum_timeout_ms=self.config.check_quorum_timeout_ms,
            begin_quorum_interval_ms=self.config.begin_quorum_epoch_interval_ms,
            now=now,
        )
        self._switch(new, f"won the election with votes from {sorted(state.granted)}")
        return new

    def transition_to_follower(self, epoch: int, leader_id: int, now: int, reason: str) -> None:
        state = self.state
        if epoch == self.epoch and state.leader_id is not None:
            if state.leader_id != leader_id or isinstance(state, (LeaderState, ResignedState)):
                raise IllegalTransitionError(
                    f"{self.prefix} epoch {epoch} already has leader {state.leader_id}, "
                    f"told {leader_id}"
                )
            return  # already following it
        if epoch < self.epoch:
            raise IllegalTransitionError(
                f"{self.prefix} cannot follow {leader_id} in past epoch {epoch} < {self.epoch}"
            )
        if leader_id == self.local_id:
            raise IllegalTransitionError(f"{self.prefix} told to follow itself in epoch {epoch}")
        self._switch(
            FollowerState(epoch, self.voters, leader_id, self.config.fetch_timeout_ms, now),
            reason,
        )

    def transition_to_resigned(self, successors: tuple[int, ...], now: int, reason: str) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            raise IllegalTransitionError(f"{self.prefix} cannot resign from {state!r}")
        self._switch(
            ResignedState(
                state.epoch, self.voters, self.local_id, self._election_deadline(now), successors
            ),
            reason,
            durable=False,
        )

    def demote(self, reason: str) -> None:
        """Stop acting as a voter (a leader says this replica is not one): no more
        elections or votes from here; it keeps fetching as an observer."""
        if not self.demoted:
            logger.error("%s acting as an observer from now on: %s", self.prefix, reason)
        self.demoted = True
        for attr in ("election_deadline",):
            if hasattr(self.state, attr):
                setattr(self.state, attr, NO_DEADLINE)
