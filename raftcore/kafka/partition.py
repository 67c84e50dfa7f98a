"""What the Kafka client API sees of one replicated topic-partition: :class:`Partition`.

The API modules of :mod:`raftcore.kafka` decide what a Kafka client is answered; a partition
tells them who leads it and in which epoch, how far its log is committed, what a consumer is
served (by the core's rules: :mod:`raftcore.raft.serving`), takes appends and gives the
core's verdict on each (committed in the epoch that appended it, or not). They never see the
node that drives it: a node holds one partition today (its Raft group), and may hold many,
each its own Raft group, behind the same protocol.
:class:`raftcore.node.partition.NodePartition` is the node's.

:class:`Broker` is what the API knows of the node that serves it: its id and cluster, its
bounds, its producer ids, its metrics, and its partitions by topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from raftcore.endpoints import Endpoint
    from raftcore.kafka.produce_group import ProduceGroup
    from raftcore.kafka.producer_ids import ProducerIdSource
    from raftcore.kafka.producer_state import ProducerStateManager
    from raftcore.raft import Appended, LeaderAndEpoch, RaftCore
    from raftcore.raft.serving import CommittedRead
    from raftcore.raft.snapshots import DeleteRecordsResult

__all__ = ["Broker", "KafkaMetrics", "Partition"]


class Partition(Protocol):
    """One topic-partition, replicated by its own Raft group."""

    @property
    def topic(self) -> str:
        """The topic's name."""
        ...

    @property
    def topic_id(self) -> bytes:
        """The topic's 16-byte id (Fetch v13+, Metadata v10+; KIP-516)."""
        ...

    @property
    def index(self) -> int:
        """The partition's index in its topic."""
        ...

    # ---- leadership --------------------------------------------------------------------------

    def leader_and_epoch(self) -> LeaderAndEpoch:
        """The leader this replica knows of, and the epoch it is in."""
        ...

    def leader_hint(self) -> LeaderAndEpoch:
        """Whom clients should go to: the leader, but nobody while this replica has resigned
        and no successor is known yet (KIP-951's CurrentLeader)."""
        ...

    @property
    def epoch(self) -> int:
        """This replica's epoch (a consumer's CurrentLeaderEpoch is checked against it)."""
        ...

    def is_leader(self) -> bool:
        """This replica leads its epoch."""
        ...

    def leads(self, epoch: int) -> bool:
        """This replica is running and still leads ``epoch``."""
        ...

    def takes_appends(self) -> bool:
        """This replica leads and takes appends now (not handing leadership over, not
        resigning)."""
        ...

    # ---- the log -------------------------------------------------------------------------------

    def high_watermark(self) -> int | None:
        """The committed end; None on a leader that does not know it yet (no record of its
        own epoch committed)."""
        ...

    def log_start_offset(self) -> int: ...

    def log_end_offset(self) -> int: ...

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at ``offset`` (-1 when unknown)."""
        ...

    def batches(self) -> Iterable[Any]:
        """The log's batches from its start (ListOffsets by timestamp)."""
        ...

    def read_committed(self, offset: int, max_bytes: int, leader_epoch: int) -> CommittedRead:
        """What a consumer at ``offset`` is served: at most ``max_bytes`` of committed
        batches (the first whole; 0 reads nothing) if this replica leads ``leader_epoch``
        (-1: any) and knows its high watermark, else the rule that refused it
        (:mod:`raftcore.raft.serving`). A damaged batch is never served: the partition
        reports it itself."""
        ...

    async def wait_high_watermark_change(self, timeout_s: float) -> None:
        """Return when the high watermark moves, or after ``timeout_s``."""
        ...

    async def wait_log_start_change(self, timeout_s: float) -> None:
        """Return when the log start offset moves or this replica's role changes, or after
        ``timeout_s`` (DeleteRecords waits on it)."""
        ...

    # ---- appends and their verdicts ------------------------------------------------------------

    def append(self, records: Any, *, track: bool, checked: Any = None) -> Appended:
        """Append producer-built batches (leader only: NotLeaderError; CorruptRecordError or
        InvalidAppendError for batches the log refuses). With ``track``, the caller waits for
        the verdict (:meth:`wait_verdict`) or forgets it (:meth:`forget`). ``checked`` is
        the scan of ``records`` made when their CRCs and records were validated: they are
        then restamped where they lie and not checked again."""
        ...

    def append_parts(self, records: Any, *, checked: Any, counts: list[int]) -> list[Appended]:
        """Append several requests' batches (``records``, scanned and checked as ``checked``)
        in one write, tracked: one :class:`Appended` per part of ``counts`` records, in
        order, each with its own verdict to wait for or forget. Raises as :meth:`append`."""
        ...

    def watch(self, first_offset: int, last_offset: int) -> Appended:
        """Track records already in the leader's log (a retried idempotent batch) as if just
        appended."""
        ...

    def at_iteration_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the event loop has run what is ready now (the other requests
        that arrived in this iteration), in one hop with whatever else waits for that."""
        ...

    async def wait_verdict(self, appended: Appended, timeout_s: float | None) -> None:
        """Return once ``appended`` is committed in the epoch that appended it; NotLeaderError
        (naming the leader) as soon as that leadership ends, RaftcoreError when the replica
        stops, TimeoutError after ``timeout_s``."""
        ...

    def forget(self, appended: Appended) -> None:
        """Nobody waits for the verdict on ``appended`` any more."""
        ...

    @property
    def producers(self) -> ProducerStateManager:
        """The producers' sequences, as this replica's log holds them."""
        ...

    def delete_records(self, offset: int) -> DeleteRecordsResult | None:
        """Ask that the log start at ``offset`` (DeleteRecords): the leader's decision, and
        whether it is done already; None when this replica does not run or does not lead."""
        ...

    # ---- replicas ------------------------------------------------------------------------------

    def replicas(self) -> list[int]:
        """The ids of the voters in force, by id."""
        ...

    def replica_endpoints(self) -> list[tuple[int, Endpoint]]:
        """(id, client endpoint) of every voter whose client endpoint is known, by id."""
        ...

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        """Where ``node_id`` takes client requests, if known (KIP-951's NodeEndpoints)."""
        ...

    def voter_endpoints(self) -> list[tuple[int, Endpoint]]:
        """(id, endpoint) of every voter whose node listener is known, by id (where the other
        nodes reach it: DescribeQuorum's voter endpoints, KIP-853)."""
        ...

    def quorum(self) -> RaftCore | None:
        """The Raft group itself, read only, for DescribeQuorum's replica table (None before
        the replica runs)."""
        ...

    def now_ms(self) -> int:
        """The group's clock (monotonic milliseconds, as its replica timestamps)."""
        ...


class KafkaMetrics(Protocol):
    """The counters the API adds to."""

    produce_records: int

    def kafka_request(self, key: int) -> Callable[[float], None]: ...


@dataclass(slots=True)
class Broker:
    """The node serving the Kafka API, as the API sees it."""

    node_id: int
    cluster_id: str
    listener_name: str
    #: SaslHandshake and SaslAuthenticate are advertised (a SASL listener)
    uses_sasl: bool
    #: Kafka's ``fetch.max.bytes``: the most one Fetch answer holds
    fetch_max_bytes: int
    #: Kafka's ``max.message.bytes``: the largest batch a producer may send
    max_message_bytes: int
    #: the node's log prefix (``[node 3]``)
    prefix: str
    metrics: KafkaMetrics
    producer_ids: ProducerIdSource
    partitions: list[Partition] = field(default_factory=list)
    #: each partition's acks=all appends of this loop iteration (made on first use)
    produce_groups: dict[int, ProduceGroup] = field(default_factory=dict)
    #: the configuration DescribeConfigs reports, by Kafka's names (raftcore.kafka.topic_admin)
    topic_configs: dict[str, str] = field(default_factory=dict)
    broker_configs: dict[str, str] = field(default_factory=dict)
    #: the consumer groups' coordinators (raftcore.node.offsets_groups.GroupCoordinators);
    #: None where the node has none (then group requests hear COORDINATOR_NOT_AVAILABLE)
    coordinators: Any = None
    #: the cluster metadata (topics created at run time) and the controller, when the node
    #: has them (:class:`raftcore.kafka.cluster.Cluster`)
    cluster: Any = None
    #: where the leaders of partitions not replicated here are asked for (the node's)
    leader_lookup: Any = None
    #: the node's own topic (``NodeConfig.topic``): with ``cluster``, every other topic is
    #: known by the metadata image alone (a replica still open here of a topic the image no
    #: longer has is closing)
    own_topic: str | None = None

    def produce_group(self, partition: Partition) -> ProduceGroup:
        """``partition``'s :class:`~raftcore.kafka.produce_group.ProduceGroup`."""
        group = self.produce_groups.get(id(partition))
        if group is None:
            from raftcore.kafka.produce_group import ProduceGroup

            group = ProduceGroup(partition, asyncio.get_running_loop())
            self.produce_groups[id(partition)] = group
        return group

    def topics(self) -> list[str]:
        """The topics served, in order."""
        return list(dict.fromkeys(p.topic for p in self.partitions))

    def topic_partitions(self, topic: str) -> list[Partition]:
        return [p for p in self.partitions if p.topic == topic]

    def partition(self, topic: str | None, index: int) -> Partition | None:
        """The partition ``index`` of the topic named ``topic``; None if not served here."""
        for p in self.partitions:
            if p.topic == topic and p.index == index:
                return p
        return None

    def partition_by_id(self, topic_id: bytes, index: int) -> Partition | None:
        """The partition ``index`` of the topic whose id is ``topic_id`` (KIP-516)."""
        for p in self.partitions:
            if p.topic_id == topic_id and p.index == index:
                return p
        return None

    def absent(self, topic: str | None, index: int, topic_id: bytes | None = None) -> int:
        """The error for partition ``index`` of a topic (by name, or by id) this node has no
        replica of: NOT_LEADER_OR_FOLLOWER when the cluster metadata has it (it is led
        elsewhere: the client asks Metadata again), else UNKNOWN_TOPIC_OR_PARTITION
        (UNKNOWN_TOPIC_ID for an unknown id)."""
        from raftcore.error_codes import Errors

        image = None if self.cluster is None else self.cluster.image
        found = None
        if image is not None:
            if topic is not None:
                found = image.topic(topic)
            elif topic_id is not None and len(topic_id) == 16:
                from raftcore.metadata.topic_id import TopicId

                found = image.topic_by_id(TopicId(topic_id))
        if found is not None and 0 <= index < len(found.partitions):
            return Errors.NOT_LEADER_OR_FOLLOWER
        if topic is None and found is None:
            return Errors.UNKNOWN_TOPIC_ID
        return Errors.UNKNOWN_TOPIC_OR_PARTITION

    def topic_named_by(self, topic_id: bytes) -> str | None:
        """The name of the topic whose id is ``topic_id``; None if not served here."""
        return next((p.topic for p in self.partitions if p.topic_id == topic_id), None)
