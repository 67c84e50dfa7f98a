"""Columnar decode (``raftcore.columnar``): record batches straight into Arrow.

The rules checked: every row equals what the record codec (``iter_batches`` + ``records()``)
reads, for any mix of batches (null keys and values, headers, gzip and zstd, control batches,
LogAppendTime); every CRC is checked, control batches' included; damaged bytes and truncation
raise CorruptRecordError exactly where the codec raises; batches written by aiokafka and
kafka-python decode to the same columns; the Arrow arrays wrap the decoded buffers without a
copy; a buffer splits at batch boundaries.
"""

from __future__ import annotations

import mmap
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import (
    batch_params,
    build_batch,
    compressions,
    example_count,
    record_lists,
)
from test_records_crosscheck import (
    AioBuilder,
    KafkaPythonBuilder,
    build_with_peer,
    peer_batch_fields,
    peer_records,
    without_no_timestamp,
)

from raftcore._native.columnar import decode_columns
from raftcore._native.crc32c import crc32c
from raftcore.columnar import arrow_schema, iter_arrow, to_arrow
from raftcore.records import (
    BatchBuilder,
    ControlRecordType,
    CorruptRecordError,
    encode_batch,
    encode_control_batch,
    iter_batches,
)

SETTINGS = settings(
    max_examples=example_count(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
T = 1_700_000_000_000
ATTRIBUTES_AT = 21
LOG_APPEND_TIME_BIT = 0x08


def set_attribute_bits(batch: bytes, bits: int, *, clear: int = 0) -> bytes:
    """A batch with attribute bits changed and its CRC recomputed."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, ATTRIBUTES_AT)
    struct.pack_into(">h", out, ATTRIBUTES_AT, (attributes & ~clear) | bits)
    return recrc(out)


def recrc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[ATTRIBUTES_AT:])))
    return bytes(out)


def codec_rows(data: bytes, *, include_control: bool = False) -> list[dict]:
    """The rows as the record codec reads them (the reference)."""
    rows = []
    for batch in iter_batches(data):
        if batch.is_control and not include_control:
            batch.validate()
            continue
        for r in batch.records():
            rows.append(
                {
                    "offset": r.offset,
                    "leader_epoch": batch.partition_leader_epoch,
                    "timestamp": r.timestamp,
                    "key": r.key,
                    "value": r.value,
                    "headers": [{"key": k, "value": v} for k, v in r.headers],
                    "batch_base_offset": batch.base_offset,
                }
            )
    return rows


def outcome(decode, data):
    """("ok", rows) or ("corrupt", position) -- any other exception fails the test."""
    try:
        return "ok", decode(data)
    except CorruptRecordError as exc:
        return "corrupt", exc.position


def columnar_outcome(data, **kw):
    return outcome(lambda d: to_arrow(d, **kw).to_pylist(), data)


def codec_outcome(data, **kw):
    return outcome(lambda d: codec_rows(d, **kw), data)


# A batch of the log: records, batch fields, codec, and whether it is control / LogAppendTime.
log_batches = st.lists(
    st.tuples(record_lists, batch_params, compressions, st.booleans(), st.sampled_from("dcl")),
    min_size=1,
    max_size=5,
)


def build_log(batches) -> bytes:
    data = b""
    for recs, params, compression, _, kind in batches:
        if kind == "c":  # a control batch
            batch = encode_control_batch(
                ControlRecordType.LEADER_CHANGE,
                recs[0][1] or b"",
                base_offset=params["base_offset"],
                leader_epoch=params["leader_epoch"],
                timestamp_ms=T,
            )
        else:
            batch = build_batch(recs, compression=compression, **params)
            if kind == "l":
                batch = set_attribute_bits(batch, LOG_APPEND_TIME_BIT)
        data += batch
    return data


# ---- round trip against the record codec -----------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(batches=log_batches, include_control=st.booleans())
def test_every_row_is_what_the_record_codec_reads(batches, include_control):
    data = build_log(batches)
    table = to_arrow(data, include_control=include_control)
    table.validate(full=True)
    assert table.schema == arrow_schema()
    assert table.to_pylist() == codec_rows(data, include_control=include_control)


def test_log_append_time_records_take_the_batch_max_timestamp():
    batch = BatchBuilder(base_offset=10)
    for i, ts in enumerate([T + 5, T + 2, T + 9]):
        batch.append(b"k%d" % i, b"v", timestamp_ms=ts)
    create_time = batch.build()
    assert to_arrow(create_time).column("timestamp").to_pylist() == [T + 5, T + 2, T + 9]
    log_append = set_attribute_bits(create_time, LOG_APPEND_TIME_BIT)
    assert to_arrow(log_append).column("timestamp").to_pylist() == [T + 9] * 3


def test_control_batches_are_left_out_unless_asked_for():
    data = (
        encode_batch([(b"a", b"1")], base_offset=0, timestamp_ms=T)
        + encode_control_batch(ControlRecordType.LEADER_CHANGE, b"lc", base_offset=1)
        + encode_batch([(b"b", b"2")], base_offset=2, timestamp_ms=T)
    )
    assert to_arrow(data).column("offset").to_pylist() == [0, 2]
    with_control = to_arrow(data, include_control=True)
    assert with_control.column("offset").to_pylist() == [0, 1, 2]
    assert with_control.column("value").to_pylist() == [b"1", b"lc", b"2"]


def test_an_empty_buffer_gives_an_empty_batch_of_the_schema():
    table = to_arrow(b"")
    assert table.num_rows == 0
    assert table.schema == arrow_schema()


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, "mmap"])
def test_any_buffer_protocol_object_decodes(kind, tmp_path):
    data = encode_batch([(b"k", b"v", [("h", None)])], base_offset=3, timestamp_ms=T)
    if kind == "mmap":
        path = tmp_path / "seg"
        path.write_bytes(data)
        with path.open("rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    else:
        buf = kind(data)
    assert to_arrow(buf).to_pylist() == codec_rows(data)


def test_a_str_is_refused():
    with pytest.raises(TypeError):
        to_arrow("not bytes")  # type: ignore[arg-type]


def test_the_arrow_arrays_wrap_the_decoded_buffers_without_a_copy():
    data = encode_batch([(b"k%d" % i, b"v" * i) for i in range(50)], timestamp_ms=T)
    columns = decode_columns(data)
    from raftcore.columnar import columns_to_arrow

    table = columns_to_arrow(columns)
    assert table.column("offset").buffers()[1].address == columns.offset.ctypes.data
    value_buffers = table.column("value").buffers()
    assert value_buffers[1].address == columns.value_offsets.ctypes.data
    assert value_buffers[2].address == columns.value_data.ctypes.data


# ---- CRCs, damage and truncation -------------------------------------------------------------


def three_batches() -> bytes:
    return (
        encode_batch([(b"k", b"v", [("h", b"x")]), (None, None)], base_offset=0, timestamp_ms=T)
        + encode_control_batch(ControlRecordType.LEADER_CHANGE, b"lc", base_offset=2)
        + encode_batch([(b"z", b"zz" * 40)] * 3, base_offset=3, compression="zstd", timestamp_ms=T)
    )


def test_every_byte_the_crc_covers_is_checked_control_batches_included():
    data = three_batches()
    batch_starts = [b.position for b in iter_batches(data)]
    for start, batch in zip(batch_starts, iter_batches(data), strict=True):
        for i in range(start + 17, start + batch.size_in_bytes):
            damaged = bytearray(data)
            damaged[i] ^= 0x40
            with pytest.raises(CorruptRecordError):
                to_arrow(bytes(damaged))


def test_without_crc_checks_a_damaged_value_byte_is_read_as_it_is():
    data = encode_batch([(b"k", b"value")], timestamp_ms=T)
    damaged = data[:-2] + b"X" + data[-1:]  # the last byte is the header count
    with pytest.raises(CorruptRecordError, match="CRC"):
        to_arrow(damaged)
    assert to_arrow(damaged, check_crc=False).column("value").to_pylist() == [b"valuX"]


def test_truncation_at_every_byte_raises_as_iter_batches_does():
    """A partial batch at the end of a buffer is an error for both readers (a whole batch
    boundary is not)."""
    data = three_batches()
    for cut in range(len(data) + 1):
        ours = columnar_outcome(data[:cut], include_control=True)
        assert ours == codec_outcome(data[:cut], include_control=True), cut


@pytest.mark.slow
@settings(SETTINGS, max_examples=example_count(300))
@given(batches=log_batches, data=st.data())
def test_damaged_records_with_a_valid_crc_fail_where_the_codec_fails(batches, data):
    """Bytes changed inside the records (CRC recomputed): both readers give the same rows or
    the same error position -- never a crash or a read past the end."""
    log = bytearray(build_log(batches))
    first = next(iter_batches(bytes(log)))
    size = first.size_in_bytes
    if first.compression != "none" or size <= 61:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        # Attributes to the end: the header fields the CRC covers, and the records.
        at = data.draw(st.sampled_from([ATTRIBUTES_AT, 23, 57, 60]) | st.integers(61, size - 1))
        log[at] = data.draw(st.integers(0, 255))
    log[:size] = recrc(log[:size])
    assert columnar_outcome(bytes(log), include_control=True) == codec_outcome(
        bytes(log), include_control=True
    )


def test_bytes_after_the_last_counted_record_are_corrupt():
    """RecordsCount is authoritative: a batch claiming one record fewer than it holds is
    corrupt, not silently short of a record."""
    data = bytearray(encode_batch([(b"a", b"1"), (b"b", b"2")], timestamp_ms=T))
    struct.pack_into(">i", data, 57, 1)
    data = recrc(data)
    with pytest.raises(CorruptRecordError, match="bytes follow the last record"):
        to_arrow(data)
    assert codec_outcome(data)[0] == "corrupt"


@SETTINGS
@given(key=st.binary(max_size=8))
def test_header_keys_must_be_utf8_as_the_codec_decodes_them(key):
    data = encode_batch([(b"k", b"v", [(key, b"x")])], timestamp_ms=T)
    ours, theirs = columnar_outcome(data), codec_outcome(data)
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert ours == theirs


@pytest.mark.parametrize("codec", [2, 3])
def test_snappy_and_lz4_payloads_that_do_not_decompress_are_corrupt(codec):
    data = set_attribute_bits(encode_batch([(b"k", b"v")], timestamp_ms=T), codec)
    with pytest.raises(CorruptRecordError, match=("snappy", "lz4")[codec - 2]):
        to_arrow(data)


# ---- peers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", ["aiokafka", "kafka-python"])
@SETTINGS
@given(recs=peer_records, fields=peer_batch_fields)
def test_peer_built_batches_decode_to_the_same_columns(peer, recs, fields):
    builder_class = AioBuilder if peer == "aiokafka" else KafkaPythonBuilder
    if peer == "aiokafka":
        recs = without_no_timestamp(recs)
    data, expected = build_with_peer(builder_class, recs, fields)
    table = to_arrow(data)
    assert table.column("offset").to_pylist() == [e[0] for e in expected]
    assert table.column("timestamp").to_pylist() == [e[1] for e in expected]
    assert table.column("key").to_pylist() == [e[2] for e in expected]
    assert table.column("value").to_pylist() == [e[3] for e in expected]
    assert table.column("headers").to_pylist() == [
        [{"key": k, "value": v} for k, v in e[4]] for e in expected
    ]
    assert set(table.column("leader_epoch").to_pylist()) == {fields["epoch"]}
    assert set(table.column("batch_base_offset").to_pylist()) == {fields["base_offset"]}


# ---- splitting -------------------------------------------------------------------------------


def many_batches(n: int = 10, per_batch: int = 7) -> bytes:
    return b"".join(
        encode_batch(
            [(b"k", b"v%d" % i, [("h", b"%d" % i)]) for i in range(per_batch)],
            base_offset=b * per_batch,
            timestamp_ms=T,
        )
        for b in range(n)
    )


@pytest.mark.parametrize("max_records", [1, 7, 8, 20, 1000])
def test_iter_arrow_splits_at_batch_boundaries(max_records):
    data = many_batches()
    parts = list(iter_arrow(data, max_records=max_records))
    for part in parts[:-1]:
        assert part.num_rows % 7 == 0
        assert part.num_rows <= max(max_records, 7)
    assert pa.Table.from_batches(parts).to_pylist() == to_arrow(data).to_pylist()


def test_max_bytes_stops_at_a_batch_boundary_and_refuses_a_batch_above_it():
    data = many_batches(3)
    value_bytes = sum(len(r.value) for b in iter_batches(data) for r in b.records())
    one_batch = value_bytes // 3
    columns = decode_columns(data, max_bytes=one_batch * 2)
    assert columns.num_records == 14
    assert columns.end == [b.position for b in iter_batches(data)][2]
    with pytest.raises(ValueError, match="more than"):
        decode_columns(data, max_bytes=one_batch - 1)
