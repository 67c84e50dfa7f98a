"""What names a partition, and so the Raft group that replicates it: a topic and an index, as
Kafka names them. A value shared by the node, the wire format and (later) the Kafka API and
the metadata, so it sits below all of them and imports nothing of raftcore."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicPartition"]


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
