"""The coordinator's requests and answers: Kafka's JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups and
DeleteGroups, as values independent of the wire version (the Kafka API layer maps each
version's fields onto these: JoinGroup v0 has no rebalance timeout, so it passes the session
timeout; v4+ sets ``require_known_member_id``; v9+ ``supports_skip_assignment``).
"""

from __future__ import annotations

from dataclasses import dataclass

from raftcore.error_codes import Errors
from raftcore.topic_partition import TopicPartition

__all__ = [
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "GroupError",
    "HeartbeatRequest",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinedMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeftMember",
    "ListedGroup",
    "MemberIdentity",
    "OffsetCommitRequest",
    "OffsetFetchResponse",
    "PartitionCommit",
    "PartitionError",
    "SyncGroupRequest",
    "SyncGroupResponse",
]

# The member id of a member that has none yet (Kafka's JoinGroupRequest.UNKNOWN_MEMBER_ID).
UNKNOWN_MEMBER = ""


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    protocol_type: str
    # (protocol name, the member's metadata for it), in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = False  # JoinGroup v9+


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: Errors
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()  # the leader's only


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignments: tuple[tuple[str, bytes], ...] = ()  # the leader's: (member id, assignment)


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: Errors
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]  # v0-2 send one member, v3+ a batch


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: Errors


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: Errors
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    partition: TopicPartition
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    offsets: tuple[PartitionCommit, ...]
    generation_id: int = -1  # -1: a commit outside group management (a "simple" commit)
    member_id: str = UNKNOWN_MEMBER
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionError:
    """One partition's answer in OffsetCommit and OffsetDelete."""

    partition: TopicPartition
    error: Errors


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    partition: TopicPartition
    offset: int  # -1: nothing committed
    leader_epoch: int = -1
    metadata: str = ""
    error: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    group_id: str
    error: Errors
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupError:
    """A group's answer in DeleteGroups, and the top-level answer of OffsetDelete."""

    group_id: str
    error: Errors


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: Errors
    state: str
    protocol_type: str = ""
    protocol_name: str = ""
    members: tuple[DescribedMember, ...] = ()
