"""Metadata (key 3): the brokers (the voters in force, the leader if it is not one any more,
and this node), the controller (the metadata group's leader), and for each topic asked for
(all of them when none is named: the node's own and every topic of the metadata image) its
partitions, their leader and epoch and their replicas. Topics are asked for by name, or from
v12 by id with a null name (KIP-516)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka.invalid_request import InvalidRequest
from raftcore.metadata.topic_id import TopicId
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.raft.values import LeaderAndEpoch
from raftcore.topic_partition import TopicPartition

if TYPE_CHECKING:
    from raftcore.endpoints import Endpoint
    from raftcore.kafka.partition import Broker
    from raftcore.metadata import TopicImage

_NO_LEADER = LeaderAndEpoch(None, -1)

__all__ = ["metadata"]


NODE_CLIENT_ID = "raftcore-replica"  # the client id of a node's own requests (raft_wire)


def metadata(broker: Broker, body: Any, version: int, *, local_only: bool = False) -> Any:
    """The answer; a coroutine when the leaders of partitions of created topics that this node
    has no replica of are asked of their replicas first (:class:`~.cluster.LeaderLookup`).
    ``local_only``: a node asks (its client id is NODE_CLIENT_ID), answered from what this node
    knows, so that two nodes never ask each other back."""
    cluster = broker.cluster
    image = None if cluster is None else cluster.image
    wanted = None if body.topics is None else [_asked_for(broker, t, version) for t in body.topics]
    names: list[str | None]
    if wanted is not None:
        names = list(wanted)
    elif image is None:
        names = list(broker.topics())
    else:
        names = [*dict.fromkeys([*_own_topics(broker), *image.topic_names()])]
    remote: dict[TopicPartition, tuple[int, ...]] = {}
    if image is not None and not local_only and broker.leader_lookup is not None:
        for name in names:
            topic = None if name is None else image.topic(name)
            if topic is None:
                continue
            for p in topic.partitions:
                if broker.partition(topic.name, p.partition_id) is None:
                    remote[TopicPartition(topic.name, p.partition_id)] = p.replicas
    if remote:
        return _answer_after_lookup(broker, version, names, remote)
    return _answer(broker, version, names, {})


async def _answer_after_lookup(
    broker: Broker,
    version: int,
    names: list[str | None],
    remote: dict[TopicPartition, tuple[int, ...]],
) -> Any:
    leaders = await broker.leader_lookup.leaders(remote)
    return _answer(broker, version, names, leaders)


def _answer(
    broker: Broker,
    version: int,
    names: list[str | None],
    leaders: dict[TopicPartition, LeaderAndEpoch],
) -> Any:
    cls = response_spec(ApiKey.METADATA).cls
    cluster = broker.cluster
    image = None if cluster is None else cluster.image
    topics = []
    for name in names:
        created = None if name is None or image is None else image.topic(name)
        if created is not None:
            topics.append(_created_topic(broker, cls, created, leaders))
            continue
        partitions = [] if name not in _own_topics(broker) else broker.topic_partitions(name)
        if not partitions:
            error = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(cls.MetadataResponseTopic(error_code=error, name=name, partitions=[]))
            continue
        entries = []
        for partition in partitions:
            leader = partition.leader_hint()  # a resigned leader names nobody: clients ask again
            voters = partition.replicas()
            entries.append(_partition(cls, partition.index, leader, voters, voters))
        topics.append(
            cls.MetadataResponseTopic(
                error_code=Errors.NONE,
                name=name,
                topic_id=partitions[0].topic_id,
                is_internal=False,
                partitions=entries,
            )
        )
    controller = -1
    if cluster is not None:  # the controller: the metadata group's leader
        controller = cluster.controller_id()
    elif broker.partitions:  # else the leader of the node's (first) Raft group
        hint = broker.partitions[0].leader_hint()
        controller = hint.leader_id if hint.leader_id is not None else -1
    return cls(
        throttle_time_ms=0,
        brokers=_brokers(broker, cls.MetadataResponseBroker),
        cluster_id=broker.cluster_id,
        controller_id=controller,
        topics=topics,
    )


def _own_topics(broker: Broker) -> list[str]:
    """The topics served by the node's own groups: all of its partitions' without the cluster
    metadata, else the node's own topic alone (the others are the image's)."""
    if broker.cluster is None or broker.own_topic is None:
        return broker.topics()
    return [broker.own_topic]


def _partition(
    cls: Any, index: int, leader: LeaderAndEpoch, replicas: list[int], isr: list[int]
) -> Any:
    return cls.MetadataResponsePartition(
        error_code=Errors.NONE if leader.known else Errors.LEADER_NOT_AVAILABLE,
        partition_index=index,
        leader_id=leader.leader_id if leader.known else -1,
        leader_epoch=leader.epoch,
        replica_nodes=replicas,
        isr_nodes=isr,
        offline_replicas=[],
    )


def _created_topic(
    broker: Broker, cls: Any, topic: TopicImage, leaders: dict[TopicPartition, LeaderAndEpoch]
) -> Any:
    """A topic created through the metadata: its replicas as the image places them (the
    preferred leader first), its leaders as this node's replicas know them or as the replicas
    asked said. The in-sync replicas are given as the replicas: not tracked yet."""
    entries = []
    for p in topic.partitions:
        local = broker.partition(topic.name, p.partition_id)
        if local is not None:
            leader = local.leader_hint()
        else:
            leader = leaders.get(TopicPartition(topic.name, p.partition_id), _NO_LEADER)
        replicas = list(p.replicas)
        entries.append(_partition(cls, p.partition_id, leader, replicas, replicas))
    return cls.MetadataResponseTopic(
        error_code=Errors.NONE,
        name=topic.name,
        topic_id=topic.topic_id.raw,
        is_internal=False,
        partitions=entries,
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
    named = broker.topic_named_by(bytes(topic.topic_id))
    if named is None and broker.cluster is not None:
        found = broker.cluster.image.topic_by_id(TopicId(bytes(topic.topic_id)))
        named = None if found is None else found.name
    return named
