"""The controller's admin requests (raftcore.metadata.controller): each checked against the
image and answered with the records that carry it out, or with Kafka's error."""

from __future__ import annotations

import random

import pytest

from raftcore.error_codes import Errors
from raftcore.metadata import (
    ConfigRecord,
    MetadataError,
    MetadataImage,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftcore.metadata.controller import (
    MAX_CLUSTER_PARTITIONS,
    alter_configs,
    create_partitions,
    create_topic,
    delete_topic,
)

NODES = [1, 2, 3]


def create(image, name="orders", partitions=3, rf=3, configs=None, rng=None):
    records = create_topic(
        image,
        name,
        partitions=partitions,
        replication_factor=rf,
        configs=configs or {},
        nodes=NODES,
        rng=rng or random.Random(0),
    )
    for record in records:
        image.apply(record)
    return records


def refused(error: Errors, request, *args, **kwargs) -> str:
    with pytest.raises(MetadataError) as caught:
        request(*args, **kwargs)
    assert caught.value.error is error, str(caught.value)
    return str(caught.value)


def test_a_topic_is_its_topic_record_then_its_configs_then_its_partitions():
    image = MetadataImage()
    records = create(image, partitions=2, configs={"retention.ms": "1000", "segment.ms": "9"})
    kinds = [TopicRecord, ConfigRecord, ConfigRecord, PartitionRecord, PartitionRecord]
    assert [type(r) for r in records] == kinds
    partition = records[3]
    assert partition.isr == partition.replicas and partition.leader == partition.replicas[0]
    assert image.topic("orders").configs["retention.ms"] == "1000"


def test_minus_one_partitions_and_replication_factor_ask_for_kafkas_defaults():
    image = MetadataImage()
    create(image, partitions=-1, rf=-1)
    topic = image.topic("orders")
    assert len(topic.partitions) == 1 and topic.replication_factor == 1


def test_a_topic_deleted_and_created_again_has_a_new_id():
    image = MetadataImage()
    rng = random.Random(0)
    first = create(image, rng=rng)[0].topic_id
    for record in delete_topic(image, "orders"):
        image.apply(record)
    second = create(image, rng=rng)[0].topic_id
    assert first != second and image.topic("orders").topic_id == second


def test_a_new_id_is_never_one_a_live_topic_holds():
    image = MetadataImage()
    create(image, rng=random.Random(5))
    records = create(image, name="payments", rng=random.Random(5))  # the same draws first
    assert records[0].topic_id != image.topic("orders").topic_id


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"name": "a b"}, Errors.INVALID_TOPIC_EXCEPTION),
        ({"name": ".."}, Errors.INVALID_TOPIC_EXCEPTION),
        ({"name": "orders"}, Errors.TOPIC_ALREADY_EXISTS),
        ({"name": "my_topic"}, Errors.INVALID_TOPIC_EXCEPTION),  # collides with my.topic
        ({"partitions": 0}, Errors.INVALID_PARTITIONS),
        ({"partitions": -3}, Errors.INVALID_PARTITIONS),
        ({"partitions": 1 << 20}, Errors.INVALID_PARTITIONS),  # past the cluster's bound
        ({"rf": 4}, Errors.INVALID_REPLICATION_FACTOR),
        ({"rf": 0}, Errors.INVALID_REPLICATION_FACTOR),
        ({"configs": {"retention.ms": "soon"}}, Errors.INVALID_CONFIG),
        ({"configs": {"cleanup.policy": "compact"}}, Errors.INVALID_CONFIG),
        ({"configs": {"flush.ms": "1"}}, Errors.INVALID_CONFIG),
    ],
)
def test_create_topics_refusals_have_kafkas_errors_and_write_nothing(kwargs, error):
    image = MetadataImage()
    create(image)
    create(image, name="my.topic")
    before = image.records()
    kwargs = {"name": "new", **kwargs}
    refused(error, create, image, **kwargs)
    assert image.records() == before


def test_deleting_an_unknown_topic_is_unknown_topic_or_partition():
    image = MetadataImage()
    refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, delete_topic, image, "orders")
    create(image)
    assert delete_topic(image, "orders") == [RemoveTopicRecord(image.topic("orders").topic_id)]


def test_create_partitions_only_adds_partitions():
    image = MetadataImage()
    create(image, partitions=3)
    for count in (3, 2):
        message = refused(
            Errors.INVALID_PARTITIONS, create_partitions, image, "orders", count, NODES
        )
        assert "has 3 partitions" in message
    refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, create_partitions, image, "x", 4, NODES)
    records = create_partitions(image, "orders", 5, NODES)
    assert [r.partition_id for r in records] == [3, 4]


def test_no_request_takes_the_cluster_past_its_partition_bound_in_one_go_or_many():
    """One hostile CreateTopics or CreatePartitions (1,048,576 partitions) would have the
    controller place, and every node open, a million Raft groups: refused, naming the bound,
    quickly (the placement is never computed)."""
    image = MetadataImage()
    create(image, partitions=MAX_CLUSTER_PARTITIONS - 10)
    message = refused(Errors.INVALID_PARTITIONS, create, image, name="more", partitions=11)
    assert f"at most {MAX_CLUSTER_PARTITIONS:,} partitions" in message
    create(image, name="fits", partitions=10)
    message = refused(Errors.INVALID_PARTITIONS, create_partitions, image, "orders", 1 << 20, NODES)
    assert "would make" in message


def test_alter_configs_sets_and_deletes_and_checks_every_change_first():
    image = MetadataImage()
    create(image)
    for r in alter_configs(image, "orders", {"retention.ms": "5", "segment.ms": "7"}):
        image.apply(r)
    for r in alter_configs(image, "orders", {"retention.ms": None}):
        image.apply(r)
    assert image.topic("orders").overrides == (("segment.ms", "7"),)
    bad = {"retention.ms": "1", "max.message.bytes": "-1"}
    refused(Errors.INVALID_CONFIG, alter_configs, image, "orders", bad)
    refused(Errors.INVALID_CONFIG, alter_configs, image, "orders", {"unknown.config": None})
    refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, alter_configs, image, "x", {"segment.ms": "1"})
