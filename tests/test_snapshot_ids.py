"""Snapshot ids and file names (KIP-630; Kafka's Snapshots.java)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftcore.snapshot import (
    BOOTSTRAP_SNAPSHOT_ID,
    SnapshotFileKind,
    SnapshotId,
    parse_snapshot_path,
    snapshot_path,
)

ids = st.builds(SnapshotId, st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1))


def test_a_snapshot_file_is_named_by_its_20_digit_end_offset_and_10_digit_epoch():
    assert SnapshotId(100, 3).file_name == "00000000000000000100-0000000003.checkpoint"
    assert snapshot_path("/d", SnapshotId(2**63 - 1, 2**31 - 1)).name == (
        "09223372036854775807-2147483647.checkpoint"
    )
    assert BOOTSTRAP_SNAPSHOT_ID.file_name == "00000000000000000000-0000000000.checkpoint"


@given(ids)
def test_every_snapshot_file_name_parses_back_to_its_id(snapshot_id):
    parsed = parse_snapshot_path(f"/log/{snapshot_id.file_name}")
    assert parsed is not None
    assert (parsed.snapshot_id, parsed.kind) == (snapshot_id, SnapshotFileKind.FROZEN)
    name = snapshot_id.file_name
    # Kafka reads the offset from characters [0, 20) and the epoch from [21, 31).
    assert int(name[0:20]) == snapshot_id.end_offset
    assert int(name[21:31]) == snapshot_id.epoch


def test_part_and_deleted_names_parse_with_their_kind():
    sid = SnapshotId(100, 3)
    # Kafka's temp files: <id>-<random number>.checkpoint.part
    for name, kind in [
        ("00000000000000000100-0000000003-8362014582954.checkpoint.part", SnapshotFileKind.PART),
        ("00000000000000000100-0000000003-ab12.checkpoint.part", SnapshotFileKind.PART),
        ("00000000000000000100-0000000003.checkpoint.part", SnapshotFileKind.PART),
        ("00000000000000000100-0000000003.checkpoint.deleted", SnapshotFileKind.DELETED),
    ]:
        parsed = parse_snapshot_path(name)
        assert parsed is not None, name
        assert (parsed.snapshot_id, parsed.kind) == (sid, kind)


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000000.log",
        "00000000000000000000.index",
        "leader-epoch-checkpoint",
        "recovery-point-checkpoint",
        "high-watermark-checkpoint",
        "quorum-state",
        "100-3.checkpoint",
        "0000000000000000010-0000000003.checkpoint",
        "00000000000000000100-000000003.checkpoint",
        "00000000000000000100_0000000003.checkpoint",
        "00000000000000000100-0000000003.checkpoint.tmp",
        "99999999999999999999-0000000003.checkpoint",  # above 2**63 - 1
        "00000000000000000100-9999999999.checkpoint",  # above 2**31 - 1
    ],
)
def test_other_files_of_the_log_directory_are_not_snapshots(name):
    assert parse_snapshot_path(name) is None


def test_snapshot_ids_order_as_kafkas_offset_and_epoch_epoch_first():
    assert SnapshotId(100, 2) < SnapshotId(50, 3)
    assert SnapshotId(50, 3) < SnapshotId(100, 3)
    assert max([SnapshotId(10, 1), SnapshotId(30, 2), SnapshotId(20, 2)]) == SnapshotId(30, 2)
    assert SnapshotId(7, 1).last_contained_offset == 6


def test_a_snapshot_id_is_the_shared_offset_and_epoch_with_its_end_offset_as_offset():
    from raftcore.offsets import OffsetAndEpoch
    from raftcore.raft.values import OffsetAndEpoch as CoreOffsetAndEpoch

    assert CoreOffsetAndEpoch is OffsetAndEpoch  # one type for the core, the log, snapshots
    sid = SnapshotId(100, 4)
    assert isinstance(sid, OffsetAndEpoch)
    assert (sid.offset, sid.end_offset, sid.epoch) == (100, 100, 4)
    assert sid == OffsetAndEpoch(100, 4) and OffsetAndEpoch(100, 4) == sid
    assert hash(sid) == hash(OffsetAndEpoch(100, 4))
    assert sid != OffsetAndEpoch(100, 5) and sid != (100, 4)
    assert {OffsetAndEpoch(100, 4): "core"}[sid] == "core"
    assert SnapshotId.of(OffsetAndEpoch(100, 4)) == sid
    assert type(SnapshotId.of(OffsetAndEpoch(100, 4))) is SnapshotId
    assert SnapshotId.of(sid) is sid
    assert repr(sid) == "SnapshotId(end_offset=100, epoch=4)"
    assert OffsetAndEpoch(99, 5) > sid  # epoch first, across the two
    with pytest.raises(ValueError):
        SnapshotId.of(OffsetAndEpoch(-1, -1))  # the core's "none" is no snapshot id


@pytest.mark.parametrize("offset,epoch", [(-1, 0), (0, -1), (2**63, 0), (0, 2**31)])
def test_a_snapshot_id_outside_kafkas_integer_ranges_is_refused(offset, epoch):
    with pytest.raises(ValueError):
        SnapshotId(offset, epoch)
