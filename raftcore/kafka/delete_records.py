"""DeleteRecords (Kafka API 21): a client asks that the log start at an offset.

The core decides (:meth:`raftcore.raft.RaftCore.delete_records`, seed 003's rules): the
leader checks the offset, makes a snapshot covering it due, and moves its log start offset
once every replica has fetched past it or the snapshot is ``max_replication_lag_ms`` old.
This handler only waits for the log start offset to get there, as Kafka's
DelayedDeleteRecords waits for the replicas' low watermarks:

- NONE with the low watermark (the log start offset, which may be past the offset asked for:
  the log starts at a snapshot's end) once it is there;
- REQUEST_TIMED_OUT with the low watermark then, when ``TimeoutMs`` passes first (a replica
  lags, or the snapshot takes longer); the deletion still goes on;
- NOT_LEADER_OR_FOLLOWER on any replica but the leader, or when the leadership ends first;
- OFFSET_OUT_OF_RANGE past the high watermark (or below -1), OFFSET_NOT_AVAILABLE before the
  leader knows its high watermark, POLICY_VIOLATION when the node takes no snapshots (its log
  prefix cannot go); for a partition with no replica on this node, NOT_LEADER_OR_FOLLOWER when
  the cluster has it (a created topic led elsewhere), else UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker, Partition

__all__ = ["delete_records"]

MAX_TIMEOUT_S = 300.0


async def delete_records(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.DELETE_RECORDS).cls
    timeout_s = min(max(body.timeout_ms, 0) / 1000, MAX_TIMEOUT_S)
    topics = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            result = cls.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1
            )
            partition = broker.partition(topic.name, p.partition_index)
            if partition is None:
                result.error_code = broker.absent(topic.name, p.partition_index)
            else:
                result.error_code, result.low_watermark = await _delete(
                    partition, p.offset, timeout_s
                )
            parts.append(result)
        topics.append(cls.DeleteRecordsTopicResult(name=topic.name, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)


async def _delete(partition: Partition, offset: int, timeout_s: float) -> tuple[int, int]:
    result = partition.delete_records(offset)  # the leader's decision (its core's)
    if result is None:
        return Errors.NOT_LEADER_OR_FOLLOWER, -1
    if result.done:
        return result.error, partition.log_start_offset()
    epoch = partition.epoch
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while partition.log_start_offset() < result.offset:
        if not partition.leads(epoch):
            return Errors.NOT_LEADER_OR_FOLLOWER, -1
        left = deadline - loop.time()
        if left <= 0:
            return Errors.REQUEST_TIMED_OUT, partition.log_start_offset()
        await partition.wait_log_start_change(left)  # the core says when it moves
    return Errors.NONE, partition.log_start_offset()
