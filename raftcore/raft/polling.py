"""The passage of time, state by state: what each epoch state does when the core is polled
(Kafka's pollLeader, pollCandidate, pollFollower, ... in KafkaRaftClient).

Each poller takes the core, its current state and the time, sends what is due, makes the
transitions whose timers expired, and returns its next deadline. A transition inside one poll
may call for another (candidate -> leader): :func:`poll` runs the new state's poller too, a
bounded number of times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from raftcore.raft import (
    begin_quorum_epoch,
    damage,
    end_quorum_epoch,
    fetch,
    fetch_snapshot,
    reconfig,
    vote,
)
from raftcore.raft.election_backoff import start_election_backoff
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

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = ["poll"]

logger = logging.getLogger(__name__)

INF = float("inf")
# How often a voter that keeps losing its leader's fetches says so at INFO.
LEADER_LOST_LOG_EVERY_MS = 30_000


def poll(core: RaftCore, now: int) -> float:
    """Run the current state's poller (and the next state's, after a transition); returns the
    next deadline."""
    for _ in range(4):
        state = core.quorum.state
        deadline = _POLLERS[type(state)](core, state, now)
        if core.quorum.state is state:
            return deadline
    return now + 1


def _poll_leader(core: RaftCore, state: LeaderState, now: int) -> float:
    if core.damage:
        damage.decide(core, now)  # a damaged leader hands over once another voter can lead
    if state.resign_requested or core.shutting_down:
        core.resign_leadership(state, now, "resignation requested")
        return now
    if state.check_quorum_expired(now):
        core.resign_leadership(
            state,
            now,
            f"no majority fetched within {core.config.check_quorum_timeout_ms} ms; "
            f"not heard from: {state.voters_not_fetched(now)}",
        )
        return now
    if state.update_local_state(core.durable_end(), now):
        core.on_high_watermark_changed(now)
    change_deadline = reconfig.poll_leader(core, state, now)  # KIP-853 changes, transfers
    if core.quorum.state is not state:
        return now  # it resigned (removed itself, or handed over)
    core.snapshots.maybe_advance_as_leader(state, now)
    state.forget_idle_observers(now)
    core.feed.maybe_fire_leader_change()
    heartbeat = state.begin_quorum_due(now)
    if heartbeat or state.reads:
        # The heartbeat to every voter, or a read's quorum round to the voters it waits for.
        for voter in sorted(state.voters):
            if (
                voter != core.node_id
                and (heartbeat or state.reads.wants(voter))
                and core.requests.is_ready(voter, now)
            ):
                core.send_request(voter, begin_quorum_epoch.build_request(core, voter), now)
                state.reads.on_sent(voter, now)
        if heartbeat:
            state.reset_begin_quorum_timer(now)
    return min(
        state.begin_quorum_deadline,
        state.check_quorum_deadline if len(state.voters) > 1 else INF,
        change_deadline,
    )


def _poll_candidate(core: RaftCore, state: CandidateState, now: int) -> float:
    if state.is_vote_granted():
        core.become_leader(now)
        return now
    if state.backing_off:
        if state.backoff_complete(now):
            # KIP-996: the next epoch only after a new pre-vote says it could win.
            core.transition_to_prospective(now, "election backoff completed")
            return now
        return state.backoff_deadline  # type: ignore[return-value]
    if state.election_expired(now):
        start_election_backoff(core, state, now, "election timed out")
        return state.backoff_deadline  # type: ignore[return-value]
    for voter in sorted(state.unrecorded_voters()):
        if voter != core.node_id and core.requests.is_ready(voter, now):
            # The request claims our log end: it may only leave once that is durable, or a
            # crash could leave us leading without records we promised to have (found by the
            # simulation at seed 25504; Kafka flushes follower appends synchronously).
            request = vote.build_request(core, voter)
            core.send_request(voter, request, now, after_flush=request.last_offset)
    return state.election_deadline


def _poll_follower(core: RaftCore, state: FollowerState, now: int) -> float:
    if state.fetch_expired(now):
        stand = core.damage.may_stand(now, core.config.election_timeout_ms)  # damage.py
        if core.quorum.is_voter and stand:
            why = f"no fetch response from leader {state.leader} within "
            why += f"{core.config.fetch_timeout_ms} ms"
            # the operator's line on losing the leader (the transition is logged at debug): a
            # hung or partitioned leader refuses nothing, so nothing else names it. Once per
            # leader and epoch, then every 30 s: cut off from a leader the others still
            # follow, a voter loses its pre-vote and times out again every fetch timeout.
            key = (state.leader, state.epoch)
            last = core.leader_lost_logged
            if last is None or last[0] != key or now - last[1] >= LEADER_LOST_LOG_EVERY_MS:
                core.leader_lost_logged = (key, now)
                logger.info("%s %s; asking the voters for pre-votes", core.prefix, why)
            else:
                logger.debug("%s %s; asking the voters for pre-votes", core.prefix, why)
            # KIP-996: ask first; the epoch rises only if a majority lost the leader too.
            core.transition_to_prospective(now, why)
            return now
    if state.fetch_expired(now) and not core.quorum.is_voter:
        # An observer never stands; it asks a voter who leads now (a new leader does not
        # tell observers), while still trying the leader it knows. It no longer hears from
        # its leader, so it may grant pre-votes again (KAFKA-17641 holds back only a follower
        # that still does; an observer added as a voter may be needed for a majority).
        state.has_fetched = False
        _discover_leader(core, now)
    if core.requests.is_ready(state.leader, now) and core.feed.waiting_for is not None:
        fetch_snapshot.fetch_damaged(core, state, now)  # a damaged snapshot to load here
    if core.requests.is_ready(state.leader, now) and state.fetching_snapshot is not None:
        # KIP-630: a snapshot download pauses fetching; it acknowledges nothing.
        core.send_request(state.leader, fetch_snapshot.build_request(core, state), now)
    elif core.requests.is_ready(state.leader, now) and reconfig.update_due(core, state, now):
        reconfig.send_update(core, state, now)  # KIP-853: who it is, in place of a fetch
    elif core.requests.is_ready(state.leader, now) and core.damage:
        # The leader's copy of a batch damaged here (raftcore.raft.damage), in place of a fetch
        state.repairing = True
        core.send_request(state.leader, fetch.build_repair_request(core, state), now)
    elif core.requests.is_ready(state.leader, now):
        request = fetch.build_request(core, state)
        # The fetch offset acknowledges the log up to it: send only once it is durable
        # (KAFKA-10533; every replica flushes, KAFKA-13884).
        core.send_request(state.leader, request, now, after_flush=request.fetch_offset)
    if not state.fetch_expired(now):
        return state.fetch_deadline
    if core.quorum.is_voter:
        return core.damage.stand_at or now  # a damaged voter waits its turn to stand
    return now + core.config.retry_backoff_ms


def _poll_unattached(core: RaftCore, state: UnattachedState | VotedState, now: int) -> float:
    if core.quorum.is_voter:
        if not state.election_expired(now):
            return state.election_deadline
        if core.damage.may_stand(now, core.config.election_timeout_ms):  # raftcore.raft.damage
            core.transition_to_prospective(now, "election timeout expired")
            return now
        return core.damage.stand_at or now
    _discover_leader(core, now)
    return now + core.config.retry_backoff_ms


def _poll_prospective(core: RaftCore, state: ProspectiveState, now: int) -> float:
    """KIP-996 pre-vote: a majority of grants makes it Candidate (epoch + 1); a majority of
    rejections or the end of the election timeout sends it back, epoch unchanged."""
    if state.is_vote_granted():
        core.transition_to_candidate(now, f"pre-vote granted by {sorted(state.granted)}")
        return now
    if not core.quorum.is_voter:
        core.transition_after_pre_vote(now, "no longer a voter")
        return now
    if state.is_vote_rejected() or state.election_expired(now):
        outcome = "rejected" if state.is_vote_rejected() else "timed out"
        core.transition_after_pre_vote(now, f"pre-vote {outcome} in epoch {state.epoch}")
        return now
    for voter in sorted(state.unrecorded_voters()):
        if voter != core.node_id and core.requests.is_ready(voter, now):
            # Binds nothing, so it need not wait for the log to be durable.
            core.send_request(voter, vote.build_request(core, voter, pre_vote=True), now)
    return state.election_deadline


def _discover_leader(core: RaftCore, now: int) -> None:
    """An observer without a (live) leader asks a random voter, which answers with the leader
    it knows; with no voter known to ask (a node joining a cluster), a random bootstrap server
    (ids -2, -3, ...: Kafka's controller.quorum.bootstrap.servers)."""
    leader = core.quorum.leader_id
    targets = sorted(core.quorum.voters - {core.node_id, leader})
    if not targets:
        targets = [-2 - i for i in range(core.config.bootstrap_servers)]
    if targets:
        target = targets[core.rng.randrange(len(targets))]
        if core.requests.is_ready(target, now):
            core.send_request(target, fetch.build_discovery_request(core), now)


def _poll_resigned(core: RaftCore, state: ResignedState, now: int) -> float:
    for voter in sorted(state.unacknowledged):
        if core.requests.is_ready(voter, now):
            core.send_request(voter, end_quorum_epoch.build_request(core, state), now)
    if state.election_expired(now):
        # Kafka (KIP-996): out of Resigned always by epoch + 1 -- never Prospective in the
        # epoch it led; a voter's timer stays spent, so it runs its pre-vote at once.
        if core.quorum.is_voter and not core.shutting_down:
            core.transition_to_unattached(
                state.epoch + 1, now, "resigned and the election timeout expired"
            )
        elif core.quorum.is_observer:
            core.transition_to_unattached(state.epoch + 1, now, "resigned non-voter")
        return now
    return state.election_deadline


_POLLERS: dict[type[EpochState], Callable[..., float]] = {
    LeaderState: _poll_leader,
    CandidateState: _poll_candidate,
    FollowerState: _poll_follower,
    UnattachedState: _poll_unattached,
    VotedState: _poll_unattached,
    ProspectiveState: _poll_prospective,
    ResignedState: _poll_resigned,
}
