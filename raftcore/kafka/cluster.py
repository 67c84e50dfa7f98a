"""What the Kafka API sees of the cluster metadata: the image every node applies (topics,
partitions and their replicas, topic configs), who the controller is, and the controller's
writes. The node's :class:`raftcore.node.cluster_metadata.ClusterMetadata` is one.

A client's topic is either the node's own (``NodeConfig.topic``, its partitions the node's
groups) or one created through the metadata; the admin APIs (:mod:`raftcore.kafka.topic_create`)
act on the latter only."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from raftcore.errors import RaftcoreError

if TYPE_CHECKING:
    from raftcore.metadata import MetadataImage, MetadataRecord
    from raftcore.raft import LeaderAndEpoch
    from raftcore.topic_partition import TopicPartition

__all__ = ["Cluster", "LeaderLookup", "NotControllerError"]


class NotControllerError(RaftcoreError):
    """This node does not lead the metadata group (Kafka's NOT_CONTROLLER)."""


class Cluster(Protocol):
    #: where new topic ids come from
    rng: random.Random

    @property
    def image(self) -> MetadataImage:
        """The metadata as this node has applied it."""
        ...

    def controller_id(self) -> int:
        """The controller's node id (the metadata leader), -1 while none is known."""
        ...

    def is_controller(self) -> bool: ...

    def node_ids(self) -> list[int]:
        """The nodes replicas are placed on."""
        ...

    async def write(
        self, decide: Callable[[MetadataImage], list[MetadataRecord]], timeout_s: float
    ) -> list[MetadataRecord]:
        """As the controller: the records ``decide`` makes of the image (MetadataError
        refuses), committed and applied here; NotControllerError elsewhere."""
        ...


class LeaderLookup(Protocol):
    async def leaders(
        self, wanted: dict[TopicPartition, tuple[int, ...]]
    ) -> dict[TopicPartition, LeaderAndEpoch]:
        """The leaders of partitions this node has no replica of (their replicas given),
        as their replicas know them; those none answered for are left out."""
        ...
