"""The segmented log's snapshots on disk (KIP-630; Kafka's KafkaMetadataLog): the files beside the
segments, recovery at open in Kafka's order, and crash safety between every two steps. The
contract shared with the in-memory log is in test_replicated_log_contract.py."""

from __future__ import annotations

import os
import stat

import pytest
from raft_harness import batch

from raftcore.cli import main
from raftcore.errors import CorruptLogError, CorruptSnapshotError
from raftcore.log import SegmentedLog
from raftcore.log.checkpoints import write_log_start_offset
from raftcore.logtools import verify_log
from raftcore.raft import OffsetAndEpoch
from raftcore.records import iter_batches
from raftcore.testing import InMemoryLog

SEGMENT_BYTES = 256  # a few batches a segment


def open_log(path):
    return SegmentedLog.open(path, segment_bytes=SEGMENT_BYTES)


def fill(log, epochs, n=2):
    for epoch in epochs:
        log.append_as_follower(batch(log.end_offset, epoch, n=n))
    log.flush()


def snapshot(log, offset, epoch, state=((b"state", b"1"),)):
    sid = OffsetAndEpoch(offset, epoch)
    writer = log.create_new_snapshot(sid)
    writer.append(list(state))
    writer.freeze()
    return sid


def foreign_snapshot(epoch=4, batches=5):
    """(id, bytes) of a snapshot of another log, as a leader serves it."""
    other = InMemoryLog()
    for _ in range(batches):
        other.append_as_follower(batch(other.end_offset, epoch, n=2))
    sid = snapshot(other, other.end_offset, epoch, [(b"s%d" % i, b"x" * 40) for i in range(20)])
    return sid, other.read_snapshot(sid).data


def download(log, sid, data, chunk=64):
    writer = log.create_new_snapshot_unchecked(sid)
    for i in range(0, len(data), chunk):
        writer.append(data[i : i + chunk])
    writer.freeze()


def records(log):
    """(offset, value) of every record from the log start to the end."""
    out, offset = [], log.log_start_offset
    while offset < log.end_offset:
        for b in iter_batches(log.read(offset, 1 << 20)):
            out += [(r.offset, r.value) for r in b.records()]
        offset = out[-1][0] + 1
    return out


def snapshot_files(path, suffix=".checkpoint"):
    return sorted(p.name for p in path.iterdir() if p.name.endswith(suffix))


def corrupt_file(path, position):
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)  # frozen snapshots are read-only
    data = bytearray(path.read_bytes())
    data[position] ^= 0x20
    path.write_bytes(bytes(data))


# ---- where the snapshots live --------------------------------------------------------------


def test_snapshots_live_beside_the_segments_under_kafka_names(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 2])
        snapshot(log, 4, 1)
    assert snapshot_files(tmp_path) == ["00000000000000000004-0000000001.checkpoint"]
    assert any(p.name.endswith(".log") for p in tmp_path.iterdir())


def test_snapshots_survive_close_and_reopen(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 2])
        sid = snapshot(log, 4, 1, [(b"a", b"1"), (b"b", b"2")])
    with open_log(tmp_path) as log:
        assert log.latest_snapshot_id() == sid
        assert [(r.key, r.value) for r in log.read_snapshot(sid).records()] == [
            (b"a", b"1"),
            (b"b", b"2"),
        ]


def test_close_drops_a_download_under_way(tmp_path):
    sid, data = foreign_snapshot()
    log = open_log(tmp_path)
    writer = log.create_new_snapshot_unchecked(sid)
    writer.append(data[:50])
    assert snapshot_files(tmp_path, ".part")
    log.close()
    assert snapshot_files(tmp_path, ".part") == []


# ---- recovery at open (KafkaMetadataLog.recoverSnapshots, then truncateToLatestSnapshot) ------


def test_open_deletes_part_and_deleted_files_and_snapshots_below_the_log_start(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, [1] * 6)
        for offset in (2, 4, 6):
            snapshot(log, offset, 1)
        assert log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    # What a crash leaves: a download under way, a deletion half done, an old snapshot the
    # log start offset already passed.
    (tmp_path / "00000000000000000012-0000000001-abcd.checkpoint.part").write_bytes(b"torn")
    (tmp_path / "00000000000000000002-0000000001.checkpoint.deleted").write_bytes(b"old")
    (tmp_path / "00000000000000000002-0000000001.checkpoint").write_bytes(b"old")
    with open_log(tmp_path) as log:
        assert log.snapshot_ids() == [OffsetAndEpoch(4, 1), OffsetAndEpoch(6, 1)]
        assert log.log_start_offset == 4
    assert snapshot_files(tmp_path, ".part") == snapshot_files(tmp_path, ".deleted") == []


def test_a_log_start_above_zero_that_no_snapshot_reaches_fails_the_open(tmp_path):
    """Kafka: LSO > 0 and no snapshot at or above it is an inconsistent directory."""
    with open_log(tmp_path) as log:
        fill(log, [1] * 6)
        snapshot(log, 4, 1)
        assert log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    write_log_start_offset(tmp_path, 6)  # the log start offset passed every snapshot
    with pytest.raises(CorruptLogError, match="no snapshot"):
        open_log(tmp_path)


def test_a_log_that_never_held_a_snapshot_opens_with_a_log_start_above_zero(tmp_path):
    """Retention without snapshots (set_log_start_offset alone) keeps working."""
    with open_log(tmp_path) as log:
        fill(log, [1] * 6)
        log.set_log_start_offset(5)
    with open_log(tmp_path) as log:
        assert log.log_start_offset == 5 and log.latest_snapshot_id() is None


def test_open_truncates_the_log_to_a_downloaded_snapshot_ahead_of_it(tmp_path):
    """A crash between a download's freeze and the truncation: the open finishes it."""
    sid, data = foreign_snapshot(epoch=4)
    with open_log(tmp_path) as log:
        fill(log, [1, 1])
        download(log, sid, data)
    with open_log(tmp_path) as log:
        assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (10, 10, 4)


def test_reopen_after_truncate_to_latest_snapshot_keeps_the_log_at_the_snapshot(tmp_path):
    sid, data = foreign_snapshot(epoch=4)
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 2])
        download(log, sid, data)
        assert log.truncate_to_latest_snapshot()
    with open_log(tmp_path) as log:
        assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (10, 10, 4)
        assert log.segment_base_offsets() == [10] and log.epoch_entries() == []
        fill(log, [5, 5])
    with open_log(tmp_path) as log:
        assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (10, 14, 5)
        assert log.latest_snapshot_id() == sid


def test_a_corrupt_snapshot_ahead_of_the_log_is_set_aside_at_open_and_the_log_stays(
    tmp_path, caplog
):
    """The log is never given up for a snapshot that would not load: the open verifies every
    snapshot, sets a damaged one aside (renamed, kept) with one WARNING naming it, and the log
    opens as it was; the id stays listed, damaged, never read, until a copy replaces it."""
    sid, data = foreign_snapshot(epoch=4)
    with open_log(tmp_path) as log:
        fill(log, [1, 1])
        download(log, sid, data)
        expected = records(log)
    corrupt_file(tmp_path / "00000000000000000010-0000000004.checkpoint", len(data) // 2)
    with caplog.at_level("WARNING"), open_log(tmp_path) as log:
        assert records(log) == expected
        assert log.snapshot_damaged(log.latest_snapshot_id())
        with pytest.raises(CorruptSnapshotError, match="00000000000000000010-0000000004"):
            log.read_snapshot(log.latest_snapshot_id())
        writer = log.create_new_snapshot_unchecked(log.latest_snapshot_id())
        assert writer is not None  # the leader's copy may replace it
        writer.discard()
    assert (tmp_path / "00000000000000000010-0000000004.checkpoint.damaged").exists()
    assert not (tmp_path / "00000000000000000010-0000000004.checkpoint").exists()
    lines = [r for r in caplog.records if "set aside" in r.getMessage()]
    assert len(lines) == 1 and "00000000000000000010-0000000004" in lines[0].getMessage()


def test_a_corrupt_snapshot_is_never_served_or_loaded(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 1])
        sid = snapshot(log, 4, 1, [(b"k", b"v" * 100)])
    corrupt_file(tmp_path / "00000000000000000004-0000000001.checkpoint", 120)
    with open_log(tmp_path) as log:  # the log is ahead of it: the open need not read it
        assert log.latest_snapshot_id() == sid
        with pytest.raises(CorruptSnapshotError):
            log.read_snapshot(sid)


def test_every_reader_of_a_snapshot_shares_one_open_map_and_slices_are_views(tmp_path):
    """A leader serves each FetchSnapshot chunk from one open reader per snapshot (not one
    open, map and verification per chunk), as views of the map (no copy); a reader handed to
    a restore and closed there leaves the leader's open."""
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 1])
        sid = snapshot(log, 4, 1, [(b"k%d" % i, b"v" * 100) for i in range(50)])
        first, second = log.read_snapshot(sid), log.read_snapshot(sid)
        assert first.reader is second.reader
        chunk = first.slice(10, 100)
        assert isinstance(chunk, memoryview) and len(chunk) == 100
        first.close()
        assert bytes(second.slice(10, 100)) == bytes(chunk)  # still open for the others
        fill(log, [1, 1])
        later = snapshot(log, log.end_offset, 1)
        assert log.delete_before_snapshot(later)
        assert log.read_snapshot(sid) is None
        assert bytes(second.slice(0, 8)) == bytes(first.slice(0, 8))  # its users keep it


# ---- the log start offset ------------------------------------------------------------------


def test_delete_before_snapshot_deletes_the_segments_wholly_below_the_new_start(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, [1] * 12)
        bases = log.segment_base_offsets()
        assert len(bases) >= 4
        cut = bases[2] + 2  # inside the third segment, at a batch boundary
        expected = [r for r in records(log) if r[0] >= cut]
        sid = snapshot(log, cut, 1)
        assert log.delete_before_snapshot(sid)
        assert log.segment_base_offsets()[0] == bases[2]
        for base in bases[:2]:
            assert not (tmp_path / f"{base:020d}.log").exists()
        assert records(log) == expected
    with open_log(tmp_path) as log:
        assert log.log_start_offset == cut and records(log) == expected


# ---- the read-only tools -------------------------------------------------------------------


def test_dump_log_lists_every_snapshot_file_with_its_id_size_and_kind(tmp_path, capsys):
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 2])
        snapshot(log, 4, 1)
    (tmp_path / "00000000000000000006-0000000002-ab.checkpoint.part").write_bytes(b"torn")
    assert main(["dump-log", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Snapshot 00000000000000000004-0000000001.checkpoint (end offset 4, epoch 1, " in out
    assert "(end offset 6, epoch 2, 4 bytes, part)" in out


def test_verify_log_verifies_every_snapshot_and_names_a_corrupt_one(tmp_path, capsys):
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 2])
        snapshot(log, 2, 1)
        snapshot(log, 4, 1, [(b"k", b"v" * 100)])
    report = verify_log(tmp_path)
    assert report.ok and [(s.end_offset, s.records) for s in report.snapshots] == [(2, 1), (4, 1)]
    assert main(["verify-log", str(tmp_path)]) == 0
    assert "2 snapshots" in capsys.readouterr().out
    corrupt_file(tmp_path / "00000000000000000004-0000000001.checkpoint", 120)
    report = verify_log(tmp_path)
    assert not report.ok and [s.ok for s in report.snapshots] == [True, False]
    assert main(["verify-log", str(tmp_path)]) == 1
    assert "FAILED  00000000000000000004-0000000001.checkpoint " in capsys.readouterr().out


# ---- crash safety: a child process dies after each step, the parent reopens ------------------

# The steps that change the directory: a crash after any one of them is a crash before the next.
_STEPS = ("replace", "rename", "unlink", "ftruncate")
_DONE, _CRASHED, _FAILED = 0, 17, 23


def _run_crashing_after(path, operation, step):
    """Run ``operation(log)`` in a child that dies (os._exit, nothing closed or flushed) right
    after its ``step``-th directory change. Returns the child's exit code."""
    pid = os.fork()
    if pid == 0:  # the child
        code = _FAILED
        try:
            log = open_log(path)
            count = 0

            def counted(original):
                def step_then_maybe_die(*args, **kwargs):
                    nonlocal count
                    result = original(*args, **kwargs)
                    count += 1
                    if count == step:
                        os._exit(_CRASHED)
                    return result

                return step_then_maybe_die

            for name in _STEPS:
                setattr(os, name, counted(getattr(os, name)))
            operation(log)
            code = _DONE
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _crash_everywhere(tmp_path, prepare, operation, check):
    """For every step of ``operation``: a fresh log made by ``prepare``, a child crashing after
    that step, then ``check`` on the reopened log. Returns how many steps there were."""
    step = 1
    while True:
        path = tmp_path / f"crash-{step}"
        with open_log(path) as log:
            prepare(log)
        code = _run_crashing_after(path, operation, step)
        assert code in (_DONE, _CRASHED), f"the child failed at step {step}"
        with open_log(path) as log:
            check(log, step)
        if code == _DONE:
            return step - 1
        step += 1


def _consistent(log, before):
    """What every reopened log must show: a snapshot reaches the log start offset, the records
    from it on are the ones written, and the latest snapshot loads."""
    start = log.log_start_offset
    latest = log.latest_snapshot_id()
    if start > 0:
        assert latest is not None and latest.offset >= start
    if latest is not None:
        list(log.read_snapshot(latest).records())
    assert records(log) == [r for r in before if r[0] >= start]


def test_a_crash_between_any_two_steps_of_snapshot_then_delete_before_recovers(tmp_path):
    """Freeze (rename), advance the log start offset (checkpoint, segment deletions), forget
    the older snapshot: a crash anywhere leaves a log that opens consistent, at the old or the
    new start."""
    before = []

    def prepare(log):
        fill(log, [1] * 12)
        assert log.delete_before_snapshot(snapshot(log, 6, 1))
        before[:] = [(o, v) for o, v in records(log)]

    def operation(log):
        sid = snapshot(log, 16, 1)
        assert log.delete_before_snapshot(sid)

    def check(log, step):
        _consistent(log, before)
        assert log.log_start_offset in (6, 16)
        assert log.end_offset == 24

    steps = _crash_everywhere(tmp_path, prepare, operation, check)
    assert steps >= 5


def test_a_crash_between_any_two_steps_of_download_then_install_recovers(tmp_path):
    """Download (rename), then truncate fully (segments renamed .deleted, checkpoints, a new
    segment, deletions): after any crash the open ends with the old log or the log at the
    snapshot -- never a log that starts past what it holds."""
    sid, data = foreign_snapshot(epoch=4, batches=20)  # (40, 4): ahead of the local log
    before = []

    def prepare(log):
        fill(log, [1] * 8)
        before[:] = records(log)

    def operation(log):
        download(log, sid, data)
        assert log.truncate_to_latest_snapshot()

    def check(log, step):
        _consistent(log, before)
        if log.latest_snapshot_id() == sid:
            assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (40, 40, 4)
        else:
            assert records(log) == before

    steps = _crash_everywhere(tmp_path, prepare, operation, check)
    assert steps >= 5


def test_the_log_start_never_moves_onto_a_damaged_snapshot(tmp_path):
    """A snapshot set aside as damaged stays listed, but delete_before_snapshot refuses to
    stand the log start on it; a sound one later is taken."""
    with open_log(tmp_path) as log:
        fill(log, [1, 1, 1, 1])
        sid = snapshot(log, 4, 1, [(b"k", b"v" * 100)])
    corrupt_file(tmp_path / "00000000000000000004-0000000001.checkpoint", 120)
    with open_log(tmp_path) as log:
        assert log.snapshot_damaged(sid)
        assert not log.delete_before_snapshot(sid)
        assert log.log_start_offset == 0
        later = snapshot(log, 8, 1)
        assert log.delete_before_snapshot(later)
        assert log.log_start_offset == 8
        assert log.snapshot_ids() == [later]  # the damaged id is forgotten ...
    assert (tmp_path / "00000000000000000004-0000000001.checkpoint.damaged").exists()  # ... kept
