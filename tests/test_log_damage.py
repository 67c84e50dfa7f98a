"""A damaged batch in a sealed segment of the segmented log: found by the scrubber exactly where
verify-log finds it, never read out as sound (raftcore.raft.damage.read_intact), and written
again in place from a sound copy only when the copy is what the damaged batch must have been
(raftcore.log.repair)."""

from __future__ import annotations

import os

import pytest

from raftcore.errors import LogError
from raftcore.log import SegmentedLog
from raftcore.log.scrub import scrub_segment, sealed_segments
from raftcore.logtools import verify_log
from raftcore.raft.damage import read_intact
from raftcore.records import encode_batch, scan_batches


def records(n: int, tag: bytes = b"r") -> list[tuple[bytes, bytes]]:
    return [(tag + b"-k%d" % i, tag + b"-v%d-" % i + b"x" * 40) for i in range(n)]


@pytest.fixture
def log(tmp_path):  # type: ignore[no-untyped-def]
    log = SegmentedLog.open(tmp_path / "log", segment_bytes=4096, index_interval_bytes=256)
    for i in range(60):
        log.append_as_leader(records(3, b"%d" % i), epoch=1 + i // 20)
    log.flush()
    assert log.segment_count > 3
    yield log
    log.close()


def batch_in_sealed_segment(log, k: int = 3):  # type: ignore[no-untyped-def]
    """(segment, position, base offset, bytes) of the k-th batch of the second segment."""
    segment = sealed_segments(log)[1]
    data = segment.path.read_bytes()[: segment.size]
    scan = scan_batches(data)
    position, size = int(scan.positions[k]), int(scan.sizes[k])
    return segment, position, int(scan.base_offsets[k]), data[position : position + size]


def flip(path, position: int) -> None:  # type: ignore[no-untyped-def]
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x10]))
        f.flush()
        os.fsync(f.fileno())


def test_the_scrubber_finds_a_flipped_byte_where_verify_log_does(log):  # type: ignore[no-untyped-def]
    segment, position, base, _ = batch_in_sealed_segment(log)
    assert scrub_segment(segment) is None
    flip(segment.path, position + 70)  # inside the records, under the CRC
    found = scrub_segment(segment, piece_bytes=300)  # pieces smaller than the segment
    report = verify_log(log.directory)
    assert found is not None and report.problem is not None
    assert (found.file, found.position) == (report.file, report.position)
    assert found.offset == base and "CRC" in found.reason


def test_the_scrubber_reads_batches_larger_than_its_pieces(log):  # type: ignore[no-untyped-def]
    for segment in sealed_segments(log):
        assert scrub_segment(segment, piece_bytes=16) is None


def test_a_damaged_length_field_is_found_too(log):  # type: ignore[no-untyped-def]
    segment, position, base, _ = batch_in_sealed_segment(log)
    flip(segment.path, position + 9)  # the batch length
    found = scrub_segment(segment)
    assert found is not None and found.offset == base and found.position == position


def test_a_read_stops_before_the_damaged_batch(log):  # type: ignore[no-untyped-def]
    segment, position, base, _ = batch_in_sealed_segment(log)
    flip(segment.path, position + 70)
    data, damage = read_intact(log, segment.base_offset, 1 << 20)
    assert damage is not None and damage.offset == base
    scan = scan_batches(bytes(data))
    assert scan.error is None and int(scan.last_offsets[-1]) == base - 1


def test_a_reader_of_committed_batches_checks_none_past_its_end_offset(log):  # type: ignore[no-untyped-def]
    """With ``end_offset`` (the listener, a consumer's fetch: the high watermark) a read takes
    and checks only the batches below it: a damaged batch past it is neither its finding nor
    its cost (a reader at the log's end would check max_bytes at every step of the mark)."""
    segment, position, base, _ = batch_in_sealed_segment(log)
    flip(segment.path, position + 70)
    data, damage = read_intact(log, segment.base_offset, 1 << 20, end_offset=base)
    assert damage is None
    scan = scan_batches(bytes(data))
    assert scan.error is None and int(scan.last_offsets[-1]) == base - 1
    assert read_intact(log, segment.base_offset, 1 << 20)[1] is not None  # read whole: found


def test_a_base_offset_damaged_past_the_end_offset_does_not_hide_a_committed_batch(log):  # type: ignore[no-untyped-def]
    """A committed batch whose base offset now reads past the end offset is not taken for the
    first batch past it: the read is checked whole, and the damage found where it is."""
    segment, position, base, _ = batch_in_sealed_segment(log)
    flip(segment.path, position + 1)  # the base offset's second byte: far past any end
    data, damage = read_intact(log, segment.base_offset, 1 << 20, end_offset=base + 3)
    assert damage is not None and damage.offset == base
    assert int(scan_batches(bytes(data)).last_offsets[-1]) == base - 1


def test_a_sound_copy_is_written_in_place_and_the_log_verifies_again(log):  # type: ignore[no-untyped-def]
    segment, position, base, copy = batch_in_sealed_segment(log)
    flip(segment.path, position + 70)
    assert log.overwrite_batch(copy) == (base, base + 2)
    assert verify_log(log.directory).problem is None
    data, damage = read_intact(log, base, 1 << 20)
    assert damage is None and bytes(data[: len(copy)]) == copy


def test_a_copy_with_a_damaged_length_field_is_written_in_place(log):  # type: ignore[no-untyped-def]
    segment, position, _base, copy = batch_in_sealed_segment(log)
    flip(segment.path, position + 9)
    log.overwrite_batch(copy)
    assert verify_log(log.directory).problem is None


@pytest.mark.parametrize(
    "why, make",
    [
        ("epoch", lambda base: encode_batch(records(3, b"x"), base_offset=base, leader_epoch=9)),
        ("size", lambda base: encode_batch(records(4, b"x"), base_offset=base, leader_epoch=2)),
        ("offset", lambda base: encode_batch(records(3, b"x"), base_offset=base + 1)),
    ],
)
def test_a_copy_that_is_not_the_damaged_batch_is_refused(log, why, make):  # type: ignore[no-untyped-def]
    segment, position, base, _ = batch_in_sealed_segment(log)
    flip(segment.path, position + 70)
    before = segment.path.read_bytes()
    with pytest.raises(LogError):
        log.overwrite_batch(make(base))
    assert segment.path.read_bytes() == before
