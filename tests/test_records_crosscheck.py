"""Cross-checks of raftcore's record batch v2 codec against two real implementations:
aiokafka's C record codec and kafka-python's pure-Python one.

Both directions: batches raftcore writes must read back field for field in the peers' readers
(CRC valid, every header field, every record), and batches the peers' builders write must read
back field for field in raftcore. Where a peer encodes exactly as raftcore does (uncompressed,
and zstd at level 3), the bytes must be identical.

Neither peer can build a control batch (their builders leave attribute bit 5 to the broker), so
control batches are checked in the direction raftcore -> peers; in the other direction a peer's
data batch is re-stamped as a control batch (bit set, CRC recomputed) before raftcore reads it.

The golden vectors in ``tests/vectors/`` (see its README) pin the exact bytes.
"""

from __future__ import annotations

import gzip
import importlib.machinery
import json
import struct
from pathlib import Path

import aiokafka.codec
import aiokafka.record._crecords as aiokafka_c
import crc32c as crc32c_package
import pytest
from aiokafka.producer.producer import AIOKafkaProducer
from aiokafka.record import default_records as aiokafka_default
from aiokafka.record import memory_records as aiokafka_memory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.producer.kafka import KafkaProducer
from kafka.record.default_records import ControlRecord as KafkaPythonControlRecord
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder as KafkaPythonMemoryRecordsBuilder
from record_strategies import (
    batch_params,
    build_batch,
    compressions,
    example_count,
    expected_records,
    header_keys,
    nullable_payloads,
    payloads,
    record_lists,
    timestamps,
)

from raftcore.records import (
    COMPRESSION_NAMES,
    ControlRecordType,
    control_record_key,
    encode_batch_kv,
    encode_control_batch,
    iter_batches,
)

CODES = {name: code for code, name in enumerate(COMPRESSION_NAMES)}
VECTORS = Path(__file__).parent / "vectors"
T = 1_700_000_000_000

# aiokafka's C classes, used directly so that a fallback to its Python code cannot slip in.
AioBatch = aiokafka_c.DefaultRecordBatch
AioBuilder = aiokafka_c.DefaultRecordBatchBuilder
AioMemoryRecords = aiokafka_c.MemoryRecords

SETTINGS = settings(
    max_examples=example_count(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
ATTRIBUTES_AT = 21
CONTROL_BIT = 0x20
LOG_APPEND_TIME_BIT = 0x08
TRANSACTIONAL_BIT = 0x10


# ---- views of a batch through each reader ----------------------------------------------------


def raftcore_view(data: bytes) -> tuple[dict, list[tuple]]:
    (batch,) = list(iter_batches(data))
    assert batch.is_valid()
    header = {
        "base_offset": batch.base_offset,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "compression": CODES[batch.compression],
        "timestamp_type": batch.timestamp_type,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "last_offset_delta": batch.last_offset_delta,
        "first_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "record_count": batch.record_count,
        "next_offset": batch.next_offset,
        "size": batch.size_in_bytes,
    }
    records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records()]
    return header, records


def aiokafka_view(data: bytes) -> tuple[dict, list[tuple]]:
    batch = AioBatch(bytes(data))
    assert batch.validate_crc(), "aiokafka finds the CRC invalid"
    header = {
        "base_offset": batch.base_offset,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "compression": batch.compression_type,
        "timestamp_type": batch.timestamp_type,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control_batch,
        "last_offset_delta": batch.last_offset_delta,
        "first_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "next_offset": batch.next_offset,
    }
    records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return header, records


def kafka_python_view(data: bytes | KafkaPythonBatch) -> tuple[dict, list[tuple]]:
    batch = data if isinstance(data, KafkaPythonBatch) else KafkaPythonBatch(bytes(data))
    assert batch.validate_crc(), "kafka-python finds the CRC invalid"
    header = {
        "base_offset": batch.base_offset,
        "partition_leader_epoch": batch.leader_epoch,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "compression": batch.compression_type,
        "timestamp_type": batch.timestamp_type,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control_batch,
        "last_offset_delta": batch.last_offset_delta,
        "first_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "record_count": batch.records_count,
        "next_offset": batch.next_offset,
        "size": batch.size_in_bytes,
    }
    records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return header, records


def common_fields(ours: dict, theirs: dict) -> tuple[dict, dict]:
    shared = ours.keys() & theirs.keys()
    return {k: ours[k] for k in shared}, {k: theirs[k] for k in shared}


def assert_same_header(ours: dict, theirs: dict) -> None:
    mine, peer = common_fields(ours, theirs)
    assert len(mine) >= 15, f"too few fields compared: {sorted(mine)}"
    assert mine == peer


def restamp(data: bytes | bytearray, *, set_bits: int = 0, base_offset=None, epoch=None) -> bytes:
    """Change a batch as a broker or a test may: attribute bits (CRC recomputed), or the base
    offset and partition leader epoch (which the CRC does not cover, so it stays)."""
    out = bytearray(data)
    if set_bits:
        (attributes,) = struct.unpack_from(">h", out, ATTRIBUTES_AT)
        struct.pack_into(">h", out, ATTRIBUTES_AT, attributes | set_bits)
        struct.pack_into(">I", out, 17, crc32c_package.crc32c(bytes(out[ATTRIBUTES_AT:])))
    if base_offset is not None:
        struct.pack_into(">q", out, 0, base_offset)
    if epoch is not None:
        struct.pack_into(">i", out, 12, epoch)
    return bytes(out)


# ---- the peers under test -------------------------------------------------------------------


def test_aiokafka_record_codec_in_use_is_its_c_extension():
    """aiokafka silently falls back to pure Python when its extension does not load; these
    cross-checks are meant to exercise the C codec."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    module = aiokafka_c.default_records
    assert module.__file__.endswith(suffixes), module.__file__
    assert aiokafka_default.DefaultRecordBatch is aiokafka_c.DefaultRecordBatch
    assert aiokafka_default.DefaultRecordBatchBuilder is aiokafka_c.DefaultRecordBatchBuilder
    assert aiokafka_memory.MemoryRecords is aiokafka_c.MemoryRecords
    assert aiokafka.codec.has_zstd(), "aiokafka needs cramjam for zstd"


def test_peers_number_compression_codecs_as_raftcore_names_them():
    """Producers name codecs by string; the batch attributes carry the number. raftcore's
    names must map to the same numbers as both peers'."""
    assert COMPRESSION_NAMES == ("none", "gzip", "snappy", "lz4", "zstd")
    for name in ("gzip", "snappy", "lz4", "zstd"):
        assert AIOKafkaProducer._COMPRESSORS[name][1] == CODES[name]
        assert KafkaProducer._COMPRESSORS[name][1] == CODES[name]
    for codes in (aiokafka_default.DefaultRecordBase, KafkaPythonBatch):
        assert (codes.CODEC_NONE, codes.CODEC_GZIP, codes.CODEC_ZSTD) == (0, 1, 4)
        assert (codes.CODEC_SNAPPY, codes.CODEC_LZ4) == (2, 3)


# ---- raftcore writes, peers read ------------------------------------------------------------


@SETTINGS
@given(recs=record_lists, params=batch_params, compression=compressions)
def test_raftcore_batch_reads_identically_in_aiokafka(recs, params, compression):
    data = build_batch(recs, compression=compression, **params)
    ours, our_records = raftcore_view(data)
    theirs, their_records = aiokafka_view(data)
    assert_same_header(ours, theirs)
    assert theirs["compression"] == CODES[compression]
    assert their_records == our_records == expected_records(recs, params["base_offset"])


@SETTINGS
@given(recs=record_lists, params=batch_params, compression=compressions)
def test_raftcore_batch_reads_identically_in_kafka_python(recs, params, compression):
    data = build_batch(recs, compression=compression, **params)
    ours, our_records = raftcore_view(data)
    theirs, their_records = kafka_python_view(data)
    assert_same_header(ours, theirs)
    assert theirs == {
        **theirs,
        "base_offset": params["base_offset"],
        "partition_leader_epoch": params["leader_epoch"],
        "producer_id": params["producer_id"],
        "producer_epoch": params["producer_epoch"],
        "base_sequence": params["base_sequence"],
        "first_timestamp": recs[0][3],
        "max_timestamp": max(r[3] for r in recs),
        "last_offset_delta": len(recs) - 1,
        "record_count": len(recs),
        "compression": CODES[compression],
        "is_control": False,
        "is_transactional": False,
        "timestamp_type": 0,
        "size": len(data),
    }
    assert their_records == our_records == expected_records(recs, params["base_offset"])


@settings(SETTINGS, max_examples=example_count(25))
@given(
    batches=st.lists(st.tuples(record_lists, compressions), min_size=1, max_size=4),
    first_offset=st.integers(0, 2**40),
    epoch=st.integers(0, 1000),
)
def test_raftcore_log_of_batches_walks_identically_in_peer_memory_records(
    batches, first_offset, epoch
):
    """A run of batches back to back, as a log segment or a fetch response holds them."""
    data = b""
    offset = first_offset
    for recs, compression in batches:
        data += build_batch(recs, compression=compression, base_offset=offset, leader_epoch=epoch)
        offset += len(recs)
    ours = [raftcore_view(b.to_bytes()) for b in iter_batches(data)]
    assert len(ours) == len(batches)

    walked = KafkaPythonMemoryRecords(data)
    theirs = [kafka_python_view(batch) for batch in walked]
    assert walked.valid_bytes() == len(data)
    expected, offset = [], first_offset
    for recs, _ in batches:
        expected.append(expected_records(recs, offset))
        offset += len(recs)
    assert [records for _, records in ours] == expected
    assert [records for _, records in theirs] == expected
    for (mine, _), (peer, _) in zip(ours, theirs, strict=True):
        assert_same_header(mine, peer)

    aio = AioMemoryRecords(data)
    aio_records = []
    while aio.has_next():
        batch = aio.next_batch()
        assert batch.validate_crc()
        aio_records.append(
            [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        )
    assert aio_records == expected


@SETTINGS
@given(
    keys=st.lists(nullable_payloads, min_size=1, max_size=6),
    params=batch_params,
    timestamp=timestamps,
    compression=compressions,
)
def test_encode_batch_kv_reads_identically_in_peers(keys, params, timestamp, compression):
    values = [b"value-%d" % i for i in range(len(keys))]
    data = encode_batch_kv(keys, values, timestamp_ms=timestamp, compression=compression, **params)
    expected = [
        (params["base_offset"] + i, timestamp, k, v, [])
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    assert aiokafka_view(data)[1] == kafka_python_view(data)[1] == expected


# ---- peers write, raftcore reads ------------------------------------------------------------

peer_records = st.lists(
    st.tuples(
        nullable_payloads,
        nullable_payloads,
        st.lists(st.tuples(header_keys, st.none() | payloads), max_size=3),
        timestamps,
        st.integers(1, 3),
    ),
    min_size=1,
    max_size=8,
)
peer_batch_fields = st.fixed_dictionaries(
    {
        "compression": compressions,
        "transactional": st.booleans(),
        "producer_id": st.integers(-1, 2**63 - 1),
        "producer_epoch": st.integers(-1, 2**15 - 1),
        "base_sequence": st.integers(-1, 2**31 - 1),
        "base_offset": st.integers(0, 2**62),
        "epoch": st.integers(-1, 2**31 - 1),
    }
)


def without_no_timestamp(recs: list[tuple]) -> list[tuple]:
    """aiokafka's C builder takes a first timestamp of -1 (Kafka's NO_TIMESTAMP) for "no record
    yet": it writes base timestamp 0 and rebases the next record. Batches for it are generated
    without -1 timestamps (kafka-python's builder handles -1 and keeps them)."""
    return [(*r[:3], 0 if r[3] == -1 else r[3], *r[4:]) for r in recs]


def build_with_peer(builder_class, recs, fields) -> tuple[bytes, list[tuple]]:
    """Build a batch with a peer's builder. Offset deltas skip ahead by 1-3 (as after
    compaction); the base offset and leader epoch are then assigned as a broker does."""
    builder = builder_class(
        magic=2,
        compression_type=CODES[fields["compression"]],
        is_transactional=fields["transactional"],
        producer_id=fields["producer_id"],
        producer_epoch=fields["producer_epoch"],
        base_sequence=fields["base_sequence"],
        batch_size=1 << 30,
    )
    expected = []
    delta = -1
    for key, value, hdrs, timestamp, step in recs:
        delta += step
        assert builder.append(delta, timestamp, key, value, hdrs) is not None
        expected.append((fields["base_offset"] + delta, timestamp, key, value, hdrs))
    data = restamp(builder.build(), base_offset=fields["base_offset"], epoch=fields["epoch"])
    return data, expected


@pytest.mark.parametrize("peer", ["aiokafka", "kafka-python"])
@SETTINGS
@given(recs=peer_records, fields=peer_batch_fields)
def test_peer_built_batch_reads_identically_in_raftcore(peer, recs, fields):
    builder_class = AioBuilder if peer == "aiokafka" else KafkaPythonBuilder
    peer_view = aiokafka_view if peer == "aiokafka" else kafka_python_view
    if peer == "aiokafka":
        recs = without_no_timestamp(recs)
    data, expected = build_with_peer(builder_class, recs, fields)
    ours, our_records = raftcore_view(data)
    theirs, their_records = peer_view(data)
    assert_same_header(ours, theirs)
    assert our_records == their_records == expected
    assert ours["partition_leader_epoch"] == fields["epoch"]
    assert ours["is_transactional"] == fields["transactional"]
    assert ours["last_offset_delta"] == expected[-1][0] - fields["base_offset"]
    # A peer sends uncompressed when compressing does not make the batch smaller.
    assert ours["compression"] in (0, CODES[fields["compression"]])


@pytest.mark.parametrize("peer", ["aiokafka", "kafka-python"])
@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_peer_compressed_batch_reads_identically_in_raftcore(peer, compression):
    """The generated batches above may come back uncompressed; these surely do not."""
    builder_class = AioBuilder if peer == "aiokafka" else KafkaPythonBuilder
    peer_view = aiokafka_view if peer == "aiokafka" else kafka_python_view
    recs = [
        (b"key-%d" % i, b"a fairly compressible value " * 20, [("i", b"%d" % i)], T + i, 1)
        for i in range(10)
    ]
    fields = {
        "compression": compression,
        "transactional": True,
        "producer_id": 4000,
        "producer_epoch": 2,
        "base_sequence": 100,
        "base_offset": 12345,
        "epoch": 6,
    }
    data, expected = build_with_peer(builder_class, recs, fields)
    ours, our_records = raftcore_view(data)
    assert ours["compression"] == CODES[compression]
    assert our_records == peer_view(data)[1] == expected


@settings(SETTINGS, max_examples=example_count(25))
@given(
    recs=st.lists(
        st.tuples(nullable_payloads, nullable_payloads, timestamps), min_size=1, max_size=6
    ),
    skip=st.integers(0, 5),
    compression=compressions,
)
def test_kafka_python_memory_records_builder_batch_reads_identically_in_raftcore(
    recs, skip, compression
):
    """kafka-python's MemoryRecordsBuilder, as its producer uses it (offsets from `skip`)."""
    builder = KafkaPythonMemoryRecordsBuilder(
        magic=2, compression_type=CODES[compression], batch_size=1 << 30
    )
    builder.skip(skip)
    for key, value, timestamp in recs:
        assert builder.append(timestamp, key, value) is not None
    builder.close()
    data = bytes(builder.buffer())
    _, our_records = raftcore_view(data)
    assert our_records == [(skip + i, t, k, v, []) for i, (k, v, t) in enumerate(recs)]


# ---- control batches ------------------------------------------------------------------------

control_types = st.one_of(st.sampled_from(list(ControlRecordType)), st.integers(7, 2**15 - 1))


@settings(SETTINGS, max_examples=example_count(40))
@given(
    control_type=control_types,
    value=st.binary(max_size=64),
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(0, 2**31 - 1),
    timestamp=timestamps,
)
def test_raftcore_control_batch_reads_as_control_in_peers(
    control_type, value, base_offset, epoch, timestamp
):
    data = encode_control_batch(
        control_type, value, base_offset=base_offset, leader_epoch=epoch, timestamp_ms=timestamp
    )
    key = struct.pack(">hh", 0, control_type)
    assert control_record_key(control_type) == key

    aio = AioBatch(data)
    assert aio.validate_crc() and aio.is_control_batch
    assert [(r.offset, r.key, r.value) for r in aio] == [(base_offset, key, value)]

    kp = KafkaPythonBatch(data)
    assert kp.validate_crc() and kp.is_control_batch
    (record,) = list(kp)
    assert isinstance(record, KafkaPythonControlRecord)
    assert (record.version, record.type, record.key, record.value) == (0, control_type, key, value)
    assert record.abort == (control_type == ControlRecordType.ABORT)
    assert record.commit == (control_type == ControlRecordType.COMMIT)

    (batch,) = list(iter_batches(data))
    assert batch.control_type == control_type


@pytest.mark.parametrize("peer", ["aiokafka", "kafka-python"])
@pytest.mark.parametrize("control_type", list(ControlRecordType))
def test_peer_batch_restamped_as_control_reads_as_control_in_raftcore(peer, control_type):
    """The peers' builders cannot set the control bit; a control record's key and value written
    by a peer builder, with bit 5 set afterwards, must read as that control type."""
    builder_class = AioBuilder if peer == "aiokafka" else KafkaPythonBuilder
    builder = builder_class(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    key = struct.pack(">hh", 0, control_type)
    builder.append(0, 1_700_000_000_000, key, b"\x00\x00\x00\x00\x00\x01", [])
    plain = bytes(builder.build())
    (batch,) = list(iter_batches(plain))
    assert not batch.is_control and batch.control_type is None

    data = restamp(plain, set_bits=CONTROL_BIT, base_offset=77, epoch=4)
    (batch,) = list(iter_batches(data))
    assert batch.is_valid() and batch.is_control
    assert batch.control_type == control_type
    assert [(r.offset, r.key) for r in batch.records()] == [(77, key)]


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_log_append_time_batch_timestamps_agree_with_peers(compression):
    """With attribute bit 3 set (as a broker with LogAppendTime does), every record's
    timestamp is the batch's max timestamp, in all three readers."""
    recs = [(b"a", b"1", [], 1000), (b"b", b"2", [], 5000), (None, b"3" * 500, [], 3000)]
    data = build_batch(recs, compression=compression, base_offset=10, leader_epoch=1)
    data = restamp(data, set_bits=LOG_APPEND_TIME_BIT)
    expected = expected_records(recs, 10, log_append_time=True)
    assert [r[1] for r in expected] == [5000, 5000, 5000]
    assert raftcore_view(data)[1] == aiokafka_view(data)[1] == kafka_python_view(data)[1]
    assert raftcore_view(data)[1] == expected
    assert raftcore_view(data)[0]["timestamp_type"] == 1


# ---- identical bytes ------------------------------------------------------------------------


def peer_bytes(builder_class, recs, compression, producer) -> bytes:
    builder = builder_class(
        magic=2,
        compression_type=CODES[compression],
        is_transactional=False,
        batch_size=1 << 30,
        **producer,
    )
    for i, (key, value, hdrs, timestamp) in enumerate(recs):
        builder.append(i, timestamp, key, value, hdrs)
    return bytes(builder.build())


producer_fields = st.fixed_dictionaries(
    {
        "producer_id": st.integers(-1, 2**63 - 1),
        "producer_epoch": st.integers(-1, 2**15 - 1),
        "base_sequence": st.integers(-1, 2**31 - 1),
    }
)


@pytest.mark.parametrize(
    ("peer", "builder_class", "peer_epoch"),
    [("aiokafka", AioBuilder, -1), ("kafka-python", KafkaPythonBuilder, 0)],
)
@SETTINGS
@given(recs=record_lists, producer=producer_fields, compression=st.sampled_from(["none", "zstd"]))
def test_encoding_is_byte_identical_to_peer(
    peer, builder_class, peer_epoch, recs, producer, compression
):
    """Uncompressed, and zstd at level 3 (both peers' default, and raftcore's), give the same
    bytes as the peer's builder once the partition leader epoch is the peer's default
    (aiokafka writes -1, kafka-python 0) and the base offset is 0 (the broker assigns it).
    When compressing does not shrink the batch a peer writes it uncompressed; the comparison is
    then with raftcore's uncompressed encoding."""
    if peer == "aiokafka":
        recs = without_no_timestamp(recs)
    theirs = peer_bytes(builder_class, recs, compression, producer)
    (peer_batch,) = list(iter_batches(theirs))
    effective = peer_batch.compression
    ours = build_batch(recs, compression=effective, leader_epoch=peer_epoch, **producer)
    assert ours == theirs


@SETTINGS
@given(recs=record_lists)
def test_gzip_payload_inflates_to_the_same_record_bytes_as_peers(recs):
    """gzip output differs between compressors (level, header mtime), but the records it
    inflates to must be the very bytes of the uncompressed encoding."""
    plain = build_batch(recs, compression="none", leader_epoch=-1)
    ours = build_batch(recs, compression="gzip", leader_epoch=-1)
    assert gzip.decompress(ours[61:]) == plain[61:]
    for builder_class in (AioBuilder, KafkaPythonBuilder):
        if builder_class is AioBuilder:
            recs = without_no_timestamp(recs)
            plain = build_batch(recs, compression="none", leader_epoch=-1)
        theirs = peer_bytes(
            builder_class,
            recs,
            "gzip",
            {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1},
        )
        (batch,) = list(iter_batches(theirs))
        if batch.compression == "gzip":
            assert gzip.decompress(theirs[61:]) == plain[61:]
        else:
            assert theirs[61:] == plain[61:]


# ---- golden vectors -------------------------------------------------------------------------


def load_vectors() -> dict[str, dict]:
    return json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))


def vector_records(spec: dict) -> list[tuple]:
    def raw(text):
        if isinstance(text, dict):  # a run of one byte
            return bytes.fromhex(text["hex"]) * text["repeat"]
        return None if text is None else bytes.fromhex(text)

    return [
        (raw(r["key"]), raw(r["value"]), [(k, raw(v)) for k, v in r["headers"]], r["timestamp"])
        for r in spec["records"]
    ]


VECTOR_SPECS = load_vectors()


@pytest.mark.parametrize("name", [n for n, spec in VECTOR_SPECS.items() if spec["reproducible"]])
def test_encoder_reproduces_golden_vector(name):
    spec = VECTOR_SPECS[name]
    expected = (VECTORS / f"{name}.bin").read_bytes()
    data = build_batch(vector_records(spec), **spec["encode"])
    assert data.hex() == expected.hex()


@pytest.mark.parametrize("name", list(VECTOR_SPECS))
def test_decoders_read_golden_vector(name):
    spec = VECTOR_SPECS[name]
    data = (VECTORS / f"{name}.bin").read_bytes()
    base_offset = spec["header"]["base_offset"]
    expected = expected_records(vector_records(spec), base_offset)
    ours, our_records = raftcore_view(data)
    assert {k: ours[k] for k in spec["header"]} == spec["header"]
    assert our_records == expected
    for view in (aiokafka_view, kafka_python_view):
        theirs, their_records = view(data)
        assert_same_header(ours, theirs)
        assert their_records == expected
    if "control_type" in spec:
        (batch,) = list(iter_batches(data))
        assert batch.control_type == spec["control_type"]
