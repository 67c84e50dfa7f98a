"""The leaders of partitions this node has no replica of, asked of the nodes that have one.

Each partition of a created topic elects its own leader in its own group, which only its
replicas run; a node outside it learns the leader by asking its replicas (a Metadata request of
the node's own, which they answer from their own groups without asking further:
``raftcore.kafka.metadata.NODE_CLIENT_ID``). One request per replica node, all at once, each
bounded by ``TIMEOUT_S``; a node that does not answer in time is left out, and the partitions
only it could tell about have no leader in the answer (LEADER_NOT_AVAILABLE: the client asks
again). The highest epoch wins where replicas disagree."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft.values import LeaderAndEpoch
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["PeerLeaderLookup"]

TIMEOUT_S = 1.0
_VERSION = 12


class PeerLeaderLookup:
    def __init__(self, node: RaftNode) -> None:
        self.node = node

    async def leaders(
        self, wanted: dict[TopicPartition, tuple[int, ...]]
    ) -> dict[TopicPartition, LeaderAndEpoch]:
        topics_of: dict[int, set[str]] = {}
        for name, replicas in wanted.items():
            for node_id in replicas:
                if node_id != self.node.node_id:
                    topics_of.setdefault(node_id, set()).add(name.topic)
        answers = await asyncio.gather(
            *(self._ask(node_id, sorted(topics)) for node_id, topics in topics_of.items()),
            return_exceptions=True,
        )
        found: dict[TopicPartition, LeaderAndEpoch] = {}
        for answer in answers:
            if isinstance(answer, BaseException) or answer is None:
                continue
            for topic in answer.topics:
                for p in topic.partitions:
                    name = TopicPartition(topic.name, p.partition_index)
                    if name not in wanted or p.leader_id < 0:
                        continue
                    held = found.get(name)
                    if held is None or p.leader_epoch > held.epoch:
                        found[name] = LeaderAndEpoch(p.leader_id, p.leader_epoch)
        return found

    async def _ask(self, node_id: int, topics: list[str]) -> Any:
        cls = request_spec(ApiKey.METADATA).cls
        body = cls(
            topics=[cls.MetadataRequestTopic(topic_id=bytes(16), name=t) for t in topics],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return await self.node.request_peer(node_id, ApiKey.METADATA, _VERSION, body, TIMEOUT_S)
