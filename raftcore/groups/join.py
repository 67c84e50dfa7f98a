"""JoinGroup's rules (Kafka's classicGroupJoin and its cases), one function per case.

- A first join without a member id, from a client that sends JoinGroup v4+, gets a fresh id
  and MEMBER_ID_REQUIRED (KIP-394); the id is held as pending for a session timeout and the
  client's next join with it is a join of a known member.
- A joining member must share the group's protocol type and one protocol every member
  supports: INCONSISTENT_GROUP_PROTOCOL otherwise.
- A new member may not grow the group (members and pending ids) past ``group.max.size``:
  GROUP_MAX_SIZE_REACHED.
- A known member's join during a rebalance waits for its completion. In Stable and
  CompletingRebalance, a join with unchanged protocols (and, in Stable, not the leader's) is
  answered at once with the current generation; a changed one starts a rebalance.
- KIP-345: a join with a known ``group.instance.id`` and no member id replaces the instance's
  old member id (the old id is fenced: FENCED_INSTANCE_ID). In Stable with the same protocol
  selected, that is all: no rebalance, the member keeps its assignment.
"""

from __future__ import annotations

from raftcore.error_codes import Errors
from raftcore.groups.group import Group, GroupState, Member
from raftcore.groups.messages import (
    UNKNOWN_MEMBER,
    JoinGroupRequest,
    JoinGroupResponse,
)
from raftcore.groups.rebalance import (
    fence,
    join_answer,
    joined_members,
    maybe_complete_join,
    prepare_rebalance,
    store,
    validate_member,
)
from raftcore.groups.step import Step

__all__ = ["join_group"]

_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE


def join_group(group: Group, req: JoinGroupRequest, ref: object, step: Step) -> None:
    """Answer (now or when the join completes) the JoinGroup ``ref``; ``group`` may be a new,
    empty one."""
    cfg = step.config
    if not req.group_id:
        step.reply(ref, JoinGroupResponse(Errors.INVALID_GROUP_ID, req.member_id))
        return
    if (
        not cfg.group_min_session_timeout_ms
        <= req.session_timeout_ms
        <= cfg.group_max_session_timeout_ms
    ):
        step.reply(ref, JoinGroupResponse(Errors.INVALID_SESSION_TIMEOUT, req.member_id))
        return
    if group.is_in(GroupState.DEAD):
        step.reply(ref, JoinGroupResponse(Errors.COORDINATOR_NOT_AVAILABLE, req.member_id))
        return
    if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
        step.reply(ref, JoinGroupResponse(Errors.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
        return
    if req.member_id == UNKNOWN_MEMBER:
        _join_new(group, req, ref, step)
    elif req.member_id in group.pending_members:
        # KIP-394's second join; a pending id is never a static member's.
        _add_member(group, req.member_id, req, ref, step)
    else:
        _join_known(group, req, ref, step)


def _join_new(group: Group, req: JoinGroupRequest, ref: object, step: Step) -> None:
    instance = req.group_instance_id
    if instance is not None and instance in group.static_members:
        _replace_static(group, group.static_members[instance], req, ref, step)
        return
    if group.size() >= step.config.group_max_size:
        step.reply(ref, JoinGroupResponse(Errors.GROUP_MAX_SIZE_REACHED, req.member_id))
        return
    member_id = step.new_member_id(instance if instance is not None else req.client_id)
    if instance is None and req.require_known_member_id:
        group.pending_members[member_id] = step.now_ms + req.session_timeout_ms
        step.reply(ref, JoinGroupResponse(Errors.MEMBER_ID_REQUIRED, member_id))
        return
    _add_member(group, member_id, req, ref, step)


def _add_member(
    group: Group, member_id: str, req: JoinGroupRequest, ref: object, step: Step
) -> None:
    group.pending_members.pop(member_id, None)
    member = Member(
        member_id,
        req.group_instance_id,
        req.client_id,
        req.client_host,
        req.session_timeout_ms,
        req.rebalance_timeout_ms,
        req.protocol_type,
        req.protocols,
    )
    _update(member, req, ref, step)
    group.add(member)
    if group.is_in(_P):
        group.new_member_added = True
        maybe_complete_join(group, step)
    else:
        prepare_rebalance(group, step)


def _update(member: Member, req: JoinGroupRequest, ref: object | None, step: Step) -> None:
    if member.join_waiter is not None and ref is not None:
        # A newer join from the same member replaces the one waiting.
        step.reply(
            member.join_waiter, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, member.member_id)
        )
    member.protocols = req.protocols
    member.session_timeout_ms = req.session_timeout_ms
    member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.heartbeat_deadline = step.now_ms + req.session_timeout_ms
    member.join_waiter = ref


def _join_known(group: Group, req: JoinGroupRequest, ref: object, step: Step) -> None:
    error = validate_member(group, req.member_id, req.group_instance_id)
    if error is not None:
        step.reply(ref, JoinGroupResponse(error, req.member_id))
        return
    member = group.members[req.member_id]
    unchanged = member.protocols == req.protocols
    if group.is_in(_C) and unchanged:
        # It missed the answer: the same one again (the leader's with the members).
        everyone = joined_members(group) if req.member_id == group.leader_id else ()
        member.heartbeat_deadline = step.now_ms + member.session_timeout_ms
        step.reply(ref, join_answer(group, req.member_id, everyone))
    elif group.is_in(_S) and unchanged and req.member_id != group.leader_id:
        member.heartbeat_deadline = step.now_ms + member.session_timeout_ms
        step.reply(ref, join_answer(group, req.member_id))
    elif group.is_in(_P, _C, _S):
        # A rejoin in PreparingRebalance, a changed subscription, or the leader asking for a
        # new assignment (topic metadata changed).
        _update(member, req, ref, step)
        if group.is_in(_P):
            maybe_complete_join(group, step)
        else:
            prepare_rebalance(group, step)
    else:
        step.reply(ref, JoinGroupResponse(Errors.UNKNOWN_MEMBER_ID, req.member_id))


def _replace_static(
    group: Group, old_id: str, req: JoinGroupRequest, ref: object, step: Step
) -> None:
    instance = req.group_instance_id
    assert instance is not None  # the caller found it in static_members
    old = group.members[old_id]
    fence(old, step)
    previous_leader = group.leader_id or ""
    new_id = step.new_member_id(instance)
    member = group.replace_static(instance, old_id, new_id)
    member.client_id, member.client_host = req.client_id, req.client_host
    if group.is_in(_S):
        _update(member, req, None, step)
        if group.select_protocol() == group.protocol_name:
            # KIP-345: a restart with the same protocols keeps the generation and assignment.
            store(group, step)
            if req.supports_skip_assignment:
                is_leader = new_id == group.leader_id
                everyone = joined_members(group) if is_leader else ()
                step.reply(ref, join_answer(group, new_id, everyone, skip_assignment=is_leader))
            else:
                # An older client that led would assign again: tell it the old leader's id,
                # so it acts as a follower and syncs for its assignment.
                step.reply(ref, join_answer(group, new_id, leader=previous_leader))
            return
        member.join_waiter = ref
        prepare_rebalance(group, step)
        return
    _update(member, req, ref, step)
    if group.is_in(_C):
        # The leader may be assigning to the old id: assign again.
        prepare_rebalance(group, step)
    else:
        maybe_complete_join(group, step)
