"""A node's Raft group is stepped on the clock it is given, not on the wall clock: what makes a
group drivable on virtual time (raftcore.node.group)."""

from __future__ import annotations

import pytest
from test_node import Collector, configs, leader_of, run

from raftcore.node.clock import now_ms
from raftcore.node.node import RaftNode
from raftcore.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(60)

AHEAD_MS = 10**12  # about 32 years: no wall-clock time in this test comes near it


def test_every_step_of_a_groups_core_reads_the_groups_clock(tmp_path):
    """The leader records when each follower last fetched: with every group's clock set far
    ahead of the wall clock, those times are on the group's clock, and the cluster commits as
    usual (its timer waits for deadlines on the same clock)."""

    async def main() -> None:
        nodes = [RaftNode(cfg, listener=Collector()) for cfg in configs(tmp_path)]
        for node in nodes:
            # the topic's one group (beside it, __consumer_offsets' partitions)
            assert [n for n in node.groups if n.topic == node.config.topic] == [
                TopicPartition(node.config.topic, 0)
            ]
            node.group.clock = lambda: now_ms() + AHEAD_MS
        try:
            for node in nodes:
                await node.start()
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"v")], wait=True)
            replicas = leader.core.state.voter_states.values()  # type: ignore[union-attr]
            fetched = [r.last_fetch_ms for r in replicas if r.replica_id != leader.node_id]
            assert len(fetched) == 2 and all(t >= AHEAD_MS for t in fetched), fetched
        finally:
            for node in nodes:
                await node.stop(timeout_s=0.5)

    run(main())
