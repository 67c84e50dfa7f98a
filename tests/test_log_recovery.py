"""Crash recovery of the segmented log: torn and corrupt tails are cut, indexes and the epoch
cache are repaired, and corrupt data is never served. Includes a writer killed with SIGKILL."""

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from raftcore.log import SegmentedLog
from raftcore.logtools import verify_log
from raftcore.records import encode_batch, iter_batches

SEG = 4096


def records(n, tag=b"r"):
    return [(tag + b"-k%d" % i, tag + b"-v%d-" % i + b"x" * 20) for i in range(n)]


def build(path, batches=80, epochs=(1, 2, 3)):
    """A log of `batches` 3-record batches over several segments, closed cleanly."""
    with SegmentedLog.open(path, segment_bytes=SEG, index_interval_bytes=256) as log:
        for i in range(batches):
            log.append_as_leader(records(3, b"%d" % i), epoch=epochs[i * len(epochs) // batches])
        return log.segment_base_offsets(), log.end_offset, log.epoch_entries()


def reopen(path):
    return SegmentedLog.open(path, segment_bytes=SEG, index_interval_bytes=256)


def contents(log):
    out = []
    for batch in log.batches():
        batch.validate()
        out.extend((r.offset, batch.partition_leader_epoch, r.key) for r in batch.records())
    return out


def last_segment(path):
    return sorted(path.glob("*.log"))[-1]


def make_unclean(path):
    """Forget the clean point, as if the process had died before closing."""
    (path / "recovery-point-checkpoint").unlink()


def test_a_clean_reopen_trusts_the_log_and_scans_nothing(tmp_path, caplog):
    build(tmp_path)
    caplog.set_level(logging.INFO, logger="raftcore.log")
    with reopen(tmp_path) as log:
        assert log.end_offset == 240
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_torn_last_batch_is_cut_off_with_a_warning_naming_offset_and_position(tmp_path, caplog):
    _, end, _ = build(tmp_path)
    seg = last_segment(tmp_path)
    data = seg.read_bytes()
    last = list(iter_batches(data))[-1]
    seg.write_bytes(data[: last.position + last.size_in_bytes - 7])  # torn mid-batch
    make_unclean(tmp_path)
    with caplog.at_level(logging.WARNING, logger="raftcore.log"), reopen(tmp_path) as log:
        assert log.end_offset == end - 3
        assert [r[0] for r in contents(log)] == list(range(end - 3))
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert f"byte {last.position}" in warning and f"offset {end - 3}" in warning
    assert seg.stat().st_size == last.position


def test_garbage_after_the_last_batch_is_cut_off(tmp_path):
    _, end, _ = build(tmp_path)
    seg = last_segment(tmp_path)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(os.urandom(100))
    with reopen(tmp_path) as log:
        assert log.end_offset == end
    assert seg.stat().st_size == size


def test_zeros_after_the_last_batch_are_cut_off(tmp_path):
    _, end, _ = build(tmp_path)
    seg = last_segment(tmp_path)
    with open(seg, "ab") as f:
        f.write(bytes(4000))
    with reopen(tmp_path) as log:
        assert log.end_offset == end


def test_a_flipped_byte_after_the_clean_point_cuts_the_log_at_that_batch(tmp_path):
    path = tmp_path / "log"
    with SegmentedLog.open(path, segment_bytes=1 << 20) as log:
        for i in range(20):
            log.append_as_leader(records(3, b"%d" % i), epoch=1)
    make_unclean(path)
    seg = last_segment(path)
    data = bytearray(seg.read_bytes())
    victim = list(iter_batches(bytes(data)))[12]
    data[victim.position + victim.size_in_bytes - 3] ^= 0x40
    seg.write_bytes(bytes(data))
    with SegmentedLog.open(path, segment_bytes=1 << 20) as log:
        assert log.end_offset == victim.base_offset
        assert all(r[0] < victim.base_offset for r in contents(log))


def test_a_damaged_segment_in_the_middle_drops_the_segments_after_it(tmp_path):
    bases, _, _ = build(tmp_path)
    make_unclean(tmp_path)
    victim = tmp_path / f"{bases[1]:020d}.log"
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    with reopen(tmp_path) as log:
        assert log.segment_base_offsets() == bases[:2]
        offsets = [r[0] for r in contents(log)]
        assert offsets == list(range(log.end_offset))
        assert log.end_offset < bases[2]
    assert not (tmp_path / f"{bases[2]:020d}.log").exists()


def test_a_missing_index_is_rebuilt(tmp_path):
    bases, end, _ = build(tmp_path)
    for p in tmp_path.glob("*.index"):
        p.unlink()
    with reopen(tmp_path) as log:
        assert [r[0] for r in contents(log)] == list(range(end))
        for offset in range(0, end, 7):
            assert next(iter_batches(log.read(offset, 1))).base_offset <= offset
    assert len(list(tmp_path.glob("*.index"))) == len(bases)


def test_a_corrupt_index_is_rebuilt(tmp_path):
    bases, end, _ = build(tmp_path)
    index = tmp_path / f"{bases[0]:020d}.index"
    index.write_bytes(b"\x00\x00\x00\x09\x00\x00\xff\xff" * 3 + b"\x01")
    with reopen(tmp_path) as log:
        for offset in range(end):
            batch = next(iter_batches(log.read(offset, 1)))
            assert batch.base_offset <= offset <= batch.last_offset


def test_a_lost_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    _, _, entries = build(tmp_path)
    (tmp_path / "leader-epoch-checkpoint").unlink()
    with reopen(tmp_path) as log:
        assert log.epoch_entries() == entries


def test_a_corrupt_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    _, _, entries = build(tmp_path)
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n5\n1 0\n")
    with reopen(tmp_path) as log:
        assert log.epoch_entries() == entries


def test_epoch_entries_past_the_recovered_end_are_dropped(tmp_path):
    # The checkpoint is written before the batch: a crash between leaves an entry past the end.
    _, end, entries = build(tmp_path)
    text = (tmp_path / "leader-epoch-checkpoint").read_text().splitlines()
    text[1] = str(int(text[1]) + 1)
    text.append(f"9 {end}")
    (tmp_path / "leader-epoch-checkpoint").write_text("\n".join(text) + "\n")
    with reopen(tmp_path) as log:
        assert log.epoch_entries() == entries


def test_epochs_of_recovered_batches_missing_from_the_checkpoint_are_added(tmp_path):
    path = tmp_path / "log"
    with SegmentedLog.open(path) as log:
        log.append_as_leader(records(3), epoch=1)
    checkpoint = (path / "leader-epoch-checkpoint").read_text()
    with SegmentedLog.open(path) as log:
        log.append_as_leader(records(3), epoch=4)
    (path / "leader-epoch-checkpoint").write_text(checkpoint)  # lost the epoch-4 entry
    make_unclean(path)
    with SegmentedLog.open(path) as log:
        assert log.epoch_entries() == [(1, 0), (4, 3)]


def test_leftover_temporary_and_deleted_files_are_removed(tmp_path):
    build(tmp_path)
    (tmp_path / "leader-epoch-checkpoint.tmp").write_text("junk")
    (tmp_path / f"{999:020d}.log.deleted").write_bytes(b"old")
    with reopen(tmp_path):
        pass
    assert not list(tmp_path.glob("*.tmp"))
    assert not list(tmp_path.glob("*.deleted"))


def test_corrupt_data_is_never_served_after_recovery(tmp_path):
    # Damage many batches at random; whatever survives recovery must pass every check.
    rng = random.Random(5)
    for trial in range(5):
        path = tmp_path / f"t{trial}"
        build(path, batches=30)
        make_unclean(path)
        for seg in path.glob("*.log"):
            data = bytearray(seg.read_bytes())
            for _ in range(rng.randint(0, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            if rng.random() < 0.5:
                del data[rng.randrange(len(data)) :]
            seg.write_bytes(bytes(data))
        with reopen(path) as log:
            offsets = [r[0] for r in contents(log)]
            assert offsets == list(range(log.log_start_offset, log.end_offset))
        assert verify_log(path).ok


def test_verify_log_reports_the_first_bad_position_without_repairing(tmp_path):
    build(tmp_path)
    seg = last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    second = list(iter_batches(bytes(data)))[1]
    data[second.position + 30] ^= 0x01
    seg.write_bytes(bytes(data))
    report = verify_log(tmp_path)
    assert not report.ok
    assert report.file == seg.name and report.position == second.position
    assert seg.read_bytes() == bytes(data)  # untouched


WRITER = textwrap.dedent(
    """
    import sys
    from raftcore.log import SegmentedLog

    path = sys.argv[1]
    log = SegmentedLog.open(path, segment_bytes=64 * 1024)
    epoch = 1
    i = 0
    while True:
        if i % 200 == 0:
            epoch += 1
        recs = [(b"k%d-%d" % (i, j), b"v" * (1 + (i * 7 + j) % 300)) for j in range(1 + i % 17)]
        first, last = log.append_as_leader(recs, epoch)
        if i % 5 == 0:
            log.flush()
        print(last, flush=True)
        i += 1
    """
)


@pytest.mark.parametrize("kill_after", [0.3, 0.8])
def test_a_log_survives_kill_9_during_appends_losing_only_an_incomplete_tail(tmp_path, kill_after):
    path = tmp_path / "log"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # not the checkout: the child must import the installed raftcore
    )
    try:
        acknowledged = -1
        deadline = time.monotonic() + 30
        while acknowledged < 0 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line:
                acknowledged = int(line)
        assert acknowledged >= 0, proc.stderr.read()
        time.sleep(kill_after)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    for line in proc.stdout.read().splitlines():
        if line.strip():
            acknowledged = int(line)
    # The page cache survives a killed process: every append the writer saw complete is there,
    # and at most the one it was writing is lost.
    with SegmentedLog.open(path, segment_bytes=64 * 1024) as log:
        assert log.end_offset >= acknowledged + 1
        offsets = []
        epochs = []
        for batch in log.batches():
            batch.validate()
            epochs.append(batch.partition_leader_epoch)
            offsets.extend(r.offset for r in batch.records())
        assert offsets == list(range(log.end_offset))
        assert epochs == sorted(epochs)
        assert log.epoch_entries()[-1][0] == epochs[-1]
        assert log.segment_count > 1
    assert verify_log(path).ok


def test_a_writer_killed_mid_batch_leaves_a_torn_tail_that_recovery_cuts(tmp_path):
    # A kill between two write() calls of one batch: simulated by writing half a batch with a
    # raw file write after the log's own appends, then abandoning the process.
    path = tmp_path / "log"
    script = textwrap.dedent(
        """
        import os, sys
        from raftcore.log import SegmentedLog
        from raftcore.records import encode_batch
        log = SegmentedLog.open(sys.argv[1])
        first, last = log.append_as_leader([(b"k", b"v")] * 10, 1)
        batch = encode_batch([(b"k", b"v")] * 10, base_offset=last + 1, leader_epoch=1)
        with open(os.path.join(sys.argv[1], "%020d.log" % 0), "ab") as f:
            f.write(batch[: len(batch) // 2])
        os.kill(os.getpid(), 9)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == -signal.SIGKILL
    with SegmentedLog.open(path) as log:
        assert log.end_offset == 10
        assert len(list(log.batches())) == 1
    assert verify_log(path).ok


def test_a_follower_append_of_a_batch_from_another_log_does_not_corrupt_recovery(tmp_path):
    path = tmp_path / "log"
    with SegmentedLog.open(path) as log:
        log.append_as_follower(encode_batch(records(3), base_offset=0, leader_epoch=2))
        log.append_as_follower(encode_batch(records(3), base_offset=3, leader_epoch=2))
    make_unclean(path)
    with SegmentedLog.open(path) as log:
        assert log.end_offset == 6
        assert log.epoch_entries() == [(2, 0)]
