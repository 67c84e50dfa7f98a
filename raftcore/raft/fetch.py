"""Fetch (KIP-595 pull replication, KIP-279 divergence): the rules of both ends.

On the leader, a fetch is validated in order:
1. the cluster id, then the request's own sanity (offsets and epochs not negative, the last
   fetched epoch not above the fetcher's current epoch) -- INVALID_REQUEST;
2. the epoch: older than ours is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, and a
   replica that does not lead answers NOT_LEADER_OR_FOLLOWER -- always with the leader it
   knows, so the fetcher can move on at once;
3. divergence: FetchOffset must not pass the end of LastFetchedEpoch in the leader's log.
   If it does, or the leader never had that epoch, the answer is DivergingEpoch = the largest
   epoch <= the fetcher's in the leader's log and where it ends; the fetcher truncates there
   and asks again (one round per divergent epoch at most);
4. only a valid fetch counts: it acknowledges the fetcher's log up to FetchOffset (a voter's
   acknowledgement may move the high watermark), keeps the leader's quorum alive, and reads
   records from FetchOffset. Observers get records but never count toward the high watermark;
   a replica is named by its id and directory id (KIP-853), so a voter's id fetching from
   another directory (a wiped disk) is an observer. With the static voter set of
   kraft.version 0, a sender that says it is a voter (``is_follower``) but is not one is
   answered with INCONSISTENT_VOTER_SET -- the records are still good -- so that it steps down.

An answer with nothing to say waits (long poll) until records arrive, the high watermark
passes what the fetcher knows, or MaxWaitMs ends.

On the follower: the common checks (epoch, leader) first; then, in this order, truncation on
DivergingEpoch (never below the committed offset, raftcore.raft.committed: the replica
stops instead; and before any high watermark update -- KAFKA-14704), or the records appended
(CRC-checked, no batch from a later epoch than the leader's -- KAFKA-18723) followed by high
watermark = min(leader's, local end offset).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from raftcore.batch_validation import check_well_formed
from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError, InvalidAppendError
from raftcore.raft import fetch_snapshot
from raftcore.raft.damage import read_intact, repair_from, repair_request_offset_and_epoch
from raftcore.raft.leader_news import handle_common_response
from raftcore.raft.messages import FetchRequest, FetchResponse
from raftcore.raft.replicated_log import (
    divergence_end_offset,
    truncate_to_end_offset,
    validate_offset_and_epoch,
)
from raftcore.raft.states import FollowerState, LeaderState
from raftcore.raft.values import OffsetAndEpoch, ValidationKind
from raftcore.raft.voters import ReplicaKey
from raftcore.records import BatchScan, scan_batches

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

logger = logging.getLogger(__name__)


# ---- the follower's request -------------------------------------------------------------------


def build_request(core: RaftCore, state: FollowerState) -> FetchRequest:
    hw = state.high_watermark
    return FetchRequest(
        cluster_id=core.config.cluster_id,
        replica_id=core.node_id,
        fetch_offset=core.log.end_offset,
        last_fetched_epoch=core.log.last_fetched_epoch,
        current_leader_epoch=state.epoch,
        max_wait_ms=core.config.fetch_max_wait_ms,
        max_bytes=core.config.fetch_max_bytes,
        is_follower=core.quorum.is_voter,
        high_watermark=-1 if hw is None else hw,
        replica_directory_id=core.local_key.directory_id,
        replica_endpoint=core.endpoint,
    )


def build_discovery_request(core: RaftCore) -> FetchRequest:
    """An observer with no leader asks a voter; the answer names the leader (or says none is
    known). Nothing is read: max_wait 0 and an epoch the voter will not lead."""
    return FetchRequest(
        cluster_id=core.config.cluster_id,
        replica_id=core.node_id,
        fetch_offset=core.log.end_offset,
        last_fetched_epoch=core.log.last_fetched_epoch,
        current_leader_epoch=core.quorum.epoch,
        max_wait_ms=0,
        max_bytes=core.config.fetch_max_bytes,
        is_follower=False,
        replica_directory_id=core.local_key.directory_id,
        replica_endpoint=core.endpoint,
    )


# ---- the leader's answer ----------------------------------------------------------------------


def answer(core: RaftCore, error: int = Errors.NONE, **fields: object) -> FetchResponse:
    """A fetch response; every one carries the high watermark, the log start and the leader
    this replica knows (so a fetcher can follow it at once)."""
    hw = core.quorum.state.high_watermark
    return FetchResponse(
        error_code=error,
        high_watermark=-1 if hw is None else hw,
        log_start_offset=core.log.log_start_offset,
        current_leader=core.quorum.leader_and_epoch(),
        **fields,  # type: ignore[arg-type]
    )


def error_response(core: RaftCore, error: int) -> FetchResponse:
    return answer(core, error)


def handle_request(
    core: RaftCore, source: int, correlation_id: int, request: FetchRequest, now: int
) -> None:
    if not core.has_valid_cluster_id(request.cluster_id):
        core.reply(source, correlation_id, error_response(core, Errors.INCONSISTENT_CLUSTER_ID))
        return
    if (
        request.max_wait_ms < 0
        or request.fetch_offset < 0
        or request.last_fetched_epoch < 0
        or request.last_fetched_epoch > request.current_leader_epoch
    ):
        core.reply(source, correlation_id, error_response(core, Errors.INVALID_REQUEST))
        return
    error = core.validate_leader_only_request(request.current_leader_epoch)
    if error is not None:
        core.reply(source, correlation_id, error_response(core, error))
        return
    linger = core.config.high_watermark_linger_ms
    response = try_complete(core, request, now, force=request.max_wait_ms == 0, tell_hw=not linger)
    if response is None:
        core.purgatory.park(source, correlation_id, request, now)
    else:
        core.reply(source, correlation_id, response)


def try_complete(
    core: RaftCore, request: FetchRequest, now: int, *, force: bool = False, tell_hw: bool = True
) -> FetchResponse | None:
    """The answer to a fetch, or None when it should wait (nothing to say yet; with
    ``tell_hw`` false, a high watermark the fetcher has not seen is not news enough)."""
    state = core.quorum.state
    assert isinstance(state, LeaderState)
    log = core.log
    validation = validate_offset_and_epoch(log, request.fetch_offset, request.last_fetched_epoch)
    if validation.kind is ValidationKind.DIVERGING:
        return answer(core, diverging_epoch=validation.offset_and_epoch)
    if validation.kind is ValidationKind.SNAPSHOT:
        return answer(core, snapshot_id=validation.offset_and_epoch)
    # KIP-853: the replica is its id and directory id; a voter's id under another directory
    # is an observer, whose fetches count for nothing
    replica = ReplicaKey(request.replica_id, request.replica_directory_id)
    state.update_check_quorum(replica, now)  # voters only: the state knows who counts
    end = log.end_offset
    state.replica(replica).repairing = request.repair
    if request.repair:
        return _answer_repair(core, request, now)
    if state.update_replica_state(replica, request.fetch_offset, end, now):
        core.on_high_watermark_changed(now)
    if request.replica_endpoint is not None and replica.id >= 0:
        state.replica(replica).endpoint = request.replica_endpoint
    # Whatever the replica asked for, at most replica.fetch.response.max.bytes (KIP-74: the
    # first batch whole even when it is larger).
    max_bytes = min(request.max_bytes, core.config.replica_fetch_response_max_bytes)
    records: Any = b""
    if request.fetch_offset < end:
        # Only sound batches leave (CTRL): the first damaged one and what follows stay here.
        records, damage = read_intact(log, request.fetch_offset, max(1, max_bytes))
        if damage is not None:
            core.damage.report(core, damage, now, f"serving replica {replica}")
    hw = state.high_watermark
    error = Errors.NONE
    if request.is_follower and core.history.kraft_version == 0 and replica.id not in state.voters:
        # The seed's NOT_FOLLOWER rule, for the static voter set of kraft.version 0: the
        # records are good, but the sender must stop acting as a voter. (With the voter set in
        # the log, a replica learns it is not a voter from the log.)
        error = Errors.INCONSISTENT_VOTER_SET
        force = True
    if not (
        force or len(records) > 0 or (tell_hw and hw is not None and hw > request.high_watermark)
    ):
        return None
    return answer(core, error, records=records)


def _answer_repair(core: RaftCore, request: FetchRequest, now: int) -> FetchResponse:
    """A repair fetch (raftcore.raft.damage): the one batch holding its offset, if this
    leader's copy is sound; it acknowledges nothing (the fetcher's log end has not moved).
    Where this log ends at or before that offset, the fetcher's batch was never committed (a
    leader holds every committed record): the answer is a divergence at this log's end, and
    the fetcher truncates its damaged tail there."""
    log = core.log
    if request.fetch_offset >= log.end_offset:
        end = log.end_offset
        epoch = log.epoch_for_offset(end - 1) if end > log.log_start_offset else 0
        return answer(core, diverging_epoch=OffsetAndEpoch(end, max(epoch, 0)))
    records, damage = read_intact(log, request.fetch_offset, 1)
    if damage is not None:
        core.damage.report(core, damage, now, "serving a repair")
        return answer(core, Errors.KAFKA_STORAGE_ERROR)
    return answer(core, records=records)


def build_repair_request(core: RaftCore, state: FollowerState) -> FetchRequest:
    offset, epoch = repair_request_offset_and_epoch(core)
    return FetchRequest(
        cluster_id=core.config.cluster_id,
        replica_id=core.node_id,
        fetch_offset=offset,
        last_fetched_epoch=epoch,
        current_leader_epoch=state.epoch,
        max_wait_ms=0,
        max_bytes=1,
        is_follower=core.quorum.is_voter,
        replica_directory_id=core.local_key.directory_id,
        repair=True,
    )


# ---- the follower's handling of the answer ------------------------------------------------


def handle_response(core: RaftCore, source: int, response: FetchResponse, now: int) -> bool:
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
    if not isinstance(state, FollowerState) or state.leader != source:
        return True  # an observer's discovery answer, or a leader we no longer follow
    error = response.error_code
    repairing, state.repairing = state.repairing, False
    if error == Errors.INCONSISTENT_VOTER_SET:
        core.quorum.demote(f"leader {source} does not count replica {core.node_id} as a voter")
    elif error != Errors.NONE:
        logger.info("%s fetch from %d failed: %d", core.prefix, source, error)
        return False
    log = core.log
    if repairing and response.diverging_epoch is None and response.snapshot_id is None:
        # The leader's copy of our damaged batch (raftcore.raft.damage): in place, if it fits.
        if len(response.records) > 0:
            repair_from(core, response.records, source, now)
        state.reset_fetch_timeout(now)
        return True
    if response.diverging_epoch is not None:
        diverging = response.diverging_epoch
        # Never below the committed offset (raftcore.raft.committed): a leader that asks it
        # was elected without the committed records, and the node stops with the log as it is.
        core.committed.check(
            min(divergence_end_offset(log, diverging), diverging.offset),
            state.high_watermark,
            leader=source,
            epoch=state.epoch,
            what="truncate its log",
        )
        offset = truncate_to_end_offset(log, diverging)
        core.on_truncated(offset, now)  # a Voters record cut off gives the previous set back
        logger.info(
            "%s truncated to offset %d (leader %d: epoch %d ends at %d)",
            core.prefix,
            offset,
            source,
            diverging.epoch,
            diverging.offset,
        )
    elif response.snapshot_id is not None:
        # KIP-630: the leader no longer holds what we need; download its snapshot first.
        return fetch_snapshot.start_download(core, state, response.snapshot_id, source, now)
    else:
        records = response.records
        if len(records) > 0:
            scan = _append(core, state, records, source)
            if scan is None:
                return False
            core.on_appended(records, now, scan)  # KRaftVersion, Voters: in force at once
        if response.high_watermark >= 0:
            state.update_high_watermark(min(response.high_watermark, log.end_offset))
        core.snapshots.maybe_advance_as_follower(response.log_start_offset)
    state.reset_fetch_timeout(now)
    return True


def _append(
    core: RaftCore, state: FollowerState, records: bytes | memoryview, source: int
) -> BatchScan | None:
    """Append the leader's batches; their scan, or None when they are refused."""
    try:
        scan = scan_batches(records, check_crc=False)
        scan.raise_error()
        if scan.count and int(scan.epochs.max()) > state.epoch:
            raise InvalidAppendError(
                f"a batch of epoch {int(scan.epochs.max())} from the leader of epoch {state.epoch}"
            )
        check_well_formed(records)  # every CRC and record (issue 9): no poisoned log
        core.log.append_as_follower(records, checked=scan)  # so checked once, not again
    except (CorruptRecordError, InvalidAppendError) as exc:
        logger.error("%s refusing records from leader %d: %s", core.prefix, source, exc)
        return None
    return scan
