"""Record batch v2 codec: the format rules, the builder and reader APIs, errors for bad input,
and a differential test against a naive reference encoder/decoder."""

import gzip
import struct

import crc32c as crc32c_package
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from reference.record_batch_ref import decode as ref_decode
from reference.record_batch_ref import encode as ref_encode

from raftcore.records import (
    BatchBuilder,
    ControlRecordType,
    CorruptRecordError,
    UnsupportedCompressionError,
    check_batch_crcs,
    control_record_key,
    encode_batch,
    encode_batch_kv,
    encode_control_batch,
    find_batch,
    get_max_decompressed_size,
    iter_batches,
    parse_control_record_key,
    scan_batches,
    set_max_decompressed_size,
    span_batches,
)

TS = 1_700_000_000_000


def one(data):
    batches = list(iter_batches(data))
    assert len(batches) == 1
    return batches[0]


def header(data):
    return struct.unpack_from(">qiibIhiqqqhii", data)


# ---- the header ---------------------------------------------------------------------------


def test_header_fields_are_written_big_endian_at_kafkas_positions():
    data = encode_batch(
        [(b"a", b"b"), (b"c", b"d")],
        base_offset=7,
        leader_epoch=3,
        timestamp_ms=TS,
        producer_id=99,
        producer_epoch=4,
        base_sequence=12,
    )
    (
        base,
        length,
        epoch,
        magic,
        crc,
        attrs,
        last_delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        seq,
        count,
    ) = header(data)
    assert (base, length, epoch, magic) == (7, len(data) - 12, 3, 2)
    assert (attrs, last_delta, base_ts, max_ts) == (0, 1, TS, TS)
    assert (pid, pepoch, seq, count) == (99, 4, 12, 2)
    assert crc == crc32c_package.crc32c(data[21:])


def test_crc_covers_attributes_to_end_but_not_partition_leader_epoch():
    data = bytearray(encode_batch([(b"k", b"v")], leader_epoch=1, timestamp_ms=TS))
    data[12:16] = struct.pack(">i", 9)  # a leader rewrites the epoch in place
    data[0:8] = struct.pack(">q", 500)  # and the base offset
    batch = one(bytes(data))
    assert batch.is_valid()
    assert (batch.partition_leader_epoch, batch.base_offset) == (9, 500)
    data[21] ^= 0x01  # but not the attributes
    assert not one(bytes(data)).is_valid()


def test_batch_attributes_carry_compression_and_the_control_bit():
    assert one(encode_batch([(b"k", b"v")], compression="gzip")).attributes == 1
    assert one(encode_batch([(b"k", b"v")], compression="zstd")).attributes == 4
    key = control_record_key(ControlRecordType.LEADER_CHANGE)
    assert one(encode_batch([(key, b"v")], control=True)).attributes == 0x20
    b = one(encode_batch([(key, b"v")], compression="zstd", control=True))
    assert (b.attributes, b.compression, b.is_control, b.is_transactional) == (
        0x24,
        "zstd",
        True,
        False,
    )


def test_max_timestamp_is_the_largest_record_timestamp_and_base_the_first():
    b = BatchBuilder(timestamp_ms=TS)
    b.append(b"k", b"1", timestamp_ms=TS + 5)
    b.append(b"k", b"2", timestamp_ms=TS - 3)
    b.append(b"k", b"3", timestamp_ms=TS + 9)
    batch = one(b.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (TS + 5, TS + 9)
    assert [r.timestamp for r in batch.records()] == [TS + 5, TS - 3, TS + 9]


def test_log_append_time_batch_reports_max_timestamp_for_every_record():
    data = bytearray(encode_batch([(b"k", b"v")] * 3, timestamp_ms=TS))
    data[22] |= 0x08  # timestamp type: LogAppendTime
    data[35:43] = struct.pack(">q", TS + 1000)
    data[17:21] = struct.pack(">I", crc32c_package.crc32c(bytes(data[21:])))
    batch = one(bytes(data))
    assert batch.timestamp_type == 1
    assert {r.timestamp for r in batch.records()} == {TS + 1000}


# ---- records ------------------------------------------------------------------------------


def test_record_with_null_key_encodes_length_minus_one():
    data = encode_batch([(None, b"v")], timestamp_ms=TS)
    # record: length, attributes 0, ts delta 0, offset delta 0, key length -1 (zig-zag 0x01)
    assert data[61 + 1 : 61 + 5] == b"\x00\x00\x00\x01"
    assert next(one(data).records()).key is None


def test_record_with_null_value_and_empty_key_round_trips():
    [r] = one(encode_batch([(b"", None)])).records()
    assert (r.key, r.value) == (b"", None)


def test_headers_round_trip_with_unicode_keys_and_null_values():
    headers = [("trace-id", b"\x00\x01"), ("ключ", None), ("", b"")]
    [r] = one(encode_batch([(b"k", b"v", headers)])).records()
    assert r.headers == tuple(headers)


def test_records_get_consecutive_offsets_from_the_base_offset():
    batch = one(encode_batch([(b"k", b"v")] * 5, base_offset=1000))
    assert [r.offset for r in batch.records()] == [1000, 1001, 1002, 1003, 1004]
    assert (batch.last_offset, batch.next_offset, len(batch)) == (1004, 1005, 5)


def test_keys_and_values_may_be_any_bytes_like_object():
    batch = one(encode_batch([(bytearray(b"k"), memoryview(b"xvx")[1:2])]))
    [r] = batch.records()
    assert (r.key, r.value) == (b"k", b"v")


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_every_compression_round_trips_many_records(compression):
    recs = [(b"key%d" % i, b"value-%d-" % i * (i % 7)) for i in range(500)]
    batch = one(encode_batch(recs, compression=compression, timestamp_ms=TS))
    assert batch.compression == compression
    assert [(r.key, r.value) for r in batch.records()] == recs


def test_gzip_payload_has_gzip_framing_and_zstd_payload_is_a_zstd_frame():
    recs = [(b"k", b"v" * 100)] * 10
    gz = encode_batch(recs, compression="gzip")
    assert gz[61:63] == b"\x1f\x8b"
    assert gzip.decompress(gz[61:]) == encode_batch(recs, timestamp_ms=one(gz).base_timestamp)[61:]
    zs = encode_batch(recs, compression="zstd")
    assert zs[61:65] == b"\x28\xb5\x2f\xfd"


def test_a_zstd_frame_without_a_content_size_decodes():
    recs = [(b"k%d" % i, b"v" * 50) for i in range(20)]
    plain = encode_batch(recs, timestamp_ms=TS)
    payload = zstandard.ZstdCompressor(write_content_size=False).compress(plain[61:])
    data = bytearray(plain[:61] + payload)
    data[8:12] = struct.pack(">i", len(data) - 12)
    data[21:23] = struct.pack(">h", 4)
    data[17:21] = struct.pack(">I", crc32c_package.crc32c(bytes(data[21:])))
    assert [(r.key, r.value) for r in one(bytes(data)).records()] == recs


def test_decompression_beyond_the_limit_is_refused():
    data = encode_batch([(b"k", bytes(200_000))], compression="zstd")
    old = get_max_decompressed_size()
    set_max_decompressed_size(100_000)
    try:
        with pytest.raises(CorruptRecordError, match="expands beyond"):
            list(one(data).records())
    finally:
        set_max_decompressed_size(old)
    assert len(next(one(data).records()).value) == 200_000


def test_snappy_and_lz4_batches_are_walked_but_their_records_refused():
    data = bytearray(encode_batch([(b"k", b"v")]))
    data[22] = 2  # snappy
    data[17:21] = struct.pack(">I", crc32c_package.crc32c(bytes(data[21:])))
    batch = one(bytes(data))
    assert batch.compression == "snappy" and batch.is_valid()
    with pytest.raises(UnsupportedCompressionError, match="snappy"):
        list(batch.records())


# ---- control records ----------------------------------------------------------------------


def test_control_record_types_use_kafkas_released_numbers():
    assert [t.value for t in ControlRecordType] == [0, 1, 2, 3, 4, 5, 6]
    assert ControlRecordType.LEADER_CHANGE == 2  # the KIP-595 draft's 3 was not released
    assert control_record_key(ControlRecordType.LEADER_CHANGE) == b"\x00\x00\x00\x02"


def test_control_type_of_control_batch():
    data = encode_control_batch(ControlRecordType.SNAPSHOT_HEADER, b"\x00\x00", leader_epoch=3)
    batch = one(data)
    assert batch.is_control and batch.control_type == 3
    assert one(encode_batch([(b"k", b"v")])).control_type is None


def test_control_key_parsing_reads_the_type_at_byte_2_and_accepts_other_versions():
    assert parse_control_record_key(b"\x00\x07\x00\x05extra") == 5
    with pytest.raises(CorruptRecordError):
        parse_control_record_key(b"\x00\x00\x02")
    data = bytearray(encode_batch([(b"\x00", b"v")]))
    data[22] |= 0x20  # a control batch whose key is too short to hold a type
    data[17:21] = struct.pack(">I", crc32c_package.crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError):
        one(bytes(data)).control_type  # noqa: B018


# ---- builder and errors -------------------------------------------------------------------


def test_builder_extend_and_extend_kv_equal_encode_batch():
    recs = [(b"k%d" % i, b"v%d" % i) for i in range(50)]
    b = BatchBuilder(base_offset=3, leader_epoch=2, timestamp_ms=TS)
    b.extend(recs[:20])
    b.extend_kv([k for k, _ in recs[20:]], [v for _, v in recs[20:]])
    assert b.record_count == 50
    expected = encode_batch(recs, base_offset=3, leader_epoch=2, timestamp_ms=TS)
    assert b.build() == expected
    keys, values = zip(*recs, strict=True)
    assert encode_batch_kv(keys, values, base_offset=3, leader_epoch=2, timestamp_ms=TS) == expected
    assert (
        encode_batch_kv(list(keys), list(values), base_offset=3, leader_epoch=2, timestamp_ms=TS)
        == expected
    )


def test_extend_kv_with_no_keys_writes_null_keys():
    batch = one(encode_batch_kv(None, [b"a", b"b"]))
    assert [r.key for r in batch.records()] == [None, None]


def test_a_builder_can_be_built_once():
    b = BatchBuilder()
    b.append(b"k", b"v")
    b.build()
    with pytest.raises(RuntimeError):
        b.build()
    with pytest.raises(RuntimeError):
        b.append(b"k", b"v")


@pytest.mark.parametrize(
    ("records", "kwargs", "error"),
    [
        ([], {}, ValueError),  # an empty batch
        ([("text", b"v")], {}, TypeError),  # str key
        ([(b"k", "text")], {}, TypeError),  # str value
        ([(b"k",)], {}, ValueError),  # wrong arity
        ([(b"k", b"v", [], 1)], {}, ValueError),
        ([(b"k", b"v", [("h",)])], {}, ValueError),  # a header is a pair
        ([(b"k", b"v", [(1, b"x")])], {}, TypeError),  # header key must be str
        ([(b"k", b"v")], {"compression": "snappy"}, ValueError),
        ([(b"k", b"v")], {"compression": "brotli"}, ValueError),
        ([(b"k", b"v")], {"base_offset": -1}, ValueError),
        ([(b"k", b"v")], {"leader_epoch": -2}, ValueError),
        ([(b"k", 5)], {}, TypeError),
        ([(b"\x00\x00\x02", b"v")], {"control": True}, ValueError),  # control key < 4 bytes
        ([(None, b"v")], {"control": True}, ValueError),
    ],
)
def test_bad_input_raises_a_clear_error(records, kwargs, error):
    with pytest.raises(error):
        encode_batch(records, **kwargs)


def test_extend_kv_refuses_lists_of_different_lengths():
    with pytest.raises(ValueError, match="2 keys but 3 values"):
        encode_batch_kv([b"a", b"b"], [b"1", b"2", b"3"])


# ---- reader errors --------------------------------------------------------------------------


def test_truncated_batch_raises_corrupt_record_error_naming_position():
    first = encode_batch([(b"k", b"v")])
    second = encode_batch([(b"k", b"v")] * 3, base_offset=1)
    data = first + second[:-4]
    it = iter_batches(data)
    next(it)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        next(it)
    assert info.value.position == len(first)
    assert str(len(first)) in str(info.value)


def test_a_short_length_field_and_a_wrong_magic_are_refused():
    data = bytearray(encode_batch([(b"k", b"v")]))
    data[8:12] = struct.pack(">i", 20)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_batches(bytes(data)))
    data = bytearray(encode_batch([(b"k", b"v")]))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batches(bytes(data)))


def test_records_of_a_batch_with_a_bad_crc_are_never_returned():
    data = bytearray(encode_batch([(b"k", b"secret")]))
    data[-1] ^= 0x20
    batch = one(bytes(data))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC"):
        batch.records()


def test_base_position_is_added_to_reported_positions():
    data = encode_batch([(b"k", b"v")])
    batch = one(data)
    assert batch.position == 0
    assert next(iter(iter_batches(data, base_position=4096))).position == 4096
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(data[:-1], base_position=4096))
    assert info.value.position == 4096


def test_iter_batches_rejects_str():
    with pytest.raises(TypeError):
        list(iter_batches("abc"))


def test_a_batch_view_keeps_a_bytearray_from_resizing():
    data = bytearray(encode_batch([(b"k", b"v")]))
    batch = one(data)
    with pytest.raises(BufferError):
        data.extend(b"x")
    assert bytes(batch.buffer) == bytes(data)


# ---- scan / find / span ------------------------------------------------------------------


def three_batches():
    return b"".join(
        encode_batch([(b"k", b"v" * 10)] * n, base_offset=o, leader_epoch=e)
        for o, n, e in [(0, 2, 1), (2, 3, 1), (5, 1, 4)]
    )


def test_scan_describes_every_batch_in_arrays():
    data = three_batches()
    scan = scan_batches(data)
    assert scan.count == 3 and scan.error is None and scan.valid_end == len(data)
    assert scan.base_offsets.tolist() == [0, 2, 5]
    assert scan.last_offsets.tolist() == [1, 4, 5]
    assert scan.epochs.tolist() == [1, 1, 4]
    assert scan.epoch_starts == [(1, 0), (4, 5)]
    assert scan.discontinuity == -1


def test_scan_stops_at_a_bad_crc_with_valid_end_and_error_position():
    data = bytearray(three_batches())
    second = list(iter_batches(bytes(data)))[1]
    data[second.position + 40] ^= 0x01
    scan = scan_batches(bytes(data))
    assert scan.count == 1
    assert scan.valid_end == second.position == scan.error_position
    assert "CRC" in scan.error
    assert scan_batches(bytes(data), check_crc=False).count == 3
    assert check_batch_crcs(bytes(data)) == second.position
    assert check_batch_crcs(three_batches()) == -1


def test_scan_stops_at_a_truncation():
    data = three_batches()
    scan = scan_batches(data[:-5])
    assert scan.count == 2 and "truncated" in scan.error
    with pytest.raises(CorruptRecordError):
        scan.raise_error()


def test_scan_reports_the_first_break_of_offset_order_or_epoch_order():
    a = encode_batch([(b"k", b"v")] * 2, base_offset=0, leader_epoch=3)
    gap = encode_batch([(b"k", b"v")], base_offset=5, leader_epoch=3)
    older = encode_batch([(b"k", b"v")], base_offset=2, leader_epoch=2)
    scan = scan_batches(a + gap)
    assert scan.discontinuity == 1 and "does not follow" in scan.discontinuity_reason
    scan = scan_batches(a + older)
    assert scan.discontinuity == 1 and "epoch drops" in scan.discontinuity_reason


def test_find_batch_finds_the_batch_holding_an_offset():
    data = three_batches()
    positions = [b.position for b in iter_batches(data)]
    assert [find_batch(data, o) for o in range(6)] == [positions[i] for i in (0, 0, 1, 1, 1, 2)]
    assert find_batch(data, 6) == len(data)


def test_span_batches_returns_whole_batches_and_at_least_one():
    data = three_batches()
    sizes = [b.size_in_bytes for b in iter_batches(data)]
    assert span_batches(data, 0, -1, 1) == sizes[0]
    assert span_batches(data, 0, -1, sizes[0] + sizes[1]) == sizes[0] + sizes[1]
    assert span_batches(data, 0, -1, sizes[0] + sizes[1] - 1) == sizes[0]
    assert span_batches(data, 0, -1, 1 << 30) == len(data)


# ---- differential against the naive reference -----------------------------------------------

keys_values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), keys_values), max_size=3)
record_lists = st.lists(st.tuples(keys_values, keys_values, headers), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    record_lists,
    st.integers(0, 2**62),
    st.integers(-1, 2**31 - 1),
    st.integers(-(2**40), 2**41),
    st.booleans(),
    st.integers(-1, 2**40),
)
def test_encoding_equals_the_naive_reference_byte_for_byte(records, base, epoch, ts, control, pid):
    if control:  # control records have a version int16 + type int16 key
        records = [(control_record_key(i % 7), v, h) for i, (_, v, h) in enumerate(records)]
    ours = encode_batch(
        records,
        base_offset=base,
        leader_epoch=epoch,
        timestamp_ms=ts,
        control=control,
        producer_id=pid,
    )
    assert ours == ref_encode(
        records,
        base_offset=base,
        leader_epoch=epoch,
        timestamp=ts,
        control=control,
        producer_id=pid,
    )
    head, decoded = ref_decode(ours)
    batch = one(ours)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == decoded
    assert (batch.base_offset, batch.partition_leader_epoch, batch.record_count) == (
        head["base_offset"],
        head["epoch"],
        head["count"],
    )
