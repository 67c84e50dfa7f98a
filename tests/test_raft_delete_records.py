"""DeleteRecords in the Raft core: the leader validates the offset with Kafka's codes, and the
log start offset moves only by seed 003's rules (a snapshot holding offset - 1, every replica
past it or the lag expired)."""

from __future__ import annotations

import pytest
from test_raft_snapshot import committed_leader, following, take_snapshot

from raftcore.error_codes import Errors
from raftcore.raft import NotLeaderError


def test_delete_records_past_the_high_watermark_or_below_minus_one_is_offset_out_of_range():
    h = committed_leader(snapshot_min_records=1000)
    hw = h.core.high_watermark
    assert h.core.delete_records(hw + 1, h.now).error == Errors.OFFSET_OUT_OF_RANGE
    assert h.core.delete_records(-2, h.now).error == Errors.OFFSET_OUT_OF_RANGE
    assert h.core.snapshots.requested_log_start == 0
    assert not h.core.poll(h.now).snapshot_due


def test_delete_records_at_or_below_the_log_start_is_done_at_once():
    h = committed_leader(snapshot_min_records=1000)
    result = h.core.delete_records(0, h.now)
    assert (result.error, result.low_watermark, result.done) == (Errors.NONE, 0, True)


def test_delete_records_makes_a_covering_snapshot_due_and_the_log_start_follows():
    h = committed_leader(batches=4, snapshot_min_records=1000)
    assert not h.core.poll(h.now).snapshot_due  # far from the record threshold
    result = h.core.delete_records(-1, h.now)  # -1: the high watermark
    assert result.error == Errors.NONE and not result.done
    assert result.offset == h.core.high_watermark
    assert h.core.poll(h.now).snapshot_due
    sid = take_snapshot(h)
    assert sid.offset >= result.offset
    h.advance(1)  # every replica fetched the end in committed_leader: the log start moves
    assert h.log.log_start_offset == sid.offset >= result.offset
    assert not h.core.poll(h.now).snapshot_due  # satisfied: not due again


def test_delete_records_waits_for_a_lagging_replica_like_any_log_start_move():
    h = committed_leader(batches=4, snapshot_min_records=1000, max_replication_lag_ms=10_000)
    h.fetch(3, 1, h.epoch)  # replica 3 holds only offset 0
    result = h.core.delete_records(3, h.now)
    assert result.error == Errors.NONE
    take_snapshot(h)
    h.advance(1)
    assert h.log.log_start_offset == 0  # not past what replica 3 still needs
    h.fetch(3, h.log.end_offset, h.epoch)
    h.advance(1)
    assert h.log.log_start_offset >= 3


def test_delete_records_with_snapshots_off_is_a_policy_violation():
    h = committed_leader(snapshot_min_records=0)
    assert h.core.delete_records(2, h.now).error == Errors.POLICY_VIOLATION


def test_delete_records_on_a_follower_raises_not_leader():
    h = following()
    with pytest.raises(NotLeaderError):
        h.core.delete_records(1, h.now)


def test_delete_records_inside_a_batch_snapshots_to_that_batchs_end_without_state():
    """A log-only node (its snapshot holds no state of its own) ends the snapshot at the
    batch boundary after the offset asked for: a snapshot off a batch boundary is refused
    (KAFKA-14618), and asked at the offset itself it was refused at every try, so the
    DeleteRecords never completed."""
    h = committed_leader(batches=0, snapshot_min_records=1000)
    for i in range(3):  # three batches of three records: offsets 0-2, 3-5, 6-8 (after any
        h.core.append([(b"k", b"v%d-%d" % (i, n)) for n in range(3)], h.now)  # control)
    h.flush()
    end = h.log.end_offset
    h.fetch(2, end, h.epoch)
    h.fetch(3, end, h.epoch)
    h.poll()
    first = end - 9  # the first of the three batches
    result = h.core.delete_records(first + 4, h.now)  # inside the middle batch
    assert result.error == Errors.NONE and not result.done
    assert h.core.poll(h.now).snapshot_due
    wanted = h.core.snapshots.wanted_end()
    assert wanted == first + 6  # the middle batch's end, not first + 4 nor the log end
    sid = take_snapshot_at(h, wanted)
    h.advance(1)
    assert h.log.log_start_offset == sid.offset == first + 6


def take_snapshot_at(h, end_offset):  # type: ignore[no-untyped-def]
    writer = h.core.create_snapshot(end_offset, h.now)
    writer.freeze()
    h._take(h.core.snapshot_frozen(writer.snapshot_id, h.now))
    return writer.snapshot_id
