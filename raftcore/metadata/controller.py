"""The controller's answers to Kafka's admin requests, as the records it will write.

Each function checks a request against the current image and returns the records that carry
it out, in the order they must be applied (a topic, its configs, then its partitions), or
refuses it with :class:`MetadataError` and the error Kafka answers: INVALID_TOPIC_EXCEPTION,
TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG,
UNKNOWN_TOPIC_OR_PARTITION. Nothing is written here; the caller appends the records to the
metadata log as one batch, so a request is applied whole or not at all.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from raftcore.error_codes import Errors
from raftcore.metadata.errors import MetadataError
from raftcore.metadata.image import MetadataImage
from raftcore.metadata.placement import ReassignmentStep, place_new_partitions, place_new_topic
from raftcore.metadata.records import (
    LEADER_UNCHANGED,
    NO_LEADER,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftcore.metadata.topic_configs import check_config, check_config_name
from raftcore.metadata.topic_id import TopicId
from raftcore.metadata.topic_names import check_topic_name

__all__ = [
    "DEFAULT_PARTITIONS",
    "DEFAULT_REPLICATION_FACTOR",
    "alter_configs",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "reassignment_records",
]

# Kafka's num.partitions and default.replication.factor: what CreateTopics' -1 asks for.
DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1
# The partitions a cluster may hold in all (created topics'), so that one request cannot make
# a controller place, and every node open, a million Raft groups: each costs a node about
# 4 descriptors and its share of the fetches (docs/topics.md).
MAX_CLUSTER_PARTITIONS = 10_000


def _check_partition_total(image: MetadataImage, name: str, adding: int) -> None:
    held = sum(1 for _ in image.partitions())
    if held + adding > MAX_CLUSTER_PARTITIONS:
        raise MetadataError(
            Errors.INVALID_PARTITIONS,
            f"topic {name}: {adding} more partitions would make {held + adding}; a raftcore "
            f"cluster holds at most {MAX_CLUSTER_PARTITIONS:,} partitions of created topics",
        )


def _partition_records(
    topic_id: TopicId, first: int, assignments: list[tuple[int, ...]]
) -> list[MetadataRecord]:
    # A new partition starts with every replica in sync and its preferred leader leading:
    # its Raft group starts with these voters, and elects whom it elects.
    return [
        PartitionRecord(topic_id, first + i, replicas, isr=replicas, leader=replicas[0])
        for i, replicas in enumerate(assignments)
    ]


def create_topic(
    image: MetadataImage,
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    nodes: Iterable[int],
    rng: random.Random,
) -> list[MetadataRecord]:
    """CreateTopics for one topic: its TopicRecord (with a new id from ``rng``), its
    ConfigRecords and its PartitionRecords placed over the live ``nodes``. -1 partitions or
    replication factor ask for the defaults."""
    check_topic_name(name)
    if image.topic(name) is not None:
        raise MetadataError(Errors.TOPIC_ALREADY_EXISTS, f"topic {name} already exists")
    holder = image.colliding_topic(name)
    if holder is not None:
        raise MetadataError(
            Errors.INVALID_TOPIC_EXCEPTION,
            f"topic {name} collides with topic {holder} ('.' and '_' are one in metric names)",
        )
    partitions = DEFAULT_PARTITIONS if partitions == -1 else partitions
    replication_factor = (
        DEFAULT_REPLICATION_FACTOR if replication_factor == -1 else replication_factor
    )
    if partitions < 1:
        raise MetadataError(
            Errors.INVALID_PARTITIONS, f"topic {name}: {partitions} partitions (at least 1)"
        )
    _check_partition_total(image, name, partitions)
    for key, value in configs.items():
        check_config(name, key, value)
    # A fresh id, never one a live topic holds: a topic deleted and created again is a new
    # topic, and a node still holding the old one's directory must not take it for the new.
    topic_id = TopicId.random(rng)
    while image.topic_by_id(topic_id) is not None:
        topic_id = TopicId.random(rng)
    assignments = place_new_topic(
        nodes,
        image,
        topic_id,
        partitions=partitions,
        replication_factor=replication_factor,
        topic=name,
    )
    records: list[MetadataRecord] = [TopicRecord(name, topic_id)]
    records.extend(ConfigRecord(name, k, v) for k, v in sorted(configs.items()))
    records.extend(_partition_records(topic_id, 0, assignments))
    return records


def delete_topic(image: MetadataImage, name: str) -> list[MetadataRecord]:
    """DeleteTopics for one topic: its RemoveTopicRecord (its partitions and configs go too)."""
    found = image.topic(name)
    if found is None:
        raise MetadataError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name}: no such topic")
    return [RemoveTopicRecord(found.topic_id)]


def create_partitions(
    image: MetadataImage, name: str, count: int, nodes: Iterable[int]
) -> list[MetadataRecord]:
    """CreatePartitions: the PartitionRecords that take topic ``name`` to ``count``
    partitions; a count not above the current one is INVALID_PARTITIONS, as in Kafka."""
    found = image.topic(name)
    if found is None:
        raise MetadataError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name}: no such topic")
    have = len(found.partitions)
    if count <= have:
        raise MetadataError(
            Errors.INVALID_PARTITIONS,
            f"topic {name} has {have} partitions; {count} would not add any "
            "(partitions can be added, never removed)",
        )
    _check_partition_total(image, name, count - have)
    assignments = place_new_partitions(nodes, image, name, count)
    return _partition_records(found.topic_id, have, assignments)


def alter_configs(
    image: MetadataImage, name: str, changes: Mapping[str, str | None]
) -> list[MetadataRecord]:
    """IncrementalAlterConfigs on one topic: SET (a value) or DELETE (None) each config; all are
    checked before any record is made."""
    if image.topic(name) is None:
        raise MetadataError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name}: no such topic")
    for key, value in changes.items():
        if value is None:
            check_config_name(name, key)
        else:
            check_config(name, key, value)
    return [ConfigRecord(name, k, v) for k, v in sorted(changes.items())]


def reassignment_records(
    image: MetadataImage, step: ReassignmentStep
) -> tuple[PartitionChangeRecord, PartitionChangeRecord]:
    """The two records of one replica move, as Kafka's reassignment writes them: the first,
    when the move starts, lists the new node among the replicas and as adding, the old one as
    removing (the partition's group runs AddRaftVoter, then RemoveRaftVoter); the second, once
    both are done, the replicas after (preferred leader first), their in-sync set, and nothing
    moving. Both are computed from the image before the first is applied."""
    found = image.topic(step.topic)
    if found is None or not 0 <= step.partition < len(found.partitions):
        raise MetadataError(
            Errors.UNKNOWN_TOPIC_OR_PARTITION, f"{step.topic}-{step.partition}: no such partition"
        )
    partition = found.partitions[step.partition]
    before = partition.replicas
    if step.remove not in before or step.add in before:
        raise MetadataError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"{step.topic}-{step.partition}: cannot move node {step.remove} to {step.add} "
            f"with replicas {list(before)}",
        )
    start = PartitionChangeRecord(
        found.topic_id,
        step.partition,
        replicas=(*before, step.add),
        adding_replicas=(step.add,),
        removing_replicas=(step.remove,),
    )
    # AddRaftVoter completes once the new voter has caught up: it is in sync when the move
    # finishes, and the node removed is not. A removed leader has resigned; the group elects.
    in_sync = {*partition.isr, step.add} - {step.remove}
    finish = PartitionChangeRecord(
        found.topic_id,
        step.partition,
        replicas=step.replicas,
        adding_replicas=(),
        removing_replicas=(),
        isr=tuple(n for n in step.replicas if n in in_sync),
        leader=NO_LEADER if partition.leader == step.remove else LEADER_UNCHANGED,
    )
    return start, finish
