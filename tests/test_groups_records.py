"""The coordinator's records after Kafka's __consumer_offsets schemas: round trips, the
versions Kafka wrote, and damage answered with one line, never an assertion."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.errors import CorruptRecordError
from raftcore.groups.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitRecord,
    Record,
    decode,
    group_metadata_record,
    offset_commit_record,
)
from raftcore.topic_partition import TopicPartition

TP = TopicPartition("orders", 7)
GROUP = GroupMetadataValue(
    "consumer",
    4,
    "range",
    "m-1",
    1234,
    (
        MemberMetadata("m-1", None, "c1", "/10.0.0.1", 30000, 10000, b"sub1", b"as1"),
        MemberMetadata("m-2", "inst", "c2", "/10.0.0.2", 30000, 10000, b"", b""),
    ),
)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_an_offset_commit_record_is_kafkas_key_v1_and_value_v3_bytes():
    record = offset_commit_record("g", TP, OffsetAndMetadata(42, 3, "meta", 99))
    assert record.key == struct.pack(">h", 1) + _s("g") + _s("orders") + struct.pack(">i", 7)
    assert record.value == struct.pack(">hqi", 3, 42, 3) + _s("meta") + struct.pack(">q", 99)
    assert decode(record) == OffsetCommitRecord("g", TP, OffsetAndMetadata(42, 3, "meta", 99))


def test_tombstones_decode_as_deletions():
    assert decode(offset_commit_record("g", TP, None)) == OffsetCommitRecord("g", TP, None)
    assert decode(group_metadata_record("g", None)) == GroupMetadataRecord("g", None)


def test_a_group_metadata_record_round_trips():
    record = group_metadata_record("g", GROUP)
    assert record.key == struct.pack(">h", 2) + _s("g")
    assert decode(record) == GroupMetadataRecord("g", GROUP)


def test_older_offset_values_kafka_wrote_are_read():
    key = offset_commit_record("g", TP, None).key
    v0 = struct.pack(">hq", 0, 5) + _s("") + struct.pack(">q", 7)
    v1 = struct.pack(">hq", 1, 5) + _s("") + struct.pack(">qq", 7, -1)
    for value in (v0, v1):
        assert decode(Record(key, value)) == OffsetCommitRecord(
            "g", TP, OffsetAndMetadata(5, -1, "", 7)
        )


def test_a_flexible_v4_offset_value_with_a_tagged_field_is_read():
    # offset, leaderEpoch, compact string "m", commitTimestamp, one unknown tag (0, 1 byte)
    v4 = struct.pack(">hqi", 4, 5, 2) + b"\x02m" + struct.pack(">q", 7) + b"\x01\x00\x01\xff"
    key = offset_commit_record("g", TP, None).key
    assert decode(Record(key, v4)) == OffsetCommitRecord("g", TP, OffsetAndMetadata(5, 2, "m", 7))


def test_a_key_of_another_kind_of_group_is_refused_with_one_line():
    with pytest.raises(CorruptRecordError, match=r"key version 5 .* at byte 2"):
        decode(Record(struct.pack(">h", 5) + _s("g"), b""))


@pytest.mark.parametrize(
    "record",
    [
        offset_commit_record("g", TP, OffsetAndMetadata(42, 3, "meta", 99)),
        group_metadata_record("g", GROUP),
    ],
    ids=["offset", "group"],
)
def test_every_truncation_of_a_record_is_a_one_line_error(record):
    assert record.value is not None
    for cut in range(len(record.key)):
        with pytest.raises(CorruptRecordError) as err:
            decode(Record(record.key[:cut], record.value))
        assert "\n" not in str(err.value) and "key" in str(err.value)
    for cut in range(len(record.value)):
        with pytest.raises(CorruptRecordError) as err:
            decode(Record(record.key, record.value[:cut]))
        message = str(err.value)
        assert "\n" not in message and ("'g'" in message or "g/orders-7" in message)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=128)))
def test_random_bytes_decode_or_raise_corrupt_record_error_only(key, value):
    try:
        decode(Record(key, value))
    except CorruptRecordError as err:
        assert "\n" not in str(err)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_flipped_byte_in_a_group_record_is_caught_or_decodes_to_some_value(data):
    record = group_metadata_record("g", GROUP)
    assert record.value is not None
    value = bytearray(record.value)
    i = data.draw(st.integers(0, len(value) - 1))
    value[i] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(CorruptRecordError):
        decode(Record(record.key, bytes(value)))
