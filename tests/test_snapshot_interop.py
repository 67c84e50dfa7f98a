"""Kafka interop of snapshot files, checked against two independent record codecs: aiokafka's
C extension and kafka-python's pure Python.

- A snapshot raftcore writes walks in both peers: every CRC valid, a control batch with the
  SnapshotHeader (type 3) first, data batches from offset 1, the SnapshotFooter (type 4) last.
- A snapshot laid out as Kafka 3.9's RecordsSnapshotWriter writes one for kraft.version 1
  (header batch: SnapshotHeader, KRaftVersion, Voters), its batches built by kafka-python and
  its control values written out by hand from the message schemas, verifies and restores in
  raftcore.
"""

from __future__ import annotations

import struct

import aiokafka.record._crecords as aiokafka_c
import crc32c as crc32c_package
import pytest
from kafka.record.default_records import ControlRecord as KafkaPythonControlRecord
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords
from snapshot_helpers import SID, write_snapshot

from raftcore.records import ControlRecordType
from raftcore.snapshot import SnapshotHeader, SnapshotId, SnapshotStore, verify_snapshot

CONTROL_BIT = 0x20


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_raftcore_snapshot_walks_in_kafka_python(tmp_path, compression):
    store = SnapshotStore(tmp_path)
    recs = write_snapshot(store, SID, n=2100, compression=compression)
    records = KafkaPythonMemoryRecords(store.path_of(SID).read_bytes())
    batches = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        batches.append((batch, list(batch)))
    assert records.valid_bytes() == store.size_of(SID)
    (first, (header,)), *data, (last, (footer,)) = batches
    assert first.is_control_batch and last.is_control_batch
    assert isinstance(header, KafkaPythonControlRecord) and header.type == 3
    assert SnapshotHeader.decode(header.value) == SnapshotHeader(1000 + SID.end_offset)
    assert isinstance(footer, KafkaPythonControlRecord) and footer.type == 4
    assert footer.value == b"\x00\x00\x00"
    assert [b.base_offset for b, _ in batches] == [0, 1, 1025, 2049, 2101]
    assert {b.leader_epoch for b, _ in batches} == {SID.epoch}
    assert not any(b.is_control_batch for b, _ in data)
    assert [(r.key, r.value) for _, rs in data for r in rs] == recs
    assert [r.offset for _, rs in data for r in rs] == list(range(1, 2101))


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_raftcore_snapshot_walks_in_aiokafka(tmp_path, compression):
    store = SnapshotStore(tmp_path)
    recs = write_snapshot(store, SID, n=2100, compression=compression)
    records = aiokafka_c.MemoryRecords(store.path_of(SID).read_bytes())
    batches = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        batches.append((batch.is_control_batch, [(r.offset, r.key, r.value) for r in batch]))
    (control, header), *data, (last_control, footer) = batches
    assert control and last_control and not any(c for c, _ in data)
    assert header[0][:2] == (0, struct.pack(">hh", 0, ControlRecordType.SNAPSHOT_HEADER))
    assert footer == [(2101, struct.pack(">hh", 0, ControlRecordType.SNAPSHOT_FOOTER), b"\0\0\0")]
    assert [(k, v) for _, rs in data for _, k, v in rs] == recs


# ---- a snapshot laid out as Kafka writes it ------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact(s: bytes) -> bytes:
    return _uvarint(len(s) + 1) + s


# SnapshotHeaderRecord v0: Version int16 0, LastContainedLogTimestamp int64, no tagged fields.
KAFKA_HEADER = struct.pack(">hq", 0, 1_700_000_000_123) + b"\x00"
# KRaftVersionRecord v0: Version int16 0, KRaftVersion int16 1, no tagged fields.
KAFKA_KRAFT_VERSION = struct.pack(">hh", 0, 1) + b"\x00"
# VotersRecord v0: Version int16, Voters [VoterId int32, VoterDirectoryId uuid,
# Endpoints [Name, Host compact strings, Port uint16], KRaftVersionFeature {Min, Max int16}].
KAFKA_VOTERS = (
    struct.pack(">h", 0)
    + _uvarint(2)  # one voter
    + struct.pack(">i", 1)
    + bytes(range(16))
    + _uvarint(2)  # one endpoint
    + _compact(b"CONTROLLER")
    + _compact(b"localhost")
    + struct.pack(">H", 9093)
    + b"\x00"  # endpoint tags
    + struct.pack(">hh", 0, 1)
    + b"\x00"  # feature tags
    + b"\x00"  # voter tags
    + b"\x00"  # record tags
)
KAFKA_FOOTER = struct.pack(">h", 0) + b"\x00"


def _peer_batch(records, *, base_offset: int, epoch: int, control: bool = False) -> bytes:
    builder = KafkaPythonBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, (key, value) in enumerate(records):
        builder.append(i, 1_700_000_000_000, key, value, [])
    out = bytearray(builder.build())
    if control:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, attributes | CONTROL_BIT)
        struct.pack_into(">I", out, 17, crc32c_package.crc32c(bytes(out[21:])))
    struct.pack_into(">q", out, 0, base_offset)  # outside the CRC
    struct.pack_into(">i", out, 12, epoch)
    return bytes(out)


def kafka_shaped_snapshot(n: int, epoch: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    def key(control_type):
        return struct.pack(">hh", 0, control_type)

    recs = [(b"key-%06d" % i, b"value-%06d" % i) for i in range(n)]
    parts = [
        _peer_batch(
            [
                (key(ControlRecordType.SNAPSHOT_HEADER), KAFKA_HEADER),
                (key(ControlRecordType.KRAFT_VERSION), KAFKA_KRAFT_VERSION),
                (key(ControlRecordType.KRAFT_VOTERS), KAFKA_VOTERS),
            ],
            base_offset=0,
            epoch=epoch,
            control=True,
        )
    ]
    offset = 3
    for start in range(0, n, 1024):
        chunk = recs[start : start + 1024]
        parts.append(_peer_batch(chunk, base_offset=offset, epoch=epoch))
        offset += len(chunk)
    footer = [(key(ControlRecordType.SNAPSHOT_FOOTER), KAFKA_FOOTER)]
    parts.append(_peer_batch(footer, base_offset=offset, epoch=epoch, control=True))
    return b"".join(parts), recs


def test_a_snapshot_laid_out_as_kafka_writes_it_verifies_and_restores(tmp_path):
    sid = SnapshotId(5000, 7)
    data, recs = kafka_shaped_snapshot(3000, sid.epoch)
    summary = verify_snapshot(data, snapshot_id=sid)
    assert summary.header == SnapshotHeader(1_700_000_000_123)
    assert [t for t, _ in summary.header_extras] == [5, 6]
    assert summary.record_count == 3000 and summary.batch_count == 5
    # Dropped into a log directory (as a copy from a Kafka controller would be).
    (tmp_path / sid.file_name).write_bytes(data)
    store = SnapshotStore(tmp_path)
    with store.open_latest() as reader:
        assert reader.snapshot_id == sid
        assert [(r.key, r.value) for r in reader.records()] == recs
