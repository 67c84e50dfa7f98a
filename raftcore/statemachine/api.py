"""The state-machine contract: what :class:`~raftcore.node.RaftNode` promises a state machine,
and what it expects back (hashicorp/raft's FSM, Kafka's RaftClient.Listener).

A state machine holds the state that the committed records of the log build up. The node
drives it:

- ``apply(batches)``: committed data batches, in offset order, each record exactly once.
  Control batches (leader changes, snapshot markers) never reach it. After ``apply`` returns,
  ``applied_offset`` is ``batches[-1].last_offset + 1``. ``apply`` is atomic: all of
  ``batches`` take effect, or it raises and none does. An exception stops the node's applying
  for good (see :mod:`raftcore.node.applier`): nothing is skipped and nothing is retried in
  that process.
- ``applied_offset``: the exclusive end offset of what was applied -- every committed record
  below it is in the state, none at or above it. A fresh state machine has 0. A durable state
  machine keeps it with its state (in the same transaction), and a restarted node resumes
  from it: it never replays the log from 0 and never applies a record twice.
- ``snapshot(writer)``: write the whole state, as of one applied offset, to ``writer``. It
  first calls ``writer.start(end_offset)`` with the applied offset of the state it is about
  to write, then ``writer.append(pairs)`` any number of times; the caller freezes the writer.
  It may run while the node goes on applying (a state machine that cannot allow that takes a
  lock or a copy). Returns the end offset.
- ``restore(reader)``: replace the whole state by the snapshot's (``reader`` yields lists of
  ``(key, value)`` pairs) and set ``applied_offset`` to ``reader.end_offset``. Atomic, like
  ``apply``. The node calls it between two applies, never during one.

Records are key/value pairs (the Kafka record's key and value); a null value deletes the key.
A key is 1 to :data:`MAX_KEY_SIZE` bytes; records with another key (null, empty, too long)
are skipped with a warning naming their offset by every replica alike, so replicas never
diverge over them (:class:`raftcore.records.KvPairs`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from raftcore.errors import RaftcoreError
from raftcore.records import DEFAULT_MAX_KEY_SIZE

if TYPE_CHECKING:
    from raftcore.raft.listener import CommittedBatch

__all__ = [
    "MAX_KEY_SIZE",
    "Pair",
    "SnapshotReader",
    "SnapshotWriter",
    "StateMachine",
    "StateMachineError",
    "StateMachineFullError",
]

MAX_KEY_SIZE = DEFAULT_MAX_KEY_SIZE  # LMDB's compiled-in limit (mdb_env_get_maxkeysize)

Pair = tuple[bytes, "bytes | None"]


class StateMachineError(RaftcoreError):
    """A state machine refused or failed an operation; the message names the offsets."""


class StateMachineFullError(StateMachineError):
    """The state machine's storage is full (LMDB's map size); nothing of the failed apply was
    kept. Reopen it with a larger size and restart: applying resumes at the applied offset."""


@runtime_checkable
class SnapshotWriter(Protocol):
    """Where ``snapshot`` writes the state. The store's writer (``raftcore.snapshot``) batches
    the pairs into record batches; the in-memory one keeps them
    (:class:`raftcore.statemachine.memory.MemorySnapshotWriter`)."""

    def start(self, end_offset: int) -> None:
        """The state about to be written is the one as of ``end_offset`` (exclusive). Called
        once, before the first ``append``: the store names the snapshot after it."""
        ...

    def append(self, records: Sequence[Pair]) -> None:
        """Add (key, value) pairs, in the state machine's order (LMDB: key order)."""
        ...


@runtime_checkable
class SnapshotReader(Protocol):
    """A snapshot to ``restore``: iterating it yields lists (chunks) of (key, value) pairs in
    the snapshot's order; ``end_offset`` is the offset the state is as of."""

    @property
    def end_offset(self) -> int: ...

    def __iter__(self) -> Iterator[Sequence[Pair]]: ...


@runtime_checkable
class StateMachine(Protocol):
    """See the module docstring for the contract."""

    @property
    def applied_offset(self) -> int: ...

    def apply(self, batches: list[CommittedBatch]) -> None: ...

    def snapshot(self, writer: SnapshotWriter) -> int: ...

    def restore(self, reader: SnapshotReader) -> None: ...
