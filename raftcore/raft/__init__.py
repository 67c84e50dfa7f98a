"""The Raft core: KIP-595 / KIP-279 as a pure, deterministic state machine.

Public names: :class:`RaftCore`, :class:`QuorumConfig`, the messages, the value types, the
log protocol, the quorum-state stores; and, loaded from :mod:`raftcore.testing`, the in-memory
log and quorum-state store of the simulation and the tests.

Each public name is loaded from its module when it is first asked for (PEP 562), so that
importing one small module of this package (``raftcore.raft.values``, ``raftcore.raft.voters``)
does not load the whole core: ``from raftcore.raft import RaftCore`` loads ``raftcore.raft.core``,
``import raftcore.raft.voters`` does not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftcore.raft.config import QuorumConfig
    from raftcore.raft.core import (
        CommittedBatch,
        Listener,
        LogWriteError,
        NotLeaderError,
        Output,
        RaftCore,
        RaftInvariantError,
    )
    from raftcore.raft.messages import (
        BeginQuorumEpochRequest,
        BeginQuorumEpochResponse,
        EndQuorumEpochRequest,
        EndQuorumEpochResponse,
        FetchRequest,
        FetchResponse,
        Outbound,
        VoteRequest,
        VoteResponse,
    )
    from raftcore.raft.pending import Appended, AppendOutcome
    from raftcore.raft.quorum_store import FileQuorumStateStore
    from raftcore.raft.replicated_log import (
        ReplicatedLog,
        truncate_to_end_offset,
        validate_offset_and_epoch,
    )
    from raftcore.raft.values import (
        ElectionState,
        LeaderAndEpoch,
        OffsetAndEpoch,
        ValidOffsetAndEpoch,
    )
    from raftcore.testing import InMemoryLog, MemoryQuorumStateStore

# Public name -> the module of this package that defines it, or the full name of a module
# elsewhere (the imports above, for the type checker).
_HOMES = {
    "QuorumConfig": "config",
    "CommittedBatch": "core",
    "Listener": "core",
    "LogWriteError": "core",
    "NotLeaderError": "core",
    "Output": "core",
    "RaftCore": "core",
    "RaftInvariantError": "core",
    "InMemoryLog": "raftcore.testing.memory_log",
    "BeginQuorumEpochRequest": "messages",
    "BeginQuorumEpochResponse": "messages",
    "EndQuorumEpochRequest": "messages",
    "EndQuorumEpochResponse": "messages",
    "FetchRequest": "messages",
    "FetchResponse": "messages",
    "Outbound": "messages",
    "VoteRequest": "messages",
    "VoteResponse": "messages",
    "Appended": "pending",
    "AppendOutcome": "pending",
    "FileQuorumStateStore": "quorum_store",
    "MemoryQuorumStateStore": "raftcore.testing.memory_quorum_store",
    "ReplicatedLog": "replicated_log",
    "truncate_to_end_offset": "replicated_log",
    "validate_offset_and_epoch": "replicated_log",
    "ElectionState": "values",
    "LeaderAndEpoch": "values",
    "OffsetAndEpoch": "values",
    "ValidOffsetAndEpoch": "values",
}

__all__ = [
    "AppendOutcome",
    "Appended",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "CommittedBatch",
    "ElectionState",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "FetchRequest",
    "FetchResponse",
    "FileQuorumStateStore",
    "InMemoryLog",
    "LeaderAndEpoch",
    "Listener",
    "LogWriteError",
    "MemoryQuorumStateStore",
    "NotLeaderError",
    "OffsetAndEpoch",
    "Outbound",
    "Output",
    "QuorumConfig",
    "RaftCore",
    "RaftInvariantError",
    "ReplicatedLog",
    "ValidOffsetAndEpoch",
    "VoteRequest",
    "VoteResponse",
    "truncate_to_end_offset",
    "validate_offset_and_epoch",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        # Not a public name: ``from raftcore.raft import fetch`` then imports the submodule.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = home if "." in home else f"{__name__}.{home}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
