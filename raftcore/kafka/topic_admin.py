"""DescribeConfigs (key 32) and CreateTopics (key 19).

DescribeConfigs reports a topic's configuration and this node's, by Kafka's names
(``retention.ms``, ``retention.bytes``, ``segment.bytes``, ``segment.ms``,
``max.message.bytes``; for the broker ``log.retention.ms``, ``message.max.bytes`` ...), all
read-only and set at start (STATIC_BROKER_CONFIG: the node's options), which every topic's
replicas run with, the node's own and those created through the metadata (their own configs are
stored, not applied yet). CreateTopics is the controller's (:mod:`raftcore.kafka.topic_create`);
a broker without the cluster metadata (an embedding that gives none) answers it per topic with
POLICY_VIOLATION naming the one topic served (TOPIC_ALREADY_EXISTS for that one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.kafka import topic_create
from raftcore.protocol.api import ApiKey, response_spec

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["create_topics", "describe_configs", "served_topics"]

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource types
STATIC_BROKER_CONFIG = 4  # ConfigSource: set by the node's options at start
_STRING, _INT, _LONG = 2, 3, 5  # ConfigType
_TYPES = {
    "cleanup.policy": _STRING,
    "segment.bytes": _INT,
    "max.message.bytes": _INT,
    "log.segment.bytes": _INT,
    "message.max.bytes": _INT,
    "fetch.max.bytes": _INT,
    "node.id": _INT,
    "broker.id": _INT,
}


def served_topics(broker: Broker) -> str:
    """The topics served, for messages: ``raftcore`` or ``a, b``."""
    return ", ".join(broker.topics())


def describe_configs(broker: Broker, body: Any, version: int) -> Any:
    cls = response_spec(ApiKey.DESCRIBE_CONFIGS).cls
    results = []
    for resource in body.resources:
        error, message, configs = Errors.NONE, None, {}
        name = resource.resource_name
        if resource.resource_type == TOPIC:
            # a created topic's replicas run with the node's settings too (its own topic
            # configs are kept in the metadata, not applied yet: docs/topics.md)
            created = broker.cluster is not None and broker.cluster.image.topic(name) is not None
            if name in broker.topics() or created:
                configs = broker.topic_configs
            else:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                message = (
                    f"topic {name!r} does not exist (this node's own topic is "
                    f"{served_topics(broker)}; others are made with CreateTopics)"
                )
        elif resource.resource_type == BROKER:
            if name in ("", str(broker.node_id)):
                configs = broker.broker_configs
            else:
                error = Errors.INVALID_REQUEST
                message = f"node {broker.node_id} describes itself only, not broker {name!r}"
        else:
            error = Errors.INVALID_REQUEST
            message = (
                f"resource type {resource.resource_type} is not described: raftcore describes "
                "topics (2) and brokers (4)"
            )
        keys = resource.configuration_keys
        results.append(
            cls.DescribeConfigsResult(
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=name,
                configs=[
                    cls.DescribeConfigsResourceResult(
                        name=key,
                        value=value,
                        read_only=True,
                        is_default=False,
                        config_source=STATIC_BROKER_CONFIG,
                        is_sensitive=False,
                        synonyms=[],
                        config_type=_TYPES.get(key, _LONG),
                        documentation=None,
                    )
                    for key, value in configs.items()
                    if not keys or key in keys  # none asked for (null or empty): all
                ],
            )
        )
    return cls(throttle_time_ms=0, results=results)


def create_topics(broker: Broker, body: Any, version: int) -> Any:
    if broker.cluster is not None:  # topics are created through the metadata
        return topic_create.create_topics(broker, body, version)
    cls = response_spec(ApiKey.CREATE_TOPICS).cls
    served = served_topics(broker)
    answers = []
    for topic in body.topics:
        if topic.name in broker.topics():
            error = Errors.TOPIC_ALREADY_EXISTS
            message = f"topic {topic.name!r} exists: it is the one topic this cluster serves"
        else:
            error = Errors.POLICY_VIOLATION
            message = (
                f"raftcore serves one topic, {served}, with one partition; it creates no "
                f"others (not {topic.name!r})"
            )
        answers.append(
            cls.CreatableTopicResult(
                name=topic.name,
                topic_id=bytes(16),
                error_code=error,
                error_message=message,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            )
        )
    return cls(throttle_time_ms=0, topics=answers)
