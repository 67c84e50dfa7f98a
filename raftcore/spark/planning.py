"""Driver-side planning: the offset ranges a read covers, and the offset/timestamp bounds that
pushed-down filters (Spark 4.1+) put on them.

Offset filters narrow the ranges exactly. Timestamp filters are applied row by row in ``read()``
(a record's timestamp is its producer's CreateTime, not monotonic in the offset); in the
directory mode a lower bound also moves the start to the first batch whose max timestamp
reaches it (every batch before is older).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import InputPartition

# The Filter classes came with pushFilters, in PySpark 4.1; on 4.0 push_filters is never called.
with contextlib.suppress(ImportError):
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

__all__ = ["NO_BOUNDS", "Bounds", "OffsetRange", "plan_ranges", "push_filters"]

_MAX = (1 << 63) - 1  # int64: the bounds meet numpy arrays of offsets and timestamps
_MIN = -(1 << 63)


@dataclass(frozen=True, slots=True)
class Bounds:
    """``offset_lo <= offset < offset_hi`` and ``ts_lo <= timestamp < ts_hi``."""

    offset_lo: int = 0
    offset_hi: int = _MAX
    ts_lo: int = _MIN
    ts_hi: int = _MAX

    @property
    def has_timestamp(self) -> bool:
        return self.ts_lo != _MIN or self.ts_hi != _MAX

    def narrow(self, **kw: int) -> Bounds:
        kw = {k: min(max(v, _MIN), _MAX) for k, v in kw.items()}
        merged = {
            "offset_lo": max(self.offset_lo, kw.get("offset_lo", _MIN)),
            "offset_hi": min(self.offset_hi, kw.get("offset_hi", _MAX)),
            "ts_lo": max(self.ts_lo, kw.get("ts_lo", _MIN)),
            "ts_hi": min(self.ts_hi, kw.get("ts_hi", _MAX)),
        }
        return replace(self, **merged)


NO_BOUNDS = Bounds()


class OffsetRange(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one partition of a topic, and the
    timestamp bounds that ``read()`` applies to each row."""

    def __init__(
        self,
        start: int,
        end: int,
        ts_lo: int = _MIN,
        ts_hi: int = _MAX,
        *,
        topic: str = "raftcore",
        partition: int = 0,
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.start = start
        self.end = end
        self.ts_lo = ts_lo
        self.ts_hi = ts_hi
        self.topic = topic
        self.partition = partition

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition}, {self.start}, {self.end})"


def plan_ranges(
    start: int,
    end: int,
    size: int,
    bounds: Bounds = NO_BOUNDS,
    *,
    topic: str = "raftcore",
    partition: int = 0,
) -> list[OffsetRange]:
    """``[start, end)`` of ``topic`` ``partition`` narrowed by ``bounds``, cut into ranges of
    ``size`` offsets. An empty read still gets one (empty) range, so that every partition read
    has a Spark task (and Spark has one to run)."""
    lo = max(start, bounds.offset_lo)
    hi = min(end, bounds.offset_hi)
    if hi <= lo or bounds.ts_hi <= bounds.ts_lo:
        return [OffsetRange(lo, lo, bounds.ts_lo, bounds.ts_hi, topic=topic, partition=partition)]
    return [
        OffsetRange(
            first,
            min(first + size, hi),
            bounds.ts_lo,
            bounds.ts_hi,
            topic=topic,
            partition=partition,
        )
        for first in range(lo, hi, size)
    ]


def _int_value(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def push_filters(filters: Iterable[Any], bounds: Bounds) -> tuple[Bounds, list[Any]]:
    """Take the comparisons of ``offset`` and ``timestamp`` with integer literals into
    ``bounds``; returns the new bounds and the filters Spark must still evaluate (the others,
    and ``offset IN (...)``, which only narrows the range)."""
    rest: list[Any] = []
    for f in filters:
        narrowed = _narrow(f, bounds)
        if narrowed is None:
            rest.append(f)
            continue
        bounds, exact = narrowed
        if not exact:
            rest.append(f)
    return bounds, rest


def _narrow(f: Any, bounds: Bounds) -> tuple[Bounds, bool] | None:
    column = getattr(f, "attribute", None)
    if column not in (("offset",), ("timestamp",)):
        return None
    lo, hi = ("offset_lo", "offset_hi") if column == ("offset",) else ("ts_lo", "ts_hi")
    if isinstance(f, In):
        values = [_int_value(v) for v in f.value]
        if column != ("offset",) or not values or any(v is None for v in values):
            return None
        ints = [v for v in values if v is not None]
        return bounds.narrow(**{lo: min(ints), hi: max(ints) + 1}), False
    value = _int_value(getattr(f, "value", None))
    if value is None:
        return None
    if isinstance(f, EqualTo):
        return bounds.narrow(**{lo: value, hi: value + 1}), True
    if isinstance(f, GreaterThan):
        return bounds.narrow(**{lo: value + 1}), True
    if isinstance(f, GreaterThanOrEqual):
        return bounds.narrow(**{lo: value}), True
    if isinstance(f, LessThan):
        return bounds.narrow(**{hi: value}), True
    if isinstance(f, LessThanOrEqual):
        return bounds.narrow(**{hi: value + 1}), True
    return None


def offset_slices(offsets: Any, start: int, end: int) -> tuple[int, int]:
    """Row indices ``[i, j)`` of the sorted ``offsets`` that fall in ``[start, end)``."""
    import numpy as np

    return int(np.searchsorted(offsets, start, "left")), int(np.searchsorted(offsets, end, "left"))


def trim(batches: Iterable[Any], part: OffsetRange) -> Iterator[Any]:
    """The rows of Arrow ``batches`` (in offset order) inside the partition's offsets and
    timestamp bounds."""
    for whole in batches:
        batch = whole
        offsets = batch.column(0).to_numpy(zero_copy_only=True)
        i, j = offset_slices(offsets, part.start, part.end)
        if i or j < batch.num_rows:
            batch = batch.slice(i, j - i)
        if batch.num_rows and (part.ts_lo != _MIN or part.ts_hi != _MAX):
            ts = batch.column(2).to_numpy(zero_copy_only=True)
            mask = (ts >= part.ts_lo) & (ts < part.ts_hi)
            if not mask.all():
                import pyarrow as pa

                batch = batch.filter(pa.array(mask))
        if batch.num_rows:
            yield batch
