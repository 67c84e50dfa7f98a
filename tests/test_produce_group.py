"""Group append for Produce (raftcore.kafka.produce_group), over a fake Partition: the acks=all
requests of one loop iteration are one write after the first, each answered for itself, and a
producer's sequences are checked as if its requests came one at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka_helpers import FakePartition, batch, broker_of, produce_body

from raftcore.error_codes import Errors
from raftcore.errors import RaftcoreError
from raftcore.kafka import produce_group
from raftcore.kafka.produce import produce
from raftcore.raft import LeaderAndEpoch, NotLeaderError

pytestmark = pytest.mark.timeout(30)  # a request never answered fails, not hangs


def _idempotent(producer_id: int, sequence: int, records: int = 1) -> bytes:
    return batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


def _in_one_iteration(partition: FakePartition, sent: list[bytes]) -> list[Any]:
    """Produce each of ``sent`` (acks=all) from requests that all arrive in one loop
    iteration; the answers' partition responses, in order."""
    broker = broker_of(partition)

    async def together() -> list[Any]:
        return await asyncio.gather(*(produce(broker, produce_body(s), 9) for s in sent))

    return [r.responses[0].partition_responses[0] for r in asyncio.run(together())]


def test_the_requests_of_one_loop_iteration_after_the_first_are_appended_in_one_write() -> None:
    partition = FakePartition()
    partition.hw = 1_000
    answers = _in_one_iteration(partition, [_idempotent(p, 0, records=p) for p in (1, 2, 3, 4)])
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (Errors.NONE, 0),
        (Errors.NONE, 1),
        (Errors.NONE, 3),
        (Errors.NONE, 6),
    ]
    assert partition.group_writes == [3]  # the first alone, at once; the other three together
    assert partition.log.end_offset == 10
    # each part waited for its own verdict, and was let go once answered
    assert [(a.first_offset, a.last_offset) for a in partition.forgotten] == [
        (0, 0),
        (1, 2),
        (3, 5),
        (6, 9),
    ]


def test_a_producer_seen_twice_in_one_iteration_starts_a_new_group() -> None:
    """Producer 2's second batch (sequence 1) must be checked after its first is appended:
    in the same group it would be checked against a state without it, and refused."""
    partition = FakePartition()
    partition.hw = 1_000
    sent = [_idempotent(1, 0), _idempotent(2, 0), _idempotent(3, 0), _idempotent(2, 1)]
    sent.append(_idempotent(4, 0))
    answers = _in_one_iteration(partition, sent)
    assert [a.error_code for a in answers] == [Errors.NONE] * 5
    assert [a.base_offset for a in answers] == [0, 1, 2, 3, 4]
    assert partition.group_writes == [2, 2]
    assert partition.producers.check(2, 0, 2, 1) == Errors.NONE  # both of its batches are known


def test_a_request_refused_by_its_producer_s_sequence_leaves_the_others_of_its_group() -> None:
    partition = FakePartition()
    partition.hw = 1_000
    sent = [_idempotent(1, 0), _idempotent(2, 0), _idempotent(3, 5), _idempotent(4, 0)]
    answers = _in_one_iteration(partition, sent)
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (Errors.NONE, 0),
        (Errors.NONE, 1),
        (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, -1),
        (Errors.NONE, 2),
    ]
    assert partition.group_writes == [2]


def test_a_retry_in_a_group_gets_its_first_offsets_back() -> None:
    partition = FakePartition()
    partition.hw = 1_000
    first = _idempotent(1, 0, records=3)
    answers = _in_one_iteration(partition, [first, first, _idempotent(2, 0)])
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (Errors.NONE, 0),
        (Errors.NONE, 0),
        (Errors.NONE, 3),
    ]
    assert partition.log.end_offset == 4


def test_a_group_written_after_leadership_ended_fails_every_request_in_it() -> None:
    partition = FakePartition()
    partition.hw = 1_000

    def deposed(records: Any, *, checked: Any, counts: list[int]) -> Any:
        raise NotLeaderError(LeaderAndEpoch(2, 4), "deposed")

    partition.append_parts = deposed  # type: ignore[method-assign]
    answers = _in_one_iteration(partition, [_idempotent(p, 0) for p in (1, 2, 3)])
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (Errors.NONE, 0),
        (Errors.NOT_LEADER_OR_FOLLOWER, -1),
        (Errors.NOT_LEADER_OR_FOLLOWER, -1),
    ]
    assert partition.log.end_offset == 1


def test_a_queue_past_its_byte_bound_is_written_at_once(monkeypatch):
    """A group never holds more than MAX_GROUP_BYTES: the request that takes the queue past it
    writes the queue in its own step, and the iteration's later requests start a new one."""
    monkeypatch.setattr(produce_group, "MAX_GROUP_BYTES", 2 * len(_idempotent(1, 0)))
    partition = FakePartition()
    partition.hw = 1_000
    answers = _in_one_iteration(partition, [_idempotent(p, 0) for p in range(1, 7)])
    assert [(a.error_code, a.base_offset) for a in answers] == [(Errors.NONE, n) for n in range(6)]
    assert partition.group_writes == [2, 2]  # then the last one alone
    assert partition.log.end_offset == 6


def test_a_queued_request_whose_connection_went_away_is_not_written():
    partition = FakePartition()
    partition.hw = 1_000
    broker = broker_of(partition)

    async def main() -> None:
        requests = [
            asyncio.ensure_future(produce(broker, produce_body(_idempotent(p, 0)), 9))
            for p in (1, 2, 3)
        ]
        await asyncio.sleep(0)  # all three handled in one iteration: 2 and 3 queued
        requests[1].cancel()  # its connection closed before the group was written
        await asyncio.gather(*requests, return_exceptions=True)

    asyncio.run(main())
    assert partition.log.end_offset == 2
    assert partition.producers.check(2, 0, 0, 1) == Errors.NONE  # producer 2 never written
    assert partition.producers.check(3, 0, 1, 1) == Errors.NONE  # producer 3 was


def test_a_group_whose_node_stopped_fails_each_request_as_it_would_alone():
    """A write that raises something else than a refusal (the node stopped between the
    requests and their group's write) reaches each queued request, which then fails as one
    request written at once would: none is left waiting."""
    partition = FakePartition()
    partition.hw = 1_000

    def stopped(records: Any, *, checked: Any, counts: list[int]) -> Any:
        raise RaftcoreError("[node 1] not started")

    partition.append_parts = stopped  # type: ignore[method-assign]
    broker = broker_of(partition)

    async def main() -> list[Any]:
        sent = [_idempotent(p, 0) for p in (1, 2, 3)]
        return await asyncio.gather(
            *(produce(broker, produce_body(s), 9) for s in sent), return_exceptions=True
        )

    first, *queued = asyncio.run(main())
    assert first.responses[0].partition_responses[0].error_code == Errors.NONE
    assert [type(r) for r in queued] == [RaftcoreError, RaftcoreError]
