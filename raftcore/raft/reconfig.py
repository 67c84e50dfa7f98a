"""Changing the voter set (KIP-853) and handing leadership over, decided in the core.

The voter set lives in the log (:mod:`raftcore.raft.voter_history`); the leader changes it by
appending a Voters control record, which takes effect at once, committed or not. Kafka's rules,
checked in this order (its AddVoterHandler, RemoveVoterHandler, UpdateVoterHandler):

1. one change at a time: none in flight here, and the last one in the log committed
   (REQUEST_TIMED_OUT otherwise);
2. the leader has committed in its own epoch (it knows its high watermark), so no change of an
   earlier leader is still pending (REQUEST_TIMED_OUT);
3. kraft.version 1 (UNSUPPORTED_VERSION: a static voter set cannot change);
4. add: not already a voter (DUPLICATE_VOTER), and caught up -- it fetched up to the leader's
   end within the fetch timeout (REQUEST_TIMED_OUT, nothing changed); remove: a voter with
   that key (VOTER_NOT_FOUND);
5. the record is appended; the change answers NONE once committed -- by the majority of the
   *new* set -- and REQUEST_TIMED_OUT when its timeout passes first (the record stays in the
   log and may still commit: the outcome is then unknown to the caller), or
   NOT_LEADER_OR_FOLLOWER if this leadership ends first. A leader that removed itself resigns
   once the removal is committed. A leader whose log cannot take the record (an I/O error)
   resigns at once, and the change is NOT_LEADER_OR_FOLLOWER.

UpdateRaftVoter: a voter tells the leader its directory id, endpoint and kraft.version range;
at kraft.version 1 a difference is written as a new Voters record. At kraft.version 0 the
leader keeps what each voter told it, and once every voter has told it (each speaks
kraft.version 1), it writes KRaftVersion 1 and the first Voters record in one control batch:
the cluster becomes dynamic without anyone stopping.

Leadership transfer (raftcore's; etcd and hashicorp/raft have it, Kafka does not): the leader
stops taking appends, waits until the target has fetched its whole log, then resigns naming
the target first; the target stands at once and, holding the longest log, wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors, error_name
from raftcore.raft.control_records import kraft_version_record, voters_record
from raftcore.raft.leader_news import handle_common_response
from raftcore.raft.leader_requests import LogWriteError, NotLeaderError
from raftcore.raft.messages import UpdateVoterRequest, UpdateVoterResponse
from raftcore.raft.replicated_log import snapshot_log
from raftcore.raft.states import FollowerState, LeaderState, UnattachedState, VotedState
from raftcore.raft.states.base import NO_DEADLINE
from raftcore.raft.values import LeaderAndEpoch
from raftcore.raft.voters import KRAFT_VERSIONS, ReplicaKey, Voter, VoterEndpoint, VoterSet
from raftcore.records import ControlRecordType, iter_batches, parse_control_record_key

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

__all__ = [
    "ChangeOutcome",
    "add_voter",
    "handle_update_request",
    "handle_update_response",
    "load_history",
    "poll_leader",
    "remove_voter",
    "send_update",
    "snapshot_header_records",
    "transfer_leadership",
    "update_due",
    "voters_changed",
]

logger = logging.getLogger(__name__)

INF = float("inf")
MIN_VERSION, MAX_VERSION = KRAFT_VERSIONS[0], KRAFT_VERSIONS[-1]


@dataclass(frozen=True, slots=True)
class ChangeOutcome:
    """The verdict on a voter change or a transfer: Kafka's error code and a message for the
    operator (None on success)."""

    token: int
    error: int
    message: str | None = None
    leader: LeaderAndEpoch | None = None


@dataclass(slots=True)
class _Change:
    token: int
    kind: str  # "add", "remove", "transfer"
    key: ReplicaKey
    deadline: float
    offset: int = -1  # of the Voters record, once appended


# ---- the history at start-up -------------------------------------------------------------------


def snapshot_header_records(reader: object) -> list[tuple[int, bytes]]:
    """(control type, value) of the KRaftVersion and Voters records after a snapshot's header."""
    size = reader.size  # type: ignore[attr-defined]
    if size <= 0:
        return []
    data = reader.slice(0, min(size, 1 << 20))  # type: ignore[attr-defined]
    first = next(iter_batches(data), None)
    if first is None or not first.is_control:
        return []
    out = []
    for record in first.records():
        kind = parse_control_record_key(record.key)
        if kind in (ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS):
            out.append((kind, bytes(record.value or b"")))
    return out


def load_history(core: RaftCore) -> None:
    """Who votes, from the latest snapshot's header and the log after it."""
    history = core.history
    history.reset()
    log = snapshot_log(core.log)
    start = core.log.log_start_offset
    latest = log.latest_snapshot_id() if log is not None else None
    if latest is not None and latest.offset >= start:
        damaged = getattr(log, "snapshot_damaged", None)
        if damaged is not None and damaged(latest):
            # set aside (raftcore.log.snapshots): its header batch, if intact, still names
            # the voters; else the log alone does, until its replacement comes
            reader = log.damaged_snapshot_header(latest)  # type: ignore[union-attr]
            if reader is None:
                logger.warning(
                    "%s the header of damaged snapshot %r is damaged too: the voters are the "
                    "log's alone until a copy replaces it",
                    core.prefix,
                    latest,
                )
        else:
            reader = log.read_snapshot(latest)  # type: ignore[union-attr]
        if reader is not None:
            history.load_snapshot(latest.offset, snapshot_header_records(reader))
        start = max(start, latest.offset)
    history.load_log(core.log, start)


def installed_snapshot(core: RaftCore, reader: object, end_offset: int, now: int) -> None:
    """A snapshot replaced the log up to ``end_offset``: the voters are the snapshot's, then
    whatever the log holds after it."""
    history = core.history
    before = history.latest()
    history.reset()
    history.load_snapshot(end_offset, snapshot_header_records(reader))
    history.load_log(core.log, max(end_offset, core.log.log_start_offset))
    if history.latest() != before:
        voters_changed(core, now)


# ---- the voter set changed ----------------------------------------------------------------------


def voters_changed(core: RaftCore, now: int) -> None:
    """The voter set in force changed (an append, a truncation, a snapshot): the leader counts
    by the new set, and a replica that became a voter starts its election timer."""
    state = core.quorum.state
    latest = core.history.latest()
    if isinstance(state, LeaderState):
        if state.voter_set != latest:
            state.update_voters(latest)
            if state.maybe_update_high_watermark():
                core.on_high_watermark_changed(now)
    elif (
        isinstance(state, (UnattachedState, VotedState))
        and core.quorum.is_voter
        and state.election_deadline == NO_DEADLINE
    ):
        state.election_deadline = now + core.quorum.random_election_timeout_ms()
    logger.info("%s voter set now %r: %s", core.prefix, latest, _role(core, latest))


def _role(core: RaftCore, latest: VoterSet) -> str:
    """What the new voter set makes of this replica, in words that do not read as a failure
    when it was removed on purpose."""
    quorum = core.quorum
    if latest.is_voter(quorum.local_key):
        return "this node votes"
    if quorum.is_voter:  # KIP-853: it stands until the change that removed it is committed
        return "this node is removed from the voters; it votes until the removal is committed"
    return "this node does not vote (an observer: it replicates the log)"


# ---- the leader's side ---------------------------------------------------------------------------


def _leader(core: RaftCore) -> LeaderState:
    state = core.quorum.state
    if not isinstance(state, LeaderState) or state.resign_requested or core.shutting_down:
        raise NotLeaderError(core.leader_and_epoch())
    return state


def _refusal(core: RaftCore, state: LeaderState, what: str) -> tuple[int, str] | None:
    """Checks 1-3 of the module docstring: (error, message) or None."""
    if state.voter_change is not None or state.transfer is not None:
        return Errors.REQUEST_TIMED_OUT, f"another voter change or transfer is in flight ({what})"
    hw = state.high_watermark
    if hw is None:
        return Errors.REQUEST_TIMED_OUT, (
            f"the leader has not committed in its epoch {state.epoch} yet; retry ({what})"
        )
    if core.history.kraft_version < 1:
        return Errors.UNSUPPORTED_VERSION, (
            f"the voter set is static (kraft.version 0) until every voter runs a release that "
            f"speaks kraft.version 1 and has told the leader its directory id ({what})"
        )
    if core.history.uncommitted_change(hw):
        return Errors.REQUEST_TIMED_OUT, (
            f"the voter change at offset {core.history.latest_offset()} is not committed yet "
            f"(high watermark {hw}); retry ({what})"
        )
    return None


def _start(core: RaftCore, kind: str, key: ReplicaKey, timeout_ms: int, now: int) -> _Change:
    return _Change(core.next_change_token(), kind, key, now + max(timeout_ms, 1))


def _fail_now(core: RaftCore, error: int, message: str) -> int:
    token = core.next_change_token()
    logger.info("%s %s: %s", core.prefix, error_name(error), message)
    core.change_done(ChangeOutcome(token, error, message, core.leader_and_epoch()))
    return token


def _append_voters(
    core: RaftCore, state: LeaderState, voters: VoterSet, now: int, *, version: int | None = None
) -> int:
    """Append the Voters record (and a KRaftVersion record first, when ``version`` is given)
    as one control batch; it takes effect at once. Returns the Voters record's offset."""
    records = []
    if version is not None:
        records.append(kraft_version_record(version))
    records.append(voters_record(voters))
    try:
        first, last = core.log.append_as_leader(records, state.epoch, control=True)
    except OSError as exc:  # the leader resigns (LeaderRequests.cannot_write)
        raise core.cannot_write(state, exc, now, "a Voters record") from exc
    for offset, (key, value) in zip(range(first, last + 1), records, strict=True):
        core.history.add(offset, parse_control_record_key(key), value)
    voters_changed(core, now)
    core.purgatory.complete(now)
    return last


def caught_up_recently(last_caught_up_ms: int, now: int, fetch_timeout_ms: int) -> bool:
    """Did the replica reach the leader's log end within the fetch timeout? (Kafka asks the
    same of a voter to add: fetched within the timeout and caught up at least once.)"""
    return last_caught_up_ms >= 0 and now - last_caught_up_ms <= fetch_timeout_ms


def add_voter(
    core: RaftCore, key: ReplicaKey, endpoint: VoterEndpoint | None, timeout_ms: int, now: int
) -> int:
    state = _leader(core)
    what = f"adding {key}"
    refusal = _refusal(core, state, what)
    if refusal is not None:
        return _fail_now(core, *refusal)
    voters = core.history.latest()
    if key.id in voters:
        return _fail_now(core, Errors.DUPLICATE_VOTER, f"{voters[key.id].key} is already a voter")
    if key.directory_id is None:
        return _fail_now(core, Errors.INVALID_REQUEST, f"{what}: a voter needs its directory id")
    replica = state.observer_states.get(key)
    fetch_timeout = core.config.fetch_timeout_ms
    caught_up = -1 if replica is None else replica.last_caught_up_ms
    if not caught_up_recently(caught_up, now, fetch_timeout):
        if replica is None:
            seen = "it has never fetched from this leader"
        else:
            when = "never" if caught_up < 0 else f"{now - caught_up} ms ago"
            seen = (
                f"it last reached the leader's end {when} (it is at offset "
                f"{replica.end_offset} of {core.log.end_offset})"
            )
        return _fail_now(
            core,
            Errors.REQUEST_TIMED_OUT,
            f"{what}: the replica has not caught up within the fetch timeout ({fetch_timeout} "
            f"ms): {seen}; nothing changed",
        )
    if not endpoint and replica is not None:  # caught up, so it has fetched: it is known
        endpoint = replica.endpoint
    if endpoint is None:
        return _fail_now(core, Errors.INVALID_REQUEST, f"{what}: its endpoint is not known")
    change = _start(core, "add", key, timeout_ms, now)
    state.voter_change = change
    change.offset = _append_voters(
        core, state, voters.with_voter(Voter(key, (endpoint,), MIN_VERSION, MAX_VERSION)), now
    )
    logger.info("%s adding voter %s at offset %d", core.prefix, key, change.offset)
    return change.token


def remove_voter(core: RaftCore, key: ReplicaKey, timeout_ms: int, now: int) -> int:
    state = _leader(core)
    what = f"removing {key}"
    refusal = _refusal(core, state, what)
    if refusal is not None:
        return _fail_now(core, *refusal)
    voters = core.history.latest()
    if key.id not in voters or (
        key.directory_id is not None and voters[key.id].key.directory_id != key.directory_id
    ):
        return _fail_now(core, Errors.VOTER_NOT_FOUND, f"{what}: not a voter of {voters!r}")
    if len(voters) == 1:
        return _fail_now(core, Errors.INVALID_REQUEST, f"{what}: it is the last voter")
    key = voters[key.id].key
    change = _start(core, "remove", key, timeout_ms, now)
    state.voter_change = change
    change.offset = _append_voters(core, state, voters.without(key), now)
    logger.info("%s removing voter %s at offset %d", core.prefix, key, change.offset)
    return change.token


def transfer_leadership(core: RaftCore, target: int, timeout_ms: int, now: int) -> int:
    state = _leader(core)
    if state.voter_change is not None or state.transfer is not None:
        return _fail_now(
            core, Errors.REQUEST_TIMED_OUT, "another voter change or transfer is in flight"
        )
    voters = core.history.latest()
    if target == core.node_id:
        return _fail_now(core, Errors.INVALID_REQUEST, f"node {target} leads already")
    if target not in voters:
        return _fail_now(
            core, Errors.VOTER_NOT_FOUND, f"node {target} is not a voter of {voters!r}"
        )
    change = _start(core, "transfer", voters[target].key, timeout_ms, now)
    state.transfer = change
    logger.info("%s handing leadership to %d once it has caught up", core.prefix, target)
    return change.token


def poll_leader(core: RaftCore, state: LeaderState, now: int) -> float:
    """A change in flight: committed, timed out; a transfer: the target caught up; the upgrade
    to kraft.version 1. Returns the next deadline."""
    deadline = INF
    change = state.voter_change
    if isinstance(change, _Change):
        hw = state.high_watermark
        if hw is not None and hw > change.offset:
            state.voter_change = None
            core.change_done(
                ChangeOutcome(change.token, Errors.NONE, None, core.leader_and_epoch())
            )
            logger.info("%s voter change at offset %d committed", core.prefix, change.offset)
            if change.kind == "remove" and change.key.admits(core.local_key):
                core.resign_leadership(state, now, "this replica was removed from the voters")
                return now
        elif now >= change.deadline:
            state.voter_change = None
            core.change_done(
                ChangeOutcome(
                    change.token,
                    Errors.REQUEST_TIMED_OUT,
                    f"the voter change at offset {change.offset} was not committed in time; it "
                    "stays in the log and may still be (see describe-quorum)",
                    core.leader_and_epoch(),
                )
            )
        else:
            deadline = change.deadline
    transfer = state.transfer
    if isinstance(transfer, _Change):
        target = state.voter_states.get(transfer.key.id)
        reached = -1 if target is None or target.end_offset is None else target.end_offset
        if reached >= core.log.end_offset:
            state.transfer = None
            others = [
                v
                for v in state.non_leader_voters_by_descending_fetch_offset()
                if v != transfer.key.id
            ]
            core.change_done(
                ChangeOutcome(transfer.token, Errors.NONE, None, core.leader_and_epoch())
            )
            core.resign_leadership(
                state, now, f"handing over to {transfer.key.id}", (transfer.key.id, *others)
            )
            return now
        if now >= transfer.deadline:
            state.transfer = None
            core.change_done(
                ChangeOutcome(
                    transfer.token,
                    Errors.REQUEST_TIMED_OUT,
                    f"node {transfer.key.id} did not catch up in time; this node still leads",
                    core.leader_and_epoch(),
                )
            )
        else:
            deadline = min(deadline, transfer.deadline)
    try:
        _maybe_upgrade(core, state, now)
    except LogWriteError:
        return now  # it resigned
    return deadline


def _maybe_upgrade(core: RaftCore, state: LeaderState, now: int) -> None:
    """kraft.version 0 -> 1, once every voter told the leader who it is and speaks 1."""
    if core.history.kraft_version >= 1 or state.high_watermark is None or state.voter_change:
        return
    if core.history.uncommitted_change(state.high_watermark) or state.transfer is not None:
        return
    static = core.history.latest()
    reported = dict(state.reported)
    if core.endpoint is not None and core.local_key.directory_id is not None:
        reported[core.node_id] = Voter(core.local_key, (core.endpoint,), MIN_VERSION, MAX_VERSION)
    voters = []
    for voter_id in static:
        voter = reported.get(voter_id)
        if not isinstance(voter, Voter) or not voter.supports(1) or voter.key.directory_id is None:
            return
        voters.append(voter)
    offset = _append_voters(core, state, VoterSet(voters), now, version=1)
    logger.info(
        "%s every voter speaks kraft.version 1: the voter set lives in the log from offset %d",
        core.prefix,
        offset,
    )


def abandon(core: RaftCore, old: LeaderState) -> None:
    """Leadership ended: a change or transfer in flight is answered NOT_LEADER_OR_FOLLOWER (a
    change's record may still commit under the next leader)."""
    leader = core.leader_and_epoch()
    for change in (old.voter_change, old.transfer):
        if isinstance(change, _Change):
            core.change_done(
                ChangeOutcome(
                    change.token,
                    Errors.NOT_LEADER_OR_FOLLOWER,
                    "leadership changed before the change was committed; it may still be",
                    leader,
                )
            )
    old.voter_change = old.transfer = None


def handle_update_request(
    core: RaftCore, request: UpdateVoterRequest, now: int
) -> UpdateVoterResponse:
    def answer(error: int) -> UpdateVoterResponse:
        return UpdateVoterResponse(error, core.leader_and_epoch())

    if not core.has_valid_cluster_id(request.cluster_id):
        return answer(Errors.INCONSISTENT_CLUSTER_ID)
    error = core.validate_leader_only_request(request.current_leader_epoch)
    if error is not None:
        return answer(error)
    state = core.quorum.state
    assert isinstance(state, LeaderState)
    if state.high_watermark is None:
        return answer(Errors.REQUEST_TIMED_OUT)
    key = ReplicaKey(request.voter_id, request.voter_directory_id)
    voters = core.history.latest()
    if not voters.is_voter(key):
        return answer(Errors.VOTER_NOT_FOUND)
    version = core.history.kraft_version
    if not request.min_version <= version <= request.max_version:
        return answer(Errors.INVALID_REQUEST)
    reported = Voter(
        key,
        () if request.endpoint is None else (request.endpoint,),
        request.min_version,
        request.max_version,
    )
    try:
        if version == 0:
            state.reported[key.id] = reported
            _maybe_upgrade(core, state, now)
            return answer(Errors.NONE)
        if voters[key.id] == reported or not reported.endpoints:
            return answer(Errors.NONE)
        if state.voter_change is not None or core.history.uncommitted_change(state.high_watermark):
            return answer(Errors.REQUEST_TIMED_OUT)
        _append_voters(core, state, voters.updated(reported), now)
    except LogWriteError:  # this leader resigned: the voter asks the next one
        return answer(Errors.NOT_LEADER_OR_FOLLOWER)
    return answer(Errors.NONE)


# ---- the follower's side: telling the leader who it is ------------------------------------------


def update_due(core: RaftCore, state: FollowerState, now: int) -> bool:
    """Should this voter tell its leader who it is now (UpdateRaftVoter)? When its entry in
    the voter set lacks its directory id, endpoint or version range: once per epoch when the
    leader takes it, else again after the fetch timeout. (The request takes the place of a
    fetch: one request to the leader at a time.)"""
    if state.voter_updated or core.endpoint is None or core.local_key.directory_id is None:
        return False
    if core.quorum.joining and not core.quorum.is_voter:
        # formatted to join: never a static voter's stand-in, so never in the first Voters
        # record of an upgrade to kraft.version 1 (only add-voter takes it in)
        return False
    if state.high_watermark is None:
        # Not before a fetch told it the leader's high watermark: a leader takes the update only
        # once it has committed in its epoch, and the first request to a leader is a fetch.
        return False
    voter = core.history.latest().get(core.node_id)
    if voter is None or not voter.key.admits(core.local_key):
        return False
    if voter == Voter(core.local_key, (core.endpoint,), MIN_VERSION, MAX_VERSION):
        state.voter_updated = True
        return False
    return now >= state.update_voter_at


def send_update(core: RaftCore, state: FollowerState, now: int) -> None:
    state.update_voter_at = now + core.config.fetch_timeout_ms
    core.send_request(
        state.leader,
        UpdateVoterRequest(
            core.config.cluster_id,
            state.epoch,
            core.node_id,
            core.local_key.directory_id,
            core.endpoint,
            MIN_VERSION,
            MAX_VERSION,
        ),
        now,
    )


def handle_update_response(
    core: RaftCore, source: int, response: UpdateVoterResponse, now: int
) -> bool:
    leader = response.current_leader
    handled = handle_common_response(
        core,
        response.error_code,
        -1 if leader.leader_id is None else leader.leader_id,
        leader.epoch,
        now,
        source=source,
    )
    if handled is not None:
        return handled
    state = core.quorum.state
    error = response.error_code
    if error == Errors.NONE and isinstance(state, FollowerState) and state.leader == source:
        state.voter_updated = True
        return True
    if error != Errors.NONE:
        logger.info("%s UpdateRaftVoter at %d: %s", core.prefix, source, error_name(error))
    return error == Errors.NONE
