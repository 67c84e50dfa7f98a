"""Producer state follows the log (raftcore.kafka.producer_tracker): recorded as batches are
written, persisted at segment rolls and at a clean close, loaded from the newest sound file with
only the log tail replayed, reset correctly by truncation, and never lost to a damaged file."""

from __future__ import annotations

import logging

from raftcore.kafka.producer_state import Duplicate, ProducerStateManager
from raftcore.kafka.producer_tracker import RETAINED_FILES, ProducerStateTracker
from raftcore.log import SegmentedLog
from raftcore.log.producer_snapshots import (
    producer_snapshot_offsets,
    producer_snapshot_path,
    read_producer_snapshot,
)
from raftcore.records import encode_batch

SEGMENT_BYTES = 1024  # about a dozen of these batches a segment
PIDS = (11, 12, 13)


def open_tracked(path):  # type: ignore[no-untyped-def]
    log = SegmentedLog.open(path, segment_bytes=SEGMENT_BYTES)
    tracker = ProducerStateTracker(ProducerStateManager(), prefix="[test]")
    tracker.attach(log)
    return log, tracker


def produce(log, rounds: int, first_round: int = 0) -> dict[tuple[int, int], tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Each producer appends ``rounds`` batches of two records; returns where each went, by
    (producer id, first sequence)."""
    placed = {}
    for r in range(first_round, first_round + rounds):
        for pid in PIDS:
            data = encode_batch(
                [(b"k", b"v" * 10)] * 2, producer_id=pid, producer_epoch=0, base_sequence=2 * r
            )
            placed[(pid, 2 * r)] = log.append_batches_as_leader(data, 1)
    return placed


def rebuilt(log) -> list:  # type: ignore[no-untyped-def]
    m = ProducerStateManager()
    m.rebuild(log)
    return m.entries()


def batch_count(log, from_offset: int = 0) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for b in log.batches() if b.base_offset >= from_offset)


def test_every_appended_batch_is_recorded_as_it_is_written(tmp_path):
    log, tracker = open_tracked(tmp_path)
    placed = produce(log, 20)
    assert log.segment_count > 3
    assert tracker.producers.entries() == rebuilt(log)
    first, last = placed[(12, 38)]
    assert tracker.producers.check(12, 0, 38, 2) == Duplicate(first, last)
    log.close()


def test_a_file_is_written_at_each_roll_as_of_the_new_segment_base(tmp_path):
    log, _ = open_tracked(tmp_path)
    produce(log, 20)
    bases = log.segment_base_offsets()
    assert producer_snapshot_offsets(tmp_path) == bases[1:][-RETAINED_FILES:]
    for offset in producer_snapshot_offsets(tmp_path):
        below = ProducerStateManager()
        for b in log.batches():
            if b.base_offset < offset:
                below.record(
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.last_offset - b.base_offset + 1,
                    first_offset=b.base_offset,
                    last_offset=b.last_offset,
                )
        assert read_producer_snapshot(tmp_path, offset) == below.entries()
    log.close()


def test_a_clean_close_writes_the_state_and_a_reopen_replays_nothing(tmp_path):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    end, state = log.end_offset, tracker.producers.entries()
    log.close()
    assert producer_snapshot_offsets(tmp_path)[-1] == end
    log, tracker = open_tracked(tmp_path)
    assert (tracker.loaded_from, tracker.replayed_batches) == (end, 0)
    assert tracker.producers.entries() == state
    log.close()


def test_a_restart_without_a_clean_close_replays_only_the_batches_after_the_newest_file(
    tmp_path,
):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    state = tracker.producers.entries()
    log.set_observer(None)  # as if the process died: no file at the close
    log.close()
    log, tracker = open_tracked(tmp_path)
    newest = log.segment_base_offsets()[-1]
    assert tracker.loaded_from == newest
    assert tracker.replayed_batches == batch_count(log, newest) < batch_count(log) // 3
    assert tracker.producers.entries() == state
    log.close()


def test_a_damaged_newest_file_is_deleted_and_the_next_older_one_used(tmp_path, caplog):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    state = tracker.producers.entries()
    log.set_observer(None)
    log.close()
    older, newest = producer_snapshot_offsets(tmp_path)[-2:]
    path = producer_snapshot_path(tmp_path, newest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="raftcore.kafka.producer_tracker"):
        log, tracker = open_tracked(tmp_path)
    assert tracker.loaded_from == older
    assert tracker.replayed_batches == batch_count(log, older)
    assert tracker.producers.entries() == state
    assert newest not in producer_snapshot_offsets(tmp_path)
    assert any(path.name in r.getMessage() for r in caplog.records)
    log.close()


def test_with_every_file_damaged_the_whole_log_is_replayed(tmp_path):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    state = tracker.producers.entries()
    log.close()
    for offset in producer_snapshot_offsets(tmp_path):
        path = producer_snapshot_path(tmp_path, offset)
        path.write_bytes(path.read_bytes()[:-3])
    log, tracker = open_tracked(tmp_path)
    assert (tracker.loaded_from, tracker.replayed_batches) == (None, batch_count(log))
    assert tracker.producers.entries() == state
    assert producer_snapshot_offsets(tmp_path) == []
    log.close()


def test_a_truncation_deletes_the_files_above_the_new_end_and_reloads_below_it(tmp_path):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    files = producer_snapshot_offsets(tmp_path)
    cut = files[-2] + 3  # inside the segment before the active one
    new_end = log.truncate_to(cut)
    assert producer_snapshot_offsets(tmp_path) == [o for o in files if o <= new_end]
    assert tracker.loaded_from == files[-2]
    assert tracker.producers.entries() == rebuilt(log)
    # The diverged suffix is forgotten: its sequences may be written again.
    produce(log, 20)
    assert tracker.producers.entries() == rebuilt(log)
    log.close()


def test_files_above_the_log_end_at_open_are_deleted_before_they_can_mislead(tmp_path):
    """A log cut back while nobody tracked it (recovery cutting a torn tail after a crash)."""
    log, _ = open_tracked(tmp_path)
    produce(log, 20)
    end = log.end_offset
    log.close()
    with SegmentedLog.open(tmp_path, segment_bytes=SEGMENT_BYTES) as bare:
        bare.truncate_to(end - 10)
    log, tracker = open_tracked(tmp_path)
    assert max(producer_snapshot_offsets(tmp_path)) < end
    log.set_observer(None)  # no newer file written: the next open must choose among these
    produce(log, 3, first_round=40)  # other batches take the offsets the file spoke for
    assert log.end_offset > end
    log.close()
    log, tracker = open_tracked(tmp_path)
    assert tracker.producers.entries() == rebuilt(log)
    log.close()


def test_a_full_truncation_starts_empty_and_deletes_every_file(tmp_path):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    log.truncate_fully_and_start_at(log.end_offset + 100)
    assert len(tracker.producers) == 0
    assert producer_snapshot_offsets(tmp_path) == []
    log.close()
    log, tracker = open_tracked(tmp_path)
    assert len(tracker.producers) == 0
    log.close()


def test_a_full_truncation_without_an_observer_deletes_the_files_too(tmp_path):
    """As when a snapshot ahead of the log is installed at open, before any observer."""
    log, _ = open_tracked(tmp_path)
    produce(log, 20)
    log.close()
    assert producer_snapshot_offsets(tmp_path)
    with SegmentedLog.open(tmp_path, segment_bytes=SEGMENT_BYTES) as bare:
        bare.truncate_fully_and_start_at(bare.end_offset + 100)
    assert producer_snapshot_offsets(tmp_path) == []
    log, tracker = open_tracked(tmp_path)
    assert len(tracker.producers) == 0
    log.close()


def test_producers_below_the_log_start_survive_a_restart_through_the_file_at_or_below_it(
    tmp_path,
):
    log, tracker = open_tracked(tmp_path)
    produce(log, 20)
    for pid in (91, 92):  # write once, long ago
        data = encode_batch([(b"k", b"v")], producer_id=pid, producer_epoch=0, base_sequence=0)
        log.append_batches_as_leader(data, 1)
    produce(log, 20, first_round=20)
    state = tracker.producers.entries()
    files = producer_snapshot_offsets(tmp_path)
    start = files[1] + 1  # between two files: the older of them must stay
    assert log.set_log_start_offset(start)
    assert producer_snapshot_offsets(tmp_path) == files[1:]
    log.set_observer(None)
    log.close()
    for offset in files[2:]:  # the newer files lost: the one at or below the start must do
        producer_snapshot_path(tmp_path, offset).unlink()
    log, tracker = open_tracked(tmp_path)
    assert tracker.loaded_from == files[1] < log.log_start_offset
    assert tracker.producers.entries() == state
    assert {91, 92} <= {e.producer_id for e in tracker.producers.entries()}
    log.close()


def test_at_most_a_few_files_are_kept(tmp_path):
    log, _ = open_tracked(tmp_path)
    produce(log, 60)
    assert log.segment_count > 10
    assert len(producer_snapshot_offsets(tmp_path)) == RETAINED_FILES
    log.close()
