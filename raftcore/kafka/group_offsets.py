"""OffsetCommit (8) and OffsetFetch (9): a group's committed offsets, kept by its coordinator
in the group's ``__consumer_offsets`` partition (:mod:`raftcore.node.coordinator_shard`).

- A commit is answered once its records are committed in Raft: a majority of the voters
  have them, and a coordinator elected after this one's failure reads them back.
- v0 has no generation or member: a "simple" commit (generation -1), as v1+ clients send
  it outside group management. v2-4's retention time is ignored (offsets are kept until the
  group is deleted).
- OffsetFetch answers what is committed in Raft (the coordinator's own state runs ahead of
  the log while a commit replicates). v0-1 carry errors per partition only; v2+ also at the
  top, and a null topic list asks for every partition the group has committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.groups.messages import OffsetCommitRequest, PartitionCommit
from raftcore.kafka.group_membership import call_coordinator
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["offset_commit", "offset_fetch"]


def _by_topic(items: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    topics: dict[str, list[tuple[int, Any]]] = {}
    for tp, value in items:
        topics.setdefault(tp.topic, []).append((tp.partition, value))
    return topics


async def offset_commit(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.OFFSET_COMMIT).cls
    offsets = tuple(
        PartitionCommit(
            TopicPartition(t.name, p.partition_index),
            p.committed_offset,
            p.committed_leader_epoch if version >= 6 else -1,
            p.committed_metadata or "",
        )
        for t in body.topics
        for p in t.partitions
    )
    req = OffsetCommitRequest(
        group_id=body.group_id,
        offsets=offsets,
        generation_id=body.generation_id if version >= 1 else -1,
        member_id=body.member_id if version >= 1 else "",
        group_instance_id=body.group_instance_id if version >= 7 else None,
    )
    answer = await call_coordinator(
        broker, req.group_id, lambda c, ref, now: c.commit_offsets(ref, req, now)
    )
    if isinstance(answer, Errors):
        results = [(c.partition, answer) for c in offsets]
    else:
        results = [(r.partition, r.error) for r in answer]
    return cls(
        throttle_time_ms=0,
        topics=[
            cls.OffsetCommitResponseTopic(
                name=topic,
                partitions=[
                    cls.OffsetCommitResponsePartition(partition_index=index, error_code=error)
                    for index, error in partitions
                ],
            )
            for topic, partitions in _by_topic(results).items()
        ],
    )


def offset_fetch(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.OFFSET_FETCH).cls
    wanted: tuple[TopicPartition, ...] | None = None
    if body.topics is not None:
        wanted = tuple(
            TopicPartition(t.name, index) for t in body.topics for index in t.partition_indexes
        )
    coordinators = broker.coordinators
    shard = None if coordinators is None else coordinators.shard_of(body.group_id)
    error = Errors.COORDINATOR_NOT_AVAILABLE if shard is None else shard.error()
    if error is not None or shard is None or shard.coordinator is None:
        fetched = [(tp, (-1, -1, "", error)) for tp in wanted or ()]
        top = error or Errors.COORDINATOR_NOT_AVAILABLE
    else:
        answer = shard.committed_offsets(body.group_id, wanted)  # committed in Raft only
        fetched = [
            (f.partition, (f.offset, f.leader_epoch, f.metadata, f.error))
            for f in answer.partitions
        ]
        top = answer.error
    return cls(
        throttle_time_ms=0,
        error_code=top,
        topics=[
            cls.OffsetFetchResponseTopic(
                name=topic,
                partitions=[
                    cls.OffsetFetchResponsePartition(
                        partition_index=index,
                        committed_offset=offset,
                        committed_leader_epoch=epoch,
                        metadata=metadata,
                        error_code=error,
                    )
                    for index, (offset, epoch, metadata, error) in partitions
                ],
            )
            for topic, partitions in _by_topic(fetched).items()
        ],
    )
