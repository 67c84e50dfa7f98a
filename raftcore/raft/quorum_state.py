"""QuorumState: the one owner of a replica's epoch state and of every transition.

Each transition that a restart must remember is written to the quorum-state store *before*
the in-memory state changes (Kafka's durableTransitionTo), so a vote, once promised, survives
a crash. Resigned and Prospective are the states kept in memory alone (a restarted former leader
comes back Resigned from the stored "leader = self"; Prospective changes nothing stored).

Transition table (from -> to: when). The code below checks every transition against
``TRANSITIONS``, and a test checks this table against ``TRANSITIONS``.

    unattached  -> unattached: a higher epoch is seen
    unattached  -> voted: a vote is granted in this epoch
    unattached  -> prospective: the election timeout expires (voters only)
    unattached  -> follower: the leader of this or a higher epoch is learned
    voted       -> unattached: a higher epoch is seen
    voted       -> prospective: the election timeout expires
    voted       -> follower: the leader of this or a higher epoch is learned
    prospective -> unattached: a higher epoch is seen; or, in the same epoch, the pre-vote
                   was lost or timed out and no leader or vote is known
    prospective -> voted: a vote is granted in this epoch; or it had voted in this epoch
                   and the pre-vote was lost or timed out
    prospective -> candidate: a majority granted its pre-vote (or a voter lacks pre-vote)
    prospective -> follower: the leader of this or a higher epoch is learned; or it knew
                   the leader and the pre-vote was lost or timed out
    candidate   -> unattached: a higher epoch is seen
    candidate   -> prospective: the election was lost or timed out and the backoff ended
    candidate   -> leader: a majority granted its vote
    candidate   -> follower: the leader of this or a higher epoch is learned
    follower    -> unattached: a higher epoch is seen
    follower    -> prospective: the fetch timeout expires (voters only)
    follower    -> follower: the leader of a higher epoch is learned
    leader      -> unattached: a higher epoch is seen
    leader      -> follower: the leader of a higher epoch is learned
    leader      -> resigned: shutdown, resignation, or a majority stopped fetching
    resigned    -> unattached: a higher epoch is seen, or the election timeout expires (epoch + 1)
    resigned    -> follower: the leader of a higher epoch is learned

Pre-vote (KIP-996): only Prospective becomes Candidate, so the epoch rises only after a
majority said it would vote. Prospective is kept in memory only, like Resigned: it keeps the
epoch, leader and vote of the state it came from, and so does the file.
"""

from __future__ import annotations

import logging
import random as random_module

from raftcore.errors import CorruptCheckpointError, LostQuorumStateError, RaftcoreError
from raftcore.raft.config import QuorumConfig
from raftcore.raft.quorum_store import QuorumStateStore
from raftcore.raft.replicated_log import ReplicatedLog
from raftcore.raft.states import (
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)
from raftcore.raft.states.base import NO_DEADLINE
from raftcore.raft.values import ElectionState, LeaderAndEpoch
from raftcore.raft.voter_history import VoterHistory
from raftcore.raft.voters import ReplicaKey, VoterSet

__all__ = ["TRANSITIONS", "IllegalTransitionError", "QuorumState"]

logger = logging.getLogger(__name__)

TRANSITIONS: dict[str, frozenset[str]] = {
    "unattached": frozenset({"unattached", "voted", "prospective", "follower"}),
    "voted": frozenset({"unattached", "prospective", "follower"}),
    "prospective": frozenset({"unattached", "voted", "candidate", "follower"}),
    "candidate": frozenset({"unattached", "prospective", "leader", "follower"}),
    "follower": frozenset({"unattached", "prospective", "follower"}),
    "leader": frozenset({"unattached", "follower", "resigned"}),
    "resigned": frozenset({"unattached", "follower"}),
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
        history: VoterHistory | None = None,
        directory_id: bytes | None = None,
        formatted: bool = False,
        joining: bool = False,
    ) -> None:
        self.local_id = local_id
        self.config = config
        # KIP-853: who votes is the latest voter set in the log (the static one before any)
        self.history = history or VoterHistory(VoterSet.static(config.voters))
        self.local_key = ReplicaKey(local_id, directory_id)
        self.store = store
        self.log = log
        self.rng = rng
        self.prefix = log_prefix or f"[node {local_id}]"
        # told that it is not a voter (INCONSISTENT_VOTER_SET of a static voter set, or a new
        # disk under an old id): it acts as an observer until the voter set in the log (KIP-853)
        # says otherwise
        self.demoted = joining
        # formatted without a voter set (--no-initial-voters): it answers no Vote until the
        # voter set in the log names it
        self.joining = joining
        # the store held a quorum-state once (a formatted data directory writes one): a
        # missing one is a lost one, empty log or not
        self.formatted = formatted
        self.started_without_state = False  # no quorum-state when it started (a new disk)
        self.state: EpochState = UnattachedState(0, self.voters, NO_DEADLINE)

    # ---- questions --------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in force (the latest in the log, committed or not)."""
        return self.history.latest()

    @property
    def voters(self) -> frozenset[int]:
        return self.history.latest().ids

    @property
    def is_voter(self) -> bool:
        """Does this replica act as a voter (stand for election, run its election timer)? When
        the latest voter set admits it -- or when a change not committed yet removed it: its
        log may be the only one holding that change (a leader that removed itself and lost the
        lead before the change committed), and without it standing no voter could win."""
        history = self.history
        offset = history.latest_offset()
        if self.demoted and offset < 0:
            return False  # the static voter set is no proof: wait for the log's
        if history.latest().is_voter(self.local_key):
            return True
        hw = self.state.high_watermark
        if offset < 0 or (hw is not None and offset < hw):
            return False
        # named by its directory id in the set before (a static voter key, without one, could
        # be a wiped disk's)
        before = history.at(offset - 1).key_of(self.local_id)
        return before is not None and before == self.local_key and before.directory_id is not None

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

        Never vote twice: a quorum-state that is missing or unreadable while the log holds
        records (or, on a formatted data directory, which always holds one, at all) means this
        replica may have voted in an epoch it no longer remembers. It must not come back as the
        voter it was: LostQuorumStateError, unless the voter set no longer names it by this
        directory id (the driver gave it a new one: it is a new replica, an observer until the
        voter set takes it in). A static voter set (kraft.version 0) cannot tell a new directory
        from the old one: always LostQuorumStateError there.
        """
        try:
            stored = self.store.read()
        except CorruptCheckpointError as exc:
            self._check_lost(f"the quorum-state is unreadable ({exc})")
            stored = None
        log_epoch = self.log.last_fetched_epoch
        if stored is None:
            self.started_without_state = True
            if self.formatted or self.log.end_offset > 0 or self.log.log_start_offset > 0:
                self._check_lost("the quorum-state is missing")
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
            # (a non-voter too leaves Resigned when the timer runs out: KAFKA-17608)
            deadline = now + self.random_election_timeout_ms()
            state = ResignedState(stored.epoch, self.voters, self.local_id, deadline, ())
        elif (
            stored.voted_id is not None
            and ReplicaKey(stored.voted_id, stored.voted_directory_id) == self.local_key
            and self.is_voter
        ):
            state = CandidateState(
                stored.epoch,
                self.voters,
                self.local_id,
                1,
                self._election_deadline(now),
                local_directory_id=self.local_key.directory_id,
            )
        elif stored.voted_id is not None:
            voted = ReplicaKey(stored.voted_id, stored.voted_directory_id)
            state = VotedState(stored.epoch, self.voters, voted, self._election_deadline(now))
        elif stored.leader_id is not None:
            state = FollowerState(
                stored.epoch, self.voters, stored.leader_id, self.config.fetch_timeout_ms, now
            )
        else:
            state = UnattachedState(stored.epoch, self.voters, self._election_deadline(now))
        logger.info("%s starting as %r", self.prefix, state)
        self.state = state

    def _check_lost(self, what: str) -> None:
        """The quorum-state is gone though the log holds records: refuse to be the old voter."""
        history = self.history
        where = getattr(self.store, "path", "the quorum-state store")
        if self.log.end_offset == 0 and self.log.log_start_offset == 0:
            # nothing in the log says which voter set this is: it may have voted in epoch 1
            # of a cluster that never elected a leader
            raise LostQuorumStateError(
                f"{self.prefix} {what} ({where}) and the log is empty: this voter may have "
                "voted in an epoch it no longer remembers; restore the file, or wipe the data "
                "directory and format it with --no-initial-voters to come back as a new "
                "replica (docs/operations.md)",
                static=True,
            )
        if history.latest_offset() < 0:
            raise LostQuorumStateError(
                f"{self.prefix} {what} ({where}) while the log holds records up to offset "
                f"{self.log.end_offset}: this voter may have voted in an epoch it no longer "
                "remembers, and the voter set is static (kraft.version 0), so it cannot come "
                "back as another replica; restore the file, or once every voter runs a release "
                "with dynamic voters, replace this node (docs/cluster.md)",
                static=True,
            )
        named = history.latest().key_of(self.local_id)
        if named is not None and named == self.local_key:
            raise LostQuorumStateError(
                f"{self.prefix} {what} ({where}) while the log holds records up to offset "
                f"{self.log.end_offset} and the voter set names this replica "
                f"({self.local_key}): it may have voted in an epoch it no longer remembers; "
                "it comes back under a new directory id, as a new replica",
                static=False,
            )
        self.demoted = True
        logger.warning(
            "%s %s while the log holds records: this replica comes back as %s, an observer "
            "until the voter set takes it in (remove the old voter, add this one)",
            self.prefix,
            what,
            self.local_key,
        )

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
        if self.is_voter and (
            isinstance(state, (UnattachedState, VotedState, CandidateState, ResignedState))
            or (isinstance(state, ProspectiveState) and not state.is_vote_rejected())
        ):
            # Keep the election timer running: a candidate that cannot win (its log is behind)
            # must not hold everyone else off by bumping the epoch again and again. (Kafka's
            # transitionToUnattached; a resigned leader's timer ran out, so it runs at once.)
            deadline = state.election_deadline
        else:
            deadline = self._election_deadline(now)
        self._switch(UnattachedState(epoch, self.voters, deadline), reason)

    def transition_to_voted(self, candidate: ReplicaKey, now: int) -> None:
        state = self.state
        if not isinstance(state, (UnattachedState, ProspectiveState)) or (
            isinstance(state, ProspectiveState)
            and (state.voted is not None or state.leader is not None)
        ):
            raise IllegalTransitionError(f"{self.prefix} cannot vote from {state!r}")
        self._switch(
            VotedState(state.epoch, self.voters, candidate, self._election_deadline(now)),
            f"granted the vote to {candidate}",
        )

    def transition_to_prospective(self, now: int, reason: str) -> ProspectiveState:
        """Start a pre-vote in this epoch (KIP-996), keeping the leader and vote known; a
        memory-only transition, since nothing stored changes (Kafka's transitionToProspective)."""
        state = self.state
        if not self.is_voter:
            raise IllegalTransitionError(f"{self.prefix} an observer cannot run a pre-vote")
        if isinstance(state, (LeaderState, ResignedState, ProspectiveState)):
            raise IllegalTransitionError(f"{self.prefix} cannot run a pre-vote from {state!r}")
        new = ProspectiveState(
            state.epoch,
            self.voters,
            self.local_id,
            self._election_deadline(now),
            leader=state.leader_id,
            voted=state.voted if isinstance(state, VotedState) else None,
            retries=state.retries if isinstance(state, CandidateState) else 0,
            leader_resigned=isinstance(state, FollowerState) and state.leader_resigned,
        )
        self._switch(new, reason, durable=False)
        return new

    def transition_after_pre_vote(self, now: int, reason: str) -> None:
        """The pre-vote was lost or timed out: back to what this replica knows of the epoch,
        in the same epoch -- Follower of the leader it knew, Voted for its candidate, or
        Unattached (Kafka's prospectiveTransitionAfterElectionLoss). The epoch stays."""
        state = self.state
        if not isinstance(state, ProspectiveState):
            raise IllegalTransitionError(f"{self.prefix} no pre-vote to end in {state!r}")
        # Timed out: the election timer is spent, so it starts again at once; rejected: a new
        # random election timeout first (Kafka keeps the remaining time unless rejected).
        deadline = (
            self._election_deadline(now) if state.is_vote_rejected() else state.election_deadline
        )
        new: EpochState
        if state.leader is not None:
            new = FollowerState(
                state.epoch, self.voters, state.leader, self.config.fetch_timeout_ms, now
            )
        elif state.voted is not None:
            new = VotedState(state.epoch, self.voters, state.voted, deadline)
        else:
            new = UnattachedState(state.epoch, self.voters, deadline)
        # Nothing stored changes (same epoch, leader and vote), but write it as Kafka does.
        self._switch(new, reason)

    def transition_to_candidate(self, now: int, reason: str) -> CandidateState:
        if not self.is_voter:
            raise IllegalTransitionError(f"{self.prefix} an observer cannot be a candidate")
        if not isinstance(self.state, ProspectiveState):
            # KIP-996: only a pre-vote won (or a voter without pre-vote) raises the epoch.
            raise IllegalTransitionError(
                f"{self.prefix} only Prospective becomes Candidate, not {self.state!r}"
            )
        retries = self.state.retries + 1
        new = CandidateState(
            self.epoch + 1,
            self.voters,
            self.local_id,
            retries,
            self._election_deadline(now),
            local_directory_id=self.local_key.directory_id,
        )
        self._switch(new, reason)
        return new

    def transition_to_leader(self, epoch_start_offset: int, now: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState) or not state.is_vote_granted():
            raise IllegalTransitionError(f"{self.prefix} cannot lead from {state!r}")
        new = LeaderState(
            state.epoch,
            self.voter_set,
            local_id=self.local_id,
            local_directory_id=self.local_key.directory_id,
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
            if not isinstance(state, ProspectiveState):
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
        # A leader that removed itself (KIP-853) is no voter now, yet it leaves Resigned when
        # the timer runs out too (as Unattached of the next epoch, KAFKA-17608).
        deadline = now + self.random_election_timeout_ms()
        self._switch(
            ResignedState(state.epoch, self.voters, self.local_id, deadline, successors),
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
