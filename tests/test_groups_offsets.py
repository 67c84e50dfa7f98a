"""OffsetCommit, OffsetFetch and OffsetDelete on the pure coordinator, and a coordinator
failover: a new leader of the offsets partition replays its records."""

from __future__ import annotations

from group_helpers import DELAY, Driver, subscription

from raftcore.error_codes import Errors
from raftcore.groups import GroupConfig, GroupState
from raftcore.groups.messages import (
    GroupError,
    JoinGroupResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from raftcore.topic_partition import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OTHER = TopicPartition("other", 0)


def test_a_commit_from_a_fenced_generation_is_refused_and_changes_nothing():
    d = Driver()
    a, b = d.stable_group(2)
    assert d.commit({T0: 10}, member_id=a.member_id, generation=1) == {T0: Errors.NONE}
    d.join(client="c")  # generation 2 is coming: a and b rejoin, the leader assigns
    refs = [d.join(a.member_id), d.join(b.member_id)]
    assert {d.joined(r).generation_id for r in refs} == {2}
    records = len(d.log)
    refused = d.commit({T0: 20}, member_id=a.member_id, generation=1)
    assert refused == {T0: Errors.ILLEGAL_GENERATION}
    assert d.committed() == {T0: 10} and len(d.log) == records


def test_a_commit_from_an_unknown_member_or_a_replaced_static_member_is_refused():
    d = Driver()
    (a,) = d.stable_group(1, instance="i")
    assert d.commit({T0: 1}, member_id="ghost", generation=1) == {T0: Errors.UNKNOWN_MEMBER_ID}
    restarted = d.joined(d.join(instance="i"))
    fenced = d.commit({T0: 1}, member_id=a.member_id, generation=1, instance="i")
    assert fenced == {T0: Errors.FENCED_INSTANCE_ID}
    ok = d.commit({T0: 1}, member_id=restarted.member_id, generation=1, instance="i")
    assert ok == {T0: Errors.NONE}


def test_a_commit_while_the_group_completes_a_rebalance_hears_rebalance_in_progress():
    d = Driver()
    refs = [d.join(client="a"), d.join(client="b")]
    d.gather()
    member = d.joined(refs[0])
    assert d.commit({T0: 1}, member_id=member.member_id, generation=1) == {
        T0: Errors.REBALANCE_IN_PROGRESS
    }


def test_a_simple_commit_with_generation_minus_one_is_accepted_only_while_the_group_is_empty():
    """Kafka: a commit without group management (the admin client, a consumer that assigns
    its partitions) is taken from an Empty group, and creates the group."""
    d = Driver()
    assert d.commit({T0: 5}) == {T0: Errors.NONE}
    assert d.coordinator.group("g").state == GroupState.EMPTY  # type: ignore[union-attr]
    d.stable_group(1)
    assert d.commit({T0: 6}) == {T0: Errors.UNKNOWN_MEMBER_ID}
    assert d.committed() == {T0: 5}


def test_a_commit_never_moves_an_offset_back_but_the_operators_reset_does():
    d = Driver(GroupConfig(group_initial_rebalance_delay_ms=DELAY, allow_backward_commits=False))
    assert d.commit({T0: 100, T1: 7}) == {T0: Errors.NONE, T1: Errors.NONE}
    assert d.commit({T0: 99, T1: 8}) == {T0: Errors.OFFSET_OUT_OF_RANGE, T1: Errors.NONE}
    assert d.committed() == {T0: 100, T1: 8}
    ref = d.ref()
    d.take(d.coordinator.reset_offsets(ref, "g", {T0: 3}, d.now))
    assert d.answers[ref] == GroupError("g", Errors.NONE)
    assert d.committed() == {T0: 3, T1: 8}


def test_a_member_may_commit_below_the_committed_offset_as_kafka_allows_by_default():
    d = Driver()
    d.commit({T0: 100})
    assert d.commit({T0: 99}) == {T0: Errors.NONE} and d.committed() == {T0: 99}


def test_the_operator_cannot_reset_an_active_group():
    d = Driver()
    d.stable_group(1)
    ref = d.ref()
    d.take(d.coordinator.reset_offsets(ref, "g", {T0: 3}, d.now))
    assert d.answers[ref] == GroupError("g", Errors.NON_EMPTY_GROUP)


def test_metadata_longer_than_offset_metadata_max_bytes_is_refused():
    from raftcore.groups.messages import OffsetCommitRequest, PartitionCommit

    d = Driver()
    ref = d.ref()
    req = OffsetCommitRequest("g", (PartitionCommit(T0, 1, -1, "x" * 4097),))
    d.take(d.coordinator.commit_offsets(ref, req, d.now))
    assert [r.error for r in d.answers[ref]] == [Errors.OFFSET_METADATA_TOO_LARGE]  # type: ignore[attr-defined]


def test_offset_fetch_answers_one_group_or_many_with_minus_one_for_nothing_committed():
    d = Driver()
    d.commit({T0: 4}, group="a")
    d.commit({T1: 9}, group="b")
    one = d.coordinator.fetch_offsets("a", (T0, T1))
    assert [(p.partition, p.offset) for p in one.partitions] == [(T0, 4), (T1, -1)]
    many = d.coordinator.fetch_offsets_of_groups([("a", None), ("b", None), ("none", None)])
    assert [(r.group_id, [p.offset for p in r.partitions]) for r in many] == [
        ("a", [4]),
        ("b", [9]),
        ("none", []),
    ]
    assert all(isinstance(r, OffsetFetchResponse) and r.error == Errors.NONE for r in many)


def test_offset_delete_refuses_a_topic_the_group_still_subscribes_to():
    d = Driver()
    d.commit({T0: 1, OTHER: 2})
    d.stable_group(1)  # subscribes to "t"
    ref = d.ref()
    d.take(d.coordinator.delete_offsets(ref, "g", (T0, OTHER), d.now))
    top, parts = d.answers[ref]  # type: ignore[misc]
    assert top.error == Errors.NONE
    assert [(p.partition, p.error) for p in parts] == [
        (T0, Errors.GROUP_SUBSCRIBED_TO_TOPIC),
        (OTHER, Errors.NONE),
    ]
    assert d.committed() == {T0: 1}
    ref = d.ref()
    d.take(d.coordinator.delete_offsets(ref, "nope", (T0,), d.now))
    assert d.answers[ref][0].error == Errors.GROUP_ID_NOT_FOUND  # type: ignore[index]


def test_a_coordinator_failover_mid_rebalance_keeps_the_offsets_and_the_members_rejoin():
    """The new leader of the offsets partition replays it: the last persisted generation and
    every committed offset are back; the unpersisted rebalance is gone, so its members' sync
    hears ILLEGAL_GENERATION and they join again."""
    d = Driver()
    a, b = d.stable_group(2)
    assert d.commit({T0: 10, T1: 20}, member_id=a.member_id, generation=1) == {
        T0: Errors.NONE,
        T1: Errors.NONE,
    }
    newcomer = d.join(client="c")
    refs = [d.join(a.member_id), d.join(b.member_id)]
    answers = [d.joined(r) for r in (*refs, newcomer)]
    assert {j.generation_id for j in answers} == {2}  # CompletingRebalance when it fails over

    fresh = d.failover()
    assert d.committed() == {T0: 10, T1: 20}
    g = fresh.group("g")
    assert g is not None and g.state == GroupState.STABLE and g.generation == 1
    assert {m: g.members[m].assignment for m in g.members} == {
        m.member_id: m.member_id.encode() for m in (a, b)
    }
    refused = d.sync(answers[0].member_id, 2)
    assert d.synced(refused) == SyncGroupResponse(Errors.ILLEGAL_GENERATION)
    assert d.heartbeat(b.member_id, 2) == Errors.ILLEGAL_GENERATION
    # The newcomer's id died with the old coordinator: it joins afresh and they all rejoin.
    lost = d.answer(d.join(answers[2].member_id))
    assert isinstance(lost, JoinGroupResponse) and lost.error == Errors.UNKNOWN_MEMBER_ID
    new = d.join(client="c")
    again = [d.join(a.member_id), d.join(b.member_id, protocols=(("range", subscription("t")),))]
    joined = [d.joined(r) for r in (new, *again)]
    assert {j.generation_id for j in joined} == {2}
    assert sum(1 for j in joined if j.members) == 1
    assert d.commit({T0: 11}, member_id=a.member_id, generation=1) == {
        T0: Errors.ILLEGAL_GENERATION
    }


def test_replaying_the_records_twice_gives_the_same_state():
    d = Driver()
    d.stable_group(2)
    d.commit({T0: 3}, group="other")
    first = d.failover()
    second = d.failover()
    assert first.offsets.snapshot() == second.offsets.snapshot()
    assert first.describe_groups(["g", "other"]) == second.describe_groups(["g", "other"])
