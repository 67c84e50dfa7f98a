"""The snapshot file format and its verification: a snapshot is verified whole -- size,
framing, every CRC, header first, footer last, offsets, epoch -- and anything else is a
CorruptSnapshotError naming the byte position, never a crash (KIP-630; NEXT-WAVE 1.1)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import example_count
from snapshot_helpers import SID, records, snapshot_bytes

from raftcore._native.crc32c import crc32c
from raftcore.errors import CorruptLogError, CorruptRecordError, CorruptSnapshotError
from raftcore.records import (
    BatchBuilder,
    ControlRecordType,
    control_record_key,
    encode_batch,
    encode_control_batch,
    iter_batches,
    scan_batches,
)
from raftcore.snapshot import (
    SnapshotFooter,
    SnapshotHeader,
    SnapshotId,
    encode_footer_batch,
    encode_header_batch,
    verify_snapshot,
)


def batches_of(data: bytes) -> list[bytes]:
    return [b.to_bytes() for b in iter_batches(data)]


def with_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed (after a change to a CRC-covered field)."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def data_batch(n: int, base: int, epoch: int = 3) -> bytes:
    return encode_batch(records(n, base), base_offset=base, leader_epoch=epoch, timestamp_ms=7)


def header(epoch: int = 3) -> bytes:
    return encode_header_batch(epoch, SnapshotHeader(42), timestamp_ms=7)


def footer(base: int, epoch: int = 3) -> bytes:
    return encode_footer_batch(base, epoch, timestamp_ms=7)


def rejects(data: bytes, match: str, **kwargs) -> CorruptSnapshotError:
    with pytest.raises(CorruptSnapshotError, match=match) as info:
        verify_snapshot(data, **kwargs)
    return info.value


# ---- the two control records ----------------------------------------------------------------


def test_header_and_footer_are_kafkas_messages_at_version_0_flexible():
    # SnapshotHeaderRecord: Version int16, LastContainedLogTimestamp int64, no tagged fields.
    assert SnapshotHeader(0x0102030405060708).encode() == (
        b"\x00\x00" + b"\x01\x02\x03\x04\x05\x06\x07\x08" + b"\x00"
    )
    # SnapshotFooterRecord: Version int16, no tagged fields.
    assert SnapshotFooter().encode() == b"\x00\x00\x00"
    (batch,) = iter_batches(header())
    (record,) = batch.records()
    assert batch.is_control and batch.control_type == ControlRecordType.SNAPSHOT_HEADER
    assert record.key == b"\x00\x00\x00\x03"  # control key: version 0, type 3
    assert SnapshotHeader.decode(record.value) == SnapshotHeader(42)


def test_header_with_unknown_tagged_fields_decodes_as_kafkas_generated_code_does():
    tagged = b"\x00\x00" + (7).to_bytes(8, "big") + b"\x02" + b"\x05\x01x" + b"\x09\x00"
    assert SnapshotHeader.decode(tagged) == SnapshotHeader(7)
    assert SnapshotFooter.decode(b"\x00\x01\x01\x00\x02ab") == SnapshotFooter(version=1)


@pytest.mark.parametrize(
    "value", [b"", b"\x00\x00\x00", b"\x00" * 10, b"\x00" * 11 + b"x", b"\x00" * 10 + b"\x01"]
)
def test_a_truncated_or_overlong_header_value_is_corrupt(value):
    with pytest.raises(CorruptRecordError):
        SnapshotHeader.decode(value)


# ---- a sound snapshot -----------------------------------------------------------------------


def test_a_sound_snapshot_verifies_and_is_described():
    data = snapshot_bytes((3, 4), epoch=3, timestamp=42)
    summary = verify_snapshot(data, snapshot_id=SID, expected_size=len(data))
    assert summary.size == len(data)
    assert (summary.epoch, summary.batch_count, summary.record_count) == (3, 4, 7)
    assert summary.header == SnapshotHeader(42)
    assert summary.footer == SnapshotFooter(0)
    assert not summary.compressed and summary.header_extras == ()


def test_a_snapshot_of_no_records_is_a_header_and_a_footer():
    data = header() + footer(1)
    assert verify_snapshot(data, snapshot_id=SID).record_count == 0


def test_corrupt_snapshot_error_is_a_corrupt_log_error_naming_file_and_position():
    data = snapshot_bytes()
    err = rejects(data[:-1], "truncated", name="/log/x.checkpoint")
    assert isinstance(err, CorruptLogError)
    assert err.path == "/log/x.checkpoint"
    assert err.position == len(data) - len(batches_of(data)[-1])  # where the footer starts
    assert "/log/x.checkpoint" in str(err) and f"byte position {err.position}" in str(err)


# ---- every byte counts ----------------------------------------------------------------------


@pytest.mark.parametrize("check_records", [True, False])
@pytest.mark.parametrize("with_id", [True, False])
def test_a_flipped_byte_anywhere_fails_verification(check_records, with_id):
    """Every byte of a small snapshot (header, two data batches, footer), flipped two ways.
    Bytes outside the CRC (base offset, length, leader epoch) are caught by the offset and
    epoch rules, the rest by the CRC."""
    data = snapshot_bytes((3, 4))
    kwargs = {"check_records": check_records, "snapshot_id": SID if with_id else None}
    verify_snapshot(data, **kwargs)
    for position in range(len(data)):
        for mask in (0x01, 0xFF):
            bad = bytearray(data)
            bad[position] ^= mask
            with pytest.raises(CorruptSnapshotError) as info:
                verify_snapshot(bytes(bad), **kwargs)
            assert info.value.position is not None, (position, mask)


def test_a_torn_snapshot_fails_verification_at_every_length():
    data = snapshot_bytes((3, 4))
    for length in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            verify_snapshot(data[:length])


def test_the_size_a_leader_announced_is_checked():
    data = snapshot_bytes()
    rejects(data, f"has {len(data)} bytes, expected {len(data) + 1}", expected_size=len(data) + 1)


def test_bytes_after_the_footer_fail_verification():
    data = snapshot_bytes()
    rejects(data + b"\x00", "truncated record batch")
    rejects(data + data[:61], "truncated record batch")
    rejects(data + footer(9), "control batch between")  # a second footer after the first


# ---- header first, footer last --------------------------------------------------------------


def test_header_first_footer_last():
    h, d1, d2, f = header(), data_batch(3, 1), data_batch(4, 4), footer(8)
    verify_snapshot(h + d1 + d2 + f)
    rejects(b"", "empty")
    rejects(h, "needs a footer batch")
    rejects(h + d1 + d2, "last batch is not a control batch")
    rejects(data_batch(3, 0) + data_batch(4, 3) + footer(7), "first batch is not a control batch")
    rejects(d1 + h, "first batch is not a control")
    # A footer in the first batch, a header in the last.
    rejects(footer(0) + data_batch(3, 1) + footer(4), "not a snapshot header")
    rejects(header() + data_batch(3, 1) + with_offset(header(), 4), "not a snapshot footer")
    # A control batch between them (a second footer, a leader change).
    rejects(h + d1 + footer(4) + data_batch(4, 5) + footer(9), "control batch between")
    lc = encode_control_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00", base_offset=4, leader_epoch=3
    )
    rejects(h + d1 + lc + footer(5), "control batch between")


def with_offset(batch: bytes, base: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base)
    return bytes(out)


def test_the_footer_is_alone_in_the_last_batch():
    two = BatchBuilder(base_offset=4, leader_epoch=3, timestamp_ms=7, control=True)
    two.append(control_record_key(ControlRecordType.SNAPSHOT_FOOTER), SnapshotFooter().encode())
    two.append(control_record_key(ControlRecordType.SNAPSHOT_FOOTER), SnapshotFooter().encode())
    rejects(header() + data_batch(3, 1) + two.build(), "holds 2 records")


def test_a_kafka_header_batch_with_kraft_version_and_voters_verifies():
    """Kafka's RecordsSnapshotWriter adds KRaftVersion (5) and Voters (6) records after the
    header for kraft.version 1; nothing else may be there."""
    kraft_version = (control_record_key(ControlRecordType.KRAFT_VERSION), b"\x00\x00\x00\x01\x00")
    voters = (control_record_key(ControlRecordType.KRAFT_VOTERS), b"\x00\x00\x01\x00")
    h = encode_header_batch(
        3, SnapshotHeader(9), timestamp_ms=7, extra_records=[kraft_version, voters]
    )
    summary = verify_snapshot(h + data_batch(2, 3) + footer(5))
    assert summary.header_extras == (
        (ControlRecordType.KRAFT_VERSION, kraft_version[1]),
        (ControlRecordType.KRAFT_VOTERS, voters[1]),
    )
    b = BatchBuilder(base_offset=0, leader_epoch=3, timestamp_ms=7, control=True)
    b.append(control_record_key(ControlRecordType.SNAPSHOT_HEADER), SnapshotHeader(9).encode())
    b.append(control_record_key(ControlRecordType.LEADER_CHANGE), b"\x00")
    rejects(b.build() + footer(2), "type 2 in the header batch")
    with pytest.raises(ValueError, match="only KRaftVersion and Voters"):
        encode_header_batch(
            3, SnapshotHeader(9), timestamp_ms=7, extra_records=[(control_record_key(2), b"")]
        )


def test_a_transactional_batch_is_refused():
    txn = encode_batch(
        records(2, 1),
        base_offset=1,
        leader_epoch=3,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
    )
    bad = bytearray(txn)
    struct.pack_into(">h", bad, 21, struct.unpack_from(">h", bad, 21)[0] | 0x10)
    rejects(header() + with_crc(bad) + footer(3), "transactional")


# ---- offsets and epochs ---------------------------------------------------------------------


def test_offsets_start_at_0_and_run_on_without_gaps():
    rejects(with_offset(header(), 5) + data_batch(3, 6) + footer(9), "starts at offset 5, not 0")
    rejects(header() + data_batch(3, 2) + footer(5), "batch 1 starts at offset 2")
    rejects(header() + data_batch(3, 1) + footer(3), "batch 2 starts at offset 3")


def test_a_batch_holds_as_many_records_as_its_offsets_span():
    bad = bytearray(data_batch(3, 1))
    struct.pack_into(">i", bad, 23, 4)  # lastOffsetDelta 4 for 3 records
    rejects(
        header() + with_crc(bad) + footer(6),
        "holds 3 records for offsets 1..5",
        check_records=False,
    )


def test_every_batch_carries_the_snapshot_epoch():
    rejects(header(3) + data_batch(3, 1, epoch=2) + footer(4, 3), "batch 1 has epoch 2")
    rejects(snapshot_bytes(epoch=4), "epoch 4, the snapshot id 3", snapshot_id=SnapshotId(120, 3))
    verify_snapshot(snapshot_bytes(epoch=4), snapshot_id=SnapshotId(120, 4))


def test_a_malformed_record_under_a_valid_crc_is_caught_by_the_record_walk():
    """A buggy writer computes a valid CRC over bad records; the record walk (on by default)
    finds them, where Kafka's reader only checks CRCs."""
    batch = bytearray(data_batch(3, 1))
    batch[61] = 0x7F  # first record's length varint: far past the batch end
    data = header() + with_crc(batch) + footer(4)
    verify_snapshot(data, check_records=False)
    err = rejects(data, "record", check_records=True)
    assert err.position == len(header())


# ---- never a crash --------------------------------------------------------------------------


@settings(
    max_examples=example_count(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.data())
def test_corrupt_input_is_a_corrupt_snapshot_error_never_a_crash(data):
    original = bytearray(snapshot_bytes((2, 3)))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        at = data.draw(st.integers(0, len(original)))
        chunk = data.draw(st.binary(min_size=1, max_size=16))
        if kind == "replace":
            original[at : at + len(chunk)] = chunk
        elif kind == "insert":
            original[at:at] = chunk
        else:
            del original[at : at + len(chunk)]
    try:
        verify_snapshot(bytes(original))
    except CorruptSnapshotError as exc:
        assert exc.position is None or 0 <= exc.position <= len(original)


def test_verify_with_progress_walks_in_pieces_and_reports_a_fault_as_the_whole_walk(monkeypatch):
    """The progress path checks what the plain path checks, and names the same batch and byte
    position (not ones relative to the piece that failed)."""
    import raftcore.snapshot.format as snapshot_format

    monkeypatch.setattr(snapshot_format, "PROGRESS_PIECE_BYTES", 1)  # a piece per batch
    data = snapshot_bytes((3, 4, 5, 6))
    calls: list[tuple[int, int]] = []
    verify_snapshot(data, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) == 6 and calls == sorted(calls) and calls[-1] == (len(data), len(data))
    bad = bytearray(data)
    bad[int(scan_batches(data).positions[3]) + 70] ^= 0x01  # inside batch 3's records
    with pytest.raises(CorruptSnapshotError) as whole:
        verify_snapshot(bytes(bad))
    with pytest.raises(CorruptSnapshotError) as pieces:
        verify_snapshot(bytes(bad), progress=lambda done, total: None)
    assert "batch 3" in str(whole.value)
    assert str(pieces.value) == str(whole.value) and pieces.value.position == whole.value.position
