"""One contract, two logs: the native SegmentedLog and the simulation's InMemoryLog must answer
every question the Raft core asks in the same way."""

import pytest
from raft_harness import batch

from raftcore.errors import CorruptRecordError, InvalidAppendError, OffsetOutOfRangeError
from raftcore.log import SegmentedLog
from raftcore.raft import InMemoryLog, OffsetAndEpoch, ReplicatedLog, truncate_to_end_offset
from raftcore.records import encode_batch, iter_batches


@pytest.fixture(params=["segmented", "memory"])
def log(request, tmp_path):
    if request.param == "memory":
        yield InMemoryLog()
    else:
        log = SegmentedLog.open(tmp_path, segment_bytes=256)
        yield log
        log.close()


def fill(log, epochs):
    for epoch in epochs:
        log.append_as_follower(batch(log.end_offset, epoch, n=2))


def offsets(log, start=0):
    if start >= log.end_offset:
        return []
    return [r.offset for b in iter_batches(log.read(start, 1 << 30)) for r in b.records()]


def test_both_satisfy_the_protocol(log):
    assert isinstance(log, ReplicatedLog)


def test_an_empty_log_is_at_offset_zero_epoch_zero(log):
    assert (log.end_offset, log.log_start_offset, log.last_fetched_epoch) == (0, 0, 0)
    assert tuple(log.end_offset_for_epoch(3)) == (0, 0)


def test_appends_as_leader_and_as_follower(log):
    assert log.append_as_leader([(b"k", b"v")] * 3, 2) == (0, 2)
    assert log.append_as_follower(batch(3, 2, n=2)) == (3, 4)
    assert log.last_fetched_epoch == 2
    with pytest.raises(InvalidAppendError):
        log.append_as_follower(batch(9, 2))
    with pytest.raises(InvalidAppendError):
        log.append_as_leader([(b"k", b"v")], 1)


def test_reads_return_whole_batches_from_the_one_holding_the_offset(log):
    fill(log, [1, 1, 2])
    assert next(iter_batches(log.read(3, 1 << 20))).base_offset == 2
    assert len(log.read(6, 100)) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)


def test_end_offset_for_epoch_answers_the_same(log):
    fill(log, [1, 1, 3, 5])
    answers = {e: tuple(log.end_offset_for_epoch(e)) for e in range(7)}
    assert answers == {0: (0, 0), 1: (1, 4), 2: (1, 4), 3: (3, 6), 4: (3, 6), 5: (5, 8), 6: (5, 8)}


def test_truncation_removes_whole_batches_and_epochs(log):
    fill(log, [1, 1, 3, 5])
    assert log.truncate_to(5) == 4
    assert offsets(log) == [0, 1, 2, 3]
    assert log.last_fetched_epoch == 1
    assert truncate_to_end_offset(log, OffsetAndEpoch(2, 1)) == 2
    assert log.end_offset == 2


def test_initialize_leader_epoch_and_truncation_at_the_end(log):
    fill(log, [1])
    log.initialize_leader_epoch(4)
    assert log.last_fetched_epoch == 4
    assert log.truncate_to(2) == 2  # at the end: nothing removed but the empty epoch
    assert log.last_fetched_epoch == 1


def test_truncate_fully_and_start_at(log):
    fill(log, [1, 2])
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (50, 50, 0)
    log.append_as_follower(batch(50, 3))
    assert offsets(log, 50) == [50]


def test_flush_makes_the_end_durable(log):
    fill(log, [1])
    assert log.flush() == 2 and log.flushed_offset == 2


def test_append_batches_as_leader_restamps_offsets_and_epoch_and_keeps_the_crc_valid(log):
    fill(log, [1])
    produced = encode_batch([(b"a", b"1"), (b"b", b"2")], producer_id=7, base_sequence=0)
    produced += encode_batch([(b"c", b"3")], producer_id=7, base_sequence=2)
    assert log.append_batches_as_leader(produced, 2) == (2, 4)
    batches = list(iter_batches(log.read(2, 1 << 20)))
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(2, 2), (4, 2)]
    for b in batches:
        b.validate()
    assert [r.value for b in batches for r in b.records()] == [b"1", b"2", b"3"]
    assert tuple(log.end_offset_for_epoch(2)) == (2, 5)


def test_append_batches_as_leader_refuses_an_older_epoch_and_a_bad_crc(log):
    fill(log, [3])
    with pytest.raises(InvalidAppendError):
        log.append_batches_as_leader(encode_batch([(b"k", b"v")]), 2)
    corrupt = bytearray(encode_batch([(b"k", b"v")]))
    corrupt[-1] ^= 0xFF
    with pytest.raises((InvalidAppendError, CorruptRecordError)):
        log.append_batches_as_leader(bytes(corrupt), 3)
    assert log.end_offset == 2
