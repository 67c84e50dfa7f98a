"""Unit tests of raftcore's record batch v2 codec, one format or API rule per test, plus a
differential test against the naive reference in ``tests/reference/record_batch_ref.py``.

Layout (KRAFT.md section 3): BaseOffset@0 Length@8 PartitionLeaderEpoch@12 Magic@16 CRC@17
Attributes@21 LastOffsetDelta@23 BaseTimestamp@27 MaxTimestamp@35 ProducerId@43
ProducerEpoch@51 BaseSequence@53 RecordsCount@57 records@61.
"""

from __future__ import annotations

import gc
import gzip
import struct
import sys
import time
import zlib

import crc32c as crc32c_package
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from record_strategies import (
    batch_params,
    build_batch,
    example_count,
    expected_records,
    record_lists,
)
from reference import record_batch_ref as ref

from raftcore.compression import XERIAL_MAGIC, compress_lz4, compress_snappy
from raftcore.records import (
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    BatchScan,
    ControlRecordType,
    CorruptRecordError,
    Record,
    RecordBatch,
    check_batch_crcs,
    control_record_key,
    encode_batch,
    encode_batch_kv,
    encode_control_batch,
    find_batch,
    get_max_decompressed_size,
    iter_batches,
    parse_control_record_key,
    restamp_batches,
    restamp_scanned,
    scan_batches,
    set_max_decompressed_size,
    span_batches,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
T = 1_700_000_000_000

SETTINGS = settings(
    max_examples=example_count(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


HEADER_NAMES = (
    "base_offset",
    "length",
    "epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "count",
)


def header_of(data: bytes, at: int = 0) -> dict:
    return dict(zip(HEADER_NAMES, HEADER.unpack_from(data, at), strict=True))


def only_batch(data) -> RecordBatch:
    (batch,) = list(iter_batches(data))
    return batch


def read(data) -> list[tuple]:
    return [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for b in iter_batches(data)
        for r in b.records()
    ]


def restamp_crc(data: bytes | bytearray) -> bytes:
    """Recompute the CRC after a deliberate change, so that the change itself is what a
    reader sees (not a CRC failure)."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c_package.crc32c(bytes(out[21:])))
    return bytes(out)


def with_records(
    records: bytes, *, count: int, last_offset_delta: int | None = None, attributes: int = 0
) -> bytes:
    """A batch around hand-made record bytes (or a payload), with a valid CRC."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, last, T, T, -1, -1, -1, count) + records
    head = struct.pack(">qiibI", 0, 9 + len(after_crc), 0, 2, 0)
    return restamp_crc(head + after_crc)


@pytest.fixture
def decompression_limit():
    """Set the decompression limit for one test and restore it afterwards."""
    before = get_max_decompressed_size()
    yield set_max_decompressed_size
    set_max_decompressed_size(before)


# ---- batch header ---------------------------------------------------------------------------


def test_batch_header_fields_sit_at_kafka_byte_offsets():
    data = encode_batch(
        [(b"k", b"v"), (b"k2", b"v2"), (None, b"v3")],
        base_offset=1234,
        leader_epoch=56,
        timestamp_ms=T,
        producer_id=777,
        producer_epoch=8,
        base_sequence=99,
    )
    h = header_of(data)
    assert h["base_offset"] == 1234
    assert h["epoch"] == 56
    assert h["magic"] == 2
    assert h["attributes"] == 0
    assert h["last_offset_delta"] == 2
    assert h["base_timestamp"] == h["max_timestamp"] == T
    assert (h["producer_id"], h["producer_epoch"], h["base_sequence"]) == (777, 8, 99)
    assert h["count"] == 3
    assert RECORD_BATCH_OVERHEAD == HEADER.size == 61


def test_length_field_is_batch_size_minus_12():
    for value in (b"", b"x" * 100, b"y" * 10_000):
        data = encode_batch([(None, value)], timestamp_ms=T)
        assert header_of(data)["length"] == len(data) - 12
        assert only_batch(data).size_in_bytes == len(data)


def test_producer_fields_default_to_minus_one_and_leader_epoch_to_zero():
    h = header_of(encode_batch([(b"k", b"v")], timestamp_ms=T))
    assert (h["producer_id"], h["producer_epoch"], h["base_sequence"]) == (-1, -1, -1)
    assert h["epoch"] == 0
    assert header_of(encode_batch([(b"k", b"v")], leader_epoch=-1))["epoch"] == -1


def test_crc_is_crc32c_castagnoli_of_attributes_to_end():
    data = encode_batch([(b"key", b"value", [("h", b"v")])], timestamp_ms=T)
    stored = header_of(data)["crc"]
    assert stored == crc32c_package.crc32c(data[21:])
    assert stored != zlib.crc32(data[21:])  # not the IEEE CRC-32
    batch = only_batch(data)
    assert batch.crc == batch.compute_crc() == stored


def test_crc_covers_attributes_to_end_but_not_partition_leader_epoch():
    data = encode_batch([(b"key", b"value")], base_offset=5, leader_epoch=3, timestamp_ms=T)
    # Base offset and leader epoch: a broker assigns them without computing a new CRC.
    restamped = bytearray(data)
    struct.pack_into(">q", restamped, 0, 999)
    struct.pack_into(">i", restamped, 12, 42)
    batch = only_batch(bytes(restamped))
    assert batch.is_valid()
    assert (batch.base_offset, batch.partition_leader_epoch) == (999, 42)
    # Every byte from the attributes to the end is covered.
    for i in range(21, len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        try:
            batch = only_batch(bytes(flipped))
        except CorruptRecordError:
            continue  # the flip made the header itself unreadable
        assert not batch.is_valid(), f"flipping byte {i} went unnoticed"


def test_flipped_crc_byte_fails_validation():
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
    data[17] ^= 0x80
    batch = only_batch(bytes(data))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError):
        batch.validate()


def test_records_get_consecutive_offsets_from_base_offset():
    data = encode_batch([(None, b"%d" % i) for i in range(5)], base_offset=100, timestamp_ms=T)
    assert [r[0] for r in read(data)] == [100, 101, 102, 103, 104]
    batch = only_batch(data)
    assert (batch.last_offset_delta, batch.last_offset, batch.next_offset) == (4, 104, 105)
    assert len(batch) == batch.record_count == 5


def test_base_timestamp_is_first_records_and_max_timestamp_the_largest():
    builder = BatchBuilder(timestamp_ms=0)
    for ts in (5000, 9000, 1000, 7000):
        builder.append(None, b"v", timestamp_ms=ts)
    batch = only_batch(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (5000, 9000)
    assert [r.timestamp for r in batch.records()] == [5000, 9000, 1000, 7000]


def test_record_timestamp_delta_is_a_signed_zigzag_varlong():
    builder = BatchBuilder(timestamp_ms=0)
    builder.append(None, None, timestamp_ms=T + 500)
    builder.append(None, None, timestamp_ms=T)  # delta -500: zig-zag 999 = e7 07
    data = builder.build()
    second = data[61 + 7 :]  # the first record is 7 bytes: 0c 00 00 00 01 01 00
    assert data[61:68].hex() == "0c000000010100"
    assert second.hex() == "0e00e7070201" + "0100"


def test_timestamp_defaults_to_the_wall_clock():
    before = int(time.time() * 1000)
    batch = only_batch(encode_batch([(b"k", b"v")]))
    after = int(time.time() * 1000)
    assert before - 5 <= batch.base_timestamp <= after + 5


def test_log_append_time_batch_reports_max_timestamp_for_every_record():
    builder = BatchBuilder(timestamp_ms=0)
    for ts in (3000, 1000, 2000):
        builder.append(None, b"v", timestamp_ms=ts)
    data = bytearray(builder.build())
    data[22] |= 0x08  # attributes bit 3: LogAppendTime
    batch = only_batch(restamp_crc(data))
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch.records()] == [3000, 3000, 3000]
    assert only_batch(encode_batch([(None, b"v")], timestamp_ms=T)).timestamp_type == 0


# ---- records --------------------------------------------------------------------------------


def test_record_with_null_key_encodes_length_minus_one():
    data = encode_batch([(None, b"v")], timestamp_ms=T)
    # length, attributes, ts delta, offset delta, then the key length: zig-zag(-1) = 01
    assert data[61:].hex() == "0e000000" + "01" + "0276" + "00"
    assert read(data)[0][2] is None


def test_record_with_null_value_encodes_length_minus_one():
    data = encode_batch([(b"k", None)], timestamp_ms=T)
    assert data[61:].hex() == "0e000000" + "026b" + "01" + "00"
    assert read(data)[0][3] is None


def test_record_with_empty_key_and_value_encodes_length_zero_not_null():
    data = encode_batch([(b"", b"")], timestamp_ms=T)
    assert data[61:].hex() == "0c000000" + "00" + "00" + "00"
    assert read(data)[0][2:4] == (b"", b"")


def test_record_lengths_are_zigzag_varints():
    data = encode_batch([(b"k" * 64, None)], timestamp_ms=T)
    # record length 71 -> zig-zag 142 -> 8e 01; key length 64 -> 128 -> 80 01; null value 01
    assert data[61:68].hex() == "8e01" + "000000" + "8001"
    assert data[68 + 64 :].hex() == "01" + "00"


def test_record_attributes_byte_is_zero():
    data = encode_batch([(b"k", b"v"), (b"k", b"v")], timestamp_ms=T)
    assert data[62] == 0
    assert data[62 + 9] == 0


def test_headers_round_trip_as_tuple_of_str_and_optional_bytes():
    hdrs = [("trace", b"\x00\x01"), ("ключ", None), ("", b""), ("🙂", b"x" * 200)]
    data = encode_batch([(b"k", b"v", hdrs)], timestamp_ms=T)
    (record,) = only_batch(data).records()
    assert record.headers == tuple(hdrs)
    assert isinstance(record.headers, tuple)


def test_header_key_given_as_bytes_is_written_as_is():
    data = encode_batch([(b"k", b"v", [(b"raw", b"1")])], timestamp_ms=T)
    assert read(data)[0][4] == (("raw", b"1"),)


def test_values_may_be_any_contiguous_buffer():
    values = [bytearray(b"ba"), memoryview(b"mv"), np.frombuffer(b"np", dtype=np.uint8)]
    data = encode_batch([(v, v, [("h", v)]) for v in values], timestamp_ms=T)
    assert [(r[2], r[3], r[4]) for r in read(data)] == [
        (b"ba", b"ba", (("h", b"ba"),)),
        (b"mv", b"mv", (("h", b"mv"),)),
        (b"np", b"np", (("h", b"np"),)),
    ]


def test_record_equality_and_hash_cover_every_field():
    (a,) = only_batch(encode_batch([(b"k", b"v", [("h", b"1")])], timestamp_ms=T)).records()
    (b,) = only_batch(encode_batch([(b"k", b"v", [("h", b"1")])], timestamp_ms=T)).records()
    assert isinstance(a, Record)
    assert a == b and hash(a) == hash(b)
    for other in (
        encode_batch([(b"k", b"v", [("h", b"1")])], timestamp_ms=T + 1),
        encode_batch([(b"k", b"v", [("h", b"1")])], base_offset=1, timestamp_ms=T),
        encode_batch([(b"K", b"v", [("h", b"1")])], timestamp_ms=T),
        encode_batch([(b"k", b"V", [("h", b"1")])], timestamp_ms=T),
        encode_batch([(b"k", b"v", [("h", b"2")])], timestamp_ms=T),
    ):
        (c,) = only_batch(other).records()
        assert a != c
    assert a != "not a record"
    assert "offset=0" in repr(a)


# ---- compression ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "code"), [("none", 0), ("gzip", 1), ("zstd", 4)])
def test_compression_codec_sits_in_attribute_bits_0_to_2(name, code):
    for compression in (name, code):
        data = encode_batch([(b"k", b"v" * 50)], compression=compression, timestamp_ms=T)
        assert header_of(data)["attributes"] == code
        assert only_batch(data).compression == name


def test_gzip_batch_payload_is_gzip_framed_records():
    plain = encode_batch([(b"k", b"v" * 300)] * 3, timestamp_ms=T)
    packed = encode_batch([(b"k", b"v" * 300)] * 3, compression="gzip", timestamp_ms=T)
    assert packed[61:63] == b"\x1f\x8b"
    assert gzip.decompress(packed[61:]) == plain[61:]
    assert len(packed) < len(plain)


def test_zstd_batch_payload_is_a_zstd_frame_of_the_records():
    plain = encode_batch([(b"k", b"v" * 300)] * 3, timestamp_ms=T)
    packed = encode_batch([(b"k", b"v" * 300)] * 3, compression="zstd", timestamp_ms=T)
    assert packed[61:65] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(packed[61:]) == plain[61:]


def test_zstd_frame_without_declared_size_is_read():
    """Kafka's Java producer streams zstd and does not declare the content size."""
    plain = encode_batch([(b"k", b"v" * 3000)] * 3, timestamp_ms=T)
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    payload = compressor.compress(plain[61:])
    assert zstandard.frame_content_size(payload) == -1
    data = with_records(payload, count=3, attributes=4)
    assert [r[3] for r in read(data)] == [b"v" * 3000] * 3


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batch_reads_the_same_records_as_uncompressed(compression):
    recs = [(b"k%d" % i, b"value" * i, [("i", b"%d" % i)]) for i in range(20)]
    plain = encode_batch(recs, base_offset=7, timestamp_ms=T)
    packed = encode_batch(recs, base_offset=7, timestamp_ms=T, compression=compression)
    assert read(packed) == read(plain)


@pytest.mark.parametrize("codec", [2, 3])
def test_snappy_and_lz4_payloads_that_do_not_decompress_are_corrupt(codec):
    """Kafka's codecs 2 and 3 are read now; bytes that are not their format are corrupt,
    like a bad gzip or zstd payload, with the batch's position."""
    data = with_records(b"\x00" * 20, count=1, attributes=codec)
    batch = only_batch(data)
    assert batch.is_valid()
    assert batch.compression == ("snappy" if codec == 2 else "lz4")
    with pytest.raises(CorruptRecordError, match=batch.compression) as info:
        list(batch.records())
    assert info.value.position == 0


def test_snappy_java_stream_reads_as_kafkas_java_producer_writes_it():
    """Kafka's Java producer writes snappy-java's stream (a 16-byte header, then blocks each
    with a 4-byte length); librdkafka writes one raw block. Both must read."""
    recs = [(b"k%d" % i, b"value" * i, [("i", b"%d" % i)]) for i in range(20)]
    plain = encode_batch(recs, timestamp_ms=T)[61:]
    blocks = [plain[:100], plain[100:]]
    stream = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        raw = compress_snappy(block)
        stream += struct.pack(">i", len(raw)) + raw
    data = with_records(stream, count=20, attributes=2)
    assert read(data) == read(encode_batch(recs, timestamp_ms=T))
    truncated = with_records(stream[:-3], count=20, attributes=2)
    with pytest.raises(CorruptRecordError, match="snappy"):
        list(only_batch(truncated).records())


def test_lz4_payload_of_several_frames_reads_whole_and_a_truncated_one_is_corrupt():
    recs = [(b"k%d" % i, b"value" * i, []) for i in range(20)]
    plain = encode_batch(recs, timestamp_ms=T)[61:]
    two_frames = compress_lz4(plain[:150]) + compress_lz4(plain[150:])
    assert read(with_records(two_frames, count=20, attributes=3)) == read(
        encode_batch(recs, timestamp_ms=T)
    )
    with pytest.raises(CorruptRecordError, match="lz4"):
        list(only_batch(with_records(two_frames[:-5], count=20, attributes=3)).records())


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_5_to_7_are_corrupt_not_unsupported(codec):
    """Codec ids above 4 are not a compression raftcore lacks but bytes that are not a Kafka
    batch: CorruptRecordError, as for any other impossible field."""
    data = with_records(b"\x00" * 20, count=1, attributes=codec)
    batch = only_batch(data)
    assert batch.compression == f"unknown({codec})"
    with pytest.raises(CorruptRecordError) as info:
        list(batch.records())
    assert info.value.position == 0


@pytest.mark.parametrize("codec", [1, 4])
def test_corrupt_compressed_payload_raises_corrupt_record_error(codec):
    data = with_records(b"this is not compressed data at all", count=1, attributes=codec)
    with pytest.raises(CorruptRecordError):
        list(only_batch(data).records())


def test_truncated_gzip_payload_is_corrupt():
    packed = encode_batch([(b"k", b"v" * 1000)], compression="gzip", timestamp_ms=T)
    data = with_records(packed[61:-10], count=1, attributes=1)
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(only_batch(data).records())


# ---- decompression bomb limit ---------------------------------------------------------------


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_batch_expanding_beyond_max_decompressed_size_is_corrupt(compression, decompression_limit):
    data = encode_batch([(None, b"\x00" * 100_000)], compression=compression, timestamp_ms=T)
    payload_size = len(encode_batch([(None, b"\x00" * 100_000)], timestamp_ms=T)) - 61
    decompression_limit(payload_size)
    assert read(data)[0][3] == b"\x00" * 100_000  # exactly at the limit: accepted
    decompression_limit(payload_size - 1)
    with pytest.raises(CorruptRecordError, match="expands beyond"):
        list(only_batch(data).records())


def test_zstd_frame_without_declared_size_is_held_to_the_limit(decompression_limit):
    plain = encode_batch([(None, b"\x00" * 300_000)], timestamp_ms=T)
    payload = zstandard.ZstdCompressor(write_content_size=False).compress(plain[61:])
    data = with_records(payload, count=1, attributes=4)
    decompression_limit(len(plain) - 61 - 1)
    with pytest.raises(CorruptRecordError, match="expands beyond"):
        list(only_batch(data).records())


def test_max_decompressed_size_must_be_positive():
    for bad in (0, -1):
        with pytest.raises(ValueError):
            set_max_decompressed_size(bad)


def test_largest_max_decompressed_size_still_decompresses(decompression_limit):
    """Regression: a limit of sys.maxsize overflowed `limit + 1` in the gzip path, and zlib
    refused the negative max_length with a ValueError."""
    decompression_limit(sys.maxsize)
    assert get_max_decompressed_size() == sys.maxsize
    data = encode_batch([(b"k", b"v" * 100)], compression="gzip", timestamp_ms=T)
    assert read(data)[0][3] == b"v" * 100


# ---- control batches ------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlRecordType))
def test_control_type_of_control_batch(control_type):
    data = encode_control_batch(control_type, b"\x00\x00", base_offset=9, leader_epoch=4)
    batch = only_batch(data)
    assert batch.is_control
    assert header_of(data)["attributes"] == 0x20
    assert batch.control_type == control_type
    (record,) = batch.records()
    assert record.key == struct.pack(">hh", 0, control_type)
    assert parse_control_record_key(record.key) == control_type


def test_control_record_types_have_kafkas_released_numbers():
    assert {t.name: t.value for t in ControlRecordType} == {
        "ABORT": 0,
        "COMMIT": 1,
        "LEADER_CHANGE": 2,
        "SNAPSHOT_HEADER": 3,
        "SNAPSHOT_FOOTER": 4,
        "KRAFT_VERSION": 5,
        "KRAFT_VOTERS": 6,
    }


def test_control_type_of_data_batch_is_none():
    assert (
        only_batch(encode_batch([(b"\x00\x00\x00\x02", b"")], timestamp_ms=T)).control_type is None
    )


def test_control_type_is_read_at_byte_2_whatever_the_key_version():
    data = encode_batch([(b"\x00\x07\x00\x03extra", b"")], control=True, timestamp_ms=T)
    assert only_batch(data).control_type == 3
    assert parse_control_record_key(b"\x00\x07\x00\x03") == 3


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_control_record_key_shorter_than_4_bytes_is_corrupt(key):
    # Written with the reference encoder: an encoder may well refuse such a control record.
    data = ref.encode_batch([(key, b"", [], T)], control=True)
    with pytest.raises(CorruptRecordError, match="need 4"):
        _ = only_batch(data).control_type
    with pytest.raises(CorruptRecordError):
        parse_control_record_key(key)


def test_control_type_of_control_batch_with_bad_crc_raises():
    data = bytearray(encode_control_batch(ControlRecordType.LEADER_CHANGE, b"x"))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        _ = only_batch(bytes(data)).control_type


def test_control_record_key_is_version_0_then_type():
    assert control_record_key(ControlRecordType.SNAPSHOT_FOOTER) == b"\x00\x00\x00\x04"


# ---- builder --------------------------------------------------------------------------------


def test_builder_append_uses_its_timestamp_or_the_builders_default():
    builder = BatchBuilder(timestamp_ms=T)
    builder.append(b"a", b"1")
    builder.append(b"b", b"2", timestamp_ms=T + 10)
    builder.append(b"c", b"3", [("h", b"x")])
    assert [(r[1], r[4]) for r in read(builder.build())] == [
        (T, ()),
        (T + 10, ()),
        (T, (("h", b"x"),)),
    ]


def test_builder_counts_records_and_uncompressed_bytes():
    builder = BatchBuilder(timestamp_ms=T, compression="zstd")
    assert (builder.record_count, builder.uncompressed_size) == (0, 61)
    builder.append(b"k", b"v")  # a 9-byte record
    assert (builder.record_count, builder.uncompressed_size) == (1, 70)
    builder.extend([(None, b"")] * 3)
    assert builder.record_count == 4


def test_builder_is_spent_after_build():
    builder = BatchBuilder(timestamp_ms=T)
    builder.append(b"k", b"v")
    builder.build()
    with pytest.raises(RuntimeError):
        builder.build()
    with pytest.raises(RuntimeError):
        builder.append(b"k", b"v")


def test_builder_extend_takes_pairs_and_triples():
    builder = BatchBuilder(timestamp_ms=T)
    builder.extend([(b"a", b"1"), (b"b", b"2", [("h", None)]), [None, b"3"]])
    assert [(r[2], r[3], r[4]) for r in read(builder.build())] == [
        (b"a", b"1", ()),
        (b"b", b"2", (("h", None),)),
        (None, b"3", ()),
    ]


@pytest.mark.parametrize("record", [(b"k",), (b"k", b"v", [], b"extra"), ()])
def test_builder_extend_refuses_tuples_of_other_arity(record):
    with pytest.raises(ValueError, match="items"):
        encode_batch([record], timestamp_ms=T)


def test_builder_extend_kv_with_none_keys_writes_null_keys():
    data = encode_batch_kv(None, [b"a", b"b"], base_offset=3, timestamp_ms=T)
    assert [(r[0], r[2], r[3]) for r in read(data)] == [(3, None, b"a"), (4, None, b"b")]


def test_builder_extend_kv_pairs_keys_with_values_of_any_sequence_type():
    for keys, values in (([b"a", None], [b"1", b"2"]), ((b"a", None), (b"1", b"2"))):
        builder = BatchBuilder(timestamp_ms=T)
        builder.extend_kv(keys, values)
        assert [(r[2], r[3]) for r in read(builder.build())] == [(b"a", b"1"), (None, b"2")]


def test_builder_extend_kv_refuses_lists_of_different_lengths():
    with pytest.raises(ValueError, match="2 keys but 3 values"):
        encode_batch_kv([b"a", b"b"], [b"1", b"2", b"3"])


def test_builder_extend_after_append_continues_offsets():
    builder = BatchBuilder(base_offset=10, timestamp_ms=T)
    builder.append(b"a", b"1")
    builder.extend([(b"b", b"2")])
    builder.extend_kv([b"c"], [b"3"])
    assert [(r[0], r[2]) for r in read(builder.build())] == [(10, b"a"), (11, b"b"), (12, b"c")]


def test_failed_append_leaves_the_batch_as_it_was():
    """Regression: a record refused for a bad value or header still raised the batch's max
    timestamp, so the header disagreed with its records."""
    builder = BatchBuilder(timestamp_ms=0)
    builder.append(b"k", b"v", timestamp_ms=10)
    with pytest.raises(TypeError):
        builder.append(b"k", "not bytes", timestamp_ms=100)
    with pytest.raises(TypeError):
        builder.append(b"k", b"v", [("h", "not bytes")], timestamp_ms=200)
    assert builder.record_count == 1
    batch = only_batch(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (10, 10)
    assert [r.timestamp for r in batch.records()] == [10]


def test_failed_first_append_does_not_set_the_base_timestamp():
    builder = BatchBuilder(timestamp_ms=0)
    with pytest.raises(TypeError):
        builder.append(b"k", "not bytes", timestamp_ms=100)
    builder.append(b"k", b"v", timestamp_ms=5)
    batch = only_batch(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (5, 5)


def test_headers_given_as_an_iterator_are_read_once():
    """Regression: headers were iterated twice (once to size them, once to write them); a
    generator wrote a header count with no headers behind it, a corrupt record."""
    data = encode_batch([(b"k", b"v", (h for h in [("a", b"1"), ("b", None)]))], timestamp_ms=T)
    assert read(data)[0][4] == (("a", b"1"), ("b", None))


def test_headers_that_change_between_iterations_cannot_overrun_the_record():
    """Regression (memory safety): the write pass trusted the sizes of the first pass; an
    iterable yielding more on its second iteration wrote past the space reserved."""

    class Growing:
        calls = 0

        def __iter__(self):
            Growing.calls += 1
            return iter([("h" * 1000 * Growing.calls, b"v" * 1000 * Growing.calls)] * Growing.calls)

        def __bool__(self):
            return True

    data = encode_batch([(b"k", b"v", Growing())], timestamp_ms=T)
    assert read(data)[0][4] == (("h" * 1000, b"v" * 1000),)


def test_header_value_buffers_are_copied_when_counted():
    """A bytearray header value resized by a later header's iteration must not change what
    was counted (regression for the two-pass header write)."""
    value = bytearray(b"short")

    class Grows:
        def __len__(self):
            return 2

        def __iter__(self):
            value.extend(b"x" * 5000)
            return iter(("late", b"1"))

    data = encode_batch([(b"k", b"v", [("early", value), Grows()])], timestamp_ms=T)
    assert read(data)[0][4] == (("early", b"short"), ("late", b"1"))


# ---- bad input to the encoder ---------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [("key", b"v"), (b"k", "value"), (b"k", b"v", [("h", "value")]), (b"k", 5)],
)
def test_str_or_other_non_bytes_key_value_or_header_value_raises_type_error(record):
    with pytest.raises(TypeError):
        encode_batch([record], timestamp_ms=T)


def test_header_key_that_is_not_str_or_bytes_raises_type_error():
    with pytest.raises(TypeError, match="header key"):
        encode_batch([(b"k", b"v", [(1, b"v")])], timestamp_ms=T)


def test_header_key_that_cannot_be_utf8_encoded_raises_unicode_error():
    with pytest.raises(UnicodeEncodeError):
        encode_batch([(b"k", b"v", [("\ud800", b"x")])], timestamp_ms=T)


@pytest.mark.parametrize("header", [("only-key",), ("k", b"v", b"extra")])
def test_header_that_is_not_a_pair_raises_value_error(header):
    with pytest.raises(ValueError, match="pair"):
        encode_batch([(b"k", b"v", [header])], timestamp_ms=T)


@pytest.mark.parametrize("compression", ["LZ4", "bogus", "brotli", 5, -1, None])
def test_unknown_compression_raises_value_error(compression):
    with pytest.raises(ValueError, match="compression"):
        encode_batch([(b"k", b"v")], compression=compression)


def test_empty_batch_raises_value_error():
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch_kv([], [])
    with pytest.raises(ValueError, match="at least one record"):
        BatchBuilder().build()


def test_negative_base_offset_or_leader_epoch_below_minus_one_raises_value_error():
    with pytest.raises(ValueError, match="base_offset"):
        encode_batch([(b"k", b"v")], base_offset=-1)
    with pytest.raises(ValueError, match="leader_epoch"):
        encode_batch([(b"k", b"v")], leader_epoch=-2)


def test_fields_out_of_their_integer_range_raise_overflow_error():
    for kwargs in ({"leader_epoch": 2**31}, {"producer_epoch": 2**15}, {"base_sequence": 2**31}):
        with pytest.raises(OverflowError):
            encode_batch([(b"k", b"v")], **kwargs)


# ---- reading: corruption --------------------------------------------------------------------


def test_truncated_batch_raises_corrupt_record_error_naming_position():
    first = encode_batch([(b"k", b"v")], timestamp_ms=T)
    second = encode_batch([(b"k", b"v" * 100)], base_offset=1, timestamp_ms=T)
    data = first + second[:-1]
    batches = iter_batches(data)
    assert next(batches).base_offset == 0
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        next(batches)
    assert info.value.position == len(first)
    assert f"position {len(first)}" in str(info.value)


def test_iter_batches_adds_base_position_to_error_positions():
    data = encode_batch([(b"k", b"v")], timestamp_ms=T)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(data + data[:20], base_position=4096))
    assert info.value.position == 4096 + len(data)
    assert [b.position for b in iter_batches(data + data, base_position=100)] == [
        100,
        100 + len(data),
    ]


def test_fewer_than_12_trailing_bytes_are_a_truncated_batch():
    data = encode_batch([(b"k", b"v")], timestamp_ms=T)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        list(iter_batches(data + b"\x00" * 11))
    assert info.value.position == len(data)


def test_batch_length_below_the_header_size_is_corrupt():
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
    struct.pack_into(">i", data, 8, 48)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_batches(bytes(data)))


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
def test_magic_other_than_2_is_corrupt(magic):
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
    data[16] = magic
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batches(bytes(data)))


def test_negative_record_count_or_last_offset_delta_is_corrupt():
    for at in (57, 23):
        data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
        struct.pack_into(">i", data, at, -1)
        with pytest.raises(CorruptRecordError):
            list(iter_batches(restamp_crc(data)))


def test_negative_base_offset_is_corrupt():
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
    struct.pack_into(">q", data, 0, -5)
    with pytest.raises(CorruptRecordError, match="negative base offset"):
        list(iter_batches(bytes(data)))


def test_record_count_too_large_for_the_batch_is_corrupt_before_reading_records():
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T))
    struct.pack_into(">i", data, 57, 1000)
    with pytest.raises(CorruptRecordError, match="claims 1000 records"):
        list(iter_batches(restamp_crc(data)))


def test_records_refuse_a_batch_with_a_bad_crc():
    data = bytearray(encode_batch([(b"k", b"value")], timestamp_ms=T))
    data[-3] ^= 0x01
    batch = only_batch(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC") as info:
        batch.records()
    assert info.value.position == 0
    with pytest.raises(CorruptRecordError):
        list(batch)


def test_more_records_than_counted_leaves_bytes_after_the_last_record():
    two = encode_batch([(b"k", b"v"), (b"k", b"v")], timestamp_ms=T)
    data = with_records(two[61:], count=1, last_offset_delta=1)
    with pytest.raises(CorruptRecordError, match="follow the last"):
        list(only_batch(data).records())


def test_fewer_records_than_counted_is_corrupt():
    one = encode_batch([(b"k", b"v")], timestamp_ms=T)
    data = with_records(one[61:] + b"\x00" * 14, count=3)
    with pytest.raises(CorruptRecordError):
        list(only_batch(data).records())


def test_record_offset_deltas_must_increase_and_stay_within_last_offset_delta():
    rec0 = ref.encode_record(0, 0, b"k", b"v")
    rec1_repeat = ref.encode_record(0, 0, b"k", b"v")
    with pytest.raises(CorruptRecordError, match="out of order"):
        list(only_batch(with_records(rec0 + rec1_repeat, count=2)).records())
    beyond = ref.encode_record(5, 0, b"k", b"v")
    with pytest.raises(CorruptRecordError, match="out of order"):
        list(only_batch(with_records(beyond, count=1, last_offset_delta=4)).records())
    # Gaps (compacted batches) are fine.
    gapped = rec0 + ref.encode_record(3, 0, b"k", b"v")
    assert [r[0] for r in read(with_records(gapped, count=2, last_offset_delta=3))] == [0, 3]


def test_record_length_that_disagrees_with_its_fields_is_corrupt():
    good = ref.encode_record(0, 0, b"k", b"v")
    longer = bytes([good[0] + 2]) + good[1:] + b"\x00"  # length says one more byte
    with pytest.raises(CorruptRecordError, match="disagrees"):
        list(only_batch(with_records(longer, count=1)).records())


def test_header_key_that_is_not_utf8_is_corrupt():
    body = b"\x00\x00\x00" + b"\x01\x01" + b"\x02" + b"\x04\xff\xfe" + b"\x01"
    record = ref.encode_varint(len(body)) + body
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        list(only_batch(with_records(record, count=1)).records())


def test_record_error_inside_an_uncompressed_batch_names_the_record_position():
    first = encode_batch([(b"k", b"v")], timestamp_ms=T)
    bad = with_records(b"\x7e" + b"\x00" * 9, count=1)  # record length 63 > 9 bytes left
    with pytest.raises(CorruptRecordError) as info:
        list(list(iter_batches(first + bad))[1].records())
    assert info.value.position == len(first) + 61


def test_reading_from_str_raises_type_error():
    with pytest.raises(TypeError):
        iter_batches("not bytes")
    with pytest.raises(TypeError):
        scan_batches("not bytes")


def test_record_batch_is_not_constructed_directly():
    with pytest.raises(TypeError):
        RecordBatch()


# ---- reading: buffers -----------------------------------------------------------------------


def test_batch_views_the_callers_buffer_and_keeps_it_alive():
    data = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=T) * 2)
    batches = list(iter_batches(data))
    with pytest.raises(BufferError):
        data.extend(b"x")  # exported: cannot be resized under the batches
    second = batches[1]
    view = second.buffer
    assert isinstance(view, memoryview) and view.readonly
    assert bytes(view) == second.to_bytes() == bytes(data[second.position :])
    del data, batches, view
    gc.collect()
    assert [r.value for r in second.records()] == [b"v"]


def test_iter_batches_reads_memoryview_and_mmap_like_buffers():
    data = encode_batch([(b"k", b"v")], timestamp_ms=T) * 3
    assert len(list(iter_batches(memoryview(data)))) == 3
    assert read(memoryview(data)[len(data) // 3 :]) == read(data)[1:]


def test_empty_buffer_has_no_batches():
    assert list(iter_batches(b"")) == []
    scan = scan_batches(b"")
    assert (scan.count, scan.valid_end, scan.error) == (0, 0, None)


# ---- scan_batches ---------------------------------------------------------------------------


def three_batches() -> tuple[bytes, list[bytes]]:
    parts = [
        encode_batch([(b"a", b"1")], base_offset=0, leader_epoch=1, timestamp_ms=T),
        encode_batch(
            [(b"b", b"2")] * 3,
            base_offset=1,
            leader_epoch=1,
            timestamp_ms=T + 1,
            compression="gzip",
        ),
        encode_control_batch(
            ControlRecordType.LEADER_CHANGE, b"x", base_offset=4, leader_epoch=2, timestamp_ms=T + 2
        ),
    ]
    return b"".join(parts), parts


def test_scan_batches_describes_every_whole_valid_batch():
    data, parts = three_batches()
    scan = scan_batches(data)
    assert isinstance(scan, BatchScan)
    assert scan.count == 3 and scan.error is None and scan.error_position == -1
    assert (scan.start, scan.valid_end) == (0, len(data))
    sizes = [len(p) for p in parts]
    assert scan.positions.tolist() == [0, sizes[0], sizes[0] + sizes[1]]
    assert scan.sizes.tolist() == sizes
    assert scan.base_offsets.tolist() == [0, 1, 4]
    assert scan.last_offsets.tolist() == [0, 3, 4]
    assert scan.epochs.tolist() == [1, 1, 2]
    assert scan.max_timestamps.tolist() == [T, T + 1, T + 2]
    assert scan.attributes.tolist() == [0, 1, 0x20]
    scan.raise_error()  # nothing to raise


def test_scan_batches_stops_at_a_bad_crc_with_valid_end_and_error_position():
    data, parts = three_batches()
    broken = bytearray(data)
    broken[len(parts[0]) + 70] ^= 0x10  # inside the second batch's payload
    scan = scan_batches(bytes(broken))
    assert scan.count == 1
    assert scan.valid_end == scan.error_position == len(parts[0])
    assert "CRC" in scan.error
    assert scan.base_offsets.tolist() == [0]
    with pytest.raises(CorruptRecordError) as info:
        scan.raise_error()
    assert info.value.position == len(parts[0])


def test_scan_batches_without_crc_check_passes_a_bad_crc():
    data, parts = three_batches()
    broken = bytearray(data)
    broken[len(parts[0]) + 70] ^= 0x10
    scan = scan_batches(bytes(broken), check_crc=False)
    assert scan.count == 3 and scan.error is None


def test_scan_batches_stops_at_a_truncated_tail():
    data, parts = three_batches()
    cut = len(data) - 5
    scan = scan_batches(data[:cut])
    assert scan.count == 2
    assert scan.valid_end == scan.error_position == len(parts[0]) + len(parts[1])
    assert "truncated" in scan.error


def test_scan_batches_honours_start_end_and_base_position():
    data, parts = three_batches()
    first, second = len(parts[0]), len(parts[1])
    scan = scan_batches(data, first, first + second, base_position=10_000)
    assert scan.count == 1
    assert scan.start == 10_000 + first
    assert scan.positions.tolist() == [10_000 + first]
    assert scan.valid_end == 10_000 + first + second
    # An end inside a batch makes it a truncated one.
    scan = scan_batches(data, 0, first + 10, base_position=10_000)
    assert (scan.count, scan.error_position) == (1, 10_000 + first)


def test_scan_batches_refuses_a_start_outside_the_buffer():
    data, _ = three_batches()
    for start in (-1, len(data) + 1):
        with pytest.raises(ValueError, match="start"):
            scan_batches(data, start)


# ---- find_batch and span_batches ------------------------------------------------------------


def test_find_batch_returns_the_first_batch_whose_last_offset_reaches_the_target():
    data, parts = three_batches()
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    expected = {0: positions[0], 1: positions[1], 2: positions[1], 3: positions[1], 4: positions[2]}
    for target, position in expected.items():
        assert find_batch(data, target) == position
    assert find_batch(data, -100) == 0


def test_find_batch_returns_end_when_no_batch_reaches_the_target():
    data, parts = three_batches()
    assert find_batch(data, 5) == len(data)
    assert find_batch(data, 4, 0, len(parts[0])) == len(parts[0])


def test_find_batch_starts_at_start():
    data, parts = three_batches()
    assert find_batch(data, 0, len(parts[0])) == len(parts[0])


def test_find_batch_raises_on_a_truncated_batch_before_the_target():
    data, _ = three_batches()
    with pytest.raises(CorruptRecordError):
        find_batch(data[:-3], 4)


def test_span_batches_takes_whole_batches_that_fit_in_max_bytes():
    data, parts = three_batches()
    a, b, c = (len(p) for p in parts)
    assert span_batches(data, 0, -1, a + b) == a + b
    assert span_batches(data, 0, -1, a + b - 1) == a
    assert span_batches(data, 0, -1, len(data)) == len(data)
    assert span_batches(data, a, -1, b + c) == len(data)
    assert span_batches(data, 0, a + b, 10**9) == a + b


def test_span_batches_returns_at_least_one_batch_even_if_larger_than_max_bytes():
    data, parts = three_batches()
    assert span_batches(data, 0, -1, 1) == len(parts[0])
    assert span_batches(data, 0, -1, 0) == len(parts[0])
    assert span_batches(data, len(parts[0]), -1, 1) == len(parts[0]) + len(parts[1])


def test_span_batches_of_an_empty_range_is_its_start():
    data, _ = three_batches()
    assert span_batches(data, len(data), -1, 100) == len(data)


def test_span_batches_raises_on_a_truncated_batch():
    data, _ = three_batches()
    with pytest.raises(CorruptRecordError):
        span_batches(data[:-3], 0, -1, 10**9)


@pytest.mark.parametrize("start", [-1, -61, -(10**9)])
def test_find_batch_and_span_batches_refuse_a_negative_start(start):
    """Regression: a negative start read before the buffer (a segfault for large ones)."""
    data, _ = three_batches()
    with pytest.raises(ValueError, match="start"):
        find_batch(data, 0, start)
    with pytest.raises(ValueError, match="start"):
        span_batches(data, start, -1, 100)


# ---- differential: naive reference ----------------------------------------------------------


@SETTINGS
@given(recs=record_lists, params=batch_params, control=st.booleans())
def test_encoding_is_byte_identical_to_the_naive_reference(recs, params, control):
    if control:  # a control record's key is a version int16 and a type int16
        recs = [(b"\x00\x00\x00" + bytes([i % 7]), *rest) for i, (_, *rest) in enumerate(recs)]
    ours = build_batch(recs, control=control, **params)
    theirs = ref.encode_batch(recs, control=control, **params)
    assert ours == theirs


@SETTINGS
@given(
    recs=record_lists, params=batch_params, compression=st.sampled_from(["none", "gzip", "zstd"])
)
def test_decoding_agrees_with_the_naive_reference(recs, params, compression):
    data = build_batch(recs, compression=compression, **params)
    ours = only_batch(data)
    (theirs,) = ref.decode_batches(data)
    assert (
        ours.base_offset,
        ours.partition_leader_epoch,
        ours.crc,
        ours.attributes,
        ours.last_offset_delta,
        ours.base_timestamp,
        ours.max_timestamp,
        ours.producer_id,
        ours.producer_epoch,
        ours.base_sequence,
        ours.record_count,
        ours.size_in_bytes,
    ) == (
        theirs.base_offset,
        theirs.partition_leader_epoch,
        theirs.crc,
        theirs.attributes,
        theirs.last_offset_delta,
        theirs.base_timestamp,
        theirs.max_timestamp,
        theirs.producer_id,
        theirs.producer_epoch,
        theirs.base_sequence,
        theirs.record_count,
        theirs.size,
    )
    ours_records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours.records()]
    theirs_records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs.records]
    expected = [(*r[:4], tuple(r[4])) for r in expected_records(recs, params["base_offset"])]
    assert ours_records == theirs_records == expected


def _mutate(data: bytes, draw) -> bytes:
    """Overwrite, insert or delete a few bytes of the records, then fix up the batch length
    and the CRC, so that only the record parser can notice."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(61, len(out)))
        kind = draw(st.sampled_from(["set", "insert", "delete"]))
        if kind == "set" and at < len(out):
            out[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif at < len(out):
            del out[at]
    struct.pack_into(">i", out, 8, len(out) - 12)
    return restamp_crc(out)


@settings(SETTINGS, max_examples=example_count(300))
@given(recs=record_lists, data=st.data())
def test_record_parser_agrees_with_the_naive_reference_on_damaged_records(recs, data):
    """Damaged records with a re-stamped CRC: raftcore and the reference must accept the same
    batches and read the same records from them."""
    recs = [(k, v, h, t) for k, v, h, t in recs if (len(k or b"") + len(v or b"")) < 2000]
    assume(recs)
    damaged = _mutate(build_batch(recs, base_offset=3, leader_epoch=1), data.draw)
    try:
        theirs = [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in ref.decode_batch(damaged).records
        ]
    except ref.RefDecodeError:
        theirs = None
    try:
        ours = read(damaged)
    except CorruptRecordError:
        ours = None
    assert ours == theirs


def test_reference_varints_match_kafkas_documented_values():
    """The reference's zig-zag varints against values worked out from Kafka's ByteUtils."""
    assert ref.encode_varint(0) == b"\x00"
    assert ref.encode_varint(-1) == b"\x01"
    assert ref.encode_varint(1) == b"\x02"
    assert ref.encode_varint(63) == b"\x7e"
    assert ref.encode_varint(-64) == b"\x7f"
    assert ref.encode_varint(64) == b"\x80\x01"
    assert ref.encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"
    assert ref.encode_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"
    assert ref.encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert ref.decode_zigzag(b"\xff\xff\xff\xff\x0f", 0, 32) == (-(2**31), 5)
    with pytest.raises(ref.RefDecodeError):
        ref.decode_zigzag(b"\xff\xff\xff\xff\x1f", 0, 32)  # wider than 32 bits


# ---- the log's checks: CRC walks, order rules, control keys ---------------------------------


def _three_batches_with_epochs():
    return b"".join(
        encode_batch([(b"k", b"v" * 10)] * n, base_offset=o, leader_epoch=e)
        for o, n, e in [(0, 2, 1), (2, 3, 1), (5, 1, 4)]
    )


def test_check_batch_crcs_returns_the_position_of_the_first_bad_batch():
    data = bytearray(_three_batches_with_epochs())
    assert check_batch_crcs(bytes(data)) == -1
    second = list(iter_batches(bytes(data)))[1]
    data[second.position + 40] ^= 0x01
    assert check_batch_crcs(bytes(data)) == second.position
    assert check_batch_crcs(bytes(data), 0, second.position) == -1
    assert check_batch_crcs(bytes(data)[: second.position + 5]) == second.position


def test_scan_lists_the_epoch_changes_and_finds_no_break_in_a_sound_log():
    scan = scan_batches(_three_batches_with_epochs())
    assert scan.epoch_starts == [(1, 0), (4, 5)]
    assert scan.discontinuity == -1 and scan.discontinuity_reason is None


def test_scan_reports_the_first_offset_gap_or_epoch_drop():
    a = encode_batch([(b"k", b"v")] * 2, base_offset=0, leader_epoch=3)
    gap = encode_batch([(b"k", b"v")], base_offset=5, leader_epoch=3)
    older = encode_batch([(b"k", b"v")], base_offset=2, leader_epoch=2)
    scan = scan_batches(a + gap)
    assert scan.discontinuity == 1 and "does not follow" in scan.discontinuity_reason
    scan = scan_batches(a + older)
    assert scan.discontinuity == 1 and "epoch drops" in scan.discontinuity_reason


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x02"])
def test_a_control_batch_refuses_a_record_key_that_cannot_hold_a_control_type(key):
    with pytest.raises(ValueError, match="version int16 and a type int16"):
        encode_batch([(key, b"v")], control=True)


def test_restamp_batches_sets_offsets_and_epoch_outside_the_crc():
    data = encode_batch([(b"k", b"v")] * 3) + encode_batch([(b"k", b"w")])
    out, next_offset = restamp_batches(data, 100, 9)
    assert next_offset == 104
    batches = list(iter_batches(out))
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in batches] == [
        (100, 102, 9),
        (103, 103, 9),
    ]
    for b in batches:
        b.validate()


def test_restamp_scanned_writes_offsets_and_epoch_where_the_batches_lie_and_updates_the_scan():
    """A leader restamps a produced request's batches in its receive buffer: no copy, no walk;
    the scan it hands the log then says what was written."""
    data = bytearray(encode_batch([(b"k", b"v")] * 3) + encode_batch([(b"k", b"w")]))
    before = bytes(data)
    scan = scan_batches(data, check_crc=True)
    out, next_offset = restamp_scanned(data, scan, 100, 9)
    assert out is data and next_offset == 104
    assert bytes(data) == restamp_batches(before, 100, 9)[0]
    assert list(scan.base_offsets) == [100, 103] and list(scan.last_offsets) == [102, 103]
    assert list(scan.epochs) == [9, 9] and scan.epoch_starts == [(9, 100)]
    assert scan_batches(data, check_crc=True).error is None  # both fields lie outside the CRC


def test_restamp_scanned_restamps_a_copy_of_a_read_only_buffer():
    # a fixed timestamp: two encodings a millisecond apart differ in it and in the CRC
    data = encode_batch([(b"k", b"v")] * 2, timestamp_ms=1_700_000_000_000)
    out, _ = restamp_scanned(data, scan_batches(data), 5, 1)
    expected = encode_batch([(b"k", b"v")] * 2, timestamp_ms=1_700_000_000_000)
    assert isinstance(out, bytearray) and data == expected
    assert [b.base_offset for b in iter_batches(out)] == [5]


def test_restamp_scanned_refuses_a_scan_of_other_bytes_rather_than_write_out_of_bounds():
    small, large = encode_batch([(b"k", b"v")]), encode_batch([(b"k", b"v")] * 50)
    with pytest.raises(CorruptRecordError, match="not at byte position"):
        restamp_scanned(bytearray(small), scan_batches(large), 0, 1)  # a batch, not that one
    with pytest.raises(CorruptRecordError, match="not at byte position"):
        restamp_scanned(bytearray(small), scan_batches(small + small), 0, 1)  # past the end
    torn = small + large
    with pytest.raises(CorruptRecordError, match="failed their scan"):
        restamp_scanned(bytearray(torn[:-3]), scan_batches(torn[:-3]), 0, 1)


def test_restamp_batches_raises_on_a_truncated_buffer():
    data = encode_batch([(b"k", b"v")] * 3)
    with pytest.raises(CorruptRecordError):
        restamp_batches(data[:-5], 0, 1)
