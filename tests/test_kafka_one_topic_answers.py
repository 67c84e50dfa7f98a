"""What a Kafka user with habits asks of a cluster that serves one topic: each is answered at
once, with words (DescribeConfigs, CreateTopics, an unknown topic), in process;
tests/test_kafka_client_edges.py asks with librdkafka. FindCoordinator and the group APIs:
tests/test_consumer_group_coordinator.py."""

from __future__ import annotations

import asyncio

import pytest
from test_node import cluster, leader_of, raw_request, run

from raftcore.client import Producer
from raftcore.client.cluster import UnknownTopicError
from raftcore.error_codes import Errors
from raftcore.kafka.api_versions import api_versions_body
from raftcore.protocol.api import ApiKey, request_spec

pytestmark = pytest.mark.timeout(60)


def test_describe_configs_reports_the_topic_and_the_node_by_kafkas_names(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            node = nodes[0]
            cls = request_spec(ApiKey.DESCRIBE_CONFIGS).cls
            resources = [
                cls.DescribeConfigsResource(resource_type=2, resource_name="raftcore"),
                cls.DescribeConfigsResource(
                    resource_type=4, resource_name="1", configuration_keys=["message.max.bytes"]
                ),
                cls.DescribeConfigsResource(resource_type=2, resource_name="orders"),
            ]
            answer = await raw_request(node, ApiKey.DESCRIBE_CONFIGS, 4, cls(resources=resources))
            topic, broker, unknown = answer.results  # type: ignore[attr-defined]
            configs = {c.name: c.value for c in topic.configs}
            assert configs["retention.ms"] == "-1"
            assert configs["segment.bytes"] == str(node.config.log.segment_bytes)
            assert configs["max.message.bytes"] == str(node.config.log.max_message_bytes)
            assert {c.name for c in broker.configs} == {"message.max.bytes"}
            assert unknown.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert "topic 'orders' does not exist" in unknown.error_message
            assert "own topic is raftcore" in unknown.error_message

    run(main())


def test_create_topics_creates_other_topics_and_refuses_the_topic_served_as_existing(tmp_path):
    """The topic served (--topic) exists and is fixed at format: TOPIC_ALREADY_EXISTS at every
    version; another topic is created by the controller (tests/test_topics.py)."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await leader_of(nodes)
            cls = request_spec(ApiKey.CREATE_TOPICS).cls
            while not any(n.metadata.is_controller() and n.metadata.caught_up() for n in nodes):
                await asyncio.sleep(0.02)
            controller = next(n for n in nodes if n.metadata.is_controller())
            for version in (0, 4, 7):
                topics = [
                    cls.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                    for n in (f"orders-{version}", "raftcore")
                ]
                answer = await raw_request(
                    controller, ApiKey.CREATE_TOPICS, version, cls(topics=topics, timeout_ms=5000)
                )
                orders, served = answer.topics  # type: ignore[attr-defined]
                assert orders.error_code == Errors.NONE
                assert served.error_code == Errors.TOPIC_ALREADY_EXISTS
                if version >= 1:
                    assert "fixed when the data directory is formatted" in served.error_message

    run(main())


def test_api_versions_advertises_find_coordinator_describe_configs_and_create_topics():
    keys = {k.api_key: (k.min_version, k.max_version) for k in api_versions_body(3).api_keys}
    assert keys[ApiKey.FIND_COORDINATOR] == (0, 4)
    assert keys[ApiKey.DESCRIBE_CONFIGS] == (0, 4)
    assert keys[ApiKey.CREATE_TOPICS] == (0, 7)


def test_a_client_of_an_unknown_topic_fails_at_once_naming_the_topic_served(tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await leader_of(nodes)
            loop = asyncio.get_running_loop()
            started = loop.time()
            producer = Producer([str(nodes[0].config.listen)], topic="orders")
            with pytest.raises(UnknownTopicError) as err:
                await producer.start()
            await producer.close()
            assert loop.time() - started < 3  # not the 10 s a leader is waited for
            assert "topic 'orders' does not exist" in str(err.value)
            assert "serves one topic, raftcore" in str(err.value)

    run(main())
