"""A raftcore node: the Raft core bound to the segmented log, the quorum-state file and Kafka's
protocol over asyncio TCP."""

from raftcore.endpoints import Endpoint, parse_endpoint, parse_voters
from raftcore.node.config import NodeConfig
from raftcore.node.data_dir import format_data_dir
from raftcore.node.node import RaftNode

__all__ = [
    "Endpoint",
    "NodeConfig",
    "RaftNode",
    "format_data_dir",
    "parse_endpoint",
    "parse_voters",
]
