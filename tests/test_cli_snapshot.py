"""``raftcore snapshot list|verify|dump|create`` on a node's data directory, and the snapshot
section of ``dump-log`` / ``verify-log``. The data directory is built as a node lays it out:
the log in ``log/`` (snapshots beside its segments), the LMDB state machine in ``state/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import raftcore
from raftcore.cli import main
from raftcore.cli.snapshot import show_bytes
from raftcore.log import SegmentedLog
from raftcore.raft import CommittedBatch
from raftcore.raft.values import OffsetAndEpoch
from raftcore.records import ControlRecordType, control_record_key, iter_batches
from raftcore.snapshot import SnapshotId, SnapshotStore
from raftcore.statemachine import LmdbStateMachine, StoreSnapshotReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

BATCHES_PER_EPOCH = 10
PAIRS_PER_BATCH = 50
RECS = ("--records",)


def make_node_dir(data_dir: Path, *, epochs: tuple[int, ...] = (1, 2), apply: bool = True) -> int:
    """A stopped node's data directory: a log of ``epochs`` (a LeaderChange control batch,
    then data batches, in each), its state machine having applied every data batch. Returns
    the applied offset."""
    with SegmentedLog.open(data_dir / "log", segment_bytes=16 << 10) as log:
        for epoch in epochs:
            log.initialize_leader_epoch(epoch)
            log.append_as_leader(
                [(control_record_key(ControlRecordType.LEADER_CHANGE), b"")], epoch, control=True
            )
            for n in range(BATCHES_PER_EPOCH):
                log.append_as_leader(
                    [
                        (b"key-%d-%04d" % (n, i), b"value-%d-%d-%d" % (epoch, n, i) * 3)
                        for i in range(PAIRS_PER_BATCH)
                    ],
                    epoch,
                )
        log.flush()
        data = []
        offset = log.log_start_offset
        while offset < log.end_offset:
            for batch in iter_batches(log.read(offset, 1 << 20)):
                if not batch.is_control:
                    data.append(CommittedBatch(batch, batch.base_offset))
                offset = batch.last_offset + 1
    with LmdbStateMachine(data_dir / "state") as machine:
        if apply:
            machine.apply(data)
        return machine.applied_offset


def take_snapshot(data_dir: Path, offset: int | None = None, pairs: int = 300) -> SnapshotId:
    """A snapshot of the log through the log's own writer (as the node takes one)."""
    with SegmentedLog.open(data_dir / "log") as log:
        offset = log.end_offset if offset is None else offset
        sid = OffsetAndEpoch(offset, log.epoch_for_offset(offset - 1))
        writer = log.create_new_snapshot(sid)
        writer.append([(b"snap-%05d" % i, b"v" * 30) for i in range(pairs)])
        writer.freeze()
    return SnapshotId(sid.offset, sid.epoch)


def snapshot_path(data_dir: Path, sid: SnapshotId) -> Path:
    return data_dir / "log" / sid.file_name


def damage(path: Path, *, flip_at: int | None = None, truncate_to: int | None = None) -> None:
    os.chmod(path, 0o644)  # frozen snapshots are read-only
    data = bytearray(path.read_bytes())
    if flip_at is not None:
        data[flip_at] ^= 0x40
    if truncate_to is not None:
        del data[truncate_to:]
    path.write_bytes(bytes(data))


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    d = tmp_path / "node1"
    make_node_dir(d)
    return d


# ---- list ----------------------------------------------------------------------------------


def test_list_shows_every_snapshot_with_its_id_size_and_counts_and_flags_a_part(node_dir, capsys):
    first = take_snapshot(node_dir, 51)  # the end of the first data batch
    second = take_snapshot(node_dir)
    part = node_dir / "log" / f"{SnapshotId(2000, 2).stem}-0123abcd.checkpoint.part"
    part.write_bytes(b"torn")
    assert main(["snapshot", "list", str(node_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"3 snapshot file(s) in {node_dir / 'log'}:"
    size = snapshot_path(node_dir, first).stat().st_size
    assert out[1].startswith(f"{first.file_name}  end offset 51  epoch 1  {size} bytes  ")
    assert "3 batches, 300 records" in out[1]
    assert out[2].startswith(f"{second.file_name}  end offset {second.end_offset}  epoch 2")
    assert part.name in out[3] and "PARTIAL" in out[3] and "4 bytes" in out[3]


def test_list_accepts_the_log_directory_itself(node_dir, capsys):
    sid = take_snapshot(node_dir)
    assert main(["snapshot", "list", str(node_dir / "log")]) == 0
    assert sid.file_name in capsys.readouterr().out


def test_list_verify_fails_a_corrupt_snapshot(node_dir, capsys):
    sid = take_snapshot(node_dir)
    damage(snapshot_path(node_dir, sid), flip_at=200)
    assert main(["snapshot", "list", "--verify", str(node_dir)]) == 1
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_path_with_no_log_and_no_snapshots_exits_2_with_one_line(tmp_path, capsys, make):
    target = tmp_path / "nothing"
    if make == "empty":
        target.mkdir()
    for command in ("list", "verify"):
        assert main(["snapshot", command, str(target)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert len(captured.err.strip().splitlines()) == 1 and str(target) in captured.err
    assert main(["snapshot", "dump", str(target), "1-1"]) == 2


def test_a_log_without_snapshots_lists_none_and_exits_0(node_dir, capsys):
    assert main(["snapshot", "list", str(node_dir)]) == 0
    assert capsys.readouterr().out.startswith("no snapshots in ")


def test_verify_with_no_snapshot_to_verify_exits_2_saying_so(node_dir, capsys):
    """A verifier that checked nothing must not exit 0 (issue 12: "OK: 0 segments"); listing
    nothing is an answer, verifying nothing is not."""
    assert main(["snapshot", "verify", str(node_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().endswith("no snapshots to verify")
    assert len(captured.err.strip().splitlines()) == 1


# ---- verify --------------------------------------------------------------------------------


def test_verify_passes_a_sound_snapshot(node_dir, capsys):
    sid = take_snapshot(node_dir)
    assert main(["snapshot", "verify", str(node_dir)]) == 0
    out = capsys.readouterr().out
    assert f"OK      {sid.file_name}" in out and "300 records" in out
    assert "1 of 1 snapshot(s) verified" in out


def test_verify_fails_a_snapshot_with_a_flipped_byte_naming_the_crc(node_dir, capsys):
    good = take_snapshot(node_dir, 51)
    bad = take_snapshot(node_dir)
    # A byte inside the first data batch's records: only its CRC can tell.
    damage(snapshot_path(node_dir, bad), flip_at=snapshot_path(node_dir, bad).stat().st_size // 2)
    assert main(["snapshot", "verify", str(node_dir)]) == 1
    out = capsys.readouterr().out
    assert f"OK      {good.file_name}" in out
    assert f"FAILED  {bad.file_name}" in out and "CRC" in out and "byte position" in out
    assert "1 of 2 snapshot(s) verified, 1 FAILED" in out


def test_verify_fails_a_truncated_snapshot(node_dir, capsys):
    sid = take_snapshot(node_dir)
    path = snapshot_path(node_dir, sid)
    damage(path, truncate_to=path.stat().st_size - 10)
    assert main(["snapshot", "verify", str(node_dir), sid.file_name]) == 1
    out = capsys.readouterr().out
    assert f"FAILED  {sid.file_name}" in out and "byte position" in out


def test_verify_one_snapshot_by_offset_and_epoch(node_dir, capsys):
    take_snapshot(node_dir, 51)
    sid = take_snapshot(node_dir)
    assert main(["snapshot", "verify", str(node_dir), f"{sid.end_offset}-{sid.epoch}"]) == 0
    out = capsys.readouterr().out
    assert sid.file_name in out and "1 of 1" in out
    assert main(["snapshot", "verify", str(node_dir), "7-9"]) == 2
    assert "no snapshot (end offset 7, epoch 9)" in capsys.readouterr().err
    part = f"{sid.stem}-ab.checkpoint.part"
    assert main(["snapshot", "verify", str(node_dir), part]) == 2
    assert "PARTIAL" in capsys.readouterr().err


def test_verify_progress_reports_bytes_to_stderr(node_dir, capsys):
    take_snapshot(node_dir)
    assert main(["snapshot", "verify", "--progress", str(node_dir)]) == 0
    err = capsys.readouterr().err
    assert "verifying: 100.0%" in err


# ---- dump ----------------------------------------------------------------------------------


def test_dump_prints_the_header_each_batch_and_the_footer(node_dir, capsys):
    sid = take_snapshot(node_dir)
    assert main(["snapshot", "dump", str(node_dir), sid.file_name, "--records"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Snapshot {sid.file_name} (end offset {sid.end_offset}, epoch 2")
    assert out[1].startswith("Batch 0: position 0 baseOffset 0 lastOffset 0 count 1")
    assert out[2].startswith("Header: version 0, last contained log timestamp ")
    batches = [line for line in out if line.startswith("Batch ")]
    assert len(batches) == 3 and "count 300" in batches[1] and "compression none" in batches[1]
    assert '| offset 1 key "snap-00000" value "' + "v" * 30 + '"' in out
    assert out[-2] == "Footer: version 0"
    assert out[-1].startswith("3 batches, 300 data records")


def test_dump_prints_binary_as_hex_and_truncates():
    assert show_bytes(b"plain text", 64) == '"plain text"'
    assert show_bytes(b"\x00\xff\x10", 64) == "hex:00ff10"
    assert show_bytes(b"a" * 100, 8) == '"aaaaaaaa"...(+92 bytes)'
    assert show_bytes("é".encode() * 10, 5) == '"éé"...(+16 bytes)'  # no split character
    assert show_bytes(None, 8) == "null"


def test_dump_piped_into_head_ends_quietly(node_dir):
    sid = take_snapshot(node_dir, pairs=20_000)  # far more than a pipe's buffer
    proc = subprocess.Popen(
        [sys.executable, "-m", "raftcore", "snapshot", "dump", str(node_dir), sid.file_name, *RECS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # The raftcore these tests import (installed in CI, a checkout here), never the
        # source tree by way of the working directory: it has no built native modules in CI.
        env={**os.environ, "PYTHONPATH": str(Path(raftcore.__file__).resolve().parent.parent)},
        cwd=node_dir,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert err == b""


# ---- create --------------------------------------------------------------------------------


def test_create_writes_a_snapshot_the_store_loads_and_verify_passes(node_dir, capsys, tmp_path):
    with LmdbStateMachine(node_dir / "state") as machine:
        applied, expected = machine.applied_offset, machine.items()
    assert main(["snapshot", "create", str(node_dir)]) == 0
    sid = SnapshotId(applied, 2)
    assert f"created {snapshot_path(node_dir, sid)}" in capsys.readouterr().out
    assert not list((node_dir / "log").glob("*.part"))
    assert main(["snapshot", "verify", str(node_dir), sid.file_name]) == 0
    assert SnapshotStore(node_dir / "log").ids() == [sid]
    # The node loads it as the core does: through the log, into its state machine.
    with SegmentedLog.open(node_dir / "log") as log, LmdbStateMachine(tmp_path / "new") as fresh:
        assert log.latest_snapshot_id() == OffsetAndEpoch(applied, 2)
        with log.read_snapshot(OffsetAndEpoch(applied, 2)) as reader:
            fresh.restore(StoreSnapshotReader(reader))
        assert fresh.applied_offset == applied and fresh.items() == expected


def test_create_takes_the_epoch_of_the_record_before_the_applied_offset(tmp_path, capsys):
    """KIP-630: a snapshot id's epoch is that of the record at end offset - 1 -- here 3, while
    the log already ends in epoch 4 (a new leader's LeaderChange, never applied)."""
    d = tmp_path / "node"
    make_node_dir(d, epochs=(1, 3))
    with SegmentedLog.open(d / "log") as log:
        log.initialize_leader_epoch(4)
        log.append_as_leader(
            [(control_record_key(ControlRecordType.LEADER_CHANGE), b"")], 4, control=True
        )
    with LmdbStateMachine(d / "state") as machine:
        applied = machine.applied_offset
    assert main(["snapshot", "create", str(d)]) == 0
    assert [p.name for p in (d / "log").glob("*.checkpoint")] == [SnapshotId(applied, 3).file_name]


def test_create_again_says_the_snapshot_exists_and_exits_0(node_dir, capsys):
    assert main(["snapshot", "create", str(node_dir)]) == 0
    capsys.readouterr()
    assert main(["snapshot", "create", str(node_dir)]) == 0
    assert "already exists" in capsys.readouterr().out


def test_create_refuses_while_a_node_holds_the_log(node_dir, capsys):
    with SegmentedLog.open(node_dir / "log"):
        assert main(["snapshot", "create", str(node_dir)]) == 1
    err = capsys.readouterr().err
    assert "in use" in err and "stop the node first" in err
    assert not list((node_dir / "log").glob("*.checkpoint*"))


def test_create_without_a_state_machine_exits_2(tmp_path, capsys):
    d = tmp_path / "node"
    make_node_dir(d)
    for f in (d / "state").iterdir():
        f.unlink()
    assert main(["snapshot", "create", str(d)]) == 2
    assert "no state machine" in capsys.readouterr().err


def test_create_with_nothing_applied_is_refused(tmp_path, capsys):
    d = tmp_path / "node"
    make_node_dir(d, apply=False)
    assert main(["snapshot", "create", str(d)]) == 1
    assert "applied nothing" in capsys.readouterr().err


# ---- dump-log and verify-log on a node's data directory --------------------------------------


def test_dump_log_of_a_data_directory_shows_its_log_and_snapshots(node_dir, capsys):
    sid = take_snapshot(node_dir)
    assert main(["dump-log", str(node_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Log directory {node_dir / 'log'}")
    assert "baseOffset: 0 " in out
    assert out.rstrip().splitlines()[-1].startswith(f"Snapshot {sid.file_name} ")


def test_verify_log_of_a_data_directory_verifies_its_snapshots_after_the_log(node_dir, capsys):
    sid = take_snapshot(node_dir)
    assert main(["verify-log", str(node_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("OK: ") and out[1] == f"1 snapshots in {node_dir / 'log'}:"
    assert out[2].startswith(f"  OK      {sid.file_name}")
    damage(snapshot_path(node_dir, sid), flip_at=300)
    assert main(["verify-log", str(node_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("OK: ") and out[2].startswith(f"  FAILED  {sid.file_name}")
