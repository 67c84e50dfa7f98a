"""The partitions of topics and the committed range of each (log start and high watermark),
asked of the whole cluster at once: one Metadata request, then one ListOffsets request per
leader node and kind of offset, carrying every partition that node leads. What a reader of
many partitions plans with (:mod:`raftcore.spark.remote`), without a client per partition.

A partition whose leader moved, or is not ready yet, is asked again after a metadata refresh,
with backoff, until the deadline; a topic or partition that does not exist is an error at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from raftcore.client.cluster import (
    METADATA_VERSION,
    ClusterClient,
    NoLeaderError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raftcore.client.connection import ConnectionClosed
from raftcore.client.consumer import EARLIEST, LATEST, LEADER_ERRORS, LIST_OFFSETS_VERSION
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.topic_partition import TopicPartition

__all__ = ["CommittedRange", "committed_ranges", "topic_partitions"]


@dataclass(frozen=True, slots=True)
class CommittedRange:
    log_start: int
    high_watermark: int


async def topic_partitions(
    cluster: ClusterClient, topics: Collection[str] | None
) -> dict[TopicPartition, int]:
    """Every partition of ``topics`` (None: of every topic) and its leader's id (-1: none
    known), from one node's Metadata; the cluster's node endpoints are updated from the same
    answer."""
    cls = request_spec(ApiKey.METADATA).cls
    named = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
    body = cls(topics=named, allow_auto_topic_creation=False)
    endpoints = list(dict.fromkeys([*cluster.nodes.values(), *cluster.bootstrap]))
    failure: BaseException | None = None
    for endpoint in endpoints:
        try:
            resp = await cluster.request(endpoint, ApiKey.METADATA, METADATA_VERSION, body)
        except (ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
            failure = exc
            continue
        nodes = {b.node_id: Endpoint(b.host, b.port) for b in resp.brokers}
        if nodes:
            cluster.nodes = nodes
        found: dict[TopicPartition, int] = {}
        for topic in resp.topics:
            if topic.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(f"topic {topic.name!r} does not exist at {endpoint}")
            if topic.error_code != Errors.NONE:
                raise RaftcoreError(f"topic {topic.name}: error {error_name(topic.error_code)}")
            for p in topic.partitions:
                found[TopicPartition(topic.name, p.partition_index)] = p.leader_id
        return found
    raise NoLeaderError(
        f"no node of {', '.join(map(str, endpoints))} answered Metadata ({failure})"
    )


async def committed_ranges(
    cluster: ClusterClient,
    partitions: Mapping[str, Collection[int] | None],
    timeout_s: float,
) -> dict[TopicPartition, CommittedRange]:
    """The log start and high watermark of each partition asked for: ``{topic: [0, 2]}``, or
    ``{topic: None}`` for every partition of the topic. Raises UnknownTopicError and
    UnknownPartitionError at once, NoLeaderError when some partition had no leader that
    answered within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    answered: dict[TopicPartition, dict[int, int]] = {}
    attempt = 0
    while True:
        leaders = await topic_partitions(cluster, list(partitions))
        wanted = _wanted(partitions, leaders)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            if len(answered.get(tp, {})) < 2 and leaders[tp] in cluster.nodes:
                by_leader.setdefault(leaders[tp], []).append(tp)
        asks = [
            _list_offsets(cluster, cluster.nodes[leader], tps, timestamp)
            for leader, tps in by_leader.items()
            for timestamp in (EARLIEST, LATEST)
        ]
        for timestamp, offsets in await asyncio.gather(*asks):
            for tp, offset in offsets.items():
                answered.setdefault(tp, {})[timestamp] = offset
        missing = [tp for tp in wanted if len(answered.get(tp, {})) < 2]
        if not missing:
            return {
                tp: CommittedRange(answered[tp][EARLIEST], answered[tp][LATEST]) for tp in wanted
            }
        attempt += 1
        if time.monotonic() + cluster.backoff_s(attempt) >= deadline:
            named = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise NoLeaderError(
                f"no leader answered ListOffsets for {len(missing)} partition(s) ({named}) "
                f"within {timeout_s:g} s"
            )
        await asyncio.sleep(cluster.backoff_s(attempt))


def _wanted(
    partitions: Mapping[str, Collection[int] | None], leaders: Mapping[TopicPartition, int]
) -> list[TopicPartition]:
    wanted: list[TopicPartition] = []
    for topic, indexes in partitions.items():
        known = sorted(tp.partition for tp in leaders if tp.topic == topic)
        for index in known if indexes is None else sorted(indexes):
            if index not in known:
                span = "0" if len(known) == 1 else f"0..{max(known)}"
                raise UnknownPartitionError(
                    f"topic {topic} has {len(known)} partition(s) ({span}); no partition {index}"
                )
            wanted.append(TopicPartition(topic, index))
    return wanted


async def _list_offsets(
    cluster: ClusterClient, endpoint: Endpoint, tps: list[TopicPartition], timestamp: int
) -> tuple[int, dict[TopicPartition, int]]:
    """``timestamp`` and the offsets the node at ``endpoint`` answered for ``tps``; a
    partition it no longer leads (or a lost connection) is left out, for the caller to ask
    again; any other error raises."""
    cls = request_spec(ApiKey.LIST_OFFSETS).cls
    by_topic: dict[str, list[Any]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(
            cls.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=-1, timestamp=timestamp
            )
        )
    body = cls(
        replica_id=-1,
        isolation_level=1,  # READ_COMMITTED: raftcore serves committed records only anyway
        topics=[cls.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    try:
        resp = await cluster.request(endpoint, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
    except (ConnectionClosed, OSError, asyncio.TimeoutError):
        return timestamp, {}
    found: dict[TopicPartition, int] = {}
    for topic in resp.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.error_code == Errors.NONE:
                found[tp] = int(p.offset)
            elif p.error_code not in LEADER_ERRORS:
                raise RaftcoreError(
                    f"ListOffsets of {tp} at {endpoint}: {error_name(p.error_code)}"
                )
    return timestamp, found
