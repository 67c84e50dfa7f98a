"""Metadata (key 3): the brokers (the voters in force, the leader if it is not one any more,
and this node), and for each topic asked for (all of them when none is named) its partitions,
their leader and epoch and their replicas. Topics are asked for by name, or from v12 by id
with a null name (KIP-516)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka.invalid_request import InvalidRequest
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.endpoints import Endpoint
    from raftcore.kafka.partition import Broker

__all__ = ["metadata"]


def metadata(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.METADATA).cls
    wanted = None if body.topics is None else [_asked_for(broker, t, version) for t in body.topics]
    names = broker.topics() if wanted is None else wanted
    topics = []
    controller = -1
    for name in names:
        partitions = [] if name is None else broker.topic_partitions(name)
        if not partitions:
            error = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(cls.MetadataResponseTopic(error_code=error, name=name, partitions=[]))
            continue
        entries = []
        for partition in partitions:
            leader = partition.leader_hint()  # a resigned leader names nobody: clients ask again
            voters = partition.replicas()
            entries.append(
                cls.MetadataResponsePartition(
                    error_code=Errors.NONE if leader.known else Errors.LEADER_NOT_AVAILABLE,
                    partition_index=partition.index,
                    leader_id=leader.leader_id if leader.known else -1,
                    leader_epoch=leader.epoch,
                    replica_nodes=voters,
                    isr_nodes=voters,
                    offline_replicas=[],
                )
            )
        topics.append(
            cls.MetadataResponseTopic(
                error_code=Errors.NONE,
                name=name,
                topic_id=partitions[0].topic_id,
                is_internal=False,
                partitions=entries,
            )
        )
    if broker.partitions:  # the controller: the leader of the node's (first) Raft group
        hint = broker.partitions[0].leader_hint()
        controller = hint.leader_id if hint.leader_id is not None else -1
    return cls(
        throttle_time_ms=0,
        brokers=_brokers(broker, cls.MetadataResponseBroker),
        cluster_id=broker.cluster_id,
        controller_id=controller,
        topics=topics,
    )


def _brokers(broker: Broker, cls: Any) -> list[Any]:
    """The voters (from the voter set in force), the leader if it is not one any more (it
    removed itself and has not resigned yet), and this node (an observer answers too)."""
    known: dict[int, Endpoint] = {}
    for partition in broker.partitions:
        known.update(partition.replica_endpoints())
        leader = partition.leader_and_epoch()
        for extra in (leader.leader_id if leader.known else None, broker.node_id):
            if extra is not None and extra not in known:
                ep = partition.endpoint_of(extra)
                if ep is not None:
                    known[extra] = ep
    return [
        cls(node_id=i, host=ep.host, port=ep.port, rack=None) for i, ep in sorted(known.items())
    ]


def _asked_for(broker: Broker, topic: Any, version: int) -> str | None:
    """The name of a topic asked for by name, or from v12 by id with a null name (KIP-516;
    None for an unknown id). Before v12 a null name is an invalid request, as in Kafka."""
    if topic.name is not None:
        return topic.name  # type: ignore[no-any-return]
    if version < 12:
        raise InvalidRequest(f"Metadata v{version} with a null topic name")
    return broker.topic_named_by(bytes(topic.topic_id))
