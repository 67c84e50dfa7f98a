"""What a Spark job reads: a running cluster (``bootstrap``) or a node's data directory
(``path``), as the ``raftcore`` source reads them, plus the driver-side look-ups the jobs
need beyond the source: the committed range and the batch that holds an offset."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftcore.records import iter_batches
from raftcore.spark.options import ReadOptions, SparkSourceError

__all__ = ["BatchAt", "JobSource"]


@dataclass(frozen=True, slots=True)
class BatchAt:
    """The batch holding an offset: its offsets, leader epoch and max timestamp."""

    base_offset: int
    last_offset: int
    epoch: int
    max_timestamp: int
    is_control: bool


@dataclass(frozen=True, slots=True)
class JobSource:
    bootstrap: tuple[str, ...] = ()
    path: str | None = None
    topic: str = "raftcore"
    request_timeout_ms: int | None = None  # a cluster's: the read option requestTimeoutMs
    # librdkafka's properties: security.protocol, ..., sasl.password (never shown by repr)
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        shown = tuple((k, "***" if k == "sasl.password" else v) for k, v in self.security)
        return (
            f"JobSource(bootstrap={self.bootstrap!r}, path={self.path!r}, topic={self.topic!r}, "
            f"request_timeout_ms={self.request_timeout_ms!r}, security={shown!r})"
        )

    __str__ = __repr__

    @classmethod
    def of(
        cls,
        bootstrap: str | Sequence[str] | None,
        path: str | None,
        topic: str = "raftcore",
        request_timeout_ms: int | None = None,
        security: Mapping[str, str] | None = None,
    ) -> JobSource:
        """Exactly one of ``bootstrap`` ("host:port,..." or a list) and ``path``; ``security``:
        the client's TLS settings for a cluster (``security.protocol``, ``ssl.ca.location``...,
        docs/security.md)."""
        if isinstance(bootstrap, str):
            bootstrap = [b for b in bootstrap.split(",") if b.strip()]
        source = cls(
            tuple(bootstrap or ()),
            None if path is None else str(path),
            topic,
            request_timeout_ms if bootstrap else None,
            tuple(sorted((security or {}).items())),
        )
        source.options()  # checks them
        return source

    @property
    def where(self) -> str:
        return self.path if self.path is not None else ",".join(self.bootstrap)

    def option_map(self, **extra: Any) -> dict[str, str]:
        # The jobs read one log, a state machine's: partition 0 of the topic (a data
        # directory's log is that partition).
        given = {"topic": self.topic}
        if self.bootstrap:
            given = {"assign": json.dumps({self.topic: [0]})}
            given["bootstrap"] = ",".join(self.bootstrap)
        if self.path is not None:
            given["path"] = self.path
        if self.request_timeout_ms is not None:
            given["requestTimeoutMs"] = str(self.request_timeout_ms)
        given.update(self.security)
        given.update({k: str(v) for k, v in extra.items() if v is not None})
        return given

    def options(self, **extra: Any) -> ReadOptions:
        return ReadOptions.parse(self.option_map(**extra))

    def read(self, spark: Any, **extra: Any) -> Any:
        """``spark.read.format("raftcore")`` with this source and the ``extra`` options."""
        options = self.option_map(**extra)
        path = options.pop("path", None)
        reader = spark.read.format("raftcore").options(**options)
        return reader.load(path) if path is not None else reader.load()

    def committed_range(self, end_offset: int | None = None) -> tuple[int, int]:
        """``(log start, committed end)``: the leader's, or the files' (``end_offset`` is the
        committed offset the caller vouches for, else the newest snapshot's end)."""
        if self.path is not None:
            from raftcore.spark.files import LogFiles

            files = LogFiles.open(self.path)
            return files.log_start(), files.committed_end(end_offset)
        from raftcore.spark.remote import committed_range

        return committed_range(self.options())

    def batch_at(self, offset: int) -> BatchAt:
        """The batch (data or control) that holds ``offset``; SparkSourceError if none."""
        buffers: Iterator[Any]
        if self.path is not None:
            from raftcore.spark.files import LogFiles

            buffers = LogFiles.open(self.path).read_range(offset, offset + 1)
        else:
            from raftcore.spark.remote import fetch_range

            buffers = fetch_range(self.options(), offset, offset + 1)
        try:
            for data in buffers:
                for batch in iter_batches(data):
                    if batch.base_offset <= offset <= batch.last_offset:
                        return BatchAt(
                            int(batch.base_offset),
                            int(batch.last_offset),
                            int(batch.partition_leader_epoch),
                            int(batch.max_timestamp),
                            bool(batch.is_control),
                        )
        finally:  # a cluster's consumer closes now, not when the generator is collected
            close = getattr(buffers, "close", None)
            if close is not None:
                close()
        raise SparkSourceError(f"{self.where}: no batch holds offset {offset}")
