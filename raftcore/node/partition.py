"""A topic-partition as the Kafka API sees it (:class:`raftcore.kafka.partition.Partition`):
one Raft group of the node, its log and its producer state, behind the questions the API asks.
Each group owns one :class:`NodePartition`; the node owns one
:class:`~raftcore.kafka.partition.Broker` listing them (:func:`kafka_broker`), through which the
API finds a partition by topic and index; the API modules get nothing else of the node."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftcore.kafka.partition import Broker
from raftcore.raft import NotLeaderError
from raftcore.raft.serving import CommittedRead, read_committed

if TYPE_CHECKING:
    from raftcore.endpoints import Endpoint
    from raftcore.kafka.producer_state import ProducerStateManager
    from raftcore.node.group import RaftGroup
    from raftcore.node.node import RaftNode
    from raftcore.node.peers import AddressBook
    from raftcore.raft import Appended, LeaderAndEpoch, RaftCore
    from raftcore.raft.snapshots import DeleteRecordsResult

__all__ = ["NodePartition", "kafka_broker"]


def kafka_broker(node: RaftNode) -> Broker:
    """What the Kafka API knows of ``node``: its settings, metrics, producer ids and the
    partitions of its groups."""
    cfg = node.config
    return Broker(
        node_id=cfg.node_id,
        cluster_id=cfg.cluster_id,
        listener_name=cfg.listener_name,
        uses_sasl=cfg.security.uses_sasl,
        fetch_max_bytes=cfg.fetch_max_bytes,
        max_message_bytes=cfg.log.max_message_bytes,
        prefix=node.prefix,
        metrics=node.metrics,
        producer_ids=node.producer_ids,
        partitions=[group.partition for group in node.groups.values()],
        own_topic=cfg.topic,
        topic_configs={
            "cleanup.policy": "delete",
            "retention.ms": str(cfg.retention.retention_ms),
            "retention.bytes": str(cfg.retention.retention_bytes),
            "segment.bytes": str(cfg.log.segment_bytes),
            "segment.ms": str(cfg.retention.segment_ms),
            "max.message.bytes": str(cfg.log.max_message_bytes),
        },
        broker_configs={
            "node.id": str(cfg.node_id),
            "broker.id": str(cfg.node_id),
            "log.retention.ms": str(cfg.retention.retention_ms),
            "log.retention.bytes": str(cfg.retention.retention_bytes),
            "log.segment.bytes": str(cfg.log.segment_bytes),
            "log.roll.ms": str(cfg.retention.segment_ms),
            "message.max.bytes": str(cfg.log.max_message_bytes),
            "fetch.max.bytes": str(cfg.fetch_max_bytes),
        },
    )


class NodePartition:
    """A Raft ``group`` as a :class:`~raftcore.kafka.partition.Partition`; the replicas and
    their endpoints come from the node's ``address_book``."""

    __slots__ = ("_address_book", "_group", "index", "topic", "topic_id")

    def __init__(self, group: RaftGroup, address_book: AddressBook) -> None:
        self._group = group
        self._address_book = address_book
        self.topic: str = group.name.topic
        self.topic_id: bytes = group.config.topic_id
        self.index = group.name.partition

    # ---- leadership --------------------------------------------------------------------------

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self._group.leader_and_epoch

    def leader_hint(self) -> LeaderAndEpoch:
        return self._group.leader_hint

    @property
    def epoch(self) -> int:
        core = self._group.core
        assert core is not None
        return core.epoch

    def is_leader(self) -> bool:
        return self._group.is_leader()

    def leads(self, epoch: int) -> bool:
        core = self._group.running_core()
        return core is not None and core.is_leader() and core.epoch == epoch

    def takes_appends(self) -> bool:
        core = self._group.core
        return core is not None and core.takes_appends()

    # ---- the log -------------------------------------------------------------------------------

    @property
    def _log(self) -> Any:
        log = self._group.log
        assert log is not None, "the node has not started"
        return log

    def high_watermark(self) -> int | None:
        return self._group.high_watermark

    def log_start_offset(self) -> int:
        return self._log.log_start_offset  # type: ignore[no-any-return]

    def log_end_offset(self) -> int:
        return self._log.end_offset  # type: ignore[no-any-return]

    def epoch_for_offset(self, offset: int) -> int:
        return self._log.epoch_for_offset(offset)  # type: ignore[no-any-return]

    def batches(self) -> Iterable[Any]:
        return self._log.batches()  # type: ignore[no-any-return]

    def read_committed(self, offset: int, max_bytes: int, leader_epoch: int) -> CommittedRead:
        group = self._group
        core = group.core
        read = read_committed(
            group.log,  # type: ignore[arg-type]  # not read unless the core leads
            leader=core is not None and core.is_leader(),
            epoch=-1 if core is None else core.epoch,
            high_watermark=group.high_watermark,
            offset=offset,
            max_bytes=max_bytes,
            leader_epoch=leader_epoch,
        )
        # Only sound batches leave (raftcore.raft.damage): the first damaged one and what
        # follows stay here, and the core hears of it.
        if read.damage is not None:
            group.report_damage(read.damage, "serving a consumer")
        return read

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        await self._group.wait_high_watermark_change(timeout_s)

    async def wait_log_start_change(self, timeout_s: float) -> None:
        await self._group.wait_log_start_change(timeout_s)

    # ---- appends and their verdicts ------------------------------------------------------------

    def append(self, records: Any, *, track: bool, checked: Any = None) -> Appended:
        return self._group.appends().append_batches(records, track, checked)

    def append_parts(self, records: Any, *, checked: Any, counts: list[int]) -> list[Appended]:
        return self._group.appends().append_batches_in_parts(records, checked, counts)

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        return self._group.appends().watch(first_offset, last_offset)

    def at_iteration_end(self, callback: Callable[[], None]) -> None:
        iteration_end = self._group.iteration_end
        assert iteration_end is not None, "the node has not started"
        iteration_end.add(callback)

    async def wait_verdict(self, appended: Appended, timeout_s: float | None) -> None:
        await self._group.wait_committed(appended, timeout_s)

    def forget(self, appended: Appended) -> None:
        self._group.verdicts.forget(appended)

    @property
    def producers(self) -> ProducerStateManager:
        return self._group.producers

    def delete_records(self, offset: int) -> DeleteRecordsResult | None:
        group = self._group
        core = group.running_core()
        if core is None or group.log is None:
            return None
        try:
            result = core.delete_records(offset, group.clock())
        except NotLeaderError:
            return None
        group.poke()  # a snapshot may be due now
        return result

    # ---- replicas ------------------------------------------------------------------------------

    def replicas(self) -> list[int]:
        return sorted(self._address_book.voter_set())

    def replica_endpoints(self) -> list[tuple[int, Endpoint]]:
        return self._address_book.client_endpoints()

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        return self._address_book.client_endpoint_of(node_id)

    def voter_endpoints(self) -> list[tuple[int, Endpoint]]:
        return self._address_book.voter_endpoints()

    def quorum(self) -> RaftCore | None:
        return self._group.core

    def now_ms(self) -> int:
        return self._group.clock()
