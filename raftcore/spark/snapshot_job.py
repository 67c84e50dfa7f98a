"""``raftcore spark snapshot``: a KIP-630 snapshot of the key/value state at committed offset
``N``, computed by Spark, in the file a node installs.

The state at ``N`` is what :class:`~raftcore.statemachine.LmdbStateMachine` holds once it has
applied every data record below ``N`` in offset order: a record puts ``(key, value)``, a null
value deletes the key, a record whose key is not 1..511 bytes is skipped
(:mod:`raftcore.statemachine.kv_batches`, the same rule on every replica). Spark keeps, per
key, the value of the record with the highest offset (``max(struct(offset, value))``), drops
the keys whose latest record is a delete and sorts by key; the driver streams the result
(``toLocalIterator``: the partitions of the sort, in key order, one at a time) into the log's
snapshot writer, which batches it as the node does and verifies the file whole before the
rename.

The id. ``N`` must be a batch boundary (KAFKA-14618/14619: the record at ``N - 1`` is the last of
its batch) and at most the committed offset; the epoch is that batch's leader epoch, and the
header's last contained log timestamp its max timestamp -- what
:meth:`raftcore.log.snapshots.LogSnapshots.create` checks and takes when a node snapshots.

A log that starts above 0. The records below its start are gone; their effect is in a snapshot.
From a data directory the job starts from the newest frozen snapshot ending between the log
start and ``N`` (its pairs count as offset -1: any record of the log wins over them). From a
cluster it refuses: run it on a node's data directory.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftcore.snapshot import (
    SnapshotFileKind,
    SnapshotId,
    SnapshotSummary,
    snapshot_path,
    verify_snapshot_file,
)
from raftcore.snapshot.part import PartFile
from raftcore.snapshot.writer import SnapshotWriter
from raftcore.spark.job_source import BatchAt, JobSource
from raftcore.spark.options import DEFAULT_PARTITION_RECORDS, SparkSourceError
from raftcore.spark.progress import TaskProgress
from raftcore.statemachine.api import MAX_KEY_SIZE

__all__ = ["SnapshotJobResult", "build_snapshot"]

CHUNK_PAIRS = 4096
_BASE_BATCHES_PER_TASK = 256  # batches of a base snapshot one task decodes (<= 1,024 pairs each)


@dataclass(frozen=True, slots=True)
class SnapshotJobResult:
    path: Path
    snapshot_id: SnapshotId
    pairs: int
    base: SnapshotId | None  # the snapshot the state started from (a log starting above 0)
    summary: SnapshotSummary
    seconds: float

    def line(self) -> str:
        sid = self.snapshot_id
        base = f", from snapshot {self.base.stem}" if self.base is not None else ""
        return (
            f"created {self.path}: end offset {sid.end_offset}, epoch {sid.epoch}, "
            f"{self.pairs} keys, {self.summary.size} bytes, {self.summary.batch_count} batches "
            f"(verified){base}, {self.seconds:.1f} s"
        )


def build_snapshot(
    spark: Any,
    *,
    out_dir: str | os.PathLike[str],
    bootstrap: str | Sequence[str] | None = None,
    path: str | None = None,
    offset: int | None = None,
    partition_records: int = DEFAULT_PARTITION_RECORDS,
    topic: str = "raftcore",
    progress: Callable[[int, int], None] | None = None,
    request_timeout_ms: int | None = None,
    security: Mapping[str, str] | None = None,
) -> SnapshotJobResult:
    """Write ``<out_dir>/<N>-<epoch>.checkpoint``, the key/value state at committed offset
    ``offset`` (default: the committed end -- the high watermark of a cluster, the newest
    snapshot's end in a data directory) of a cluster (``bootstrap``) or a node's data directory
    (``path``). SparkSourceError when the offset cannot be a snapshot id or the state below
    the log start is not at hand. ``request_timeout_ms``: how long a cluster's silent node is
    waited for (default 30 s). See the module docstring."""
    started = time.monotonic()
    source = JobSource.of(bootstrap, path, topic, request_timeout_ms, security)
    out = Path(out_dir)
    if not out.is_dir():
        raise SparkSourceError(f"{out_dir}: no such directory (the snapshot's destination)")
    if offset is not None and offset < 1:
        raise SparkSourceError(f"offset {offset}: a snapshot ends at an offset of 1 or more")
    log_start, committed = source.committed_range(offset)
    n = committed if offset is None else offset
    if n > committed or n < 1:
        raise SparkSourceError(
            f"{source.where}: offset {n} is not committed (the committed end is {committed})"
            if n > committed
            else f"{source.where}: nothing is committed (the committed end is {committed})"
        )
    base = _base_snapshot(source, log_start, n)  # a refusal first: the log start may move on
    if base is not None and base.end_offset == n:  # the log holds nothing below n: its id
        batch = BatchAt(n - 1, n - 1, base.epoch, _last_contained_timestamp(source, base), False)
    else:
        batch = source.batch_at(n - 1)
    if batch.last_offset != n - 1:
        raise SparkSourceError(
            f"offset {n} is not a batch boundary: offset {n - 1} is in the batch "
            f"{batch.base_offset}..{batch.last_offset} (KAFKA-14618: a snapshot ends at a "
            f"batch boundary); use {batch.base_offset} or {batch.last_offset + 1}"
        )
    sid = SnapshotId(n, batch.epoch)
    final = snapshot_path(out, sid)
    if final.exists():
        raise SparkSourceError(f"{final} exists")
    first = base.end_offset if base is not None else log_start
    with TaskProgress(spark, "snapshot", progress):
        latest = _latest_pairs(
            spark, source, base=base, first=first, n=n, partition_records=partition_records
        )
        writer = SnapshotWriter(
            PartFile(out, sid), last_contained_log_timestamp=batch.max_timestamp
        )
        pairs = 0
        try:
            rows = latest.toLocalIterator(prefetchPartitions=True)
            while chunk := [(r[0], r[1]) for r in itertools.islice(rows, CHUNK_PAIRS)]:
                writer.append(chunk)
                pairs += len(chunk)
            summary = writer.freeze()  # verify whole, fsync, read-only, rename, fsync dir
        finally:
            writer.abort()  # a no-op once frozen
    return SnapshotJobResult(final, sid, pairs, base, summary, time.monotonic() - started)


def _last_contained_timestamp(source: JobSource, base: SnapshotId) -> int:
    from raftcore.spark.files import LogFiles

    assert source.path is not None
    path = snapshot_path(LogFiles.open(source.path).directory, base)
    summary = verify_snapshot_file(path, snapshot_id=base)
    return int(summary.header.last_contained_log_timestamp)


def _base_snapshot(source: JobSource, log_start: int, n: int) -> SnapshotId | None:
    """The snapshot holding the state below the log start, when the log starts above 0."""
    if log_start == 0:
        return None
    if source.path is None:
        raise SparkSourceError(
            f"the log of {source.where} starts at offset {log_start}: the state below it is "
            "only in a snapshot, which this job reads from a node's data directory; run it on "
            "a (stopped or running) node's data directory instead of bootstrap"
        )
    from raftcore.logtools import snapshot_files
    from raftcore.spark.files import LogFiles

    directory = LogFiles.open(source.path).directory
    ids = [
        f.snapshot_id
        for f in snapshot_files(directory)
        if f.kind is SnapshotFileKind.FROZEN and log_start <= f.snapshot_id.end_offset <= n
    ]
    if not ids:
        raise SparkSourceError(
            f"{directory}: the log starts at offset {log_start} and no snapshot ends between "
            f"{log_start} and {n}: the state below the log start is not here"
        )
    base = max(ids, key=lambda i: (i.end_offset, i.epoch))
    verify_snapshot_file(snapshot_path(directory, base), snapshot_id=base)
    return base


def _latest_pairs(
    spark: Any,
    source: JobSource,
    *,
    base: SnapshotId | None,
    first: int,
    n: int,
    partition_records: int,
) -> Any:
    """A DataFrame (key, value) of the latest value of every live key, sorted by key."""
    from pyspark.sql import functions as F

    log = (
        source.read(spark, startOffset=first, endOffset=n, partitionRecords=partition_records)
        .where(F.col("offset") < n)
        .where(F.col("key").isNotNull() & F.length("key").between(1, MAX_KEY_SIZE))
        .select("key", "value", "offset")
    )
    if base is not None:
        assert source.path is not None
        log = _base_pairs(spark, source.path, base).unionByName(log)
    return (
        log.groupBy("key")
        .agg(F.max(F.struct("offset", "value")).alias("latest"))
        .where(F.col("latest.value").isNotNull())
        .select("key", F.col("latest.value").alias("value"))
        .orderBy("key")
    )


def _base_pairs(spark: Any, path: str, base: SnapshotId) -> Any:
    """The pairs of snapshot ``base`` of the data directory ``path`` as (key, value, offset=-1),
    decoded by the executors, a run of batches per task."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from raftcore.records import scan_batches
    from raftcore.spark.files import LogFiles, _map

    file = snapshot_path(LogFiles.open(path).directory, base)
    mapped = _map(file)
    if mapped is None:
        raise SparkSourceError(f"{file}: the snapshot is gone or empty")
    scan = scan_batches(mapped, check_crc=False)  # type: ignore[arg-type]  # verified above
    data = [i for i in range(scan.count) if not scan.attributes[i] & 0x20]  # not control
    runs = [
        (str(file), int(scan.positions[run[0]]), int(scan.positions[run[-1]] + scan.sizes[run[-1]]))
        for run in (
            data[i : i + _BASE_BATCHES_PER_TASK]
            for i in range(0, len(data), _BASE_BATCHES_PER_TASK)
        )
    ]
    schema = StructType(
        [
            StructField("key", BinaryType(), False),
            StructField("value", BinaryType(), True),
            StructField("offset", LongType(), False),
        ]
    )
    rdd = spark.sparkContext.parallelize(runs, max(1, len(runs))).flatMap(_decode_run)
    return spark.createDataFrame(rdd, schema)


def _decode_run(run: tuple[str, int, int]) -> Iterator[tuple[bytes, bytes | None, int]]:
    """The (key, value, -1) of the data batches in bytes ``[lo, hi)`` of a snapshot file."""
    from raftcore.records import decode_kv_pairs, scan_batches
    from raftcore.spark.files import _map

    name, lo, hi = run
    m = _map(Path(name))
    if m is None:
        raise SparkSourceError(f"{name}: the snapshot is gone or empty")
    view = m.view(lo, hi)
    scan = scan_batches(view, check_crc=False)  # verified whole on the driver
    for i in range(scan.count):
        start = int(scan.positions[i])
        kv = decode_kv_pairs(view[start : start + int(scan.sizes[i])], check_crc=False)
        for key, value in kv.pairs:
            yield key, value, -1
