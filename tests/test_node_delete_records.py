"""DeleteRecords (Kafka API 21) against a node: the log start offset moves only by seed 003's
rules (a snapshot holds offset - 1; every replica has it, or the lag expired), answered with
Kafka's codes, from raw frames and from kafka-python's admin client."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from statemachine_helpers import FAST, leader_of, node_configs
from test_node import raw_request

from raftcore.error_codes import Errors
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.statemachine import DictStateMachine

pytestmark = pytest.mark.timeout(90)

SNAPSHOTS_ON = dataclasses.replace(
    FAST, snapshot_min_records=1_000_000, max_replication_lag_ms=60_000
)


def body(offset: int, timeout_ms: int = 5000, topic: str = "raftcore", partition: int = 0):  # type: ignore[no-untyped-def]
    cls = request_spec(ApiKey.DELETE_RECORDS).cls
    return cls(
        topics=[
            cls.DeleteRecordsTopic(
                name=topic,
                partitions=[cls.DeleteRecordsPartition(partition_index=partition, offset=offset)],
            )
        ],
        timeout_ms=timeout_ms,
    )


def answer(response) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    (topic,) = response.topics
    (part,) = topic.partitions
    return part.error_code, part.low_watermark


async def started(tmp_path, quorum=SNAPSHOTS_ON) -> list[RaftNode]:  # type: ignore[no-untyped-def]
    cfgs = [dataclasses.replace(c, quorum=quorum) for c in node_configs(tmp_path)]
    nodes = [RaftNode(c, state_machine=DictStateMachine()) for c in cfgs]
    for n in nodes:
        await n.start()
    return nodes


async def stop_all(nodes) -> None:  # type: ignore[no-untyped-def]
    for n in nodes:
        await n.stop(timeout_s=0.3)


def test_delete_records_moves_the_log_start_once_every_replica_has_the_offset(tmp_path):
    async def main():
        nodes = await started(tmp_path)
        try:
            leader = await leader_of(nodes)
            for _ in range(5):
                await leader.append([(b"k%d" % j, b"v") for j in range(10)], wait=True)
            hw = leader.high_watermark
            assert leader.log.log_start_offset == 0
            topic = leader.config.topic
            error, low = answer(await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(30)))
            assert error == Errors.NONE and low >= 30
            assert leader.log.log_start_offset == low <= hw
            assert leader.log.latest_snapshot_id().offset == low  # the log starts at a snapshot
            # Past the high watermark, another partition, a follower: Kafka's codes.
            error, _ = answer(await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(hw + 100)))
            assert error == Errors.OFFSET_OUT_OF_RANGE
            error, _ = answer(
                await raw_request(leader, ApiKey.DELETE_RECORDS, 0, body(1, topic=topic + "x"))
            )
            assert error == Errors.UNKNOWN_TOPIC_OR_PARTITION
            follower = next(n for n in nodes if n is not leader)
            error, _ = answer(await raw_request(follower, ApiKey.DELETE_RECORDS, 1, body(1)))
            assert error == Errors.NOT_LEADER_OR_FOLLOWER
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_delete_records_times_out_while_a_replica_lags_and_the_lag_has_not_expired(tmp_path):
    async def main():
        nodes = await started(tmp_path)
        try:
            leader = await leader_of(nodes)
            await leader.append([(b"a", b"1")], wait=True)
            lagging = next(n for n in nodes if n is not leader)
            await lagging.stop(timeout_s=0.2)
            for _ in range(3):
                await leader.append([(b"b", b"2")], wait=True)
            offset = leader.high_watermark
            error, low = answer(
                await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(offset, timeout_ms=500))
            )
            assert (error, low) == (Errors.REQUEST_TIMED_OUT, 0)
            assert leader.log.log_start_offset == 0  # the stopped replica still needs it
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_delete_records_on_a_node_without_snapshots_is_a_policy_violation(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        nodes = [RaftNode(c) for c in cfgs]
        for n in nodes:
            await n.start()
        try:
            leader = await leader_of(nodes)
            await leader.append([(b"a", b"1")], wait=True)
            error, low = answer(await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(1)))
            assert (error, low) == (Errors.POLICY_VIOLATION, 0)
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_kafka_pythons_admin_client_deletes_records(tmp_path):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient

    async def main():
        nodes = await started(tmp_path)
        try:
            leader = await leader_of(nodes)
            for _ in range(4):
                await leader.append([(b"k", b"v")] * 10, wait=True)

            def delete() -> dict:
                admin = KafkaAdminClient(
                    bootstrap_servers=str(leader.config.listen), request_timeout_ms=10_000
                )
                try:
                    tp = kafka.TopicPartition(leader.config.topic, 0)
                    return admin.delete_records({tp: 20}, timeout_ms=5000)
                finally:
                    admin.close()

            result = await asyncio.get_running_loop().run_in_executor(None, delete)
            ((_tp, info),) = result.items()
            low = info["low_watermark"] if isinstance(info, dict) else info
            assert low >= 20 and leader.log.log_start_offset == low
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_consumer_below_the_log_start_is_told_where_the_log_starts(tmp_path):
    """It used to say only OFFSET_OUT_OF_RANGE (``raftcore consume --from 5``)."""
    from raftcore.client import ConsumeError, Consumer

    async def main():
        nodes = await started(tmp_path)
        try:
            leader = await leader_of(nodes)
            for _ in range(5):
                await leader.append([(b"k%d" % j, b"v") for j in range(10)], wait=True)
            error, low = answer(await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(30)))
            assert error == Errors.NONE
            async with Consumer([str(leader.config.listen)], start=5) as consumer:
                with pytest.raises(ConsumeError) as err:
                    await consumer.poll()
            assert err.value.error_code == Errors.OFFSET_OUT_OF_RANGE
            assert f"offset 5 is below the log start offset {low}" in str(err.value)
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_delete_records_inside_a_batch_on_a_log_only_node_completes_at_the_batchs_end(tmp_path):
    """A node that keeps no state of its own snapshots only at a batch's end: an offset inside
    a batch is taken to that batch's end (the low watermark says so), instead of a snapshot
    refused at every try and REQUEST_TIMED_OUT."""

    async def main():
        quorum = dataclasses.replace(FAST, snapshots_on_request=True, max_replication_lag_ms=60_000)
        cfgs = [dataclasses.replace(c, quorum=quorum) for c in node_configs(tmp_path)]
        nodes = [RaftNode(c) for c in cfgs]
        for n in nodes:
            await n.start()
        try:
            leader = await leader_of(nodes)
            starts = []
            for _ in range(5):
                first, _last = await leader.append(
                    [(b"k%d" % j, b"v") for j in range(10)], wait=True
                )
                starts.append(first)
            inside = starts[2] + 5  # the middle of the third batch
            error, low = answer(
                await raw_request(leader, ApiKey.DELETE_RECORDS, 2, body(inside, 10_000))
            )
            assert (error, low) == (Errors.NONE, starts[3])
            assert leader.log.log_start_offset == starts[3]
        finally:
            await stop_all(nodes)

    asyncio.run(asyncio.wait_for(main(), 60))
