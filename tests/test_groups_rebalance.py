"""The classic group protocol's membership rules (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
on the pure coordinator with a virtual clock."""

from __future__ import annotations

import re

from group_helpers import REBALANCE, SESSION, Driver, subscription

from raftcore.error_codes import Errors
from raftcore.groups import GroupConfig, GroupState
from raftcore.groups.group import TRANSITIONS
from raftcore.groups.messages import (
    JoinGroupResponse,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupResponse,
)


def state(d: Driver, group: str = "g") -> GroupState:
    g = d.coordinator.group(group)
    assert g is not None
    return g.state


def test_the_transition_table_in_the_docstring_is_the_one_the_code_enforces():
    from raftcore.groups import group as module

    doc = module.__doc__ or ""
    table = {}
    for line in doc.splitlines():
        match = re.match(r"\s+(\w+)\s+-> (.*)", line)
        if match:
            targets = (
                set()
                if match.group(2).strip() == "(none)"
                else {t.strip() for t in match.group(2).split(",")}
            )
            table[match.group(1)] = targets
    assert table == {s.value: {t.value for t in targets} for s, targets in TRANSITIONS.items()}


def test_a_first_join_from_a_v4_client_gets_member_id_required_with_an_id_to_join_with():
    d = Driver()
    first = d.answer(d.join(require_known=True, client="app"))
    assert isinstance(first, JoinGroupResponse)
    assert first.error == Errors.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("app-")
    ref = d.join(first.member_id)
    d.gather()
    joined = d.joined(ref)
    assert (joined.member_id, joined.leader, joined.generation_id) == (
        first.member_id,
        first.member_id,
        1,
    )
    assert [m.member_id for m in joined.members] == [first.member_id]


def test_a_member_id_handed_out_and_never_used_expires_after_the_session_timeout():
    d = Driver()
    d.stable_group(1)
    pending = d.answer(d.join(require_known=True))
    assert isinstance(pending, JoinGroupResponse) and pending.error == Errors.MEMBER_ID_REQUIRED
    group = d.coordinator.group("g")
    assert group is not None and pending.member_id in group.pending_members
    d.advance(SESSION)
    assert pending.member_id not in group.pending_members
    late = d.answer(d.join(pending.member_id))
    assert isinstance(late, JoinGroupResponse) and late.error == Errors.UNKNOWN_MEMBER_ID


def test_a_member_sharing_no_protocol_with_the_group_is_refused_inconsistent_group_protocol():
    d = Driver()
    d.stable_group(1)
    refused = d.answer(d.join(protocols=(("roundrobin", b""),)))
    assert isinstance(refused, JoinGroupResponse)
    assert refused.error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_the_protocol_chosen_is_the_most_preferred_among_those_every_member_supports():
    d = Driver()
    a = d.join(protocols=(("sticky", b"a"), ("range", b"a")))
    b = d.join(protocols=(("range", b"b"), ("sticky", b"b"), ("roundrobin", b"b")))
    c = d.join(protocols=(("sticky", b"c"), ("range", b"c")))
    d.gather()
    assert {d.joined(r).protocol_name for r in (a, b, c)} == {"sticky"}
    leader = d.joined(a)
    assert [m.metadata for m in leader.members] == [b"a", b"b", b"c"]


def test_the_initial_rebalance_delay_gathers_an_empty_groups_first_members_into_one_generation():
    """group.initial.rebalance.delay.ms: the first join waits the delay, extended by the delay
    again while new members arrive."""
    d = Driver(GroupConfig(group_initial_rebalance_delay_ms=3000))
    first = d.join(client="a")
    d.advance(1000)
    second = d.join(client="b")
    d.advance(2000)  # t=3000: a member arrived during the delay, so it extends to t=6000
    assert d.answer(first) is None and d.answer(second) is None
    assert d.coordinator.next_deadline() == 6000
    d.advance(3000)
    assert d.joined(first).generation_id == d.joined(second).generation_id == 1
    assert len(d.joined(first).members) == 2


def test_the_initial_delay_never_outlasts_the_rebalance_timeout():
    d = Driver(GroupConfig(group_initial_rebalance_delay_ms=3000))
    refs = []
    for _ in range(4):
        refs.append(d.join(rebalance=5000))
        d.advance(1000)  # a new member in every delay
    d.advance(1000)  # t=5000: the rebalance timeout caps the delay
    assert all(d.joined(r).generation_id == 1 for r in refs)


def test_the_join_completes_as_soon_as_every_known_member_has_rejoined():
    d = Driver()
    a, b = d.stable_group(2)
    newcomer = d.join(client="c")
    assert state(d) == GroupState.PREPARING_REBALANCE
    assert d.heartbeat(a.member_id, 1) == Errors.REBALANCE_IN_PROGRESS
    ra = d.join(a.member_id)
    assert d.answer(newcomer) is None
    rb = d.join(b.member_id)
    assert {d.joined(r).generation_id for r in (ra, rb, newcomer)} == {2}
    assert state(d) == GroupState.COMPLETING_REBALANCE


def test_the_rebalance_timeout_removes_a_member_that_did_not_rejoin():
    d = Driver()
    a, b = d.stable_group(2)
    newcomer = d.join(client="c", rebalance=REBALANCE)
    ra = d.join(a.member_id)
    d.advance(SESSION - 1)
    assert d.heartbeat(b.member_id, 1) == Errors.REBALANCE_IN_PROGRESS  # alive, but not rejoining
    d.advance(REBALANCE - SESSION + 1)
    answers = [d.joined(r) for r in (ra, newcomer)]
    assert {j.generation_id for j in answers} == {2}
    leader = next(j for j in answers if j.members)
    assert {m.member_id for m in leader.members} == {j.member_id for j in answers}
    assert d.heartbeat(b.member_id, 1) == Errors.UNKNOWN_MEMBER_ID


def test_a_member_missing_its_session_timeout_is_removed_and_the_others_are_told_to_rejoin():
    d = Driver()
    a, b = d.stable_group(2)
    d.advance(SESSION - 1)
    assert d.heartbeat(a.member_id, 1) == Errors.NONE  # a heartbeats, b is silent
    d.advance(1)
    assert d.heartbeat(b.member_id, 1) == Errors.UNKNOWN_MEMBER_ID
    assert d.heartbeat(a.member_id, 1) == Errors.REBALANCE_IN_PROGRESS
    rejoined = d.joined(d.join(a.member_id))
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]


def test_a_member_that_heartbeats_outlives_its_session_timeout():
    d = Driver()
    (a,) = d.stable_group(1)
    for _ in range(10):
        d.advance(SESSION - 1)
        assert d.heartbeat(a.member_id, 1) == Errors.NONE
    assert state(d) == GroupState.STABLE


def test_a_follower_sync_waits_for_the_leaders_assignment_and_gets_its_own_part():
    d = Driver()
    refs = [d.join(client="a"), d.join(client="b")]
    d.gather()
    leader, follower = sorted((d.joined(r) for r in refs), key=lambda j: not j.members)
    waiting = d.sync(follower.member_id, 1)
    assert d.answer(waiting) is None
    assert d.heartbeat(follower.member_id, 1) == Errors.NONE  # CompletingRebalance: no error
    done = d.sync(leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    assert d.synced(waiting) == SyncGroupResponse(Errors.NONE, b"F", "consumer", "range")
    assert d.synced(done).assignment == b"L"
    assert state(d) == GroupState.STABLE
    assert d.synced(d.sync(follower.member_id, 1)).assignment == b"F"  # Stable: answered at once


def test_sync_is_refused_for_an_unknown_member_an_old_generation_and_during_a_rebalance():
    d = Driver()
    a, b = d.stable_group(2)
    assert d.synced(d.sync("nobody", 1)).error == Errors.UNKNOWN_MEMBER_ID
    assert d.synced(d.sync(a.member_id, 0)).error == Errors.ILLEGAL_GENERATION
    d.join(client="c")
    assert d.synced(d.sync(b.member_id, 1)).error == Errors.REBALANCE_IN_PROGRESS


def test_a_join_in_completing_rebalance_restarts_it_and_waiting_syncs_hear_rebalance_in_progress():
    d = Driver()
    refs = [d.join(client="a"), d.join(client="b")]
    d.gather()
    leader, follower = sorted((d.joined(r) for r in refs), key=lambda j: not j.members)
    waiting = d.sync(follower.member_id, 1)
    newcomer = d.join(client="c")
    assert d.synced(waiting).error == Errors.REBALANCE_IN_PROGRESS
    assert state(d) == GroupState.PREPARING_REBALANCE
    # The leader's late assignment of generation 1 is refused: the rebalance is on.
    assert (
        d.synced(d.sync(leader.member_id, 1, {leader.member_id: b"x"})).error
        == Errors.REBALANCE_IN_PROGRESS
    )
    again = [d.join(leader.member_id), d.join(follower.member_id)]
    assert {d.joined(r).generation_id for r in (*again, newcomer)} == {2}


def test_two_joins_at_once_land_in_the_same_next_generation():
    d = Driver()
    a, b = d.stable_group(2)
    c1, c2 = d.join(client="c1"), d.join(client="c2")
    r = [d.join(a.member_id), d.join(b.member_id)]
    answers = [d.joined(x) for x in (c1, c2, *r)]
    assert {j.generation_id for j in answers} == {2}
    assert sum(1 for j in answers if j.members) == 1  # one leader
    assert len({j.member_id for j in answers}) == 4


def test_a_leave_group_batch_removes_its_members_and_rebalances_the_rest():
    d = Driver()
    a, b, c = d.stable_group(3)
    answer = d.leave(
        MemberIdentity(b.member_id), MemberIdentity(c.member_id), MemberIdentity("ghost")
    )
    assert isinstance(answer, LeaveGroupResponse)
    assert [m.error for m in answer.members] == [Errors.NONE, Errors.NONE, Errors.UNKNOWN_MEMBER_ID]
    assert state(d) == GroupState.PREPARING_REBALANCE
    assert d.joined(d.join(a.member_id)).generation_id == 2


def test_the_last_member_leaving_empties_the_group_in_a_new_generation_which_is_persisted():
    d = Driver()
    (a,) = d.stable_group(1)
    d.leave(MemberIdentity(a.member_id))
    assert state(d) == GroupState.EMPTY
    g = d.coordinator.group("g")
    assert g is not None and g.generation == 2
    assert d.failover().group("g").generation == 2  # type: ignore[union-attr]


def test_a_static_member_restart_takes_over_its_assignment_without_a_rebalance():
    """KIP-345: a join with a known group.instance.id replaces the old member id; with the same
    protocols the generation and assignment stay, and the old id is fenced."""
    d = Driver()
    refs = [d.join(client="a", instance="i-a"), d.join(client="b", instance="i-b")]
    d.gather()
    joined = [d.joined(r) for r in refs]
    leader = next(j for j in joined if j.members)
    follower = next(j for j in joined if not j.members)
    f_instance = "i-a" if follower is joined[0] else "i-b"
    d.sync(follower.member_id, 1, instance=f_instance)
    d.sync(leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    records_before = len(d.log)
    restarted = d.joined(d.join(instance=f_instance, client="a2"))
    assert restarted.member_id != follower.member_id
    assert restarted.generation_id == 1 and not restarted.members
    assert state(d) == GroupState.STABLE
    assert len(d.log) == records_before + 1  # the new member id is persisted
    assert d.synced(d.sync(restarted.member_id, 1, instance=f_instance)).assignment == b"F"
    assert d.heartbeat(follower.member_id, 1, instance=f_instance) == Errors.FENCED_INSTANCE_ID
    assert d.heartbeat(restarted.member_id, 1, instance=f_instance) == Errors.NONE


def test_a_static_member_that_did_not_rejoin_stays_until_its_session_ends():
    d = Driver()
    refs = [d.join(client="a", instance="i-a"), d.join(client="b", instance="i-b")]
    d.gather()
    a, _b = (d.joined(r) for r in refs)
    newcomer = d.join(client="c")
    ra = d.join(a.member_id, instance="i-a")
    d.advance(SESSION)  # b's session ends before the rebalance timeout
    answers = [d.joined(r) for r in (ra, newcomer)]
    assert {j.generation_id for j in answers} == {2}
    g = d.coordinator.group("g")
    assert g is not None and "i-b" not in g.static_members


def test_a_new_member_past_group_max_size_is_refused():
    d = Driver(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    d.join(client="a")
    d.join(client="b")
    refused = d.answer(d.join(client="c"))
    assert isinstance(refused, JoinGroupResponse) and refused.error == Errors.GROUP_MAX_SIZE_REACHED
    refused = d.answer(d.join(client="d", require_known=True))
    assert isinstance(refused, JoinGroupResponse) and refused.error == Errors.GROUP_MAX_SIZE_REACHED


def test_a_session_timeout_outside_the_brokers_bounds_is_invalid_session_timeout():
    d = Driver()
    for session in (5999, 1_800_001):
        refused = d.answer(d.join(session=session))
        assert (
            isinstance(refused, JoinGroupResponse)
            and refused.error == Errors.INVALID_SESSION_TIMEOUT
        )
    assert d.coordinator.list_groups() == []


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    d = Driver()
    refs = [d.join(client="a"), d.join(client="b")]
    d.gather()
    leader, follower = sorted((d.joined(r) for r in refs), key=lambda j: not j.members)
    d.sync(leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    for _ in range(REBALANCE // (SESSION // 2)):
        d.advance(SESSION // 2)
        d.heartbeat(leader.member_id, 1)
        d.heartbeat(follower.member_id, 1)
    assert d.heartbeat(follower.member_id, 1) == Errors.UNKNOWN_MEMBER_ID
    assert d.heartbeat(leader.member_id, 1) == Errors.REBALANCE_IN_PROGRESS


def test_list_describe_and_delete_groups():
    d = Driver()
    d.stable_group(2)
    d.commit({}, group="solo")  # a simple consumer's group
    listed = d.coordinator.list_groups()
    assert [(g.group_id, g.state) for g in listed] == [("g", "Stable"), ("solo", "Empty")]
    assert [g.group_id for g in d.coordinator.list_groups(["empty"])] == ["solo"]
    (described, unknown) = d.coordinator.describe_groups(["g", "nope"])
    assert described.state == "Stable" and described.protocol_name == "range"
    assert {m.assignment for m in described.members} == {
        m.member_id.encode() for m in described.members
    }
    assert described.members[0].metadata == subscription("t")
    assert unknown.state == "Dead"
    ref = d.ref()
    d.take(d.coordinator.delete_groups(ref, ["g", "solo", "nope"], d.now))
    assert [e.error for e in d.answers[ref]] == [  # type: ignore[attr-defined]
        Errors.NON_EMPTY_GROUP,
        Errors.NONE,
        Errors.GROUP_ID_NOT_FOUND,
    ]


def test_the_rebalance_timeout_keeps_a_static_member_that_did_not_rejoin_until_its_session_ends():
    """Kafka removes only dynamic members at the join's end: a static member (KIP-345) whose
    session outlasts the rebalance timeout is still in the next generation, unanswered."""
    d = Driver()
    long = 60_000
    refs = [d.join(client="a", instance="i-a"), d.join(client="b", instance="i-b", session=long)]
    d.gather()
    a, b = (d.joined(r) for r in refs)
    newcomer = d.join(client="c")  # a rebalance: a rejoins, b does not
    ra = d.join(a.member_id, instance="i-a")
    d.advance(REBALANCE)
    answers = [d.joined(r) for r in (ra, newcomer)]
    assert {j.generation_id for j in answers} == {2}
    (leader,) = [j for j in answers if j.members]
    assert b.member_id in {m.member_id for m in leader.members}
    d.advance(long - REBALANCE)
    g = d.coordinator.group("g")
    assert g is not None and b.member_id not in g.members


def test_next_deadline_is_when_the_next_expiry_happens_and_polling_earlier_does_nothing():
    d = Driver()
    a, b = d.stable_group(2)
    d.advance(SESSION // 2)
    assert d.heartbeat(a.member_id, 1) == Errors.NONE
    a_session_ends = d.now + SESSION
    deadline = d.coordinator.next_deadline()
    assert deadline is not None
    d.advance(deadline - d.now - 1)
    g = d.coordinator.group("g")
    assert g is not None and b.member_id in g.members and g.state == GroupState.STABLE
    d.advance(1)  # b's session ends exactly now
    assert b.member_id not in g.members and g.state == GroupState.PREPARING_REBALANCE
    # Next: a's session, unless it heartbeats (then the rebalance timeout).
    assert d.coordinator.next_deadline() == a_session_ends < d.now + REBALANCE
