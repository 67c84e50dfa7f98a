"""Leader: this replica leads this epoch. It tracks how far each replica has fetched, computes
the high watermark, and watches that a majority keeps fetching (check quorum).

Voters are counted by their key (KIP-853): a fetch from a voter's id with another directory id
(a wiped disk under the old id) is an observer's, and counts for nothing. The voter set may
change while it leads (:meth:`LeaderState.update_voters`): from the moment the change is in its
log, the high watermark and check quorum go by the new set."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from raftcore.raft.pending import PendingAppends
from raftcore.raft.read_index import ReadRounds
from raftcore.raft.states.base import EpochState
from raftcore.raft.values import ElectionState
from raftcore.raft.voters import ReplicaKey, VoterEndpoint, VoterSet

logger = logging.getLogger(__name__)

OBSERVER_SESSION_MS = 5 * 60 * 1000  # an observer silent this long is forgotten
MAX_OBSERVERS = 1024  # the most observers a leader keeps (the longest silent go first)


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one replica (DescribeQuorum reports these)."""

    replica_id: int
    is_voter: bool
    end_offset: int | None = None  # acknowledged: the last fetch offset (durable there)
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1
    last_fetch_request_ms: int = -1  # of the Fetch that leader_end_at_last_fetch belongs to
    directory_id: bytes | None = None
    endpoint: VoterEndpoint | None = None  # where it listens, as its fetches say
    repairing: bool = False  # its last fetch was a repair fetch (raftcore.raft.damage)

    @property
    def key(self) -> ReplicaKey:
        return ReplicaKey(self.replica_id, self.directory_id)

    def update(self, fetch_offset: int, leader_end_offset: int, now: int) -> None:
        """Record a fetch. The caught-up time (KIP-595 LastCaughtUpTimeMs) is now if the fetch
        reached the leader's end, or else the previous fetch's time if this fetch reached the
        end the leader had then."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now)
        elif self.leader_end_at_last_fetch > 0 and fetch_offset >= self.leader_end_at_last_fetch:
            # (the previous *Fetch*: a FetchSnapshot since says nothing of the leader's end)
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_request_ms)
        self.leader_end_at_last_fetch = leader_end_offset
        self.last_fetch_request_ms = now
        self.last_fetch_ms = max(self.last_fetch_ms, now)
        self.end_offset = fetch_offset


class LeaderState(EpochState):
    name = "leader"

    def __init__(
        self,
        epoch: int,
        voter_set: VoterSet,
        *,
        local_id: int,
        epoch_start_offset: int,
        granting_voters: frozenset[int],
        check_quorum_timeout_ms: int,
        begin_quorum_interval_ms: int,
        now: int,
        local_directory_id: bytes | None = None,
    ) -> None:
        super().__init__(epoch, voter_set.ids)
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = granting_voters
        # A new leader starts without a high watermark: it never inherits the previous
        # leader's, which keeps the cluster-wide high watermark monotonic.
        self.high_watermark: int | None = None
        self.voter_set = voter_set
        self.voter_states = {
            v.id: ReplicaState(v.id, True, directory_id=v.key.directory_id)
            for v in voter_set.values()
        }
        self.observer_states: dict[ReplicaKey, ReplicaState] = {}
        self.check_quorum_timeout_ms = check_quorum_timeout_ms
        self.check_quorum_deadline = now + check_quorum_timeout_ms
        self.fetched_voters: set[int] = set()
        self.begin_quorum_interval_ms = begin_quorum_interval_ms
        self.begin_quorum_deadline = now  # the first BeginQuorumEpoch goes at once
        self.acknowledged: set[int] = {local_id}
        self.resign_requested = False
        self.leader_change_fired = False
        # Appends waiting for the high watermark; they die with this epoch's leadership.
        self.pending = PendingAppends(epoch)
        # Linearizable reads waiting for their quorum round; they die with it too.
        self.reads = ReadRounds(local_id, voter_set.ids)
        # KIP-853: the voter change in flight (raftcore.raft.reconfig), and, at kraft.version
        # 0, what each voter reported of itself (UpdateRaftVoter) for the upgrade to 1.
        self.voter_change: object | None = None
        self.reported: dict[int, object] = {}
        # A leadership transfer under way (raftcore.raft.reconfig): no appends meanwhile.
        self.transfer: object | None = None

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    def election_state(self) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.local_id, voters=self.voters)

    # ---- replication progress and the high watermark ---------------------------------------

    def replica(self, key: ReplicaKey) -> ReplicaState:
        """The progress of ``key``: the voter's if the voter set admits it, else an observer's
        (a voter's id under another directory is an observer)."""
        state = self.voter_states.get(key.id)
        if state is not None and self.voter_set.is_voter(key):
            if state.directory_id is None:
                state.directory_id = key.directory_id
            return state
        observer = self.observer_states.get(key)
        if observer is None:
            observer = self.observer_states[key] = ReplicaState(
                key.id, False, directory_id=key.directory_id
            )
        return observer

    def forget_idle_observers(self, now: int, idle_ms: int = OBSERVER_SESSION_MS) -> None:
        """Observers silent for ``idle_ms`` are forgotten, and past ``MAX_OBSERVERS`` the
        longest silent: any id may fetch (a client on the network too), and what the leader
        keeps of each must stay bounded."""
        states = self.observer_states
        if not states:
            return
        idle = [k for k, s in states.items() if now - s.last_fetch_ms > idle_ms]
        for key in idle:
            del states[key]
        if len(states) > MAX_OBSERVERS:
            oldest = sorted(states, key=lambda k: states[k].last_fetch_ms)
            for key in oldest[: len(states) - MAX_OBSERVERS]:
                del states[key]

    def update_voters(self, voter_set: VoterSet) -> None:
        """The voter set changed (a Voters record in this leader's log): from now on the high
        watermark, check quorum and BeginQuorumEpoch go by ``voter_set``. A new voter keeps
        what the leader knew of it as an observer; a removed one becomes an observer."""
        old = self.voter_states
        states: dict[int, ReplicaState] = {}
        for voter in voter_set.values():
            state = old.get(voter.id)
            if state is None or not voter.key.admits(state.key):
                state = self.observer_states.pop(voter.key, None) or ReplicaState(
                    voter.id, True, directory_id=voter.key.directory_id
                )
            state.is_voter = True
            states[voter.id] = state
        for voter_id, state in old.items():
            if voter_id not in states or states[voter_id] is not state:
                state.is_voter = False
                if voter_id != self.local_id:
                    self.observer_states[state.key] = state
        self.voter_set = voter_set
        self.voters = voter_set.ids
        self.voter_states = states
        self.fetched_voters &= set(states)
        self.reads.set_voters(voter_set.ids)

    def update_local_state(self, durable_end_offset: int, now: int) -> bool:
        """The leader's own log is durable up to ``durable_end_offset``; True when the high
        watermark moved."""
        local = self.voter_states.get(self.local_id)
        if local is None or not self.voter_set.is_voter(
            ReplicaKey(self.local_id, self.local_directory_id)
        ):
            return False
        local.end_offset = durable_end_offset
        local.last_fetch_ms = local.last_caught_up_ms = now
        return self.maybe_update_high_watermark()

    def update_replica_state(
        self, key: ReplicaKey, fetch_offset: int, leader_end_offset: int, now: int
    ) -> bool:
        """A replica fetched from ``fetch_offset`` (valid fetches only): it acknowledges
        everything below. True when the high watermark moved. Negative ids (consumers)
        are not tracked."""
        if key.id < 0 or key.id == self.local_id:
            return False
        state = self.replica(key)
        if state.end_offset is not None and fetch_offset < state.end_offset:
            logger.warning(
                "replica %s fetch offset went back from %d to %d in epoch %d",
                key,
                state.end_offset,
                fetch_offset,
                self.epoch,
            )
        state.update(fetch_offset, leader_end_offset, now)
        return state.is_voter and self.maybe_update_high_watermark()

    def majority_end_offset(self) -> int | None:
        """The largest offset a majority of voters (the leader included) has reached."""
        offsets = sorted(
            (s.end_offset if s.end_offset is not None else -1 for s in self.voter_states.values()),
            reverse=True,
        )
        value = offsets[len(offsets) // 2]
        return None if value < 0 else value

    def maybe_update_high_watermark(self) -> bool:
        """Move the high watermark to the majority's end offset -- but only once that passes the
        start of this epoch strictly, i.e. once a record of this leader's own epoch (the
        LeaderChange record) is committed (KIP-595; KAFKA-12619), and never backwards."""
        candidate = self.majority_end_offset()
        if candidate is None or candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        if candidate < self.high_watermark:
            logger.info(
                "computed high watermark %d is below the current %d in epoch %d; ignored",
                candidate,
                self.high_watermark,
                self.epoch,
            )
        return False

    def non_leader_voters_by_descending_fetch_offset(self) -> tuple[int, ...]:
        """The other voters, most caught up first: the preferred successors on resignation."""
        others = [s for v, s in self.voter_states.items() if v != self.local_id]
        others.sort(
            key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.replica_id)
        )
        return tuple(s.replica_id for s in others)

    # ---- check quorum -----------------------------------------------------------------------

    def update_check_quorum(self, key: ReplicaKey, now: int) -> None:
        """A voter fetched: once a majority has (counting the leader), the check-quorum timer
        starts over (KAFKA-15489)."""
        if key.id == self.local_id or not self.voter_set.is_voter(key):
            return
        self.fetched_voters.add(key.id)
        needed = len(self.voter_states) // 2 + 1
        if self.local_id in self.voter_states:
            needed -= 1
        if len(self.fetched_voters) >= needed:
            self.fetched_voters.clear()
            self.check_quorum_deadline = now + self.check_quorum_timeout_ms

    def voters_not_fetched(self, now: int) -> str:
        """The voters missing from the current check-quorum round, with when each last
        fetched: ``voter 3 (last fetched 4100 ms ago), voter 4 (never fetched)``, for the
        operator told that the leader resigned."""
        parts = []
        for voter in sorted(self.voter_states):
            if voter == self.local_id or voter in self.fetched_voters:
                continue
            last = self.voter_states[voter].last_fetch_ms
            when = "never fetched" if last < 0 else f"last fetched {now - last} ms ago"
            parts.append(f"voter {voter} ({when})")
        return ", ".join(parts)

    def check_quorum_expired(self, now: int) -> bool:
        if len(self.voter_states) == 1 and self.local_id in self.voter_states:
            return False  # a lone voter never loses its quorum
        return now >= self.check_quorum_deadline

    # ---- BeginQuorumEpoch -------------------------------------------------------------------

    def begin_quorum_due(self, now: int) -> bool:
        return now >= self.begin_quorum_deadline

    def reset_begin_quorum_timer(self, now: int) -> None:
        self.begin_quorum_deadline = now + self.begin_quorum_interval_ms

    def __repr__(self) -> str:
        return (
            f"Leader(epoch={self.epoch}, start={self.epoch_start_offset}, hw={self.high_watermark})"
        )
