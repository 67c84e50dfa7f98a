"""Retention (Kafka's retention.ms, retention.bytes, segment.ms): which whole segments may go,
decided purely from what the log reports of them, and how the leader's core takes the verdict:
as DeleteRecords, by KIP-630's rules (a covering snapshot, then the log start)."""

from __future__ import annotations

import pytest
from test_raft_snapshot import committed_leader, take_snapshot

from raftcore.raft.retention import RetentionConfig, SegmentInfo, retention_target, should_roll

NOW = 1_700_000_000_000
DAY = 86_400_000


def seg(base: int, end: int, size: int = 100, age_ms: int = 0) -> SegmentInfo:
    """A segment whose first and newest records are ``age_ms`` old."""
    return SegmentInfo(base, end, size, NOW - age_ms, NOW - age_ms)


def test_time_retention_lets_go_the_oldest_segments_whose_newest_record_is_too_old():
    segments = [seg(0, 10, age_ms=3 * DAY), seg(10, 20, age_ms=2 * DAY), seg(20, 30), seg(30, 35)]
    config = RetentionConfig(retention_ms=DAY)
    assert retention_target(segments, config, NOW, 35) == (20, "retention.ms")


def test_time_retention_stops_at_the_first_segment_that_is_not_expired():
    """Kafka's deleteOldSegments walks from the oldest and stops at the first that stays, so
    the log remains a prefix cut even when a later segment is older (a producer's clock)."""
    segments = [seg(0, 10, age_ms=3 * DAY), seg(10, 20), seg(20, 30, age_ms=5 * DAY), seg(30, 31)]
    assert retention_target(segments, RetentionConfig(retention_ms=DAY), NOW, 31) == (
        10,
        "retention.ms",
    )


def test_size_retention_keeps_at_least_retention_bytes():
    segments = [seg(0, 10, 400), seg(10, 20, 400), seg(20, 30, 400), seg(30, 31, 50)]
    # 1,250 bytes, at least 700 kept: the first segment goes (850 left), not the second (450)
    assert retention_target(segments, RetentionConfig(retention_bytes=700), NOW, 31) == (
        10,
        "retention.bytes",
    )
    assert retention_target(segments, RetentionConfig(retention_bytes=450), NOW, 31) == (
        20,
        "retention.bytes",
    )


def test_the_active_segment_never_goes_whatever_its_age_or_size():
    segments = [seg(0, 10, 400, age_ms=9 * DAY), seg(10, 20, 10_000, age_ms=9 * DAY)]
    config = RetentionConfig(retention_ms=DAY, retention_bytes=1)
    assert retention_target(segments, config, NOW, 20) == (10, "retention.ms")
    assert retention_target(segments[1:], config, NOW, 20) is None


def test_retention_never_goes_past_the_high_watermark():
    """Only committed records go: a segment holding an uncommitted offset stays."""
    segments = [seg(0, 10, age_ms=3 * DAY), seg(10, 20, age_ms=3 * DAY), seg(20, 21)]
    config = RetentionConfig(retention_ms=DAY)
    assert retention_target(segments, config, NOW, 15) == (10, "retention.ms")
    assert retention_target(segments, config, NOW, None) is None  # a new leader


def test_retention_is_off_unless_a_limit_is_set():
    segments = [seg(0, 10, 10**9, age_ms=100 * DAY), seg(10, 11)]
    assert retention_target(segments, RetentionConfig(), NOW, 11) is None
    assert not RetentionConfig().enabled


@pytest.mark.parametrize("field", ["retention_ms", "retention_bytes", "segment_ms"])
@pytest.mark.parametrize("value", [0, -2])
def test_a_limit_is_minus_one_or_positive(field, value):
    with pytest.raises(ValueError, match=field):
        RetentionConfig(**{field: value})


def test_segment_ms_rolls_the_active_segment_once_its_first_record_is_that_old():
    config = RetentionConfig(segment_ms=60_000)
    assert should_roll(seg(0, 5, age_ms=61_000), config, NOW)
    assert not should_roll(seg(0, 5, age_ms=59_000), config, NOW)
    assert not should_roll(SegmentInfo(5, 5, 0, -1, -1), config, NOW)  # empty
    assert not should_roll(seg(0, 5, age_ms=DAY), RetentionConfig(), NOW)  # off


# ---- the core takes the verdict as it takes DeleteRecords --------------------------------------


def test_retain_below_makes_a_covering_snapshot_due_and_the_log_start_follows():
    h = committed_leader(batches=4, snapshot_min_records=0, snapshots_on_request=True)
    assert not h.core.poll(h.now).snapshot_due
    assert h.core.retain_below(3, "retention.bytes")
    assert h.core.poll(h.now).snapshot_due
    sid = take_snapshot(h)
    h.advance(1)  # every replica fetched the end: the log start moves
    assert h.log.log_start_offset == sid.offset >= 3


def test_a_stateless_snapshot_ends_at_the_log_start_asked_for_else_at_what_was_read():
    # a node that only replicates the log takes a snapshot with no state: the core says
    # where it ends (the node computed it from the core's fields before)
    h = committed_leader(batches=4, snapshot_min_records=0, snapshots_on_request=True)
    read = h.core.listener_next_offset
    assert h.core.snapshots.wanted_end() == read  # nothing asked: all that was read
    assert h.core.retain_below(3, "retention.bytes")
    assert h.core.snapshots.wanted_end() == 3 < read


def test_retain_below_is_refused_past_the_high_watermark_off_the_leader_or_without_snapshots():
    h = committed_leader(batches=4, snapshot_min_records=0, snapshots_on_request=True)
    assert not h.core.retain_below(h.core.high_watermark + 1, "retention.ms")
    assert not h.core.retain_below(0, "retention.ms")  # at the log start: nothing to do
    off = committed_leader(batches=4, snapshot_min_records=0)
    assert not off.core.retain_below(3, "retention.ms")
    assert off.core.snapshots.requested_log_start == 0
