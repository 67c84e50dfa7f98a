"""The Raft core: KIP-595 / KIP-279 as a pure, deterministic state machine.

Public names: :class:`RaftCore`, :class:`QuorumConfig`, the messages, the value types, the
log protocol and its in-memory implementation, the quorum-state stores.
"""

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
from raftcore.raft.memory_log import InMemoryLog
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
from raftcore.raft.quorum_store import FileQuorumStateStore, MemoryQuorumStateStore
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
