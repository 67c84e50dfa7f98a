"""The Kafka client API (raftcore.kafka) over a fake Partition: no node, no sockets. What a
consumer is served and what a producer is told follow from the partition's answers alone;
and the package never imports the node (it sees a node only as a Partition)."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import raftcore.kafka
from raftcore.endpoints import Endpoint
from raftcore.error_codes import Errors
from raftcore.kafka.fetch import consumer_fetch
from raftcore.kafka.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from raftcore.kafka.metadata import metadata
from raftcore.kafka.partition import Broker, Partition
from raftcore.kafka.produce import produce
from raftcore.kafka.producer_ids import ProducerIdSource
from raftcore.kafka.producer_state import ProducerStateManager
from raftcore.raft import Appended, LeaderAndEpoch, NotLeaderError
from raftcore.raft.serving import CommittedRead, read_committed
from raftcore.records import encode_batch, scan_batches
from raftcore.testing import InMemoryLog

TOPIC = "events"
TOPIC_ID = bytes(range(16))


class FakeMetrics:
    def __init__(self) -> None:
        self.produce_records = 0

    def kafka_request(self, key: int) -> Any:
        return lambda seconds: None


class FakePartition:
    """A leader (or not) over an InMemoryLog; the high watermark is set by the test."""

    def __init__(self, *, leader: int | None = 1, epoch: int = 3, local: int = 1) -> None:
        self.topic = TOPIC
        self.topic_id = TOPIC_ID
        self.index = 0
        self.log = InMemoryLog()
        self.log.initialize_leader_epoch(epoch)
        self._leader = LeaderAndEpoch(leader, epoch)
        self._local = local
        self.hw: int | None = 0
        self.producers = ProducerStateManager()
        self.forgotten: list[Appended] = []

    @property
    def epoch(self) -> int:
        return self._leader.epoch

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self._leader

    def leader_hint(self) -> LeaderAndEpoch:
        return self._leader

    def is_leader(self) -> bool:
        return self._leader.leader_id == self._local

    def leads(self, epoch: int) -> bool:
        return self.is_leader() and epoch == self.epoch

    def takes_appends(self) -> bool:
        return self.is_leader()

    def high_watermark(self) -> int | None:
        return self.hw

    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def log_end_offset(self) -> int:
        return self.log.end_offset

    def epoch_for_offset(self, offset: int) -> int:
        return self.log.epoch_for_offset(offset)

    def batches(self) -> Iterable[Any]:
        return []

    def read_committed(self, offset: int, max_bytes: int, leader_epoch: int) -> CommittedRead:
        return read_committed(
            self.log,
            leader=self.is_leader(),
            epoch=self.epoch,
            high_watermark=self.hw,
            offset=offset,
            max_bytes=max_bytes,
            leader_epoch=leader_epoch,
        )

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        await asyncio.sleep(0)

    async def wait_log_start_change(self, timeout_s: float) -> None:
        await asyncio.sleep(0)

    def append(self, records: Any, *, track: bool, checked: Any = None) -> Appended:
        if not self.is_leader():
            raise NotLeaderError(self._leader, "not the leader")
        first, last = self.log.append_batches_as_leader(records, self.epoch, checked=checked)
        self.producers.record_scanned(scan_batches(self.log.read(first), check_crc=False))
        return Appended(first, last, self.epoch, token=1 if track else None)

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        return Appended(first_offset, last_offset, self.epoch, token=1)

    async def wait_verdict(self, appended: Appended, timeout_s: float | None) -> None:
        if self.hw is None or self.hw <= appended.last_offset:
            self._leader = LeaderAndEpoch(2, self.epoch + 1)  # deposed before the commit
            raise NotLeaderError(self._leader, "deposed")

    def forget(self, appended: Appended) -> None:
        self.forgotten.append(appended)

    def delete_records(self, offset: int) -> Any:
        return None

    def replicas(self) -> list[int]:
        return [1, 2, 3]

    def replica_endpoints(self) -> list[tuple[int, Endpoint]]:
        return [(i, Endpoint("127.0.0.1", 9090 + i)) for i in (1, 2, 3)]

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        return Endpoint("127.0.0.1", 9090 + node_id) if node_id in (1, 2, 3) else None

    def quorum(self) -> Any:
        return None

    def now_ms(self) -> int:
        return 0


def _broker(partition: Partition) -> Broker:
    return Broker(
        node_id=1,
        cluster_id="c",
        listener_name="PLAINTEXT",
        uses_sasl=False,
        fetch_max_bytes=1 << 20,
        max_message_bytes=1 << 20,
        prefix="[node 1]",
        metrics=FakeMetrics(),
        producer_ids=ProducerIdSource(1),
        partitions=[partition],
    )


def _fetch_body(offset: int, *, epoch: int = -1, max_wait_ms: int = 0) -> Any:
    part = SimpleNamespace(
        partition=0, fetch_offset=offset, current_leader_epoch=epoch, partition_max_bytes=1 << 20
    )
    topic = SimpleNamespace(topic=TOPIC, topic_id=TOPIC_ID, partitions=[part])
    return SimpleNamespace(max_wait_ms=max_wait_ms, max_bytes=1 << 20, topics=[topic])


def _fetch(partition: FakePartition, body: Any, version: int = 16) -> Any:
    response = asyncio.run(consumer_fetch(_broker(partition), body, version))
    return response, response.responses[0].partitions[0]


def _batch(n: int, **kwargs: Any) -> bytes:
    return bytes(encode_batch([(b"k", b"v")] * n, base_offset=0, **kwargs))


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
    partition.log.append_batches_as_leader(_batch(2), 3)
    partition.log.append_batches_as_leader(_batch(2), 3)  # offsets 2..3, not committed
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


def _produce_body(records: bytes, acks: int = -1) -> Any:
    part = SimpleNamespace(index=0, records=records)
    topic = SimpleNamespace(name=TOPIC, partition_data=[part])
    return SimpleNamespace(acks=acks, timeout_ms=1000, transactional_id=None, topic_data=[topic])


def test_produce_answers_with_the_verdict_of_the_append() -> None:
    partition = FakePartition()
    partition.hw = 5
    broker = _broker(partition)
    response = asyncio.run(produce(broker, _produce_body(_batch(3)), 9))
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
    received = bytearray(_batch(3))
    asyncio.run(produce(_broker(partition), _produce_body(received), 9))
    (scan,) = handed
    assert scan is not None and scan.count == 1 and int(scan.base_offsets[0]) == 0


def test_produce_tells_of_a_leadership_lost_before_the_commit() -> None:
    partition = FakePartition()
    partition.hw = 0
    response = asyncio.run(produce(_broker(partition), _produce_body(_batch(1)), 10))
    resp = response.responses[0].partition_responses[0]
    assert (resp.error_code, resp.base_offset) == (Errors.NOT_LEADER_OR_FOLLOWER, -1)
    assert resp.current_leader.leader_id == 2
    assert [e.node_id for e in response.node_endpoints] == [2]


def test_a_retried_idempotent_batch_gets_its_first_offsets_back() -> None:
    partition = FakePartition()
    partition.hw = 10
    batch = _batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    first = asyncio.run(produce(_broker(partition), _produce_body(batch, acks=1), 9))
    again = asyncio.run(produce(_broker(partition), _produce_body(batch, acks=1), 9))
    for response in (first, again):
        assert response.responses[0].partition_responses[0].base_offset == 0
    assert partition.log.end_offset == 2


def test_metadata_and_list_offsets_speak_for_the_partition() -> None:
    partition = FakePartition()
    partition.log.append_batches_as_leader(_batch(4), 3)
    partition.hw = 4
    broker = _broker(partition)
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
