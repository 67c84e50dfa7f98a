"""Byte-level cross-checks of raftcore's message codec against kafka-python.

kafka-python (3.x) has two protocol implementations, and both are used here:

- its current one, generated at import from Kafka's own JSON message definitions (a copy in
  ``kafka/protocol/schemas/resources``): every version of ApiVersions, Metadata, Produce,
  Fetch, ListOffsets, InitProducerId and DescribeQuorum that its JSON and raftcore's specs both
  declare, and the request and response headers. It has no Vote, BeginQuorumEpoch,
  EndQuorumEpoch or FetchSnapshot;
- its older hand-written classes (``kafka.protocol.old``), an independent transcription of the
  non-flexible versions, which also reach the versions Kafka 4's JSON no longer declares
  (Produce v0-v2, Fetch v0-v3, ListOffsets v0).

For each API and version: the same content (a non-default value in every field), encoded by
both, gives identical bytes, and each side decodes the other's bytes to the same content.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from typing import Any

import pytest

pytest.importorskip("kafka")

from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from kafka.protocol.api_header import RequestHeader as KpRequestHeader
from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.old import api_versions as old_api_versions
from kafka.protocol.old import fetch as old_fetch
from kafka.protocol.old import init_producer_id as old_init_producer_id
from kafka.protocol.old import list_offsets as old_list_offsets
from kafka.protocol.old import metadata as old_metadata
from kafka.protocol.old import produce as old_produce
from kafka.protocol.old.api import RequestHeader as OldRequestHeader
from kafka.protocol.old.types import Array, Schema
from kafka.protocol.old.types import BitField as OldBitField
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.schemas import load_json
from kafka.protocol.schemas.fields.codecs import BitField
from test_protocol_schema import Distinct, fill

from raftcore.protocol.api import (
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from raftcore.protocol.schema import SPEC_DIR, FieldSpec, StructSpec, Versions, load_spec

# kafka-python's JSON-generated classes, per raftcore spec name.
JSON_CLASSES = {
    "ApiVersionsRequest": ApiVersionsRequest,
    "ApiVersionsResponse": ApiVersionsResponse,
    "MetadataRequest": MetadataRequest,
    "MetadataResponse": MetadataResponse,
    "ProduceRequest": ProduceRequest,
    "ProduceResponse": ProduceResponse,
    "FetchRequest": FetchRequest,
    "FetchResponse": FetchResponse,
    "ListOffsetsRequest": ListOffsetsRequest,
    "ListOffsetsResponse": ListOffsetsResponse,
    "InitProducerIdRequest": InitProducerIdRequest,
    "InitProducerIdResponse": InitProducerIdResponse,
    "DescribeQuorumRequest": DescribeQuorumRequest,
    "DescribeQuorumResponse": DescribeQuorumResponse,
    "DeleteRecordsRequest": DeleteRecordsRequest,
    "DeleteRecordsResponse": DeleteRecordsResponse,
}

# kafka-python's older classes: name -> list indexed by version (non-flexible versions only).
OLD_CLASSES = {
    "ApiVersionsRequest": old_api_versions.ApiVersionsRequest,
    "ApiVersionsResponse": old_api_versions.ApiVersionsResponse,
    "MetadataRequest": old_metadata.MetadataRequest,
    "MetadataResponse": old_metadata.MetadataResponse,
    "ProduceRequest": old_produce.ProduceRequest,
    "ProduceResponse": old_produce.ProduceResponse,
    "FetchRequest": old_fetch.FetchRequest,
    "FetchResponse": old_fetch.FetchResponse,
    "ListOffsetsRequest": old_list_offsets.ListOffsetsRequest,
    "ListOffsetsResponse": old_list_offsets.ListOffsetsResponse,
    "InitProducerIdRequest": old_init_producer_id.InitProducerIdRequest,
    "InitProducerIdResponse": old_init_producer_id.InitProducerIdResponse,
}

# kafka-python renames MetadataResponse's authorized-operations fields and reads them as sets
# of bits (its json_patch).
RENAMED = {
    "cluster_authorized_operations": "authorized_operations",
    "topic_authorized_operations": "authorized_operations",
}
# raftcore's own tagged fields (FetchRequest.FetchPartition), which Kafka's FetchRequest does
# not have (Kafka 4.1's v18 HighWatermark is tag 1 and no version raftcore declares).
RAFTCORE_ONLY = {
    ("FetchPartition", "high_watermark"),
    ("FetchPartition", "is_follower"),
    ("FetchPartition", "repair"),
    ("FetchRequest", "replica_endpoint"),
    ("FetchRequest", "client_endpoint"),
    ("FetchResponse", "client_endpoints"),
    ("PartitionData", "k_raft_version"),
    ("PartitionData", "pending_voter_change"),
    ("ReplicaState", "listener"),
}


def json_cases() -> list[tuple[str, int]]:
    """(spec name, version) for every version both raftcore's spec and kafka-python's JSON
    declare. kafka-python lets any version from 0 through, but below the JSON's own validVersions
    fields of the removed versions are missing: those are checked with the older classes."""
    cases = []
    for name, cls in JSON_CLASSES.items():
        ours = load_spec(name).valid
        theirs = Versions.parse(cls.json["validVersions"])
        cases += [
            (name, v) for v in range(max(ours.low, theirs.low), min(ours.high, theirs.high) + 1)
        ]
    return cases


def old_cases() -> list[tuple[str, int]]:
    cases = []
    for name, classes in OLD_CLASSES.items():
        spec = load_spec(name)
        for version in range(len(classes)):
            if version in spec.valid and version not in spec.flexible:
                cases.append((name, version))
    return cases


JSON_CASES = json_cases()
OLD_CASES = old_cases()


def ids(cases):
    return [f"{name}-v{version}" for name, version in cases]


def content(name: str, version: int, payload_size: int = 130, nulls: bool = False) -> Any:
    """A raftcore object with a non-default value in every field, minus what kafka-python
    cannot carry: raftcore's own tags (FetchRequest's HighWatermark 100, IsFollower 101,
    Repair 103, ReplicaEndpoint, ClientEndpoint; FetchResponse's ClientEndpoints;
    DescribeQuorumResponse's KRaftVersion 100,
    PendingVoterChange 101, Listener 102) stay at their defaults, and ApiVersionsResponse has
    no error (kafka-python reads an ApiVersions answer with an error as v0, see
    test_api_versions_error_answer_is_read_as_v0)."""
    spec = load_spec(name)
    obj = fill(spec.root, version, Distinct(payload_size=payload_size, nulls=nulls))
    if name == "FetchRequest":
        for topic in obj.topics:
            for partition in topic.partitions:
                partition.high_watermark = -1
                partition.is_follower = False
                partition.repair = False
        endpoint = next(f for f in spec.root.fields if f.attr == "replica_endpoint")
        obj.replica_endpoint = endpoint.struct.cls()  # its default: a tag not written
        client = next(f for f in spec.root.fields if f.attr == "client_endpoint")
        obj.client_endpoint = client.struct.cls()
    if name == "FetchResponse":
        obj.client_endpoints = []  # its default: a tag not written
    if name == "DescribeQuorumResponse":
        for topic in obj.topics:
            for partition in topic.partitions:
                partition.k_raft_version = -1
                partition.pending_voter_change = None
                for replica in [*partition.current_voters, *partition.observers]:
                    replica.listener = type(replica.listener)()  # its default: not written
    if name == "ApiVersionsResponse":
        obj.error_code = 0
    return obj


# ---- raftcore <-> kafka-python's JSON classes ---------------------------------------------------


def _is_default(f: FieldSpec, value: Any) -> bool:
    if f.is_array:
        return value == []
    if f.struct is not None:
        return value == f.struct.cls()
    return value == f.default


def to_kp(struct: StructSpec, obj: Any, version: int, flexible: bool, kp_fields: dict, make) -> Any:
    """kafka-python's object for raftcore's ``obj``; ``kp_fields`` is its struct's field map and
    ``make`` its data class."""
    values = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        value = getattr(obj, f.attr)
        if (struct.name, f.attr) in RAFTCORE_ONLY:
            assert _is_default(f, value), f"kafka-python has no {f.name}"
            continue
        if flexible and version in f.tagged and _is_default(f, value):
            continue  # kafka-python would compare a struct with its default None and write it
        name = RENAMED.get(f.attr, f.attr)
        values[name] = _to_kp_value(f, value, version, flexible, kp_fields[name])
    return make(version=version, **values)


def _to_kp_value(f: FieldSpec, value: Any, version: int, flexible: bool, kp_field: Any) -> Any:
    if value is None:
        return None
    if f.struct is not None:
        inner = kp_field.array_of if f.is_array else kp_field
        items = [
            to_kp(f.struct, item, version, flexible, inner.fields, inner.data_class)
            for item in (value if f.is_array else [value])
        ]
        return items if f.is_array else items[0]
    if f.element == "uuid":
        return uuid.UUID(bytes=bytes(value))
    if f.element in ("bytes", "records"):
        return bytes(value)
    if kp_field.type_str == "bitfield":
        bits = BitField.from_32_bit_field(value & 0xFFFFFFFF)
        return None if bits == {31} else bits
    return value


def from_kp(struct: StructSpec, kp_obj: Any, version: int) -> Any:
    """raftcore's object for kafka-python's ``kp_obj``."""
    values = {}
    for f in struct.fields:
        if version not in f.versions or (struct.name, f.attr) in RAFTCORE_ONLY:
            continue
        value = getattr(kp_obj, RENAMED.get(f.attr, f.attr))  # unset tagged fields: defaults
        values[f.attr] = _from_kp_value(f, value, version)
    return struct.cls(**values)


def _from_kp_value(f: FieldSpec, value: Any, version: int) -> Any:
    if f.struct is not None:
        if value is None:  # kafka-python's default of a (tagged) struct
            return f.struct.cls() if not f.is_array else None
        if f.is_array:
            return [from_kp(f.struct, item, version) for item in value]
        return from_kp(f.struct, value, version)
    if f.element == "uuid":
        return bytes(16) if value is None else value.bytes
    if isinstance(value, set) or (value is None and f.attr in RENAMED):
        raw = BitField.to_32_bit_field({31} if value is None else value)
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    return value


def kp_object(name: str, obj: Any, version: int) -> Any:
    spec = load_spec(name)
    cls = JSON_CLASSES[name]
    return to_kp(spec.root, obj, version, version in spec.flexible, cls._struct.fields, cls)


@pytest.mark.parametrize(("name", "version"), JSON_CASES, ids=ids(JSON_CASES))
def test_same_bytes_as_kafka_python(name, version):
    spec = load_spec(name)
    obj = content(name, version)
    ours = spec.encode(obj, version).getvalue()
    theirs = kp_object(name, obj, version).encode(version=version)
    assert ours == bytes(theirs)


@pytest.mark.parametrize(("name", "version"), JSON_CASES, ids=ids(JSON_CASES))
def test_kafka_python_reads_what_raftcore_writes(name, version):
    spec = load_spec(name)
    obj = content(name, version)
    decoded = JSON_CLASSES[name].decode(spec.encode(obj, version).getvalue(), version=version)
    assert from_kp(spec.root, decoded, version) == obj


@pytest.mark.parametrize(("name", "version"), JSON_CASES, ids=ids(JSON_CASES))
def test_raftcore_reads_what_kafka_python_writes(name, version):
    spec = load_spec(name)
    obj = content(name, version)
    theirs = bytes(kp_object(name, obj, version).encode(version=version))
    assert spec.decode(theirs, version) == obj


@pytest.mark.parametrize(("name", "version"), JSON_CASES, ids=ids(JSON_CASES))
def test_null_fields_same_bytes_as_kafka_python(name, version):
    """Every field nullable in the version is null (kafka-python writes a null wherever it is
    given one; the spec comparison below checks that the nullable versions agree)."""
    spec = load_spec(name)
    obj = content(name, version, nulls=True)
    ours = spec.encode(obj, version).getvalue()
    assert ours == bytes(kp_object(name, obj, version).encode(version=version))
    decoded = JSON_CLASSES[name].decode(ours, version=version)
    assert from_kp(spec.root, decoded, version) == obj


def _versions(text: str | None, low: int, high: int) -> list[int]:
    parsed = Versions.parse(text)
    return [v for v in range(low, high + 1) if v in parsed]


def _compare_fields(path, ours, theirs, low, high, problems):
    by_name = {f["name"]: f for f in theirs}
    for f in ours:
        where = f"{path}.{f['name']}"
        k = by_name.pop(f["name"], None)
        if where in RAFTCORE_ONLY_PATHS:
            continue
        if k is None:
            if not _versions(f.get("versions"), low, high):
                continue
            problems.append(f"{where}: not in Kafka's JSON")
            continue
        if f["type"] != k["type"]:
            problems.append(f"{where}: type {f['type']} != Kafka's {k['type']}")
        for key in ("versions", "nullableVersions", "taggedVersions", "flexibleVersions"):
            if _versions(f.get(key), low, high) != _versions(k.get(key), low, high):
                problems.append(f"{where}: {key} {f.get(key)} != Kafka's {k.get(key)}")
        if _versions(f.get("taggedVersions"), low, high) and f.get("tag") != k.get("tag"):
            problems.append(f"{where}: tag {f.get('tag')} != Kafka's {k.get('tag')}")
        if "fields" in f or "fields" in k:
            _compare_fields(where, f.get("fields", []), k.get("fields", []), low, high, problems)
    for name, k in by_name.items():
        if _versions(k.get("versions"), low, high):
            problems.append(f"{path}.{name}: in Kafka's JSON, missing from the spec")


RAFTCORE_ONLY_PATHS = {
    "FetchRequest.Topics.Partitions.HighWatermark",
    "FetchRequest.Topics.Partitions.IsFollower",
    "FetchRequest.Topics.Partitions.Repair",
    "FetchRequest.ReplicaEndpoint",
    "FetchRequest.ClientEndpoint",
    "FetchResponse.ClientEndpoints",
    "DescribeQuorumResponse.Topics.Partitions.KRaftVersion",
    "DescribeQuorumResponse.Topics.Partitions.PendingVoterChange",
    "DescribeQuorumResponse.Topics.Partitions.CurrentVoters.Listener",
    "DescribeQuorumResponse.Topics.Partitions.Observers.Listener",
}
SPEC_PAIRS = [*JSON_CLASSES, "RequestHeader", "ResponseHeader"]


@pytest.mark.parametrize("name", SPEC_PAIRS)
def test_spec_declares_what_kafkas_json_declares(name):
    """raftcore's spec against kafka-python's copy of Kafka's JSON, over the versions both
    declare: the same fields with the same types, versions, nullable versions, tags and tagged
    versions (raftcore's own FetchRequest tags aside)."""
    ours = _our_json(name)
    theirs = load_json(name)
    low = max(
        Versions.parse(ours["validVersions"]).low, Versions.parse(theirs["validVersions"]).low
    )
    high = min(
        Versions.parse(ours["validVersions"]).high, Versions.parse(theirs["validVersions"]).high
    )
    assert low <= high
    assert _versions(ours.get("flexibleVersions"), low, high) == _versions(
        theirs.get("flexibleVersions"), low, high
    )
    assert ours.get("apiKey") == theirs.get("apiKey")
    problems: list[str] = []
    _compare_fields(name, ours["fields"], theirs["fields"], low, high, problems)
    assert problems == []


def _our_json(name: str) -> dict:
    """raftcore's spec file with its common structs inlined, as kafka-python loads Kafka's."""
    text = (SPEC_DIR / f"{name}.json").read_text("utf-8")
    data = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE))
    common = {c["name"]: c["fields"] for c in data.get("commonStructs", [])}

    def inline(fields):
        for f in fields:
            element = f["type"].removeprefix("[]")
            if "fields" not in f and element in common:
                f["fields"] = common[element]
            inline(f.get("fields", []))

    inline(data["fields"])
    return data


def test_the_cross_checks_cover_every_api_both_have():
    covered = {name for name, _ in JSON_CASES}
    assert covered == set(JSON_CLASSES)
    # The versions compared, per request.
    versions = {name: [v for n, v in JSON_CASES if n == name] for name in covered}
    assert versions["FetchRequest"] == list(range(4, 18))
    assert versions["ProduceRequest"] == list(range(3, 11))
    assert versions["MetadataRequest"] == list(range(13))
    assert versions["ApiVersionsRequest"] == list(range(5))
    assert versions["ListOffsetsRequest"] == list(range(1, 8))
    assert versions["InitProducerIdRequest"] == list(range(5))
    assert versions["DescribeQuorumRequest"] == list(range(3))
    old = {name: [v for n, v in OLD_CASES if n == name] for name in OLD_CLASSES}
    assert old["FetchRequest"] == list(range(12))
    assert old["ProduceRequest"] == list(range(9))
    assert old["ListOffsetsRequest"] == list(range(6))


def test_kafka_python_skips_raftcore_fetch_tags():
    """raftcore's FetchPartition tags 100 and 101 are unknown to Kafka's FetchRequest v12-v17
    and are skipped by kafka-python; everything else reads as usual."""
    spec = load_spec("FetchRequest")
    obj = content("FetchRequest", 17)
    partition = obj.topics[0].partitions[0]
    partition.high_watermark, partition.is_follower = 12345, True
    data = spec.encode(obj, 17).getvalue()
    decoded = FetchRequest.decode(data, version=17)
    kp_partition = decoded.topics[0].partitions[0]
    assert set(kp_partition.unknown_tags) == {"_100", "_101"}
    assert kp_partition.unknown_tags["_100"] == struct.pack(">q", 12345)
    assert kp_partition.unknown_tags["_101"] == b"\x01"
    partition.high_watermark, partition.is_follower = -1, False
    assert from_kp(spec.root, decoded, 17) == obj


def test_api_versions_error_answer_is_read_as_v0():
    """A client that asked with a version the server does not have gets a v0 body with
    UNSUPPORTED_VERSION (35) and the versions served, whatever version it asked with: that is
    how kafka-python (like Kafka's client) reads an ApiVersions answer with an error."""
    spec = load_spec("ApiVersionsResponse")
    key = spec.cls.ApiVersion(api_key=18, min_version=0, max_version=3)
    body = spec.cls(error_code=35, api_keys=[key])
    frame = b"".join(encode_response(ApiKey.API_VERSIONS, 0, 9, body))
    decoded = ApiVersionsResponse.decode(frame, version=3, header=True)
    assert decoded.header.correlation_id == 9
    assert decoded.version == 0
    assert decoded.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 3)]


# ---- frames and headers -------------------------------------------------------------------------

FRAME_CASES = [
    (ApiKey.API_VERSIONS, "ApiVersions", 0),
    (ApiKey.API_VERSIONS, "ApiVersions", 3),
    (ApiKey.METADATA, "Metadata", 8),
    (ApiKey.METADATA, "Metadata", 12),
    (ApiKey.PRODUCE, "Produce", 8),
    (ApiKey.PRODUCE, "Produce", 10),
    (ApiKey.FETCH, "Fetch", 11),
    (ApiKey.FETCH, "Fetch", 17),
    (ApiKey.LIST_OFFSETS, "ListOffsets", 5),
    (ApiKey.LIST_OFFSETS, "ListOffsets", 7),
    (ApiKey.INIT_PRODUCER_ID, "InitProducerId", 1),
    (ApiKey.INIT_PRODUCER_ID, "InitProducerId", 4),
    (ApiKey.DESCRIBE_QUORUM, "DescribeQuorum", 2),
]
FRAME_IDS = [f"{name}-v{version}" for _, name, version in FRAME_CASES]


@pytest.mark.parametrize(("key", "api", "version"), FRAME_CASES, ids=FRAME_IDS)
@pytest.mark.parametrize("client_id", ["kafka-python-\u00e9", None, ""])
def test_request_frames_match_kafka_python(key, api, version, client_id):
    name = f"{api}Request"
    obj = content(name, version)
    ours = encode_request(key, version, 123456, client_id, obj)
    request = kp_object(name, obj, version)
    request.with_header(correlation_id=123456, client_id=client_id)
    theirs = bytes(request.encode(header=True))
    assert ours == theirs
    header, body = decode_request(theirs)
    assert (header.request_api_key, header.request_api_version) == (key, version)
    assert (header.correlation_id, header.client_id) == (123456, client_id)
    assert body == obj
    decoded = JSON_CLASSES[name].decode(ours, version=version, header=True)
    assert decoded.header.correlation_id == 123456
    assert decoded.header.client_id == client_id
    assert from_kp(load_spec(name).root, decoded, version) == obj


@pytest.mark.parametrize(("key", "api", "version"), FRAME_CASES, ids=FRAME_IDS)
def test_response_frames_match_kafka_python(key, api, version):
    name = f"{api}Response"
    obj = content(name, version)
    ours = b"".join(encode_response(key, version, -7, obj))
    response = kp_object(name, obj, version)
    response.with_header(correlation_id=-7)
    theirs = bytes(response.encode(header=True))
    assert ours == theirs
    assert decode_response(key, version, theirs) == (-7, obj)
    decoded = JSON_CLASSES[name].decode(ours, version=version, header=True)
    assert decoded.header.correlation_id == -7
    assert from_kp(load_spec(name).root, decoded, version) == obj


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", ["c", None, "x" * 300])
def test_request_header_matches_kafka_python(flexible, client_id):
    version = 2 if flexible else 1
    spec = load_spec("RequestHeader")
    obj = spec.cls(
        request_api_key=1, request_api_version=13, correlation_id=2**31 - 1, client_id=client_id
    )
    ours = spec.encode(obj, version).getvalue()
    theirs = KpRequestHeader(
        request_api_key=1, request_api_version=13, correlation_id=2**31 - 1, client_id=client_id
    ).encode(flexible=flexible)
    assert ours == bytes(theirs)
    assert spec.decode(theirs, version) == obj
    if not flexible:
        old = OldRequestHeader(1, 13, 2**31 - 1, client_id)
        assert ours == old.encode()


def test_response_header_matches_kafka_python():
    spec = load_spec("ResponseHeader")
    for version, flexible in ((0, False), (1, True)):
        ours = spec.encode(spec.cls(correlation_id=-2), version).getvalue()
        assert ours == bytes(KpResponseHeader(correlation_id=-2).encode(flexible=flexible))


# ---- raftcore <-> kafka-python's older hand-written classes -------------------------------------


def to_old(struct: StructSpec, obj: Any, version: int, schema: Schema) -> tuple:
    """``obj`` as the tuple an old kafka-python class takes, field by field in order."""
    fields = [f for f in struct.fields if version in f.versions]
    assert len(fields) == len(schema.fields), (struct.name, schema.names)
    return tuple(
        _to_old_value(f, getattr(obj, f.attr), version, old_type)
        for f, old_type in zip(fields, schema.fields, strict=True)
    )


def _to_old_value(f: FieldSpec, value: Any, version: int, old_type: Any) -> Any:
    if value is None:
        return None
    if f.struct is not None:
        if f.is_array:
            assert isinstance(old_type, Array)
            inner = old_type.array_of
            if isinstance(inner, Schema):
                return [to_old(f.struct, item, version, inner) for item in value]
            # A struct of one field is an array of that field's values there.
            (only,) = [g for g in f.struct.fields if version in g.versions]
            return [getattr(item, only.attr) for item in value]
        return to_old(f.struct, value, version, old_type)
    if f.element in ("bytes", "records"):
        return bytes(value)
    if old_type is OldBitField:
        bits = OldBitField.from_32_bit_field(value)
        return None if bits == {31} else bits
    return value


@pytest.mark.parametrize(("name", "version"), OLD_CASES, ids=ids(OLD_CASES))
def test_same_bytes_as_kafka_python_old_classes(name, version):
    spec = load_spec(name)
    obj = content(name, version)
    old_cls = OLD_CLASSES[name][version]
    values = to_old(spec.root, obj, version, old_cls.SCHEMA)
    ours = spec.encode(obj, version).getvalue()
    assert ours == old_cls(*values).encode()
    decoded = old_cls.decode(ours)
    assert tuple(getattr(decoded, n) for n in old_cls.SCHEMA.names) == values
    assert spec.decode(old_cls(*values).encode(), version) == obj
