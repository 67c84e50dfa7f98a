"""The metadata group of a node (``__cluster_metadata``, KRaft's metadata log) and what the node
does with it: every node applies its committed records (:mod:`raftcore.metadata.records`) to
one :class:`~raftcore.metadata.MetadataImage`, then opens the groups of the partitions the image
places on it and closes (and deletes) those it no longer holds (:class:`TopicGroups`); its
leader is the controller, which turns the admin requests into records
(:mod:`raftcore.metadata.controller`) and answers once they are committed and applied here.

The metadata group runs over the node's static voters (``--voters``), as the partitions
1..N-1 of ``NodeConfig.topic`` do; voter changes (KIP-853) are made on partition 0's group
only and do not reach it. It takes no snapshots: the image is rebuilt from the whole log at
each start.

Invariants:

- a record is applied once, in log order, on every node alike; one the image refuses (a log the
  controller did not write) is logged and skipped, the same way on every node;
- groups are opened and closed only once the image holds everything committed (the listener
  has read up to the high watermark): before that a replica directory found on disk could
  belong to a topic whose records are not read yet, and must not be deleted;
- the controller writes one request at a time, checked against an image that holds everything
  committed, so that two requests never both pass a check that only one may pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftcore.errors import CorruptRecordError
from raftcore.kafka.cluster import NotControllerError
from raftcore.metadata import MetadataError, MetadataImage, MetadataRecord
from raftcore.metadata.records import decode_record, encode_record
from raftcore.node.clock import now_ms
from raftcore.node.data_dir import METADATA_DIR
from raftcore.node.group import RaftGroup
from raftcore.node.topic_groups import replica_config
from raftcore.node.topic_ids import METADATA_TOPIC, METADATA_TOPIC_ID
from raftcore.node.waiters import Waiters
from raftcore.raft import CommittedBatch, LeaderAndEpoch
from raftcore.raft.retention import RetentionConfig
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.config import NodeConfig
    from raftcore.node.node import RaftNode

__all__ = ["ClusterMetadata", "MetadataListener"]

logger = logging.getLogger("raftcore.node.node")


class MetadataListener:
    """The metadata group's listener: decodes each committed record and applies it to the
    image, then tells ``applied`` (the node reconciles its groups)."""

    def __init__(self, image: MetadataImage, prefix: str, applied: Callable[[], None]) -> None:
        self.image = image
        self.prefix = prefix
        self._applied = applied
        self.next_offset = 0  # everything below it is applied
        self.moved = Waiters()

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        for batch in batches:
            for record in batch.records:
                where = f"{self.prefix} metadata record at offset {record.offset}"
                try:
                    self.image.apply(decode_record(record.value or b"", where))
                except (CorruptRecordError, MetadataError) as exc:
                    # every node refuses the same record the same way (image.py)
                    logger.warning("%s: skipped: %s", where, exc)
            self.next_offset = batch.last_offset + 1
        self.moved.wake()
        # after the core has counted these batches read (caught_up() asks it)
        asyncio.get_running_loop().call_soon(self._applied)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.moved.wake()


def metadata_config(config: NodeConfig) -> NodeConfig:
    """The node's configuration for the metadata group: over the static voters, and its log
    never trimmed (no snapshots, no retention: every node rebuilds its image from the whole
    log, so a trimmed log would lose topics)."""
    replica = replica_config(config, tuple(config.quorum.voters))
    quorum = dataclasses.replace(replica.quorum, snapshots_on_request=False)
    return dataclasses.replace(replica, quorum=quorum, retention=RetentionConfig())


class ClusterMetadata:
    """The node's metadata group, its image, and the controller's writes."""

    def __init__(
        self, group: RaftGroup, listener: MetadataListener, node_ids: Callable[[], list[int]]
    ) -> None:
        """``node_ids``: the nodes of the cluster replicas are placed on (the voters)."""
        self.group = group
        self.listener = listener
        self.node_ids = node_ids
        self.rng = random.Random()
        self._writes = asyncio.Lock()

    @classmethod
    def for_node(cls, node: RaftNode, rng: random.Random | None) -> ClusterMetadata:
        """The metadata group of ``node`` (``<data-dir>/__cluster_metadata-0/``, over the static
        voters), in ``node.extra_groups``; its listener reconciles the node's topic groups."""
        config = node.config
        name = TopicPartition(METADATA_TOPIC, 0)
        listener = MetadataListener(MetadataImage(), node.prefix, node.topic_groups.want_reconcile)
        group = RaftGroup(
            metadata_config(config),
            name,
            prefix=f"[node {config.node_id} {name}]",
            metrics=node.metrics,
            address_book=node.address_book,
            clock=now_ms,
            fail=node._fail,
            listener=listener,
            rng=None if rng is None else random.Random(rng.getrandbits(64)),
            correlation_ids=node.correlation_ids,
            directory=config.data_dir / METADATA_DIR,
        )
        group.partition.topic_id = METADATA_TOPIC_ID
        node.extra_groups[name] = group
        return cls(group, listener, node.node_ids)

    @property
    def image(self) -> MetadataImage:
        return self.listener.image

    def controller_id(self) -> int:
        """The metadata leader's id, -1 while none is known."""
        if self.group.core is None:
            return -1
        hint = self.group.leader_hint
        return hint.leader_id if hint.leader_id is not None else -1

    def is_controller(self) -> bool:
        return self.group.is_leader()

    def caught_up(self) -> bool:
        """The image holds everything this replica knows is committed."""
        core = self.group.running_core()
        hw = None if core is None else core.high_watermark
        return hw is not None and core is not None and core.listener_next_offset >= hw

    async def wait_caught_up(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.caught_up():
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError("the metadata image did not catch up with the log")
            await self.group.wait_high_watermark_change(min(left, 0.1))

    async def write(
        self,
        decide: Callable[[MetadataImage], list[MetadataRecord]],
        timeout_s: float,
    ) -> list[MetadataRecord]:
        """As the controller: ``decide`` the records against the image (it raises
        MetadataError to refuse), append them as one batch, and return them once they are
        committed and applied here. NotControllerError on a node that does not lead the
        metadata group; TimeoutError when they are not committed within ``timeout_s`` (they
        may still be)."""
        async with self._writes:
            if not self.is_controller():
                raise NotControllerError(f"{self.group.prefix} is not the controller")
            await self.wait_caught_up(timeout_s)
            records = decide(self.image)
            if not records:
                return records
            batch: list[Any] = [(None, encode_record(r)) for r in records]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            appended = await asyncio.wait_for(self.group.appends().append(batch, True), timeout_s)
            while self.listener.next_offset <= appended.last_offset:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError("committed, not applied here yet")
                await self.listener.moved.wait(left)
            return records
