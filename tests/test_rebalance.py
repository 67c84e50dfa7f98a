"""Preferred leaders and the auto leader rebalance (raftcore.node.rebalance): the decision as a
pure function, then three in-process nodes with three partitions and a one-second check."""

from __future__ import annotations

import asyncio

import pytest
from test_node import cluster, run  # the in-process cluster and its helpers

from raftcore.node.node import RaftNode
from raftcore.node.rebalance import (
    GroupLeadership,
    LeaderRebalance,
    handovers,
    imbalanced,
    preferred_leader,
    returned,
)
from raftcore.raft import LeaderAndEpoch
from raftcore.raft.config import QuorumConfig
from raftcore.raft.states.leader import LeaderState
from raftcore.raft.voters import VoterSet
from raftcore.topic_partition import TopicPartition

TOPIC = "raftcore"


def tp(p: int) -> TopicPartition:
    return TopicPartition(TOPIC, p)


# ---- the decision ------------------------------------------------------------------------------


def test_partition_p_prefers_the_p_mod_n_th_voter_in_ascending_id_order():
    voters = {7, 3, 5}
    assert [preferred_leader(voters, p) for p in range(5)] == [3, 5, 7, 3, 5]
    assert preferred_leader((), 0) is None


def test_a_leader_hands_each_partition_to_its_preferred_leader_when_that_one_is_ready():
    groups = [
        GroupLeadership(tp(0), leader=1, preferred=1, preferred_ready=True),
        GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=True),
        GroupLeadership(tp(2), leader=1, preferred=3, preferred_ready=True),
    ]
    assert handovers(groups, local_id=1, percentage=10) == [(tp(1), 2), (tp(2), 3)]
    # the other nodes lead none of them: they hand nothing over
    assert handovers(groups, local_id=2, percentage=10) == []


def test_a_preferred_leader_not_live_or_not_caught_up_is_handed_nothing():
    groups = [
        GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=False),
        GroupLeadership(tp(2), leader=1, preferred=3, preferred_ready=True),
    ]
    assert handovers(groups, local_id=1, percentage=10) == [(tp(2), 3)]


def test_a_group_with_a_transfer_in_flight_is_not_asked_again():
    groups = [
        GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=True, transferring=True)
    ]
    assert handovers(groups, local_id=1, percentage=10) == []


def test_a_voter_within_the_imbalance_percentage_is_left_alone():
    # voter 2 prefers 20 partitions and leads 19: 5%, not above 10%
    groups = [
        GroupLeadership(tp(p), leader=2 if p else 1, preferred=2, preferred_ready=True)
        for p in range(20)
    ]
    assert imbalanced(groups, 10) == {}
    assert handovers(groups, local_id=1, percentage=10) == []
    # at 0% any partition led elsewhere counts (Kafka's ratio is strictly above)
    assert imbalanced(groups, 0) == {2: (1, 20)}
    assert handovers(groups, local_id=1, percentage=0) == [(tp(0), 2)]


def test_a_partition_without_a_known_leader_counts_against_its_preferred_voter():
    groups = [GroupLeadership(tp(0), leader=None, preferred=1)]
    assert imbalanced(groups, 10) == {1: (1, 1)}
    assert handovers(groups, local_id=1, percentage=10) == []  # nobody leads: nothing to hand


def test_a_preferred_leader_seen_absent_and_now_ready_has_its_groups_checked_at_once():
    gone = [
        GroupLeadership(tp(0), leader=1, preferred=1, absent=frozenset({2})),
        GroupLeadership(tp(1), leader=1, preferred=2),
    ]
    away, back = returned(gone, frozenset(), local_id=1)
    assert (away, back) == ({2}, [])
    # it fetches again, still behind in partition 1: away until it is ready there
    catching_up = [
        GroupLeadership(tp(0), leader=1, preferred=1),
        GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=False),
    ]
    away, back = returned(catching_up, away, local_id=1)
    assert (away, back) == ({2}, [])
    ready = [
        GroupLeadership(tp(0), leader=1, preferred=1),
        GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=True),
    ]
    away, back = returned(ready, away, local_id=1)
    assert (away, back) == (frozenset(), [tp(1)])
    # once back, a ready voter is not news
    assert returned(ready, away, local_id=1) == (frozenset(), [])


def test_a_voter_never_seen_absent_brings_no_prompt_check():
    ready = [GroupLeadership(tp(1), leader=1, preferred=2, preferred_ready=True)]
    assert returned(ready, frozenset(), local_id=1) == (frozenset(), [])


def test_absences_are_judged_only_in_the_groups_this_node_leads():
    views = [
        GroupLeadership(tp(0), leader=3, preferred=1, absent=frozenset({2})),
        GroupLeadership(tp(1), leader=3, preferred=2, preferred_ready=True),
    ]
    assert returned(views, frozenset({2}), local_id=1) == (frozenset(), [])


class _Core:
    """What LeaderRebalance asks of a group's core: a leader of partition 1 on node 1."""

    def __init__(self) -> None:
        self.config = QuorumConfig(fetch_timeout_ms=1000)
        self.voter_set = VoterSet.static([1, 2, 3])
        self.state = LeaderState(
            1,
            self.voter_set,
            local_id=1,
            epoch_start_offset=0,
            granting_voters=frozenset({1, 2}),
            check_quorum_timeout_ms=1500,
            begin_quorum_interval_ms=500,
            now=0,
        )
        self.state.high_watermark = 5
        self.leader = 1
        self.asked: list[tuple[int, int]] = []

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leader, 1)

    def transfer_leadership(self, target: int, timeout_ms: int, now: int) -> int:
        self.asked.append((target, now))
        return len(self.asked)


class _Group:
    failure = None

    def __init__(self, core: _Core) -> None:
        self.core = core

    def running_core(self) -> _Core:
        return self.core

    def poke(self) -> None:
        pass


def test_a_group_whose_handovers_do_not_take_waits_twice_as_long_each_time():
    core = _Core()
    clock = [0]
    rebalance = LeaderRebalance(
        {tp(1): _Group(core)},  # type: ignore[dict-item]
        local_id=1,
        interval_ms=100,
        percentage=10,
        prefix="[node 1]",
        clock=lambda: clock[0],
    )
    replica = core.state.voter_states[2]
    for now in range(0, 8000, 250):
        replica.end_offset, replica.last_fetch_ms = 5, now  # live and caught up
        rebalance.check(now)
    # node 2 takes none of them: the wait is the timeout (1 s), then 2 s, then 4 s
    assert core.asked == [(2, 0), (2, 1000), (2, 3000), (2, 7000)]
    core.leader = 2  # it took the last one: the count starts again
    rebalance.check(8000)
    core.leader = 1
    for now in (15000, 15500, 16000):  # the last wait (8 s from 7000) still holds
        replica.last_fetch_ms = now
        rebalance.check(now)
    assert core.asked[4:] == [(2, 15000), (2, 16000)]  # then 1 s again


def test_a_caught_up_voter_that_stopped_fetching_is_not_handed_anything():
    core = _Core()
    rebalance = LeaderRebalance(
        {tp(1): _Group(core)},  # type: ignore[dict-item]
        local_id=1,
        interval_ms=100,
        percentage=10,
        prefix="[node 1]",
        clock=lambda: 0,
    )
    replica = core.state.voter_states[2]
    replica.end_offset, replica.last_fetch_ms = 5, 0
    rebalance.check(1001)  # its last fetch is older than the fetch timeout
    replica.end_offset, replica.last_fetch_ms = 4, 1001  # live, behind the high watermark
    rebalance.check(1001)
    assert core.asked == []
    replica.end_offset = 5
    rebalance.check(1001)
    assert core.asked == [(2, 1001)]


# ---- three nodes, three partitions -------------------------------------------------------------

PARTITIONS = 3
INTERVAL_S = 1.0  # the check runs at most once a second (the node's housekeeping)


def _leader_ids(nodes: list[RaftNode]) -> dict[int, int | None]:
    """Each partition's leader, where exactly one running node leads it."""
    running = [n for n in nodes if n._started]
    found: dict[int, int | None] = {}
    for p in range(PARTITIONS):
        led = [n.node_id for n in running if n.groups[tp(p)].is_leader()]
        found[p] = led[0] if len(led) == 1 else None
    return found


async def _until(what, check, timeout_s: float):  # type: ignore[no-untyped-def]
    """Wait for ``check()``; ``what()`` says what did not happen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {what()}")


def _preferred(nodes: list[RaftNode]) -> dict[int, int]:
    voters = sorted(nodes[0].config.voters)
    return {p: voters[p % len(voters)] for p in range(PARTITIONS)}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_after_start_each_node_leads_the_one_partition_it_prefers(tmp_path):
    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, leader_imbalance_check_interval_s=INTERVAL_S
        ) as nodes:
            want = _preferred(nodes)
            assert sorted(want.values()) == sorted(n.node_id for n in nodes)
            await _until(
                lambda: (
                    f"every partition led by its preferred leader {want} (leaders: "
                    f"{_leader_ids(nodes)})"
                ),
                lambda: _leader_ids(nodes) == want,
                8 * INTERVAL_S,
            )

    run(go())


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_restarted_node_leads_its_preferred_partition_again_within_a_few_intervals(tmp_path):
    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, leader_imbalance_check_interval_s=INTERVAL_S
        ) as nodes:
            want = _preferred(nodes)
            await _until(
                lambda: f"spread as {want}", lambda: _leader_ids(nodes) == want, 8 * INTERVAL_S
            )
            victim = next(n for n in nodes if n.node_id == want[1])
            await victim.stop(timeout_s=1.0)
            await _until(
                lambda: f"partition 1 led by another node than {victim.node_id}",
                lambda: _leader_ids(nodes)[1] not in (None, victim.node_id),
                5.0,
            )
            back = RaftNode(victim.config)
            nodes[nodes.index(victim)] = back  # the cluster stops it at the end
            await back.start()
            await _until(
                lambda: (
                    f"node {back.node_id} leads partition 1 again (leaders: {_leader_ids(nodes)})"
                ),
                lambda: back.groups[tp(1)].is_leader() and _leader_ids(nodes) == want,
                8 * INTERVAL_S,
            )

    run(go())


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_at_the_default_interval_a_restarted_preferred_leader_leads_again_within_30_s(tmp_path):
    """The check every 300 s would not do it in time: the leader of partition 1 checks at once
    when it sees its preferred leader, absent, fetch again and catch up."""

    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS) as nodes:
            assert nodes[0].config.leader_imbalance_check_interval_s == 300
            want = _preferred(nodes)
            await _until(
                lambda: f"every partition led (leaders: {_leader_ids(nodes)})",
                lambda: None not in _leader_ids(nodes).values(),
                8.0,
            )
            while _leader_ids(nodes) != want:  # spread, as the periodic check would
                for n in nodes:
                    assert n._rebalance is not None
                    n._rebalance.check(n._rebalance.clock())
                await asyncio.sleep(0.2)
            victim = next(n for n in nodes if n.node_id == want[1])
            await victim.stop(timeout_s=1.0)
            await _until(
                lambda: f"partition 1 led by another node than {victim.node_id}",
                lambda: _leader_ids(nodes)[1] not in (None, victim.node_id),
                5.0,
            )
            # away for longer than a fetch timeout and a housekeeping round, as a process
            # restart is: the new leader has seen it absent
            new = next(n for n in nodes if n.node_id == _leader_ids(nodes)[1])
            await _until(
                lambda: f"node {new.node_id} sees node {victim.node_id} away",
                lambda: new._rebalance is not None and victim.node_id in new._rebalance._away,
                5.0,
            )
            back = RaftNode(victim.config)
            nodes[nodes.index(victim)] = back  # the cluster stops it at the end
            loop = asyncio.get_running_loop()
            started = loop.time()
            await back.start()
            await _until(
                lambda: (
                    f"node {back.node_id} leads partition 1 again (leaders: {_leader_ids(nodes)})"
                ),
                back.groups[tp(1)].is_leader,
                30.0,
            )
            took = loop.time() - started
            print(f"node {back.node_id} led partition 1 again {took:.1f} s after its restart")

    run(go())


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_with_the_auto_leader_rebalance_off_a_node_runs_no_rebalance(tmp_path):
    async def go() -> None:
        async with cluster(tmp_path, partitions=PARTITIONS, auto_leader_rebalance=False) as nodes:
            assert all(n._rebalance is None for n in nodes)

    run(go())


def test_with_one_partition_no_node_runs_a_rebalance(tmp_path):
    """Nothing to spread: a healed follower that is partition 0's preferred leader must not
    depose a healthy leader (an election each time it came back)."""

    async def go() -> None:
        async with cluster(tmp_path, partitions=1) as nodes:
            assert all(n._rebalance is None for n in nodes)

    run(go())


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_no_replica_of_a_partition_is_demoted_by_another_partitions_answer(tmp_path):
    """UpdateRaftVoter names no partition and is partition 0's (KIP-853): a follower of
    another partition must not send it, or partition 0's answer, naming partition 0's leader
    and epoch, reaches that partition's core, which then finds 'its' id leading an epoch it
    never led and turns observer for good. The leaders spread, so they differ by partition."""

    async def go() -> None:
        async with cluster(
            tmp_path, partitions=PARTITIONS, leader_imbalance_check_interval_s=INTERVAL_S
        ) as nodes:
            want = _preferred(nodes)
            await _until(lambda: f"spread as {want}", lambda: _leader_ids(nodes) == want, 8.0)
            await asyncio.sleep(2.0)  # past a fetch timeout (0.6 s): the followers' reports
            demoted = [
                f"node {n.node_id} {name}"
                for n in nodes
                for name, group in n.groups.items()
                if group.core.quorum.demoted
            ]
            assert demoted == []

    run(go())
