"""Replica placement (raftcore.metadata.placement): the controller spreads replicas and
preferred leaders evenly over the live nodes, keeps the spread when a topic grows, and moves
every replica off a node being decommissioned."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcore.error_codes import Errors
from raftcore.metadata import MetadataError, MetadataImage, TopicId
from raftcore.metadata.controller import create_partitions, create_topic, reassignment_records
from raftcore.metadata.placement import decommission_plan, place_new_topic

T = TopicId(bytes([9] * 16))


def spread(assignments) -> tuple[Counter, Counter]:
    """Replicas and preferred leaderships per node."""
    replicas = Counter(n for replicas in assignments for n in replicas)
    leaders = Counter(replicas[0] for replicas in assignments)
    return replicas, leaders


def width(counts: Counter, nodes) -> int:
    return max(counts[n] for n in nodes) - min(counts[n] for n in nodes)


def topic_image(nodes, partitions, rf, name="orders", image=None, seed=1) -> MetadataImage:
    image = image or MetadataImage()
    for record in create_topic(
        image,
        name,
        partitions=partitions,
        replication_factor=rf,
        configs={},
        nodes=nodes,
        rng=random.Random(seed),
    ):
        image.apply(record)
    return image


def assignments_of(image: MetadataImage, name="orders") -> list[tuple[int, ...]]:
    return [p.replicas for p in image.topic(name).partitions]


def test_3_nodes_1000_partitions_rf_3_each_node_1000_replicas_and_333_or_334_leaders():
    placed = place_new_topic([1, 2, 3], MetadataImage(), T, partitions=1000, replication_factor=3)
    replicas, leaders = spread(placed)
    assert replicas == {1: 1000, 2: 1000, 3: 1000}
    assert sorted(leaders.values()) == [333, 333, 334]
    assert all(len(set(r)) == 3 for r in placed)


def test_5_nodes_100_partitions_rf_3_replicas_and_leaders_per_node_within_one():
    nodes = [1, 2, 3, 4, 5]
    placed = place_new_topic(nodes, MetadataImage(), T, partitions=100, replication_factor=3)
    replicas, leaders = spread(placed)
    assert width(replicas, nodes) <= 1 and width(leaders, nodes) <= 1
    assert sum(replicas.values()) == 300 and set(replicas) == set(nodes)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(
            st.just(n), st.integers(1, n), st.integers(1, 120), st.integers(0, 1000)
        )
    )
)
def test_after_every_partition_replicas_and_leaders_per_node_stay_within_one(case):
    """For 1 to 9 nodes with any ids, any replication factor up to the node count: every
    prefix of the assignment is within one, so a topic of any size is."""
    n, rf, partitions, first_id = case
    nodes = [first_id + 3 * i for i in range(n)]
    placed = place_new_topic(
        nodes, MetadataImage(), T, partitions=partitions, replication_factor=rf
    )
    for end in range(1, partitions + 1):
        replicas, leaders = spread(placed[:end])
        assert width(replicas, nodes) <= 1 and width(leaders, nodes) <= 1, placed[:end]
    assert all(len(set(r)) == rf == len(r) and set(r) <= set(nodes) for r in placed)


def test_the_same_inputs_give_the_same_placement_whatever_the_order_of_the_nodes():
    image = topic_image([1, 2, 3, 4], 7, 2, name="other")
    first = place_new_topic([4, 2, 3, 1], image, T, partitions=50, replication_factor=3)
    again = place_new_topic([1, 2, 3, 4], image, T, partitions=50, replication_factor=3)
    assert first == again


def test_only_the_live_nodes_given_are_used():
    placed = place_new_topic([2, 5, 7], MetadataImage(), T, partitions=30, replication_factor=2)
    assert {n for r in placed for n in r} == {2, 5, 7}


@pytest.mark.parametrize("rf", [0, 4, -2])
def test_a_replication_factor_above_the_node_count_is_invalid_replication_factor(rf):
    with pytest.raises(MetadataError) as caught:
        place_new_topic([1, 2, 3], MetadataImage(), T, partitions=3, replication_factor=rf)
    assert caught.value.error is Errors.INVALID_REPLICATION_FACTOR
    assert "3 live nodes" in str(caught.value)


def test_a_new_topic_beside_others_goes_to_the_nodes_that_hold_least():
    """Three one-partition topics with one replica each land on three different nodes, and
    their leaders too: the cluster-wide counts break the ties of a topic's own."""
    image = MetadataImage()
    for i, name in enumerate(["a", "b", "c"]):
        topic_image([1, 2, 3], 1, 1, name=name, image=image, seed=i)
    assert sorted(assignments_of(image, n)[0][0] for n in "abc") == [1, 2, 3]


def test_create_partitions_extends_a_topic_keeping_the_spread():
    nodes = [1, 2, 3, 4, 5]
    image = topic_image(nodes, 7, 3)
    for count in (8, 13, 40):
        for record in create_partitions(image, "orders", count, nodes):
            image.apply(record)
        placed = assignments_of(image)
        assert len(placed) == count and all(len(r) == 3 for r in placed)
        replicas, leaders = spread(placed)
        assert width(replicas, nodes) <= 1 and width(leaders, nodes) <= 1


def test_partitions_added_after_a_node_joins_go_to_it_first():
    image = topic_image([1, 2, 3], 3, 3)
    for record in create_partitions(image, "orders", 6, [1, 2, 3, 4]):
        image.apply(record)
    new = assignments_of(image)[3:]
    assert all(4 in r for r in new) and new[0][0] == 4


# ---- decommissioning ----------------------------------------------------------------------


def apply_plan(image: MetadataImage, steps) -> dict[tuple[str, int], tuple[int, ...]]:
    after = {(name, p.partition_id): p.replicas for name, p in image.partitions()}
    for step in steps:
        before = after[(step.topic, step.partition)]
        assert step.remove in before and step.add not in before
        assert set(step.replicas) == set(before) - {step.remove} | {step.add}
        after[(step.topic, step.partition)] = step.replicas
    return after


def test_decommissioning_moves_every_replica_off_the_node_and_keeps_the_spread():
    nodes = [1, 2, 3, 4, 5]
    image = topic_image(nodes, 100, 3)
    steps = decommission_plan(nodes, image, 3)
    assert len(steps) == 60 and all(s.remove == 3 for s in steps)
    after = list(apply_plan(image, steps).values())
    rest = [1, 2, 4, 5]
    replicas, leaders = spread(after)
    assert replicas[3] == 0 and leaders[3] == 0
    assert width(replicas, rest) <= 1 and width(leaders, rest) <= 1
    assert all(len(set(r)) == 3 for r in after)


def test_decommissioning_is_one_add_then_remove_step_per_replica_on_the_node():
    image = topic_image([1, 2, 3, 4], 4, 2)
    steps = decommission_plan([1, 2, 3, 4], image, 2)
    hosting = [p.partition_id for _, p in image.partitions() if 2 in p.replicas]
    assert [s.partition for s in steps] == hosting
    assert decommission_plan([1, 2, 3, 4], image, 9) == []
    assert decommission_plan([1, 2, 3, 4], image, 2) == steps  # deterministic


def test_decommissioning_a_node_when_every_other_node_holds_a_replica_is_refused():
    image = topic_image([1, 2, 3], 3, 3)
    with pytest.raises(MetadataError) as caught:
        decommission_plan([1, 2, 3], image, 1)
    assert caught.value.error is Errors.INVALID_REPLICATION_FACTOR
    assert "orders-0" in str(caught.value)


def test_a_move_is_recorded_as_kafkas_reassignment_adding_and_removing_then_the_new_replicas():
    nodes = [1, 2, 3, 4]
    image = topic_image(nodes, 4, 3)
    for step in decommission_plan(nodes, image, 1):
        start, finish = reassignment_records(image, step)
        image.apply(start)
        moving = image.topic("orders").partitions[step.partition]
        assert (moving.adding_replicas, moving.removing_replicas) == ((step.add,), (step.remove,))
        assert {step.add, step.remove} <= set(moving.replicas)
        image.apply(finish)
        done = image.topic("orders").partitions[step.partition]
        assert done.replicas == step.replicas and not done.adding_replicas
        assert done.isr == step.replicas and done.leader in (-1, *step.replicas)
    assert all(1 not in r for r in assignments_of(image))
    with pytest.raises(MetadataError) as caught:
        reassignment_records(image, step)  # the last step again: node 1 is gone
    assert caught.value.error is Errors.INVALID_REPLICA_ASSIGNMENT
