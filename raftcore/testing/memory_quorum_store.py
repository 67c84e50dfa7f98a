"""The quorum-state store of the simulation and the tests: the last state written, in memory
(:class:`~raftcore.raft.quorum_store.FileQuorumStateStore` is the node's)."""

from __future__ import annotations

import errno

from raftcore.raft.values import ElectionState

__all__ = ["MemoryQuorumStateStore"]


class MemoryQuorumStateStore:
    """The simulation's store: what was written survives a crash of the node (the write
    would have been fsynced before returning). ``disk_full``: every write raises
    OSError(ENOSPC) and changes nothing, as the file's does on a full disk."""

    def __init__(self) -> None:
        self._state: ElectionState | None = None
        self.writes = 0
        self.disk_full = False

    def read(self) -> ElectionState | None:
        return self._state

    def write(self, state: ElectionState) -> None:
        if self.disk_full:
            raise OSError(errno.ENOSPC, "No space left on device (the in-memory quorum-state)")
        self._state = state
        self.writes += 1

    def clear(self) -> None:
        self._state = None
