"""A fake :class:`~raftcore.kafka.partition.Partition` and a :class:`Broker` over it, for the
Kafka API's tests (no node, no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from raftcore.endpoints import Endpoint
from raftcore.kafka.partition import Broker, Partition
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
        self.group_writes: list[int] = []  # the requests in each append_parts write

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

    def append_parts(self, records: Any, *, checked: Any, counts: list[int]) -> list[Appended]:
        self.group_writes.append(len(counts))
        first, _ = self.append(records, track=True, checked=checked)
        parts = []
        for count in counts:
            parts.append(Appended(first, first + count - 1, self.epoch, token=1))
            first += count
        return parts

    def at_iteration_end(self, callback: Any) -> None:
        asyncio.get_running_loop().call_soon(callback)

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

    def voter_endpoints(self) -> list[tuple[int, Endpoint]]:
        return self.replica_endpoints()

    def quorum(self) -> Any:
        return None

    def now_ms(self) -> int:
        return 0


def broker_of(partition: Partition) -> Broker:
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


def batch(n: int, **kwargs: Any) -> bytes:
    return bytes(encode_batch([(b"k", b"v")] * n, base_offset=0, **kwargs))


def produce_body(records: bytes, acks: int = -1) -> Any:
    part = SimpleNamespace(index=0, records=records)
    topic = SimpleNamespace(name=TOPIC, partition_data=[part])
    return SimpleNamespace(acks=acks, timeout_ms=1000, transactional_id=None, topic_data=[topic])


def kafka_python_producer(bootstrap: list[str]) -> Any:
    """kafka-python's KafkaProducer as the cross-checks use it: acks=all, retried through a
    leader change, metadata refreshed every second."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        retries=20,
        retry_backoff_ms=100,
        request_timeout_ms=10000,
        metadata_max_age_ms=1000,
    )
