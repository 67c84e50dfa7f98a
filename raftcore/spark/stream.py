"""``spark.readStream.format("raftcore")``: the committed records of every partition of a
topic (or of the partitions assigned) as a stream of micro-batches, with PySpark's
``DataSourceStreamReader`` (the executors read; the driver only plans).

Offsets are Spark's Kafka offsets, JSON per partition: ``{"events": {"0": 23, "1": 7}}`` holds
the next offset a query will read of each partition. For each micro-batch the driver asks the
leaders for each partition's log start and high watermark and plans ``[start, end)`` of every
partition with ``end`` at most its high watermark (committed records only);
``maxOffsetsPerTrigger`` bounds the offsets of a micro-batch over all partitions together,
shared out in proportion to each partition's backlog, as Spark's Kafka source does (admission
control, PySpark 4.2+). A partition that appears while the query runs is read from its log
start. The ranges are read on the executors exactly as the batch source reads them. Committed
offsets never change (Raft: a committed entry is in every later leader's log), so a query
restarted from its checkpoint, on whichever nodes lead now, reads each offset once. A
checkpoint of the earlier one-partition format (``{"offset": N}``) is read as partition 0 of
the topic.

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

from raftcore.client.offsets import CommittedRange
from raftcore.spark.options import EARLIEST, LATEST, ReadOptions, SparkSourceError, resolve_offset
from raftcore.spark.planning import OffsetRange, plan_ranges
from raftcore.topic_partition import TopicPartition

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

__all__ = [
    "DataLossError",
    "MicroBatchPlan",
    "RaftcoreStreamReader",
    "next_end",
    "offsets_json",
    "parse_offsets",
    "spread",
]

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


Offsets = dict[TopicPartition, int]


def offsets_json(offsets: Offsets) -> dict:
    """``{topic: {"partition": offset}}``, Spark's Kafka offset JSON (its keys are strings)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda t: (t.topic, t.partition)):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def parse_offsets(value: Any, what: str, topic: str) -> Offsets:
    """Offsets from Spark's Kafka offset JSON; the earlier ``{"offset": N}`` is ``topic``'s
    partition 0."""
    if isinstance(value, dict) and set(value) == {"offset"} and isinstance(value["offset"], int):
        return {TopicPartition(topic, 0): int(value["offset"])}
    offsets = _offsets_or_none(value)
    if offsets is not None:
        return offsets
    raise SparkSourceError(
        f"{what} {value!r} is not a raftcore offset ({{'topic': {{'0': N}}}}): was this "
        "checkpoint written by another source?"
    )


def _offsets_or_none(value: Any) -> Offsets | None:
    if not isinstance(value, dict):
        return None
    offsets: Offsets = {}
    for name, parts in value.items():
        if not isinstance(parts, dict):
            return None
        for p, offset in parts.items():
            if not (isinstance(p, str) and p.isdigit() and isinstance(offset, int)):
                return None
            offsets[TopicPartition(name, int(p))] = offset
    return offsets


def spread(limit: int, backlogs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """How many of ``limit`` offsets each partition reads: all of every backlog when they fit,
    else shares in proportion to the backlogs, rounded down, and the offsets left over one
    each to the largest remainders. The shares add up to exactly ``limit``."""
    total = sum(backlogs.values())
    if total <= limit:
        return dict(backlogs)
    shares = {tp: limit * b // total for tp, b in backlogs.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(
        backlogs, key=lambda tp: (-(limit * backlogs[tp] % total), tp.topic, tp.partition)
    )
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return shares


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
        self._target: Offsets | None = None  # Trigger.AvailableNow: high watermarks at its start
        self._log_starts: Offsets = {}  # the newest seen: a log start only grows
        self._latest: Offsets | None = None
        self.committed: Offsets | None = None

    def _parse(self, value: Any, what: str) -> Offsets:
        return parse_offsets(value, what, self.opts.topic)

    def _committed_ranges(self) -> dict[TopicPartition, CommittedRange]:
        from raftcore.spark.remote import committed_ranges

        ranges = committed_ranges(self.opts)
        for tp, r in ranges.items():
            self._log_starts[tp] = max(self._log_starts.get(tp, 0), r.log_start)
        self._latest = {tp: r.high_watermark for tp, r in ranges.items()}
        return ranges

    def initialOffset(self) -> dict:
        spec = self.opts.starting_offsets
        offsets: Offsets = {}
        for tp, r in self._committed_ranges().items():
            offset = resolve_offset(spec, tp.topic, tp.partition, EARLIEST)
            offsets[tp] = {EARLIEST: r.log_start, LATEST: r.high_watermark}.get(offset, offset)
        return offsets_json(offsets)

    def getDefaultReadLimit(self) -> Any:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: r.high_watermark for tp, r in self._committed_ranges().items()}
        log.info("Trigger.AvailableNow: reading up to %s of %s", self._target, self._where)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        firsts = None if start is None else self._parse(start, "start offset")
        ranges = self._committed_ranges()
        target = self._target or {}
        if firsts is None:  # PySpark 4.0/4.1 call latestOffset() without a start: no limits
            return offsets_json(
                {
                    tp: min(r.high_watermark, target.get(tp, r.high_watermark))
                    for tp, r in ranges.items()
                }
            )
        plans: dict[TopicPartition, MicroBatchPlan] = {}
        for tp, r in ranges.items():
            plans[tp] = next_end(
                firsts.get(tp, r.log_start),  # a new partition: from its log start
                r.log_start,
                r.high_watermark,
                target=target.get(tp),
                fail_on_data_loss=self.opts.fail_on_data_loss,
                where=f"{tp} at {self._where}",
            )
        ends = {tp: plan.end for tp, plan in plans.items()}
        max_rows = limit.max_rows if ReadMaxRows and isinstance(limit, ReadMaxRows) else None
        if max_rows is not None:
            shares = spread(max_rows, {tp: p.end - p.first for tp, p in plans.items()})
            ends = {tp: plans[tp].first + shares[tp] for tp in plans}
        return offsets_json({**firsts, **ends})  # a partition no longer listed stays where it was

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        firsts = self._parse(start, "start offset")
        lasts = self._parse(end, "end offset")
        wants_starts = any(tp not in firsts for tp in lasts) or not self.opts.fail_on_data_loss
        if wants_starts and any(tp not in self._log_starts for tp in lasts):  # after a restart
            self._committed_ranges()
        ranges: list[InputPartition] = []
        for tp in sorted(lasts, key=lambda t: (t.topic, t.partition)):
            last = lasts[tp]
            first = firsts.get(tp, self._log_starts.get(tp, 0))  # a new partition: its start
            if not self.opts.fail_on_data_loss:  # skip what latestOffset skipped (or, after a
                first = max(first, min(self._log_starts.get(tp, 0), last))  # restart, planned)
            if last > first:
                ranges.extend(
                    plan_ranges(
                        first,
                        last,
                        self.opts.partition_records,
                        topic=tp.topic,
                        partition=tp.partition,
                    )
                )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from raftcore.spark.source import RaftcoreReader

        assert isinstance(partition, OffsetRange)
        return RaftcoreReader(self.opts, columns=self.columns).read(partition)

    def commit(self, end: dict) -> None:
        # Recorded only: the leader's log start follows its snapshots, not this query.
        self.committed = self._parse(end, "committed offset")
        log.debug("query committed up to %s of %s", end, self._where)

    def stop(self) -> None:
        pass
