"""``spark.read.format("raftcore")``: committed records of a raftcore log as a DataFrame, with
PySpark 4's Python Data Source API.

    raftcore.spark.register(spark)
    df = spark.read.format("raftcore").option("bootstrap", "host:9091").load()   # a cluster
    df = spark.read.format("raftcore").option("endOffset", hw).load("/data/node-1")  # files

Planning (``partitions()``) runs on the driver: the committed range of every partition read
(each leader's log start and high watermark, or the files'), between startingOffsets and
endingOffsets, narrowed by pushed-down filters, cut into ranges of ``partitionRecords``
offsets: every partition gets at least one Spark task, and they run in parallel. ``read()``
runs on the executors: it opens its own connection (or the files), decodes with
:func:`raftcore.records.iter_arrow` and yields Arrow batches, trimmed to its range, with the
``topic`` and ``partition`` of its range. Readers hold options and numbers only, so they
pickle.

Filter pushdown (Spark 4.1+) needs ``spark.sql.python.filterPushdown.enabled=true``. Spark then
plans in a worker that calls ``pushFilters``; with it off, Spark refuses any reader that
overrides ``pushFilters`` (DATA_SOURCE_PUSHDOWN_DISABLED). So :meth:`RaftcoreDataSource.reader`
hands out the pushdown reader only when Spark's pushdown worker is the caller, and the plain
one otherwise: planning works with the setting on or off.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from raftcore.spark.options import (
    EARLIEST,
    LATEST,
    ReadOptions,
    SparkSourceError,
    plainly,
    resolve_offset,
)
from raftcore.spark.planning import NO_BOUNDS, Bounds, OffsetRange, plan_ranges, push_filters, trim

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter  # PySpark 4.1+

    from raftcore.client.offsets import CommittedRange

__all__ = ["SCHEMA", "RaftcoreDataSource", "RaftcoreReader", "read_span", "register"]

# raftcore.columnar.arrow_schema() as Spark types (Arrow's types are Spark's defaults for these).
SCHEMA = StructType(
    [
        StructField("offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), False),
        StructField("timestamp", LongType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [
                        StructField("key", StringType(), False),
                        StructField("value", BinaryType(), True),
                    ]
                ),
                containsNull=False,
            ),
            False,
        ),
        StructField("batch_base_offset", LongType(), False),
        # as Spark's Kafka source names them
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
    ]
)

_PUSHDOWN_WORKER = "data_source_pushdown_filters.py"  # pyspark.sql.worker's module (4.1+)


def _called_by_pushdown_worker() -> bool:
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PUSHDOWN_WORKER):
            return True
        frame = frame.f_back
    return False


def _columns(schema: StructType) -> tuple[tuple[str, bool], ...] | None:
    """The columns a reader yields: None for the whole schema, else the names of a schema the
    user gave with ``.schema(...)`` -- some of the source's columns, with their types, in any
    order. A Python data source is not told which columns a query uses (no column pruning):
    naming fewer spares Spark the conversion of the others (``headers`` above all)."""
    if schema == SCHEMA:
        return None
    ours = {f.name: f for f in SCHEMA.fields}
    for f in schema.fields:
        mine = ours.get(f.name)
        if mine is None or mine.dataType != f.dataType:
            raise SparkSourceError(
                f"the raftcore source's columns are {SCHEMA.simpleString()}; .schema() may "
                f"name some of them, with these types, but got {f.name} "
                f"{f.dataType.simpleString()}"
            )
    if not schema.fields:
        raise SparkSourceError("a schema for the raftcore source needs at least one column")
    return tuple((f.name, f.nullable) for f in schema.fields)


def _full_arrow_schema() -> Any:
    """:func:`raftcore.columnar.arrow_schema` and the ``topic`` and ``partition`` columns."""
    import pyarrow as pa

    from raftcore.columnar import arrow_schema

    return (
        arrow_schema()
        .append(pa.field("topic", pa.string(), nullable=False))
        .append(pa.field("partition", pa.int32(), nullable=False))
    )


def _tagger(topic: str, partition: int) -> Callable[[Any], Any]:
    """A log's Arrow batches to batches of the whole schema: ``topic`` and ``partition`` added,
    built from buffers (no Python object per row)."""
    import numpy as np
    import pyarrow as pa

    schema = _full_arrow_schema()
    name = topic.encode()

    def tag(batch: Any) -> Any:
        n = batch.num_rows
        ends = np.arange(n + 1, dtype=np.int32) * len(name)
        topics = pa.StringArray.from_buffers(n, pa.py_buffer(ends), pa.py_buffer(name * n))
        partitions = pa.array(np.full(n, partition, dtype=np.int32))
        return pa.RecordBatch.from_arrays([*batch.columns, topics, partitions], schema=schema)

    return tag


def _projection(columns: tuple[tuple[str, bool], ...]) -> Callable[[Any], Any]:
    """Arrow batches of the whole schema to batches of ``columns``, each declared nullable
    as the user's schema says (Spark compares that too)."""
    import pyarrow as pa

    ours = _full_arrow_schema()
    names = [name for name, _ in columns]
    target = pa.schema([ours.field(name).with_nullable(nullable) for name, nullable in columns])
    return lambda batch: pa.RecordBatch.from_arrays(batch.select(names).columns, schema=target)


class RaftcoreDataSource(DataSource):
    """Committed records of a raftcore log: ``.option("bootstrap", "host:port,...")`` reads a
    running cluster, ``.load(DIR)`` a node's data directory; ``spark.readStream`` streams a
    running cluster (:mod:`raftcore.spark.stream`); ``df.write`` and ``df.writeStream``
    append to one, exactly once (:mod:`raftcore.spark.sink`). Options: see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "raftcore"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        columns = _columns(schema)
        try:
            opts = ReadOptions.parse(self.options)
        except SparkSourceError as exc:
            raise plainly(exc) from None
        if _called_by_pushdown_worker():
            return RaftcorePushdownReader(opts, columns=columns)
        return RaftcoreReader(opts, columns=columns)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from raftcore.spark.options import WriteOptions
        from raftcore.spark.sink import RaftcoreWriter, check_sink_schema

        check_sink_schema(schema, overwrite)
        return RaftcoreWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from raftcore.spark.options import WriteOptions
        from raftcore.spark.sink import RaftcoreStreamWriter, check_sink_schema

        check_sink_schema(schema, overwrite)
        return RaftcoreStreamWriter(WriteOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from raftcore.spark.stream import RaftcoreStreamReader

        columns = _columns(schema)
        return RaftcoreStreamReader(ReadOptions.parse(self.options, streaming=True), columns)


class RaftcoreReader(DataSourceReader):
    def __init__(
        self,
        opts: ReadOptions,
        bounds: Bounds = NO_BOUNDS,
        columns: tuple[tuple[str, bool], ...] | None = None,
    ) -> None:
        self.opts = opts
        self.bounds = bounds
        self.columns = columns

    def partitions(self) -> list[InputPartition]:
        try:
            return self._partitions()
        except SparkSourceError as exc:
            raise plainly(exc) from None

    def _partitions(self) -> list[InputPartition]:
        opts = self.opts
        bounds = self.bounds
        if opts.path is not None:
            return self._file_ranges(bounds)
        from raftcore.spark.remote import committed_ranges

        ranges: list[InputPartition] = []
        # timestamps: per row, on the executors
        for tp, committed in sorted(
            committed_ranges(opts).items(), key=lambda i: (i[0].topic, i[0].partition)
        ):
            start, end = read_span(opts, tp.topic, tp.partition, committed)
            ranges.extend(
                plan_ranges(
                    start,
                    end,
                    opts.partition_records,
                    bounds,
                    topic=tp.topic,
                    partition=tp.partition,
                )
            )
        return ranges

    def _file_ranges(self, bounds: Bounds) -> list[InputPartition]:
        """A data directory: its log, read as partition 0 of the topic."""
        from raftcore.spark.files import LogFiles

        opts = self.opts
        assert opts.path is not None
        files = LogFiles.open(opts.path)
        first = resolve_offset(opts.starting_offsets, opts.topic, 0, EARLIEST)
        last = resolve_offset(opts.ending_offsets, opts.topic, 0, LATEST)
        start = files.log_start()
        end = files.committed_end(None if last == LATEST else last)
        bounds = bounds.narrow(offset_lo=max(first, 0))
        if bounds.has_timestamp and bounds.ts_lo >= 0:
            lo = max(start, bounds.offset_lo)
            bounds = bounds.narrow(offset_lo=files.first_offset_at(bounds.ts_lo, lo, end))
        return list(plan_ranges(start, end, opts.partition_records, bounds, topic=opts.topic))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from raftcore.columnar import iter_arrow

        assert isinstance(partition, OffsetRange)
        opts = self.opts
        if opts.path is not None:
            from raftcore.spark.files import LogFiles

            buffers: Iterable[Any] = LogFiles.open(opts.path).read_range(
                partition.start, partition.end
            )
        else:
            from raftcore.spark.remote import fetch_range

            buffers = fetch_range(
                opts, partition.start, partition.end, partition.topic, partition.partition
            )
        tag = _tagger(partition.topic, partition.partition)
        project = None if self.columns is None else _projection(self.columns)
        for data in buffers:
            trimmed = trim(
                iter_arrow(
                    data,
                    max_records=opts.max_records_per_batch,
                    include_control=opts.include_control,
                ),
                partition,
            )
            tagged = map(tag, trimmed)
            yield from tagged if project is None else map(project, tagged)


def read_span(
    opts: ReadOptions, topic: str, partition: int, committed: CommittedRange
) -> tuple[int, int]:
    """``[start, end)`` of ``topic`` ``partition`` that a batch read covers: between
    startingOffsets and endingOffsets, within the committed range (an offset below the log
    start reads from the log start, one past the high watermark to it)."""
    first = resolve_offset(opts.starting_offsets, topic, partition, EARLIEST)
    last = resolve_offset(opts.ending_offsets, topic, partition, LATEST)
    start = committed.log_start if first in (EARLIEST, LATEST) else first
    end = committed.high_watermark if last in (EARLIEST, LATEST) else last
    start = min(max(start, committed.log_start), committed.high_watermark)
    return start, max(start, min(end, committed.high_watermark))


class RaftcorePushdownReader(RaftcoreReader):
    """The reader Spark's pushdown worker gets: offset and timestamp comparisons narrow the
    planned ranges (and timestamps are checked per row in ``read()``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds, rest = push_filters(filters, self.bounds)
        return rest


def register(spark: Any) -> None:
    """Register the source with ``spark`` as ``raftcore``."""
    spark.dataSource.register(RaftcoreDataSource)
