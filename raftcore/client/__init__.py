"""raftcore's asyncio clients: a producer and a consumer that speak Kafka's protocol and follow
leader changes as KIP-951 describes, and DescribeQuorum."""

from raftcore.client.admin import QuorumInfo, ReplicaInfo, describe_quorum, format_quorum
from raftcore.client.cluster import ClusterClient, NoLeaderError
from raftcore.client.consumer import ConsumeError, Consumer
from raftcore.client.producer import OutcomeUnknownError, ProduceError, Producer

__all__ = [
    "ClusterClient",
    "ConsumeError",
    "Consumer",
    "NoLeaderError",
    "OutcomeUnknownError",
    "ProduceError",
    "Producer",
    "QuorumInfo",
    "ReplicaInfo",
    "describe_quorum",
    "format_quorum",
]
