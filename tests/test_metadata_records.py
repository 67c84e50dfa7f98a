"""The metadata records (raftcore.metadata.records): KRaft's schemas in Kafka's framing, every
record read back as written, and damage answered with one CorruptRecordError line."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.errors import CorruptRecordError
from raftcore.metadata import (
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicId,
    TopicRecord,
    decode_record,
    encode_record,
)
from raftcore.metadata.records import LEADER_UNCHANGED
from raftcore.metadata.topic_id import METADATA_TOPIC_ID, ZERO_TOPIC_ID

node_ids = st.integers(min_value=-1, max_value=(1 << 31) - 1)
id_lists = st.lists(node_ids, max_size=6).map(tuple)
int32s = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
topic_ids = st.binary(min_size=16, max_size=16).map(TopicId)
names = st.text(max_size=40)

records = st.one_of(
    st.builds(TopicRecord, names, topic_ids),
    st.builds(PartitionRecord, topic_ids, int32s, *[id_lists] * 4, *[int32s] * 3),
    st.builds(
        PartitionChangeRecord,
        topic_ids,
        int32s,
        st.none() | id_lists,
        st.none() | id_lists,
        st.none() | id_lists,
        st.none() | id_lists,
        int32s,
    ),
    st.builds(ConfigRecord, names, names, st.none() | names, st.integers(-128, 127)),
    st.builds(RemoveTopicRecord, topic_ids),
)

TOPIC = TopicId(bytes(range(16)))
SAMPLES = [
    TopicRecord("orders", TOPIC),
    PartitionRecord(TOPIC, 3, (1, 2, 3), isr=(1, 2, 3), leader=1),
    PartitionChangeRecord(TOPIC, 3, replicas=(1, 2, 3, 4), adding_replicas=(4,)),
    ConfigRecord("orders", "retention.ms", "1000"),
    ConfigRecord("orders", "retention.ms", None),
    RemoveTopicRecord(TOPIC),
]


@settings(max_examples=500, deadline=None)
@given(records)
def test_every_record_is_read_back_as_it_was_written(record):
    assert decode_record(encode_record(record)) == record


def test_a_topic_record_has_kafkas_layout_frame_version_api_key_version_then_the_message():
    """MetadataRecordSerde: uvarint frame version 1, api key 2, version 0; then TopicRecord v0:
    a compact string (length + 1), the 16 id bytes, an empty tagged-field section."""
    value = encode_record(TopicRecord("foo", TOPIC))
    assert value == bytes([1, 2, 0, 4]) + b"foo" + bytes(range(16)) + bytes([0])


def test_a_partition_change_writes_only_what_changed_as_tagged_fields():
    """PartitionChangeRecord v0: partition id, topic id, then tags; Replicas is tag 2,
    AddingReplicas tag 4, and an unchanged leader (-2) is not written."""
    value = encode_record(PartitionChangeRecord(TOPIC, 7, replicas=(1, 4), adding_replicas=(4,)))
    body = value[3 + 4 + 16 :]
    replicas = bytes([3]) + (1).to_bytes(4, "big") + (4).to_bytes(4, "big")
    adding = bytes([2]) + (4).to_bytes(4, "big")
    assert body == bytes([2, 2, len(replicas)]) + replicas + bytes([4, len(adding)]) + adding
    assert decode_record(value).leader == LEADER_UNCHANGED


def test_an_unknown_tagged_field_is_skipped_as_kafkas_readers_do():
    value = bytearray(encode_record(RemoveTopicRecord(TOPIC)))
    value[-1:] = bytes([1, 9, 2]) + b"xy"  # one tagged field, tag 9, two bytes
    assert decode_record(bytes(value)) == RemoveTopicRecord(TOPIC)


@pytest.mark.parametrize(
    "value, named",
    [
        (bytes([0, 2, 0]), "unknown frame version 0"),
        (bytes([1, 17, 0]), "unknown metadata record type 17"),
        (bytes([1, 2, 1]) + encode_record(SAMPLES[0])[3:], "TopicRecord version 1"),
        (encode_record(SAMPLES[0]) + b"\x00", "1 bytes after the end"),
        (b"", "1 bytes wanted, 0 left"),
    ],
)
def test_an_unknown_or_damaged_record_is_one_line_naming_what_is_wrong(value, named):
    with pytest.raises(CorruptRecordError) as refused:
        decode_record(value, "__cluster_metadata-0 offset 42")
    message = str(refused.value)
    assert named in message and message.startswith("__cluster_metadata-0 offset 42")
    assert "\n" not in message


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_every_truncation_of_a_record_is_refused(record):
    value = encode_record(record)
    for end in range(len(value)):
        with pytest.raises(CorruptRecordError):
            decode_record(value[:end])


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_flipped_bytes_give_a_record_or_one_error_line_never_another_exception(record):
    """Fuzz: any byte of a value replaced by any other, at every position; the decoder answers
    with a record (a flip can land in a value) or a CorruptRecordError, nothing else."""
    value = encode_record(record)
    rng = random.Random(35)
    for pos in range(len(value)):
        for _ in range(40):
            damaged = bytearray(value)
            damaged[pos] = rng.randrange(256)
            try:
                decode_record(bytes(damaged))
            except CorruptRecordError as exc:
                assert "\n" not in str(exc)


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_every_single_bit_flip_gives_a_record_or_one_error_line(record):
    value = encode_record(record)
    for bit in range(8 * len(value)):
        damaged = bytearray(value)
        damaged[bit // 8] ^= 1 << (bit % 8)
        try:
            decoded = decode_record(bytes(damaged))
        except CorruptRecordError as exc:
            assert "\n" not in str(exc)
        else:
            assert decoded != record  # every bit of the value means something


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_give_a_record_or_one_error_line(data):
    try:
        decode_record(bytes([1]) + data)
    except CorruptRecordError as exc:
        assert "\n" not in str(exc)


# ---- topic ids ----------------------------------------------------------------------------


def test_a_topic_id_is_written_as_22_characters_of_url_safe_base64_as_kafka_does():
    assert str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"  # KRaft's Uuid(0, 1)
    assert str(ZERO_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert TopicId.parse("AAAAAAAAAAAAAAAAAAAAAQ") == METADATA_TOPIC_ID


@pytest.mark.parametrize("text", ["", "AAAA", "AAAAAAAAAAAAAAAAAAAA*Q", "AAAAAAAAAAAAAAAAAAAAAB"])
def test_a_topic_id_that_is_not_16_bytes_of_url_safe_base64_is_refused(text):
    with pytest.raises(ValueError, match="topic id"):
        TopicId.parse(text)


def test_random_topic_ids_are_never_reserved_nor_start_with_a_dash_and_read_back():
    rng = random.Random(7)
    for _ in range(2000):
        topic_id = TopicId.random(rng)
        assert not topic_id.reserved and not str(topic_id).startswith("-")
        assert TopicId.parse(str(topic_id)) == topic_id
        assert topic_id.raw[6] >> 4 == 4  # a version-4 uuid, as Kafka's randomUuid


def test_topic_ids_come_from_the_callers_generator_so_a_seed_gives_the_same_ids():
    assert TopicId.random(random.Random(3)) == TopicId.random(random.Random(3))
