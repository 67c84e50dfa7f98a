"""CreateTopics (key 19), DeleteTopics (key 20) and CreatePartitions (key 37), answered by the
controller (the metadata leader) once the records that carry them out are committed to the
metadata log and applied on the controller (:mod:`raftcore.kafka.cluster`).

Each topic of a request is checked and written on its own (one batch of records per topic), so
one refused topic does not hold back the others, as in Kafka. A node that is not the
controller answers NOT_CONTROLLER for every topic: clients find the controller in Metadata's
``controller_id`` and send it there. ``validate_only`` checks against the image and writes
nothing. The node's own topic (``NodeConfig.topic``) and ``__cluster_metadata`` are not created,
deleted or grown here: their partitions are fixed when the data directory is formatted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.kafka.cluster import NotControllerError
from raftcore.kafka.invalid_request import InvalidRequest
from raftcore.metadata import (
    MetadataError,
    MetadataImage,
    MetadataRecord,
    PartitionRecord,
    TopicRecord,
)
from raftcore.metadata.controller import create_partitions as partitions_records
from raftcore.metadata.controller import create_topic, delete_topic
from raftcore.protocol.api import ApiKey, response_spec
from raftcore.raft import NotLeaderError

if TYPE_CHECKING:
    from collections.abc import Callable

    from raftcore.kafka.cluster import Cluster
    from raftcore.kafka.partition import Broker

DYNAMIC_TOPIC_CONFIG = 1  # Kafka's ConfigSource of a topic's own config

__all__ = ["create_partitions", "create_topics", "delete_topics"]

METADATA_TOPIC = "__cluster_metadata"
_DEFAULT_TIMEOUT_S = 30.0


def _cluster(broker: Broker) -> Cluster:
    if broker.cluster is None:
        raise InvalidRequest("this node keeps no cluster metadata")
    return broker.cluster  # type: ignore[no-any-return]


def _timeout_s(timeout_ms: int) -> float:
    return timeout_ms / 1000 if timeout_ms > 0 else _DEFAULT_TIMEOUT_S


def _fixed_topics(broker: Broker) -> set[str]:
    """The topics whose partitions are fixed at format: the node's own and the metadata's."""
    if broker.own_topic is not None:
        return {broker.own_topic, METADATA_TOPIC}
    cluster = broker.cluster
    created = set() if cluster is None else set(cluster.image.topic_names())
    return {t for t in broker.topics() if t not in created} | {METADATA_TOPIC}


def _not_controller(cluster: Cluster) -> tuple[int, str]:
    controller = cluster.controller_id()
    where = "no controller is known yet" if controller < 0 else f"node {controller} is"
    return Errors.NOT_CONTROLLER, f"this node is not the controller ({where})"


async def _write(
    cluster: Cluster,
    decide: Callable[[MetadataImage], list[MetadataRecord]],
    validate_only: bool,
    timeout_s: float,
) -> tuple[int, str | None, list[MetadataRecord]]:
    """(error, message, records) of one change: checked (and written unless
    ``validate_only``) by the controller."""
    if not cluster.is_controller():
        return (*_not_controller(cluster), [])
    try:
        if validate_only:
            return Errors.NONE, None, decide(cluster.image)
        return Errors.NONE, None, await cluster.write(decide, timeout_s)
    except MetadataError as exc:
        return exc.error, exc.reason, []
    except NotLeaderError:
        return (*_not_controller(cluster), [])
    except TimeoutError:
        return Errors.REQUEST_TIMED_OUT, "not committed in time (it may still be)", []
    except NotControllerError:
        return (*_not_controller(cluster), [])
    except RaftcoreError as exc:  # the node stops
        return Errors.REQUEST_TIMED_OUT, str(exc), []


async def create_topics(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.CREATE_TOPICS).cls
    cluster = _cluster(broker)
    names = [t.name for t in body.topics]
    fixed = _fixed_topics(broker)
    answers = []
    for topic in body.topics:
        result = cls.CreatableTopicResult(
            name=topic.name,
            topic_id=bytes(16),
            error_code=Errors.NONE,
            error_message=None,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
        answers.append(result)
        if names.count(topic.name) > 1:
            result.error_code = Errors.INVALID_REQUEST
            result.error_message = f"topic {topic.name} is named more than once in the request"
            continue
        if topic.name in fixed:
            result.error_code = Errors.TOPIC_ALREADY_EXISTS
            result.error_message = (
                f"topic {topic.name} exists: its partitions are fixed when the data directory "
                "is formatted"
            )
            continue
        if topic.assignments:
            result.error_code = Errors.INVALID_REPLICA_ASSIGNMENT
            result.error_message = (
                f"topic {topic.name}: raftcore places replicas itself; give partitions and a "
                "replication factor, not an assignment"
            )
            continue
        configs = {c.name: c.value for c in topic.configs or ()}
        nulls = sorted(k for k, v in configs.items() if v is None)
        if nulls:
            result.error_code = Errors.INVALID_CONFIG
            result.error_message = f"topic {topic.name}: config {nulls[0]} has no value"
            continue
        error, message, records = await _write(
            cluster,
            _creator(cluster, topic.name, topic.num_partitions, topic.replication_factor, configs),
            bool(getattr(body, "validate_only", False)),
            _timeout_s(body.timeout_ms),
        )
        result.error_code, result.error_message = error, message
        made = [r for r in records if isinstance(r, TopicRecord)]
        placed = [r for r in records if isinstance(r, PartitionRecord)]
        if made and placed:
            result.topic_id = made[0].topic_id.raw
            result.num_partitions = len(placed)
            result.replication_factor = len(placed[0].replicas)
            # the topic's configs (v5+), as Kafka answers a created topic: never null there
            # (Kafka's own kafka-topics --create reads them, and failed on a null)
            result.configs = [
                cls.CreatableTopicConfigs(
                    name=k,
                    value=v,
                    read_only=False,
                    config_source=DYNAMIC_TOPIC_CONFIG,
                    is_sensitive=False,
                )
                for k, v in sorted(configs.items())
            ]
    return cls(throttle_time_ms=0, topics=answers)


def _creator(
    cluster: Cluster, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
) -> Callable[[MetadataImage], list[MetadataRecord]]:
    def decide(image: MetadataImage) -> list[MetadataRecord]:
        return create_topic(
            image,
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
            nodes=cluster.node_ids(),
            rng=cluster.rng,
        )

    return decide


def _deleter(name: str) -> Callable[[MetadataImage], list[MetadataRecord]]:
    return lambda image: delete_topic(image, name)


def _grower(
    cluster: Cluster, name: str, count: int
) -> Callable[[MetadataImage], list[MetadataRecord]]:
    return lambda image: partitions_records(image, name, count, cluster.node_ids())


async def delete_topics(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.DELETE_TOPICS).cls
    cluster = _cluster(broker)
    if version >= 6:
        asked = [(t.name, bytes(t.topic_id)) for t in body.topics]
    else:
        asked = [(name, bytes(16)) for name in body.topic_names]
    fixed = _fixed_topics(broker)
    answers = []
    for asked_name, topic_id in asked:
        name = asked_name
        result = cls.DeletableTopicResult(
            name=name, topic_id=topic_id, error_code=Errors.NONE, error_message=None
        )
        answers.append(result)
        if name is None:  # by id (KIP-516)
            found = next((t for t in cluster.image.topics() if t.topic_id.raw == topic_id), None)
            if found is None:
                result.error_code = Errors.UNKNOWN_TOPIC_ID
                result.error_message = f"no topic has id {topic_id.hex()}"
                continue
            name = result.name = found.name
        if name in fixed:
            result.error_code = Errors.INVALID_REQUEST
            result.error_message = (
                f"topic {name} is fixed when the data directory is formatted; it is not deleted"
            )
            continue
        error, message, _ = await _write(
            cluster,
            _deleter(name),
            False,
            _timeout_s(body.timeout_ms),
        )
        result.error_code, result.error_message = error, message
        if error == Errors.NONE and version >= 6:
            result.topic_id = topic_id
    return cls(throttle_time_ms=0, responses=answers)


async def create_partitions(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.CREATE_PARTITIONS).cls
    cluster = _cluster(broker)
    fixed = _fixed_topics(broker)
    answers = []
    for topic in body.topics:
        result = cls.CreatePartitionsTopicResult(
            name=topic.name, error_code=Errors.NONE, error_message=None
        )
        answers.append(result)
        if topic.name in fixed:
            result.error_code = Errors.INVALID_REQUEST
            result.error_message = (
                f"topic {topic.name}: its partition count is fixed when the data directory is "
                "formatted"
            )
            continue
        if topic.assignments:
            result.error_code = Errors.INVALID_REPLICA_ASSIGNMENT
            result.error_message = f"topic {topic.name}: raftcore places replicas itself"
            continue
        error, message, _ = await _write(
            cluster,
            _grower(cluster, topic.name, topic.count),
            bool(body.validate_only),
            _timeout_s(body.timeout_ms),
        )
        result.error_code, result.error_message = error, message
    return cls(throttle_time_ms=0, results=answers)
