"""Producer ids: InitProducerId (key 22) hands them out, DescribeProducers (key 61, KIP-664)
tells a producer how far the leader's log has its batches.

**Two kinds of id, never equal.** Bit 62 splits the space:

- ids a node hands out (InitProducerId) have bit 62 clear: node id (14 bits), milliseconds
  since 2024 (40 bits), a counter (8 bits) -- see :class:`ProducerIdSource`;
- ids a client derives itself have bit 62 set (:func:`derived_producer_id`): a writer that must
  resume after its process died (a Spark task retried, :mod:`raftcore.spark.sink`) computes the
  same id again from a name it was given, asks DescribeProducers for the last sequence the
  leader has, and goes on from there. A hash of 62 bits: two different names collide with
  probability about n^2 / 2^63 for n names ever used on a cluster.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = [
    "DERIVED_ID_BIT",
    "NODE_ID_BITS",
    "ProducerIdSource",
    "derived_producer_id",
    "describe_producers",
    "init_producer_id",
]

NODE_ID_BITS = 14
DERIVED_ID_BIT = 1 << 62
_PRODUCER_ID_EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
_NODE_ID_MASK = (1 << NODE_ID_BITS) - 1


class ProducerIdSource:
    """The producer ids one node hands out."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.counter = 0

    def next(self) -> int:
        """A producer id unique in the cluster, from any node (Kafka clients ask whichever
        broker they like): node id (14 bits: ids that differ by a multiple of 16384 share
        them), then milliseconds since 2024 (40 bits, 34 years), then a counter (8 bits); the
        (milliseconds, counter) pair only grows within a process, and a restarted node starts
        from its clock, later than any id it gave before (unless the clock went back). Bit 62
        stays clear: ids with it set are derived by clients (:func:`derived_producer_id`)."""
        now = int(time.time() * 1000) - _PRODUCER_ID_EPOCH_MS
        last_ms, count = divmod(self.counter, 256)
        if now > last_ms:
            self.counter = now << 8
        elif count < 255:
            self.counter += 1
        else:
            self.counter = (last_ms + 1) << 8
        return ((self.node_id & _NODE_ID_MASK) << 48) | self.counter


def derived_producer_id(name: str) -> int:
    """The producer id of ``name``: the same on every machine and in every process, and never
    one a node hands out."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"raftcore-pid").digest()
    return DERIVED_ID_BIT | (int.from_bytes(digest, "big") & (DERIVED_ID_BIT - 1))


def init_producer_id(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.INIT_PRODUCER_ID).cls
    if body.transactional_id is not None:
        return cls(
            throttle_time_ms=0, error_code=Errors.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    pid = broker.producer_ids.next()
    return cls(throttle_time_ms=0, error_code=Errors.NONE, producer_id=pid, producer_epoch=0)


def describe_producers(broker: Broker, body: Any, version: int) -> Any:
    """The leader's producer table (what its log holds, committed or not) for our partition;
    NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka answers: a follower's table may lag."""
    cls = response_spec(ApiKey.DESCRIBE_PRODUCERS).cls
    topics = []
    for topic in body.topics:
        parts = []
        for index in topic.partition_indexes:
            part = cls.PartitionResponse(partition_index=index, error_code=Errors.NONE)
            partition = broker.partition(topic.name, index)
            if partition is None:
                part.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif not partition.is_leader():
                part.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            else:
                part.active_producers = [
                    cls.ProducerState(
                        producer_id=e.producer_id,
                        producer_epoch=e.epoch,
                        last_sequence=e.batches[-1].last_seq if e.batches else -1,
                        last_timestamp=-1,
                        coordinator_epoch=-1,
                        current_txn_start_offset=-1,
                    )
                    for e in partition.producers.entries()
                ]
            parts.append(part)
        topics.append(cls.TopicResponse(name=topic.name, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)
