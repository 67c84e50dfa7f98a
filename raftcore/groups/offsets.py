"""Committed offsets and the rules of OffsetCommit, OffsetFetch and OffsetDelete (Kafka's
OffsetMetadataManager and ClassicGroup.validateOffsetCommit).

- A commit with generation -1, no member id and no instance id is a "simple" commit (a client
  that assigns its own partitions, or the admin client): accepted only while the group is
  Empty (UNKNOWN_MEMBER_ID otherwise), and it creates the group if there is none.
- Any other commit must come from a known member (UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for
  a replaced static member) of the current generation (ILLEGAL_GENERATION: a member of a
  fenced generation cannot commit), and not while the group is CompletingRebalance
  (REBALANCE_IN_PROGRESS).
- With ``allow_backward_commits`` off, a committed offset never moves back by a commit
  (OFFSET_OUT_OF_RANGE); only :meth:`OffsetStore.reset`, the operator's, moves it back. On (the
  default, as Kafka), a member of the current generation may commit below it (after a seek).
- OffsetDelete refuses a topic the group still subscribes to (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

from raftcore.error_codes import Errors
from raftcore.groups.group import Group, GroupState
from raftcore.groups.messages import (
    UNKNOWN_MEMBER,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetFetchResponse,
    PartitionError,
)
from raftcore.groups.rebalance import validate_member
from raftcore.groups.records import OffsetAndMetadata, offset_commit_record
from raftcore.groups.step import Step
from raftcore.topic_partition import TopicPartition

__all__ = ["OffsetStore", "validate_commit"]


def validate_commit(group: Group | None, req: OffsetCommitRequest) -> Errors | None:
    simple = (
        req.generation_id < 0 and req.member_id == UNKNOWN_MEMBER and req.group_instance_id is None
    )
    if group is None:
        return None if req.generation_id < 0 else Errors.ILLEGAL_GENERATION
    if group.is_in(GroupState.DEAD):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if req.generation_id < 0 and group.is_in(GroupState.EMPTY):
        return None
    if simple:
        return Errors.UNKNOWN_MEMBER_ID
    error = validate_member(group, req.member_id, req.group_instance_id)
    if error is not None:
        return error
    if req.generation_id != group.generation:
        return Errors.ILLEGAL_GENERATION
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        return Errors.REBALANCE_IN_PROGRESS
    return None


class OffsetStore:
    """The committed offsets of every group this coordinator owns."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def of(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return dict(self._groups.get(group_id, {}))

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def snapshot(self) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        return {g: dict(offsets) for g, offsets in self._groups.items() if offsets}

    def commit(self, req: OffsetCommitRequest, step: Step) -> tuple[PartitionError, ...]:
        """Commit the request's offsets (validated by the caller) and return each partition's
        answer."""
        current = self._groups.setdefault(req.group_id, {})
        results = []
        for commit in req.offsets:
            tp = commit.partition
            error = Errors.NONE
            if len(commit.metadata.encode("utf-8")) > step.config.offset_metadata_max_bytes:
                error = Errors.OFFSET_METADATA_TOO_LARGE
            elif commit.offset < 0:
                error = Errors.OFFSET_OUT_OF_RANGE
            elif (
                not step.config.allow_backward_commits
                and tp in current
                and commit.offset < current[tp].offset
            ):
                # raftcore's rule: a commit never moves a committed offset back.
                error = Errors.OFFSET_OUT_OF_RANGE
            if error == Errors.NONE:
                value = OffsetAndMetadata(
                    commit.offset, commit.leader_epoch, commit.metadata, step.now_ms
                )
                current[tp] = value
                step.record(offset_commit_record(req.group_id, tp, value))
            results.append(PartitionError(tp, error))
        if not current:
            del self._groups[req.group_id]
        return tuple(results)

    def reset(self, group_id: str, offsets: dict[TopicPartition, int], step: Step) -> None:
        """The operator's reset: sets each offset, backwards too."""
        current = self._groups.setdefault(group_id, {})
        for tp, offset in sorted(offsets.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            value = OffsetAndMetadata(offset, -1, "", step.now_ms)
            current[tp] = value
            step.record(offset_commit_record(group_id, tp, value))
        if not current:
            del self._groups[group_id]

    def fetch(
        self, group_id: str, partitions: tuple[TopicPartition, ...] | None
    ) -> OffsetFetchResponse:
        """The committed offsets of ``partitions`` (all the group's when None); -1 for none."""
        current = self._groups.get(group_id, {})
        if partitions is None:
            partitions = tuple(sorted(current, key=lambda tp: (tp.topic, tp.partition)))
        answers = []
        for tp in partitions:
            found = current.get(tp)
            if found is None:
                answers.append(FetchedOffset(tp, -1))
            else:
                answers.append(FetchedOffset(tp, found.offset, found.leader_epoch, found.metadata))
        return OffsetFetchResponse(group_id, Errors.NONE, tuple(answers))

    def delete(
        self, group: Group, partitions: tuple[TopicPartition, ...], step: Step
    ) -> tuple[PartitionError, ...]:
        current = self._groups.get(group.group_id, {})
        results = []
        for tp in partitions:
            if not group.is_in(GroupState.EMPTY) and group.is_subscribed_to(tp.topic):
                results.append(PartitionError(tp, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if current.pop(tp, None) is not None:
                step.record(offset_commit_record(group.group_id, tp, None))
            results.append(PartitionError(tp, Errors.NONE))
        if not current:
            self._groups.pop(group.group_id, None)
        return tuple(results)

    def delete_group(self, group_id: str, step: Step) -> None:
        for tp in sorted(self._groups.pop(group_id, {}), key=lambda tp: (tp.topic, tp.partition)):
            step.record(offset_commit_record(group_id, tp, None))

    def replay(self, group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None) -> None:
        if value is None:
            current = self._groups.get(group_id, {})
            current.pop(tp, None)
            if not current:
                self._groups.pop(group_id, None)
        else:
            self._groups.setdefault(group_id, {})[tp] = value
