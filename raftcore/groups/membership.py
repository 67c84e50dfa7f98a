"""SyncGroup, Heartbeat and LeaveGroup (Kafka's classicGroupSync, classicGroupHeartbeat and
classicGroupLeave).

- SyncGroup and Heartbeat check, in this order: the group is alive, the member is known and
  not fenced (KIP-345), the generation is the group's (ILLEGAL_GENERATION), then the state:
  during PreparingRebalance both answer REBALANCE_IN_PROGRESS, so members rejoin.
- The leader's SyncGroup in CompletingRebalance carries every member's assignment: it is
  persisted with the group, the group is Stable, and every follower waiting on its own
  SyncGroup gets its assignment. A follower's SyncGroup before that waits. In Stable a
  SyncGroup answers the member's current assignment.
- LeaveGroup (v3+: a batch) removes each member it names (by member id, or by instance id for
  a static member); removing any starts a rebalance (or lets the join complete).
"""

from __future__ import annotations

from raftcore.error_codes import Errors
from raftcore.groups.group import Group, GroupState
from raftcore.groups.messages import (
    UNKNOWN_MEMBER,
    HeartbeatRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raftcore.groups.rebalance import drop_members, rebalance_after_removal, store, validate_member
from raftcore.groups.step import Step

__all__ = ["heartbeat", "leave_group", "sync_group"]


def _check(
    group: Group | None, member_id: str, instance_id: str | None, generation: int
) -> Errors | None:
    if group is None:
        return Errors.UNKNOWN_MEMBER_ID
    if group.is_in(GroupState.DEAD):
        return Errors.COORDINATOR_NOT_AVAILABLE
    error = validate_member(group, member_id, instance_id)
    if error is not None:
        return error
    if generation != group.generation:
        return Errors.ILLEGAL_GENERATION
    return None


def sync_group(group: Group | None, req: SyncGroupRequest, ref: object, step: Step) -> None:
    error = _check(group, req.member_id, req.group_instance_id, req.generation_id)
    if error is not None:
        step.reply(ref, SyncGroupResponse(error))
        return
    assert group is not None
    if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
        req.protocol_name is not None and req.protocol_name != group.protocol_name
    ):
        step.reply(ref, SyncGroupResponse(Errors.INCONSISTENT_GROUP_PROTOCOL))
        return
    if group.is_in(GroupState.PREPARING_REBALANCE):
        step.reply(ref, SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS))
        return
    member = group.members[req.member_id]
    member.heartbeat_deadline = step.now_ms + member.session_timeout_ms
    group.pending_sync.discard(req.member_id)
    if not group.pending_sync:
        group.sync_deadline = None
    if group.is_in(GroupState.STABLE):
        step.reply(ref, _assigned(group, member.assignment))
        return
    # CompletingRebalance
    if member.sync_waiter is not None:
        step.reply(member.sync_waiter, SyncGroupResponse(Errors.REBALANCE_IN_PROGRESS))
    member.sync_waiter = ref
    if req.member_id != group.leader_id:
        return  # a follower waits for the leader's assignment
    assignments = dict(req.assignments)
    for m in group.members.values():
        m.assignment = assignments.get(m.member_id, b"")
    group.transition(GroupState.STABLE, step.now_ms)
    store(group, step)
    for m in group.members.values():
        if m.sync_waiter is not None:
            step.reply(m.sync_waiter, _assigned(group, m.assignment))
            m.sync_waiter = None


def _assigned(group: Group, assignment: bytes) -> SyncGroupResponse:
    return SyncGroupResponse(Errors.NONE, assignment, group.protocol_type, group.protocol_name)


def heartbeat(group: Group | None, req: HeartbeatRequest, step: Step) -> Errors:
    if group is not None and group.is_in(GroupState.EMPTY):
        return Errors.UNKNOWN_MEMBER_ID
    error = _check(group, req.member_id, req.group_instance_id, req.generation_id)
    if error is not None:
        return error
    assert group is not None
    member = group.members[req.member_id]
    member.heartbeat_deadline = step.now_ms + member.session_timeout_ms
    if group.is_in(GroupState.PREPARING_REBALANCE):
        return Errors.REBALANCE_IN_PROGRESS
    return Errors.NONE


def leave_group(group: Group | None, req: LeaveGroupRequest, step: Step) -> LeaveGroupResponse:
    if group is None:
        return LeaveGroupResponse(Errors.UNKNOWN_MEMBER_ID)
    if group.is_in(GroupState.DEAD):
        return LeaveGroupResponse(Errors.COORDINATOR_NOT_AVAILABLE)
    results = []
    leaving: list[str] = []
    pending_left = False
    for who in req.members:
        member_id = who.member_id
        if member_id == UNKNOWN_MEMBER and who.group_instance_id is not None:
            member_id = group.static_members.get(who.group_instance_id, UNKNOWN_MEMBER)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            pending_left = True
            error = None
        else:
            error = validate_member(group, member_id, who.group_instance_id)
        if error is None and member_id in group.members and member_id not in leaving:
            leaving.append(member_id)
        results.append(LeftMember(who.member_id, who.group_instance_id, error or Errors.NONE))
    if leaving or pending_left:
        drop_members(group, leaving, step)
        rebalance_after_removal(group, step)
    return LeaveGroupResponse(Errors.NONE, tuple(results))
