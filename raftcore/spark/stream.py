"""``spark.readStream.format("raftcore")``: the committed records of a running cluster as a
stream of micro-batches, with PySpark's ``DataSourceStreamReader`` (the executors read; the
driver only plans).

Offsets are log offsets, as JSON: ``{"offset": N}`` is the next offset a query will read. For
each micro-batch the driver asks the leader for the log start and the high watermark and plans
``[start, end)`` with ``end`` at most the high watermark (committed records only) and at most
``maxRecordsPerTrigger`` offsets past ``start`` (admission control, PySpark 4.2+). The ranges
are read on the executors exactly as the batch source reads them. Committed offsets never
change (Raft: a committed entry is in every later leader's log), so a query restarted from its
checkpoint, on whichever node leads now, reads each offset once.

``commit(end)`` is recorded and nothing more: the source does not hold back the log start. A
leader's log start moves only with its snapshots (and DeleteRecords), never waiting for a
query; a restarted query whose checkpoint fell below the log start fails naming both offsets,
or with ``failOnDataLoss=false`` skips to the log start, as Spark's Kafka source does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from raftcore.spark.options import ReadOptions, SparkSourceError
from raftcore.spark.planning import OffsetRange, plan_ranges

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for DataSourceStreamReader
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["DataLossError", "MicroBatchPlan", "RaftcoreStreamReader", "next_end"]

log = logging.getLogger(__name__)


class DataLossError(SparkSourceError):
    """The query would read from below the log start: those offsets are gone."""


@dataclass(frozen=True, slots=True)
class MicroBatchPlan:
    first: int  # where reading starts: the query's offset, or the log start when skipping
    end: int  # the next micro-batch reads [first, end); end == first: nothing new


def next_end(
    start: int,
    log_start: int,
    high_watermark: int,
    *,
    max_records: int | None = None,
    target: int | None = None,
    fail_on_data_loss: bool = True,
    where: str = "the cluster",
) -> MicroBatchPlan:
    """The next micro-batch after offset ``start``: committed offsets only (below the high
    watermark), at most ``max_records`` of them, never past ``target`` (Trigger.AvailableNow's
    end). A query behind the log start fails, or skips to it without ``fail_on_data_loss``.
    A high watermark below ``start`` (a new leader that has not yet committed in its epoch)
    means no new data yet, never a step back."""
    first = start
    if start < log_start:
        if fail_on_data_loss:
            raise DataLossError(
                f"the streaming query is at offset {start}, but the log of {where} now starts "
                f"at {log_start}: offsets {start}..{log_start - 1} were removed (a snapshot or "
                "DeleteRecords) before the query read them. Set failOnDataLoss=false to skip "
                "them, or start the query afresh (a new checkpoint)"
            )
        log.warning(
            "skipping offsets %d..%d: below the log start of %s", start, log_start - 1, where
        )
        first = log_start
    end = max(first, high_watermark)
    if max_records is not None:
        end = min(end, first + max_records)
    if target is not None:
        end = min(end, max(first, target))
    return MicroBatchPlan(first, end)


def _offset(value: Any, what: str) -> int:
    if isinstance(value, dict) and isinstance(value.get("offset"), int):
        return int(value["offset"])
    raise SparkSourceError(
        f"{what} {value!r} is not a raftcore offset ({{'offset': N}}): was this checkpoint "
        "written by another source?"
    )


class RaftcoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Driver side: offsets and plans. Executor side: ``read()``, the batch source's read.
    Holds options and numbers only (it is pickled to the executors)."""

    def __init__(
        self, opts: ReadOptions, columns: tuple[tuple[str, bool], ...] | None = None
    ) -> None:
        if not opts.bootstrap:
            raise SparkSourceError("spark.readStream.format('raftcore') needs option bootstrap")
        self.opts = opts
        self.columns = columns  # of a schema the user gave: see source._columns
        self._where = ",".join(opts.bootstrap_strings)
        self._target: int | None = None  # Trigger.AvailableNow: the high watermark at its start
        self._log_start: int | None = None  # the newest seen: the log start only grows
        self._latest: int | None = None
        self.committed: int | None = None

    def _committed_range(self) -> tuple[int, int]:
        from raftcore.spark.remote import committed_range

        log_start, hw = committed_range(self.opts)
        self._log_start = max(self._log_start or 0, log_start)
        self._latest = hw
        return log_start, hw

    def initialOffset(self) -> dict:
        start = self.opts.starting_offset
        if isinstance(start, int):
            return {"offset": start}
        log_start, hw = self._committed_range()
        return {"offset": log_start if start == "earliest" else hw}

    def getDefaultReadLimit(self) -> Any:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._committed_range()[1]
        log.info("Trigger.AvailableNow: reading up to offset %d of %s", self._target, self._where)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        first = None if start is None else _offset(start, "start offset")
        log_start, hw = self._committed_range()
        if first is None:  # PySpark 4.0/4.1 call latestOffset() without a start: no limits
            return {"offset": hw if self._target is None else min(hw, self._target)}
        max_records = limit.max_rows if ReadMaxRows and isinstance(limit, ReadMaxRows) else None
        plan = next_end(
            first,
            log_start,
            hw,
            max_records=max_records,
            target=self._target,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            where=self._where,
        )
        return {"offset": plan.end}

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else {"offset": self._latest}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = _offset(start, "start offset"), _offset(end, "end offset")
        if not self.opts.fail_on_data_loss:  # skip what latestOffset skipped (or, after a
            if self._log_start is None:  # restart, a batch it planned before the restart)
                self._committed_range()
            first = max(first, min(self._log_start or 0, last))
        if last <= first:
            return []
        return list(plan_ranges(first, last, self.opts.partition_records))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from raftcore.spark.source import RaftcoreReader

        assert isinstance(partition, OffsetRange)
        return RaftcoreReader(self.opts, columns=self.columns).read(partition)

    def commit(self, end: dict) -> None:
        # Recorded only: the leader's log start follows its snapshots, not this query.
        self.committed = _offset(end, "committed offset")
        log.debug("query committed up to offset %d of %s", self.committed, self._where)

    def stop(self) -> None:
        pass
