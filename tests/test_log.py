"""The segmented log: appends, reads, segments and index, truncation, log start offset,
epochs, durability and reopening. Recovery from damage is in test_log_recovery.py."""

import os

import pytest

from raftcore.errors import (
    CorruptRecordError,
    InvalidAppendError,
    LogClosedError,
    LogError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raftcore.log import LogConfig, SegmentedLog
from raftcore.records import encode_batch, iter_batches


def records(n, tag=b"r", size=20):
    return [(tag + b"-k%d" % i, tag + b"-v%d-" % i + b"x" * size) for i in range(n)]


def read_all(log, start=None):
    """Every (offset, epoch, key, value) from start to the end, through the public read path."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.end_offset:
        view = log.read(offset, 1 << 16)
        assert len(view) > 0
        for batch in iter_batches(view):
            batch.validate()
            for r in batch.records():
                if r.offset >= offset:
                    out.append((r.offset, batch.partition_leader_epoch, r.key, r.value))
            offset = batch.next_offset
    return out


@pytest.fixture
def log(tmp_path):
    log = SegmentedLog.open(tmp_path / "log", segment_bytes=4096, index_interval_bytes=256)
    yield log
    log.close()


# ---- appends -----------------------------------------------------------------------------


def test_append_as_leader_assigns_consecutive_offsets_and_stamps_the_epoch(log):
    assert log.append_as_leader(records(3), epoch=1) == (0, 2)
    assert log.append_as_leader(records(2), epoch=1) == (3, 4)
    assert log.end_offset == 5
    batches = list(iter_batches(log.read(0, 1 << 20)))
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in batches] == [
        (0, 2, 1),
        (3, 4, 1),
    ]


def test_append_as_leader_in_a_new_epoch_records_the_epoch_start(log):
    log.append_as_leader(records(3), epoch=1)
    log.append_as_leader(records(2), epoch=4)
    assert log.epoch_entries() == [(1, 0), (4, 3)]
    assert log.last_fetched_epoch == 4


def test_append_as_leader_refuses_an_epoch_older_than_the_log(log):
    log.append_as_leader(records(1), epoch=3)
    with pytest.raises(InvalidAppendError, match="epoch 2"):
        log.append_as_leader(records(1), epoch=2)
    assert log.end_offset == 1


def test_append_as_leader_refuses_a_batch_above_max_message_bytes(tmp_path):
    with SegmentedLog.open(tmp_path, max_message_bytes=1000) as log:
        with pytest.raises(RecordTooLargeError):
            log.append_as_leader(records(100), epoch=1)
        assert log.end_offset == 0


def test_initialize_leader_epoch_starts_the_epoch_at_the_end_before_any_write(log):
    log.append_as_leader(records(3), epoch=1)
    log.initialize_leader_epoch(2)
    assert log.epoch_entries() == [(1, 0), (2, 3)]
    assert log.last_fetched_epoch == 2
    assert log.end_offset_for_epoch(1) == (1, 3)


def test_append_as_follower_copies_batches_with_their_offsets_and_epochs(tmp_path, log):
    b1 = encode_batch(records(3), base_offset=0, leader_epoch=1)
    b2 = encode_batch(records(2), base_offset=3, leader_epoch=2)
    assert log.append_as_follower(b1 + b2) == (0, 4)
    assert bytes(log.read(0, 1 << 20)) == b1 + b2
    assert log.epoch_entries() == [(1, 0), (2, 3)]


def _crc_checks(monkeypatch):
    """Count the log's own CRC checks of appended bytes (``verify``)."""
    import raftcore.log.segment as segment_module
    import raftcore.log.segmented_log as log_module

    calls = []
    for module in (segment_module, log_module):
        real = module.check_batch_crcs

        def counted(*args, real=real):
            calls.append(args[1:])
            return real(*args)

        monkeypatch.setattr(module, "check_batch_crcs", counted)
    return calls


def test_a_leader_append_of_checked_batches_restamps_them_in_place_and_checks_no_crc_again(
    log, monkeypatch
):
    """Issue 25: produce validation checked every CRC and record and handed its scan over, so
    the append restamps the received buffer where it lies and checks nothing twice."""
    from raftcore.records import scan_batches

    checks = _crc_checks(monkeypatch)
    log.append_as_leader(records(2), epoch=3)
    received = bytearray(encode_batch(records(3)) + encode_batch(records(1)))
    scan = scan_batches(received, check_crc=True)
    assert log.append_batches_as_leader(received, 3, checked=scan) == (2, 5)
    assert checks == []
    assert [(b.base_offset, b.partition_leader_epoch) for b in iter_batches(received)] == [
        (2, 3),
        (5, 3),
    ]
    assert bytes(log.read(2, 1 << 20)) == bytes(received)
    # unchecked batches (an embedded caller's) are still checked as they are written
    log.append_batches_as_leader(encode_batch(records(1)), 3)
    assert len(checks) == 1


def test_a_follower_append_of_checked_batches_checks_no_crc_again(log, monkeypatch):
    from raftcore.records import scan_batches

    checks = _crc_checks(monkeypatch)
    fetched = encode_batch(records(3), base_offset=0, leader_epoch=1)
    assert log.append_as_follower(fetched, checked=scan_batches(fetched)) == (0, 2)
    assert checks == []
    assert log.append_as_follower(encode_batch(records(1), base_offset=3, leader_epoch=1))
    assert len(checks) == 1
    assert [r[0] for r in read_all(log)] == [0, 1, 2, 3]


def test_append_as_follower_of_nothing_is_a_no_op(log):
    assert log.append_as_follower(b"") is None
    assert log.end_offset == 0


def test_append_as_follower_refuses_a_batch_with_a_bad_crc_and_writes_nothing(log):
    good = encode_batch(records(3), base_offset=0, leader_epoch=1)
    bad = bytearray(encode_batch(records(2), base_offset=3, leader_epoch=1))
    bad[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_follower(good + bytes(bad))
    assert log.end_offset == 0
    assert log.size_in_bytes == 0


def test_a_refused_append_leaves_no_bytes_in_the_segment_file(log):
    log.append_as_follower(encode_batch(records(3), base_offset=0, leader_epoch=1))
    size = log.size_in_bytes
    bad = bytearray(encode_batch(records(3), base_offset=3, leader_epoch=1))
    bad[70] ^= 0x10
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(bad))
    assert (log.directory / f"{0:020d}.log").stat().st_size == size
    log.append_as_follower(encode_batch(records(3), base_offset=3, leader_epoch=1))
    assert [r[0] for r in read_all(log)] == list(range(6))


def test_a_refused_append_spanning_segments_changes_no_segment(log):
    log.append_as_leader(records(3), epoch=1)
    good = b"".join(
        encode_batch(records(3), base_offset=3 + 3 * i, leader_epoch=1) for i in range(60)
    )
    bad = bytearray(encode_batch(records(3), base_offset=183, leader_epoch=1))
    bad[-2] ^= 0x01
    before = {p.name: p.stat().st_size for p in log.directory.glob("*.log")}
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_follower(good + bytes(bad))
    assert {p.name: p.stat().st_size for p in log.directory.glob("*.log")} == before
    assert log.end_offset == 3


def test_append_as_follower_refuses_a_first_batch_not_at_the_log_end(log):
    log.append_as_follower(encode_batch(records(3), base_offset=0, leader_epoch=1))
    with pytest.raises(InvalidAppendError, match="offset 4"):
        log.append_as_follower(encode_batch(records(1), base_offset=4, leader_epoch=1))
    with pytest.raises(InvalidAppendError):
        log.append_as_follower(encode_batch(records(1), base_offset=2, leader_epoch=1))
    assert log.end_offset == 3


def test_append_as_follower_refuses_a_gap_between_its_batches(log):
    b1 = encode_batch(records(3), base_offset=0, leader_epoch=1)
    b2 = encode_batch(records(2), base_offset=4, leader_epoch=1)
    with pytest.raises(InvalidAppendError, match="does not follow"):
        log.append_as_follower(b1 + b2)
    assert log.end_offset == 0


def test_append_as_follower_refuses_decreasing_leader_epochs(log):
    b1 = encode_batch(records(3), base_offset=0, leader_epoch=3)
    b2 = encode_batch(records(2), base_offset=3, leader_epoch=2)
    with pytest.raises(InvalidAppendError, match="epoch"):
        log.append_as_follower(b1 + b2)
    log.append_as_follower(b1)
    with pytest.raises(InvalidAppendError, match="epoch 2"):
        log.append_as_follower(b2)
    assert log.end_offset == 3


def test_append_as_follower_refuses_a_batch_without_a_leader_epoch(log):
    with pytest.raises(InvalidAppendError, match="no leader epoch"):
        log.append_as_follower(encode_batch(records(1), base_offset=0, leader_epoch=-1))


def test_append_as_follower_accepts_bytearray_and_memoryview(log):
    data = encode_batch(records(3), base_offset=0, leader_epoch=1)
    log.append_as_follower(bytearray(data))
    data2 = encode_batch(records(3), base_offset=3, leader_epoch=1)
    log.append_as_follower(memoryview(b"xx" + data2)[2:])
    assert log.end_offset == 6


# ---- reads ---------------------------------------------------------------------------------


def test_read_returns_whole_batches_starting_at_the_batch_holding_the_offset(log):
    log.append_as_leader(records(5), epoch=1)
    log.append_as_leader(records(5), epoch=1)
    view = log.read(7, 1 << 20)
    batches = list(iter_batches(view))
    assert batches[0].base_offset == 5
    assert batches[0].last_offset == 9


def test_read_returns_at_least_one_batch_even_when_larger_than_max_bytes(log):
    log.append_as_leader(records(10, size=100), epoch=1)
    log.append_as_leader(records(1), epoch=1)
    view = log.read(0, 10)
    assert [b.base_offset for b in iter_batches(view)] == [0]


def test_read_stops_at_max_bytes_on_a_batch_boundary(log):
    sizes = []
    for _ in range(5):
        log.append_as_leader(records(2), epoch=1)
    for b in iter_batches(log.read(0, 1 << 20)):
        sizes.append(b.size_in_bytes)
    view = log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
    assert len(view) == sizes[0] + sizes[1]


def test_read_at_the_end_offset_is_empty_and_past_it_raises(log):
    log.append_as_leader(records(2), epoch=1)
    assert len(log.read(2, 100)) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_read_returns_a_read_only_zero_copy_view(log):
    log.append_as_leader(records(2), epoch=1)
    view = log.read(0, 1 << 20)
    assert isinstance(view, memoryview)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1


def test_reads_find_every_offset_across_many_segments(log):
    for i in range(100):
        log.append_as_leader(records(3, tag=b"%d" % i), epoch=1 + i // 20)
    assert log.segment_count > 3
    all_records = read_all(log)
    assert [r[0] for r in all_records] == list(range(300))
    for offset in (0, 1, 59, 60, 61, 100, 179, 299):
        first = next(iter_batches(log.read(offset, 1)))
        assert first.base_offset <= offset <= first.last_offset


def test_batches_iterates_the_whole_log_from_an_offset(log):
    for _ in range(30):
        log.append_as_leader(records(2), epoch=1)
    assert [b.base_offset for b in log.batches(31)] == list(range(30, 60, 2))


# ---- segments and the index ----------------------------------------------------------------


def test_segments_roll_by_size_and_are_named_by_their_base_offset(tmp_path, log):
    for _ in range(80):
        log.append_as_leader(records(3), epoch=1)
    bases = log.segment_base_offsets()
    assert len(bases) > 2
    names = sorted(p.name for p in log.directory.glob("*.log"))
    assert names == [f"{b:020d}.log" for b in bases]
    for seg in bases[:-1]:
        assert (log.directory / f"{seg:020d}.log").stat().st_size <= 4096


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(log):
    log.append_as_leader(records(2), epoch=1)
    big_first, big_last = log.append_as_leader(records(200, size=50), epoch=1)
    log.append_as_leader(records(2), epoch=1)
    assert big_first in log.segment_base_offsets()
    assert big_last + 1 in log.segment_base_offsets()
    assert [r[0] for r in read_all(log)] == list(range(log.end_offset))


def test_the_index_is_sparse_one_entry_per_interval_of_bytes(tmp_path):
    with SegmentedLog.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=1000) as log:
        for _ in range(50):
            log.append_as_leader(records(2), epoch=1)
        size = log.size_in_bytes
    index = (tmp_path / f"{0:020d}.index").read_bytes()
    entries = len(index) // 8
    assert 0 < entries <= size // 1000 + 1
    assert entries >= size // 1000 - 2


def test_log_config_validates_and_accepts_kafka_property_names():
    cfg = LogConfig.from_properties({"segment.bytes": "2048", "index.interval.bytes": 100})
    assert cfg.segment_bytes == 2048 and cfg.index_interval_bytes == 100
    with pytest.raises(ValueError, match="unknown log config"):
        LogConfig.from_properties({"segment.megabytes": 1})
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=10)
    with pytest.raises(TypeError):
        LogConfig(segment_bytes="big")


# ---- truncation ----------------------------------------------------------------------------


def test_truncate_to_removes_every_offset_at_or_after_it(log):
    for i in range(30):
        log.append_as_leader(records(3), epoch=1 + i // 10)
    before = read_all(log)
    assert log.truncate_to(45) == 45
    assert log.end_offset == 45
    assert read_all(log) == before[:45]
    # and the log goes on from there
    log.append_as_leader(records(1, tag=b"new"), epoch=3)
    assert read_all(log)[-1][2] == b"new-k0"


def test_truncate_to_inside_a_batch_removes_the_whole_batch(log):
    log.append_as_leader(records(5), epoch=1)
    log.append_as_leader(records(5), epoch=1)
    assert log.truncate_to(7) == 5
    assert log.end_offset == 5


def test_truncate_to_removes_epoch_entries_at_or_after_the_new_end(log):
    log.append_as_leader(records(5), epoch=1)
    log.append_as_leader(records(5), epoch=2)
    log.append_as_leader(records(5), epoch=3)
    log.truncate_to(5)
    assert log.epoch_entries() == [(1, 0)]
    assert log.last_fetched_epoch == 1
    assert log.end_offset_for_epoch(2) == (1, 5)


def test_truncate_to_at_or_past_the_end_still_cleans_the_epoch_cache(log):
    # KAFKA-10706: a new leader records its epoch before writing; a truncation to the end
    # offset must remove that entry, or back-to-back elections livelock.
    log.append_as_leader(records(5), epoch=1)
    log.initialize_leader_epoch(2)
    assert log.truncate_to(5) == 5
    assert log.epoch_entries() == [(1, 0)]


def test_truncate_to_across_segments_deletes_later_segment_files(log):
    for _ in range(80):
        log.append_as_leader(records(3), epoch=1)
    bases = log.segment_base_offsets()
    cut = bases[1] + 1
    log.truncate_to(cut)
    assert log.segment_base_offsets() == bases[:2]
    assert sorted(p.name for p in log.directory.glob("*.log")) == [
        f"{b:020d}.log" for b in bases[:2]
    ]
    log.append_as_leader(records(3, tag=b"after"), epoch=1)
    assert read_all(log)[-1][2] == b"after-k2"


def test_truncate_to_a_segment_base_keeps_an_empty_active_segment(log):
    for _ in range(80):
        log.append_as_leader(records(3), epoch=1)
    bases = log.segment_base_offsets()
    log.truncate_to(bases[2])
    assert log.end_offset == bases[2]
    log.append_as_leader(records(1), epoch=1)
    assert [r[0] for r in read_all(log)] == list(range(bases[2] + 1))


def test_truncate_fully_and_start_at_empties_the_log_at_a_new_offset(log):
    for _ in range(20):
        log.append_as_leader(records(3), epoch=1)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.end_offset) == (1000, 1000)
    assert log.epoch_entries() == []
    assert log.segment_base_offsets() == [1000]
    log.append_as_follower(encode_batch(records(2), base_offset=1000, leader_epoch=5))
    assert read_all(log)[0][:2] == (1000, 5)


def test_views_stay_readable_after_the_log_is_truncated_under_them(log):
    for _ in range(10):
        log.append_as_leader(records(3), epoch=1)
    view = log.read(20, 1 << 20)
    copy = bytes(view)
    log.truncate_to(3)
    # No crash: the bytes that were truncated away read as zeros.
    data = bytes(view)
    assert len(data) == len(copy)
    log.truncate_fully_and_start_at(0)
    assert len(bytes(view)) == len(copy)


def test_views_stay_readable_after_the_log_is_closed(tmp_path):
    log = SegmentedLog.open(tmp_path)
    log.append_as_leader(records(3), epoch=1)
    view = log.read(0, 1 << 20)
    copy = bytes(view)
    log.close()
    assert bytes(view) == copy


# ---- log start offset ------------------------------------------------------------------------


def test_set_log_start_offset_deletes_only_segments_wholly_below_it(log):
    for _ in range(80):
        log.append_as_leader(records(3), epoch=1)
    bases = log.segment_base_offsets()
    new_start = bases[2] + 2
    assert log.set_log_start_offset(new_start)
    assert log.log_start_offset == new_start
    assert log.segment_base_offsets()[0] == bases[2]
    assert not (log.directory / f"{bases[0]:020d}.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(new_start - 1, 100)
    assert read_all(log)[0][0] == new_start


def test_set_log_start_offset_never_moves_backwards_or_past_the_end(log):
    log.append_as_leader(records(10), epoch=1)
    assert log.set_log_start_offset(5)
    assert not log.set_log_start_offset(3)
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.set_log_start_offset(11)


def test_set_log_start_offset_to_the_end_rolls_and_deletes_everything_below(log):
    for _ in range(10):
        log.append_as_leader(records(3), epoch=1)
    end = log.end_offset
    log.set_log_start_offset(end)
    assert log.segment_base_offsets() == [end]
    assert len(log.read(end, 10)) == 0


def test_log_start_offset_truncates_the_epoch_cache_from_the_start(log):
    log.append_as_leader(records(5), epoch=1)
    log.append_as_leader(records(5), epoch=2)
    log.append_as_leader(records(5), epoch=3)
    log.set_log_start_offset(7)
    assert log.epoch_entries() == [(2, 7), (3, 10)]


# ---- epochs: the KIP-595 / KIP-279 question ---------------------------------------------------


def test_end_offset_for_epoch_returns_largest_epoch_at_most_the_asked_one_and_its_end(log):
    log.append_as_leader(records(5), epoch=1)
    log.append_as_leader(records(5), epoch=3)
    log.append_as_leader(records(5), epoch=5)
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(2) == (1, 5)
    assert log.end_offset_for_epoch(3) == (3, 10)
    assert log.end_offset_for_epoch(4) == (3, 10)
    assert log.end_offset_for_epoch(5) == (5, 15)
    assert log.end_offset_for_epoch(9) == (5, 15)
    result = log.end_offset_for_epoch(4)
    assert (result.epoch, result.end_offset) == (3, 10)


def test_end_offset_for_an_epoch_below_every_known_one_is_the_first_start(log):
    log.append_as_follower(encode_batch(records(5), base_offset=0, leader_epoch=4))
    assert log.end_offset_for_epoch(2) == (2, 0)


def test_an_empty_log_answers_epoch_zero_at_its_end(log):
    assert log.last_fetched_epoch == 0
    assert log.end_offset_for_epoch(3) == (0, 0)


# ---- durability and reopening -----------------------------------------------------------------


def test_everything_survives_close_and_reopen(tmp_path):
    path = tmp_path / "log"
    with SegmentedLog.open(path, segment_bytes=4096) as log:
        for i in range(40):
            log.append_as_leader(records(3), epoch=1 + i // 15)
        log.set_log_start_offset(10)
        expected = read_all(log)
        entries = log.epoch_entries()
        bases = log.segment_base_offsets()
    with SegmentedLog.open(path, segment_bytes=4096) as log:
        assert read_all(log) == expected
        assert log.epoch_entries() == entries
        assert log.segment_base_offsets() == bases
        assert log.log_start_offset == 10
        log.append_as_leader(records(1), epoch=3)
        assert log.end_offset == 121


def test_flush_makes_the_end_offset_durable_and_reports_it(log):
    log.append_as_leader(records(3), epoch=1)
    assert log.flushed_offset == 0
    assert log.flush() == 3
    assert log.flushed_offset == 3


def test_a_log_directory_can_be_opened_only_once_at_a_time(tmp_path):
    with SegmentedLog.open(tmp_path), pytest.raises(LogError, match="in use"):
        SegmentedLog.open(tmp_path)
    SegmentedLog.open(tmp_path).close()


def test_operations_on_a_closed_log_raise(tmp_path):
    log = SegmentedLog.open(tmp_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append_as_leader(records(1), epoch=1)
    with pytest.raises(LogClosedError):
        log.read(0, 10)


def test_the_checkpoint_files_use_kafkas_text_layout(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append_as_leader(records(3), epoch=1)
        log.append_as_leader(records(3), epoch=2)
    lines = (tmp_path / "leader-epoch-checkpoint").read_text().splitlines()
    assert lines == ["0", "2", "1 0", "2 3"]
    assert (tmp_path / "log-start-offset-checkpoint").read_text().splitlines() == ["0", "0"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
