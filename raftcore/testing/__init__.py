"""In-memory stand-ins for the simulation and the tests: they keep the same rules as the
durable pieces they replace, without a disk.

- :class:`InMemoryLog` (:mod:`.memory_log`): a ReplicatedLog whose ``crash()`` loses what was
  not flushed, with its snapshots as bytes (:mod:`.memory_snapshot`);
- :class:`MemoryQuorumStateStore` (:mod:`.memory_quorum_store`): the quorum-state store.

They sit above the Raft core's values and protocols (they import those, never the core nor the
node). ``from raftcore.raft import InMemoryLog, MemoryQuorumStateStore`` loads them from here.
"""

from raftcore.testing.memory_log import InMemoryLog
from raftcore.testing.memory_quorum_store import MemoryQuorumStateStore

__all__ = ["InMemoryLog", "MemoryQuorumStateStore"]
