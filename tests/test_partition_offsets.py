"""ListOffsets, DeleteRecords and the exactly-once writer on a partition other than the first:
each partition is a Raft group of its own, with its own log start, high watermark and producer
state, and a request naming partition 2 is answered from partition 2's group and moves nothing
of the others. Three in-process nodes
(tests/node_helpers.py's ``cluster``) with three partitions, asked by raftcore's client
(:mod:`raftcore.client.offsets`) and by kafka-python's admin client."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from kafka_helpers import kafka_python_producer
from node_helpers import cluster
from statemachine_helpers import FAST
from test_partitions import PARTITIONS, TOPIC, _bootstrap, leaders

from raftcore.client.cluster import ClusterClient
from raftcore.client.offsets import CommittedRange, committed_ranges
from raftcore.client.resumable import write_exactly_once
from raftcore.topic_partition import TopicPartition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# DeleteRecords needs snapshots (a snapshot holds offset - 1): a log-only node takes them on
# request, in every partition's group
SNAPSHOTS_ON = dataclasses.replace(FAST, snapshots_on_request=True, max_replication_lag_ms=60_000)
COUNTS = {0: 2, 1: 4, 2: 12}  # records produced to each partition


# node_helpers.cluster's three nodes, without a listener, with PARTITIONS partitions and
# snapshots on request
SETUP = {"listener": None, "quorum": SNAPSHOTS_ON, "partitions": PARTITIONS}


def _produce(bootstrap: list[str]) -> dict[int, list[int]]:
    """COUNTS records to each partition with kafka-python, acks=all, one batch each (a log
    that keeps no state of its own snapshots only at a batch's end, so DeleteRecords asks for
    one); the acknowledged offsets of each partition."""
    producer = kafka_python_producer(bootstrap)
    try:
        offsets: dict[int, list[int]] = {}
        for p, count in COUNTS.items():
            for n in range(count):
                sent = producer.send(TOPIC, value=b"v%d" % n, partition=p)
                offsets.setdefault(p, []).append(sent.get(timeout=30).offset)
        return offsets
    finally:
        producer.close(5)


async def _ranges(bootstrap: list[str]) -> dict[int, CommittedRange]:
    client = ClusterClient(bootstrap, topic=TOPIC, request_timeout_ms=10_000)
    try:
        ranges = await committed_ranges(client, {TOPIC: None}, timeout_s=10)
    finally:
        await client.close()
    return {tp.partition: r for tp, r in ranges.items()}


def test_list_offsets_of_partition_2_are_its_own_groups_log_start_and_high_watermark(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, **SETUP) as nodes:
            led = await leaders(nodes)
            acked = await asyncio.to_thread(_produce, _bootstrap(nodes))
            ranges = await _ranges(_bootstrap(nodes))
            assert sorted(ranges) == list(range(PARTITIONS))
            for p, r in ranges.items():
                group = led[p].groups[TopicPartition(TOPIC, p)]
                assert r == CommittedRange(0, group.high_watermark), f"partition {p}"
                assert max(acked[p]) < r.high_watermark  # every acknowledged record below it

    asyncio.run(asyncio.wait_for(go(), 90))


def test_delete_records_on_partition_2_moves_its_log_start_and_no_other(tmp_path):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient

    async def go() -> None:
        async with cluster(tmp_path, **SETUP) as nodes:
            led = await leaders(nodes)
            bootstrap = _bootstrap(nodes)
            acked = await asyncio.to_thread(_produce, bootstrap)
            cut = sorted(acked[2])[6]

            def delete() -> object:
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
                try:
                    return admin.delete_records(
                        {kafka.TopicPartition(TOPIC, 2): cut}, timeout_ms=5000
                    )
                finally:
                    admin.close()

            result = await asyncio.to_thread(delete)
            ((tp, info),) = result.items()  # type: ignore[attr-defined]
            low = info["low_watermark"] if isinstance(info, dict) else info
            assert tp.partition == 2 and low >= cut
            group = led[2].groups[TopicPartition(TOPIC, 2)]
            assert group.log is not None and group.log.log_start_offset == low
            ranges = await _ranges(bootstrap)
            assert ranges[2].log_start == low
            assert ranges[0].log_start == ranges[1].log_start == 0  # the others keep theirs

    asyncio.run(asyncio.wait_for(go(), 90))


def test_the_exactly_once_writer_resumes_in_partition_2_from_partition_2s_producer_state(
    tmp_path,
):
    """A second attempt at the same rows under the same name asks partition 2's leader how far
    its log holds the writer's producer (DescribeProducers of partition 2), skips what is there
    and writes the rest: partition 2 holds each row once, the other partitions none."""

    def keys_in(node, partition: int) -> list[bytes]:  # type: ignore[no-untyped-def]
        log = node.groups[TopicPartition(TOPIC, partition)].log
        assert log is not None
        return [r.key for b in log.batches() if not b.is_control for r in b.records()]

    async def go() -> None:
        async with cluster(tmp_path, **SETUP) as nodes:
            led = await leaders(nodes)
            bootstrap = _bootstrap(nodes)
            data = [[(b"eo-%03d" % (10 * i + j), b"v") for j in range(10)] for i in range(8)]
            first = await write_exactly_once(bootstrap, "t/p2", data[:3], topic=TOPIC, partition=2)
            again = await write_exactly_once(bootstrap, "t/p2", data, topic=TOPIC, partition=2)
            # batches 0 and 1 are in the log; batch 2, its last, is sent again to learn that
            assert (first.rows, again.rows, again.rows_found) == (30, 80, 20)
            assert keys_in(led[2], 2) == [k for batch in data for k, _ in batch]
            assert keys_in(led[0], 0) == keys_in(led[1], 1) == []

    asyncio.run(asyncio.wait_for(go(), 90))
