"""Tests of the Kafka message schema engine (``raftcore.protocol.schema``) and of the frames built
on it (``raftcore.protocol.api``).

- Every spec file, every valid version: an object with a non-default value in every field of
  that version (and one with every nullable field null) encodes, decodes to an equal object and
  re-encodes to the same bytes. Hypothesis does the same with random values for a few messages.
- Damaged input: every strict prefix of an encoded message, and randomly corrupted bytes,
  decode or raise ProtocolError -- never another exception.
- The wire rules, one test each, against bytes written out by hand with ``struct.pack``.

Whether the specs say what Kafka's message definitions say (field names, types, versions,
nullable versions, tags) was checked against Kafka's JSON outside the test suite (the Kafka
source is not available in CI); ``tests/test_protocol_crosscheck.py`` compares bytes with
kafka-python, whose codec is generated from Kafka's own JSON.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import example_count

from raftcore.protocol import api
from raftcore.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    UnknownApiKeyError,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from raftcore.protocol.schema import (
    SPEC_DIR,
    FieldSpec,
    MessageSpec,
    ProtocolError,
    Reader,
    StructSpec,
    Writer,
    load_spec,
    snake,
)

SETTINGS = settings(
    max_examples=example_count(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FUZZ = settings(SETTINGS, max_examples=example_count(100))

SPEC_NAMES = sorted(path.stem for path in SPEC_DIR.glob("*.json"))
CASES = [
    (name, version)
    for name in SPEC_NAMES
    for version in range(load_spec(name).valid.low, load_spec(name).valid.high + 1)
]
CASE_IDS = [f"{name}-v{version}" for name, version in CASES]

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


# ---- building objects from a spec ---------------------------------------------------------------


class Distinct:
    """A deterministic source of non-default values, a different one for every field: integers
    near both ends of their range, non-ASCII strings, payloads long enough to need a two-byte
    compact length. With ``nulls``, every field nullable in the version is null instead."""

    def __init__(self, payload_size: int = 130, nulls: bool = False) -> None:
        self.n = 0
        self.payload_size = payload_size
        self.nulls = nulls

    def null(self, f: FieldSpec, nullable: bool) -> bool:
        return self.nulls and nullable

    def count(self, f: FieldSpec) -> int:
        return 2

    def scalar(self, f: FieldSpec, element: str, default: Any) -> Any:
        self.n += 1
        n, k = self.n, self.n % 61 + 1
        if element in INT_RANGES:
            lo, hi = INT_RANGES[element]
            first, second = (hi - k, lo + k) if n % 2 else (lo + k, hi - k)
            return first if first != default else second
        if element == "bool":
            return not default
        if element == "float64":
            return n + 0.25
        if element == "string":
            return f"{f.name}-{n}-\u00fc\u20ac"  # 2- and 3-byte UTF-8: bytes != characters
        if element == "uuid":
            return bytes(((n + i) & 0xFF) or 1 for i in range(16))
        if element in ("bytes", "records"):
            return bytes((n + i) & 0xFF for i in range(self.payload_size))
        raise AssertionError(f"no value for type {element}")


class Drawn:
    """Values drawn by hypothesis (``data.draw``): any value of the type, null where allowed."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw

    def null(self, f: FieldSpec, nullable: bool) -> bool:
        return nullable and self.draw(st.integers(0, 4)) == 0

    def count(self, f: FieldSpec) -> int:
        return self.draw(st.integers(0, 2))

    def scalar(self, f: FieldSpec, element: str, default: Any) -> Any:
        if element in INT_RANGES:
            lo, hi = INT_RANGES[element]
            edges = sorted({lo, hi, max(lo, -1), 0})
            return self.draw(st.one_of(st.sampled_from(edges), st.integers(lo, hi)))
        if element == "bool":
            return self.draw(st.booleans())
        if element == "float64":
            return self.draw(st.floats(allow_nan=False))
        if element == "string":
            return self.draw(st.text(st.characters(codec="utf-8"), max_size=12))
        if element == "uuid":
            return self.draw(st.binary(min_size=16, max_size=16))
        if element in ("bytes", "records"):
            return self.draw(st.binary(max_size=200))
        raise AssertionError(f"no value for type {element}")


def fill(struct_spec: StructSpec, version: int, source: Any) -> Any:
    """An instance of ``struct_spec`` with a value from ``source`` in every field present in
    ``version``; the other fields keep their defaults."""
    values = {}
    for f in struct_spec.fields:
        if version in f.versions:
            values[f.attr] = field_value(f, version, source)
    return struct_spec.cls(**values)


def field_value(f: FieldSpec, version: int, source: Any) -> Any:
    if source.null(f, version in f.nullable):
        return None
    if f.is_array:
        count = source.count(f)
        if f.struct is not None:
            return [fill(f.struct, version, source) for _ in range(count)]
        return [source.scalar(f, f.element, None) for _ in range(count)]
    if f.struct is not None:
        return fill(f.struct, version, source)
    return source.scalar(f, f.element, f.default)


def present_fields(struct_spec: StructSpec, obj: Any, version: int):
    """(field, value) of every field of ``obj`` present in ``version``, recursively."""
    for f in struct_spec.fields:
        if version not in f.versions:
            continue
        value = getattr(obj, f.attr)
        yield f, value
        if f.struct is not None and value is not None:
            for item in value if f.is_array else [value]:
                yield from present_fields(f.struct, item, version)


def roundtrip(spec: MessageSpec, obj: Any, version: int) -> bytes:
    data = spec.encode(obj, version).getvalue()
    decoded = spec.decode(data, version)
    assert decoded == obj
    assert spec.encode(decoded, version).getvalue() == data
    return data


# ---- every spec, every version ------------------------------------------------------------------


def test_every_spec_file_is_exercised():
    """The parametrized cases cover the 70 spec files and all their versions."""
    assert len(SPEC_NAMES) == 70
    assert {name for name, _ in CASES} == set(SPEC_NAMES)
    for name in SPEC_NAMES:
        spec = load_spec(name)
        assert not spec.valid.empty
        assert sum(1 for n, _ in CASES if n == name) == spec.valid.high - spec.valid.low + 1


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_generated_values_differ_from_the_default_in_every_present_field(name, version):
    """Guards the round-trip tests below: a value left at its default would pass them even if
    its field were never written or read."""
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct())
    checked = 0
    for f, value in present_fields(spec.root, obj, version):
        checked += 1
        if f.is_array:
            assert len(value) == 2, f.name
        elif f.struct is not None:
            assert value != f.struct.cls(), f.name
        else:
            assert value != f.default, f.name
    # Only ApiVersionsRequest v0-v2 and ListGroupsRequest v0-v3 have no field at all.
    assert checked > 0 or (name, version) in {
        *(("ApiVersionsRequest", v) for v in (0, 1, 2)),
        *(("ListGroupsRequest", v) for v in (0, 1, 2, 3)),
    }


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_every_field_of_every_version_round_trips(name, version):
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct())
    data = roundtrip(spec, obj, version)
    # The decoder reads any buffer type, and only the bytes of the message.
    assert spec.decode(memoryview(data), version) == obj
    assert spec.decode(bytearray(data) + b"\x00\x01", version) == obj


def has_nullable_field(struct_spec: StructSpec, version: int) -> bool:
    return any(
        version in f.versions
        and (
            version in f.nullable
            or (f.struct is not None and has_nullable_field(f.struct, version))
        )
        for f in struct_spec.fields
    )


NULLABLE_CASES = [(n, v) for n, v in CASES if has_nullable_field(load_spec(n).root, v)]


@pytest.mark.parametrize(
    ("name", "version"), NULLABLE_CASES, ids=[f"{n}-v{v}" for n, v in NULLABLE_CASES]
)
def test_null_in_every_nullable_field_round_trips(name, version):
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct(nulls=True))
    nulls = [f.name for f, value in present_fields(spec.root, obj, version) if value is None]
    assert nulls
    roundtrip(spec, obj, version)


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_empty_arrays_and_empty_payloads_round_trip(name, version):
    spec = load_spec(name)

    class Empty(Distinct):
        def count(self, f):
            return 0

    roundtrip(spec, fill(spec.root, version, Empty(payload_size=0)), version)


ABSENT_CASES = [
    (name, version)
    for name, version in CASES
    if any(version not in f.versions for f in load_spec(name).root.fields)
]


@pytest.mark.parametrize(
    ("name", "version"), ABSENT_CASES, ids=[f"{n}-v{v}" for n, v in ABSENT_CASES]
)
def test_fields_outside_the_version_are_not_written(name, version):
    """A value in a (top-level) field the version does not have changes nothing on the wire."""
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct())
    baseline = spec.encode(obj, version).getvalue()
    for f in spec.root.fields:
        if version not in f.versions:
            value = field_value(f, f.versions.low, Distinct())
            assert value != getattr(obj, f.attr)
            setattr(obj, f.attr, value)
    assert spec.encode(obj, version).getvalue() == baseline


RANDOM_MESSAGES = [
    "FetchRequest",
    "FetchResponse",
    "MetadataResponse",
    "ProduceRequest",
    "ProduceResponse",
    "ApiVersionsResponse",
    "DescribeQuorumResponse",
    "FetchSnapshotResponse",
]


@pytest.mark.parametrize("name", RANDOM_MESSAGES)
@SETTINGS
@given(data=st.data())
def test_random_values_round_trip(name, data):
    spec = load_spec(name)
    version = data.draw(st.integers(spec.valid.low, spec.valid.high), label="version")
    obj = fill(spec.root, version, Drawn(data.draw))
    roundtrip(spec, obj, version)


# ---- damaged input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "version"), CASES, ids=CASE_IDS)
def test_every_strict_prefix_of_a_message_raises_protocol_error(name, version):
    spec = load_spec(name)
    data = spec.encode(fill(spec.root, version, Distinct(payload_size=3)), version).getvalue()
    for end in range(len(data)):
        with pytest.raises(ProtocolError):
            spec.decode(data[:end], version)


FUZZED = [
    ("FetchRequest", 11),
    ("FetchRequest", 17),
    ("FetchResponse", 16),
    ("MetadataResponse", 12),
    ("ProduceRequest", 9),
    ("ApiVersionsResponse", 3),
    ("DescribeQuorumResponse", 2),
    ("VoteRequest", 1),
]


@pytest.mark.parametrize(("name", "version"), FUZZED, ids=[f"{n}-v{v}" for n, v in FUZZED])
@FUZZ
@given(data=st.data())
def test_corrupted_bytes_decode_or_raise_protocol_error(name, version, data):
    spec = load_spec(name)
    buf = bytearray(
        spec.encode(fill(spec.root, version, Distinct(payload_size=4)), version).getvalue()
    )
    for _ in range(data.draw(st.integers(1, 4), label="damage count")):
        at = data.draw(st.integers(0, len(buf) - 1), label="at")
        buf[at] = data.draw(st.sampled_from((0x00, 0x01, 0x7F, 0x80, 0xFF)) | st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        spec.decode(bytes(buf), version)


@FUZZ
@given(frame=st.binary(max_size=64))
def test_random_request_frames_decode_or_raise_protocol_error(frame):
    with contextlib.suppress(ProtocolError):
        decode_request(frame)


@FUZZ
@given(data=st.data())
def test_corrupted_request_frames_decode_or_raise_protocol_error(data):
    key = data.draw(st.sampled_from(sorted(SUPPORTED_VERSIONS)), label="api")
    lo, hi = SUPPORTED_VERSIONS[key]
    version = data.draw(st.integers(lo, hi), label="version")
    spec = api.request_spec(key)
    body = fill(spec.root, version, Distinct(payload_size=4))
    frame = bytearray(encode_request(key, version, 7, "client", body))
    at = data.draw(st.integers(0, len(frame) - 1), label="at")
    frame[at] = data.draw(st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(0, len(frame)), label="cut")
    with contextlib.suppress(ProtocolError):
        decode_request(bytes(frame[:cut]))


# ---- wire rules ---------------------------------------------------------------------------------


def test_fixed_width_integers_are_big_endian():
    spec = load_spec("InitProducerIdResponse")
    obj = spec.cls(
        throttle_time_ms=0x01020304, error_code=0x0506, producer_id=0x0708, producer_epoch=-2
    )
    assert spec.encode(obj, 0).getvalue() == struct.pack(">ihqh", 0x01020304, 0x0506, 0x0708, -2)


def test_non_flexible_versions_write_strings_with_an_int16_length():
    spec = load_spec("InitProducerIdRequest")
    obj = spec.cls(transactional_id="tx-\u00e9", transaction_timeout_ms=1000)
    raw = "tx-\u00e9".encode()
    assert spec.encode(obj, 1).getvalue() == I16.pack(len(raw)) + raw + I32.pack(1000)


def test_flexible_versions_write_compact_strings_as_length_plus_one_uvarint():
    spec = load_spec("ApiVersionsRequest")
    obj = spec.cls(client_software_name="abc", client_software_version="")
    assert spec.encode(obj, 3).getvalue() == b"\x04abc" + b"\x01" + b"\x00"
    # 200 bytes: 201 as an unsigned varint is two bytes, 0xc9 0x01.
    obj = spec.cls(client_software_name="x" * 200, client_software_version="1.0")
    assert spec.encode(obj, 3).getvalue() == b"\xc9\x01" + b"x" * 200 + b"\x041.0" + b"\x00"
    assert spec.decode(b"\xc9\x01" + b"x" * 200 + b"\x041.0" + b"\x00", 3) == obj


def test_null_nullable_string_is_minus_one_in_non_flexible_versions():
    spec = load_spec("InitProducerIdRequest")
    obj = spec.cls(transactional_id=None, transaction_timeout_ms=5)
    expected = struct.pack(">hi", -1, 5)
    assert spec.encode(obj, 0).getvalue() == expected
    assert spec.decode(expected, 0).transactional_id is None


def test_null_nullable_string_is_zero_in_flexible_versions():
    spec = load_spec("InitProducerIdRequest")
    obj = spec.cls(transactional_id=None, transaction_timeout_ms=5)
    # v2 is flexible: compact null string (0), int32, empty tagged section.
    expected = b"\x00" + I32.pack(5) + b"\x00"
    assert spec.encode(obj, 2).getvalue() == expected
    assert spec.decode(expected, 2).transactional_id is None
    # And the empty string is length 0 + 1.
    obj.transactional_id = ""
    assert spec.encode(obj, 2).getvalue() == b"\x01" + I32.pack(5) + b"\x00"


def test_null_in_a_non_nullable_field_is_refused_both_ways():
    spec = load_spec("ListOffsetsRequest")
    topic = spec.cls.ListOffsetsTopic(name=None)
    with pytest.raises(ProtocolError):
        spec.encode(spec.cls(topics=[topic]), 1)
    with pytest.raises(ProtocolError):
        spec.encode(spec.cls(topics=None), 1)
    # ReplicaId, IsolationLevel (v2+), a topic array of 1, a name of length -1.
    with pytest.raises(ProtocolError, match="string length"):
        spec.decode(struct.pack(">ibih", 0, 0, 1, -1), 2)
    # Compact: 0 is null. ListOffsets v6: ReplicaId, IsolationLevel, compact array of 1.
    with pytest.raises(ProtocolError, match="string length"):
        spec.decode(struct.pack(">ib", 0, 0) + b"\x02\x00", 6)


def test_negative_lengths_other_than_minus_one_are_refused():
    spec = load_spec("InitProducerIdRequest")
    with pytest.raises(ProtocolError):
        spec.decode(struct.pack(">hi", -2, 5), 0)
    produce = load_spec("ProduceRequest")
    # v3: null transactional id, acks, timeout, 1 topic "t", 1 partition 0, records length -2.
    frame = struct.pack(">hhiih1sii", -1, 1, 100, 1, 1, b"t", 1, 0) + I32.pack(-2)
    with pytest.raises(ProtocolError):
        produce.decode(frame, 3)
    with pytest.raises(ProtocolError, match="bad count"):
        load_spec("ListOffsetsRequest").decode(struct.pack(">ii", 0, -2), 0)


def test_non_flexible_arrays_have_an_int32_count_and_null_is_minus_one():
    spec = load_spec("MetadataRequest")
    topic = spec.cls.MetadataRequestTopic(name="ab")
    assert spec.encode(spec.cls(topics=[topic]), 0).getvalue() == struct.pack(">ih2s", 1, 2, b"ab")
    assert spec.encode(spec.cls(topics=None), 1).getvalue() == I32.pack(-1)
    assert spec.decode(I32.pack(-1), 1).topics is None
    # v0 topics are not nullable (an empty list means all topics there).
    with pytest.raises(ProtocolError):
        spec.encode(spec.cls(topics=None), 0)
    with pytest.raises(ProtocolError):
        spec.decode(I32.pack(-1), 0)


def test_flexible_arrays_are_compact_and_null_is_zero():
    spec = load_spec("MetadataRequest")
    # v9: topics, AllowAutoTopicCreation (default true), IncludeClusterAuthorizedOperations,
    # IncludeTopicAuthorizedOperations, tagged section.
    assert spec.encode(spec.cls(topics=None), 9).getvalue() == b"\x00\x01\x00\x00\x00"
    assert spec.encode(spec.cls(topics=[]), 9).getvalue() == b"\x01\x01\x00\x00\x00"
    topic = spec.cls.MetadataRequestTopic(name="t")
    # Every struct, array elements included, ends with its own tagged section.
    assert spec.encode(spec.cls(topics=[topic]), 9).getvalue() == (
        b"\x02" + b"\x02t\x00" + b"\x01\x00\x00\x00"
    )
    # v10 adds the topic id (16 bytes) and a nullable name.
    topic = spec.cls.MetadataRequestTopic(topic_id=bytes(range(1, 17)), name=None)
    assert spec.encode(spec.cls(topics=[topic]), 10).getvalue() == (
        b"\x02" + bytes(range(1, 17)) + b"\x00\x00" + b"\x01\x00\x00\x00"
    )


def test_primitive_arrays_are_written_element_after_element():
    spec = load_spec("ListOffsetsResponse")
    partition = spec.cls.ListOffsetsPartitionResponse(
        partition_index=3, error_code=0, old_style_offsets=[10, -1]
    )
    topic = spec.cls.ListOffsetsTopicResponse(name="t", partitions=[partition])
    expected = struct.pack(">ih1siihiqq", 1, 1, b"t", 1, 3, 0, 2, 10, -1)
    assert spec.encode(spec.cls(topics=[topic]), 0).getvalue() == expected
    assert spec.decode(expected, 0).topics[0].partitions[0].old_style_offsets == [10, -1]


def test_bytes_and_records_have_an_int32_length_or_a_compact_one():
    spec = load_spec("ProduceRequest")
    records = b"\x01\x02\x03"

    def request(value):
        partition = spec.cls.PartitionProduceData(index=0, records=value)
        topic = spec.cls.TopicProduceData(name="t", partition_data=[partition])
        return spec.cls(transactional_id=None, acks=-1, timeout_ms=30, topic_data=[topic])

    head = struct.pack(">hhiih1sii", -1, -1, 30, 1, 1, b"t", 1, 0)
    assert spec.encode(request(records), 3).getvalue() == head + I32.pack(3) + records
    assert spec.encode(request(None), 3).getvalue() == head + I32.pack(-1)
    compact = b"\x00" + struct.pack(">hi", -1, 30) + b"\x02\x02t\x02" + I32.pack(0)
    assert spec.encode(request(records), 9).getvalue() == compact + b"\x04" + records + b"\0\0\0"
    assert spec.encode(request(None), 9).getvalue() == compact + b"\x00" + b"\0\0\0"


def test_decoded_records_are_a_view_of_the_frame():
    spec = load_spec("ProduceRequest")
    partition = spec.cls.PartitionProduceData(index=0, records=b"batch-bytes")
    obj = spec.cls(
        acks=1,
        timeout_ms=1,
        topic_data=[spec.cls.TopicProduceData(name="t", partition_data=[partition])],
    )
    frame = bytearray(spec.encode(obj, 8).getvalue())
    records = spec.decode(frame, 8).topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert bytes(records) == b"batch-bytes"
    frame[-1] = ord("X")  # the view sees the frame it was read from: nothing was copied
    assert bytes(records) == b"batch-byteX"


def test_uuids_are_sixteen_raw_bytes():
    spec = load_spec("FetchSnapshotRequest")
    partition = spec.cls.PartitionSnapshot(partition=1, replica_directory_id=b"\x11" * 16)
    topic = spec.cls.TopicSnapshot(name="t", partitions=[partition])
    data = spec.encode(spec.cls(topics=[topic]), 1).getvalue()
    assert b"\x01\x00\x10" + b"\x11" * 16 in data  # tagged: 1 field, tag 0, size 16
    partition.replica_directory_id = b"\x11" * 15
    with pytest.raises(ProtocolError, match="16 bytes"):
        spec.encode(spec.cls(topics=[topic]), 1)


def test_values_out_of_range_of_their_type_are_refused():
    spec = load_spec("InitProducerIdResponse")
    with pytest.raises(ProtocolError, match="does not fit int16"):
        spec.encode(spec.cls(error_code=2**15), 0)
    with pytest.raises(ProtocolError, match="does not fit int64"):
        spec.encode(spec.cls(producer_id=2**63), 0)
    vote = load_spec("VoteResponse")
    endpoint = vote.cls.NodeEndpoint(node_id=1, host="h", port=-1)
    with pytest.raises(ProtocolError, match="uint16"):
        vote.encode(vote.cls(node_endpoints=[endpoint]), 1)


def test_uint16_ports_use_the_full_unsigned_range():
    spec = load_spec("VoteResponse")
    endpoint = spec.cls.NodeEndpoint(node_id=1, host="h", port=65535)
    data = spec.encode(spec.cls(node_endpoints=[endpoint]), 1).getvalue()
    # error code, no topics, tagged section: 1 field, tag 0, size 10, an array of one endpoint.
    assert data == struct.pack(">h", 0) + b"\x01" + b"\x01\x00\x0a" + (
        b"\x02" + I32.pack(1) + b"\x02h" + b"\xff\xff" + b"\x00"
    )
    assert spec.decode(data, 1).node_endpoints[0].port == 65535


def test_non_flexible_strings_longer_than_int16_are_refused():
    spec = load_spec("InitProducerIdRequest")
    with pytest.raises(ProtocolError, match="too long"):
        spec.encode(spec.cls(transactional_id="x" * 0x8000), 1)
    spec.encode(spec.cls(transactional_id="x" * 0x7FFF), 1)


def test_strings_that_are_not_utf8_are_refused():
    spec = load_spec("InitProducerIdRequest")
    with pytest.raises(ProtocolError, match="UTF-8"):
        spec.decode(struct.pack(">h2si", 2, b"\xff\xfe", 5), 0)


def test_array_counts_beyond_the_remaining_bytes_are_refused_before_allocating():
    spec = load_spec("MetadataRequest")
    with pytest.raises(ProtocolError, match="claims"):
        spec.decode(I32.pack(2**31 - 1), 1)
    with pytest.raises(ProtocolError, match="claims"):
        spec.decode(b"\xff\xff\xff\xff\x07", 9)


def test_unsigned_varints_of_more_than_five_bytes_are_refused():
    assert Reader(b"\xff\xff\xff\xff\x0f").uvarint() == 2**32 - 1
    with pytest.raises(ProtocolError, match="too long"):
        Reader(b"\x80\x80\x80\x80\x80\x01").uvarint()
    with pytest.raises(ProtocolError, match="truncated"):
        Reader(b"\x80\x80").uvarint()
    with pytest.raises(ProtocolError, match="negative"):
        Writer().uvarint(-1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (2**31 - 1, b"\xff\xff\xff\xff\x07"),
    ],
)
def test_unsigned_varints_are_little_endian_groups_of_seven_bits(value, encoded):
    w = Writer()
    w.uvarint(value)
    assert w.getvalue() == encoded
    r = Reader(encoded)
    assert r.uvarint() == value
    assert r.remaining() == 0


def test_tagged_fields_equal_to_default_are_not_written():
    spec = load_spec("FetchRequest")
    fixed = struct.pack(">iiiibii", -1, 0, 0, 0x7FFFFFFF, 0, 0, -1)
    # ReplicaId, MaxWaitMs, MinBytes, MaxBytes, IsolationLevel, SessionId, SessionEpoch; no
    # topics, no forgotten topics, RackId "", and an empty tagged section.
    assert spec.encode(spec.cls(), 12).getvalue() == fixed + b"\x01\x01\x01" + b"\x00"
    # Explicit default values are still defaults.
    obj = spec.cls(cluster_id=None)
    assert spec.encode(obj, 12).getvalue() == fixed + b"\x01\x01\x01" + b"\x00"
    # A value that is not the default is: 1 field, tag 0, size 3, compact "c1".
    obj.cluster_id = "c1"
    assert spec.encode(obj, 12).getvalue() == fixed + b"\x01\x01\x01" + b"\x01\x00\x03\x03c1"
    # A tagged struct equal to its default (ReplicaState, v15) is not written either.
    v15 = spec.encode(spec.cls(replica_state=spec.cls.ReplicaState()), 15).getvalue()
    assert v15 == struct.pack(">iiibii", 0, 0, 0x7FFFFFFF, 0, 0, -1) + b"\x01\x01\x01\x00"


def test_tagged_fields_are_written_in_ascending_tag_order_with_their_size():
    spec = load_spec("FetchRequest")
    obj = spec.cls(
        cluster_id="c", replica_state=spec.cls.ReplicaState(replica_id=2, replica_epoch=3)
    )
    data = spec.encode(obj, 15).getvalue()
    fixed = struct.pack(">iiibii", 0, 0, 0x7FFFFFFF, 0, 0, -1) + b"\x01\x01\x01"
    replica_state = struct.pack(">iq", 2, 3) + b"\x00"  # a struct ends with its tagged section
    assert data == fixed + b"\x02" + b"\x00\x02\x02c" + b"\x01\x0d" + replica_state
    assert spec.decode(data, 15) == obj
    # A spec that declares its tags out of order still writes them in ascending order.
    synthetic = MessageSpec(
        {
            "name": "Synthetic",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "B", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": 5},
                {"name": "A", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": 2},
            ],
        }
    )
    data = synthetic.encode(synthetic.cls(b=1, a=2), 0).getvalue()
    assert data == b"\x02" + b"\x02\x01\x02" + b"\x05\x01\x01"
    assert synthetic.decode(data, 0) == synthetic.cls(b=1, a=2)


def test_tagged_field_sizes_over_127_take_a_multi_byte_uvarint():
    spec = load_spec("FetchRequest")
    cluster_id = "k" * 200
    data = spec.encode(spec.cls(cluster_id=cluster_id), 12).getvalue()
    # tag 0, size 202 (= ca 01 as a varint), compact length 201 (= c9 01), the 200 bytes.
    assert data.endswith(b"\x01\x00\xca\x01\xc9\x01" + b"k" * 200)
    assert spec.decode(data, 12).cluster_id == cluster_id


def test_tagged_fields_exist_only_in_flexible_versions():
    spec = load_spec("FetchRequest")
    obj = spec.cls(cluster_id="c")
    # v11 has no ClusterId at all: not a regular field, not a tagged one.
    assert spec.encode(obj, 11).getvalue() == spec.encode(spec.cls(), 11).getvalue()
    assert 11 not in spec.flexible
    assert 12 in spec.flexible


def test_unknown_tagged_fields_are_skipped_on_read():
    spec = load_spec("FetchRequest")
    partition = spec.cls.FetchPartition(partition=4, fetch_offset=10, partition_max_bytes=99)
    obj = spec.cls(topics=[spec.cls.FetchTopic(topic="t", partitions=[partition])])
    data = spec.encode(obj, 12).getvalue()
    # ... partition tagged section, ForgottenTopicsData [], RackId "", top tagged section.
    assert data[-4:] == b"\x00\x01\x01\x00"
    unknown_top = b"\x02" + b"\x07\x03abc" + b"\xa8\x46\x00"  # tags 7 and 9000 (two bytes)
    unknown_partition = b"\x01" + b"\x09\x02zz"
    spliced = data[:-4] + unknown_partition + b"\x01\x01" + unknown_top
    assert spec.decode(spliced, 12) == obj
    # Known tags among unknown ones are still read.
    mixed = data[:-1] + b"\x03" + b"\x00\x02\x02c" + b"\x07\x01x" + b"\x08\x00"
    assert spec.decode(mixed, 12).cluster_id == "c"


def test_unknown_tagged_field_longer_than_the_message_is_refused():
    spec = load_spec("FetchRequest")
    data = spec.encode(spec.cls(), 12).getvalue()
    with pytest.raises(ProtocolError):
        spec.decode(data[:-1] + b"\x01\x07\x05abc", 12)


def test_a_tagged_field_is_read_within_its_declared_size():
    """ClusterId declared 2 bytes long but holding a 4-byte string: the string must not be read
    out of the bytes that follow the tagged field."""
    spec = load_spec("FetchRequest")
    data = spec.encode(spec.cls(), 12).getvalue()
    with pytest.raises(ProtocolError):
        spec.decode(data[:-1] + b"\x01\x00\x02\x05a" + b"bcdefg", 12)


def test_field_level_flexible_versions_none_keeps_the_classic_string():
    """RequestHeader v2 is flexible but its ClientId has ``"flexibleVersions": "none"``."""
    spec = load_spec("RequestHeader")
    obj = spec.cls(request_api_key=1, request_api_version=12, correlation_id=7, client_id="cli")
    assert spec.encode(obj, 2).getvalue() == struct.pack(">hhih3s", 1, 12, 7, 3, b"cli") + b"\x00"
    assert spec.encode(obj, 1).getvalue() == struct.pack(">hhih3s", 1, 12, 7, 3, b"cli")
    assert spec.encode(obj, 0).getvalue() == struct.pack(">hhi", 1, 12, 7)
    obj.client_id = None
    assert spec.encode(obj, 2).getvalue() == struct.pack(">hhih", 1, 12, 7, -1) + b"\x00"


def test_response_header_v1_adds_a_tagged_section():
    spec = load_spec("ResponseHeader")
    assert spec.encode(spec.cls(correlation_id=9), 0).getvalue() == I32.pack(9)
    assert spec.encode(spec.cls(correlation_id=9), 1).getvalue() == I32.pack(9) + b"\x00"


def test_nullable_structs_are_an_int8_marker_then_the_struct():
    synthetic = MessageSpec(
        {
            "name": "Synthetic",
            "validVersions": "0-1",
            "flexibleVersions": "1+",
            "fields": [
                {
                    "name": "Inner",
                    "type": "Inner",
                    "versions": "0+",
                    "nullableVersions": "0+",
                    "fields": [{"name": "X", "type": "int32", "versions": "0+"}],
                },
            ],
        }
    )
    assert synthetic.encode(synthetic.cls(inner=None), 0).getvalue() == b"\xff"
    obj = synthetic.cls(inner=synthetic.cls.Inner(x=5))
    assert synthetic.encode(obj, 0).getvalue() == b"\x01" + I32.pack(5)
    assert synthetic.encode(obj, 1).getvalue() == b"\x01" + I32.pack(5) + b"\x00" + b"\x00"
    assert synthetic.decode(b"\xff", 0).inner is None
    assert synthetic.decode(b"\x01" + I32.pack(5), 0) == obj


def test_versions_outside_the_valid_range_are_refused():
    spec = load_spec("FetchRequest")
    for version in (-1, 18, 0x7FFF):
        with pytest.raises(ProtocolError, match="no version"):
            spec.encode(spec.cls(), version)
        with pytest.raises(ProtocolError, match="no version"):
            spec.decode(b"", version)


def test_field_names_become_snake_case_attributes():
    assert snake("FetchOffset") == "fetch_offset"
    assert snake("ClusterId") == "cluster_id"
    assert snake("ZkMigrationReady") == "zk_migration_ready"
    assert snake("IsrNodes") == "isr_nodes"
    assert snake("HighWatermark") == "high_watermark"
    fetch = load_spec("FetchRequest").cls
    assert fetch.FetchPartition._fields[:3] == ("partition", "current_leader_epoch", "fetch_offset")
    with pytest.raises(TypeError, match="no field"):
        fetch(fetchoffset=1)


def test_defaults_come_from_the_spec():
    fetch = load_spec("FetchRequest").cls()
    assert (fetch.replica_id, fetch.max_bytes, fetch.session_epoch) == (-1, 0x7FFFFFFF, -1)
    assert fetch.cluster_id is None
    assert fetch.rack_id == ""
    assert fetch.replica_state == load_spec("FetchRequest").cls.ReplicaState(
        replica_id=-1, replica_epoch=-1
    )
    metadata = load_spec("MetadataRequest").cls()
    assert metadata.allow_auto_topic_creation is True
    response = load_spec("MetadataResponse").cls.MetadataResponseTopic()
    assert response.topic_authorized_operations == -(2**31)
    assert load_spec("ListOffsetsRequest").cls.ListOffsetsPartition().max_num_offsets == 1


def test_decoded_fields_outside_the_version_hold_their_defaults():
    spec = load_spec("FetchRequest")
    decoded = spec.decode(spec.encode(spec.cls(max_wait_ms=5), 0).getvalue(), 0)
    assert decoded.max_wait_ms == 5
    assert decoded.max_bytes == 0x7FFFFFFF
    assert decoded.cluster_id is None
    assert decoded.forgotten_topics_data == []
    assert decoded.replica_state == spec.cls.ReplicaState()


# ---- frames: headers, api keys, versions (api.py) -----------------------------------------------


def fetch_body(version: int) -> Any:
    spec = load_spec("FetchRequest")
    return fill(spec.root, version, Distinct(payload_size=5))


def test_request_header_v2_keeps_an_int16_client_id():
    body = fetch_body(12)
    frame = encode_request(ApiKey.FETCH, 12, 7, "cli", body)
    header = struct.pack(">hhih3s", 1, 12, 7, 3, b"cli") + b"\x00"
    assert frame == header + load_spec("FetchRequest").encode(body, 12).getvalue()
    assert decode_request(frame) == (RequestHeader(1, 12, 7, "cli"), body)
    # The same bytes as the RequestHeader spec at v2.
    spec = load_spec("RequestHeader")
    obj = spec.cls(request_api_key=1, request_api_version=12, correlation_id=7, client_id="cli")
    assert frame.startswith(spec.encode(obj, 2).getvalue())


def test_request_header_v1_for_non_flexible_versions_has_no_tagged_section():
    body = fetch_body(11)
    frame = encode_request(ApiKey.FETCH, 11, 8, "c", body)
    assert (
        frame
        == struct.pack(">hhih1s", 1, 11, 8, 1, b"c")
        + load_spec("FetchRequest").encode(body, 11).getvalue()
    )
    assert decode_request(frame) == (RequestHeader(1, 11, 8, "c"), body)


def test_null_client_id_is_minus_one():
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, None, load_spec("ApiVersionsRequest").cls())
    assert frame == struct.pack(">hhih", 18, 0, 1, -1)
    assert decode_request(frame)[0] == RequestHeader(18, 0, 1, None)


def test_request_header_tagged_fields_are_skipped():
    body = load_spec("ApiVersionsRequest").cls(
        client_software_name="n", client_software_version="v"
    )
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "c", body)
    head = struct.pack(">hhih1s", 18, 3, 1, 1, b"c")
    assert frame[len(head)] == 0
    spliced = head + b"\x01\x03\x02hi" + frame[len(head) + 1 :]
    assert decode_request(spliced) == (RequestHeader(18, 3, 1, "c"), body)


def test_api_versions_response_header_is_always_v0():
    spec = load_spec("ApiVersionsResponse")
    body = fill(spec.root, 3, Distinct())
    frame = b"".join(encode_response(ApiKey.API_VERSIONS, 3, 42, body))
    # Correlation id, then the body at once: no tagged section in the header, though v3 is
    # flexible.
    assert frame == I32.pack(42) + spec.encode(body, 3).getvalue()
    assert decode_response(ApiKey.API_VERSIONS, 3, frame) == (42, body)
    assert api.response_header_version(ApiKey.API_VERSIONS, 3) == 0
    # Other flexible responses have header v1.
    metadata = load_spec("MetadataResponse")
    body = fill(metadata.root, 9, Distinct())
    frame = b"".join(encode_response(ApiKey.METADATA, 9, 42, body))
    assert frame == I32.pack(42) + b"\x00" + metadata.encode(body, 9).getvalue()
    assert decode_response(ApiKey.METADATA, 9, frame) == (42, body)
    frame = b"".join(encode_response(ApiKey.METADATA, 8, 42, fill(metadata.root, 8, Distinct())))
    assert frame[4:] == metadata.encode(fill(metadata.root, 8, Distinct()), 8).getvalue()


def test_header_versions_follow_the_flexible_versions():
    for key in ApiKey:
        request, response = api.request_spec(key), api.response_spec(key)
        for version in range(request.valid.low, request.valid.high + 1):
            flexible = version in request.flexible
            assert api.request_header_version(key, version) == (2 if flexible else 1)
            expected = 0 if key == ApiKey.API_VERSIONS else (1 if flexible else 0)
            assert api.response_header_version(key, version) == expected
            assert (version in response.flexible) == flexible


def test_large_records_are_left_uncopied_in_response_frames():
    spec = load_spec("FetchResponse")
    big = memoryview(bytes(range(256)) * 512)  # 128 KiB
    partition = spec.cls.PartitionData(partition_index=0, records=big)
    body = spec.cls(responses=[spec.cls.FetchableTopicResponse(topic="t", partitions=[partition])])
    pieces = encode_response(ApiKey.FETCH, 11, 3, body)
    # Header and fields joined, then the records themselves (the last field of v11).
    assert len(pieces) == 2
    assert pieces[1] is big
    frame = b"".join(pieces)
    assert frame == I32.pack(3) + spec.encode(body, 11).getvalue()
    assert (
        bytes(decode_response(ApiKey.FETCH, 11, frame)[1].responses[0].partitions[0].records) == big
    )


def test_decode_request_rejects_trailing_bytes():
    body = load_spec("InitProducerIdRequest").cls(transactional_id=None, transaction_timeout_ms=1)
    frame = encode_request(ApiKey.INIT_PRODUCER_ID, 2, 5, "c", body)
    assert decode_request(frame)[1] == body
    with pytest.raises(ProtocolError, match="1 bytes after the InitProducerId v2 request"):
        decode_request(frame + b"\x00")


def test_librdkafkas_all_topics_metadata_v12_is_read_as_kafka_reads_it():
    """The bytes librdkafka 2.x sends for list_topics(): a 4-byte placeholder where the compact
    topic count belongs. Kafka reads the first byte as a null list (every topic) and ignores
    the 3 bytes left over; so do we (refusing them closed the client's connection)."""
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    header, body = decode_request(frame)
    assert (header.request_api_key, header.request_api_version) == (ApiKey.METADATA, 12)
    assert body.topics is None
    assert body.allow_auto_topic_creation is False


def test_decode_response_rejects_trailing_bytes():
    body = load_spec("InitProducerIdResponse").cls(producer_id=1)
    frame = b"".join(encode_response(ApiKey.INIT_PRODUCER_ID, 2, 5, body))
    assert decode_response(ApiKey.INIT_PRODUCER_ID, 2, frame) == (5, body)
    with pytest.raises(ProtocolError, match="2 bytes after"):
        decode_response(ApiKey.INIT_PRODUCER_ID, 2, frame + b"\x00\x00")


def test_unknown_api_key_is_refused_with_its_header():
    frame = struct.pack(">hhih3s", 1000, 0, 77, 3, b"cli")
    with pytest.raises(UnknownApiKeyError) as info:
        decode_request(frame)
    assert info.value.header == RequestHeader(1000, 0, 77, "cli")
    assert isinstance(info.value, ProtocolError)
    # Known to Kafka and to raftcore's specs, but not served: unknown too.
    for key in ApiKey:
        if key not in SUPPORTED_VERSIONS:
            with pytest.raises(UnknownApiKeyError):
                decode_request(struct.pack(">hhih", key, 0, 1, -1))


def test_unsupported_version_is_refused_with_its_header():
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for version in (lo - 1, hi + 1):
            frame = struct.pack(">hhih1s", key, version, 3, 1, b"c") + b"\x00" * 64
            with pytest.raises(UnsupportedVersionError) as info:
                decode_request(frame)
            assert info.value.header == RequestHeader(key, version, 3, "c")
            assert f"({lo}-{hi})" in str(info.value)


def test_supported_versions_lie_within_the_spec_valid_versions():
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for spec in (api.request_spec(key), api.response_spec(key)):
            assert spec.api_key == key
            assert spec.valid.low <= lo <= hi <= spec.valid.high


@pytest.mark.parametrize("key", sorted(SUPPORTED_VERSIONS), ids=lambda k: ApiKey(k).name)
def test_every_supported_request_and_response_frame_round_trips(key):
    lo, hi = SUPPORTED_VERSIONS[key]
    for version in range(lo, hi + 1):
        request = fill(api.request_spec(key).root, version, Distinct(payload_size=9))
        frame = encode_request(key, version, version, "id", request)
        assert decode_request(frame) == (RequestHeader(key, version, version, "id"), request)
        response = fill(api.response_spec(key).root, version, Distinct(payload_size=9))
        frame = b"".join(encode_response(key, version, version, response))
        assert decode_response(key, version, frame) == (version, response)
        with pytest.raises(ProtocolError):
            decode_response(key, version, frame[:-1])


# ---- defects found by these tests, fixed in schema.py / api.py --------------------------------

NULLABLE_TAGGED = {
    "name": "Synthetic",
    "validVersions": "0",
    "flexibleVersions": "0+",
    "fields": [
        {
            "name": "A",
            "type": "[]int32",
            "versions": "0+",
            "nullableVersions": "0+",
            "taggedVersions": "0+",
            "tag": 0,
        },
        {
            "name": "B",
            "type": "[]int32",
            "versions": "0+",
            "nullableVersions": "0+",
            "default": "null",
            "taggedVersions": "0+",
            "tag": 1,
        },
    ],
}


def test_tagged_nullable_array_that_differs_from_its_default_is_written():
    spec = MessageSpec(NULLABLE_TAGGED)
    obj = spec.cls(a=None, b=[])
    data = spec.encode(obj, 0).getvalue()
    # Two tagged fields: tag 0 a null compact array (0), tag 1 an empty one (1).
    assert data == b"\x02" + b"\x00\x01\x00" + b"\x01\x01\x01"
    assert spec.decode(data, 0) == obj


def test_struct_with_a_null_default_starts_as_null():
    spec = MessageSpec(
        {
            "name": "Synthetic",
            "validVersions": "0",
            "flexibleVersions": "none",
            "fields": [
                {
                    "name": "Inner",
                    "type": "Inner",
                    "versions": "0+",
                    "nullableVersions": "0+",
                    "default": "null",
                    "fields": [{"name": "X", "type": "int32", "versions": "0+"}],
                },
            ],
        }
    )
    assert spec.cls().inner is None
    assert spec.encode(spec.cls(), 0).getvalue() == b"\xff"


def test_overlong_client_id_is_refused_with_protocol_error():
    with pytest.raises(ProtocolError):
        encode_request(
            ApiKey.API_VERSIONS, 0, 1, "x" * 0x8000, load_spec("ApiVersionsRequest").cls()
        )


def test_records_given_as_a_wide_memoryview_are_written_with_their_byte_length():
    spec = load_spec("ProduceRequest")
    records = memoryview(b"abcdefgh").cast("I")  # 2 items of 4 bytes
    partition = spec.cls.PartitionProduceData(index=0, records=records)
    topic = spec.cls.TopicProduceData(name="t", partition_data=[partition])
    data = spec.encode(spec.cls(acks=1, timeout_ms=1, topic_data=[topic]), 8).getvalue()
    assert data.endswith(I32.pack(8) + b"abcdefgh")


@pytest.mark.parametrize(
    ("name", "version", "path"),
    [
        ("FetchSnapshotRequest", 0, ("topics", "partitions", "snapshot_id")),
        ("FetchResponse", 12, ("responses", "partitions", "diverging_epoch")),
    ],
)
def test_null_in_a_non_nullable_struct_is_refused_with_protocol_error(name, version, path):
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct(payload_size=1))
    outer, inner, attr = path
    setattr(getattr(getattr(obj, outer)[0], inner)[0], attr, None)
    with pytest.raises(ProtocolError):
        spec.encode(obj, version)
