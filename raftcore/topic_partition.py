"""What names a partition, and so the Raft group that replicates it: a topic and an index, as
Kafka names them. A value shared by the node, the wire format and (later) the Kafka API and
the metadata, so it sits below all of them and imports nothing of raftcore."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OFFSETS_TOPIC", "TopicPartition"]

# Kafka's internal topic of the consumer groups' committed offsets and group metadata; its
# partitions are Raft groups of their own (raftcore.node.offsets_groups), never a user's topic.
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
