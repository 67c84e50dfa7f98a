"""An embedded, replicated key/value store: one :class:`~raftcore.node.RaftNode` driving one
:class:`~raftcore.statemachine.LmdbStateMachine` (in ``<data-dir>/state/``).

Writes go through the leader's log (``put``, ``delete``, ``put_many``) and return once they
are committed and applied on this replica, so a read here sees them. Reads:

- ``get_local(key)`` / ``get(key)``: this replica's state, as of its applied offset -- fast,
  possibly behind the leader;
- ``get(key, linearizable=True)``: asks the leader for its read index (the offset everything
  committed before the read is below), waits until this replica has applied up to it, then
  reads. Leader only: elsewhere it raises
  :class:`~raftcore.node.reads.NotLeaderForReadError` naming the leader and its endpoint.

A read never returns a value that fails its checksum: it raises
:class:`~raftcore.statemachine.DamagedValueError` instead, while the replica rebuilds its state
from its latest snapshot and its log (docs/statemachine.md, "A damaged state machine").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from raftcore.node.config import NodeConfig
from raftcore.node.node import RaftNode
from raftcore.raft import Appended
from raftcore.statemachine.api import MAX_KEY_SIZE
from raftcore.statemachine.lmdb_kv import DEFAULT_MAP_SIZE, LmdbStateMachine

__all__ = ["KeyValueStore"]


def _check_key(key: Any) -> None:
    if not isinstance(key, bytes) or not 1 <= len(key) <= MAX_KEY_SIZE:
        raise ValueError(
            f"a key is 1..{MAX_KEY_SIZE} bytes, got "
            f"{type(key).__name__ if not isinstance(key, bytes) else f'{len(key)} bytes'}"
        )


class KeyValueStore:
    """A replica of a replicated key/value store; see the module docstring."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
    ) -> None:
        self.config = config
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
            self.state.close()
            raise

    async def stop(self) -> None:
        try:
            await self.node.stop()
        finally:
            self.state.close()

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

    # ---- writes (leader only; NotLeaderError names the leader) -------------------------------

    async def put_many(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> Appended:
        """Write the pairs as one batch (a None value deletes); returns once committed and
        applied here."""
        batch = list(pairs)
        for key, value in batch:
            _check_key(key)
            if value is not None and not isinstance(value, bytes):
                raise ValueError(f"a value is bytes or None, got {type(value).__name__}")
        appended = await self.node.append(batch, wait=True)
        await self.node.wait_applied(appended.last_offset + 1)
        return appended

    async def put(self, key: bytes, value: bytes) -> int:
        """Set ``key``; returns the record's offset once committed and applied here."""
        if value is None:
            raise ValueError("put takes a value; use delete to remove a key")
        return (await self.put_many([(key, value)])).last_offset

    async def delete(self, key: bytes) -> int:
        """Remove ``key`` (a record with a null value); returns its offset."""
        return (await self.put_many([(key, None)])).last_offset

    # ---- reads ---------------------------------------------------------------------------------

    def get_local(self, key: bytes) -> bytes | None:
        """This replica's value of ``key``, as of its applied offset."""
        return self.state.get(key)

    async def get(
        self, key: bytes, *, linearizable: bool = False, timeout_s: float = 5.0
    ) -> bytes | None:
        """``key``'s value: this replica's (default), or, with ``linearizable``, one that
        reflects every write committed before the call (leader only; see the module
        docstring)."""
        if linearizable:
            index = await self.node.read_index(timeout_s)
            await self.node.wait_applied(index, timeout_s)
        return self.state.get(key)
