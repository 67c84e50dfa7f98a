"""Fetch (key 1) for consumers: committed records only, up to the high watermark, from the
leader; every other replica answers NOT_LEADER_OR_FOLLOWER with the leader it knows
(CurrentLeader, and NodeEndpoints from v16: KIP-951). A replica's own fetches are the core's
(:mod:`raftcore.raft.fetch`); the node tells them apart before this module is asked.

Per partition, in this order: an unknown topic or partition; a replica that does not lead
(NOT_LEADER_OR_FOLLOWER); a CurrentLeaderEpoch (v9+) older than the leader's
(FENCED_LEADER_EPOCH) or newer (UNKNOWN_LEADER_EPOCH); a new leader that does not know its
high watermark yet (NOT_LEADER_OR_FOLLOWER: the fetch waits, then the client asks again); an
offset below the log start or past the log end (OFFSET_OUT_OF_RANGE); otherwise the batches
wholly below the high watermark, within the answer's budget.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka.leader_hints import current_leader, node_endpoints
from raftcore.protocol.api import ApiKey, response_spec
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


def _committed_end(data: Any, hw: int, limit: int | None = None) -> int:
    """Byte length of the batches in ``data`` that lie wholly below the high watermark (and,
    with ``limit``, within that many bytes)."""
    scan = scan_batches(data, check_crc=False)
    end = 0
    for i in range(scan.count):
        if int(scan.last_offsets[i]) >= hw:
            break
        batch_end = int(scan.positions[i] + scan.sizes[i])
        if limit is not None and batch_end > limit:
            break
        end = batch_end
    return end


def fetch_once(broker: Broker, body: Any, version: int, cls: Any) -> tuple[Any, bool]:
    """The answer as of now, and whether to send it now (data, or an error to report)."""
    # Each partition as it stands when the request is read (a read below may report damage
    # to the core, which must not change what the rest of this answer says).
    leads = {id(p): p.is_leader() for p in broker.partitions}
    hws = {id(p): p.high_watermark() for p in broker.partitions}
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
            if partition is None:
                resp.error_code = (
                    Errors.UNKNOWN_TOPIC_OR_PARTITION if version <= 12 else Errors.UNKNOWN_TOPIC_ID
                )
            elif not leads[id(partition)]:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
                resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)
                if not_leader is None:
                    not_leader = partition
            else:
                budget, served = _serve(
                    partition,
                    p,
                    resp,
                    hw=hws[id(partition)],
                    cls=cls,
                    version=version,
                    budget=budget,
                    has_data=has_data,
                )
                has_data = has_data or served
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
    ready = all(hw is not None for hw in hws.values())
    failed = ready and any(p.error_code for t in responses for p in t.partitions)
    return response, has_data or not_leader is not None or failed


def _serve(
    partition: Partition,
    p: Any,
    resp: Any,
    *,
    hw: int | None,
    cls: Any,
    version: int,
    budget: int,
    has_data: bool,
) -> tuple[int, bool]:
    """Fill ``resp`` for one partition this replica leads; the answer's budget left, and
    whether records were served."""
    if version >= 9 and p.current_leader_epoch >= 0 and p.current_leader_epoch != partition.epoch:
        resp.error_code = (
            Errors.FENCED_LEADER_EPOCH
            if p.current_leader_epoch < partition.epoch
            else Errors.UNKNOWN_LEADER_EPOCH
        )
        resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)
        return budget, False
    if hw is None:
        resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER  # a new leader, not ready yet
        resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)
        return budget, False
    start = partition.log_start_offset()
    if p.fetch_offset < start or p.fetch_offset > partition.log_end_offset():
        resp.error_code = Errors.OFFSET_OUT_OF_RANGE
        return budget, False
    resp.high_watermark = resp.last_stable_offset = hw
    resp.log_start_offset = start
    if not (p.fetch_offset < hw and (budget > 0 or not has_data)):
        return budget, False
    # At most the answer's budget (the client's MaxBytes, capped by the node's fetch.max.bytes,
    # across every partition it lists, however often), and the partition's; the first batch of
    # the answer comes whole even when it is larger (KIP-74). Only sound batches leave: the
    # partition keeps the first damaged one and what follows, and reports it.
    data, damaged = partition.read_intact(
        p.fetch_offset, max(1, min(p.partition_max_bytes, budget)), hw
    )
    if damaged and len(data) == 0:
        resp.error_code = Errors.KAFKA_STORAGE_ERROR
    # the log reads a first batch whole: only the answer's first may overrun
    end = _committed_end(data, hw, budget if has_data else None)
    resp.records = data[:end]  # a view of the log, sent uncopied
    return budget - end, end > 0
