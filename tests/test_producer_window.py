"""raftcore's producer (raftcore.client.producer): a sliding window of requests in flight, not
rounds; queued sends packed into requests of at most ``max_request_bytes``; and a window wider
than Kafka's five, which is safe because the leader remembers sixteen batches per producer."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest
from test_node import bootstrap, cluster, leader_of, run

import raftcore.kafka.producer_state as producer_state
from raftcore.client import Producer
from raftcore.client.connection import ConnectionClosed
from raftcore.client.producer import MAX_IN_FLIGHT, ProduceError
from raftcore.error_codes import Errors
from raftcore.kafka.producer_ids import derived_producer_id
from raftcore.protocol.api import encode_request
from raftcore.records import iter_batches

pytestmark = pytest.mark.timeout(60)

BIG = 600_000  # a send of one record this big goes alone in a 1 MiB request


def only_batch(data: bytes):  # type: ignore[no-untyped-def]
    """The one record batch of a request (Produce carries one per partition)."""
    (batch,) = iter_batches(data)
    return batch


class FakeLeader:
    """A leader connection whose answers the test releases: each request's records are kept,
    and its answer is a future (in request order, as a Kafka connection answers)."""

    def __init__(self, *, auto: bool = False) -> None:
        self.auto = auto  # answer every request at once, with the next offsets
        self.requests: list[bytes] = []
        self.frame_sizes: list[int] = []
        self.answers: list[asyncio.Future] = []
        self.next_offset = 0

    async def leader_connection(self):  # type: ignore[no-untyped-def]
        return self, SimpleNamespace(leader_id=1)

    def request(self, api_key, version, body, *, timeout_s, expect_response):  # type: ignore[no-untyped-def]
        frame = encode_request(api_key, version, len(self.requests), "raftcore-producer", body)
        self.frame_sizes.append(4 + len(frame))
        self.requests.append(body.topic_data[0].partition_data[0].records)
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        if self.auto:
            self.answer(len(self.answers) - 1)
        return answer

    def answer(self, i: int) -> None:
        (batch,) = iter_batches(self.requests[i])
        ok = SimpleNamespace(error_code=Errors.NONE, base_offset=self.next_offset)
        self.next_offset += batch.record_count
        self.answers[i].set_result(
            SimpleNamespace(responses=[SimpleNamespace(partition_responses=[ok])])
        )


async def started(producer: Producer, leader: FakeLeader) -> Producer:
    """The producer, its sender running against ``leader`` (no cluster, no InitProducerId)."""
    producer.cluster.leader_connection = leader.leader_connection  # type: ignore[method-assign]
    producer.producer_id, producer.producer_epoch = 7, 0
    producer._task = asyncio.ensure_future(producer._sender())
    return producer


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_window_of_requests_is_kept_full_not_sent_in_rounds():
    """An answer to the oldest request makes room for the next at once, while the other
    requests of the window are still unanswered."""

    async def main():
        leader = FakeLeader()
        producer = await started(Producer(["127.0.0.1:1"], max_in_flight=4), leader)
        try:
            sends = [producer.send_nowait([(None, b"%d" % n * BIG)]) for n in range(8)]
            await settle()
            assert len(leader.requests) == 4  # a full window, one send per request
            leader.answer(0)
            await settle()
            assert len(leader.requests) == 5  # not waiting for the other three
            assert await sends[0] == (0, 0)
            for i in range(1, 8):
                leader.answer(i)
                await settle()
                assert len(leader.requests) == min(8, i + 5)
            assert [await s for s in sends] == [(n, n) for n in range(8)]
        finally:
            await producer.close()

    run(main())


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_packed_requests_never_exceed_max_request_bytes(compression):
    """Small sends queued together go in one batch per request, each request at most
    ``max_request_bytes`` (the whole frame), and each send gets its own records' offsets."""

    async def main():
        leader = FakeLeader(auto=True)
        max_request = 1 << 20
        producer = await started(
            Producer(
                ["127.0.0.1:1"],
                max_in_flight=2,
                max_request_bytes=max_request,
                compression=compression,
            ),
            leader,
        )
        try:
            counts = [1 + n % 150 for n in range(400)]  # 30,200 records of ~100 bytes
            sends = [
                producer.send_nowait([(None, os.urandom(100)) for _ in range(c)]) for c in counts
            ]
            offsets = [await s for s in sends]
            assert max(leader.frame_sizes) <= max_request
            assert len(leader.requests) < len(sends) / 10  # packed
            assert max(leader.frame_sizes) > 0.9 * max_request  # and nearly full
            first = 0
            for (lo, hi), c in zip(offsets, counts, strict=True):
                assert (lo, hi) == (first, first + c - 1)
                first += c
            # Every request is one batch, numbered on from the previous one.
            sequence = 0
            for data in leader.requests:
                (batch,) = iter_batches(data)
                assert batch.base_sequence == sequence
                sequence += batch.record_count
            assert sequence == sum(counts)
        finally:
            await producer.close()

    run(main())


def test_a_send_larger_than_max_request_bytes_goes_alone_and_whole():
    """A send is never split (its offsets stay one range) nor packed with others when it
    alone fills a request."""

    async def main():
        leader = FakeLeader(auto=True)
        producer = await started(Producer(["127.0.0.1:1"]), leader)
        try:
            small = producer.send_nowait([(None, b"s")])
            huge = producer.send_nowait([(None, b"h" * 1000)] * 1500)  # ~1.5 MB
            after = producer.send_nowait([(None, b"a")])
            assert [await small, await huge, await after] == [(0, 0), (1, 1500), (1501, 1501)]
            counts = [only_batch(r).record_count for r in leader.requests]
            assert counts == [1, 1500, 1]
        finally:
            await producer.close()

    run(main())


def test_a_producer_resuming_an_identity_packs_nothing():
    """The exactly-once writer (raftcore.client.resumable) sends the same batches in every
    attempt: each send stays its own batch."""

    async def main():
        leader = FakeLeader(auto=True)
        producer = await started(Producer(["127.0.0.1:1"], identity=(7, 0, 40)), leader)
        try:
            sends = [producer.send_nowait([(None, b"r")] * 4) for _ in range(6)]
            assert [await s for s in sends] == [(4 * n, 4 * n + 3) for n in range(6)]
            sequences = [only_batch(r).base_sequence for r in leader.requests]
            assert sequences == [40 + 4 * n for n in range(6)]
        finally:
            await producer.close()

    run(main())


def test_max_request_bytes_and_max_in_flight_are_checked():
    with pytest.raises(ValueError, match="max_request_bytes"):
        Producer(["127.0.0.1:1"], max_request_bytes=(8 << 20) + 1)
    with pytest.raises(ValueError, match="max_in_flight"):
        Producer(["127.0.0.1:1"], max_in_flight=MAX_IN_FLIGHT + 1)
    assert MAX_IN_FLIGHT == producer_state.REMEMBERED_BATCHES == 16


def _lose_the_first_answer(producer: Producer, dropped: list) -> None:
    """The first request reaches the leader, and its answer is lost (as with a connection that
    broke after the leader had read the request)."""
    real = producer._request
    requests: list = []

    def lossy(conn, batch):  # type: ignore[no-untyped-def]
        answer = real(conn, batch)
        requests.append(batch)
        if len(requests) > 1:
            return answer
        lost = asyncio.get_running_loop().create_future()

        def drop(f):  # type: ignore[no-untyped-def]
            if not f.cancelled():
                dropped.append(f.exception() or f.result())
            lost.set_exception(ConnectionClosed("the answer was lost"))
            producer._wakeup.set()

        answer.add_done_callback(drop)
        return lost

    producer._request = lossy  # type: ignore[method-assign]


async def _committed_values(node, count: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    for _ in range(250):
        if len(node.listener.values) >= count:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # and nothing more
    return list(node.listener.values)


def test_a_lost_answer_in_a_window_of_ten_is_not_written_twice(tmp_path):
    """Ten requests in flight, the first one's answer lost: the producer resends it after the
    other nine were written; the leader remembers it (sixteen batches), answers with its
    first offsets, and writes nothing twice."""

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            producer = Producer(bootstrap(leader), max_in_flight=10, delivery_timeout_ms=15_000)
            async with producer:
                await producer.send([(b"k", b"warm-up")])
                dropped: list = []
                _lose_the_first_answer(producer, dropped)
                values = [b"%d" % n * BIG for n in range(10)]
                sends = [producer.send_nowait([(b"k", v)]) for v in values]
                offsets = [await s for s in sends]
                assert len(dropped) == 1 and producer.retries == 1
                assert [lo for lo, _ in offsets] == [offsets[0][0] + n for n in range(10)]
            committed = await _committed_values(leader, 11)
            assert committed == [b"warm-up", *values]

    run(main())


def test_a_leader_that_remembers_five_refuses_the_resent_oldest_of_ten(tmp_path, monkeypatch):
    """Why the window needs a leader that remembers as much: with Kafka's five, the oldest of
    ten resent batches is forgotten and refused as out of order (a resumed identity fails
    with it; nothing is written twice)."""
    monkeypatch.setattr(producer_state, "REMEMBERED_BATCHES", 5)

    async def main():
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            pid = derived_producer_id("window-of-ten")
            producer = Producer(bootstrap(leader), max_in_flight=10, identity=(pid, 0, 0))
            async with producer:
                dropped: list = []
                _lose_the_first_answer(producer, dropped)
                values = [b"%d" % n * 1000 for n in range(10)]
                sends = [producer.send_nowait([(b"k", v)]) for v in values]
                with pytest.raises(ProduceError) as refused:
                    await sends[0]
                assert refused.value.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                offsets = [(await s)[0] for s in sends[1:]]
                assert offsets == list(range(offsets[0], offsets[0] + 9))  # each once, in order
            committed = await _committed_values(leader, 10)
            assert committed == values

    run(main())
