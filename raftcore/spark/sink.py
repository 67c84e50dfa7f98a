"""``df.write.format("raftcore")`` and ``df.writeStream.format("raftcore")``: rows appended to a
raftcore log, each row committed exactly once, also when Spark retries or duplicates a task.

    df.select("key", "value").write.format("raftcore") \\
        .option("bootstrap", "host:9091").mode("append").save()

Columns: ``value`` (binary or string, null allowed), and optionally ``key`` (binary or string),
``headers`` (array of struct<key: string, value: binary or string>) and ``partition`` (int), as
Spark's Kafka sink takes them; other columns are ignored (a DataFrame read from raftcore can be
written back; its ``topic`` column too: the ``topic`` option names the topic written).

**Partitions.** A row goes to its ``partition`` column, or else by its key with Kafka's
default partitioner (murmur2, as Java's and librdkafka's producers place keyed records); rows
without either go to one partition per Spark task (:mod:`raftcore.spark.routing`).

**Exactly once.** Each task writes the rows of each partition with
:func:`raftcore.client.resumable.write_exactly_once`, under a name every attempt of that task
computes alike: the write's id (chosen on the driver, or the ``writeId`` option), the Spark
partition id and the topic's partition; for a stream, the query id (kept in the checkpoint
across restarts) and the micro-batch id instead of the write's id. A retried,
speculative or restarted task asks the leader how far its predecessor got and writes only the
rest; the task reports success only once all its rows are committed. Spark recomputes a
partition from the same input in the same order -- the sink relies on that (a partition whose
rows change between attempts is refused, not written twice).

**What a failed job leaves.** There are no transactions: rows committed by the tasks that
finished stay in the log when the job fails. Running the job again with the same ``writeId``
(and the same input) completes it without writing those rows again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from raftcore.spark.options import SparkSourceError, WriteOptions

if TYPE_CHECKING:
    from raftcore.client.resumable import WriteResult

__all__ = [
    "RaftcoreStreamWriter",
    "RaftcoreWriter",
    "SinkCommit",
    "check_sink_schema",
    "partition_count",
]

logger = logging.getLogger(__name__)

_BYTES = (BinaryType, StringType)


def check_sink_schema(schema: StructType, overwrite: bool) -> None:
    """Refuse, on the driver, what the sink cannot write: naming the column and the fix."""
    if overwrite:
        raise SparkSourceError(
            "a raftcore log is append-only: use .mode('append') (overwrite is not possible)"
        )
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SparkSourceError(
            f"the raftcore sink needs a 'value' column (binary or string); got columns "
            f"{list(fields)}"
        )
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], _BYTES):
            raise SparkSourceError(
                f"column {name!r} must be binary or string, not {fields[name].simpleString()}: "
                f"cast it (e.g. col('{name}').cast('string'))"
            )
    if "partition" in fields and not isinstance(
        fields["partition"], (IntegerType, LongType, ShortType, ByteType)
    ):
        raise SparkSourceError(
            f"column 'partition' must be an integer, not {fields['partition'].simpleString()}"
        )
    headers = fields.get("headers")
    if headers is not None and not (
        isinstance(headers, ArrayType)
        and isinstance(headers.elementType, StructType)
        and {f.name: f.dataType for f in headers.elementType.fields}.keys() == {"key", "value"}
        and isinstance(headers.elementType["key"].dataType, StringType)
        and isinstance(headers.elementType["value"].dataType, _BYTES)
    ):
        raise SparkSourceError(
            "column 'headers' must be array<struct<key: string, value: binary or string>>, "
            f"not {headers.simpleString()}"
        )


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: its rows, how many an earlier attempt had written already, and
    per partition of the topic the offsets of the batches it had acknowledged."""

    partition: int  # the Spark partition (task)
    rows: int
    rows_found: int
    offsets: dict[int, tuple[int, int]]  # topic partition: (first offset, last offset)


class RaftcoreWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex  # chosen once, on the driver

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        return _write_partition(self.opts, f"raftcore-sink/{self.write_id}/{partition}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commits(f"write {self.write_id}", messages)


class RaftcoreStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.fallback_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        # The query id survives restarts from the checkpoint; a micro-batch run again after a
        # restart has the same id and the same input offsets.
        query = self.opts.write_id or ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise SparkSourceError(
                "the raftcore stream sink found no streaming query id or batch id in the task"
            )
        name = f"raftcore-sink/{query}/{batch}/{ctx.partitionId()}"
        return _write_partition(self.opts, name, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commits(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logger.warning("raftcore sink: micro-batch %d aborted; Spark runs it again", batchId)


def _log_commits(what: str, messages: list[WriterCommitMessage | None]) -> None:
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    logger.info(
        "raftcore sink: %s committed %d rows in %d tasks (%d found written by earlier attempts)",
        what,
        sum(m.rows for m in commits),
        len(commits),
        sum(m.rows_found for m in commits),
    )


def _write_partition(opts: WriteOptions, name: str, iterator: Iterator[Any]) -> SinkCommit:
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    results = asyncio.run(_write_routed(opts, name, task, iterator))
    return SinkCommit(
        partition=task,
        rows=sum(r.rows for r in results.values()),
        rows_found=sum(r.rows_found for r in results.values()),
        offsets={p: (r.first_offset, r.last_offset) for p, r in results.items()},
    )


async def partition_count(opts: WriteOptions) -> int:
    """How many partitions the topic has (Metadata)."""
    from raftcore.client.cluster import ClusterClient, UnknownTopicError
    from raftcore.client.offsets import topic_partitions

    cluster = ClusterClient(
        list(opts.bootstrap),
        topic=opts.topic,
        request_timeout_ms=opts.request_timeout_ms,
        security=opts.security,
    )
    try:
        await cluster.start()  # a missing topic fails here, naming the topics there are
        count = len(await topic_partitions(cluster, [opts.topic]))
    except UnknownTopicError as exc:
        raise SparkSourceError(f"the raftcore sink: {exc}") from None
    finally:
        await cluster.close()
    if count < 1:
        raise SparkSourceError(f"the raftcore sink: topic {opts.topic} has no partitions")
    return count


async def _write_routed(
    opts: WriteOptions, name: str, task: int, iterator: Iterator[Any]
) -> dict[int, WriteResult]:
    """The rows of one task, each partition's share written exactly once by a writer of its
    own, all at once; returns once every partition's rows are committed."""
    from raftcore.client.resumable import write_exactly_once
    from raftcore.spark.routing import Router

    writers: dict[int, asyncio.Future[WriteResult]] = {}

    def start(partition: int) -> None:
        writers[partition] = asyncio.ensure_future(
            write_exactly_once(
                opts.bootstrap_strings,
                f"{name}/partition-{partition}",
                router.batches(partition),
                topic=opts.topic,
                partition=partition,
                window=opts.in_flight,
                compression=opts.compression,
                request_timeout_ms=opts.request_timeout_ms,
                delivery_timeout_ms=opts.delivery_timeout_ms,
                security=opts.security,
            )
        )

    router = Router(
        iterator,
        await partition_count(opts),
        task=task,
        max_rows=opts.batch_records,
        max_bytes=opts.batch_bytes,
        on_new=start,
        topic=opts.topic,
    )
    router.read_until_routed()  # the first rows: their partitions' writers start
    results: dict[int, WriteResult] = {}
    try:
        while len(results) < len(writers):  # writers start while others pull the input
            running = [w for p, w in writers.items() if p not in results]
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for p, w in list(writers.items()):
                if p not in results and w.done():
                    results[p] = w.result()
    finally:
        for w in writers.values():
            w.cancel()
        await asyncio.gather(*writers.values(), return_exceptions=True)
    return results
