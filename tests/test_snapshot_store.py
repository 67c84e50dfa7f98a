"""The snapshot store of a log directory: recovery at start, listing, verified opening,
deletion (KIP-630; Kafka's KafkaMetadataLog.recoverSnapshots / deleteBeforeSnapshot)."""

from __future__ import annotations

import os

import pytest
from snapshot_helpers import SID, records, snapshot_bytes, write_snapshot

from raftcore.errors import (
    CorruptLogError,
    CorruptSnapshotError,
    SnapshotNotFoundError,
    SnapshotPositionError,
)
from raftcore.snapshot import SnapshotId, SnapshotStore

A, B, C = SnapshotId(100, 1), SnapshotId(200, 2), SnapshotId(300, 2)


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(tmp_path)


def test_part_and_deleted_files_are_removed_at_start(tmp_path):
    store = SnapshotStore(tmp_path)
    write_snapshot(store, A, n=5)
    store.writer(B, last_contained_log_timestamp=1).append([(b"k", b"v")])  # left unfrozen
    (tmp_path / "00000000000000000050-0000000001.checkpoint.deleted").write_bytes(b"old")
    (tmp_path / "00000000000000000400-0000000002-5432.checkpoint.part").write_bytes(b"kafka's")
    others = ["00000000000000000000.log", "leader-epoch-checkpoint", "quorum-state"]
    for name in others:
        (tmp_path / name).write_bytes(b"")
    reopened = SnapshotStore(tmp_path)
    assert reopened.ids() == [A]
    assert sorted(os.listdir(tmp_path)) == sorted([A.file_name, *others])


def test_snapshots_below_the_log_start_offset_are_removed_at_start(tmp_path):
    store = SnapshotStore(tmp_path)
    for sid in (A, B, C):
        write_snapshot(store, sid, n=5)
    reopened = SnapshotStore(tmp_path, log_start_offset=200)
    assert reopened.ids() == [B, C]
    assert sorted(os.listdir(tmp_path)) == [B.file_name, C.file_name]


def test_a_log_start_offset_no_snapshot_reaches_is_an_inconsistent_directory(tmp_path):
    write_snapshot(SnapshotStore(tmp_path), A, n=5)
    with pytest.raises(CorruptLogError, match="starts at offset 150 but no snapshot"):
        SnapshotStore(tmp_path, log_start_offset=150)


def test_latest_earliest_and_all_ids_in_kafkas_order(store):
    assert (store.ids(), store.latest_id(), store.earliest_id()) == ([], None, None)
    for sid in (C, A, B):
        write_snapshot(store, sid, n=5)
    assert store.ids() == [A, B, C]
    assert (store.latest_id(), store.earliest_id()) == (C, A)
    assert A in store and SnapshotId(100, 2) not in store and len(store) == 3
    assert store.size_of(A) == store.path_of(A).stat().st_size


def test_delete_renames_to_deleted_then_unlinks(store, tmp_path, monkeypatch):
    write_snapshot(store, A, n=5)
    seen = []
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        seen.append(sorted(os.listdir(tmp_path)))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert store.delete(A)
    assert seen == [[A.stem + ".checkpoint.deleted"]]
    assert os.listdir(tmp_path) == [] and A not in store
    assert not store.delete(A)


def test_delete_before_removes_the_older_snapshots_and_never_the_latest(store, tmp_path):
    for sid in (A, B, C):
        write_snapshot(store, sid, n=5)
    assert store.delete_before(B) == [A]
    assert store.ids() == [B, C]
    assert store.delete_before(C) == [B]
    assert store.delete_before(C) == []
    assert os.listdir(tmp_path) == [C.file_name]
    with pytest.raises(SnapshotNotFoundError):
        store.delete_before(SnapshotId(400, 3))


def test_a_reader_outlives_the_deletion_of_its_snapshot(store):
    recs = write_snapshot(store, A, n=3000)
    expected = store.path_of(A).read_bytes()[100:1100]
    reader = store.open(A)
    chunk = reader.slice(100, 1000)
    batches = reader.data_batches()
    write_snapshot(store, B, n=1)
    assert store.delete_before(B) == [A]
    assert A not in store and not store.path_of(A).exists()
    assert bytes(chunk) == expected
    assert [(r.key, r.value) for b in batches for r in b.records()] == recs
    reader.close()
    assert bytes(chunk) == expected  # views stay readable after close


def test_a_snapshot_is_verified_before_it_is_served_or_loaded(store, tmp_path):
    """A snapshot file damaged on disk (here: a byte flipped behind the store's back, in a
    file another process wrote) is refused at open, naming the file and position."""
    data = bytearray(snapshot_bytes())
    data[200] ^= 0x40
    path = tmp_path / SID.file_name
    path.write_bytes(bytes(data))
    store = SnapshotStore(tmp_path)
    assert store.ids() == [SID]
    with pytest.raises(CorruptSnapshotError) as info:
        store.open(SID)
    assert info.value.path == str(path) and info.value.position is not None
    with pytest.raises(CorruptSnapshotError):
        store.open_latest()


def test_verification_is_remembered_for_the_process_and_forced_on_request(store, monkeypatch):
    write_snapshot(store, A, n=5)
    from raftcore.snapshot import store as store_module

    calls = []
    real = store_module.verify_snapshot_file
    monkeypatch.setattr(
        store_module, "verify_snapshot_file", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    store.open(A).close()  # verified when it was frozen
    assert calls == []
    SnapshotStore(store.directory).open(A).close()  # a new process verifies at first open
    assert calls == [1]
    store.open(A, verify=True).close()
    assert calls == [1, 1]


def test_reading_a_snapshot_whole_gives_its_records_in_order(store):
    recs = write_snapshot(store, A, n=2500, last_contained_log_timestamp=99)
    with store.open_latest() as reader:
        assert reader.snapshot_id == A and reader.last_contained_log_timestamp == 99
        assert [(r.key, r.value) for r in reader.records()] == recs
        assert [r.offset for r in reader.records()] == list(range(1, 2501))
        kinds = [b.is_control for b in reader.batches()]
        assert kinds == [True, False, False, False, True]


def test_a_slice_is_a_zero_copy_view_cut_anywhere(store):
    write_snapshot(store, A, n=100)
    data = store.path_of(A).read_bytes()
    with store.open(A) as reader:
        assert reader.size == len(data)
        view = reader.slice(7, 100)
        assert isinstance(view, memoryview) and view.readonly
        assert bytes(view) == data[7:107]
        assert bytes(reader.slice(len(data) - 3, 1 << 20)) == data[-3:]
        assert reader.slice_range(len(data) - 3, 1 << 20) == (len(data) - 3, 3)
        for position in (-1, len(data)):
            with pytest.raises(SnapshotPositionError):
                reader.slice(position, 10)


def test_a_slice_can_be_sent_with_sendfile(store, tmp_path):
    write_snapshot(store, A, n=1000)
    data = store.path_of(A).read_bytes()
    out = tmp_path / "copy"
    with store.open(A) as reader, open(out, "wb") as f:
        position = 0
        while position < reader.size:
            offset, length = reader.slice_range(position, 4096)
            position += os.sendfile(f.fileno(), reader.fileno(), offset, length)
    assert out.read_bytes() == data


def test_a_closed_reader_refuses_new_reads(store):
    write_snapshot(store, A, n=5)
    reader = store.open(A)
    reader.close()
    assert reader.closed
    with pytest.raises(Exception, match="closed"):
        reader.slice(0, 10)
    with pytest.raises(SnapshotNotFoundError):
        store.open(B)


def test_snapshots_live_beside_the_segments_and_each_ignores_the_others_files(tmp_path):
    """Kafka keeps snapshots in the partition directory; the log's recovery and the store's
    must leave each other's files alone (the store does not import the log; this test does)."""
    from raftcore.log import SegmentedLog
    from raftcore.records import encode_batch

    log = SegmentedLog.open(tmp_path)
    log.append_as_follower(encode_batch(records(50), base_offset=0, leader_epoch=2))
    log.close()
    store = SnapshotStore(tmp_path)
    write_snapshot(store, SnapshotId(50, 2), n=5)
    store.writer(B, last_contained_log_timestamp=1).append(records(3))  # a .part left behind
    log = SegmentedLog.open(tmp_path)
    assert log.end_offset == 50
    log.close()
    assert SnapshotStore(tmp_path).ids() == [SnapshotId(50, 2)]
    assert sorted(p.name for p in tmp_path.iterdir() if "checkpoint." in p.name) == []
