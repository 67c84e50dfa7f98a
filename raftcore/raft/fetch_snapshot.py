"""FetchSnapshot (KIP-630): the rules of both ends.

A leader answers a fetch it cannot serve from its log (below its log start offset, or a
position its log no longer holds, see ``validate_offset_and_epoch``) with the id of its latest
snapshot. The follower then downloads that snapshot in chunks and fetches again from its end.

On the leader, a FetchSnapshot is validated in order: the cluster id; the leader-only epoch
checks (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER); a snapshot it does
not hold, or the bootstrap id (0, 0), is SNAPSHOT_NOT_FOUND; a position outside the snapshot
is POSITION_OUT_OF_RANGE; otherwise the answer is at most ``max_bytes`` from ``position``. A
valid request keeps the leader's quorum alive and the replica's liveness like a fetch, but
acknowledges nothing.

On the follower: a FetchResponse with a SnapshotId starts a download (kept on the
FollowerState, so a new leader or epoch drops it); while it lasts the follower sends
FetchSnapshot(position = bytes held) instead of Fetch. An answer for another snapshot or
position, SNAPSHOT_NOT_FOUND or POSITION_OUT_OF_RANGE drops the download and the follower
fetches again. When it holds ``size`` bytes it freezes the download, which verifies the whole
snapshot first: a torn or corrupted download is discarded, never installed, and the follower
starts over. Then the log starts at the snapshot (``install_snapshot``), the high watermark
rises to the snapshot's end (Kafka's updateFollowerHighWatermark after the full truncation),
and the listener loads the snapshot (:mod:`raftcore.raft.listener`).

Damage. A leader verifies its snapshot whole before it serves the first chunk of a download
(every batch's CRC and the footer; at most once per SERVE_CHECK_EVERY_MS): a damaged one is
set aside, never served, and answered KAFKA_STORAGE_ERROR; a new snapshot becomes due to
stand in its place (``SnapshotManager.replace_damaged``). A follower that refuses a snapshot
it downloaded (it fails verification) or is answered KAFKA_STORAGE_ERROR backs off before it
asks again, exponentially from ``REFUSED_BACKOFF_BASE_MS`` up to half the fetch timeout (so
that the pause never costs it its leader), and says so once per ``REFUSED_LOG_EVERY_MS``. A follower
whose listener must load a snapshot that is damaged here downloads the leader's copy of it
(the listener feed waits for it, ``ListenerFeed.waiting_for``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftcore.error_codes import Errors
from raftcore.errors import CorruptSnapshotError, SnapshotError
from raftcore.raft import reconfig
from raftcore.raft.leader_news import handle_common_response
from raftcore.raft.messages import FetchSnapshotRequest, FetchSnapshotResponse
from raftcore.raft.replicated_log import holds_snapshot_prefix, install_snapshot, snapshot_log
from raftcore.raft.states import FollowerState, LeaderState
from raftcore.raft.values import OffsetAndEpoch
from raftcore.raft.voters import ReplicaKey

if TYPE_CHECKING:
    from raftcore.raft.core import RaftCore

logger = logging.getLogger(__name__)

BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)
REFUSED_BACKOFF_BASE_MS = 100
REFUSED_LOG_EVERY_MS = 10_000
# A leader checks a snapshot again before serving a download at most this often: a flood of
# FetchSnapshot(position 0) cannot keep it reading its snapshot (a follower verifies every
# download whole anyway, and refuses a damaged one).
SERVE_CHECK_EVERY_MS = 10_000


# ---- the leader's answer ----------------------------------------------------------------------


def _answer(core: RaftCore, error: int, **fields: object) -> FetchSnapshotResponse:
    return FetchSnapshotResponse(
        error_code=error,
        current_leader=core.quorum.leader_and_epoch(),
        **fields,  # type: ignore[arg-type]
    )


def handle_request(core: RaftCore, source: int, request: FetchSnapshotRequest, now: int):
    """The leader's answer to a FetchSnapshot (a FetchSnapshotResponse)."""
    if not core.has_valid_cluster_id(request.cluster_id):
        return _answer(core, Errors.INCONSISTENT_CLUSTER_ID)
    error = core.validate_leader_only_request(request.current_leader_epoch)
    if error is not None:
        return _answer(core, error)
    state = core.quorum.state
    assert isinstance(state, LeaderState)
    sid = request.snapshot_id
    log = snapshot_log(core.log)
    reader = None
    # No snapshot has a negative epoch (or an offset of 0 or less but the bootstrap one): one
    # asked for is not found, as Kafka's readSnapshot finds none -- never a bad file name.
    if log is not None and sid != BOOTSTRAP_SNAPSHOT_ID and sid.offset > 0 and sid.epoch >= 0:
        try:
            if request.position == 0 and not _sound_to_serve(core, log, sid, now):
                raise CorruptSnapshotError(f"snapshot {sid} failed its checks")
            reader = log.read_snapshot(sid)
        except CorruptSnapshotError:
            core.snapshots.replace_damaged(sid, f"serving replica {request.replica_id}")
            return _answer(core, Errors.KAFKA_STORAGE_ERROR, snapshot_id=sid)
    if reader is None:
        return _answer(core, Errors.SNAPSHOT_NOT_FOUND, snapshot_id=sid)
    size = reader.size
    if request.position < 0 or request.position >= size:
        return _answer(core, Errors.POSITION_OUT_OF_RANGE, snapshot_id=sid, size=size)
    if request.max_bytes < 1:
        return _answer(core, Errors.INVALID_REQUEST)
    # A valid request keeps the quorum alive (voters only: the state knows who counts) and
    # the replica live, as a fetch does; it acknowledges nothing.
    state.update_check_quorum(ReplicaKey(request.replica_id, request.replica_directory_id), now)
    if request.replica_id >= 0 and request.replica_id != core.node_id:
        replica = state.replica(ReplicaKey(request.replica_id, request.replica_directory_id))
        replica.last_fetch_ms = max(replica.last_fetch_ms, now)
    # Whatever the replica asked for, at most replica.fetch.response.max.bytes.
    length = min(
        request.max_bytes, core.config.replica_fetch_response_max_bytes, size - request.position
    )
    return _answer(
        core,
        Errors.NONE,
        snapshot_id=sid,
        size=size,
        position=request.position,
        data=reader.slice(request.position, length),  # a view (of the map, on disk): no copy
    )


def _sound_to_serve(core: RaftCore, log: object, sid: OffsetAndEpoch, now: int) -> bool:
    """A download starts: the snapshot's CRCs are checked again before any of it leaves,
    unless they were within SERVE_CHECK_EVERY_MS. False: damaged, and set aside."""
    check = getattr(log, "check_snapshot", None)
    if check is None:
        return True
    checked = core.snapshots.served_checked_at
    last = checked.get(sid)
    if last is not None and now - last < SERVE_CHECK_EVERY_MS:
        return True
    if not check(sid, "serving it"):
        checked.pop(sid, None)
        return False
    checked[sid] = now
    return True


# ---- the follower -----------------------------------------------------------------------------


def build_request(core: RaftCore, state: FollowerState) -> FetchSnapshotRequest:
    writer = state.fetching_snapshot
    return FetchSnapshotRequest(
        cluster_id=core.config.cluster_id,
        replica_id=core.node_id,
        current_leader_epoch=state.epoch,
        snapshot_id=writer.snapshot_id,
        position=writer.size,
        max_bytes=core.config.fetch_max_bytes,
        replica_directory_id=core.local_key.directory_id,
    )


def start_download(
    core: RaftCore, state: FollowerState, snapshot_id: OffsetAndEpoch, source: int, now: int
) -> bool:
    """The leader answered a fetch with ``snapshot_id``: download it (or, if this replica
    already holds it, start the log there at once)."""
    log = snapshot_log(core.log)
    if log is None or snapshot_id.offset <= 0 or snapshot_id.epoch < 0:
        logger.error(
            "%s leader %d sent snapshot id %r, which this replica cannot fetch",
            core.prefix,
            source,
            snapshot_id,
        )
        return False
    if snapshot_id.offset >= core.log.log_start_offset and not holds_snapshot_prefix(
        log, snapshot_id
    ):
        # Installing it would start the log at its end offset: never where that drops a
        # committed record (raftcore.raft.committed). Checked before a byte is written, so a
        # refused snapshot never lies in the log directory to be taken up at the next start.
        core.committed.check(
            snapshot_id.offset,
            state.high_watermark,
            leader=source,
            epoch=state.epoch,
            what="install a snapshot and start its log",
        )
    state.drop_snapshot_download()
    try:
        writer = log.create_new_snapshot_unchecked(snapshot_id)
    except (OSError, SnapshotError) as exc:
        # A full or failing disk: the replica stays a follower and asks again at its next
        # fetch; the node keeps running (storage of the log itself is another matter).
        logger.error("%s cannot start snapshot %r: %s", core.prefix, snapshot_id, exc)
        state.reset_fetch_timeout(now)
        return True
    if writer is None:  # already held (a download frozen earlier)
        _installed(core, state, snapshot_id, source, now)
    else:
        state.fetching_snapshot = writer
        logger.info("%s fetching snapshot %r from leader %d", core.prefix, snapshot_id, source)
    state.reset_fetch_timeout(now)
    return True


def handle_response(core: RaftCore, source: int, response: FetchSnapshotResponse, now: int) -> bool:
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
        return True
    writer = state.fetching_snapshot
    error = response.error_code
    if writer is None:
        return True  # the download was dropped meanwhile
    if error in (Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE) or (
        error == Errors.NONE
        and (response.snapshot_id != writer.snapshot_id or response.position != writer.size)
    ):
        # The leader moved on (deleted the snapshot) or the chunk is not the one asked for:
        # start over with a fetch, which names the snapshot to get now.
        logger.info(
            "%s dropping the download of snapshot %r from %d (error %d, answer for %r at %d)",
            core.prefix,
            writer.snapshot_id,
            source,
            error,
            response.snapshot_id,
            response.position,
        )
        state.drop_snapshot_download()
        state.reset_fetch_timeout(now)
        if error == Errors.SNAPSHOT_NOT_FOUND and core.feed.waiting_for == writer.snapshot_id:
            # the leader's copy of a snapshot damaged here is gone: ask again after a pause
            _back_off(core, state, source, writer.snapshot_id, why="not held by it", now=now)
        return True
    if error == Errors.KAFKA_STORAGE_ERROR:
        # the leader's copy is damaged: it takes a new one meanwhile
        _drop_quietly(core, state)
        _back_off(
            core, state, source, writer.snapshot_id, why="the leader's copy is damaged", now=now
        )
        return True
    if error != Errors.NONE:
        logger.info("%s fetch snapshot from %d failed: %d", core.prefix, source, error)
        return False
    try:
        writer.append(response.data)
    except (OSError, SnapshotError) as exc:
        # ENOSPC, EIO, a chunk the writer refuses: drop the partial bytes and start over at
        # the next fetch; the replica keeps following.
        logger.error(
            "%s cannot store snapshot %r from %d: %s; dropping the download",
            core.prefix,
            writer.snapshot_id,
            source,
            exc,
        )
        _drop_quietly(core, state)
        state.reset_fetch_timeout(now)
        return True
    if writer.size >= response.size:
        state.fetching_snapshot = None
        snapshot_id = writer.snapshot_id
        try:
            if writer.size != response.size:
                writer.discard()
                raise CorruptSnapshotError(
                    f"snapshot {snapshot_id}: {writer.size} bytes received, the leader "
                    f"announced {response.size}"
                )
            writer.freeze()  # verifies the whole snapshot before it is installed
        except (OSError, SnapshotError) as exc:
            _discard_quietly(core, writer)
            if isinstance(exc, CorruptSnapshotError):
                core.snapshots.refused += 1
                _back_off(core, state, source, snapshot_id, why=f"refused: {exc}", now=now)
                return True  # nothing installed; the fetch after the pause starts over
            logger.error(
                "%s refusing snapshot %r from leader %d: %s", core.prefix, snapshot_id, source, exc
            )
            state.reset_fetch_timeout(now)
            return True  # nothing installed; the next fetch starts over
        _installed(core, state, snapshot_id, source, now)
    state.reset_fetch_timeout(now)
    return True


def refused_backoff_ms(refused_in_row: int, fetch_timeout_ms: int) -> int:
    """The pause after the ``refused_in_row``-th snapshot refused in a row: doubling from
    REFUSED_BACKOFF_BASE_MS, capped at half the fetch timeout (the follower must hear from its
    leader before the fetch timeout, or it stands for election)."""
    cap = max(REFUSED_BACKOFF_BASE_MS, fetch_timeout_ms // 2)
    return min(cap, REFUSED_BACKOFF_BASE_MS << min(max(refused_in_row - 1, 0), 30))


def _back_off(
    core: RaftCore,
    state: FollowerState,
    source: int,
    snapshot_id: OffsetAndEpoch,
    *,
    why: str,
    now: int,
) -> None:
    """A snapshot from ``source`` that could not be installed: ask again only after a pause
    that grows with each one in a row; one ERROR line per REFUSED_LOG_EVERY_MS."""
    snapshots = core.snapshots
    snapshots.refused_in_row += 1
    pause = refused_backoff_ms(snapshots.refused_in_row, core.config.fetch_timeout_ms)
    core.requests.back_off(source, now + pause)
    state.reset_fetch_timeout(now)
    last = snapshots.refused_logged_at
    if last is None or now - last >= REFUSED_LOG_EVERY_MS:
        snapshots.refused_logged_at = now
        logger.error(
            "%s snapshot %r from leader %d not installed (%s); %d in a row, asking again in %d ms",
            core.prefix,
            snapshot_id,
            source,
            why,
            snapshots.refused_in_row,
            pause,
        )


def fetch_damaged(core: RaftCore, state: FollowerState, now: int) -> None:
    """The listener waits for a snapshot that is damaged here: download the leader's copy
    (once the leader is ready to be asked: a backoff holds it)."""
    sid = core.feed.waiting_for
    if sid is None or state.fetching_snapshot is not None:
        return
    logger.info("%s fetching the leader's copy of damaged snapshot %r", core.prefix, sid)
    start_download(core, state, sid, state.leader, now)


def _drop_quietly(core: RaftCore, state: FollowerState) -> None:
    writer, state.fetching_snapshot = state.fetching_snapshot, None
    if writer is not None:
        _discard_quietly(core, writer)


def _discard_quietly(core: RaftCore, writer: object) -> None:
    """Discard a download's partial file; a failure to delete it is logged (start-up
    removes what is left)."""
    try:
        writer.discard()  # type: ignore[attr-defined]
    except (OSError, SnapshotError) as exc:
        logger.warning("%s cannot remove a partial snapshot: %s", core.prefix, exc)


def _installed(
    core: RaftCore, state: FollowerState, snapshot_id: OffsetAndEpoch, source: int, now: int
) -> None:
    log = snapshot_log(core.log)
    assert log is not None
    truncated = install_snapshot(log, snapshot_id)
    reader = log.read_snapshot(snapshot_id)
    if reader is not None:  # the voters are the snapshot's, and the log's after it (KIP-853)
        reconfig.installed_snapshot(core, reader, snapshot_id.offset, now)
    # A repair fetch answered with the snapshot: the leader no longer holds the damaged batch,
    # and this replica needs it no more (the snapshot holds everything below). Its log goes on
    # past the snapshot, and so may its high watermark: the next fetch says.
    damaged_below = (
        not truncated
        and bool(core.damage)
        and core.damage.damaged is not None
        and core.damage.damaged.offset < snapshot_id.offset
    )
    hw = state.high_watermark
    if not damaged_below and (hw is None or hw < snapshot_id.offset):
        # Everything below the snapshot's end is committed (KAFKA-9491).
        state.update_high_watermark(snapshot_id.offset)
    core.snapshots.on_snapshot_installed(snapshot_id)
    core.snapshots.refused_in_row = 0
    if damaged_below:
        core.snapshots.move_log_start(snapshot_id, "the damaged batch is below the snapshot")
    logger.info(
        "%s installed snapshot %r from leader %d%s",
        core.prefix,
        snapshot_id,
        source,
        "; the log starts there" if truncated else "",
    )
