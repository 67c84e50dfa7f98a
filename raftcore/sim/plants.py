"""Deliberately broken variants of the core, to show that the simulation catches them.

Each plant replaces one rule by a plausible-looking wrong one (by monkeypatching, in the
simulation's process only; the real code stays correct). ``python -m raftcore.sim --plant
NAME`` runs against it; docs/testing.md lists which seed catches each.
"""

from __future__ import annotations

from collections.abc import Callable

from raftcore.raft import fetch, replicated_log
from raftcore.raft.core import RaftCore
from raftcore.raft.states import LeaderState, VotedState

__all__ = ["PLANTS", "apply"]


def _hw_without_own_epoch_rule() -> None:
    """The leader exposes the majority offset without waiting for a record of its own epoch
    (KIP-595's extra commit rule; KAFKA-12619)."""

    def maybe_update_high_watermark(self: LeaderState) -> bool:
        candidate = self.majority_end_offset()
        if candidate is None:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    LeaderState.maybe_update_high_watermark = maybe_update_high_watermark  # type: ignore[method-assign]


def _second_vote_in_epoch() -> None:
    """A voter that already voted grants again to any candidate whose log is up to date."""

    def can_grant_vote(self: VotedState, candidate_id: int, log_up_to_date: bool) -> bool:
        return log_up_to_date

    VotedState.can_grant_vote = can_grant_vote  # type: ignore[method-assign]


def _truncate_one_too_far() -> None:
    """On divergence the follower truncates one offset further than the leader said."""
    original = replicated_log.truncate_to_end_offset

    def truncate(log, diverging):  # type: ignore[no-untyped-def]
        offset = original(log, diverging)
        if offset > 0:
            log.truncate_to(offset - 1)
            return min(offset - 1, log.end_offset)
        return offset

    fetch.truncate_to_end_offset = truncate  # type: ignore[assignment]


def _ack_before_flush() -> None:
    """The follower's next Fetch (its acknowledgement) leaves before the fsync that makes it
    true (KAFKA-10533)."""
    original = RaftCore.send_request

    def send_request(self, destination, message, now, after_flush=-1):  # type: ignore[no-untyped-def]
        return original(self, destination, message, now, -1)

    RaftCore.send_request = send_request  # type: ignore[method-assign]


def _forget_vote_on_restart() -> None:
    """The vote is not written to the quorum-state store (as raftos and early PySyncObj)."""
    from raftcore.raft.quorum_state import QuorumState

    original = QuorumState._persist

    def persist(self, state):  # type: ignore[no-untyped-def]
        if isinstance(state, VotedState):
            return
        original(self, state)

    QuorumState._persist = persist  # type: ignore[method-assign]


def _ack_on_offset_alone() -> None:
    """An append is acknowledged once this replica's high watermark passes its last offset,
    whether or not the replica still leads the epoch that appended it (raftcore's node until
    issue 9: a deposed leader truncated the append away, fetched another leader's records into
    the same offsets, and answered NONE when its high watermark passed them)."""
    from raftcore.error_codes import Errors
    from raftcore.raft.pending import AppendOutcome

    original_settle = RaftCore._settle_pending

    def abandon(self, old):  # type: ignore[no-untyped-def]
        watched = self.__dict__.setdefault("_plant_watched", [])
        watched.extend(old.pending.take_all())

    def settle(self):  # type: ignore[no-untyped-def]
        original_settle(self)
        watched = self.__dict__.get("_plant_watched")
        hw = self.high_watermark
        if watched and hw is not None:
            keep = []
            for appended in watched:
                if appended.last_offset < hw:
                    self._completions.append(
                        AppendOutcome(appended, Errors.NONE, self.leader_and_epoch())
                    )
                else:
                    keep.append(appended)
            watched[:] = keep

    RaftCore._abandon_pending = abandon  # type: ignore[method-assign]
    RaftCore._settle_pending = settle  # type: ignore[method-assign]


def _read_without_round() -> None:
    """A linearizable read is confirmed at once, without a quorum round: a deposed leader
    that has not heard of its successor answers from a stale read index."""
    from raftcore.raft.read_index import ReadRounds

    original = ReadRounds.add

    def add(self, read):  # type: ignore[no-untyped-def]
        original(self, read)
        return [r for r in self.take_all()]

    ReadRounds.add = add  # type: ignore[method-assign]


def _no_pre_vote() -> None:
    """A voter skips the pre-vote (KIP-996): the moment it would start asking, it stands for
    election in the next epoch, as before pre-vote. Random seeds do not catch it (it breaks no
    safety property); the healed-partition scenario (raftcore.sim.healed_partition) does."""
    from raftcore.raft.states import ProspectiveState

    original = RaftCore.transition_to_prospective

    def transition_to_prospective(self, now, reason):  # type: ignore[no-untyped-def]
        original(self, now, reason)
        if isinstance(self.quorum.state, ProspectiveState):
            self.transition_to_candidate(now, f"{reason} (no pre-vote)")

    RaftCore.transition_to_prospective = transition_to_prospective  # type: ignore[method-assign]


def _install_unverified() -> None:
    """A downloaded snapshot is installed without verifying it first (Kafka freezes a
    download without reading it): a torn or corrupted FetchSnapshot chunk goes in."""
    from raftcore.testing.memory_snapshot import MemoryRawSnapshotWriter

    def freeze(self):  # type: ignore[no-untyped-def]
        install, data = self._install, bytes(self._data)
        self.discard()
        install(self.snapshot_id, data)

    MemoryRawSnapshotWriter.freeze = freeze  # type: ignore[method-assign]


def _serve_below_lso() -> None:
    """The leader validates a fetch as before snapshots: a fetch below its log start offset is
    not redirected to the latest snapshot, and the leader reads records it no longer has."""
    original = replicated_log.validate_offset_and_epoch

    def validate(log, offset, epoch):  # type: ignore[no-untyped-def]
        start = log.log_start_offset
        if offset < start:
            from raftcore.raft.values import OffsetAndEpoch, ValidOffsetAndEpoch

            return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))
        return original(log, offset, epoch)

    fetch.validate_offset_and_epoch = validate  # type: ignore[assignment]


def _listener_skips_snapshot() -> None:
    """A listener left below the log start offset (its replica installed a snapshot) jumps to
    the log start instead of loading the snapshot: it misses the state the snapshot holds."""
    from raftcore.raft.listener import ListenerFeed

    original = ListenerFeed._maybe_load_snapshot

    def load(self, hw):  # type: ignore[no-untyped-def]
        if not self._fresh and self.next_offset < self.log.log_start_offset:
            self.next_offset = self.log.log_start_offset
            return
        original(self, hw)

    ListenerFeed._maybe_load_snapshot = load  # type: ignore[method-assign]


def _two_voter_changes() -> None:
    """KIP-853: the leader starts a voter change while another is not committed yet (Kafka's
    one-change-at-a-time rule dropped): two uncommitted changes can make two disjoint
    majorities."""
    from raftcore.raft import reconfig

    original = reconfig._refusal

    def refusal(core, state, what):  # type: ignore[no-untyped-def]
        answer = original(core, state, what)
        if answer is not None and "in flight" not in answer[1] and "not committed" not in answer[1]:
            return answer
        state.voter_change = None
        return None

    reconfig._refusal = refusal  # type: ignore[assignment]


def _voters_from_committed_only() -> None:
    """KIP-853: the voter set in force is taken from the committed records only, not the
    latest record of the log: a leader counts a change's commit by the set before it."""
    from raftcore.raft.voter_history import VoterHistory

    original_init = RaftCore.__init__

    def init(self, *args, **kw):  # type: ignore[no-untyped-def]
        original_init(self, *args, **kw)
        self.history.committed_end = lambda: self.quorum.state.high_watermark

    def latest(self):  # type: ignore[no-untyped-def]
        hw = getattr(self, "committed_end", lambda: None)()
        return self.at(-1 if hw is None else hw - 1)

    RaftCore.__init__ = init  # type: ignore[method-assign]
    VoterHistory.latest = latest  # type: ignore[method-assign]


def _wiped_replica_counts() -> None:
    """KIP-853: a replica is its id alone, directory ids ignored: a voter whose disk was wiped
    and came back under its id still counts as the voter it was."""
    from raftcore.raft.voters import ReplicaKey

    ReplicaKey.admits = lambda self, other: self.id == other.id  # type: ignore[method-assign]
    ReplicaKey.addressed_to = lambda self, local: self.id == local.id  # type: ignore[method-assign]


def _add_before_caught_up() -> None:
    """KIP-853: a replica is added as a voter whether or not it has caught up with the
    leader."""
    from raftcore.raft import reconfig

    reconfig.caught_up_recently = lambda last, now, timeout: True  # type: ignore[assignment]


def _lost_state_forgotten() -> None:
    """A replica whose quorum-state is gone while its log holds records comes back as the
    voter it was (raftcore's node until the storage-faults work): it may vote a second time
    in an epoch it voted in before."""
    from raftcore.raft.quorum_state import QuorumState

    QuorumState._check_lost = lambda self, what: None  # type: ignore[method-assign]


def _serve_damaged() -> None:
    """Protocol-aware recovery: the leader serves its log as it reads it, without checking
    each batch on the way out (as raftcore before the storage-faults work)."""
    fetch.read_intact = lambda log, offset, max_bytes: (log.read(offset, max_bytes), None)  # type: ignore[assignment]


def _repair_skipped() -> None:
    """Protocol-aware recovery: a follower fetches the leader's copy of its damaged batch but
    never writes it (the repair is lost)."""
    fetch.repair_from = lambda core, records, source, now: False  # type: ignore[assignment]


def _damaged_leader_stays() -> None:
    """Protocol-aware recovery: a leader with damage in its log never hands over, so nobody
    can repair it (a leader does not fetch)."""
    from raftcore.raft import damage

    damage._successor = lambda core, state, offset, now: None  # type: ignore[assignment]


def _leader_keeps_leading_on_a_full_disk() -> None:
    """A leader whose log refuses an append lets the OSError out to the client and goes on
    leading (raftcore's node until the storage-faults work: every Produce failed with a
    traceback, and its heartbeats kept its followers from electing a voter that could
    write)."""
    from raftcore.raft.leader_requests import LeaderRequests

    def cannot_write(self, state, exc, now, what):  # type: ignore[no-untyped-def]
        raise exc

    LeaderRequests.cannot_write = cannot_write  # type: ignore[method-assign]


def _truncate_below_committed() -> None:
    """A follower truncates wherever its leader's DivergingEpoch (or snapshot) says, below its
    committed offset too (raftcore before the committed offset was checkpointed: the survivor
    of a wiped majority truncated every acknowledged record away). The majority-wipe scenario
    (raftcore.sim.majority_wipe) catches it; a healthy quorum never asks."""
    from raftcore.raft.committed import CommittedOffset

    def check(self, offset, high_watermark, *, leader, epoch, what):  # type: ignore[no-untyped-def]
        self.observe(high_watermark)

    CommittedOffset.check = check  # type: ignore[method-assign]


PLANTS: dict[str, Callable[[], None]] = {
    "truncate-below-committed": _truncate_below_committed,
    "serve-damaged": _serve_damaged,
    "repair-skipped": _repair_skipped,
    "damaged-leader-stays": _damaged_leader_stays,
    "leader-keeps-leading-on-full-disk": _leader_keeps_leading_on_a_full_disk,
    "install-unverified": _install_unverified,
    "serve-below-lso": _serve_below_lso,
    "listener-skips-snapshot": _listener_skips_snapshot,
    "ack-on-offset-alone": _ack_on_offset_alone,
    "hw-without-own-epoch": _hw_without_own_epoch_rule,
    "second-vote": _second_vote_in_epoch,
    "truncate-one-too-far": _truncate_one_too_far,
    "ack-before-flush": _ack_before_flush,
    "forget-vote": _forget_vote_on_restart,
    "read-without-round": _read_without_round,
    "no-pre-vote": _no_pre_vote,
    "two-voter-changes": _two_voter_changes,
    "voters-from-committed-only": _voters_from_committed_only,
    "wiped-replica-counts": _wiped_replica_counts,
    "add-before-caught-up": _add_before_caught_up,
    "lost-state-forgotten": _lost_state_forgotten,
}


_APPLIED: set[str] = set()


def apply(name: str) -> None:
    """Plant ``name`` in this process, once: the simulation applies it before every seed, and
    a wrapper wrapped again per seed would nest until Python's recursion limit (a plant first
    caught after about 1,000 seeds in one process failed with RecursionError, not a catch)."""
    if name in _APPLIED:
        return
    try:
        plant = PLANTS[name]
    except KeyError:
        raise SystemExit(f"unknown plant {name!r}; choose from {', '.join(PLANTS)}") from None
    plant()
    _APPLIED.add(name)
