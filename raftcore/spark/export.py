"""``raftcore spark export``: the committed records of a log as Parquet, one directory per offset
range (``offset_range=<first offset of the range>``, Hive-style, so Spark, pyarrow and DuckDB
prune ranges by that column).

Each Spark task reads ``partition_records`` offsets (the source's partitions) and writes into the
range directories its offsets fall in: a task meets at most two ranges when the two sizes are
equal, since the source plans its ranges from the log start, not from multiples of the size.
The columns are the source's (offset, leader_epoch, timestamp, key, value, headers,
batch_base_offset) and ``offset_range``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftcore.spark.job_source import JobSource
from raftcore.spark.options import DEFAULT_PARTITION_RECORDS, SparkSourceError
from raftcore.spark.progress import TaskProgress

__all__ = ["DEFAULT_RANGE_RECORDS", "ExportSummary", "export"]

DEFAULT_RANGE_RECORDS = 1_000_000


@dataclass(frozen=True, slots=True)
class ExportSummary:
    out: str
    records: int
    files: int
    ranges: int
    seconds: float

    def line(self) -> str:
        return (
            f"exported {self.records} records to {self.out}: {self.files} Parquet files in "
            f"{self.ranges} offset ranges, {self.seconds:.1f} s"
        )


def export(
    spark: Any,
    *,
    out: str,
    bootstrap: str | Sequence[str] | None = None,
    path: str | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    range_records: int = DEFAULT_RANGE_RECORDS,
    partition_records: int = DEFAULT_PARTITION_RECORDS,
    overwrite: bool = False,
    topic: str = "raftcore",
    progress: Callable[[int, int], None] | None = None,
    request_timeout_ms: int | None = None,
    security: Mapping[str, str] | None = None,
) -> ExportSummary:
    """Write the committed records of a cluster (``bootstrap``) or of a node's data directory
    (``path``; ``end_offset``: the committed offset, see docs/spark.md) to Parquet under ``out``,
    partitioned by ``offset_range = offset // range_records * range_records``.
    ``progress(done, total)`` gets the Spark tasks finished and planned. ``out`` must not exist
    unless ``overwrite``. The count of records comes from the written files' footers.
    ``request_timeout_ms``: how long a cluster's silent node is waited for (default 30 s)."""
    from pyspark.sql import functions as F

    if range_records < 1:
        raise SparkSourceError(f"range_records={range_records} must be at least 1")
    target = Path(out)
    if target.exists() and not overwrite:
        raise SparkSourceError(f"{out} exists: give another path, or overwrite")
    source = JobSource.of(bootstrap, path, topic, request_timeout_ms, security)
    if source.path is not None:  # the files' committed end, said here rather than in a task
        source.committed_range(end_offset)
    started = time.monotonic()
    df = source.read(
        spark,
        startOffset=start_offset,
        endOffset=end_offset,
        partitionRecords=partition_records,
    ).drop("topic", "partition")  # one log, partition 0: the columns the export always had
    ranged = df.withColumn(
        "offset_range", (F.col("offset") - F.col("offset") % range_records).cast("long")
    )
    with TaskProgress(spark, "export", progress):
        ranged.write.mode("overwrite" if overwrite else "errorifexists").partitionBy(
            "offset_range"
        ).parquet(str(target))
    records, files, ranges = _count(target)
    return ExportSummary(str(target), records, files, ranges, time.monotonic() - started)


def _count(out: Path) -> tuple[int, int, int]:
    """Records (from the Parquet footers), files and range directories under ``out``."""
    import pyarrow.parquet as pq

    files = sorted(out.glob("offset_range=*/*.parquet"))
    records = sum(pq.read_metadata(f).num_rows for f in files)
    return records, len(files), len({f.parent for f in files})
