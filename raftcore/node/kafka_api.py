"""The Kafka client API a raftcore node serves: ApiVersions, Metadata, Produce, Fetch (for
consumers), ListOffsets, DescribeQuorum (:mod:`raftcore.node.describe_quorum`), DeleteRecords
(:mod:`raftcore.node.delete_records`), InitProducerId and DescribeProducers
(:mod:`raftcore.kafka.producer_ids`).

One topic with one partition (``NodeConfig.topic``, partition 0) is the raft log. The leader
takes produce requests and serves consumers -- committed records only, up to the high
watermark. Every other node answers NOT_LEADER_OR_FOLLOWER with the leader it knows
(CurrentLeader) and the leader's endpoint (NodeEndpoints), so a KIP-951 client moves there at
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import CorruptRecordError, InvalidAppendError, RaftcoreError
from raftcore.kafka.produce_validation import validate_produced
from raftcore.kafka.producer_ids import describe_producers, init_producer_id
from raftcore.kafka.producer_state import Duplicate
from raftcore.node import raft_wire
from raftcore.node.delete_records import delete_records
from raftcore.node.describe_quorum import describe_quorum
from raftcore.protocol.api import (
    SUPPORTED_VERSIONS,
    UNADVERTISED,
    ApiKey,
    encode_response,
    response_spec,
)
from raftcore.raft import Appended, NotLeaderError
from raftcore.raft.damage import read_intact
from raftcore.records import scan_batches

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

logger = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


def unsupported_version(node: RaftNode, header: Any) -> list[bytes | memoryview]:
    """An ApiVersions request at a version we do not speak is answered at v0 with
    UNSUPPORTED_VERSION and our list, so the client retries lower (KIP-511); other APIs at an
    unsupported version close the connection."""
    if header.request_api_key != ApiKey.API_VERSIONS:
        from raftcore.node.transport import CloseConnection

        raise CloseConnection(
            f"API {header.request_api_key} version {header.request_api_version} is not supported"
        )
    body = _api_versions_body(0, node.config.security.uses_sasl)
    body.error_code = Errors.UNSUPPORTED_VERSION
    return encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id, body)


async def handle(node: RaftNode, header: Any, body: Any) -> list[bytes | memoryview] | None:
    key = header.request_api_key
    version = header.request_api_version
    handler = _HANDLERS.get(key)
    if handler is None:
        from raftcore.node.transport import CloseConnection

        raise CloseConnection(f"API {key} is not served here")
    started = time.perf_counter()
    response = handler(node, body, version)
    if asyncio.iscoroutine(response):
        response = await response
    node.metrics.kafka_request(key)(time.perf_counter() - started)
    if response is None:
        return None  # acks=0
    return encode_response(key, version, header.correlation_id, response)


# ---- ApiVersions ---------------------------------------------------------------------------------


_SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


def _api_versions_body(version: int, sasl: bool = False) -> Any:
    """Every API we serve; SaslHandshake and SaslAuthenticate only on a SASL listener."""
    cls = response_spec(ApiKey.API_VERSIONS).cls
    keys = [
        cls.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        if (sasl or k not in _SASL_APIS) and k not in UNADVERTISED
    ]
    return cls(error_code=Errors.NONE, api_keys=keys, throttle_time_ms=0)


def api_versions(node: RaftNode, body: Any, version: int) -> Any:
    return _api_versions_body(version, node.config.security.uses_sasl)


# ---- Metadata ------------------------------------------------------------------------------------


def _brokers(node: RaftNode, cls: Any) -> list[Any]:
    """The voters (from the voter set in force), the leader if it is not one any more (it
    removed itself and has not resigned yet), and this node (an observer answers too)."""
    book = node.address_book
    known = dict(book.voter_endpoints())
    leader = node.leader_and_epoch
    for extra in (leader.leader_id if leader.known else None, node.config.node_id):
        if extra is not None and extra not in known:
            ep = book.endpoint_of(extra)
            if ep is not None:
                known[extra] = ep
    return [
        cls(node_id=i, host=ep.host, port=ep.port, rack=None) for i, ep in sorted(known.items())
    ]


def _asked_for(node: RaftNode, topic: Any, version: int) -> str | None:
    """The name of a topic asked for by name, or from v12 by id with a null name (KIP-516;
    None for an unknown id). Before v12 a null name is an invalid request, as in Kafka."""
    if topic.name is not None:
        return topic.name
    if version < 12:
        from raftcore.node.transport import CloseConnection

        raise CloseConnection(f"Metadata v{version} with a null topic name")
    return node.config.topic if bytes(topic.topic_id) == node.config.topic_id else None


def metadata(node: RaftNode, body: Any, version: int) -> Any:
    cfg = node.config
    cls = response_spec(ApiKey.METADATA).cls
    leader = node.leader_hint  # a resigned leader names nobody: clients ask again
    wanted = None if body.topics is None else [_asked_for(node, t, version) for t in body.topics]
    topics = []
    names = [cfg.topic] if wanted is None else wanted
    for name in names:
        if name != cfg.topic:
            error = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(cls.MetadataResponseTopic(error_code=error, name=name, partitions=[]))
            continue
        voters = sorted(node.address_book.voter_set())
        partition = cls.MetadataResponsePartition(
            error_code=Errors.NONE if leader.known else Errors.LEADER_NOT_AVAILABLE,
            partition_index=0,
            leader_id=leader.leader_id if leader.known else -1,
            leader_epoch=leader.epoch,
            replica_nodes=voters,
            isr_nodes=voters,
            offline_replicas=[],
        )
        topics.append(
            cls.MetadataResponseTopic(
                error_code=Errors.NONE,
                name=cfg.topic,
                topic_id=cfg.topic_id,
                is_internal=False,
                partitions=[partition],
            )
        )
    return cls(
        throttle_time_ms=0,
        brokers=_brokers(node, cls.MetadataResponseBroker),
        cluster_id=cfg.cluster_id,
        controller_id=leader.leader_id if leader.known else -1,
        topics=topics,
    )


# ---- leader hints (KIP-951) --------------------------------------------------------------------


def _current_leader(node: RaftNode, cls: Any) -> Any:
    leader = node.leader_hint
    return cls(leader_id=leader.leader_id if leader.known else -1, leader_epoch=leader.epoch)


def _node_endpoints(node: RaftNode, cls: Any) -> list[Any]:
    return raft_wire.node_endpoints(node, cls, node.leader_hint)


# ---- Produce -------------------------------------------------------------------------------------


async def produce(node: RaftNode, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.PRODUCE).cls
    acks = body.acks
    if body.transactional_id if version >= 3 else None:
        error_for_all = Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT  # transactions are not served
    else:
        error_for_all = None
    results = []
    waits = []
    for topic in body.topic_data:
        partitions = []
        for p in topic.partition_data:
            resp = cls.PartitionProduceResponse(
                index=p.index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
            )
            error, appended = _produce_partition(
                node, topic.name, p, version, error_for_all, track=acks == -1, resp=resp
            )
            resp.error_code = error
            if appended is not None:
                node.metrics.produce_records += appended.last_offset - appended.first_offset + 1
                resp.base_offset = appended.first_offset
                resp.log_start_offset = node.log.log_start_offset if node.log else -1
                if acks == -1:
                    waits.append((resp, appended))
            elif error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH):
                resp.current_leader = _current_leader(node, cls.LeaderIdAndEpoch)
            partitions.append(resp)
        results.append(cls.TopicProduceResponse(name=topic.name, partition_responses=partitions))
    if acks == 0:
        return None
    if waits:
        # acks=all: the core's verdict (raftcore.raft.pending): committed in the epoch that
        # appended the records, or NOT_LEADER_OR_FOLLOWER as soon as that leadership ends.
        timeout = max(body.timeout_ms, 1) / 1000
        try:
            await _wait_verdicts(node, cls, waits, timeout)
        finally:  # a closed connection cancels us: drop the verdicts nobody will read
            for _, appended in waits:
                node.forget(appended)
    response = cls(responses=results, throttle_time_ms=0)
    if any(
        p.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        for t in results
        for p in t.partition_responses
    ):
        response.node_endpoints = _node_endpoints(node, cls.NodeEndpoint)
    return response


async def _wait_verdicts(node: RaftNode, cls: Any, waits: list, timeout: float) -> None:
    """acks=all: the core's verdict on each append (raftcore.raft.pending)."""
    for resp, appended in waits:
        try:
            await node.wait_committed(appended, timeout)
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
            resp.current_leader = _current_leader(node, cls.LeaderIdAndEpoch)


def _produce_partition(
    node: RaftNode,
    topic: str,
    p: Any,
    version: int,
    error_for_all: int | None,
    *,
    track: bool,
    resp: Any,
) -> tuple[int, Appended | None]:
    """(error, the append) of appending one partition's records; with ``track`` the append
    awaits the core's verdict (the caller must wait for it). A refusal of malformed records
    is explained in ``resp`` (Produce v8+ RecordErrors and ErrorMessage, KIP-467)."""
    if error_for_all is not None:
        return error_for_all, None
    if topic != node.config.topic or p.index != 0:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, None
    if version < 3:
        return Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, None  # message formats before v2
    core = node.core
    # First of all, as a Kafka broker refuses a partition it does not lead before validating
    # anything: a leader that takes no appends now (handing over, resigning) refuses every
    # batch alike. Were the producer's sequences checked first, the batch after one refused
    # here would be answered OUT_OF_ORDER_SEQUENCE_NUMBER for a gap of our own making, which
    # librdkafka takes for proof that the batches before it are not in the log: it bumps its
    # epoch and sends them again under new sequences, a duplicate of any of them this leader
    # had appended (fault harness seed 5008).
    if core is None or not core.takes_appends():
        return Errors.NOT_LEADER_OR_FOLLOWER, None
    records = p.records
    if records is None or len(records) == 0:
        return Errors.INVALID_RECORD, None
    # Every record of every batch, before anything is written (Kafka's LogValidator).
    refusal = validate_produced(records, max_batch_bytes=node.config.log.max_message_bytes)
    if refusal is not None:
        logger.info("%s refusing produced records: %s", node.prefix, refusal.reason)
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
        logger.info("%s refusing produced records: %s", node.prefix, scan.error)
        return Errors.CORRUPT_MESSAGE, None
    # Idempotence: retries of a remembered batch get their first offsets back.
    producers = node.producers
    for i in range(scan.count):
        count = int(scan.last_offsets[i] - scan.base_offsets[i]) + 1
        verdict = producers.check(
            int(scan.producer_ids[i]),
            int(scan.producer_epochs[i]),
            int(scan.base_sequences[i]),
            count,
        )
        if isinstance(verdict, Duplicate):
            if scan.count != 1:
                return Errors.DUPLICATE_SEQUENCE_NUMBER, None
            # The batch is in this leader's log; acks=all waits for it as for a new one.
            if track:
                try:
                    return Errors.NONE, node.watch(verdict.first_offset, verdict.last_offset)
                except NotLeaderError:
                    return Errors.NOT_LEADER_OR_FOLLOWER, None
            return Errors.NONE, Appended(verdict.first_offset, verdict.last_offset, core.epoch)
        if verdict != Errors.NONE:
            return verdict, None
    try:
        appended = node.append_batches(records, track=track)
    except NotLeaderError:
        return Errors.NOT_LEADER_OR_FOLLOWER, None
    except (CorruptRecordError, InvalidAppendError) as exc:
        logger.info("%s refusing produced records: %s", node.prefix, exc)
        return Errors.CORRUPT_MESSAGE, None
    # The log told node.producers of the appended batches (raftcore.kafka.producer_tracker).
    return Errors.NONE, appended


# ---- Fetch (consumers) ---------------------------------------------------------------------------


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


async def consumer_fetch(node: RaftNode, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.FETCH).cls
    deadline = time.monotonic() + max(0, body.max_wait_ms) / 1000
    while True:
        response, has_data = _fetch_once(node, body, version, cls)
        remaining = deadline - time.monotonic()
        if has_data or remaining <= 0 or not node.is_leader():
            return response
        await node.wait_high_watermark_change(remaining)


def _fetch_once(node: RaftNode, body: Any, version: int, cls: Any) -> tuple[Any, bool]:
    cfg = node.config
    core = node.core
    log = node.log
    leader = core.is_leader() if core is not None else False
    hw = core.high_watermark if core is not None else None
    has_data = False
    not_leader = False
    budget = min(body.max_bytes, cfg.fetch_max_bytes)
    responses = []
    for topic in body.topics:
        name = topic.topic if version <= 12 else None
        known = (name == cfg.topic) if version <= 12 else (bytes(topic.topic_id) == cfg.topic_id)
        parts = []
        for p in topic.partitions:
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
            if not known or p.partition != 0:
                resp.error_code = (
                    Errors.UNKNOWN_TOPIC_OR_PARTITION if version <= 12 else Errors.UNKNOWN_TOPIC_ID
                )
            elif not leader:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
                resp.current_leader = _current_leader(node, cls.LeaderIdAndEpoch)
                not_leader = True
            elif (
                version >= 9
                and p.current_leader_epoch >= 0
                and p.current_leader_epoch != core.epoch
            ):
                resp.error_code = (
                    Errors.FENCED_LEADER_EPOCH
                    if p.current_leader_epoch < core.epoch
                    else Errors.UNKNOWN_LEADER_EPOCH
                )
                resp.current_leader = _current_leader(node, cls.LeaderIdAndEpoch)
            elif hw is None:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER  # a new leader, not ready yet
                resp.current_leader = _current_leader(node, cls.LeaderIdAndEpoch)
            elif p.fetch_offset < log.log_start_offset or p.fetch_offset > log.end_offset:
                resp.error_code = Errors.OFFSET_OUT_OF_RANGE
            else:
                resp.high_watermark = resp.last_stable_offset = hw
                resp.log_start_offset = log.log_start_offset
                if p.fetch_offset < hw and (budget > 0 or not has_data):
                    # At most the answer's budget (the client's MaxBytes, capped by the node's
                    # fetch.max.bytes, across every partition it lists, however often), and the
                    # partition's; the first batch of the answer comes whole even when it is
                    # larger (KIP-74).
                    # Only sound batches leave (raftcore.raft.damage): the first damaged one
                    # and what follows stay here, and the core hears of it.
                    data, damage = read_intact(
                        log, p.fetch_offset, max(1, min(p.partition_max_bytes, budget)), hw
                    )
                    if damage is not None:
                        node.report_damage(damage, "serving a consumer")
                        if len(data) == 0:
                            resp.error_code = Errors.KAFKA_STORAGE_ERROR
                    # the log reads a first batch whole: only the answer's first may overrun
                    end = _committed_end(data, hw, budget if has_data else None)
                    resp.records = data[:end]  # a view of the log, sent uncopied
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
    if not_leader and version >= 16:
        response.node_endpoints = _node_endpoints(node, cls.NodeEndpoint)
    # A partition with an error answers the fetch at once, as in Kafka: nothing to wait for
    # (but a new leader that does not know its high watermark yet makes the fetch wait).
    failed = hw is not None and any(p.error_code for t in responses for p in t.partitions)
    return response, has_data or not_leader or failed


# ---- ListOffsets -------------------------------------------------------------------------------


def list_offsets(node: RaftNode, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.LIST_OFFSETS).cls
    cfg = node.config
    core = node.core
    log = node.log
    topics = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            resp = cls.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
            )
            if topic.name != cfg.topic or p.partition_index != 0:
                resp.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif core is None or not core.is_leader() or core.high_watermark is None:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            elif p.timestamp == EARLIEST_TIMESTAMP:
                resp.offset = log.log_start_offset
                resp.leader_epoch = max(log.epoch_for_offset(resp.offset), 0)
            elif p.timestamp == LATEST_TIMESTAMP:
                resp.offset = core.high_watermark
                resp.leader_epoch = core.epoch
            elif p.timestamp >= 0:
                resp.offset, resp.timestamp = _offset_for_time(node, p.timestamp)
            else:
                resp.error_code = Errors.INVALID_REQUEST
            parts.append(resp)
        topics.append(cls.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)


def _offset_for_time(node: RaftNode, timestamp: int) -> tuple[int, int]:
    """The first committed offset whose batch has a record at or after ``timestamp``."""
    log = node.log
    hw = node.high_watermark or 0
    for batch in log.batches():
        if batch.base_offset >= hw:
            break
        if batch.max_timestamp >= timestamp and not batch.is_control:
            for record in batch.records():
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
    return -1, -1


_HANDLERS = {
    ApiKey.API_VERSIONS: api_versions,
    ApiKey.DELETE_RECORDS: delete_records,
    ApiKey.METADATA: metadata,
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: consumer_fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.DESCRIBE_QUORUM: describe_quorum,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers,
}
