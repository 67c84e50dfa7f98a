"""The cluster metadata: what ``__cluster_metadata`` holds besides the voters, and the
controller's decisions about it.

- :mod:`~raftcore.metadata.records`: KRaft's TopicRecord, PartitionRecord,
  PartitionChangeRecord, ConfigRecord and RemoveTopicRecord, and their framed encoding;
- :mod:`~raftcore.metadata.image`: :class:`MetadataImage`, the records applied in order;
  topics by name and id, partitions with their replicas, topic configs over Kafka's defaults;
- :mod:`~raftcore.metadata.placement`: where the controller puts new replicas and preferred
  leaders, and the plan that moves every replica off a node;
- :mod:`~raftcore.metadata.controller`: CreateTopics, DeleteTopics, CreatePartitions and
  IncrementalAlterConfigs checked against an image and turned into records.

Like :mod:`raftcore.raft`, this package is pure: no I/O, no clock, no threads or asyncio; the
random generator for topic ids is the caller's. The node will hold one image per process,
apply each committed record of the metadata group to it, and start a partition's Raft group
with the replicas of its PartitionRecord as voters; the metadata leader (the controller) will
answer the admin APIs with :mod:`~raftcore.metadata.controller`. Nothing is wired yet.
"""

from __future__ import annotations

from raftcore.metadata.errors import MetadataError
from raftcore.metadata.image import MetadataImage, PartitionImage, TopicImage
from raftcore.metadata.placement import ReassignmentStep
from raftcore.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from raftcore.metadata.topic_id import TopicId

__all__ = [
    "ConfigRecord",
    "MetadataError",
    "MetadataImage",
    "MetadataRecord",
    "PartitionChangeRecord",
    "PartitionImage",
    "PartitionRecord",
    "ReassignmentStep",
    "RemoveTopicRecord",
    "TopicId",
    "TopicImage",
    "TopicRecord",
    "decode_record",
    "encode_record",
]
