"""Write a sequence of batches exactly once, even when the process writing it dies and another
writes it again (a retried or speculative Spark task, :mod:`raftcore.spark.sink`).

**The identity survives the writer.** The writer is given a ``name`` (unique to the data it
writes: the write job, the Spark partition and the topic's partition it writes to), and writes
one partition of a topic (producer state is kept per partition, as Kafka keeps it). Its
producer id is derived from the name (:func:`raftcore.kafka.producer_ids.derived_producer_id`),
epoch 0, and batch *i* starts at the sequence number equal to the rows before it. Every
attempt that writes the same rows in the same batches therefore sends byte-for-byte the same
idempotent batches, and the leader's producer table says how far its log has them:
DescribeProducers gives the last sequence.

**Resuming.** Say the leader's log holds this producer's rows up to sequence ``last``. A batch
wholly below ``last`` is skipped: it is in the leader's log. The batch ending at ``last`` is
sent again: the leader recognises it (one of the sixteen it remembers) and answers, with acks=all,
only once it is committed -- and with it everything before it in the log. Later batches are
sent as new. A batch that straddles ``last`` means the rows differ from the earlier attempt's:
the writer stops with :class:`ExactlyOnceError` rather than guess.

**Two attempts at once** (speculation, or a task presumed dead) share the id: whichever
sends a batch first writes it, the other's copy is answered as a duplicate, or, when it fell
more than sixteen batches behind, refused as out of order -- then it asks DescribeProducers again
and skips ahead. Nothing is written twice either way.

**What it needs.** The rows and their batching must be the same in every attempt (a Spark
partition recomputed from the same input, in the same order), and the leader must still know
the producer: raftcore keeps producer state for good (no expiration), but a replica that
installed a snapshot covering the producer's batches does not (KIP-630 snapshots carry no
producer state); such a loss is detected when this writer had been told of a later sequence,
not across attempts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.connection import ConnectionClosed
from raftcore.client.producer import ProduceError, Producer
from raftcore.error_codes import Errors, error_name
from raftcore.errors import RaftcoreError
from raftcore.kafka.producer_ids import derived_producer_id
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.security.config import ClientSecurity

__all__ = ["ExactlyOnceError", "WriteResult", "last_sequence", "write_exactly_once"]

logger = logging.getLogger(__name__)

MAX_ROWS = 0x7FFFFFFF  # one producer's sequence space, without wrapping
DESCRIBE_PRODUCERS_VERSION = 0


class ExactlyOnceError(RaftcoreError):
    """The rows cannot be written exactly once: they differ from an earlier attempt's, or the
    leader lost the producer's state."""


@dataclass
class WriteResult:
    producer_id: int
    rows: int = 0  # every row of the input
    batches: int = 0
    rows_sent: int = 0  # rows this writer sent (a resent last batch included)
    rows_found: int = 0  # rows an earlier attempt had written, not sent again
    resyncs: int = 0  # DescribeProducers asked again after an out-of-order refusal
    first_offset: int = -1  # offsets of the batches this writer had acknowledged
    last_offset: int = -1


@dataclass
class _Batch:
    first: int  # sequence of the first row
    records: Sequence[Any]
    future: asyncio.Future[tuple[int, int]] | None = field(default=None, repr=False)

    @property
    def last(self) -> int:
        return self.first + len(self.records) - 1


async def last_sequence(
    cluster: ClusterClient, topic: str, producer_id: int, timeout_s: float
) -> int:
    """The last sequence number the log of ``cluster``'s partition of ``topic`` holds for
    ``producer_id`` (-1: none), as its leader says."""
    cls = request_spec(ApiKey.DESCRIBE_PRODUCERS).cls
    body = cls(topics=[cls.TopicRequest(name=topic, partition_indexes=[cluster.partition])])
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        error = Errors.NETWORK_EXCEPTION
        try:
            conn, _ = await cluster.leader_connection()
            resp = await conn.request(
                ApiKey.DESCRIBE_PRODUCERS,
                DESCRIBE_PRODUCERS_VERSION,
                body,
                timeout_s=min(cluster.request_timeout_s, max(0.1, deadline - time.monotonic())),
            )
            part = resp.topics[0].partitions[0]
            error = part.error_code
            if error == Errors.NONE:
                for p in part.active_producers:
                    if p.producer_id == producer_id:
                        return int(p.last_sequence)
                return -1
            if error not in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE):
                raise ExactlyOnceError(f"DescribeProducers: {error_name(error)}")
        except (NoLeaderError, ConnectionClosed, OSError, asyncio.TimeoutError) as exc:
            logger.debug("DescribeProducers failed: %s", exc)
        attempt += 1
        if time.monotonic() > deadline:
            raise ExactlyOnceError(
                f"no leader answered DescribeProducers in {timeout_s:g} s ({error_name(error)})"
            )
        cluster.request_refresh()
        await asyncio.sleep(cluster.backoff_s(attempt))


async def write_exactly_once(
    bootstrap: list[str],
    name: str,
    batches: Iterable[Sequence[Any]],
    *,
    topic: str = "raftcore",
    partition: int = 0,
    window: int = 10,
    compression: str = "none",
    request_timeout_ms: int = 30_000,
    delivery_timeout_ms: int = 120_000,
    max_resyncs: int = 20,
    security: ClientSecurity | None = None,
) -> WriteResult:
    """Write ``batches`` (each a sequence of (key, value[, headers]) records) under ``name`` to
    ``topic`` ``partition``, each record once in its log however many attempts write them;
    returns once every batch is committed. Raises ProduceError for a refusal (a record too
    large...), ExactlyOnceError when the rows differ from an earlier attempt's."""
    writer = _Writer(
        bootstrap, name, topic=topic, partition=partition, window=window, compression=compression
    )
    writer.request_timeout_ms = request_timeout_ms
    writer.delivery_timeout_ms = delivery_timeout_ms
    writer.max_resyncs = max_resyncs
    writer.security = security
    return await writer.run(iter(batches))


class _Writer:
    def __init__(
        self,
        bootstrap: list[str],
        name: str,
        *,
        topic: str,
        partition: int = 0,
        window: int,
        compression: str,
    ) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.topic = topic
        self.partition = partition
        self.window = max(1, window)
        self.compression = compression
        self.request_timeout_ms = 30_000
        self.delivery_timeout_ms = 120_000
        self.max_resyncs = 20
        self.security: ClientSecurity | None = None  # TLS (SASL) to the cluster
        self.result = WriteResult(derived_producer_id(name))
        self.pending: deque[_Batch] = deque()  # in sequence order: to send, or unanswered
        self.written = 0  # rows of this producer in the leader's log (its last sequence + 1)
        self.acked = 0  # rows up to which this writer was told "committed"
        self.producer: Producer | None = None

    async def run(self, batches: Iterable[Sequence[Any]]) -> WriteResult:
        cluster = ClusterClient(
            self.bootstrap,
            topic=self.topic,
            partition=self.partition,
            request_timeout_ms=self.request_timeout_ms,
            security=self.security,
        )
        await cluster.start()
        try:
            await self._resync(cluster)
            it = iter(batches)
            exhausted = False
            while True:
                while not exhausted and len(self.pending) < self.window:
                    records = next(it, None)
                    if records is None:
                        exhausted = True
                    else:
                        self._admit(_Batch(self.result.rows, records))
                if not self.pending:
                    break
                await self._send_pending()
                try:
                    offsets = await self._oldest()
                except ProduceError as exc:
                    if exc.error_code != Errors.OUT_OF_ORDER_SEQUENCE_NUMBER:
                        raise
                    await self._close_producer()
                    await self._resync(cluster)
                    self._refilter()
                    continue
                self._acknowledge(self.pending.popleft(), offsets)
            if self.written > self.result.rows:
                raise ExactlyOnceError(
                    f"{self.name}: the leader holds {self.written} rows of producer "
                    f"{self.result.producer_id}, this writer only {self.result.rows}: the rows "
                    "differ from an earlier attempt's"
                )
            return self.result
        finally:
            await self._close_producer()
            await cluster.close()

    def _admit(self, batch: _Batch) -> None:
        """Count ``batch`` and keep it to send, unless the leader's log has it already."""
        if not batch.records:
            raise ValueError(f"{self.name}: an empty batch")
        self.result.rows += len(batch.records)
        self.result.batches += 1
        if self.result.rows > MAX_ROWS:
            raise ExactlyOnceError(f"{self.name}: more than {MAX_ROWS} rows for one producer")
        if self._keep(batch):
            self.pending.append(batch)
        else:
            self.result.rows_found += len(batch.records)

    def _keep(self, batch: _Batch) -> bool:
        """False for a batch below the leader's last one (in its log, committed once that one
        is); raises for a batch that straddles the leader's last sequence."""
        last = self.written - 1
        if batch.last < last:
            return False
        if batch.first <= last < batch.last:
            raise ExactlyOnceError(
                f"{self.name}: the leader's last sequence {last} for producer "
                f"{self.result.producer_id} falls inside the batch {batch.first}..{batch.last}: "
                "the rows or their batching differ from an earlier attempt's"
            )
        return True

    def _refilter(self) -> None:
        kept = deque()
        for b in self.pending:
            b.future = None
            if self._keep(b):
                kept.append(b)
            else:
                self.result.rows_found += len(b.records)
        self.pending = kept

    async def _resync(self, cluster: ClusterClient) -> None:
        last = await last_sequence(
            cluster, self.topic, self.result.producer_id, self.delivery_timeout_ms / 1000
        )
        if last + 1 < self.acked:
            raise ExactlyOnceError(
                f"{self.name}: the leader's log holds producer {self.result.producer_id} only "
                f"up to sequence {last}, though sequence {self.acked - 1} was committed: it lost "
                "the producer's state (installed from a snapshot?); writing on could write rows "
                "twice"
            )
        if self.written:
            self.result.resyncs += 1
            if self.result.resyncs > self.max_resyncs:
                raise ExactlyOnceError(f"{self.name}: {self.max_resyncs} resyncs, giving up")
        self.written = last + 1

    async def _send_pending(self) -> None:
        unsent = [b for b in self.pending if b.future is None]
        if not unsent:
            return
        if self.producer is None:
            self.producer = Producer(
                self.bootstrap,
                topic=self.topic,
                partition=self.partition,
                compression=self.compression,
                request_timeout_ms=self.request_timeout_ms,
                delivery_timeout_ms=self.delivery_timeout_ms,
                identity=(self.result.producer_id, 0, unsent[0].first),
                client_id="raftcore-exactly-once",
                security=self.security,
            )
            await self.producer.start()
        for b in unsent:
            b.future = self.producer.send_nowait(b.records)
            self.result.rows_sent += len(b.records)

    async def _oldest(self) -> tuple[int, int]:
        future = self.pending[0].future
        assert future is not None
        return await future

    def _acknowledge(self, batch: _Batch, offsets: tuple[int, int]) -> None:
        self.acked = batch.last + 1
        self.written = max(self.written, self.acked)
        if self.result.first_offset < 0:
            self.result.first_offset = offsets[0]
        self.result.last_offset = offsets[1]

    async def _close_producer(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            await producer.close()
        for b in self.pending:
            if b.future is not None and not b.future.done():
                b.future.cancel()
