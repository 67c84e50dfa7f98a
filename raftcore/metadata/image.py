"""The cluster metadata as every node holds it: the records of ``__cluster_metadata`` applied
in log order.

:class:`MetadataImage` knows the topics by name and by id, each topic's partitions (replicas,
the preferred leader first) and its configs. Applying is deterministic: the same records in the
same order give equal images on every node, and :meth:`MetadataImage.records` writes an image
back as the records that rebuild it (what a metadata snapshot holds).

A record that contradicts the image is refused whole with :class:`MetadataError` and Kafka's
error, and the image is left as it was: every record is checked before anything changes. The
controller checks requests before it writes records (:mod:`raftcore.metadata.controller`), so
a refusal here means a log the controller did not write or a bug; every node refuses the same
record the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from raftcore.error_codes import Errors
from raftcore.metadata.errors import MetadataError
from raftcore.metadata.records import (
    LEADER_UNCHANGED,
    NO_LEADER,
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftcore.metadata.topic_configs import check_config, effective_configs
from raftcore.metadata.topic_id import TopicId
from raftcore.metadata.topic_names import check_topic_name, collision_key

__all__ = ["MetadataImage", "PartitionImage", "TopicImage"]


@dataclass(frozen=True, slots=True)
class PartitionImage:
    topic_id: TopicId
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0

    @property
    def preferred_leader(self) -> int:
        """The first replica: the node that should lead the partition when it is up."""
        return self.replicas[0]


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: TopicId
    partitions: tuple[PartitionImage, ...]
    overrides: tuple[tuple[str, str], ...]  # the topic's own configs, by name

    @property
    def configs(self) -> dict[str, str]:
        """Every topic config: the topic's own values over Kafka's defaults."""
        return effective_configs(dict(self.overrides))

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


class _Topic:
    __slots__ = ("name", "overrides", "partitions", "topic_id")

    def __init__(self, name: str, topic_id: TopicId) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions: list[PartitionImage] = []
        self.overrides: dict[str, str] = {}

    def image(self) -> TopicImage:
        return TopicImage(
            self.name, self.topic_id, tuple(self.partitions), tuple(sorted(self.overrides.items()))
        )


def _fields(p: PartitionRecord | PartitionImage) -> dict[str, Any]:
    """A partition's fields by name: PartitionRecord and PartitionImage have the same ones."""
    return {f.name: getattr(p, f.name) for f in fields(PartitionImage)}


def _check_replicas(where: str, replicas: tuple[int, ...]) -> None:
    if not replicas:
        raise MetadataError(Errors.INVALID_REPLICATION_FACTOR, f"{where}: no replicas")
    if len(set(replicas)) != len(replicas) or min(replicas) < 0:
        raise MetadataError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"{where}: replicas {list(replicas)} are not distinct node ids",
        )


def _check_subset(where: str, field: str, ids: tuple[int, ...], replicas: tuple[int, ...]) -> None:
    outside = sorted(set(ids) - set(replicas))
    if outside:
        raise MetadataError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"{where}: {field} {outside} are not among the replicas {list(replicas)}",
        )


def _check_leader(where: str, leader: int, replicas: tuple[int, ...]) -> None:
    if leader != NO_LEADER and leader not in replicas:
        raise MetadataError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"{where}: leader {leader} is not among the replicas {list(replicas)}",
        )


class MetadataImage:
    """Topics, partitions and topic configs, as the applied records left them."""

    def __init__(self) -> None:
        self._ids: dict[str, TopicId] = {}  # by name
        self._topics: dict[TopicId, _Topic] = {}
        self._collisions: dict[str, str] = {}  # collision key -> the name holding it

    @classmethod
    def replay(cls, records: Iterable[MetadataRecord]) -> MetadataImage:
        image = cls()
        for record in records:
            image.apply(record)
        return image

    # ---- reading ------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self._ids.get(name)
        return None if topic_id is None else self._topics[topic_id].image()

    def topic_by_id(self, topic_id: TopicId) -> TopicImage | None:
        topic = self._topics.get(topic_id)
        return None if topic is None else topic.image()

    def topic_names(self) -> list[str]:
        return sorted(self._ids)

    def topics(self) -> Iterator[TopicImage]:
        """Every topic, by name."""
        for name in self.topic_names():
            yield self._topics[self._ids[name]].image()

    def partitions(self) -> Iterator[tuple[str, PartitionImage]]:
        """Every partition with its topic's name, by topic name and partition id."""
        for name in self.topic_names():
            for partition in self._topics[self._ids[name]].partitions:
                yield name, partition

    def colliding_topic(self, name: str) -> str | None:
        """The existing topic whose name differs from ``name`` only in '.' against '_'."""
        holder = self._collisions.get(collision_key(name))
        return None if holder == name else holder

    def records(self) -> list[MetadataRecord]:
        """The records that rebuild this image, topic by topic: what a snapshot holds."""
        out: list[MetadataRecord] = []
        for topic in self.topics():
            out.append(TopicRecord(topic.name, topic.topic_id))
            out.extend(ConfigRecord(topic.name, k, v) for k, v in topic.overrides)
            out.extend(PartitionRecord(**_fields(p)) for p in topic.partitions)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return self.records() == other.records()

    __hash__ = None  # type: ignore[assignment]  # mutable

    # ---- applying -----------------------------------------------------------------------------

    def apply(self, record: MetadataRecord) -> None:
        """Apply one record, or refuse it whole with MetadataError (the image unchanged)."""
        if isinstance(record, TopicRecord):
            self._apply_topic(record)
        elif isinstance(record, PartitionRecord):
            self._apply_partition(record)
        elif isinstance(record, PartitionChangeRecord):
            self._apply_partition_change(record)
        elif isinstance(record, ConfigRecord):
            self._apply_config(record)
        elif isinstance(record, RemoveTopicRecord):
            self._apply_remove_topic(record)
        else:
            raise MetadataError(Errors.INVALID_REQUEST, f"not a metadata record: {record!r}")

    def _topic_of(self, topic_id: TopicId, what: str) -> _Topic:
        topic = self._topics.get(topic_id)
        if topic is None:
            raise MetadataError(Errors.UNKNOWN_TOPIC_ID, f"{what}: no topic has id {topic_id}")
        return topic

    def _apply_topic(self, record: TopicRecord) -> None:
        check_topic_name(record.name)
        if record.name in self._ids:
            raise MetadataError(Errors.TOPIC_ALREADY_EXISTS, f"topic {record.name} already exists")
        if record.topic_id.reserved or record.topic_id in self._topics:
            raise MetadataError(
                Errors.INVALID_REQUEST,
                f"topic {record.name}: id {record.topic_id} is reserved or already taken",
            )
        self._ids[record.name] = record.topic_id
        self._topics[record.topic_id] = _Topic(record.name, record.topic_id)
        self._collisions.setdefault(collision_key(record.name), record.name)

    def _apply_partition(self, record: PartitionRecord) -> None:
        topic = self._topic_of(record.topic_id, f"partition {record.partition_id}")
        where = f"{topic.name}-{record.partition_id}"
        # Partitions are added in order, never twice: ids are 0 .. count-1.
        if record.partition_id != len(topic.partitions):
            raise MetadataError(
                Errors.INVALID_PARTITIONS,
                f"{where}: topic {topic.name} has {len(topic.partitions)} partitions, "
                f"the next is {len(topic.partitions)}",
            )
        _check_replicas(where, record.replicas)
        for field, ids in (
            ("isr", record.isr),
            ("adding replicas", record.adding_replicas),
            ("removing replicas", record.removing_replicas),
        ):
            _check_subset(where, field, ids, record.replicas)
        _check_leader(where, record.leader, record.replicas)
        topic.partitions.append(PartitionImage(**_fields(record)))

    def _apply_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._topic_of(record.topic_id, f"a change of partition {record.partition_id}")
        where = f"{topic.name}-{record.partition_id}"
        if not 0 <= record.partition_id < len(topic.partitions):
            raise MetadataError(
                Errors.UNKNOWN_TOPIC_OR_PARTITION,
                f"{where}: topic {topic.name} has {len(topic.partitions)} partitions",
            )
        old = topic.partitions[record.partition_id]
        replicas = old.replicas if record.replicas is None else record.replicas
        _check_replicas(where, replicas)
        new = replace(
            old,
            replicas=replicas,
            isr=old.isr if record.isr is None else record.isr,
            adding_replicas=(
                old.adding_replicas if record.adding_replicas is None else record.adding_replicas
            ),
            removing_replicas=(
                old.removing_replicas
                if record.removing_replicas is None
                else record.removing_replicas
            ),
            partition_epoch=old.partition_epoch + 1,
        )
        if record.leader != LEADER_UNCHANGED:
            new = replace(new, leader=record.leader, leader_epoch=old.leader_epoch + 1)
        for field, ids in (
            ("isr", new.isr),
            ("adding replicas", new.adding_replicas),
            ("removing replicas", new.removing_replicas),
        ):
            _check_subset(where, field, ids, new.replicas)
        _check_leader(where, new.leader, new.replicas)
        topic.partitions[record.partition_id] = new

    def _apply_config(self, record: ConfigRecord) -> None:
        if record.resource_type != TOPIC_RESOURCE:
            raise MetadataError(
                Errors.INVALID_REQUEST,
                f"config {record.name} of resource type {record.resource_type}: "
                "only topic configs are kept",
            )
        topic_id = self._ids.get(record.resource_name)
        if topic_id is None:
            raise MetadataError(
                Errors.UNKNOWN_TOPIC_OR_PARTITION,
                f"config {record.name} of topic {record.resource_name}: no such topic",
            )
        topic = self._topics[topic_id]
        if record.value is None:
            topic.overrides.pop(record.name, None)
            return
        check_config(topic.name, record.name, record.value)
        topic.overrides[record.name] = record.value

    def _apply_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topic_of(record.topic_id, "removing a topic")
        del self._topics[record.topic_id]
        del self._ids[topic.name]
        key = collision_key(topic.name)
        if self._collisions.get(key) == topic.name:
            del self._collisions[key]
            for name in self._ids:  # another name may share the key (a log not ours)
                if collision_key(name) == key:
                    self._collisions[key] = name
                    break
