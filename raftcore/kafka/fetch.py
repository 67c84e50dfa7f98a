"""Fetch (key 1) for consumers: committed records only, up to the high watermark, from the
leader; every other replica answers NOT_LEADER_OR_FOLLOWER with the leader it knows
(CurrentLeader, and NodeEndpoints from v16: KIP-951). A replica's own fetches are the core's
(:mod:`raftcore.raft.fetch`); the node tells them apart before this module is asked.

What each partition serves is the partition's to decide (``Partition.read_committed``: the
rules of :mod:`raftcore.raft.serving` -- not the leader, a fenced or unknown leader epoch, a
new leader not ready, an offset out of range). This module adds what belongs to the answer
as a whole: unknown topics and partitions, the answer's byte budget across partitions
(KIP-74), the leader hints, and whether to answer now or wait for the high watermark.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka.leader_hints import current_leader, node_endpoints
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.raft.serving import ServingRule
from raftcore.records import scan_batches

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker, Partition

__all__ = ["consumer_fetch", "fetch_once"]


async def consumer_fetch(broker: Broker, body: Any, version: int) -> Any:
    """Answer at once when there is data or an error; else wait up to MaxWaitMs for the high
    watermark to move (on the partition this node leads: one per node today)."""
    cls = response_spec(ApiKey.FETCH).cls
    deadline = time.monotonic() + max(0, body.max_wait_ms) / 1000
    while True:
        response, has_data = fetch_once(broker, body, version, cls)
        remaining = deadline - time.monotonic()
        leading = [p for p in broker.partitions if p.is_leader()]
        if has_data or remaining <= 0 or not leading:
            return response
        await leading[0].wait_high_watermark_change(remaining)


def _within(data: Any, limit: int) -> int:
    """Byte length of the whole batches at the start of ``data`` that fit in ``limit``."""
    scan = scan_batches(data, check_crc=False)
    end = 0
    for i in range(scan.count):
        batch_end = int(scan.positions[i] + scan.sizes[i])
        if batch_end > limit:
            break
        end = batch_end
    return end


def fetch_once(broker: Broker, body: Any, version: int, cls: Any) -> tuple[Any, bool]:
    """The answer as of now, and whether to send it now (data, or an error to report)."""
    # A new leader that does not know its high watermark yet makes the fetch wait, whatever
    # else the answer says (as the partitions stand when the request is read).
    ready = all(p.high_watermark() is not None for p in broker.partitions)
    has_data = False
    not_leader: Partition | None = None
    budget = min(body.max_bytes, broker.fetch_max_bytes)
    responses = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            partition = (
                broker.partition(topic.topic, p.partition)
                if version <= 12
                else broker.partition_by_id(bytes(topic.topic_id), p.partition)
            )
            # As Kafka's brokers answer: an error carries -1 offsets and an empty record set,
            # never a null one (librdkafka cannot parse a null record set, so a consumer told
            # OFFSET_OUT_OF_RANGE that way never saw the error and never reset its offset).
            resp = cls.PartitionData(
                partition_index=p.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                records=b"",
            )
            if partition is None:  # led elsewhere, or not in the cluster
                resp.error_code = (
                    broker.absent(topic.topic, p.partition)
                    if version <= 12
                    else broker.absent(None, p.partition, bytes(topic.topic_id))
                )
            else:
                # At most the answer's budget (the client's MaxBytes, capped by the node's
                # fetch.max.bytes, across every partition it lists, however often), and the
                # partition's; the first batch of the answer comes whole even when it is
                # larger (KIP-74). Nothing is read once the budget is spent.
                max_bytes = (
                    max(1, min(p.partition_max_bytes, budget)) if budget > 0 or not has_data else 0
                )
                read = partition.read_committed(
                    p.fetch_offset, max_bytes, p.current_leader_epoch if version >= 9 else -1
                )
                resp.error_code = read.error_code
                resp.high_watermark = resp.last_stable_offset = read.high_watermark
                resp.log_start_offset = read.log_start_offset
                if read.names_the_leader:
                    resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)
                if read.rule is ServingRule.NOT_LEADER and not_leader is None:
                    not_leader = partition
                # the log reads a first batch whole: only the answer's first may overrun
                records = read.records
                end = _within(records, budget) if has_data else len(records)
                resp.records = records[:end]  # a view of the log, sent uncopied
                budget -= end
                has_data = has_data or end > 0
            parts.append(resp)
        entry = cls.FetchableTopicResponse(partitions=parts)
        if version <= 12:
            entry.topic = topic.topic
        else:
            entry.topic_id = topic.topic_id
        responses.append(entry)
    response = cls(throttle_time_ms=0, error_code=Errors.NONE, session_id=0, responses=responses)
    if not_leader is not None and version >= 16:
        response.node_endpoints = node_endpoints(not_leader, cls.NodeEndpoint)
    # A partition with an error answers the fetch at once, as in Kafka: nothing to wait for
    # (but a new leader that does not know its high watermark yet makes the fetch wait).
    failed = ready and any(p.error_code for t in responses for p in t.partitions)
    return response, has_data or not_leader is not None or failed
