"""KIP-630 in the Raft core, rule by rule: snapshot ids, the leader's answers to Fetch and
FetchSnapshot, the follower's download, the listener's loading, the core's snapshot handshake
and the log start offset (seed 003)."""

from __future__ import annotations

import pytest
from raft_harness import CLUSTER, Harness, RecordingListener, batch

from raftcore.error_codes import Errors
from raftcore.errors import OffsetOutOfRangeError, RaftcoreError, SnapshotError
from raftcore.raft import (
    FetchRequest,
    FetchResponse,
    LeaderAndEpoch,
    OffsetAndEpoch,
    fetch_snapshot,
)
from raftcore.raft.fetch_snapshot import (
    REFUSED_BACKOFF_BASE_MS,
    REFUSED_LOG_EVERY_MS,
    SERVE_CHECK_EVERY_MS,
)
from raftcore.raft.messages import FetchSnapshotRequest, FetchSnapshotResponse
from raftcore.raft.snapshots import InvalidSnapshotError
from raftcore.raft.states import FollowerState
from raftcore.testing import InMemoryLog


class LoadingListener(RecordingListener):
    def __init__(self) -> None:
        super().__init__()
        self.loaded: list = []  # (snapshot id, records)
        self.events: list = []

    def handle_load_snapshot(self, reader) -> None:
        records = [(r.key, r.value) for r in reader.records()]
        self.loaded.append((reader.snapshot_id, records))
        self.events.append(("snapshot", reader.snapshot_id.offset))

    def handle_commit(self, batches) -> None:
        super().handle_commit(batches)
        self.events.extend(("commit", b.base_offset) for b in batches)


def committed_leader(batches: int = 4, **config) -> Harness:
    """Node 1 leads voters 1-3; ``batches`` one-record batches, all committed and read by the
    listener."""
    config.setdefault("snapshot_min_records", 3)
    h = Harness(listener=LoadingListener(), **config)
    h.become_leader()
    h.flush()
    for i in range(batches):
        h.core.append([(b"k", b"v%d" % i)], h.now)
    h.flush()
    end = h.log.end_offset
    h.fetch(2, end, h.epoch)
    h.fetch(3, end, h.epoch)
    h.poll()
    assert h.core.high_watermark == end and h.core.listener_next_offset == end
    return h


def take_snapshot(h: Harness, records=((b"state", b"1"),)) -> OffsetAndEpoch:
    writer = h.core.create_snapshot(h.core.listener_next_offset, h.now)
    writer.append(list(records))
    writer.freeze()
    h._take(h.core.snapshot_frozen(writer.snapshot_id, h.now))
    return writer.snapshot_id


def snapshot_bytes(epoch: int = 3, batches: int = 3) -> tuple[OffsetAndEpoch, bytes]:
    """A snapshot of a log of ``batches`` one-record batches of ``epoch`` (from another log)."""
    log = InMemoryLog()
    for _ in range(batches):
        log.append_as_follower(batch(log.end_offset, epoch))
    sid = OffsetAndEpoch(log.end_offset, epoch)
    writer = log.create_new_snapshot(sid)
    writer.append([(b"state", b"%d" % i) for i in range(50)])
    writer.freeze()
    return sid, log.read_snapshot(sid).data


# ---- the log ----------------------------------------------------------------------------------


def test_a_snapshot_id_must_end_at_a_batch_boundary():
    log = InMemoryLog()
    log.append_as_follower(batch(0, 1, n=3))
    log.append_as_follower(batch(3, 2, n=2))
    with pytest.raises(ValueError, match="batch boundary"):
        log.create_new_snapshot(OffsetAndEpoch(2, 1))
    with pytest.raises(ValueError, match="epoch"):
        log.create_new_snapshot(OffsetAndEpoch(5, 1))  # the record at 4 is of epoch 2
    assert log.create_new_snapshot(OffsetAndEpoch(3, 1)) is not None


def test_the_core_refuses_a_snapshot_mid_batch_or_past_the_listener():
    h = committed_leader()
    h.core.append([(b"k", b"a"), (b"k", b"b"), (b"k", b"c")], h.now)  # one 3-record batch
    h.flush()
    end = h.log.end_offset
    h.fetch(2, end, h.epoch)
    h.poll()
    assert h.core.listener_next_offset == end
    with pytest.raises(InvalidSnapshotError, match="batch boundary"):
        h.core.create_snapshot(end - 1, h.now)  # inside the last batch
    with pytest.raises(InvalidSnapshotError, match="listener has read up to"):
        h.core.create_snapshot(end + 1, h.now)


def test_a_snapshot_may_trail_the_listener_at_a_batch_boundary_past_the_latest():
    """The node's state machine applies on its own thread, behind the core's listener: the
    core accepts any batch boundary with latest snapshot < end <= listener's next offset."""
    h = committed_leader()
    behind = h.core.listener_next_offset - 1  # the end of the second-to-last 1-record batch
    writer = h.core.create_snapshot(behind, h.now)
    assert writer is not None and writer.snapshot_id.offset == behind
    writer.append([(b"state", b"1")])
    writer.freeze()
    h._take(h.core.snapshot_frozen(writer.snapshot_id, h.now))
    with pytest.raises(InvalidSnapshotError, match="not past the latest"):
        h.core.create_snapshot(behind - 1, h.now)  # a batch boundary, but not past it
    writer = h.core.create_snapshot(h.core.listener_next_offset, h.now)  # past it: accepted
    assert writer is not None


def test_a_read_below_the_log_start_offset_raises():
    log = InMemoryLog()
    for _ in range(3):
        log.append_as_follower(batch(log.end_offset, 1))
    writer = log.create_new_snapshot(OffsetAndEpoch(2, 1))
    writer.freeze()
    assert log.delete_before_snapshot(OffsetAndEpoch(2, 1))
    assert log.log_start_offset == 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1)


def test_delete_before_snapshot_needs_the_snapshot_and_moves_only_forward():
    log = InMemoryLog()
    for _ in range(4):
        log.append_as_follower(batch(log.end_offset, 1))
    assert not log.delete_before_snapshot(OffsetAndEpoch(2, 1))  # no such snapshot
    for offset in (2, 3):
        log.create_new_snapshot(OffsetAndEpoch(offset, 1)).freeze()
    assert log.delete_before_snapshot(OffsetAndEpoch(3, 1))
    assert not log.delete_before_snapshot(OffsetAndEpoch(3, 1))
    assert log.earliest_snapshot_id() == OffsetAndEpoch(3, 1)  # older snapshots forgotten


def test_last_fetched_epoch_of_an_empty_log_at_a_snapshot_is_the_snapshot_epoch():
    log = InMemoryLog()
    sid, data = snapshot_bytes(epoch=4)
    writer = log.create_new_snapshot_unchecked(sid)
    writer.append(data)
    writer.freeze()
    assert log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (3, 3, 4)


# ---- the leader ---------------------------------------------------------------------------------


def test_a_fetch_below_the_log_start_offset_is_answered_with_the_latest_snapshot_id():
    h = committed_leader()
    sid = take_snapshot(h)
    h.advance(1)  # every replica has fetched past it: the log start moves
    assert h.log.log_start_offset == sid.offset
    response = h.fetch(2, 0, 0)
    assert response.snapshot_id == sid and len(response.records) == 0
    assert response.diverging_epoch is None


def test_a_fetch_at_the_log_start_with_another_epoch_is_answered_with_the_snapshot_id():
    h = committed_leader()
    sid = take_snapshot(h)
    h.advance(1)
    response = h.fetch(2, sid.offset, sid.epoch - 1)
    assert response.snapshot_id == sid


def test_an_empty_fetcher_of_a_log_from_zero_is_never_sent_the_bootstrap_snapshot():
    h = committed_leader()
    response = h.fetch(2, 0, 0)
    assert response.snapshot_id is None and len(response.records) > 0


def test_fetch_snapshot_serves_at_most_max_bytes_from_the_position():
    h = committed_leader()
    sid = take_snapshot(h, [(b"k%d" % i, b"x" * 50) for i in range(20)])
    size = h.log.read_snapshot(sid).size
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 10, max_bytes=100))
    assert (r.error_code, r.size, r.position, len(r.data)) == (Errors.NONE, size, 10, 100)
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, size - 7, max_bytes=100))
    assert len(r.data) == 7
    assert r.data == h.log.read_snapshot(sid).data[-7:]


def test_fetch_snapshot_serves_at_most_replica_fetch_response_max_bytes_whatever_it_asks():
    h = committed_leader(replica_fetch_response_max_bytes=64)
    sid = take_snapshot(h, [(b"k%d" % i, b"x" * 50) for i in range(20)])
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 0, max_bytes=(1 << 31) - 1))
    assert (r.error_code, len(r.data)) == (Errors.NONE, 64)


def test_a_leader_checks_its_snapshot_before_serving_a_download_at_most_every_ten_seconds(
    monkeypatch,
):
    """Position 0 starts a download: the leader checks the snapshot's CRCs first (the log's
    check_snapshot), but not again within SERVE_CHECK_EVERY_MS, so a flood of requests cannot
    keep it reading; a chunk past 0 is never checked. Damaged: KAFKA_STORAGE_ERROR, nothing
    served, and a new snapshot is due."""
    assert SERVE_CHECK_EVERY_MS == 10_000
    monkeypatch.setattr(fetch_snapshot, "SERVE_CHECK_EVERY_MS", 50)  # within check quorum
    h = committed_leader()
    sid = take_snapshot(h, [(b"k%d" % i, b"x" * 50) for i in range(20)])
    checks: list[OffsetAndEpoch] = []
    sound = [True]

    def check_snapshot(snapshot_id, when):  # type: ignore[no-untyped-def]
        checks.append(snapshot_id)
        return sound[0]

    h.log.check_snapshot = check_snapshot  # type: ignore[attr-defined]
    for position in (0, 0, 10, 0):
        r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, position, max_bytes=100))
        assert r.error_code == Errors.NONE
    assert checks == [sid]
    h.advance(50)
    sound[0] = False
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 0, max_bytes=100))
    assert r.error_code == Errors.KAFKA_STORAGE_ERROR and len(r.data) == 0
    assert checks == [sid, sid]
    assert h.core.snapshots.replace_due
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 0, max_bytes=100))
    assert r.error_code == Errors.KAFKA_STORAGE_ERROR  # checked again: never served


def test_fetch_snapshot_past_the_end_is_position_out_of_range():
    h = committed_leader()
    sid = take_snapshot(h)
    size = h.log.read_snapshot(sid).size
    for position in (size, size + 1, -1):
        r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, position))
        assert r.error_code == Errors.POSITION_OUT_OF_RANGE


def test_fetch_snapshot_of_a_missing_or_the_bootstrap_snapshot_is_snapshot_not_found():
    h = committed_leader()
    take_snapshot(h)
    for sid in (OffsetAndEpoch(0, 0), OffsetAndEpoch(2, 1), OffsetAndEpoch(99, 9)):
        r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 0))
        assert r.error_code == Errors.SNAPSHOT_NOT_FOUND


def test_fetch_snapshot_runs_the_leader_only_epoch_checks():
    h = committed_leader()
    sid = take_snapshot(h)
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch - 1, sid, 0))
    assert r.error_code == Errors.FENCED_LEADER_EPOCH
    r = h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch + 1, sid, 0))
    assert r.error_code == Errors.UNKNOWN_LEADER_EPOCH
    r = h.request(2, FetchSnapshotRequest("other", 2, h.epoch, sid, 0))
    assert r.error_code == Errors.INCONSISTENT_CLUSTER_ID


def test_a_valid_fetch_snapshot_keeps_the_quorum_alive():
    h = committed_leader()
    sid = take_snapshot(h)
    for _ in range(4):  # well past the check-quorum timeout, only FetchSnapshot arriving
        h.advance(h.config.check_quorum_timeout_ms // 2)
        h.request(2, FetchSnapshotRequest(CLUSTER, 2, h.epoch, sid, 0))
    assert h.core.is_leader()


def test_the_leader_keeps_the_log_start_offset_while_a_replica_lags_below_it():
    h = committed_leader(max_replication_lag_ms=10_000)
    h.fetch(3, 1, h.epoch)  # replica 3 is now known to hold only offset 0
    sid = take_snapshot(h)
    h.advance(1)
    assert h.log.log_start_offset == 0
    h.fetch(3, sid.offset, h.epoch)
    h.advance(1)
    assert h.log.log_start_offset == sid.offset


def test_the_output_says_when_the_log_start_offset_moved_and_only_then():
    # DeleteRecords waits on it (Output.log_start_moved) instead of polling the log
    h = committed_leader(max_replication_lag_ms=10_000)
    h.fetch(3, 1, h.epoch)
    sid = take_snapshot(h)
    h.advance(1)
    assert h.log_start_moves_said == 0  # replica 3 lags below the snapshot
    h.fetch(3, sid.offset, h.epoch)
    h.advance(1)
    assert h.log.log_start_offset == sid.offset
    assert h.log_start_moves_said == 1
    h.advance(1)
    assert h.log_start_moves_said == 1  # said once


def test_the_leader_moves_the_log_start_offset_once_the_snapshot_is_max_replication_lag_old():
    h = committed_leader(max_replication_lag_ms=5_000)
    h.fetch(3, 1, h.epoch)
    take_snapshot(h)
    h.advance(1)
    assert h.log.log_start_offset == 0
    for _ in range(6):  # replica 2 keeps the quorum alive; 3 stays behind
        h.advance(1_000)
        h.fetch(2, h.log.end_offset, h.epoch)
    assert h.log.log_start_offset > 0


# ---- the core's snapshot handshake ------------------------------------------------------------


def test_snapshot_due_is_raised_when_enough_was_read_and_not_again_until_frozen():
    h = committed_leader(batches=1, snapshot_min_records=3)
    assert not h.core.poll(h.now).snapshot_due  # 2 offsets read (LeaderChange + 1 record)
    h.core.append([(b"k", b"v")], h.now)
    h.flush()
    h.fetch(2, h.log.end_offset, h.epoch)
    assert h.core.poll(h.now).snapshot_due
    writer = h.core.create_snapshot(h.core.listener_next_offset, h.now)
    assert not h.core.poll(h.now).snapshot_due  # one at a time
    writer.freeze()
    out = h.core.snapshot_frozen(writer.snapshot_id, h.now)
    assert not out.snapshot_due


def test_snapshots_are_off_by_default():
    h = committed_leader(batches=20, snapshot_min_records=0)
    assert not h.core.poll(h.now).snapshot_due


# ---- the follower -------------------------------------------------------------------------------


def following(listener=None) -> Harness:
    h = Harness(listener=listener or LoadingListener())
    h.begin_quorum_epoch(2, 5)
    assert isinstance(h.state, FollowerState)
    h.poll()
    return h


def answer_fetch_with_snapshot(h: Harness, sid: OffsetAndEpoch) -> None:
    (out,) = h.take(FetchRequest, 2)
    h.respond(
        out,
        FetchResponse(Errors.NONE, sid.offset, sid.offset, LeaderAndEpoch(2, 5), snapshot_id=sid),
    )
    h.poll()


def serve(h: Harness, sid: OffsetAndEpoch, data: bytes, chunk: int, mangle=None) -> None:
    """Answer every FetchSnapshot until none is sent."""
    while True:
        sent = h.take(FetchSnapshotRequest, 2)
        if not sent:
            return
        (out,) = sent
        req = out.message
        piece = data[req.position : req.position + chunk]
        response = FetchSnapshotResponse(
            Errors.NONE, LeaderAndEpoch(2, 5), sid, len(data), req.position, piece
        )
        if mangle is not None:
            response = mangle(response)
        h.respond(out, response)
        h.poll()


def test_a_follower_downloads_the_snapshot_then_fetches_from_its_end():
    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    assert h.take(FetchRequest, 2) == []  # fetching paused during the download
    serve(h, sid, data, chunk=97)
    assert h.log.latest_snapshot_id() == sid
    assert (h.log.log_start_offset, h.log.end_offset) == (sid.offset, sid.offset)
    assert h.core.high_watermark == sid.offset
    (out,) = h.take(FetchRequest, 2)
    assert (out.message.fetch_offset, out.message.last_fetched_epoch) == (sid.offset, sid.epoch)
    assert [s for s, _ in h.listener.loaded] == [sid]


def test_a_lost_fetch_snapshot_is_sent_again_from_the_bytes_held_after_the_backoff():
    """The node lost a request (no connection, or the connection went with it in flight):
    core.request_lost fails it at once, and the download goes on from its position after
    retry_backoff_ms, not the request timeout; the bytes held are kept."""
    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    (out,) = h.take(FetchSnapshotRequest, 2)
    h.respond(
        out,
        FetchSnapshotResponse(Errors.NONE, LeaderAndEpoch(2, 5), sid, len(data), 0, data[:100]),
    )
    h.poll()
    (lost,) = h.take(FetchSnapshotRequest, 2)
    assert lost.message.position == 100
    h._take(h.core.request_lost(2, lost.correlation_id, h.now))
    assert h.take(FetchSnapshotRequest, 2) == []  # backing off
    h.advance(h.core.config.retry_backoff_ms)
    h.poll()
    (again,) = h.take(FetchSnapshotRequest, 2)
    assert again.message.position == 100 and again.message.snapshot_id == sid
    assert h.core.config.retry_backoff_ms < h.core.config.request_timeout_ms


def test_a_downloaded_snapshot_that_fails_verification_is_never_installed():
    def flip(response):
        if response.position == 0:
            data = bytearray(response.data)
            data[70] ^= 0x10
            return FetchSnapshotResponse(
                response.error_code,
                response.current_leader,
                response.snapshot_id,
                response.size,
                response.position,
                bytes(data),
            )
        return response

    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    serve(h, sid, data, chunk=1000, mangle=flip)
    assert h.log.latest_snapshot_id() is None and h.log.log_start_offset == 0
    assert h.listener.loaded == []
    assert h.take(FetchRequest, 2) == []  # it backs off first
    h.advance(REFUSED_BACKOFF_BASE_MS)
    h.poll()
    assert h.take(FetchRequest, 2)  # then starts over with a fetch


def flip_first_chunk(response):  # type: ignore[no-untyped-def]
    if response.position != 0:
        return response
    data = bytearray(response.data)
    data[70] ^= 0x10
    return FetchSnapshotResponse(
        response.error_code,
        response.current_leader,
        response.snapshot_id,
        response.size,
        response.position,
        bytes(data),
    )


def test_a_follower_that_keeps_refusing_a_snapshot_backs_off_exponentially_to_a_cap(caplog):
    """A leader serving a damaged snapshot must not be asked for it 13 times a second,
    forever: each refusal in a row doubles the pause (from REFUSED_BACKOFF_BASE_MS), up to
    half the fetch timeout, so the pause never costs the follower its leader; one ERROR line
    per REFUSED_LOG_EVERY_MS says so, and the follower stays a follower throughout."""
    h = following()
    sid, data = snapshot_bytes()
    cap = h.core.config.fetch_timeout_ms // 2
    pauses = []
    with caplog.at_level("ERROR", logger="raftcore.raft.fetch_snapshot"):
        (fetch,) = h.take(FetchRequest, 2)
        for _ in range(7):
            h.respond(
                fetch,
                FetchResponse(
                    Errors.NONE, sid.offset, sid.offset, LeaderAndEpoch(2, 5), snapshot_id=sid
                ),
            )
            h.poll()
            serve(h, sid, data, chunk=10_000, mangle=flip_first_chunk)
            waited = 0
            while not (sent := h.take(FetchRequest, 2)):
                h.advance(10)
                h.poll()
                waited += 10
                assert waited <= cap + 10, "no fetch within the cap"
            (fetch,) = sent
            pauses.append(waited)
    assert isinstance(h.state, FollowerState)
    expected = [min(cap, REFUSED_BACKOFF_BASE_MS << i) for i in range(7)]
    assert pauses == expected
    assert h.core.snapshots.refused == 7
    lines = [r for r in caplog.records if "not installed" in r.getMessage()]
    assert len(lines) == 1 + sum(pauses[:-1]) // REFUSED_LOG_EVERY_MS
    assert h.log.latest_snapshot_id() is None and h.listener.loaded == []


def test_a_snapshot_installed_after_refusals_starts_the_backoff_over():
    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    serve(h, sid, data, chunk=10_000, mangle=flip_first_chunk)
    assert h.core.snapshots.refused_in_row == 1
    h.advance(REFUSED_BACKOFF_BASE_MS)
    h.poll()
    (out,) = h.take(FetchRequest, 2)
    h.respond(
        out,
        FetchResponse(Errors.NONE, sid.offset, sid.offset, LeaderAndEpoch(2, 5), snapshot_id=sid),
    )
    h.poll()
    serve(h, sid, data, chunk=10_000)
    assert h.log.latest_snapshot_id() == sid
    assert h.core.snapshots.refused_in_row == 0


def test_a_leader_answering_kafka_storage_error_for_its_snapshot_is_asked_again_after_a_pause():
    h = following()
    sid, _ = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    (out,) = h.take(FetchSnapshotRequest, 2)
    h.respond(
        out,
        FetchSnapshotResponse(Errors.KAFKA_STORAGE_ERROR, LeaderAndEpoch(2, 5), sid, -1, -1, b""),
    )
    h.poll()
    assert h.state.fetching_snapshot is None  # the download is dropped
    assert h.take(FetchRequest, 2) == [] and h.take(FetchSnapshotRequest, 2) == []
    h.advance(REFUSED_BACKOFF_BASE_MS)
    h.poll()
    assert h.take(FetchRequest, 2)
    assert isinstance(h.state, FollowerState)


def test_a_torn_download_announced_as_complete_is_never_installed():
    def tear(response):
        cut = len(response.data) // 2
        return FetchSnapshotResponse(
            response.error_code,
            response.current_leader,
            response.snapshot_id,
            response.position + cut,
            response.position,
            response.data[:cut],
        )

    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    serve(h, sid, data, chunk=1000, mangle=tear)
    assert h.log.latest_snapshot_id() is None


def test_snapshot_not_found_drops_the_download_and_returns_to_fetch():
    h = following()
    sid, _ = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    (out,) = h.take(FetchSnapshotRequest, 2)
    h.respond(out, FetchSnapshotResponse(Errors.SNAPSHOT_NOT_FOUND, LeaderAndEpoch(2, 5), sid))
    h.poll()
    assert h.state.fetching_snapshot is None
    assert h.take(FetchRequest, 2)


def test_a_new_leader_or_epoch_drops_the_download():
    h = following()
    sid, _ = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    assert h.take(FetchSnapshotRequest, 2)  # never answered
    writer = h.state.fetching_snapshot
    assert writer is not None
    h.begin_quorum_epoch(3, 6)
    assert h.state.fetching_snapshot is None and writer.size == 0
    assert h.log.latest_snapshot_id() is None


# ---- the listener -------------------------------------------------------------------------------


def test_the_listener_loads_the_snapshot_before_later_batches():
    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    serve(h, sid, data, chunk=500)
    (out,) = h.take(FetchRequest, 2)
    records = batch(sid.offset, 5, n=2)
    h.respond(
        out,
        FetchResponse(
            Errors.NONE, sid.offset + 2, sid.offset, LeaderAndEpoch(2, 5), records=records
        ),
    )
    h.poll()
    assert h.listener.events == [("snapshot", sid.offset), ("commit", sid.offset)]
    assert h.core.listener_next_offset == sid.offset + 2


def test_a_new_listener_loads_the_latest_snapshot_first():
    log = InMemoryLog()
    sid, data = snapshot_bytes()
    writer = log.create_new_snapshot_unchecked(sid)
    writer.append(data)
    writer.freeze()
    log.truncate_to_latest_snapshot()
    log.append_as_follower(batch(sid.offset, 4))
    log.flush()
    listener = LoadingListener()
    h = Harness(log=log, listener=listener)
    h.begin_quorum_epoch(2, 5)
    h.poll()
    (out,) = h.take(FetchRequest, 2)
    h.respond(out, FetchResponse(Errors.NONE, sid.offset + 1, sid.offset, LeaderAndEpoch(2, 5)))
    h.poll()
    assert listener.events == [("snapshot", sid.offset), ("commit", sid.offset)]


def test_a_listener_without_handle_load_snapshot_that_needs_one_is_an_error():
    h = following(listener=RecordingListener())
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    with pytest.raises(RaftcoreError, match="handle_load_snapshot"):
        serve(h, sid, data, chunk=10_000)


def test_a_download_the_disk_cannot_hold_is_dropped_and_the_follower_tries_again():
    """ENOSPC while storing a chunk: the download is dropped (its partial bytes discarded),
    the replica stays a follower and fetches again; once the disk has room, the snapshot is
    installed. The failure never escapes the core (it would stop the node)."""
    import errno

    h = following()
    sid, data = snapshot_bytes()
    answer_fetch_with_snapshot(h, sid)
    writer = h.state.fetching_snapshot
    discarded = []

    def full(_data):
        raise OSError(errno.ENOSPC, "No space left on device")

    original_discard = writer.discard
    writer.append = full
    writer.discard = lambda: (discarded.append(True), original_discard())
    (out,) = h.take(FetchSnapshotRequest, 2)
    h.respond(
        out,
        FetchSnapshotResponse(Errors.NONE, LeaderAndEpoch(2, 5), sid, len(data), 0, data[:100]),
    )
    h.poll()
    assert isinstance(h.state, FollowerState) and h.state.fetching_snapshot is None
    assert discarded == [True]
    assert h.log.latest_snapshot_id() is None
    answer_fetch_with_snapshot(h, sid)  # the next fetch names the snapshot again
    serve(h, sid, data, chunk=97)
    assert h.log.latest_snapshot_id() == sid and h.log.log_start_offset == sid.offset


def test_a_local_snapshot_frozen_below_an_install_is_dropped_and_moves_nothing_backwards():
    """The node writes its state machine's snapshot off the loop: meanwhile the leader may
    answer a fetch with a newer snapshot, which is downloaded and installed. The older local
    snapshot freezing afterwards must not move the log start offset back or hide the newer
    snapshot."""
    h = following()
    (out,) = h.take(FetchRequest, 2)
    h.respond(
        out,
        FetchResponse(Errors.NONE, 3, 0, LeaderAndEpoch(2, 5), records=batch(0, 5, n=3)),
    )
    h.poll()
    assert h.core.listener_next_offset == 3
    writer = h.core.create_snapshot(3, h.now)  # the node's snapshotter starts
    sid, data = snapshot_bytes(epoch=5, batches=8)  # the leader's, at offset 8
    (out,) = h.take(FetchRequest, 2)
    h.respond(
        out,
        FetchResponse(Errors.NONE, sid.offset, sid.offset, LeaderAndEpoch(2, 5), snapshot_id=sid),
    )
    h.poll()
    serve(h, sid, data, chunk=1000)
    assert h.log.log_start_offset == sid.offset
    writer.append([(b"state", b"old")])
    with pytest.raises(SnapshotError, match="obsolete"):
        writer.freeze()  # the log drops it; the driver abandons it
    h._take(h.core.snapshot_abandoned(h.now))
    h.advance(1)
    assert h.log.log_start_offset == sid.offset
    assert h.log.latest_snapshot_id() == sid
    assert h.core.listener_next_offset >= sid.offset
