"""The metadata image (raftcore.metadata.image): KRaft's records applied in order, each
checked whole before anything changes, with Kafka's errors for what contradicts the image."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.error_codes import Errors
from raftcore.metadata import (
    ConfigRecord,
    MetadataError,
    MetadataImage,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicId,
    TopicRecord,
    decode_record,
    encode_record,
)
from raftcore.metadata.topic_configs import TOPIC_CONFIGS
from raftcore.metadata.topic_id import METADATA_TOPIC_ID

A = TopicId(bytes([1] * 16))
B = TopicId(bytes([2] * 16))


def orders(partitions: int = 3) -> list:
    return [
        TopicRecord("orders", A),
        *(PartitionRecord(A, i, (1 + i % 3, 1 + (i + 1) % 3)) for i in range(partitions)),
    ]


def refused(image: MetadataImage, record, error: Errors) -> str:
    """Apply ``record``, expect ``error``, and check the image did not change."""
    before = image.records()
    with pytest.raises(MetadataError) as caught:
        image.apply(record)
    assert caught.value.error is error, str(caught.value)
    assert image.records() == before
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_topics_are_found_by_name_and_by_id_with_their_partitions_preferred_leader_first():
    image = MetadataImage.replay(orders())
    topic = image.topic("orders")
    assert topic is not None and image.topic_by_id(A) == topic
    assert [p.replicas for p in topic.partitions] == [(1, 2), (2, 3), (3, 1)]
    assert [p.preferred_leader for p in topic.partitions] == [1, 2, 3]
    assert topic.replication_factor == 2
    assert image.topic("payments") is None and image.topic_by_id(B) is None


def test_the_same_records_give_equal_images_and_an_image_rebuilds_from_its_own_records():
    log = [
        *orders(),
        ConfigRecord("orders", "retention.ms", "60000"),
        TopicRecord("payments", B),
        PartitionRecord(B, 0, (2, 3, 1)),
        PartitionChangeRecord(A, 1, replicas=(2, 3, 1), adding_replicas=(1,)),
        PartitionChangeRecord(A, 1, replicas=(3, 1), adding_replicas=(), leader=3),
    ]
    image = MetadataImage.replay(log)
    assert image == MetadataImage.replay(log)
    assert MetadataImage.replay(image.records()) == image  # what a snapshot holds
    wire = [decode_record(encode_record(r)) for r in image.records()]
    assert MetadataImage.replay(wire) == image
    assert image != MetadataImage.replay(log[:-1])


def test_a_topic_name_taken_is_topic_already_exists():
    image = MetadataImage.replay(orders())
    refused(image, TopicRecord("orders", B), Errors.TOPIC_ALREADY_EXISTS)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "tópico", "a/b", "x\n"])
def test_a_topic_name_outside_kafkas_rules_is_invalid_topic_exception(name):
    refused(MetadataImage(), TopicRecord(name, A), Errors.INVALID_TOPIC_EXCEPTION)


def test_the_longest_legal_name_and_every_legal_character_are_taken():
    image = MetadataImage()
    image.apply(TopicRecord("a" * 249, A))
    image.apply(TopicRecord("Az09._-", B))
    assert image.topic_names() == ["Az09._-", "a" * 249]


def test_a_reserved_or_taken_topic_id_is_refused():
    image = MetadataImage.replay(orders())
    refused(image, TopicRecord("payments", A), Errors.INVALID_REQUEST)
    refused(image, TopicRecord("payments", METADATA_TOPIC_ID), Errors.INVALID_REQUEST)


def test_partitions_are_added_in_order_never_twice_nor_with_a_gap():
    image = MetadataImage.replay(orders(2))
    refused(image, PartitionRecord(A, 1, (1, 2)), Errors.INVALID_PARTITIONS)
    refused(image, PartitionRecord(A, 3, (1, 2)), Errors.INVALID_PARTITIONS)
    image.apply(PartitionRecord(A, 2, (1, 2)))


def test_a_partition_of_an_unknown_topic_id_is_unknown_topic_id():
    refused(MetadataImage(), PartitionRecord(B, 0, (1,)), Errors.UNKNOWN_TOPIC_ID)


@pytest.mark.parametrize(
    "record, error",
    [
        (PartitionRecord(A, 3, ()), Errors.INVALID_REPLICATION_FACTOR),
        (PartitionRecord(A, 3, (1, 1)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionRecord(A, 3, (1, -4)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionRecord(A, 3, (1, 2), isr=(3,)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionRecord(A, 3, (1, 2), leader=3), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionChangeRecord(A, 0, replicas=(2, 2)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionChangeRecord(A, 0, adding_replicas=(5,)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionChangeRecord(A, 0, leader=3), Errors.INVALID_REPLICA_ASSIGNMENT),
        (PartitionChangeRecord(A, 3, leader=1), Errors.UNKNOWN_TOPIC_OR_PARTITION),
        (PartitionChangeRecord(B, 0, leader=1), Errors.UNKNOWN_TOPIC_ID),
    ],
)
def test_replicas_must_be_distinct_node_ids_and_isr_leader_and_moves_among_them(record, error):
    refused(MetadataImage.replay(orders()), record, error)


def test_a_partition_change_changes_only_what_it_names_and_bumps_the_partition_epoch():
    image = MetadataImage.replay(orders())
    image.apply(PartitionChangeRecord(A, 0, replicas=(1, 2, 3), adding_replicas=(3,)))
    p = image.topic("orders").partitions[0]
    assert (p.replicas, p.adding_replicas, p.isr, p.leader) == ((1, 2, 3), (3,), (), -1)
    assert (p.partition_epoch, p.leader_epoch) == (1, 0)
    image.apply(PartitionChangeRecord(A, 0, replicas=(3, 2), adding_replicas=(), leader=3))
    p = image.topic("orders").partitions[0]
    assert (p.replicas, p.preferred_leader, p.leader) == ((3, 2), 3, 3)
    assert (p.partition_epoch, p.leader_epoch) == (2, 1)


def test_a_removed_topic_takes_its_partitions_and_configs_and_its_name_can_be_taken_again():
    image = MetadataImage.replay([*orders(), ConfigRecord("orders", "retention.ms", "1")])
    image.apply(RemoveTopicRecord(A))
    assert image.topic("orders") is None and image.topic_by_id(A) is None
    assert list(image.partitions()) == []
    refused(image, RemoveTopicRecord(A), Errors.UNKNOWN_TOPIC_ID)
    image.apply(TopicRecord("orders", B))
    assert image.topic("orders").topic_id == B
    assert image.topic("orders").configs["retention.ms"] == "604800000"


# ---- configs ------------------------------------------------------------------------------


def test_a_topic_without_configs_has_kafkas_defaults():
    configs = MetadataImage.replay(orders()).topic("orders").configs
    assert configs == {
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "segment.bytes": "1073741824",
        "segment.ms": "604800000",
        "max.message.bytes": "1048588",
        "min.insync.replicas": "1",
        "cleanup.policy": "delete",
    }


def test_a_config_set_overrides_the_default_and_a_null_value_restores_it():
    image = MetadataImage.replay(orders())
    image.apply(ConfigRecord("orders", "segment.bytes", "1048576"))
    assert image.topic("orders").configs["segment.bytes"] == "1048576"
    assert image.topic("orders").overrides == (("segment.bytes", "1048576"),)
    image.apply(ConfigRecord("orders", "segment.bytes", None))
    assert image.topic("orders").configs["segment.bytes"] == "1073741824"


@pytest.mark.parametrize(
    "name, value",
    [
        ("retention.ms", "-1"),
        ("retention.ms", "9223372036854775807"),
        ("retention.bytes", "-5"),
        ("retention.bytes", "1073741824"),
        ("segment.bytes", "14"),
        ("segment.bytes", "2147483647"),
        ("segment.ms", "1"),
        ("max.message.bytes", "0"),
        ("min.insync.replicas", "2"),
        ("min.insync.replicas", " 2 "),
        ("cleanup.policy", "delete"),
    ],
)
def test_a_value_of_the_configs_type_within_kafkas_bounds_is_taken(name, value):
    image = MetadataImage.replay(orders())
    image.apply(ConfigRecord("orders", name, value))


@pytest.mark.parametrize(
    "name, value",
    [
        ("retention.ms", "-2"),
        ("retention.ms", "9223372036854775808"),
        ("retention.ms", "1_000"),
        ("retention.ms", "1e3"),
        ("retention.ms", "٣"),
        ("segment.bytes", "13"),
        ("segment.bytes", "2147483648"),
        ("segment.ms", "0"),
        ("max.message.bytes", "-1"),
        ("min.insync.replicas", "0"),
        ("min.insync.replicas", ""),
        ("cleanup.policy", "compact"),
        ("cleanup.policy", "delete,compact"),
        ("compression.type", "zstd"),
        ("retention.MS", "1000"),
    ],
)
def test_an_unknown_config_or_a_bad_value_is_invalid_config_naming_topic_and_config(name, value):
    message = refused(
        MetadataImage.replay(orders()), ConfigRecord("orders", name, value), Errors.INVALID_CONFIG
    )
    assert "orders" in message and name in message


def test_the_configs_validated_are_the_ones_the_issue_names():
    assert set(TOPIC_CONFIGS) == {
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "max.message.bytes",
        "min.insync.replicas",
        "cleanup.policy",
    }


def test_a_config_of_an_unknown_topic_or_another_resource_type_is_refused():
    image = MetadataImage.replay(orders())
    refused(image, ConfigRecord("payments", "retention.ms", "1"), Errors.UNKNOWN_TOPIC_OR_PARTITION)
    broker = ConfigRecord("1", "retention.ms", "1", resource_type=4)
    refused(image, broker, Errors.INVALID_REQUEST)


# ---- any log --------------------------------------------------------------------------------

_ids = st.sampled_from([A, A, B, METADATA_TOPIC_ID])
_nodes = (
    st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True)
    | st.lists(st.integers(-1, 4), max_size=4)
).map(tuple)
_any_record = st.one_of(
    st.builds(TopicRecord, st.sampled_from(["orders", "payments", "payments", "a b"]), _ids),
    st.builds(PartitionRecord, _ids, st.integers(-1, 3), _nodes, _nodes, leader=st.integers(-1, 4)),
    st.builds(
        PartitionChangeRecord,
        _ids,
        st.sampled_from([0, 0, 0, 1, -1]),
        st.none() | _nodes,
        st.none() | st.just(()) | _nodes,
        st.none() | st.just(()) | _nodes,
        st.none() | st.none() | _nodes,
        st.sampled_from([-2, -2, -1, 1, 2, 3]),
    ),
    st.builds(
        ConfigRecord,
        st.sampled_from(["orders", "payments"]),
        st.sampled_from(["retention.ms", "segment.bytes", "cleanup.policy", "x"]),
        st.none() | st.sampled_from(["1", "-2", "delete", "compact", "14", ""]),
    ),
    st.builds(RemoveTopicRecord, _ids),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_any_record, max_size=25))
def test_any_log_is_applied_or_refused_record_by_record_with_a_metadata_error_only(log):
    """Whatever a log holds, each record is applied or refused with MetadataError (never
    another exception), and the image is the replay of the records it took, on any node."""
    image, taken = MetadataImage(), []
    for record in [*orders(1), *log]:
        try:
            image.apply(record)
        except MetadataError as exc:
            assert "\n" not in str(exc)
        else:
            taken.append(record)
    assert MetadataImage.replay(taken) == image
    assert MetadataImage.replay(image.records()) == image
