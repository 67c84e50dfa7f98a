"""Acknowledged means committed, at the node (issue 9): Produce with acks=all, ``append(wait=True)``
and ``wait_committed`` answer with the core's verdict on the append. A leader that loses its
leadership before the append commits answers NOT_LEADER_OR_FOLLOWER with the leader it knows
then (KIP-951), at once, not when the timeout runs out, and never NONE."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_node import bootstrap, cluster, leader_of, raw_request, run

from raftcore.client import Producer
from raftcore.client.producer import ProduceError
from raftcore.error_codes import Errors
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.raft import Appended, NotLeaderError
from raftcore.records import encode_batch

pytestmark = pytest.mark.timeout(60)


def produce_body(value: bytes, timeout_ms: int = 20_000, **batch):  # type: ignore[no-untyped-def]
    """A Produce request (acks=all) of one batch; ``batch`` may give the batch's
    producer_id, producer_epoch and base_sequence (an idempotent producer's batch)."""
    cls = request_spec(ApiKey.PRODUCE).cls
    data = encode_batch([(b"k", value)], base_offset=0, leader_epoch=0, **batch)
    return cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[
            cls.TopicProduceData(
                name="raftcore", partition_data=[cls.PartitionProduceData(index=0, records=data)]
            )
        ],
    )


async def stop_followers(nodes, leader):  # type: ignore[no-untyped-def]
    """Stop every node but ``leader``; returns the stopped ones."""
    stopped = [n for n in nodes if n is not leader]
    for n in stopped:
        await n.stop(timeout_s=0.1)
    return stopped


async def leader_without_followers(nodes):  # type: ignore[no-untyped-def]
    """The leader, once its followers are stopped: nothing it appends can commit."""
    leader = await leader_of(nodes)
    await stop_followers(nodes, leader)
    return leader


@pytest.mark.slow
def test_a_leader_that_loses_its_followers_answers_a_waiting_produce_not_leader_at_once(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_without_followers(nodes)
            started = time.monotonic()
            resp = await raw_request(leader, ApiKey.PRODUCE, 10, produce_body(b"orphan"))
            elapsed = time.monotonic() - started
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
            assert part.base_offset == -1
            # the verdict came with the resignation (check quorum, 1.5 x 600 ms), not the
            # 20 s request timeout
            assert elapsed < 5, elapsed
            assert part.current_leader is not None and part.current_leader.leader_epoch >= 1
            assert resp.node_endpoints is not None

    run(main())


def test_append_wait_raises_not_leader_when_leadership_ends_before_the_commit(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_without_followers(nodes)
            with pytest.raises(NotLeaderError) as caught:
                await asyncio.wait_for(leader.append([(b"k", b"orphan")], wait=True), 10)
            assert "were not committed in that epoch" in str(caught.value)

    run(main())


def test_wait_committed_refuses_a_bare_offset(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            appended = await leader.append([(b"k", b"v")], wait=True)
            assert isinstance(appended, Appended)
            with pytest.raises(TypeError, match="tracked Appended"):
                await leader.wait_committed(appended.last_offset)  # type: ignore[arg-type]
            untracked = await leader.append([(b"k", b"w")])
            with pytest.raises(TypeError, match="tracked Appended"):
                await leader.wait_committed(untracked)

    run(main())


def test_a_committed_append_waits_and_returns_its_offsets(tmp_path):
    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            first, last = await leader.append([(b"k", b"a"), (b"k", b"b")], wait=True)
            assert last == first + 1
            assert leader.high_watermark > last
            resp = await raw_request(leader, ApiKey.PRODUCE, 10, produce_body(b"c"))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == Errors.NONE and part.base_offset == last + 1

    run(main())


def test_a_leader_handing_over_refuses_every_batch_not_leader_never_out_of_order(tmp_path):
    """A leader that takes no appends (here: handing its leadership over) refuses every
    produced batch with NOT_LEADER_OR_FOLLOWER before looking at the producer's sequences, as
    a Kafka broker that is not the leader does. Checked the other way round, the batch after
    one it refused (NOT_LEADER_OR_FOLLOWER) was answered OUT_OF_ORDER_SEQUENCE_NUMBER: the gap
    was of the leader's own making, yet librdkafka reads that answer as "the batches before it
    are not in the log", bumps its producer epoch and sends every unacknowledged batch again
    under new sequence numbers -- a duplicate of the one this leader had appended and then
    failed at its resignation (fault harness, seed 5008: one value at offsets 384 and 581). A
    retry of a remembered batch is refused alike (it used to raise out of the request)."""
    pid = 7_000

    def idem(value: bytes, seq: int):  # type: ignore[no-untyped-def]
        return produce_body(value, producer_id=pid, producer_epoch=0, base_sequence=seq)

    def error(resp) -> int:  # type: ignore[no-untyped-def]
        return resp.responses[0].partition_responses[0].error_code  # type: ignore[no-any-return]

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            target = next(n for n in nodes if n is not leader)
            await target.stop(timeout_s=0.1)  # it cannot catch up: the hand-over stays pending
            first = await raw_request(leader, ApiKey.PRODUCE, 10, idem(b"v0", 0))
            assert error(first) == Errors.NONE  # committed by the leader and the third node
            leader.core.transfer_leadership(target.node_id, 30_000, leader.group.clock())
            assert leader.is_leader()
            assert error(await raw_request(leader, ApiKey.PRODUCE, 10, idem(b"v1", 1))) == (
                Errors.NOT_LEADER_OR_FOLLOWER
            )
            # the next batch of the same producer: the same answer, not OUT_OF_ORDER
            assert error(await raw_request(leader, ApiKey.PRODUCE, 10, idem(b"v2", 2))) == (
                Errors.NOT_LEADER_OR_FOLLOWER
            )
            # a retry of the batch it holds
            assert error(await raw_request(leader, ApiKey.PRODUCE, 10, idem(b"v0", 0))) == (
                Errors.NOT_LEADER_OR_FOLLOWER
            )
            assert leader.is_leader()  # all of it while handing over still

    run(main())


def test_the_producer_retries_a_not_acknowledged_batch_at_the_new_leader(tmp_path):
    """A batch failed with NOT_LEADER_OR_FOLLOWER is retried (idempotently) at the next
    leader; its future resolves only with the offsets where it is committed."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            producer = Producer(bootstrap(leader), request_timeout_ms=5_000)
            await producer.start()
            try:
                first, _ = await producer.send([(b"k", b"before")])
                await leader.stop(timeout_s=0.5)  # resigns
                others = [n for n in nodes if n is not leader]
                new_leader = await leader_of(others)
                offset, _ = await asyncio.wait_for(producer.send([(b"k", b"after")]), 20)
                assert offset > first
                assert new_leader.high_watermark > offset
            finally:
                await producer.close()

    run(main())


@pytest.mark.slow
def test_after_a_delivery_timeout_the_producer_starts_a_new_session_and_writes_again(tmp_path):
    """An expired idempotent batch leaves a gap in the sequence numbers; the leader would refuse
    every later batch (OUT_OF_ORDER_SEQUENCE_NUMBER) forever. The producer starts a new session
    (a new producer id) and its next batches are written (KIP-360's reasoning)."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            producer = Producer(
                bootstrap(leader), request_timeout_ms=300, delivery_timeout_ms=2_000
            )
            await producer.start()
            try:
                await producer.send([(b"k", b"first")])
                old_id = producer.producer_id
                stopped = await stop_followers(nodes, leader)
                with pytest.raises(ProduceError) as caught:
                    await producer.send([(b"k", b"expires")])
                assert caught.value.error_code == Errors.REQUEST_TIMED_OUT
                for n in stopped:
                    restarted = RaftNode(n.config)
                    await restarted.start()
                    nodes[nodes.index(n)] = restarted
                await leader_of(nodes)
                offset, _ = await asyncio.wait_for(producer.send([(b"k", b"after")]), 20)
                assert producer.producer_id != old_id
                assert offset >= 1
            finally:
                await producer.close()

    run(main())


def test_wait_committed_times_out_without_a_verdict_and_forgets_the_append(tmp_path):
    """A timeout says the fate is unknown to the caller: TimeoutError, not a verdict, and the
    append is no longer waited for (a second wait is refused)."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_without_followers(nodes)
            appended = leader.append_batches(
                encode_batch([(b"k", b"unanswered")], base_offset=0, leader_epoch=0)
            )
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(leader.wait_committed(appended, timeout_s=0.2), 5)
            assert time.monotonic() - started < 0.5  # before check quorum deposes the leader
            with pytest.raises(Exception, match="no verdict pending"):
                await leader.wait_committed(appended, timeout_s=0.2)

    run(main())
