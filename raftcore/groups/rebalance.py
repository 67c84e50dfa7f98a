"""The rebalance itself, shared by every way into it (a join, a leave, an expired session, a
late sync): preparing it, completing the join, and the deadlines (Kafka's prepareRebalance,
completeClassicGroupJoin and the heartbeat, join and sync timers).

Rules, in our words:
- A rebalance from Empty waits ``group.initial.rebalance.delay.ms`` (extended by the same again
  while new members arrive, up to the rebalance timeout); any other completes as soon as every
  known member has rejoined and no KIP-394 member id is still out, or at the rebalance timeout
  (the largest of the members').
- Completing the join removes the dynamic members that did not rejoin (a static one stays
  until its session ends), makes a member that rejoined the leader if the leader did not,
  bumps the generation (so the generation only grows), picks the protocol and answers every
  waiting JoinGroup; only the leader's answer lists the members. With no member left the group
  is Empty and that is persisted; otherwise the generation is persisted with the leader's
  SyncGroup (as Kafka does): a failover before it replays the previous generation, whose
  members' SyncGroup of the lost one hears ILLEGAL_GENERATION.
- A member waiting for a JoinGroup or SyncGroup answer is not expired by its session; the
  rebalance timeout bounds it instead. A member that has not synced within the rebalance
  timeout after the join completed is removed.
"""

from __future__ import annotations

from raftcore.error_codes import Errors
from raftcore.groups.group import Group, GroupState, Member
from raftcore.groups.messages import JoinedMember, JoinGroupResponse, SyncGroupResponse
from raftcore.groups.records import GroupMetadataValue, MemberMetadata, group_metadata_record
from raftcore.groups.step import Step

__all__ = [
    "drop_members",
    "expire",
    "maybe_complete_join",
    "next_deadline",
    "prepare_rebalance",
    "rebalance_after_removal",
    "store",
    "validate_member",
]

_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE


def validate_member(group: Group, member_id: str, instance_id: str | None) -> Errors | None:
    """KIP-345: an instance id mapped to another member id is fenced; an unknown member is
    unknown."""
    if instance_id is not None:
        current = group.static_members.get(instance_id)
        if current is None:
            return Errors.UNKNOWN_MEMBER_ID
        if current != member_id:
            return Errors.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return Errors.UNKNOWN_MEMBER_ID
    return None


def store(group: Group, step: Step) -> None:
    """Persist the group's metadata: the generation, protocol, leader and each member with its
    subscription (for the chosen protocol) and assignment."""
    members = tuple(
        MemberMetadata(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(group.protocol_name),
            m.assignment,
        )
        for m in group.members.values()
    )
    value = GroupMetadataValue(
        group.protocol_type or "",
        group.generation,
        group.protocol_name,
        group.leader_id,
        group.state_timestamp,
        members,
    )
    step.record(group_metadata_record(group.group_id, value))


def prepare_rebalance(group: Group, step: Step) -> None:
    if group.is_in(_C):
        # The assignment being synced is void: waiting followers hear so and rejoin.
        answer_syncs(group, step, Errors.REBALANCE_IN_PROGRESS)
    group.pending_sync.clear()
    group.sync_deadline = None
    was_empty = group.is_in(GroupState.EMPTY)
    group.transition(_P, step.now_ms)
    timeout = group.rebalance_timeout_ms()
    if was_empty:
        delay = min(step.config.group_initial_rebalance_delay_ms, timeout)
        group.join_deadline = step.now_ms + delay
        group.initial_delay_remaining = max(timeout - delay, 0)
        group.new_member_added = False
    else:
        group.join_deadline = step.now_ms + timeout
        group.initial_delay_remaining = None
    maybe_complete_join(group, step)


def maybe_complete_join(group: Group, step: Step) -> None:
    if not group.is_in(_P) or group.join_deadline is None:
        return
    if group.initial_delay_remaining is not None:
        # The initial delay never ends early: it is there to gather the members.
        if group.join_deadline <= step.now_ms:
            _join_deadline_passed(group, step)
        return
    if group.all_joined():
        _complete_join(group, step)


def _join_deadline_passed(group: Group, step: Step) -> None:
    remaining = group.initial_delay_remaining
    if remaining is not None and group.new_member_added and remaining > 0:
        delay = min(step.config.group_initial_rebalance_delay_ms, remaining)
        group.initial_delay_remaining = remaining - delay
        group.join_deadline = step.now_ms + delay
        group.new_member_added = False
        return
    _complete_join(group, step)


def _complete_join(group: Group, step: Step) -> None:
    group.join_deadline = None
    group.initial_delay_remaining = None
    group.new_member_added = False
    # Dynamic members that did not rejoin leave; a static member that did not stays, in the
    # new generation, until its session ends (KIP-345: a restart need not cost a rebalance).
    late = [
        m.member_id
        for m in group.members.values()
        if m.join_waiter is None and m.group_instance_id is None
    ]
    drop_members(group, late, step)
    joined = [m.member_id for m in group.members.values() if m.join_waiter is not None]
    if group.members and not joined:
        # Only static members that did not rejoin: wait again for them (or their sessions).
        group.join_deadline = step.now_ms + group.rebalance_timeout_ms()
        return
    if group.leader_id not in joined and joined:
        group.leader_id = joined[0]
    group.generation += 1
    if not group.members:
        group.protocol_name = None
        group.transition(GroupState.EMPTY, step.now_ms)
        store(group, step)
        return
    group.protocol_name = group.select_protocol()
    group.transition(_C, step.now_ms)
    group.pending_sync = set(group.members)
    group.sync_deadline = step.now_ms + group.rebalance_timeout_ms()
    everyone = joined_members(group)
    for member in group.members.values():
        if member.join_waiter is None:
            continue  # a static member that did not rejoin
        is_leader = member.member_id == group.leader_id
        step.reply(
            member.join_waiter, join_answer(group, member.member_id, everyone if is_leader else ())
        )
        member.join_waiter = None
        member.heartbeat_deadline = step.now_ms + member.session_timeout_ms


def joined_members(group: Group) -> tuple[JoinedMember, ...]:
    """What the leader's JoinGroup answer lists: each member with its chosen metadata."""
    return tuple(
        JoinedMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
        for m in group.members.values()
    )


def join_answer(
    group: Group,
    member_id: str,
    members: tuple[JoinedMember, ...] = (),
    leader: str | None = None,
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    return JoinGroupResponse(
        Errors.NONE,
        member_id,
        group.generation,
        group.protocol_type,
        group.protocol_name,
        leader if leader is not None else group.leader_id or "",
        skip_assignment,
        members,
    )


def answer_syncs(group: Group, step: Step, error: Errors) -> None:
    for member in group.members.values():
        member.assignment = b""
        if member.sync_waiter is not None:
            step.reply(member.sync_waiter, SyncGroupResponse(error))
            member.sync_waiter = None


def drop_members(group: Group, member_ids: list[str], step: Step) -> None:
    """Remove members (their waiting requests hear UNKNOWN_MEMBER_ID); no rebalance here."""
    for member_id in member_ids:
        member = group.remove(member_id)
        if member is not None:
            _answer_waiters(member, step, Errors.UNKNOWN_MEMBER_ID)


def _answer_waiters(member: Member, step: Step, error: Errors) -> None:
    if member.join_waiter is not None:
        step.reply(member.join_waiter, JoinGroupResponse(error, member.member_id))
        member.join_waiter = None
    if member.sync_waiter is not None:
        step.reply(member.sync_waiter, SyncGroupResponse(error))
        member.sync_waiter = None


def fence(member: Member, step: Step) -> None:
    """KIP-345: a static member's old id, replaced by a new join, hears FENCED_INSTANCE_ID."""
    _answer_waiters(member, step, Errors.FENCED_INSTANCE_ID)


def rebalance_after_removal(group: Group, step: Step) -> None:
    if group.is_in(_S, _C):
        prepare_rebalance(group, step)
    else:
        maybe_complete_join(group, step)


def expire(group: Group, step: Step) -> None:
    """Everything whose time has come: the join deadline, KIP-394 ids never used, sessions
    that ended, members that did not sync in time."""
    now = step.now_ms
    if group.is_in(_P) and group.join_deadline is not None and group.join_deadline <= now:
        _join_deadline_passed(group, step)
    stale = [mid for mid, deadline in group.pending_members.items() if deadline <= now]
    for member_id in stale:
        del group.pending_members[member_id]
    if stale:
        maybe_complete_join(group, step)
    dead = [
        m.member_id
        for m in group.members.values()
        if m.join_waiter is None and m.sync_waiter is None and m.heartbeat_deadline <= now
    ]
    if dead:
        drop_members(group, dead, step)
        rebalance_after_removal(group, step)
    if group.is_in(_C, _S) and group.sync_deadline is not None and group.sync_deadline <= now:
        group.sync_deadline = None
        late = sorted(group.pending_sync)
        if late:
            drop_members(group, late, step)
            prepare_rebalance(group, step)


def next_deadline(group: Group) -> int | None:
    times = list(group.pending_members.values())
    if group.is_in(_P) and group.join_deadline is not None:
        times.append(group.join_deadline)
    if group.is_in(_C, _S) and group.sync_deadline is not None and group.pending_sync:
        times.append(group.sync_deadline)
    times.extend(
        m.heartbeat_deadline
        for m in group.members.values()
        if m.join_waiter is None and m.sync_waiter is None
    )
    return min(times, default=None)
