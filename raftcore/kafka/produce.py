"""Produce (key 0): the leader validates the records (:mod:`raftcore.kafka.produce_validation`),
checks each batch against its producer's sequence (:mod:`raftcore.kafka.producer_state`),
appends, and answers as ``acks`` asks: not at all (0), once appended (1), or with the core's
verdict (-1): NONE once the records are committed in the epoch that appended them,
NOT_LEADER_OR_FOLLOWER (with CurrentLeader and NodeEndpoints, KIP-951) as soon as that
leadership ends, REQUEST_TIMED_OUT after TimeoutMs. Transactions are not served."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.kafka.leader_hints import current_leader, node_endpoints
from raftcore.kafka.produce_group import Outcome, append_checked
from raftcore.kafka.produce_validation import validate_produced
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.raft import Appended, NotLeaderError
from raftcore.records import scan_batches

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker, Partition

__all__ = ["produce"]

logger = logging.getLogger(__name__)


async def produce(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.PRODUCE).cls
    acks = body.acks
    if body.transactional_id if version >= 3 else None:
        error_for_all = Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT  # transactions are not served
    else:
        error_for_all = None
    results = []
    waits: list[tuple[Any, Partition, Appended]] = []
    queued: list[tuple[Any, Partition, asyncio.Future[Outcome]]] = []
    not_leader: Partition | None = None
    for topic in body.topic_data:
        partitions = []
        for p in topic.partition_data:
            resp = cls.PartitionProduceResponse(
                index=p.index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
            )
            partition = broker.partition(topic.name, p.index)
            error: int | None = error_for_all
            if partition is None and error is None:  # led elsewhere, or not in the cluster
                error = broker.absent(topic.name, p.index)
            outcome = _produce_partition(
                broker, partition, p, version, error, track=acks == -1, resp=resp
            )
            if isinstance(outcome, asyncio.Future):
                assert partition is not None
                queued.append((resp, partition, outcome))
            else:
                not_leader = _answer(broker, resp, partition, outcome, waits) or not_leader
            partitions.append(resp)
        results.append(cls.TopicProduceResponse(name=topic.name, partition_responses=partitions))
    for resp, partition, future in queued:  # appended with the others of this loop iteration
        not_leader = _answer(broker, resp, partition, await future, waits) or not_leader
    if acks == 0:
        return None
    if waits:
        # acks=all: the core's verdict (raftcore.raft.pending): committed in the epoch that
        # appended the records, or NOT_LEADER_OR_FOLLOWER as soon as that leadership ends.
        timeout = max(body.timeout_ms, 1) / 1000
        try:
            await _wait_verdicts(cls, waits, timeout)
        finally:  # a closed connection cancels us: drop the verdicts nobody will read
            for _, partition, appended in waits:
                partition.forget(appended)
        not_leader = not_leader or next(
            (w[1] for w in waits if w[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER), None
        )
    response = cls(responses=results, throttle_time_ms=0)
    # KIP-951: where the new leader is, from a replica here that knows it (a partition with no
    # replica here, led elsewhere, leaves it to Metadata)
    if not_leader is not None and any(
        p.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        for t in results
        for p in t.partition_responses
    ):
        response.node_endpoints = node_endpoints(not_leader, cls.NodeEndpoint)
    return response


def _answer(
    broker: Broker,
    resp: Any,
    partition: Partition | None,
    outcome: Outcome,
    waits: list[tuple[Any, Partition, Appended]],
) -> Partition | None:
    """Fill ``resp`` with what appending to ``partition`` came to; a tracked append joins
    ``waits``. Returns the partition when it answers that it does not lead."""
    error, appended = outcome
    resp.error_code = error
    if appended is not None:
        assert partition is not None
        broker.metrics.produce_records += appended.last_offset - appended.first_offset + 1
        resp.base_offset = appended.first_offset
        resp.log_start_offset = partition.log_start_offset()
        if appended.token is not None:
            waits.append((resp, partition, appended))
    elif partition is not None and error in (
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.FENCED_LEADER_EPOCH,
    ):
        cls = response_spec(ApiKey.PRODUCE).cls
        resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)
        return partition
    return None


async def _wait_verdicts(cls: Any, waits: list, timeout: float) -> None:
    """acks=all: the core's verdict on each append (raftcore.raft.pending)."""
    for resp, partition, appended in waits:
        try:
            await partition.wait_verdict(appended, timeout)
        except NotLeaderError as exc:
            resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            resp.base_offset = -1
            resp.current_leader = cls.LeaderIdAndEpoch(
                leader_id=exc.leader.leader_id if exc.leader.known else -1,
                leader_epoch=exc.leader.epoch,
            )
        except asyncio.TimeoutError:
            resp.error_code = Errors.REQUEST_TIMED_OUT
            resp.base_offset = -1
        except RaftcoreError:  # the node stopped
            resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            resp.base_offset = -1
            resp.current_leader = current_leader(partition, cls.LeaderIdAndEpoch)


def _produce_partition(
    broker: Broker,
    partition: Partition | None,
    p: Any,
    version: int,
    error_for_all: int | None,
    *,
    track: bool,
    resp: Any,
) -> Outcome | asyncio.Future[Outcome]:
    """(error, the append) of appending one partition's records, or a future of it when the
    append waits for the end of this loop iteration (:mod:`raftcore.kafka.produce_group`);
    with ``track`` the append awaits the core's verdict (the caller must wait for it). A
    refusal of malformed records is explained in ``resp`` (Produce v8+ RecordErrors and
    ErrorMessage, KIP-467)."""
    if error_for_all is not None:
        return error_for_all, None
    if partition is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, None
    if version < 3:
        return Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, None  # message formats before v2
    # First of all, as a Kafka broker refuses a partition it does not lead before validating
    # anything: a leader that takes no appends now (handing over, resigning) refuses every
    # batch alike. Were the producer's sequences checked first, the batch after one refused
    # here would be answered OUT_OF_ORDER_SEQUENCE_NUMBER for a gap of our own making, which
    # librdkafka takes for proof that the batches before it are not in the log: it bumps its
    # epoch and sends them again under new sequences, a duplicate of any of them this leader
    # had appended (fault harness seed 5008).
    if not partition.takes_appends():
        return Errors.NOT_LEADER_OR_FOLLOWER, None
    records = p.records
    if records is None or len(records) == 0:
        return Errors.INVALID_RECORD, None
    # Every record of every batch, before anything is written (Kafka's LogValidator).
    refusal = validate_produced(records, max_batch_bytes=broker.max_message_bytes)
    if refusal is not None:
        logger.info("%s refusing produced records: %s", broker.prefix, refusal.reason)
        resp.error_message = refusal.reason  # Produce v8+ (KIP-467)
        if refusal.record_index >= 0:  # RecordErrors name a record of the batch
            resp.record_errors = [
                response_spec(ApiKey.PRODUCE).cls.BatchIndexAndErrorMessage(
                    batch_index=refusal.record_index, batch_index_error_message=refusal.reason
                )
            ]
        return refusal.error_code, None
    try:
        scan = scan_batches(records, check_crc=False)  # headers, for the producer state
    except RaftcoreError:
        return Errors.CORRUPT_MESSAGE, None
    if scan.error is not None or scan.count == 0:  # validation has refused these already
        logger.info("%s refusing produced records: %s", broker.prefix, scan.error)
        return Errors.CORRUPT_MESSAGE, None
    if track:  # with the other acks=all requests of this loop iteration
        return broker.produce_group(partition).append(records, scan)
    return append_checked(partition, records, scan, track=False)
