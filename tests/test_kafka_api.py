"""The Kafka client API (raftcore.kafka) over a fake Partition: no node, no sockets. What a
consumer is served and what a producer is told follow from the partition's answers alone;
and the package never imports the node (it sees a node only as a Partition)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka_helpers import TOPIC, TOPIC_ID, FakePartition, batch, broker_of, produce_body

import raftcore.kafka
from raftcore.error_codes import Errors
from raftcore.kafka.fetch import consumer_fetch
from raftcore.kafka.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from raftcore.kafka.metadata import metadata
from raftcore.kafka.produce import produce
from raftcore.raft import Appended
from raftcore.records import scan_batches


def _fetch_body(offset: int, *, epoch: int = -1, max_wait_ms: int = 0) -> Any:
    part = SimpleNamespace(
        partition=0, fetch_offset=offset, current_leader_epoch=epoch, partition_max_bytes=1 << 20
    )
    topic = SimpleNamespace(topic=TOPIC, topic_id=TOPIC_ID, partitions=[part])
    return SimpleNamespace(max_wait_ms=max_wait_ms, max_bytes=1 << 20, topics=[topic])


def _fetch(partition: FakePartition, body: Any, version: int = 16) -> Any:
    response = asyncio.run(consumer_fetch(broker_of(partition), body, version))
    return response, response.responses[0].partitions[0]


def test_the_package_never_imports_the_node() -> None:
    """raftcore.kafka sees a node only as a Partition and a Broker: no module of it imports
    raftcore.node, not even for type checking."""
    package = Path(raftcore.kafka.__file__).parent
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("raftcore.node"), f"{path.name} imports {name}"


def test_a_consumer_reads_only_what_lies_below_the_high_watermark() -> None:
    partition = FakePartition()
    partition.log.append_batches_as_leader(batch(2), 3)
    partition.log.append_batches_as_leader(batch(2), 3)  # offsets 2..3, not committed
    partition.hw = 2
    _, part = _fetch(partition, _fetch_body(0))
    assert part.error_code == Errors.NONE
    assert part.high_watermark == part.last_stable_offset == 2
    scan = scan_batches(part.records, check_crc=True)
    assert scan.count == 1 and int(scan.last_offsets[0]) == 1


def test_a_replica_that_does_not_lead_names_the_leader_and_its_endpoint() -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER with CurrentLeader, and (v16) NodeEndpoints."""
    partition = FakePartition(leader=2, local=1)
    response, part = _fetch(partition, _fetch_body(0))
    assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 3)
    assert [(e.node_id, e.port) for e in response.node_endpoints] == [(2, 9092)]


@pytest.mark.parametrize(
    ("asked", "error"),
    [(2, Errors.FENCED_LEADER_EPOCH), (4, Errors.UNKNOWN_LEADER_EPOCH)],
)
def test_a_consumer_of_another_leader_epoch_is_fenced(asked: int, error: int) -> None:
    """KIP-320: an older CurrentLeaderEpoch is fenced, a newer one unknown yet."""
    _, part = _fetch(FakePartition(epoch=3), _fetch_body(0, epoch=asked))
    assert part.error_code == error
    assert part.current_leader.leader_epoch == 3


def test_a_new_leader_that_does_not_know_its_high_watermark_is_not_ready() -> None:
    partition = FakePartition()
    partition.hw = None
    _, part = _fetch(partition, _fetch_body(0))
    assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert part.records == b""


def test_an_offset_past_the_log_end_is_out_of_range_with_an_empty_record_set() -> None:
    _, part = _fetch(FakePartition(), _fetch_body(5))
    assert part.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert (part.high_watermark, part.log_start_offset, part.records) == (-1, -1, b"")


def test_an_unknown_topic_id_is_unknown() -> None:
    body = _fetch_body(0)
    body.topics[0].topic_id = bytes(16)
    _, part = _fetch(FakePartition(), body, version=13)
    assert part.error_code == Errors.UNKNOWN_TOPIC_ID


def test_produce_answers_with_the_verdict_of_the_append() -> None:
    partition = FakePartition()
    partition.hw = 5
    broker = broker_of(partition)
    response = asyncio.run(produce(broker, produce_body(batch(3)), 9))
    resp = response.responses[0].partition_responses[0]
    assert (resp.error_code, resp.base_offset) == (Errors.NONE, 0)
    assert broker.metrics.produce_records == 3
    assert partition.forgotten == [Appended(0, 2, 3, token=1)]


def test_produce_hands_the_scan_of_its_validation_to_the_append() -> None:
    """Each byte checked once (issue 25): validation's scan goes with the records, so the log
    neither walks nor CRC-checks them again (tests/test_log.py: it restamps them in place)."""
    partition = FakePartition()
    partition.hw = 5
    handed = []
    append = partition.append

    def spy(records: Any, *, track: bool, checked: Any = None) -> Appended:
        handed.append(checked)
        return append(records, track=track, checked=checked)

    partition.append = spy  # type: ignore[method-assign]
    received = bytearray(batch(3))
    asyncio.run(produce(broker_of(partition), produce_body(received), 9))
    (scan,) = handed
    assert scan is not None and scan.count == 1 and int(scan.base_offsets[0]) == 0


def test_produce_tells_of_a_leadership_lost_before_the_commit() -> None:
    partition = FakePartition()
    partition.hw = 0
    response = asyncio.run(produce(broker_of(partition), produce_body(batch(1)), 10))
    resp = response.responses[0].partition_responses[0]
    assert (resp.error_code, resp.base_offset) == (Errors.NOT_LEADER_OR_FOLLOWER, -1)
    assert resp.current_leader.leader_id == 2
    assert [e.node_id for e in response.node_endpoints] == [2]


def test_a_retried_idempotent_batch_gets_its_first_offsets_back() -> None:
    partition = FakePartition()
    partition.hw = 10
    sent = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    first = asyncio.run(produce(broker_of(partition), produce_body(sent, acks=1), 9))
    again = asyncio.run(produce(broker_of(partition), produce_body(sent, acks=1), 9))
    for response in (first, again):
        assert response.responses[0].partition_responses[0].base_offset == 0
    assert partition.log.end_offset == 2


def test_metadata_and_list_offsets_speak_for_the_partition() -> None:
    partition = FakePartition()
    partition.log.append_batches_as_leader(batch(4), 3)
    partition.hw = 4
    broker = broker_of(partition)
    meta = metadata(broker, SimpleNamespace(topics=None), 12)
    assert [b.node_id for b in meta.brokers] == [1, 2, 3]
    (topic,) = meta.topics
    assert (topic.name, topic.topic_id, topic.partitions[0].leader_id) == (TOPIC, TOPIC_ID, 1)
    parts = [
        SimpleNamespace(partition_index=0, timestamp=t)
        for t in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)
    ]
    body = SimpleNamespace(topics=[SimpleNamespace(name=TOPIC, partitions=parts)])
    answer = list_offsets(broker, body, 7)
    assert [(p.offset, p.leader_epoch) for p in answer.topics[0].partitions] == [(0, 3), (4, 3)]
