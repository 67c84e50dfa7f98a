"""Writing a snapshot locally: batching as Kafka's RecordsSnapshotWriter with the metadata
emitter's limits, and the freeze protocol (written as .part, verified, fsynced, read-only,
renamed, directory fsynced)."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import example_count
from snapshot_helpers import SID, records, write_snapshot

from raftcore.errors import CorruptSnapshotError, RecordTooLargeError, SnapshotError
from raftcore.records import ControlRecordType, iter_batches
from raftcore.snapshot import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    SnapshotHeader,
    SnapshotId,
    SnapshotStore,
    verify_snapshot_file,
)
from raftcore.snapshot import part as part_module


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(tmp_path)


def file_batches(store, snapshot_id=SID):
    return list(iter_batches(store.path_of(snapshot_id).read_bytes()))


def test_a_frozen_snapshot_is_read_only_and_its_part_file_is_gone(store, tmp_path):
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append(records(10))
    (part,) = os.listdir(tmp_path)
    assert part.startswith(SID.stem + "-") and part.endswith(".checkpoint.part")
    writer.freeze()
    assert os.listdir(tmp_path) == [SID.file_name]
    mode = stat.S_IMODE(os.stat(store.path_of(SID)).st_mode)
    assert mode == 0o444
    assert store.ids() == [SID]


def test_freeze_verifies_then_fsyncs_then_makes_read_only_then_renames_then_fsyncs_the_directory(
    store, monkeypatch
):
    events = []

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def fchmod(fd, mode):
        events.append(f"chmod {oct(mode)}")
        real_fchmod(fd, mode)

    def replace(src, dst):
        events.append(f"rename {os.path.basename(src)[-16:]} -> {os.path.basename(dst)}")
        real_replace(src, dst)

    def verify(*args, **kwargs):
        events.append("verify")
        return real_verify(*args, **kwargs)

    real_fsync, real_fchmod, real_replace = os.fsync, os.fchmod, os.replace
    real_verify = part_module.verify_snapshot
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fchmod", fchmod)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(part_module, "verify_snapshot", verify)
    write_snapshot(store, n=10)
    assert events == [
        "verify",
        "fsync file",
        "chmod 0o444",
        f"rename .checkpoint.part -> {SID.file_name}",
        "fsync dir",
    ]


def test_header_first_footer_last_and_offsets_from_0_in_the_snapshot_epoch(store):
    write_snapshot(store, n=2500, last_contained_log_timestamp=777)
    batches = file_batches(store)
    first, *data, last = batches
    assert first.is_control and first.control_type == ControlRecordType.SNAPSHOT_HEADER
    assert len(first) == 1  # the header alone in the first batch
    assert SnapshotHeader.decode(next(first.records()).value) == SnapshotHeader(777)
    assert last.is_control and last.control_type == ControlRecordType.SNAPSHOT_FOOTER
    assert len(last) == 1
    assert not any(b.is_control for b in data)
    assert [b.base_offset for b in batches] == [0, 1, 1025, 2049, 2501]
    assert {b.partition_leader_epoch for b in batches} == {SID.epoch}


def test_data_batches_hold_at_most_1024_records(store):
    write_snapshot(store, n=3000)
    counts = [len(b) for b in file_batches(store)[1:-1]]
    assert MAX_BATCH_RECORDS == 1024
    assert counts == [1024, 1024, 952]


def test_batches_are_at_most_8_mib(store):
    """1,500 records of 20 KiB (30 MiB): the byte limit binds before the record limit."""
    value = os.urandom(20 * 1024)
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append((b"k%d" % i, value) for i in range(1500))
    summary = writer.freeze()
    batches = file_batches(store)
    assert MAX_BATCH_BYTES == 8 * 1024 * 1024
    assert all(b.size_in_bytes <= MAX_BATCH_BYTES for b in batches)
    # Full batches: the next record would not have fitted.
    assert all(b.size_in_bytes > MAX_BATCH_BYTES - 21 * 1024 for b in batches[1:-2])
    assert summary.record_count == 1500


def test_compressed_batches_are_at_most_8_mib_even_when_incompressible(store):
    value = os.urandom(64 * 1024)
    writer = store.writer(SID, last_contained_log_timestamp=1, compression="zstd")
    writer.append((b"k%d" % i, value) for i in range(300))
    summary = writer.freeze()
    assert summary.compressed and summary.record_count == 300
    batches = file_batches(store)
    assert all(b.size_in_bytes <= MAX_BATCH_BYTES for b in batches)
    assert {b.compression for b in batches[1:-1]} == {"zstd"}


def test_a_zstd_snapshot_reads_back_record_for_record(store):
    recs = write_snapshot(store, n=5000, compression="zstd")
    with store.open(SID, verify=True) as reader:
        assert [(r.key, r.value) for r in reader.records()] == recs
        assert reader.size < sum(len(k) + len(v) for k, v in recs) // 2


@settings(
    max_examples=example_count(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sizes=st.lists(st.integers(0, 700), max_size=120),
    calls=st.integers(1, 5),
    max_bytes=st.integers(1024, 4096),
    max_records=st.integers(1, 40),
    compression=st.sampled_from(["none", "zstd", "gzip"]),
)
def test_any_records_are_batched_within_both_limits_in_order(
    tmp_path_factory, sizes, calls, max_bytes, max_records, compression
):
    store = SnapshotStore(tmp_path_factory.mktemp("s"))
    recs = [(b"%d" % i, bytes([i % 256]) * n) for i, n in enumerate(sizes)]
    writer = store.writer(
        SID,
        last_contained_log_timestamp=1,
        compression=compression,
        max_batch_bytes=max_bytes,
        max_batch_records=max_records,
    )
    step = max(1, len(recs) // calls)
    for i in range(0, len(recs), step):
        writer.append(iter(recs[i : i + step]))
    summary = writer.freeze()
    batches = file_batches(store)
    assert all(b.size_in_bytes <= max_bytes for b in batches)
    assert all(1 <= len(b) <= max_records for b in batches[1:-1])
    with store.open(SID) as reader:
        assert [(r.key, r.value) for r in reader.records()] == recs
    assert summary.record_count == len(recs)


def test_a_record_too_large_for_any_batch_is_refused_and_the_snapshot_abandoned(store, tmp_path):
    writer = store.writer(SID, last_contained_log_timestamp=1, max_batch_bytes=4096)
    writer.append(records(5))
    with pytest.raises(RecordTooLargeError, match="at offset 6"):
        writer.append([(b"big", b"x" * 5000)])
    assert os.listdir(tmp_path) == []
    with pytest.raises(SnapshotError, match="aborted"):
        writer.append(records(1))


def test_abort_and_an_unfrozen_with_block_delete_the_part_file(store, tmp_path):
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append(records(10))
    writer.abort()
    assert os.listdir(tmp_path) == [] and SID not in store
    with store.writer(SID, last_contained_log_timestamp=1) as writer:
        writer.append(records(10))
    assert os.listdir(tmp_path) == [] and SID not in store
    with pytest.raises(RuntimeError), store.writer(SID, last_contained_log_timestamp=1) as writer:
        writer.append(records(10))
        raise RuntimeError("the state machine failed mid-snapshot")
    assert os.listdir(tmp_path) == []


def test_a_torn_snapshot_is_never_renamed(store, tmp_path):
    """Bytes lost under the writer (here: the file cut short before freeze) fail the
    verification that precedes the rename; the .part file is deleted, no snapshot appears."""
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append(records(3000))
    (part,) = tmp_path.iterdir()
    os.truncate(part, part.stat().st_size - 100)
    writer._part.size -= 100
    with pytest.raises(CorruptSnapshotError) as info:
        writer.freeze()
    assert info.value.path == str(part)
    assert os.listdir(tmp_path) == [] and store.ids() == []


def test_a_corrupt_byte_under_the_writer_is_never_renamed(store, tmp_path):
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append(records(3000))
    (part,) = tmp_path.iterdir()
    with open(part, "r+b") as f:
        f.seek(5000)
        byte = f.read(1)
        f.seek(5000)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        writer.freeze()
    assert os.listdir(tmp_path) == []


def test_a_snapshot_id_is_written_once(store):
    write_snapshot(store, n=3)
    with pytest.raises(SnapshotError, match="already exists"):
        store.writer(SID, last_contained_log_timestamp=1)


def test_the_writer_counts_offsets_within_the_snapshot(store):
    writer = store.writer(SnapshotId(10, 1), last_contained_log_timestamp=1)
    assert writer.next_offset == 1  # the header took offset 0
    writer.append(records(2000))
    assert writer.next_offset == 2001
    summary = writer.freeze()
    assert summary.batch_count == 4
    assert verify_snapshot_file(store.path_of(SnapshotId(10, 1))) == summary


def test_records_may_carry_headers_and_null_keys(store):
    recs = [(b"k", b"v", [("h", b"x")]), (None, b"w"), (b"k2", None, [("a", None)])]
    writer = store.writer(SID, last_contained_log_timestamp=1)
    writer.append(recs)
    writer.freeze()
    with store.open(SID) as reader:
        got = [(r.key, r.value, list(r.headers)) for r in reader.records()]
    assert got == [(b"k", b"v", [("h", b"x")]), (None, b"w", []), (b"k2", None, [("a", None)])]
