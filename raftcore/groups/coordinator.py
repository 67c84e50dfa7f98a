"""The classic group coordinator of one offsets partition, as a pure state machine.

Inputs: one call per request (each with the driver's ``ref`` for the answer and the time
``now_ms``), ``poll(now_ms)`` for the passage of time, ``replay(records, now_ms)`` for a new
leader of the offsets partition. Outputs: an :class:`~raftcore.groups.step.Output` of the
replies ready now and the records to persist; the driver appends the records and sends the
replies once they are committed, and calls ``poll`` by ``next_deadline()``. No sockets,
tasks or clocks; member ids come from the injected random generator. The same inputs give
the same outputs.

The rules live in their own modules: :mod:`~raftcore.groups.join`,
:mod:`~raftcore.groups.membership` (sync, heartbeat, leave), :mod:`~raftcore.groups.rebalance`
(completing a join, the deadlines), :mod:`~raftcore.groups.offsets`; the records in
:mod:`~raftcore.groups.records`.

After a failover, the replayed groups hold the last persisted generation: an Empty group, or
a Stable one with its members and assignments (each given a fresh session from ``now_ms``).
A rebalance in progress on the old coordinator was never persisted: its members' SyncGroup
with the newer generation hears ILLEGAL_GENERATION and they join again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from raftcore.error_codes import Errors
from raftcore.groups import join, membership, rebalance
from raftcore.groups.config import GroupConfig
from raftcore.groups.group import Group, GroupState, Member
from raftcore.groups.messages import (
    DescribedGroup,
    DescribedMember,
    GroupError,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListedGroup,
    OffsetCommitRequest,
    OffsetFetchResponse,
    PartitionError,
    SyncGroupRequest,
)
from raftcore.groups.offsets import OffsetStore, validate_commit
from raftcore.groups.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    Record,
    decode,
    group_metadata_record,
)
from raftcore.groups.step import Output, Step
from raftcore.topic_partition import TopicPartition

__all__ = ["GroupCoordinator"]


class GroupCoordinator:
    def __init__(self, config: GroupConfig | None = None, rng: random.Random | None = None) -> None:
        self.config = config or GroupConfig()
        self._rng = rng or random.Random(0)
        self._groups: dict[str, Group] = {}
        self.offsets = OffsetStore()

    def _step(self, now_ms: int) -> Step:
        return Step(self.config, now_ms, self._rng)

    def _settle(self, group: Group) -> None:
        """Keep a group once it holds someone; forget one a join left with nothing."""
        if group.size() or group.generation or group.group_id in self.offsets.groups():
            self._groups.setdefault(group.group_id, group)

    # -- membership

    def join_group(self, ref: object, req: JoinGroupRequest, now_ms: int) -> Output:
        step = self._step(now_ms)
        group = self._groups.get(req.group_id) or Group(req.group_id, state_timestamp=now_ms)
        join.join_group(group, req, ref, step)
        if req.group_id:
            self._settle(group)
        return step.out

    def sync_group(self, ref: object, req: SyncGroupRequest, now_ms: int) -> Output:
        step = self._step(now_ms)
        membership.sync_group(self._groups.get(req.group_id), req, ref, step)
        return step.out

    def heartbeat(self, ref: object, req: HeartbeatRequest, now_ms: int) -> Output:
        step = self._step(now_ms)
        step.reply(ref, membership.heartbeat(self._groups.get(req.group_id), req, step))
        return step.out

    def leave_group(self, ref: object, req: LeaveGroupRequest, now_ms: int) -> Output:
        step = self._step(now_ms)
        step.reply(ref, membership.leave_group(self._groups.get(req.group_id), req, step))
        return step.out

    # -- offsets

    def commit_offsets(self, ref: object, req: OffsetCommitRequest, now_ms: int) -> Output:
        """Answers a tuple of :class:`PartitionError`, one per partition committed."""
        step = self._step(now_ms)
        group = self._groups.get(req.group_id)
        error = validate_commit(group, req) if req.group_id else Errors.INVALID_GROUP_ID
        if error is not None:
            step.reply(ref, tuple(PartitionError(c.partition, error) for c in req.offsets))
            return step.out
        if group is None:
            group = self._groups[req.group_id] = Group(req.group_id, state_timestamp=now_ms)
        member = group.members.get(req.member_id)
        if member is not None:
            member.heartbeat_deadline = now_ms + member.session_timeout_ms
        step.reply(ref, self.offsets.commit(req, step))
        return step.out

    def fetch_offsets(
        self, group_id: str, partitions: tuple[TopicPartition, ...] | None
    ) -> OffsetFetchResponse:
        """OffsetFetch of one group (``partitions`` None: all it has)."""
        return self.offsets.fetch(group_id, partitions)

    def fetch_offsets_of_groups(
        self, wanted: Iterable[tuple[str, tuple[TopicPartition, ...] | None]]
    ) -> list[OffsetFetchResponse]:
        """OffsetFetch v8+: several groups in one request."""
        return [self.offsets.fetch(group_id, partitions) for group_id, partitions in wanted]

    def delete_offsets(
        self, ref: object, group_id: str, partitions: tuple[TopicPartition, ...], now_ms: int
    ) -> Output:
        """Answers a :class:`GroupError` and, when it is NONE, the partitions' answers."""
        step = self._step(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            step.reply(ref, (GroupError(group_id, Errors.GROUP_ID_NOT_FOUND), ()))
        elif not group.is_in(GroupState.EMPTY) and group.protocol_type != "consumer":
            step.reply(ref, (GroupError(group_id, Errors.NON_EMPTY_GROUP), ()))
        else:
            results = self.offsets.delete(group, partitions, step)
            step.reply(ref, (GroupError(group_id, Errors.NONE), results))
        return step.out

    def reset_offsets(
        self, ref: object, group_id: str, offsets: dict[TopicPartition, int], now_ms: int
    ) -> Output:
        """The operator's reset (``raftcore groups reset-offsets``): only of an Empty group
        (NON_EMPTY_GROUP otherwise, as Kafka's tool refuses an active group); the one way a
        committed offset moves back."""
        step = self._step(now_ms)
        group = self._groups.get(group_id)
        if group is not None and not group.is_in(GroupState.EMPTY):
            step.reply(ref, GroupError(group_id, Errors.NON_EMPTY_GROUP))
            return step.out
        if group is None:
            self._groups[group_id] = Group(group_id, state_timestamp=now_ms)
        self.offsets.reset(group_id, offsets, step)
        step.reply(ref, GroupError(group_id, Errors.NONE))
        return step.out

    # -- groups

    def delete_groups(self, ref: object, group_ids: Iterable[str], now_ms: int) -> Output:
        """Answers a tuple of :class:`GroupError`: only an Empty group can go."""
        step = self._step(now_ms)
        answers = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                answers.append(GroupError(group_id, Errors.GROUP_ID_NOT_FOUND))
                continue
            if not group.is_in(GroupState.EMPTY):
                answers.append(GroupError(group_id, Errors.NON_EMPTY_GROUP))
                continue
            self.offsets.delete_group(group_id, step)
            step.record(group_metadata_record(group_id, None))
            group.transition(GroupState.DEAD, now_ms)
            del self._groups[group_id]
            answers.append(GroupError(group_id, Errors.NONE))
        step.reply(ref, tuple(answers))
        return step.out

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedGroup]:
        wanted = {s.lower() for s in states}
        return [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self._groups.values(), key=lambda g: g.group_id)
            if not wanted or g.state.value.lower() in wanted
        ]

    def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        answers = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                answers.append(DescribedGroup(group_id, Errors.NONE, GroupState.DEAD.value))
                continue
            stable = group.is_in(GroupState.STABLE)
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name),
                    m.assignment if stable else b"",  # Kafka shows assignments only when Stable
                )
                for m in group.members.values()
            )
            answers.append(
                DescribedGroup(
                    group_id,
                    Errors.NONE,
                    group.state.value,
                    group.protocol_type or "",
                    group.protocol_name or "",
                    members,
                )
            )
        return answers

    def group(self, group_id: str) -> Group | None:
        """The group's state, for tests and the operator tools (not to be changed)."""
        return self._groups.get(group_id)

    # -- time

    def poll(self, now_ms: int) -> Output:
        step = self._step(now_ms)
        for group in list(self._groups.values()):
            rebalance.expire(group, step)
        return step.out

    def next_deadline(self) -> int | None:
        times = [t for g in self._groups.values() if (t := rebalance.next_deadline(g)) is not None]
        return min(times, default=None)

    # -- failover

    def replay(self, records: Iterable[Record], now_ms: int) -> None:
        """Rebuild the state from the offsets partition's records, oldest first (a new leader
        of the partition does this before it answers). A damaged record raises
        CorruptRecordError naming it; the driver decides what to do (not to serve)."""
        metadata: dict[str, GroupMetadataValue | None] = {}
        for record in records:
            decoded = decode(record)
            if isinstance(decoded, GroupMetadataRecord):
                metadata[decoded.group_id] = decoded.value
            else:
                self.offsets.replay(decoded.group_id, decoded.partition, decoded.value)
        for group_id, value in metadata.items():
            if value is None:
                self._groups.pop(group_id, None)
            else:
                self._groups[group_id] = _loaded(group_id, value, now_ms)
        for group_id in self.offsets.groups():
            # Offsets of a group that never had metadata: a simple consumer's.
            self._groups.setdefault(group_id, Group(group_id, state_timestamp=now_ms))


def _loaded(group_id: str, value: GroupMetadataValue, now_ms: int) -> Group:
    group = Group(
        group_id,
        generation=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        state_timestamp=value.current_state_timestamp,
    )
    for m in value.members:
        protocols = ((value.protocol, m.subscription),) if value.protocol is not None else ()
        group.add(
            Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                value.protocol_type,
                protocols,
                m.assignment,
                heartbeat_deadline=now_ms + m.session_timeout_ms,
            )
        )
    group.leader_id = value.leader if group.members else None
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group
