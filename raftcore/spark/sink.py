"""``df.write.format("raftcore")`` and ``df.writeStream.format("raftcore")``: rows appended to a
raftcore log, each row committed exactly once, also when Spark retries or duplicates a task.

    df.select("key", "value").write.format("raftcore") \\
        .option("bootstrap", "host:9091").mode("append").save()

Columns: ``value`` (binary or string, null allowed), and optionally ``key`` (binary or string)
and ``headers`` (array of struct<key: string, value: binary or string>), as Kafka's sink
takes them; other columns are ignored (a DataFrame read from raftcore can be written back).

**Exactly once.** Each task writes its partition with :func:`raftcore.client.resumable.
write_exactly_once`, under a name every attempt of that task computes alike: the write's id
(chosen on the driver, or the ``writeId`` option), and the partition id; for a stream, the
query id (kept in the checkpoint across restarts) and the micro-batch id. A retried,
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
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

from raftcore.spark.options import SparkSourceError, WriteOptions

__all__ = ["RaftcoreStreamWriter", "RaftcoreWriter", "SinkCommit", "check_sink_schema"]

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
    the offsets of the batches it had acknowledged."""

    partition: int
    rows: int
    rows_found: int
    first_offset: int
    last_offset: int


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

    from raftcore.client.resumable import write_exactly_once

    result = asyncio.run(
        write_exactly_once(
            opts.bootstrap_strings,
            name,
            _batches(iterator, opts.batch_records, opts.batch_bytes),
            topic=opts.topic,
            window=opts.in_flight,
            compression=opts.compression,
            request_timeout_ms=opts.request_timeout_ms,
            delivery_timeout_ms=opts.delivery_timeout_ms,
            security=opts.security,
        )
    )
    return SinkCommit(
        partition=TaskContext.get().partitionId(),
        rows=result.rows,
        rows_found=result.rows_found,
        first_offset=result.first_offset,
        last_offset=result.last_offset,
    )


def _batches(arrow_batches: Iterator[Any], max_rows: int, max_bytes: int) -> Iterator[list[Any]]:
    """Records cut into batches of ``max_rows`` rows or about ``max_bytes`` bytes, whichever
    comes first: the same cut for the same rows, however Spark sized its Arrow batches."""
    batch: list[Any] = []
    size = 0
    for rb in arrow_batches:
        for record in _records(rb):
            batch.append(record)
            size += len(record[1] or b"") + len(record[0] or b"") + 16
            if len(batch) >= max_rows or size >= max_bytes:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _records(rb: Any) -> Iterator[tuple[Any, ...]]:
    names = rb.schema.names
    n = rb.num_rows
    values = [_as_bytes(v) for v in rb.column(names.index("value")).to_pylist()]
    keys = (
        [_as_bytes(k) for k in rb.column(names.index("key")).to_pylist()]
        if "key" in names
        else [None] * n
    )
    if "headers" not in names:
        yield from zip(keys, values, strict=True)
        return
    for k, v, hs in zip(keys, values, rb.column(names.index("headers")).to_pylist(), strict=True):
        yield k, v, [(h["key"], _as_bytes(h["value"])) for h in hs or ()]


def _as_bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v
