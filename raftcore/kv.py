"""An embedded, replicated key/value store: one :class:`~raftcore.node.RaftNode` driving one
:class:`~raftcore.statemachine.LmdbStateMachine` (in ``<data-dir>/state/``).

Writes go through the leader's log (``put``, ``delete``, ``put_many``), from any replica: a
follower forwards them to the leader (:mod:`raftcore.node.forwarding`; ``forward=False``
refuses instead, with :class:`~raftcore.raft.NotLeaderError` naming the leader). They return
once committed and applied on this replica, so a read here sees them. Reads:

- ``get_local(key)`` / ``get(key)``: this replica's state, as of its applied offset -- fast,
  possibly behind the leader;
- ``get(key, linearizable=True)``: asks the leader for its read index (the offset everything
  committed before the read is below), waits until this replica has applied up to it, then
  reads. On any replica: one that does not lead asks the leader (ReadIndex,
  :func:`raftcore.node.reads.read_index_anywhere`), as etcd's followers do;
- ``range(start, end)`` / ``prefix(p)``: the pairs in key order, from one read transaction
  of this replica's state;
- ``watch(prefix, from_offset)``: every change (offset, key, value; a None value is a delete)
  to the keys under ``prefix`` from a committed offset on, each once this replica has applied
  it; ``listener=`` gets every change the same way, called on the event loop.

Compare-and-set: ``compare_and_set(key, expected, new)`` writes ``new`` (None: deletes) only if
the key's value is ``expected`` (None: only if the key does not exist), and says whether it
did. The condition travels in the record's headers and is decided when the record is applied,
by every replica alike (:mod:`raftcore.statemachine.conditions`); a write that loses leaves
the key as it is everywhere.

Every write is a record whose key is the key and whose value the value (None deletes): a Kafka
consumer of the cluster reads the store's history (conditional writes with their condition
headers, refused ones too), and a Kafka producer may write to it.

A read never returns a value that fails its checksum: it raises
:class:`~raftcore.statemachine.DamagedValueError` instead, while the replica rebuilds its state
from its latest snapshot and its log (docs/statemachine.md, "A damaged state machine").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import format_data_dir
from raftcore.node.node import RaftNode
from raftcore.raft import Appended
from raftcore.statemachine.api import MAX_KEY_SIZE, StateMachineError
from raftcore.statemachine.conditions import condition_headers, is_conditional
from raftcore.statemachine.lmdb_kv import DEFAULT_MAP_SIZE, LmdbStateMachine

__all__ = ["Change", "KeyValueStore"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write: ``value`` None is a delete."""

    offset: int
    key: bytes
    value: bytes | None


def _check_key(key: Any) -> None:
    if not isinstance(key, bytes) or not 1 <= len(key) <= MAX_KEY_SIZE:
        raise ValueError(
            f"a key is 1..{MAX_KEY_SIZE} bytes, got "
            f"{type(key).__name__ if not isinstance(key, bytes) else f'{len(key)} bytes'}"
        )


class KeyValueStore:
    """A replica of a replicated key/value store; see the module docstring. A data directory
    that does not exist is created and formatted (a voter of ``config.voters`` if named
    there, else a replica that joins); an existing one must be formatted already."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        listener: Callable[[Change], object] | None = None,
    ) -> None:
        """``listener``: called on the event loop with every change applied on this replica
        from its applied offset at start on, in offset order (an exception it raises is logged
        and the next change still comes)."""
        self.config = config
        self.listener = listener
        self._listening: asyncio.Task[None] | None = None
        self._closed = False
        if not config.data_dir.exists():  # a directory it creates: formatted here, once
            format_data_dir(
                config.data_dir,
                cluster_id=config.cluster_id,
                node_id=config.node_id,
                initial_voters=list(config.voters) if config.node_id in config.voters else None,
            )
        self.state = LmdbStateMachine(
            config.data_dir / "state",
            map_size=map_size,
            sync=sync,
            log_prefix=f"[node {config.node_id}]",
        )
        self.node = RaftNode(config, state_machine=self.state)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def applied_offset(self) -> int:
        applied = self.node.applied_offset
        return self.state.applied_offset if applied is None else applied

    async def start(self) -> None:
        try:
            await self.node.start()
        except BaseException:
            self._closed = True
            self.state.close()
            raise
        if self.listener is not None:
            self._listening = asyncio.ensure_future(self._listen(self.listener))

    async def stop(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        try:
            await self.node.stop()
        finally:
            if not self._closed:  # a second stop is a no-op, as the node's
                self._closed = True
                self.state.close()

    async def _listen(self, listener: Callable[[Change], object]) -> None:
        try:
            async for change in self.watch(b""):
                try:
                    listener(change)
                except Exception:
                    logger.exception(
                        "[node %d] the listener failed on offset %d", self.node_id, change.offset
                    )
        except RaftcoreError:
            return  # the node stopped (by itself: wait_closed says why)

    async def __aenter__(self) -> KeyValueStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def wait_for_leader(self, timeout_s: float = 10.0) -> int:
        """The id of the leader, once this replica knows one that leads."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leader = self.node.leader_and_epoch
            # A restarted leader remembers its epoch but leads no more until re-elected.
            if leader.known and (leader.leader_id != self.node_id or self.node.is_leader()):
                return leader.leader_id  # type: ignore[return-value]
            if loop.time() >= deadline:
                raise TimeoutError(f"no leader known to node {self.node_id} in {timeout_s} s")
            await asyncio.sleep(0.02)

    # ---- writes (from any replica: forwarded to the leader) -----------------------------------

    async def put_many(
        self,
        pairs: Iterable[tuple[bytes, bytes | None]],
        *,
        timeout_s: float = 10.0,
        forward: bool = True,
    ) -> Appended:
        """Write the pairs as one batch (a None value deletes); returns once committed and
        applied here. ``forward=False``: NotLeaderError on a replica that does not lead.
        TimeoutError after ``timeout_s`` (a write sent may still be committed)."""
        batch = list(pairs)
        for key, value in batch:
            _check_key(key)
            if value is not None and not isinstance(value, bytes):
                raise ValueError(f"a value is bytes or None, got {type(value).__name__}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        appended = await self.node.write(batch, timeout_s=timeout_s, forward=forward)
        await self.node.wait_applied(appended.last_offset + 1, max(0.0, deadline - loop.time()))
        return appended

    async def put(
        self, key: bytes, value: bytes, *, timeout_s: float = 10.0, forward: bool = True
    ) -> int:
        """Set ``key``; returns the record's offset once committed and applied here."""
        if value is None:
            raise ValueError("put takes a value; use delete to remove a key")
        appended = await self.put_many([(key, value)], timeout_s=timeout_s, forward=forward)
        return appended.last_offset

    async def delete(self, key: bytes, *, timeout_s: float = 10.0, forward: bool = True) -> int:
        """Remove ``key`` (a record with a null value); returns its offset."""
        appended = await self.put_many([(key, None)], timeout_s=timeout_s, forward=forward)
        return appended.last_offset

    async def compare_and_set(
        self,
        key: bytes,
        expected: bytes | None,
        new: bytes | None,
        *,
        timeout_s: float = 10.0,
        forward: bool = True,
    ) -> bool:
        """Set ``key`` to ``new`` (None: delete it) only if its value is ``expected`` (None:
        only if it does not exist). Returns, once the write is committed and applied here,
        True if it was applied and False if the condition did not hold (the key is then as
        the writes before it left it, on every replica). Errors as :meth:`put_many`; a
        StateMachineError if this replica did not decide it (its state was rebuilt past the
        write meanwhile: read the key)."""
        _check_key(key)
        for name, value in (("expected", expected), ("new", new)):
            if value is not None and not isinstance(value, bytes):
                raise ValueError(f"{name} is bytes or None, got {type(value).__name__}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # The record is appended after this, so its offset is >= the applied offset now.
        outcomes = self.state.outcomes
        with outcomes.waiting(self.state.applied_offset):
            appended = await self.node.write(
                [(key, new, condition_headers(expected))], timeout_s=timeout_s, forward=forward
            )
            offset = appended.last_offset
            await self.node.wait_applied(offset + 1, max(0.0, deadline - loop.time()))
            verdict = outcomes.get(offset)
        if verdict is None:
            raise StateMachineError(
                f"[node {self.node_id}] the compare-and-set at offset {offset} was not decided "
                "on this replica (its state was rebuilt past it): read the key to learn whether "
                "it was applied"
            )
        return verdict

    async def wait_applied(self, offset: int, timeout_s: float | None = 10.0) -> None:
        """Until this replica has applied the write at ``offset`` (an offset a put returned,
        on any replica): a local read then sees it."""
        await self.node.wait_applied(offset + 1, timeout_s)

    # ---- reads ---------------------------------------------------------------------------------

    def get_local(self, key: bytes) -> bytes | None:
        """This replica's value of ``key``, as of its applied offset."""
        return self.state.get(key)

    async def get(
        self, key: bytes, *, linearizable: bool = False, timeout_s: float = 5.0
    ) -> bytes | None:
        """``key``'s value: this replica's (default), or, with ``linearizable``, one that
        reflects every write committed before the call (on any replica; see the module
        docstring)."""
        if linearizable:
            await self._linearizable(timeout_s)
        return self.state.get(key)

    async def _linearizable(self, timeout_s: float) -> None:
        index = await self.node.linearizable_read_index(timeout_s)
        await self.node.wait_applied(index, timeout_s)

    async def range(
        self,
        start: bytes = b"",
        end: bytes | None = None,
        *,
        limit: int | None = None,
        linearizable: bool = False,
        timeout_s: float = 5.0,
    ) -> list[tuple[bytes, bytes]]:
        """The pairs with ``start <= key < end`` (no ``end``: to the last key), in key order,
        at most ``limit``: this replica's (default), or after the leader's read index."""
        if linearizable:
            await self._linearizable(timeout_s)
        return self.state.range(start, end, limit=limit)

    async def prefix(
        self,
        prefix: bytes,
        *,
        limit: int | None = None,
        linearizable: bool = False,
        timeout_s: float = 5.0,
    ) -> list[tuple[bytes, bytes]]:
        """The pairs whose key starts with ``prefix``, in key order (as :meth:`range`)."""
        return await self.range(
            prefix,
            prefix_end(prefix),
            limit=limit,
            linearizable=linearizable,
            timeout_s=timeout_s,
        )

    def watch(self, prefix: bytes = b"", from_offset: int | None = None) -> AsyncIterator[Change]:
        """Every change to a key starting with ``prefix`` at or after ``from_offset`` (default:
        this replica's applied offset at the call, i.e. the changes still to come), in offset
        order, each once this replica has applied it. Ends with RaftcoreError when the node
        stops; OffsetOutOfRangeError names the log start when ``from_offset`` is below it (the
        older changes are in a snapshot, not in the log)."""
        start = self.applied_offset if from_offset is None else from_offset
        return self._changes(prefix, start)

    async def _changes(self, prefix: bytes, start: int) -> AsyncIterator[Change]:
        outcomes = self.state.outcomes
        with outcomes.waiting(start) as reader:
            async for record in self.node.records(start):
                reader.floor = record.offset  # the verdicts below are read (or not wanted)
                key = record.key
                if key is None or not key.startswith(prefix) or not 1 <= len(key) <= MAX_KEY_SIZE:
                    continue  # a key the state machine skips is no change either
                await self.node.wait_applied(record.offset + 1)
                if is_conditional(record.headers):  # a refused write changed nothing
                    verdict = outcomes.get(record.offset)
                    if verdict is None:
                        raise StateMachineError(
                            f"[node {self.node_id}] the verdict of the conditional write at "
                            f"offset {record.offset} is no longer known on this replica (it was "
                            "decided before the watch began or the replica restarted): watch "
                            "from a later offset"
                        )
                    if not verdict:
                        continue
                yield Change(record.offset, key, record.value)


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key above every key starting with ``prefix`` (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])
