"""The names a service embedding raftcore needs, from one import path::

    from raftcore.embed import Endpoint, KeyValueStore, NodeConfig, NotLeaderError

A replica is a :class:`RaftNode` (a replicated log: ``write``, ``read``, ``records``) or a
:class:`KeyValueStore` (a node and an LMDB state machine: ``put``, ``get``, ``range``,
``prefix``, ``watch``, ``compare_and_set``). See docs/embedding.md.
"""

from raftcore.endpoints import Endpoint, parse_endpoint, parse_voters
from raftcore.errors import NodeFailedError, OffsetOutOfRangeError, RaftcoreError
from raftcore.kv import Change, KeyValueStore
from raftcore.node.config import NodeConfig
from raftcore.node.forwarding import ForwardError
from raftcore.node.node import RaftNode
from raftcore.node.reads import NotLeaderForReadError
from raftcore.raft import Appended, CommittedBatch, LeaderAndEpoch, NotLeaderError
from raftcore.records import Record
from raftcore.statemachine.api import StateMachine, StateMachineError
from raftcore.statemachine.lmdb_kv import LmdbStateMachine

__all__ = [
    "Appended",
    "Change",
    "CommittedBatch",
    "Endpoint",
    "ForwardError",
    "KeyValueStore",
    "LeaderAndEpoch",
    "LmdbStateMachine",
    "NodeConfig",
    "NodeFailedError",
    "NotLeaderError",
    "NotLeaderForReadError",
    "OffsetOutOfRangeError",
    "RaftNode",
    "RaftcoreError",
    "Record",
    "StateMachine",
    "StateMachineError",
    "parse_endpoint",
    "parse_voters",
]
