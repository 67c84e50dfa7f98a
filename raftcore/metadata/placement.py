"""Where the controller puts a partition's replicas (its decision alone; every other node
applies the PartitionRecords it writes).

The rule is a least-loaded greedy, chosen over Kafka's rack-unaware striping (a random start
index and a shifting stride) because it counts what the cluster already holds: adding
partitions to a topic, creating a topic beside others, or moving replicas off a node all keep
the spread. For each new partition, in order:

1. the preferred leader (the first replica) is the node leading fewest of the topic's
   partitions, among the nodes whose replica count of the topic is at most the
   replication-factor-th smallest: choosing it cannot leave a less-loaded node out;
2. the followers are the other nodes holding fewest of the topic's replicas, ties going to the
   node that already leads more (it needs the replica slot least to lead later).

Ties are then broken by the same counts over the whole cluster and last by node id, so the same
nodes and image give the same answer. Over nodes that start even, every node's replicas of the
topic and its preferred leaderships stay within one of each other's after each partition
(tests/test_metadata_placement.py checks it for 1 to 9 nodes). Only the live nodes given are
used; replicas on other nodes are not counted.

Moving a replica (decommissioning a node) is AddRaftVoter of the new node then RemoveRaftVoter
of the old one on that partition's group: :func:`decommission_plan` lists those steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raftcore.error_codes import Errors
from raftcore.metadata.errors import MetadataError
from raftcore.metadata.image import MetadataImage
from raftcore.metadata.topic_id import TopicId

__all__ = ["ReassignmentStep", "decommission_plan", "place_new_partitions", "place_new_topic"]


@dataclass(frozen=True, slots=True)
class ReassignmentStep:
    """Move one replica: AddRaftVoter ``add``, then RemoveRaftVoter ``remove``, on partition
    ``partition`` of ``topic``; ``replicas`` is the replica list after, preferred leader first."""

    topic: str
    partition: int
    add: int
    remove: int
    replicas: tuple[int, ...]


class _Spread:
    """Replica and preferred-leader counts per live node, for the cluster and per topic."""

    def __init__(self, nodes: Iterable[int], image: MetadataImage) -> None:
        self.nodes = sorted(set(nodes))
        self.replicas: Counter[int] = Counter()
        self.leaders: Counter[int] = Counter()
        self.topic_replicas: dict[TopicId, Counter[int]] = {}
        self.topic_leaders: dict[TopicId, Counter[int]] = {}
        live = set(self.nodes)
        for _, p in image.partitions():
            self._count(p.topic_id, [n for n in p.replicas if n in live], 1)
            if p.preferred_leader in live:
                self._lead(p.topic_id, p.preferred_leader, 1)

    def _count(self, topic_id: TopicId, nodes: Iterable[int], n: int) -> None:
        per_topic = self.topic_replicas.setdefault(topic_id, Counter())
        for node in nodes:
            self.replicas[node] += n
            per_topic[node] += n

    def _lead(self, topic_id: TopicId, node: int, n: int) -> None:
        self.leaders[node] += n
        self.topic_leaders.setdefault(topic_id, Counter())[node] += n

    def follower_key(self, topic_id: TopicId) -> Callable[[int], tuple[int, ...]]:
        """Fewest replicas of the topic first; then the node that leads more."""
        reps = self.topic_replicas.setdefault(topic_id, Counter())
        leads = self.topic_leaders.setdefault(topic_id, Counter())
        return lambda n: (reps[n], -leads[n], self.replicas[n], -self.leaders[n], n)

    def leader_key(self, topic_id: TopicId) -> Callable[[int], tuple[int, ...]]:
        """Fewest preferred leaderships of the topic first."""
        reps = self.topic_replicas.setdefault(topic_id, Counter())
        leads = self.topic_leaders.setdefault(topic_id, Counter())
        return lambda n: (leads[n], self.leaders[n], reps[n], self.replicas[n], n)

    def choose(self, topic_id: TopicId, replication_factor: int) -> tuple[int, ...]:
        """The replicas of one new partition of the topic, preferred leader first, counted."""
        reps = self.topic_replicas.setdefault(topic_id, Counter())
        cut = sorted(reps[n] for n in self.nodes)[replication_factor - 1]
        leader = min((n for n in self.nodes if reps[n] <= cut), key=self.leader_key(topic_id))
        others = sorted((n for n in self.nodes if n != leader), key=self.follower_key(topic_id))
        chosen = (leader, *others[: replication_factor - 1])
        self._count(topic_id, chosen, 1)
        self._lead(topic_id, leader, 1)
        return chosen

    def move(
        self, topic_id: TopicId, replicas: tuple[int, ...], node: int, where: str
    ) -> tuple[int, int]:
        """Take ``node`` out of ``replicas``: (the node added, the new preferred leader)."""
        candidates = [n for n in self.nodes if n not in replicas and n != node]
        if not candidates:
            raise MetadataError(
                Errors.INVALID_REPLICATION_FACTOR,
                f"{where}: no live node outside replicas {list(replicas)} to take node "
                f"{node}'s place "
                f"({len(self.nodes)} other live nodes)",
            )
        added = min(candidates, key=self.follower_key(topic_id))
        leader = replicas[0]
        if leader == node:
            # the leadership goes to whoever leads fewest, the node added among them
            staying = [n for n in replicas if n != node and n in self.nodes]
            leader = min([*staying, *candidates], key=self.leader_key(topic_id))
            if leader in candidates:
                added = leader
            self._lead(topic_id, leader, 1)
        self._count(topic_id, [added], 1)  # the node leaving was never counted
        return added, leader


def _check_replication_factor(nodes: list[int], replication_factor: int, topic: str) -> None:
    if not 1 <= replication_factor <= len(nodes):
        raise MetadataError(
            Errors.INVALID_REPLICATION_FACTOR,
            f"topic {topic}: replication factor {replication_factor} with "
            f"{len(nodes)} live nodes {nodes} (it must be 1 to {len(nodes)})",
        )


def place_new_topic(
    nodes: Iterable[int],
    image: MetadataImage,
    topic_id: TopicId,
    *,
    partitions: int,
    replication_factor: int,
    topic: str = "",
) -> list[tuple[int, ...]]:
    """The replicas of each partition of a new topic, preferred leader first."""
    spread = _Spread(nodes, image)
    _check_replication_factor(spread.nodes, replication_factor, topic or str(topic_id))
    return [spread.choose(topic_id, replication_factor) for _ in range(partitions)]


def place_new_partitions(
    nodes: Iterable[int], image: MetadataImage, topic: str, count: int
) -> list[tuple[int, ...]]:
    """The replicas of the partitions that take ``topic`` to ``count`` partitions
    (CreatePartitions), with the replication factor of its partition 0, as Kafka does."""
    found = image.topic(topic)
    if found is None:
        raise MetadataError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic}: no such topic")
    spread = _Spread(nodes, image)
    _check_replication_factor(spread.nodes, found.replication_factor, topic)
    more = count - len(found.partitions)
    return [spread.choose(found.topic_id, found.replication_factor) for _ in range(more)]


def decommission_plan(
    nodes: Iterable[int], image: MetadataImage, node: int
) -> list[ReassignmentStep]:
    """The steps that move every replica off ``node`` onto the other live ``nodes``, keeping
    replicas and preferred leaders spread; refused with INVALID_REPLICATION_FACTOR when a
    partition has as many replicas as there are other nodes."""
    spread = _Spread([n for n in nodes if n != node], image)
    steps = []
    for name, p in image.partitions():
        if node not in p.replicas:
            continue
        added, leader = spread.move(p.topic_id, p.replicas, node, f"{name}-{p.partition_id}")
        after = [added if n == node else n for n in p.replicas]
        after.remove(leader)
        replicas = (leader, *after)
        steps.append(ReassignmentStep(name, p.partition_id, added, node, replicas))
    return steps
