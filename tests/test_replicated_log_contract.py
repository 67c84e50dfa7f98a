"""One contract, two logs: the native SegmentedLog and the simulation's InMemoryLog must answer
every question the Raft core asks in the same way -- the snapshot half (KIP-630) included."""

import pytest
from raft_harness import batch

from raftcore.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidAppendError,
    OffsetOutOfRangeError,
    SnapshotError,
)
from raftcore.log import SegmentedLog
from raftcore.raft import OffsetAndEpoch, ReplicatedLog, truncate_to_end_offset
from raftcore.raft.replicated_log import (
    SnapshotLog,
    divergence_end_offset,
    holds_snapshot_prefix,
    install_snapshot,
    validate_offset_and_epoch,
)
from raftcore.raft.values import ValidationKind
from raftcore.records import encode_batch, iter_batches
from raftcore.testing import InMemoryLog


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


def test_the_divergence_end_offset_is_where_truncation_cuts_and_cuts_nothing(log):
    """The core checks a DivergingEpoch against its committed offset before truncating
    (raftcore.raft.committed): both logs must name the same cut, and naming it changes
    nothing."""
    fill(log, [1, 1, 3, 5])  # epoch 1: 0..3, epoch 3: 4..5, epoch 5: 6..7
    cases = {
        OffsetAndEpoch(0, 0): 0,
        OffsetAndEpoch(3, 1): 3,
        OffsetAndEpoch(9, 1): 4,  # our epoch 1 ends first
        OffsetAndEpoch(9, 2): 4,  # no epoch 2 here: the end of our largest epoch below it
        OffsetAndEpoch(5, 3): 5,
        OffsetAndEpoch(20, 5): 8,
    }
    assert {d: divergence_end_offset(log, d) for d in cases} == cases
    assert (log.end_offset, log.last_fetched_epoch) == (8, 5)


def test_a_log_holds_a_snapshot_prefix_when_it_reaches_its_end_with_its_epoch(log):
    fill(log, [1, 1, 3])  # epoch 1: 0..3, epoch 3: 4..5
    assert holds_snapshot_prefix(log, OffsetAndEpoch(4, 1))
    assert holds_snapshot_prefix(log, OffsetAndEpoch(6, 3))
    assert not holds_snapshot_prefix(log, OffsetAndEpoch(4, 7))  # another epoch there
    assert not holds_snapshot_prefix(log, OffsetAndEpoch(7, 3))  # past the log end
    assert not holds_snapshot_prefix(log, OffsetAndEpoch(0, 0))  # no snapshot at the start


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


# ---- snapshots (KIP-630) -----------------------------------------------------------------------


def snapshot(log, offset, epoch, state=((b"state", b"1"),)):
    """Write and freeze a local snapshot of ``log`` at (offset, epoch); returns its id."""
    sid = OffsetAndEpoch(offset, epoch)
    writer = log.create_new_snapshot(sid)
    writer.append(list(state))
    writer.freeze()
    return sid


def foreign_snapshot(epoch=4, batches=3, state=((b"state", b"9"),)):
    """(id, bytes) of a snapshot taken on another log, as a leader would serve it."""
    other = InMemoryLog()
    fill(other, [epoch] * batches)
    sid = snapshot(other, other.end_offset, epoch, state)
    return sid, other.read_snapshot(sid).data


def download(log, sid, data, chunk=100):
    writer = log.create_new_snapshot_unchecked(sid)
    for i in range(0, len(data), chunk):
        writer.append(data[i : i + chunk])
    writer.freeze()


def every_offset(log, start):
    """The offsets from ``start`` to the end (a segmented read stops at a segment's end)."""
    out = []
    while start < log.end_offset:
        out += [r.offset for b in iter_batches(log.read(start, 1 << 30)) for r in b.records()]
        start = out[-1] + 1
    return out


def content(log, sid):
    reader = log.read_snapshot(sid)
    return [(r.key, r.value) for r in reader.records()]


def test_both_keep_snapshots(log):
    assert isinstance(log, SnapshotLog)
    assert (log.latest_snapshot_id(), log.earliest_snapshot_id()) == (None, None)


def test_a_snapshot_id_must_end_at_a_batch_boundary_with_the_epoch_of_its_last_record(log):
    """KAFKA-14618/14619/17713: offset - 1 is the last offset of a batch of the log, and the id's
    epoch is that batch's."""
    fill(log, [1, 2])  # batches [0, 1] epoch 1, [2, 3] epoch 2
    with pytest.raises(ValueError, match="batch boundary"):
        log.create_new_snapshot(OffsetAndEpoch(1, 1))
    with pytest.raises(ValueError, match="epoch"):
        log.create_new_snapshot(OffsetAndEpoch(4, 1))
    with pytest.raises(ValueError, match="past the log end"):
        log.create_new_snapshot(OffsetAndEpoch(6, 2))
    with pytest.raises(ValueError, match="batch boundary"):
        log.create_new_snapshot(OffsetAndEpoch(0, 0))
    writer = log.create_new_snapshot(OffsetAndEpoch(2, 1))
    assert writer.snapshot_id == OffsetAndEpoch(2, 1)
    writer.abort()
    assert log.latest_snapshot_id() is None  # an aborted snapshot leaves nothing


def test_no_writer_for_a_snapshot_that_exists_or_lies_below_the_log_start(log):
    fill(log, [1, 1, 1])
    sid = snapshot(log, 4, 1)
    assert log.create_new_snapshot(sid) is None
    assert log.create_new_snapshot_unchecked(sid) is None
    assert log.delete_before_snapshot(sid)
    assert log.create_new_snapshot(OffsetAndEpoch(2, 1)) is None


def test_a_frozen_snapshot_is_listed_and_reads_back_its_records_and_bytes(log):
    fill(log, [1, 2, 2])
    state = [(b"k%d" % i, b"v" * i) for i in range(300)]
    first, second = snapshot(log, 2, 1), snapshot(log, 6, 2, state)
    assert (log.earliest_snapshot_id(), log.latest_snapshot_id()) == (first, second)
    assert content(log, second) == state
    reader = log.read_snapshot(second)
    assert reader.snapshot_id == second
    whole = b"".join(bytes(reader.slice(p, 1000)) for p in range(0, reader.size, 1000))
    assert len(whole) == reader.size
    with pytest.raises(SnapshotError):
        reader.slice(reader.size, 10)
    assert log.read_snapshot(OffsetAndEpoch(4, 2)) is None


def test_delete_before_snapshot_needs_the_snapshot_and_moves_only_forward(log):
    fill(log, [1, 1, 1, 1])
    assert not log.delete_before_snapshot(OffsetAndEpoch(4, 1))  # no such snapshot
    for offset in (2, 4, 6):
        snapshot(log, offset, 1)
    assert not log.delete_before_snapshot(OffsetAndEpoch(4, 2))  # another epoch: not that one
    assert log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    assert not log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    assert not log.delete_before_snapshot(OffsetAndEpoch(2, 1))  # gone with the move
    assert log.earliest_snapshot_id() == OffsetAndEpoch(4, 1)  # older snapshots forgotten
    assert log.log_start_offset == 4 and log.flushed_offset >= 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3)
    assert every_offset(log, 4) == [4, 5, 6, 7]
    assert log.epoch_for_offset(4) == 1


def test_delete_before_snapshot_never_passes_the_log_end(log):
    sid, data = foreign_snapshot(epoch=4, batches=3)  # ends at 6; this log ends at 2
    fill(log, [1])
    download(log, sid, data)
    assert not log.delete_before_snapshot(sid)
    assert log.log_start_offset == 0


def test_a_download_is_installed_only_once_verified_whole(log):
    sid, data = foreign_snapshot()
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0x40
    for bad in (bytes(corrupt), data[:-1], data + b"\0"):
        writer = log.create_new_snapshot_unchecked(sid)
        writer.append(bad)
        with pytest.raises(CorruptSnapshotError):
            writer.freeze()
        assert log.latest_snapshot_id() is None
        with pytest.raises(SnapshotError):
            writer.append(b"more")
    writer = log.create_new_snapshot_unchecked(sid)
    writer.append(data[:10])
    assert writer.size == 10
    writer.discard()
    assert log.latest_snapshot_id() is None
    download(log, sid, data)
    assert log.latest_snapshot_id() == sid and content(log, sid) == [(b"state", b"9")]


def test_truncate_to_latest_snapshot_starts_an_older_log_at_the_snapshot(log):
    """Kafka's truncateToLatestSnapshot; KAFKA-10761: the last fetched epoch of the empty log at
    the snapshot is the snapshot's epoch."""
    fill(log, [1, 1])
    sid, data = foreign_snapshot(epoch=4, batches=3)
    download(log, sid, data)
    assert log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (6, 6, 4)
    log.truncate_to_latest_snapshot()  # again, as Kafka does on an empty log: nothing changes
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (6, 6, 4)
    assert log.latest_snapshot_id() == sid
    assert validate_offset_and_epoch(log, 2, 1).kind is ValidationKind.SNAPSHOT
    assert validate_offset_and_epoch(log, 6, 4).kind is ValidationKind.VALID
    log.append_as_follower(batch(6, 5))
    assert (log.end_offset, log.last_fetched_epoch) == (7, 5)


def test_truncate_to_latest_snapshot_keeps_a_log_that_is_ahead(log):
    fill(log, [1, 1, 2])
    snapshot(log, 4, 1)
    assert not log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.end_offset) == (0, 6)


def test_a_full_truncation_forgets_the_snapshots_below_the_new_start(log):
    fill(log, [1, 1])
    snapshot(log, 2, 1)
    log.truncate_fully_and_start_at(50)
    assert log.latest_snapshot_id() is None


def test_install_snapshot_replaces_a_log_whose_epoch_at_the_snapshot_end_differs(log):
    sid, data = foreign_snapshot(epoch=4, batches=3)  # (6, 4)
    fill(log, [4, 4, 4, 5])  # the record at 5 is epoch 4: the log holds the prefix
    download(log, sid, data)
    assert not install_snapshot(log, sid)
    assert log.end_offset == 8
    other_sid = OffsetAndEpoch(8, 5)
    writer = log.create_new_snapshot_unchecked(other_sid)
    writer.append(foreign_snapshot(epoch=5, batches=4)[1])
    writer.freeze()
    log.truncate_to(6)
    log.append_as_follower(batch(6, 6, n=3))  # an epoch-6 tail past the snapshot at 8
    assert install_snapshot(log, other_sid)
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (8, 8, 5)


def test_installing_a_snapshot_older_than_the_log_start_never_moves_it_backwards(log):
    old_sid, old_data = foreign_snapshot(epoch=4, batches=3)  # (6, 4)
    fill(log, [4, 4, 4, 4, 4])
    snapshot(log, 8, 4)
    assert log.delete_before_snapshot(OffsetAndEpoch(8, 4))
    assert log.log_start_offset == 8
    download(log, old_sid, old_data)
    assert not install_snapshot(log, old_sid)
    assert (log.log_start_offset, log.end_offset) == (8, 10)
    assert log.latest_snapshot_id() == OffsetAndEpoch(8, 4)


def test_a_snapshot_frozen_below_the_log_start_after_an_install_is_dropped(log):
    """A local snapshot written while a newer one was downloaded and installed: its freeze
    comes last; it is dropped (SnapshotError), so the log start offset, the earliest and the
    latest snapshot stay at the installed one (a snapshot below the log start would break
    'a snapshot sits at the log start')."""
    fill(log, [4, 4])
    local = log.create_new_snapshot(OffsetAndEpoch(4, 4))
    local.append([(b"state", b"local")])
    sid, data = foreign_snapshot(epoch=4, batches=5)  # (10, 4)
    download(log, sid, data)
    assert install_snapshot(log, sid)
    assert log.log_start_offset == 10
    with pytest.raises(SnapshotError, match="obsolete"):
        local.freeze()
    assert log.log_start_offset == 10
    assert log.latest_snapshot_id() == log.earliest_snapshot_id() == sid
    assert list(log.snapshot_ids()) == [sid]
