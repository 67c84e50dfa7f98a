"""ListOffsets (key 2) on the leader: the log start offset (EARLIEST, -2), the high watermark
(LATEST, -1), or the first committed record at or after a timestamp. A replica that does not
lead, or a new leader that does not know its high watermark yet, answers
NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker, Partition

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "list_offsets"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


def list_offsets(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.LIST_OFFSETS).cls
    topics = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            resp = cls.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
            )
            partition = broker.partition(topic.name, p.partition_index)
            hw = None if partition is None else partition.high_watermark()
            if partition is None:
                resp.error_code = broker.absent(topic.name, p.partition_index)
            elif not partition.is_leader() or hw is None:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            elif p.timestamp == EARLIEST_TIMESTAMP:
                resp.offset = partition.log_start_offset()
                resp.leader_epoch = max(partition.epoch_for_offset(resp.offset), 0)
            elif p.timestamp == LATEST_TIMESTAMP:
                resp.offset = hw
                resp.leader_epoch = partition.epoch
            elif p.timestamp >= 0:
                resp.offset, resp.timestamp = _offset_for_time(partition, hw, p.timestamp)
            else:
                resp.error_code = Errors.INVALID_REQUEST
            parts.append(resp)
        topics.append(cls.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)


def _offset_for_time(partition: Partition, hw: int, timestamp: int) -> tuple[int, int]:
    """The first committed offset whose batch has a record at or after ``timestamp``."""
    for batch in partition.batches():
        if batch.base_offset >= hw:
            break
        if batch.max_timestamp >= timestamp and not batch.is_control:
            for record in batch.records():
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
    return -1, -1
