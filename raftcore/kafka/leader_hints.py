"""KIP-951's leader hints: the CurrentLeader of a partition answered NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH, and the NodeEndpoints of that leader, so a client moves there at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftcore.kafka.partition import Partition

__all__ = ["current_leader", "node_endpoints"]


def current_leader(partition: Partition, cls: Any) -> Any:
    """The leader clients should go to, as a message's LeaderIdAndEpoch struct ``cls``: -1 for
    none known (a resigned leader names nobody: clients ask again)."""
    leader = partition.leader_hint()
    return cls(leader_id=leader.leader_id if leader.known else -1, leader_epoch=leader.epoch)


def node_endpoints(partition: Partition, cls: Any) -> list[Any]:
    """The endpoint of the leader clients should go to, as entries of a message's NodeEndpoint
    struct ``cls`` (Rack, where the message has it, stays null); none when unknown."""
    leader = partition.leader_hint()
    if not leader.known:
        return []
    ep = partition.endpoint_of(leader.leader_id)  # type: ignore[arg-type]
    if ep is None:
        return []
    return [cls(node_id=leader.leader_id, host=ep.host, port=ep.port)]
