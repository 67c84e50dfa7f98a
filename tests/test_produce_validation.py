"""Produce validation (issue 9; Kafka's LogValidator, KIP-467): every record of every produced
batch is checked before anything is appended. A batch with a right CRC and malformed records
is refused with Kafka's error code, the index of the bad record and a reason naming it, and
nothing is written. Followers refuse malformed batches from their leader the same way."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard
from crafted_batches import batch, raw_record, record, refresh_crc, zigzag
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import example_count
from test_node import cluster, leader_of, raw_request, run
from test_node_acknowledgements import produce_body

from raftcore.batch_validation import check_well_formed
from raftcore.compression import compress_lz4, compress_snappy
from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError, UnsupportedCompressionError
from raftcore.kafka.produce_validation import Refusal, validate_produced
from raftcore.protocol.api import ApiKey
from raftcore.records import encode_batch, encode_control_batch, iter_batches

pytestmark = pytest.mark.timeout(120)

GOOD = batch([record(0), record(1)])
CORRUPT, INVALID = Errors.CORRUPT_MESSAGE, Errors.INVALID_RECORD
LONG_VARINT = b"\xff\xff\xff\xff\xff\x01"  # six bytes: longer than any int32 varint


def _body(offset_delta: int) -> bytes:
    """A record body up to (not including) the key length."""
    return b"\x00" + zigzag(0) + zigzag(offset_delta)


def _compressed(codec: int, inner: bytes, count: int, *, pack: bool = True) -> bytes:
    """A batch of ``count`` records whose payload is ``inner`` compressed by ``codec``
    (``pack=False``: ``inner`` as it is, bytes meant not to decompress)."""
    packers = {
        1: gzip.compress,
        2: compress_snappy,
        3: compress_lz4,
        4: zstandard.ZstdCompressor().compress,
    }
    packed = packers[codec](inner) if pack and codec in packers else inner
    return batch([packed], count=count, attributes=codec)


# name: (request bytes, error code, index of the bad record or -1, words the reason holds)
MALFORMED = {
    # record structure, under a right CRC: the client wrote it so (Kafka: InvalidRecordException)
    "a record length varint longer than 5 bytes": (
        batch([record(0), LONG_VARINT + record(1)]),
        INVALID,
        1,
        "record length is not a varint",
    ),
    "a key length varint longer than 5 bytes": (
        batch([raw_record(_body(0) + LONG_VARINT + zigzag(1) + b"v" + zigzag(0))]),
        INVALID,
        0,
        "key length is not a varint",
    ),
    "a timestamp delta varint cut by the record length": (
        batch([raw_record(b"\x00\x80")]),
        INVALID,
        0,
        "timestamp delta is not a varint",
    ),
    "a record length shorter than its fields": (
        batch([record(0, length_adjust=-1), record(1)]),
        INVALID,
        0,
        "record 0",
    ),
    "a record length longer than its fields": (
        batch([record(0), record(1, length_adjust=2)]),
        INVALID,
        1,
        "record length",
    ),
    "a record length past the batch": (
        batch([record(0), record(1, length_adjust=50)]),
        INVALID,
        1,
        "runs past the batch",
    ),
    "offset deltas out of order": (
        batch([record(1), record(0)]),
        INVALID,
        0,
        "offset delta 1 where 0 was expected",
    ),
    "a gap in the offset deltas": (
        batch([record(0), record(2)], last_delta=1),
        INVALID,
        1,
        "offset delta 2 where 1 was expected",
    ),
    "a repeated offset delta": (
        batch([record(0), record(1), record(1)]),
        INVALID,
        2,
        "offset delta 1 where 2 was expected",
    ),
    "more records counted than present": (
        batch([record(0)], count=2),
        INVALID,
        1,
        "counts 2 records, only 1 are present",
    ),
    "fewer records counted than present": (
        batch([record(0), record(1)], count=1, last_delta=0),
        INVALID,
        -1,
        "bytes follow the last of the 1 records",
    ),
    "a last offset delta that is not count - 1": (
        batch([record(0), record(1)], last_delta=5),
        INVALID,
        -1,
        "lastOffsetDelta = count - 1",
    ),
    "no records": (batch([], count=0, last_delta=0), INVALID, -1, "count 0"),
    "a negative record count": (batch([record(0)], count=-1), INVALID, -1, "record count -1"),
    "a key length below -1": (
        batch([record(0, key=b"", key_length=-2)]),
        INVALID,
        0,
        "key length -2",
    ),
    "a key past the record": (
        batch([record(0, key=b"k", key_length=40)]),
        INVALID,
        0,
        "key of 40 bytes runs past",
    ),
    "a negative header count": (
        batch([record(0, header_count=-2)]),
        INVALID,
        0,
        "negative header count -2",
    ),
    "a header count past the record": (
        batch([record(0, header_count=5)]),
        INVALID,
        0,
        "header count 5 cannot fit",
    ),
    "a header count with too few headers": (
        batch([record(0, headers=((b"h", b"x"),), header_count=2)]),
        INVALID,
        0,
        "header 1 key length is not a varint",
    ),
    "a null header key": (
        batch([record(0, headers=((None, b"x"),))]),
        INVALID,
        0,
        "header keys may not be null",
    ),
    "a header key that is not UTF-8": (
        batch([record(0, headers=((b"\xff", b"x"),))]),
        INVALID,
        0,
        "header 0 key is not valid UTF-8",
    ),
    "a header value length below -1": (
        batch(
            [
                raw_record(
                    _body(0) + zigzag(-1) + zigzag(-1) + zigzag(1) + zigzag(1) + b"h" + zigzag(-3)
                )
            ]
        ),
        INVALID,
        0,
        "header 0 value length -3",
    ),
    "bytes after the last record": (
        batch([record(0) + b"xx"]),
        INVALID,
        -1,
        "2 bytes follow the last",
    ),
    # the header: batch framing and CRC (Kafka: CorruptRecordException, clients retry it)
    "a truncated batch header": (GOOD[:40], CORRUPT, -1, "truncated batch"),
    "a header cut before the magic byte": (GOOD[:15], CORRUPT, -1, "truncated batch header"),
    "a batch length past the request": (GOOD[:-1], CORRUPT, -1, "truncated batch"),
    "a batch length below the header": (
        GOOD[:8] + (20).to_bytes(4, "big") + GOOD[12:32],
        CORRUPT,
        -1,
        "below the minimum",
    ),
    "a CRC that does not match": (batch([record(0)], crc_adjust=1), CORRUPT, -1, "CRC mismatch"),
    "magic 7": (batch([record(0)], magic=7), CORRUPT, -1, "magic 7 is no Kafka message format"),
    # allowed by the format, not from a producer (Kafka: InvalidRecordException)
    "magic 1": (batch([record(0)], magic=1), INVALID, -1, "magic 1"),
    "magic 0": (batch([record(0)], magic=0), INVALID, -1, "magic 0"),
    "a control batch from a client": (
        encode_control_batch(2, b"\x00\x00", timestamp_ms=1),
        INVALID,
        -1,
        "clients may not write control batches",
    ),
    "a transactional batch": (
        batch([record(0)], attributes=0x10),
        INVALID,
        -1,
        "transactional",
    ),
    "an idempotent batch without a base sequence": (
        batch([record(0)], producer_id=7, producer_epoch=0, base_sequence=-1),
        INVALID,
        -1,
        "base sequence -1 for producer id 7",
    ),
    "an unknown compression codec": (_compressed(6, record(0), 1), INVALID, -1, "codec id 6"),
    "a snappy payload that does not decompress": (
        _compressed(2, b"\xff\xff\xff\xff\x0f" + record(0), 1, pack=False),
        INVALID,
        -1,
        "snappy",
    ),
    "an lz4 payload that is not an lz4 frame": (
        _compressed(3, record(0), 1, pack=False),
        INVALID,
        -1,
        "lz4",
    ),
    "lz4 records with offset deltas out of order": (
        _compressed(3, record(0) + record(0), 2),
        INVALID,
        1,
        "offset delta 0 where 1 was expected",
    ),
    "snappy records with offset deltas out of order": (
        _compressed(2, record(0) + record(0), 2),
        INVALID,
        1,
        "offset delta 0 where 1 was expected",
    ),
    # compressed batches: the inner records get the same checks
    "zstd records with offset deltas out of order": (
        _compressed(4, record(0) + record(0), 2),
        INVALID,
        1,
        "offset delta 0 where 1 was expected",
    ),
    "gzip records with a record length mismatch": (
        _compressed(1, record(0) + record(1, length_adjust=-1), 2),
        INVALID,
        1,
        "decompressed records",
    ),
    "zstd records fewer than counted": (
        _compressed(4, record(0), 3),
        INVALID,
        1,
        "counts 3 records, only 1 are present",
    ),
    "gzip bytes that do not decompress": (
        batch([b"\x1f\x8b\x08\x00garbage"], count=1, attributes=1),
        INVALID,
        -1,
        "compressed records: gzip payload is truncated (at byte position 0)",
    ),
}


def test_a_well_formed_crafted_batch_is_what_our_encoder_writes():
    # the crafting helper is right, so the malformed cases differ only where they say
    written = encode_batch(
        [(b"k", b"v"), (b"k", b"v")], base_offset=0, leader_epoch=0, timestamp_ms=1
    )
    assert written == GOOD
    assert validate_produced(GOOD) is None


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_or_forbidden_batch_is_refused_with_kafkas_code_and_a_reason(case):
    data, code, record_index, words = MALFORMED[case]
    refusal = validate_produced(data)
    assert refusal is not None, case
    assert (refusal.error_code, refusal.record_index) == (code, record_index), refusal
    assert words in refusal.reason, refusal.reason
    assert refusal.batch_index == 0 and refusal.reason.startswith("batch 0")


def test_faults_under_a_right_crc_are_invalid_record_and_framing_or_crc_faults_corrupt_message():
    """Kafka's split: a CRC failure may be damage on the way and clients retry CORRUPT_MESSAGE;
    a CRC-valid malformed batch is what the client wrote, and INVALID_RECORD is not retried."""
    damaged = bytearray(GOOD)
    damaged[70] ^= 0x01  # a bit flipped in transit: the CRC catches it
    assert validate_produced(bytes(damaged)).error_code == CORRUPT
    assert validate_produced(refresh_crc(damaged)).error_code == INVALID  # written so


def test_the_refusal_names_the_bad_batch_record_and_offset_delta():
    data = encode_batch([(b"k", b"v")] * 3) + batch([record(0), record(1), record(0)])
    refusal = validate_produced(data)
    assert (refusal.batch_index, refusal.record_index) == (1, 2)
    assert "batch 1, record 2: offset delta 0 where 2 was expected" in refusal.reason
    # the offset delta of the third record: after its length, attributes and timestamp delta
    position = len(encode_batch([(b"k", b"v")] * 3)) + 61 + 2 * len(record(0)) + 3
    assert f"(at byte {position})" in refusal.reason


def test_an_empty_request_is_invalid():
    assert validate_produced(b"") == Refusal(
        INVALID, -1, -1, "request: the request holds no record batch (at byte 0)"
    )


def test_a_batch_above_the_size_limit_is_message_too_large():
    data = encode_batch([(b"k", b"v" * 1000)])
    assert validate_produced(data, max_batch_bytes=len(data)) is None
    refusal = validate_produced(data, max_batch_bytes=len(data) - 1)
    assert refusal.error_code == Errors.MESSAGE_TOO_LARGE and "exceeds the limit" in refusal.reason


def test_batches_our_encoder_writes_pass_in_every_codec_with_headers_and_nulls():
    records = [(None, None, [("h", None), ("ключ", b"x")]), (b"k", b"", []), (b"", b"v" * 300)]
    for compression in ("none", "gzip", "zstd"):
        data = encode_batch(records * 50, compression=compression, producer_id=3, base_sequence=0)
        assert validate_produced(data) is None, compression
        assert validate_produced(data * 3) is None  # several batches in one request


def test_a_follower_accepts_control_batches_but_not_malformed_records():
    """Leaders write control batches (LeaderChange), so replication checks structure only."""
    check_well_formed(encode_control_batch(2, b"\x00\x00", leader_epoch=1, timestamp_ms=1))
    check_well_formed(batch([record(0), record(2)], last_delta=2))  # compaction's gaps are legal
    with pytest.raises(CorruptRecordError, match="offset delta 0 does not follow offset delta 1"):
        check_well_formed(batch([record(1), record(0)]))
    with pytest.raises(CorruptRecordError, match="runs past the batch"):
        check_well_formed(batch([record(0, length_adjust=9)]))


# ---- properties ----------------------------------------------------------------------------


def _decodes_whole(data: bytes) -> bool:
    """Whether our decoder reads every record of every batch (what a consumer needs)."""
    try:
        for b in iter_batches(data):
            if sum(1 for _ in b.records()) != b.record_count:
                return False
    except (CorruptRecordError, UnsupportedCompressionError):
        return False
    return True


def _sample_batch(codec: str) -> bytes:
    records = [(b"key%d" % i, b"value" * i, [(f"h{i}", b"x")] * (i % 3)) for i in range(5)]
    return encode_batch(records, compression=codec, timestamp_ms=1_700_000_000_000)


def _mutate(data: st.DataObject, raw: bytearray, start: int) -> None:
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["set", "insert", "delete"]), label="kind")
        pos = data.draw(st.integers(start, max(start, len(raw) - 1)), label="position")
        if kind == "set" and pos < len(raw):
            raw[pos] = data.draw(st.integers(0, 255), label="byte")
        elif kind == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=3), label="bytes")
        elif pos < len(raw):
            del raw[pos]


def _with_length(raw: bytearray) -> bytes:
    """The batch with its length field and CRC made to fit its bytes again."""
    raw[8:12] = (len(raw) - 12).to_bytes(4, "big", signed=True)
    return refresh_crc(raw)


@settings(
    max_examples=example_count(600),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.data(), st.sampled_from(["none", "gzip", "zstd"]), st.booleans())
def test_any_mutated_batch_with_a_fresh_crc_is_refused_or_decodes_whole(data, codec, in_header):
    """Accepted means every record decodes, offsets 0..n-1: never accepted, then unreadable.
    Mutations hit the records (inside the compressed payload: recompressed) or the header."""
    original = _sample_batch(codec)
    if codec == "none" or in_header:
        raw = bytearray(original)
        _mutate(data, raw, 21 if in_header else 61)
        mutated = _with_length(raw)
    else:
        inner = bytearray(_sample_batch("none")[61:])
        _mutate(data, inner, 0)
        pack = gzip.compress if codec == "gzip" else zstandard.ZstdCompressor().compress
        mutated = _with_length(bytearray(original[:61] + pack(bytes(inner))))
    refusal = validate_produced(mutated)
    if refusal is None:
        assert _decodes_whole(mutated)
        [b] = list(iter_batches(mutated))
        assert [r.offset for r in b.records()] == list(range(b.record_count))
    else:
        assert refusal.error_code in (INVALID, CORRUPT, Errors.UNSUPPORTED_COMPRESSION_TYPE)
    # replication's structural check and our decoder agree exactly (a differential test)
    try:
        check_well_formed(mutated)
        well_formed = True
    except CorruptRecordError:
        well_formed = False
    assert well_formed == _decodes_whole(mutated)


small_ints = st.integers(-3, 6)


@settings(max_examples=example_count(400), deadline=None)
@given(
    st.lists(
        st.tuples(
            small_ints,  # offset delta
            st.none() | small_ints,  # key length written (None: the key's own)
            st.sampled_from([0, 0, 0, -1, 1, 2]),  # record length adjustment
            st.none() | small_ints,  # header count written (None: the real one)
        ),
        min_size=1,
        max_size=4,
    ),
    st.none() | st.integers(-1, 5),  # record count in the header (None: the real one)
)
def test_any_crafted_batch_is_refused_or_decodes_whole_with_offsets_0_to_n_minus_1(fields, count):
    """Field by field: the offset deltas, lengths and counts a buggy client might write."""
    records = [
        record(
            delta,
            b"key",
            b"value",
            ((b"h", b"x"),),
            key_length=klen,
            length_adjust=adjust,
            header_count=hcount,
        )
        for delta, klen, adjust, hcount in fields
    ]
    data = batch(records, count=count)
    if validate_produced(data) is None:
        assert _decodes_whole(data)
        [b] = list(iter_batches(data))
        assert [r.offset for r in b.records()] == list(range(b.record_count))
        assert b.last_offset_delta == b.record_count - 1


@settings(max_examples=example_count(500), deadline=None)
@given(
    st.binary(max_size=8) | st.text(max_size=4).map(lambda s: s.encode("utf-8", "surrogatepass"))
)
def test_a_header_key_passes_exactly_when_python_decodes_it_as_utf8(key):
    data = batch([record(0, headers=((key, b"v"),))])
    try:
        key.decode("utf-8")
        decodes = True
    except UnicodeDecodeError:
        decodes = False
    assert (validate_produced(data) is None) == decodes


# ---- a node --------------------------------------------------------------------------------


def test_a_node_refuses_malformed_batches_and_writes_nothing(tmp_path):
    """Each malformed request is refused with its code and reason; the log end stays put;
    a request whose second batch is bad writes nothing of the first; good batches go on."""

    async def send(leader, records: bytes, version: int = 10):
        body = produce_body(b"unused")
        body.topic_data[0].partition_data[0].records = records
        resp = await raw_request(leader, ApiKey.PRODUCE, version, body)
        return resp.responses[0].partition_responses[0]

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            ok = await send(leader, encode_batch([(b"k", b"first")]))
            assert ok.error_code == Errors.NONE
            end = leader.log.end_offset
            for case, (data, code, record_index, words) in MALFORMED.items():
                part = await send(leader, data)
                assert part.error_code == code, case
                assert words in part.error_message, case
                want = [] if record_index < 0 else [record_index]
                assert [e.batch_index for e in part.record_errors] == want, case
                assert leader.log.end_offset == end, case
            two = encode_batch([(b"k", b"fine")]) + batch([record(0), record(0)])
            part = await send(leader, two)
            assert part.error_code == INVALID and "batch 1, record 1" in part.error_message
            assert leader.log.end_offset == end
            part = await send(leader, batch([record(1)]), version=7)  # before RecordErrors
            assert part.error_code == INVALID and leader.log.end_offset == end
            ok = await send(leader, encode_batch([(b"k", b"good")]))
            assert ok.error_code == Errors.NONE and leader.log.end_offset == end + 1

    run(main())


def test_a_follower_refuses_a_malformed_batch_from_its_leader_and_appends_nothing():
    from raft_harness import Harness
    from raft_harness import batch as leader_batch

    from raftcore.raft import FetchRequest, FetchResponse, LeaderAndEpoch

    h = Harness()
    h.begin_quorum_epoch(2, 1)
    h.flush()
    [fetch] = h.take(FetchRequest, 2)
    bad = refresh_crc(leader_batch(0, 1)[:-1] + b"\x02")  # header count 1, no header
    h.respond(fetch, FetchResponse(Errors.NONE, 1, 0, LeaderAndEpoch(2, 1), records=bad))
    assert h.log.end_offset == 0


def test_zlib_framed_gzip_is_decoded_too():
    """A compressed payload in zlib framing (not gzip): our decompressor detects it."""
    inner = record(0) + record(1)
    data = batch([zlib.compress(inner)], count=2, attributes=1)
    assert validate_produced(data) is None


@pytest.mark.parametrize("compression", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_batches_a_peer_client_writes_pass(compression):
    """aiokafka's builder (the same layout as Kafka's Java client): keys, values, nulls and
    headers, each codec raftcore reads."""
    import aiokafka.record.default_records as aiokafka_records

    builder = aiokafka_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(50):
        headers = [("trace", b"%d" % i), ("empty", b"")] if i % 2 else []
        key = None if i % 3 == 0 else b"k%d" % i
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=b"v" * i, headers=headers)
    assert validate_produced(bytes(builder.build())) is None
