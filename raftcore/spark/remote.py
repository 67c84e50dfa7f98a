"""The bootstrap mode: a running cluster, over the network, with raftcore's consumer.

The driver asks for the partitions of the topics read (Metadata) and each one's log start and
high watermark (ListOffsets -2 and -1, one request per leader node,
:mod:`raftcore.client.offsets`). Each executor task opens its own connections and fetches its
range of its partition with the consumer protocol. A raftcore node serves consumers from the
leader only, and committed records only (up to the high watermark it reports); the consumer
follows a leader change as KIP-951 says.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

from raftcore.client import Consumer
from raftcore.client.cluster import (
    ClusterClient,
    NoLeaderError,
    UnknownTopicError,
    UnreachableError,
)
from raftcore.client.connection import ConnectionClosed
from raftcore.client.consumer import EARLIEST, LATEST, ConsumeError
from raftcore.client.offsets import CommittedRange, topic_partitions
from raftcore.client.offsets import committed_ranges as committed_ranges_of
from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.spark.options import ReadOptions, SparkSourceError
from raftcore.topic_partition import TopicPartition

__all__ = ["committed_range", "committed_ranges", "fetch_range"]


def _consumer(
    opts: ReadOptions,
    start: int | str = "earliest",
    max_wait_ms: int = 100,
    topic: str | None = None,
    partition: int = 0,
) -> Consumer:
    return Consumer(
        opts.bootstrap_strings,
        topic=opts.topic if topic is None else topic,
        partition=partition,
        start=start,
        max_wait_ms=max_wait_ms,
        max_bytes=opts.fetch_max_bytes,
        request_timeout_ms=opts.request_timeout_ms,
        client_id="raftcore-spark",
        security=opts.security,
    )


async def _committed_range(opts: ReadOptions) -> tuple[int, int]:
    consumer = _consumer(opts)
    try:
        # each retried (leader changes, a new leader not ready) for up to the request timeout
        await consumer.cluster.start(opts.request_timeout_ms / 1000)
        start = await consumer.list_offset(EARLIEST)
        return start, await consumer.list_offset(LATEST)
    finally:
        await consumer.close()


async def _committed_ranges(opts: ReadOptions) -> dict[TopicPartition, CommittedRange]:
    cluster = ClusterClient(
        list(opts.bootstrap),
        topic=opts.topic,
        client_id="raftcore-spark",
        request_timeout_ms=opts.request_timeout_ms,
        security=opts.security,
    )
    try:
        wanted: dict[str, tuple[int, ...] | None] = opts.wanted()
        if opts.subscribe_pattern is not None:
            pattern = re.compile(opts.subscribe_pattern)
            every = await topic_partitions(cluster, None)
            wanted = {tp.topic: None for tp in every if pattern.fullmatch(tp.topic)}
            if not wanted:
                raise SparkSourceError(
                    f"no topic of the cluster at {','.join(opts.bootstrap_strings)} matches "
                    f"subscribePattern {opts.subscribe_pattern!r}"
                )
        return await committed_ranges_of(cluster, wanted, opts.request_timeout_ms / 1000)
    finally:
        await cluster.close()


def committed_ranges(opts: ReadOptions) -> dict[TopicPartition, CommittedRange]:
    """Every partition the options read (subscribe, subscribePattern or assign) and its
    ``(log start, high watermark)`` as its leader reports them."""
    try:
        return asyncio.run(_committed_ranges(opts))
    except UnknownTopicError as exc:
        raise SparkSourceError(f"raftcore cluster: {exc}") from exc
    except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError, RaftcoreError) as exc:
        raise SparkSourceError(
            f"raftcore cluster at {','.join(opts.bootstrap_strings)}: no answer with the "
            f"committed ranges within {opts.request_timeout_ms} ms ({exc})"
        ) from exc


def committed_range(opts: ReadOptions) -> tuple[int, int]:
    """``(log start, high watermark)`` of partition 0 of the topic as the leader reports them.

    No ListOffsets by timestamp here: a raftcore leader answers it by walking its log batch
    by batch in Python on its event loop, which on a long log would stall the leader's
    heartbeats; timestamp filters are applied on the executors instead."""
    try:
        return asyncio.run(_committed_range(opts))
    except UnreachableError as exc:  # every address refused: said at once, not at the timeout
        raise SparkSourceError(f"raftcore cluster: {exc}") from exc
    except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
        raise SparkSourceError(
            f"raftcore cluster at {','.join(opts.bootstrap_strings)}: no answer with the "
            f"committed range within {opts.request_timeout_ms} ms ({exc})"
        ) from exc


def fetch_range(
    opts: ReadOptions, start: int, end: int, topic: str | None = None, partition: int = 0
) -> Iterator[Any]:
    """Buffers of whole record batches that cover the committed offsets ``[start, end)`` of
    ``topic`` (default: the first the options name) ``partition`` (the
    first may begin before ``start``, the last may end after ``end``; control batches
    included). Runs its own event loop, so it works in any executor thread."""
    if end <= start:
        return
    loop = asyncio.new_event_loop()
    consumer = _consumer(opts, start, topic=topic, partition=partition)
    where = f"{consumer.topic}-{partition}"
    timeout_s = opts.request_timeout_ms / 1000
    try:
        loop.run_until_complete(consumer.cluster.start(timeout_s))
        progress_at = time.monotonic()
        while consumer.position is not None and consumer.position < end:
            try:
                position, data = loop.run_until_complete(consumer.poll_raw())
            except ConsumeError as exc:
                if exc.error_code == Errors.OFFSET_OUT_OF_RANGE:
                    raise SparkSourceError(
                        f"offsets {consumer.position}..{end - 1} of {where} are no longer in "
                        f"the log of {','.join(opts.bootstrap_strings)} (its log start moved "
                        "past them after the read was planned: a snapshot or DeleteRecords)"
                    ) from exc
                raise
            if data:
                progress_at = time.monotonic()
                yield data
            elif time.monotonic() - progress_at > timeout_s:
                raise SparkSourceError(
                    f"no records from offset {position} of {where} (reading "
                    f"{start}..{end - 1}) for "
                    f"{timeout_s:g} s; the cluster's high watermark is "
                    f"{consumer.high_watermark}"
                )
    finally:
        loop.run_until_complete(consumer.close())
        loop.close()
