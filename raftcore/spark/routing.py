"""The sink's rows, routed to the partitions of the topic and cut into record batches per
partition, for one exactly-once writer per partition (:mod:`raftcore.spark.sink`).

A row goes to its ``partition`` column when it has one (not null), else by its key with
Kafka's default partitioner (murmur2, :mod:`raftcore.client.partitioner`); rows without a key
go to one partition per Spark task (``task % partitions``), as Kafka's producers stick to one
partition for unkeyed records. Each partition's rows are cut into batches by the same rule as
before (``max_rows`` rows or about ``max_bytes`` bytes): the same input in the same order gives
every partition the same batches in every attempt, which the exactly-once writer needs.

The writers pull: a writer that wants its next batch reads the task's input on until it has
one (routing the rows it passes to the other partitions' queues) or the input ends. Rows wait
in memory only for a partition whose writer is behind the others.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from raftcore.client.partitioner import key_partition
from raftcore.spark.options import SparkSourceError

__all__ = ["Router"]

Record = tuple[Any, ...]  # (key, value[, headers])


class Router:
    """Routes the rows of Arrow ``batches`` to ``partitions`` partitions. ``on_new(p)`` is
    called the first time partition ``p`` gets a row (the caller starts its writer then);
    ``batches(p)`` is that writer's input."""

    def __init__(
        self,
        batches: Iterator[Any],
        partitions: int,
        *,
        task: int,
        max_rows: int,
        max_bytes: int,
        on_new: Callable[[int], None],
        topic: str = "raftcore",
    ) -> None:
        self.input = batches
        self.partitions = partitions
        self.unkeyed = task % partitions
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.on_new = on_new
        self.topic = topic
        self.ready: dict[int, deque[list[Record]]] = {}  # whole batches, per partition
        self.filling: dict[int, tuple[list[Record], int]] = {}  # the batch being cut, its bytes
        self.exhausted = False
        self.rows = 0

    def read_until_routed(self) -> None:
        """Read the input until some partition has a whole batch, or it ends."""
        while not any(self.ready.values()) and not self.exhausted:
            self._read_more()

    def batches(self, partition: int) -> Iterator[list[Record]]:
        ready = self.ready[partition]
        while True:
            while not ready and not self.exhausted:
                self._read_more()
            if not ready:
                return
            yield ready.popleft()

    def _read_more(self) -> None:
        rb = next(self.input, None)
        if rb is None:
            self.exhausted = True
            for p, (batch, _) in self.filling.items():
                if batch:
                    self.ready[p].append(batch)
            self.filling.clear()
            return
        for p, record in zip(self._targets(rb), _records(rb), strict=True):
            self._add(p, record)

    def _add(self, p: int, record: Record) -> None:
        if p not in self.ready:
            self.ready[p] = deque()
            self.on_new(p)
        batch, size = self.filling.get(p, ([], 0))
        batch.append(record)
        size += len(record[1] or b"") + len(record[0] or b"") + 16
        self.rows += 1
        if len(batch) >= self.max_rows or size >= self.max_bytes:
            self.ready[p].append(batch)
            batch, size = [], 0
        self.filling[p] = (batch, size)

    def _targets(self, rb: Any) -> list[int]:
        """The partition of each row of ``rb``."""
        names = rb.schema.names
        n = rb.num_rows
        keys = rb.column(names.index("key")).to_pylist() if "key" in names else [None] * n
        given = (
            rb.column(names.index("partition")).to_pylist() if "partition" in names else [None] * n
        )
        targets = []
        for k, p in zip(keys, given, strict=True):
            if p is not None:
                if not 0 <= p < self.partitions:
                    raise SparkSourceError(
                        f"a row's partition column says {p}, but topic {self.topic} has "
                        f"{self.partitions} partition(s) (0..{self.partitions - 1})"
                    )
                targets.append(p)
            elif k is None:
                targets.append(self.unkeyed)
            else:
                targets.append(key_partition(_as_bytes(k), self.partitions))
        return targets


def _records(rb: Any) -> Iterator[Record]:
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


def _as_bytes(v: Any) -> Any:
    return v.encode() if isinstance(v, str) else v
