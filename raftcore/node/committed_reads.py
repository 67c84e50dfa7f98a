"""An embedded replica reading its own committed log: what a Kafka consumer would fetch, without
a connection to its own process.

A **local** read (the default; etcd's serializable read) returns what this replica knows to be
committed: records below its high watermark, possibly behind the leader's. A **linearizable**
read first asks the leader for a read index (:mod:`raftcore.node.reads`: confirmed by a quorum
round; a replica that does not lead asks the leader with ReadIndex), then waits until this
replica knows everything below it committed, so it sees every write acknowledged before it
began.
Control batches (the leaders' LeaderChange records) are skipped, as a consumer skips them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from raftcore.errors import OffsetOutOfRangeError, RaftcoreError
from raftcore.records import Record, iter_batches

if TYPE_CHECKING:
    from raftcore.node.node import RaftNode

__all__ = ["read", "records"]

DEFAULT_MAX_BYTES = 1 << 20


def committed_end(node: RaftNode) -> int:
    """The offset below which this replica knows every record is committed."""
    core = node.running_core()
    if core is None:
        raise RaftcoreError(f"{node.prefix} not running")
    hw = core.high_watermark
    return 0 if hw is None else hw


def read_below(node: RaftNode, from_offset: int, end: int, max_bytes: int) -> list[Record]:
    """The records from ``from_offset`` below ``end`` (whole batches up to ``max_bytes``, at
    least one). OffsetOutOfRangeError names the log start and end for an offset outside."""
    log = node.log
    if log is None:
        raise RaftcoreError(f"{node.prefix} not running")
    if from_offset < log.log_start_offset or from_offset > end:
        raise OffsetOutOfRangeError(
            f"{node.prefix} offset {from_offset} is outside the committed log "
            f"[{log.log_start_offset}, {end}] of node {node.node_id}"
        )
    out: list[Record] = []
    if from_offset == end:
        return out
    for batch in iter_batches(log.read(from_offset, max_bytes)):
        if batch.base_offset >= end:
            break
        if batch.is_control or batch.last_offset < from_offset:
            continue
        out.extend(r for r in batch.records() if from_offset <= r.offset < end)
    return out


async def read(
    node: RaftNode,
    from_offset: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    linearizable: bool = False,
    timeout_s: float = 5.0,
) -> list[Record]:
    """RaftNode.read: see the module docstring. An empty list at the committed end."""
    if linearizable:
        index = await node.linearizable_read_index(timeout_s)
        await wait_committed_to(node, index, timeout_s)
    return read_below(node, from_offset, committed_end(node), max_bytes)


async def wait_committed_to(node: RaftNode, offset: int, timeout_s: float | None) -> None:
    """Until this replica's high watermark is at least ``offset``."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while committed_end(node) < offset:
        left = 1.0 if deadline is None else deadline - loop.time()
        if left <= 0:
            raise TimeoutError(
                f"{node.prefix} the high watermark did not reach {offset} within {timeout_s} s"
            )
        await node.wait_high_watermark_change(min(left, 1.0))


async def records(
    node: RaftNode, from_offset: int, max_bytes: int = DEFAULT_MAX_BYTES
) -> AsyncIterator[Record]:
    """RaftNode.records: every committed record from ``from_offset`` on, as this replica learns
    it is committed (a local read), until the node stops."""
    position = from_offset
    while True:
        end = committed_end(node)
        if position >= end:
            await node.wait_high_watermark_change(1.0)
            continue
        batch = read_below(node, position, end, max_bytes)
        for record in batch:
            yield record
        # past control batches too: the next read starts after what this one covered
        position = max(position + 1, batch[-1].offset + 1) if batch else _skip(node, position)


def _skip(node: RaftNode, position: int) -> int:
    """The offset after the batches at ``position`` that held no data record (control)."""
    log = node.log
    assert log is not None
    last = position
    for batch in iter_batches(log.read(position, 1)):
        last = max(last, batch.last_offset + 1)
    return last
