"""The generated codec (``raftcore.protocol.codegen``) against the closure codec it replaced
(``raftcore.protocol.closure_codec``, kept as the reference): the same bytes and the same objects
(down to the types of their values) for every spec file and every valid version; and damaged
frames of the hot requests give a ``ProtocolError`` or a value, never another exception."""

import contextlib
import random
import struct
from typing import Any

import pytest
from test_protocol_schema import CASE_IDS, CASES, INT_RANGES, Distinct, fill

from raftcore.protocol.api import (
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    response_spec,
)
from raftcore.protocol.closure_codec import compile_closures
from raftcore.protocol.codegen import compile_generated, generate_source
from raftcore.protocol.schema import FieldSpec, ProtocolError, Reader, StructSpec, Writer, load_spec
from raftcore.records import encode_batch


class Empty(Distinct):
    """Empty arrays and empty payloads everywhere."""

    def count(self, f: FieldSpec) -> int:
        return 0


class Seeded:
    """Random but valid values from a seeded generator: nulls where allowed, 0-3 elements, edge
    integers, payloads from empty to long enough for a 3-byte compact length (a big varint)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def null(self, f: FieldSpec, nullable: bool) -> bool:
        return nullable and self.rng.random() < 0.2

    def count(self, f: FieldSpec) -> int:
        return self.rng.choice((0, 1, 1, 2, 3))

    def scalar(self, f: FieldSpec, element: str, default: Any) -> Any:
        rng = self.rng
        if element in INT_RANGES:
            lo, hi = INT_RANGES[element]
            return rng.choice((lo, hi, 0, -1 if lo < 0 else 1, default or 0, rng.randint(lo, hi)))
        if element == "bool":
            return rng.random() < 0.5
        if element == "float64":
            return rng.choice((0.0, -1.5, rng.random() * 1e300))
        if element == "string":
            return "".join(rng.choice("aZ\u00fc\u20ac\U0001f600") for _ in range(rng.randint(0, 9)))
        if element == "uuid":
            return rng.randbytes(16)
        if element in ("bytes", "records"):
            return rng.randbytes(rng.choice((0, 1, 127, 128, 300, 16_400)))
        raise AssertionError(f"no value for type {element}")


def both(name: str, version: int):
    spec = load_spec(name)
    flexible = version in spec.flexible
    return spec, compile_closures(spec.root, version, flexible), spec.codec(version)


def encoded(codec, obj) -> bytes | type:
    w = Writer()
    try:
        codec[0](obj, w)
    except ProtocolError:
        return ProtocolError
    assert w.size == sum(len(p) for p in w.parts)
    return w.getvalue()


def decoded(codec, data: bytes, start: int = 0) -> tuple:
    """(object, position after it), or the type of the error raised."""
    r = Reader(data, start)
    try:
        return codec[1](r), r.pos
    except ProtocolError:
        return ProtocolError, None


def value_types(struct_spec: StructSpec, obj: Any) -> list:
    """The types of every value of ``obj``, recursively (memoryview and bytes compare equal;
    the callers see the difference)."""
    out = []
    for f in struct_spec.fields:
        value = getattr(obj, f.attr)
        out.append((f.name, type(value)))
        if f.struct is not None and value is not None:
            for item in value if f.is_array else [value]:
                out.extend(value_types(f.struct, item))
        elif f.is_array and value:
            out.extend((f.name, type(item)) for item in value)
    return out


def assert_same(spec, old, new, obj) -> bytes | type:
    data = encoded(old, obj)
    assert encoded(new, obj) == data
    if data is ProtocolError:
        return data
    framed = b"\x07" * 3 + data + b"\x01\x02"  # read from an offset, with bytes after it
    old_obj, old_end = decoded(old, framed, 3)
    new_obj, new_end = decoded(new, framed, 3)
    assert old_obj == obj
    assert new_obj == old_obj
    assert new_end == old_end == 3 + len(data)
    assert value_types(spec.root, new_obj) == value_types(spec.root, old_obj)
    return data


SOURCES = {
    "distinct": Distinct,
    "nulls": lambda: Distinct(nulls=True),
    "empty": lambda: Empty(payload_size=0),
    "long payloads": lambda: Distinct(payload_size=20_000),
}


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_generated_codec_writes_and_reads_what_the_closure_codec_does(name, version):
    spec, old, new = both(name, version)
    for source in SOURCES.values():
        assert_same(spec, old, new, fill(spec.root, version, source()))
    for seed in range(12):
        assert_same(spec, old, new, fill(spec.root, version, Seeded(seed * 1000 + version)))
    # A new object: every field at its default, so no tagged field is written.
    assert_same(spec, old, new, spec.cls())


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_generated_codec_reads_damaged_bytes_as_the_closure_codec_does(name, version):
    """Every prefix, and random byte changes (unknown tags, impossible lengths and counts, bad
    UTF-8, varints too long): the same object and end, or both a ProtocolError."""
    spec, old, new = both(name, version)
    data = encoded(old, fill(spec.root, version, Distinct(payload_size=3)))
    for end in range(len(data)):
        assert decoded(new, data[:end]) == decoded(old, data[:end])
    rng = random.Random(version)
    for _ in range(60 if data else 0):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.choice(
                (0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randint(0, 255))
            )
        assert decoded(new, bytes(buf)) == decoded(old, bytes(buf))


def test_generated_codec_skips_unknown_tagged_fields_and_reads_known_ones():
    spec, old, new = both("FetchRequest", 12)
    obj = fill(spec.root, 12, Distinct())
    obj.cluster_id = "c"  # a tagged field (tag 0) of the request
    endpoint = next(f for f in spec.root.fields if f.attr == "replica_endpoint")
    obj.replica_endpoint = endpoint.struct.cls()  # raftcore's own tag at its default: unwritten
    client = next(f for f in spec.root.fields if f.attr == "client_endpoint")
    obj.client_endpoint = client.struct.cls()  # likewise
    data = encoded(new, obj)
    assert data[-1:] != b"\x00"
    count_at = data.rindex(b"\x01\x00\x02\x02c")  # 1 tagged field: tag 0, 2 bytes, "c"
    unknown = b"\x02" + b"\x05\x03xyz" + data[count_at + 1 :]  # an unknown tag 5 first
    spliced = data[:count_at] + unknown
    assert decoded(new, spliced) == decoded(old, spliced) == (obj, len(spliced))


# ---- damaged real frames of the hot requests -------------------------------------------------


def produce_v9_frame() -> bytes:
    spec = load_spec("ProduceRequest")
    batch = encode_batch([(b"k%d" % i, b"v" * 20) for i in range(5)], timestamp_ms=1)
    partition = spec.cls.PartitionProduceData(index=0, records=batch)
    body = spec.cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[spec.cls.TopicProduceData(name="events", partition_data=[partition])],
    )
    return encode_request(ApiKey.PRODUCE, 9, 7, "client", body)


def fetch_response_frame(version: int) -> bytes:
    spec = response_spec(ApiKey.FETCH)
    batch = encode_batch([(b"k%d" % i, b"v" * 20) for i in range(5)], timestamp_ms=1)
    partition = spec.cls.PartitionData(
        partition_index=0, high_watermark=5, last_stable_offset=5, log_start_offset=0
    )
    partition.records = batch
    topic = spec.cls.FetchableTopicResponse(partitions=[partition])
    if version >= 13:
        topic.topic_id = b"\x01" * 16
    else:
        topic.topic = "events"
    body = spec.cls(responses=[topic])
    return b"".join(bytes(p) for p in encode_response(ApiKey.FETCH, version, 9, body))


FRAMES = {
    "produce-v9-request": (produce_v9_frame, decode_request),
    "fetch-v12-response": (
        lambda: fetch_response_frame(12),
        lambda f: decode_response(ApiKey.FETCH, 12, f),
    ),
    "fetch-v13-response": (
        lambda: fetch_response_frame(13),
        lambda f: decode_response(ApiKey.FETCH, 13, f),
    ),
}


@pytest.mark.parametrize("frame_name", list(FRAMES))
def test_damaged_hot_frames_raise_protocol_error_or_decode(frame_name):
    make, decode = FRAMES[frame_name]
    frame = make()
    decode(frame)  # the undamaged frame decodes
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode(frame[:end])
    rng = random.Random(frame_name)
    for _ in range(3000):
        buf = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randint(0, 255)))
        with contextlib.suppress(ProtocolError):
            decode(bytes(buf))


def test_an_impossible_count_is_refused_before_anything_is_read_or_allocated():
    _, _, new = both("FetchResponse", 13)
    body = struct.pack(">ihi", 0, 0, 0) + b"\xff\xff\xff\xff\x0f"  # 2**32 - 2 topics
    with pytest.raises(ProtocolError, match="claims 4294967294 elements, 0 bytes left"):
        new[1](Reader(body))
    _, _, new = both("ProduceRequest", 3)
    body = struct.pack(">hhii", -1, 1, 0, 0x7FFFFFFF)  # 2**31 - 1 topics
    with pytest.raises(ProtocolError, match="claims 2147483647 elements"):
        new[1](Reader(body))


def test_generated_source_has_no_per_field_calls_for_fixed_runs():
    """A run of fixed-width fields is one unpack_from / one pack: FetchRequest v13's partition
    (Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset,
    PartitionMaxBytes) is read by a single call."""
    spec = load_spec("FetchRequest")
    source, _ = generate_source(spec.root, 13, True)
    assert (
        "o.partition, o.current_leader_epoch, o.fetch_offset, o.last_fetched_epoch, "
        "o.log_start_offset, o.partition_max_bytes = " in source
    )
    assert compile_generated(spec.root, 13, True)[1] is not None


def test_tagged_fields_of_a_flexible_header_are_skipped_and_the_body_read_after_them():
    """The header's empty tagged section is read by a shortcut (one 0 byte); a header that does
    carry tagged fields is still read in full."""
    body = produce_request_body()
    frame = encode_request(ApiKey.PRODUCE, 9, 7, "cli", body)
    head = struct.pack(">hhih3s", 0, 9, 7, 3, b"cli")
    assert frame[len(head)] == 0
    tagged = head + b"\x02\x00\x01x\x07\x02yz" + frame[len(head) + 1 :]
    assert decode_request(tagged)[1] == decode_request(frame)[1] == body
    with pytest.raises(ProtocolError):
        decode_request(head + b"\x01\x00\x7f" + frame[len(head) + 1 :])  # runs past the end
    response = fetch_response_frame(13)
    flexible = response[:4] + b"\x01\x03\x01q" + response[5:]
    assert decode_response(ApiKey.FETCH, 13, flexible) == decode_response(
        ApiKey.FETCH, 13, response
    )


def produce_request_body():
    return decode_request(produce_v9_frame())[1]
