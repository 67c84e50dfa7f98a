"""The records a coordinator persists, after Kafka's ``__consumer_offsets`` schemas
(``group-coordinator/src/main/resources/common/message``): an int16 version, then the struct.

- OffsetCommitKey v1 (group, topic, partition) -> OffsetCommitValue v3 (offset, leader epoch,
  metadata, commit time); a null value deletes the offset.
- GroupMetadataKey v2 (group) -> GroupMetadataValue v3 (protocol type, generation, protocol,
  leader, state time, members); a null value deletes the group.

Readers accept every version of the values Kafka wrote (0-4; v4 is flexible: compact strings
and tagged fields). A damaged record raises :class:`CorruptRecordError` with one line naming
the record and the byte, never an assertion or an IndexError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from raftcore.errors import CorruptRecordError
from raftcore.topic_partition import TopicPartition

__all__ = [
    "GroupMetadataRecord",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetAndMetadata",
    "OffsetCommitRecord",
    "Record",
    "decode",
    "group_metadata_record",
    "offset_commit_record",
]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
_FLEXIBLE = 4


@dataclass(frozen=True, slots=True)
class Record:
    """One key/value record for the offsets partition; ``value`` None is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    group_id: str
    partition: TopicPartition
    value: OffsetAndMetadata | None


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    group_id: str
    value: GroupMetadataValue | None


class _Writer:
    __slots__ = ("out",)

    def __init__(self, version: int) -> None:
        self.out = bytearray(struct.pack(">h", version))

    def int32(self, n: int) -> _Writer:
        self.out += struct.pack(">i", n)
        return self

    def int64(self, n: int) -> _Writer:
        self.out += struct.pack(">q", n)
        return self

    def string(self, text: str | None) -> _Writer:
        if text is None:
            self.out += struct.pack(">h", -1)
            return self
        data = text.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"a string of {len(data)} bytes does not fit an int16 length")
        self.out += struct.pack(">h", len(data)) + data
        return self

    def bytes_(self, data: bytes) -> _Writer:
        self.out += struct.pack(">i", len(data)) + data
        return self

    def value(self) -> bytes:
        return bytes(self.out)


def offset_commit_record(
    group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None
) -> Record:
    key = _Writer(OFFSET_KEY_VERSION).string(group_id).string(tp.topic).int32(tp.partition).value()
    if value is None:
        return Record(key, None)
    w = _Writer(OFFSET_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
    return Record(key, w.string(value.metadata).int64(value.commit_timestamp).value())


def group_metadata_record(group_id: str, value: GroupMetadataValue | None) -> Record:
    key = _Writer(GROUP_KEY_VERSION).string(group_id).value()
    if value is None:
        return Record(key, None)
    w = _Writer(GROUP_VALUE_VERSION).string(value.protocol_type).int32(value.generation)
    w.string(value.protocol).string(value.leader).int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return Record(key, w.value())


class _Reader:
    __slots__ = ("data", "flexible", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.flexible = False

    def fail(self, problem: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.what}: {problem} at byte {self.pos}", self.pos)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"{n} bytes wanted, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if shift > 28:
                raise self.fail("an unsigned varint longer than 5 bytes")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def _length(self, int_width: int) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int16() if int_width == 2 else self.int32()

    def nullable_string(self) -> str | None:
        n = self._length(2)
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string not in UTF-8") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise self.fail("a null string where one is required")
        return text

    def bytes_(self) -> bytes:
        n = self._length(4)
        if n < 0:
            raise self.fail("null bytes where they are required")
        return self.take(n)

    def count(self) -> int:
        n = self._length(4)
        if n < 0 or n > len(self.data) - self.pos:
            raise self.fail(f"an array of {n} elements")
        return n

    def tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} bytes after the end")


def decode(record: Record) -> OffsetCommitRecord | GroupMetadataRecord:
    """The record's meaning, or CorruptRecordError naming what is wrong."""
    key = _Reader(record.key, "__consumer_offsets key")
    version = key.int16()
    if version in (0, 1):
        group, topic, partition = key.string(), key.string(), key.int32()
        key.end()
        tp = TopicPartition(topic, partition)
        if record.value is None:
            return OffsetCommitRecord(group, tp, None)
        return OffsetCommitRecord(group, tp, _offset_value(record.value, f"offset {group}/{tp}"))
    if version == GROUP_KEY_VERSION:
        group = key.string()
        key.end()
        if record.value is None:
            return GroupMetadataRecord(group, None)
        return GroupMetadataRecord(group, _group_value(record.value, f"group {group!r}"))
    raise key.fail(f"key version {version} is not a classic group's record")


def _offset_value(data: bytes, what: str) -> OffsetAndMetadata:
    r = _Reader(data, f"__consumer_offsets value of {what}")
    version = r.int16()
    if not 0 <= version <= 4:
        raise r.fail(f"OffsetCommitValue version {version}")
    r.flexible = version >= _FLEXIBLE
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    if version == 1:
        r.int64()  # expireTimestamp, which nothing reads any more
    r.tags()
    r.end()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp)


def _group_value(data: bytes, what: str) -> GroupMetadataValue:
    r = _Reader(data, f"__consumer_offsets value of {what}")
    version = r.int16()
    if not 0 <= version <= 4:
        raise r.fail(f"GroupMetadataValue version {version}")
    r.flexible = version >= _FLEXIBLE
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.count()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription, assignment = r.bytes_(), r.bytes_()
        r.tags()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tags()
    r.end()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )
