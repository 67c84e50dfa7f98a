"""Every Fetch answer is bounded, whatever the client asks for, and every partition-level error
answer has the shape Kafka's brokers give it.

- A consumer's answer holds at most the node's ``fetch.max.bytes`` (Kafka's broker setting,
  55 MiB by default), across every partition the request lists (a request may list partition 0
  many times), and at most the request's own MaxBytes and PartitionMaxBytes; the first batch
  comes whole even when it is larger (KIP-74), so a consumer always progresses.
- A replica's answer (raft Fetch, FetchSnapshot) holds at most the core's
  ``replica.fetch.response.max.bytes`` (10 MiB by default): see tests/test_raft_fetch.py.
- An error (unknown topic, not the leader, a fenced or unknown leader epoch, an offset out of
  range) carries -1 offsets and an empty record set, never a null one: librdkafka cannot parse
  a null record set (tests/test_out_of_range_clients.py).
"""

from __future__ import annotations

import asyncio

import pytest
from statemachine_helpers import leader_of, node_configs
from test_node import raw_request

from raftcore.error_codes import Errors
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec

pytestmark = pytest.mark.timeout(60)

HUGE = (1 << 31) - 1  # what a client may ask for


def fetch_body(node: RaftNode, *, offset: int = 0, copies: int = 1, epoch: int = -1, **kw):  # type: ignore[no-untyped-def]
    cls = request_spec(ApiKey.FETCH).cls
    partitions = [
        cls.FetchPartition(
            partition=kw.get("partition", 0),
            current_leader_epoch=epoch,
            fetch_offset=offset,
            partition_max_bytes=kw.get("partition_max_bytes", HUGE),
        )
        for _ in range(copies)
    ]
    return cls(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=kw.get("max_bytes", HUGE),
        topics=[
            cls.FetchTopic(topic_id=kw.get("topic_id", node.config.topic_id), partitions=partitions)
        ],
    )


def partitions(response) -> list:  # type: ignore[no-untyped-def]
    return [p for t in response.responses for p in t.partitions]


async def started(tmp_path, count: int = 1, **kw) -> list[RaftNode]:  # type: ignore[no-untyped-def]
    nodes = [RaftNode(c) for c in node_configs(tmp_path, count, **kw)]
    for n in nodes:
        await n.start()
    return nodes


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 45))


def test_a_consumer_fetch_holds_at_most_the_nodes_fetch_max_bytes_whatever_it_asks(tmp_path):
    async def main():
        (node,) = await started(tmp_path, fetch_max_bytes=64 * 1024)
        try:
            await leader_of([node])
            for _ in range(40):  # 40 batches of about 10 KiB
                await node.append([(b"k", b"v" * 1000)] * 10, wait=True)
            answer = await raw_request(node, ApiKey.FETCH, 16, fetch_body(node))
            (part,) = partitions(answer)
            assert part.error_code == Errors.NONE
            assert 0 < len(part.records) <= 64 * 1024
            # The client's own smaller limits still hold.
            small = await raw_request(
                node, ApiKey.FETCH, 16, fetch_body(node, partition_max_bytes=20_000)
            )
            (part,) = partitions(small)
            assert 0 < len(part.records) <= 20_000
        finally:
            await node.stop(timeout_s=0.3)

    run(main())


def test_the_cap_holds_across_every_copy_of_the_partition_a_request_lists(tmp_path):
    async def main():
        (node,) = await started(tmp_path, fetch_max_bytes=64 * 1024)
        try:
            await leader_of([node])
            for _ in range(40):
                await node.append([(b"k", b"v" * 1000)] * 10, wait=True)
            answer = await raw_request(node, ApiKey.FETCH, 16, fetch_body(node, copies=50))
            sizes = [len(p.records) for p in partitions(answer)]
            assert sizes[0] > 0 and sum(sizes) <= 64 * 1024, sizes
        finally:
            await node.stop(timeout_s=0.3)

    run(main())


def test_the_first_batch_comes_whole_even_when_larger_than_the_cap_kip_74(tmp_path):
    async def main():
        (node,) = await started(tmp_path, fetch_max_bytes=1024)
        try:
            await leader_of([node])
            appended = await node.append([(b"k", b"v" * 5000)], wait=True)  # over the cap
            offset = appended.first_offset
            answer = await raw_request(node, ApiKey.FETCH, 16, fetch_body(node, offset=offset))
            (part,) = partitions(answer)
            assert part.error_code == Errors.NONE and len(part.records) > 5000
        finally:
            await node.stop(timeout_s=0.3)

    run(main())


def _assert_kafka_error_shape(part, error: int) -> None:  # type: ignore[no-untyped-def]
    assert part.error_code == error
    assert part.records is not None and len(part.records) == 0  # empty, never null
    assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (-1, -1, -1)


def test_every_partition_error_answer_carries_an_empty_record_set_and_no_offsets(tmp_path):
    async def main():
        nodes = await started(tmp_path, 3)
        try:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"v")] * 10, wait=True)
            follower = next(n for n in nodes if n is not leader)
            epoch = leader.leader_and_epoch.epoch
            cases = [
                (leader, fetch_body(leader, topic_id=b"\x07" * 16), Errors.UNKNOWN_TOPIC_ID),
                (leader, fetch_body(leader, partition=3), Errors.UNKNOWN_TOPIC_ID),
                (follower, fetch_body(follower), Errors.NOT_LEADER_OR_FOLLOWER),
                (leader, fetch_body(leader, epoch=epoch - 1), Errors.FENCED_LEADER_EPOCH),
                (leader, fetch_body(leader, epoch=epoch + 1), Errors.UNKNOWN_LEADER_EPOCH),
                (leader, fetch_body(leader, offset=10_000), Errors.OFFSET_OUT_OF_RANGE),
            ]
            for node, body, error in cases:
                for version in (12, 16):  # before and after topic ids
                    for t in body.topics:  # v12 names the topic; v13+ gives its id
                        t.topic = node.config.topic if t.topic_id == node.config.topic_id else "x"
                    want = error
                    if version == 12 and error == Errors.UNKNOWN_TOPIC_ID:
                        want = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    (part,) = partitions(await raw_request(node, ApiKey.FETCH, version, body))
                    _assert_kafka_error_shape(part, want)
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.3)

    run(main())
