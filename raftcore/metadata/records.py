"""The records of the cluster metadata log, with the schemas of KRaft's metadata records
(Kafka's ``metadata/src/main/resources/common/metadata/``), each a flexible message:

- TopicRecord (api key 2, v0): ``Name string, TopicId uuid``
- PartitionRecord (3, v0): ``PartitionId int32, TopicId uuid, Replicas [int32], Isr [int32],
  RemovingReplicas [int32], AddingReplicas [int32], Leader int32, LeaderEpoch int32,
  PartitionEpoch int32`` (and LeaderRecoveryState, tag 0, left at its default)
- ConfigRecord (4, v0): ``ResourceType int8, ResourceName string, Name string,
  Value nullable string`` (null: back to the default)
- PartitionChangeRecord (5, v0): ``PartitionId int32, TopicId uuid``, and as tagged fields only
  what changed: Isr (tag 0), Leader (1; -2 unchanged), Replicas (2), RemovingReplicas (3),
  AddingReplicas (4)
- RemoveTopicRecord (9, v0): ``TopicId uuid``

A record value is framed as Kafka's metadata serde frames it: an unsigned varint frame version
(1), the api key and the record's version, then the message. :func:`decode_record` answers a
damaged value, an unknown record type or an unknown version with
:class:`~raftcore.errors.CorruptRecordError`, one line naming the record and the byte.

In raftcore a partition's leader is elected by its own Raft group: a PartitionRecord's
``leader`` and ``isr`` are what the controller knew when it wrote the record, and the preferred
leader is always the first replica.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raftcore.errors import CorruptRecordError
from raftcore.metadata.codec import Reader, Writer
from raftcore.metadata.topic_id import TopicId

__all__ = [
    "ConfigRecord",
    "MetadataRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "RemoveTopicRecord",
    "TopicRecord",
    "decode_record",
    "encode_record",
]

FRAME_VERSION = 1
NO_LEADER = -1
LEADER_UNCHANGED = -2  # PartitionChangeRecord: the leader did not change
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC


def _topic_id(r: Reader) -> TopicId:
    return TopicId(r.take(16))


@dataclass(frozen=True, slots=True)
class TopicRecord:
    API_KEY = 2
    name: str
    topic_id: TopicId

    def write(self, w: Writer) -> None:
        w.string(self.name)
        w.raw(self.topic_id.raw)
        w.tags()

    @classmethod
    def read(cls, r: Reader) -> TopicRecord:
        name = r.string()
        if name is None:
            raise r.fail("a null topic name")
        topic_id = _topic_id(r)
        r.tags()
        return cls(name, topic_id)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    API_KEY = 3
    topic_id: TopicId
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def write(self, w: Writer) -> None:
        w.int32(self.partition_id)
        w.raw(self.topic_id.raw)
        for ids in (self.replicas, self.isr, self.removing_replicas, self.adding_replicas):
            w.int32s(ids)
        w.int32(self.leader)
        w.int32(self.leader_epoch)
        w.int32(self.partition_epoch)
        w.tags()

    @classmethod
    def read(cls, r: Reader) -> PartitionRecord:
        partition_id = r.int32()
        topic_id = _topic_id(r)
        arrays = []
        for field in ("Replicas", "Isr", "RemovingReplicas", "AddingReplicas"):
            ids = r.int32s()
            if ids is None:
                raise r.fail(f"a null {field}")
            arrays.append(ids)
        epochs = (r.int32(), r.int32(), r.int32())  # Leader, LeaderEpoch, PartitionEpoch
        r.tags()  # LeaderRecoveryState (tag 0) is not used
        replicas, isr, removing, adding = arrays
        return cls(topic_id, partition_id, replicas, isr, removing, adding, *epochs)


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    API_KEY = 4
    resource_name: str
    name: str
    value: str | None  # None: the config goes back to its default
    resource_type: int = TOPIC_RESOURCE

    def write(self, w: Writer) -> None:
        w.int8(self.resource_type)
        w.string(self.resource_name)
        w.string(self.name)
        w.string(self.value)
        w.tags()

    @classmethod
    def read(cls, r: Reader) -> ConfigRecord:
        resource_type = r.int8()
        resource_name, name = r.string(), r.string()
        if resource_name is None or name is None:
            raise r.fail("a null resource or config name")
        value = r.string()
        r.tags()
        return cls(resource_name, name, value, resource_type)


# PartitionChangeRecord's tagged fields
_ISR, _LEADER, _REPLICAS, _REMOVING, _ADDING = range(5)


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """What changed in a partition; None (or LEADER_UNCHANGED) for what did not."""

    API_KEY = 5
    topic_id: TopicId
    partition_id: int
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    isr: tuple[int, ...] | None = None
    leader: int = LEADER_UNCHANGED

    def write(self, w: Writer) -> None:
        w.int32(self.partition_id)
        w.raw(self.topic_id.raw)
        fields: dict[int, bytes] = {}
        for tag, ids in (
            (_ISR, self.isr),
            (_REPLICAS, self.replicas),
            (_REMOVING, self.removing_replicas),
            (_ADDING, self.adding_replicas),
        ):
            if ids is not None:
                field = Writer()
                field.int32s(ids)
                fields[tag] = field.value()
        if self.leader != LEADER_UNCHANGED:
            field = Writer()
            field.int32(self.leader)
            fields[_LEADER] = field.value()
        w.tags(fields)

    @classmethod
    def read(cls, r: Reader) -> PartitionChangeRecord:
        partition_id = r.int32()
        topic_id = _topic_id(r)
        fields = r.tags()

        def ids(tag: int, name: str) -> tuple[int, ...] | None:
            if tag not in fields:
                return None
            inner = Reader(fields[tag], f"{r.what} {name}")
            found = inner.int32s()
            inner.end()
            return found

        leader = LEADER_UNCHANGED
        if _LEADER in fields:
            inner = Reader(fields[_LEADER], f"{r.what} Leader")
            leader = inner.int32()
            inner.end()
        return cls(
            topic_id,
            partition_id,
            replicas=ids(_REPLICAS, "Replicas"),
            removing_replicas=ids(_REMOVING, "RemovingReplicas"),
            adding_replicas=ids(_ADDING, "AddingReplicas"),
            isr=ids(_ISR, "Isr"),
            leader=leader,
        )


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    API_KEY = 9
    topic_id: TopicId

    def write(self, w: Writer) -> None:
        w.raw(self.topic_id.raw)
        w.tags()

    @classmethod
    def read(cls, r: Reader) -> RemoveTopicRecord:
        topic_id = _topic_id(r)
        r.tags()
        return cls(topic_id)


MetadataRecord = (
    TopicRecord | PartitionRecord | ConfigRecord | PartitionChangeRecord | RemoveTopicRecord
)

# api key -> (name, the highest version this code reads, reader)
_READERS: dict[int, tuple[str, int, Callable[[Reader], MetadataRecord]]] = {
    TopicRecord.API_KEY: ("TopicRecord", 0, TopicRecord.read),
    PartitionRecord.API_KEY: ("PartitionRecord", 0, PartitionRecord.read),
    ConfigRecord.API_KEY: ("ConfigRecord", 0, ConfigRecord.read),
    PartitionChangeRecord.API_KEY: (
        "PartitionChangeRecord",
        0,
        PartitionChangeRecord.read,
    ),
    RemoveTopicRecord.API_KEY: ("RemoveTopicRecord", 0, RemoveTopicRecord.read),
}


def encode_record(record: MetadataRecord) -> bytes:
    """The framed value of ``record`` (frame version 1, api key, version 0, message)."""
    w = Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(record.API_KEY)
    w.uvarint(0)
    record.write(w)
    return w.value()


def decode_record(data: bytes, where: str = "metadata record") -> MetadataRecord:
    """The record framed in ``data``; CorruptRecordError (one line, prefixed with ``where``,
    e.g. the log offset) for damage, an unknown record type or version."""
    r = Reader(bytes(data), where)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise r.fail(f"unknown frame version {frame}")
    api_key = r.uvarint()
    version = r.uvarint()
    if api_key not in _READERS:
        raise r.fail(f"unknown metadata record type {api_key}")
    name, highest, read = _READERS[api_key]
    if version > highest:
        raise r.fail(f"{name} version {version} is not known here (reads 0 to {highest})")
    r.what = f"{where} ({name})"
    try:
        record = read(r)
    except ValueError as exc:  # a value the dataclass refuses
        if isinstance(exc, CorruptRecordError):
            raise
        raise r.fail(str(exc)) from None
    r.end()
    return record
