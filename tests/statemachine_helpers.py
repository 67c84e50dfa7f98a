"""Helpers for the state-machine tests: committed batches made from pairs, and in-process nodes
with state machines on loopback."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from node_helpers import FAST, configs, leader_of  # noqa: F401 (users import them from here)

from raftcore.node.config import NodeConfig
from raftcore.raft import CommittedBatch
from raftcore.records import encode_batch, iter_batches

CLUSTER_ID = "statemachine-tests"


def committed(pairs, base_offset: int, from_offset: int | None = None) -> CommittedBatch:  # type: ignore[no-untyped-def]
    """One committed batch of ``pairs`` at ``base_offset`` (records below ``from_offset``
    delivered before, as after a restart inside a batch)."""
    batch = next(iter_batches(encode_batch(pairs, base_offset=base_offset, leader_epoch=1)))
    return CommittedBatch(batch, base_offset if from_offset is None else from_offset)


def batches_of(ops, batch_size: int, base_offset: int = 0) -> list[CommittedBatch]:  # type: ignore[no-untyped-def]
    """``ops`` (key, value-or-None) cut into consecutive committed batches."""
    out = []
    offset = base_offset
    for i in range(0, len(ops), batch_size):
        chunk = ops[i : i + batch_size]
        out.append(committed(chunk, offset))
        offset += len(chunk)
    return out


class Recording:
    """Wraps a state machine and records, per apply call, the offsets of every record it was
    given and the thread it ran on."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.offsets: list[int] = []
        self.threads: set[int] = set()
        self.calls = 0

    @property
    def applied_offset(self) -> int:
        return self.inner.applied_offset

    def apply(self, batches) -> None:  # type: ignore[no-untyped-def]
        self.threads.add(threading.get_ident())
        self.inner.apply(batches)
        self.calls += 1
        for b in batches:
            self.offsets.extend(range(b.first_offset, b.last_offset + 1))

    def snapshot(self, writer) -> int:  # type: ignore[no-untyped-def]
        return self.inner.snapshot(writer)

    def restore(self, reader) -> None:  # type: ignore[no-untyped-def]
        self.inner.restore(reader)


def node_configs(tmp_path: Path, count: int = 3, **kw) -> list[NodeConfig]:  # type: ignore[no-untyped-def]
    """The shared cluster's configurations (node_helpers.configs) for this cluster id."""
    return configs(tmp_path, CLUSTER_ID, size=count, **kw)


def run(coro, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout_s))
