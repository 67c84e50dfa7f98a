"""State machines: the state the committed records build up (see :mod:`.api` for the contract
a :class:`~raftcore.node.RaftNode` keeps with them).

- :class:`LmdbStateMachine`: the default, a durable key/value store in LMDB;
- :class:`DictStateMachine`: the same in a dict (not durable; the reference in tests);
- :class:`MemorySnapshotWriter` / :class:`MemorySnapshotReader`: snapshots in memory;
- :class:`StoreSnapshotReader`: a snapshot of the log's store, read for ``restore``;
- :class:`DamagedValueError`: a stored value failed its checksum (:mod:`.checksums`).
"""

from raftcore.statemachine.api import (
    MAX_KEY_SIZE,
    Pair,
    SnapshotReader,
    SnapshotWriter,
    StateMachine,
    StateMachineError,
    StateMachineFullError,
)
from raftcore.statemachine.checksums import DamagedValueError
from raftcore.statemachine.lmdb_kv import DEFAULT_MAP_SIZE, LmdbStateMachine
from raftcore.statemachine.memory import (
    DictStateMachine,
    MemorySnapshotReader,
    MemorySnapshotWriter,
)
from raftcore.statemachine.store_snapshots import StoreSnapshotReader

__all__ = [
    "DEFAULT_MAP_SIZE",
    "MAX_KEY_SIZE",
    "DamagedValueError",
    "DictStateMachine",
    "LmdbStateMachine",
    "MemorySnapshotReader",
    "MemorySnapshotWriter",
    "Pair",
    "SnapshotReader",
    "SnapshotWriter",
    "StateMachine",
    "StateMachineError",
    "StateMachineFullError",
    "StoreSnapshotReader",
]
