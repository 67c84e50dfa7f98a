"""Retention on a running cluster (Kafka's retention.bytes, retention.ms, segment.ms): whole
segments go on every replica by KIP-630's rules, on a node that only replicates the log (its
snapshots are empty) and on one with a state machine alike, and a consumer from the earliest
offset starts at the new log start."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
from node_helpers import cluster
from statemachine_helpers import CLUSTER_ID, FAST, leader_of
from waits import until as wait_for

from raftcore.client import Consumer
from raftcore.log import LogConfig
from raftcore.node.node import RaftNode
from raftcore.raft import QuorumConfig
from raftcore.raft.retention import RetentionConfig
from raftcore.statemachine import DictStateMachine

pytestmark = pytest.mark.timeout(90)

# Timeouts a loaded machine (CI) cannot miss: the leader these tests read must stay the leader
# (a new one's log start is its own, below the one the test saw move).
QUORUM = dataclasses.replace(
    FAST,
    snapshots_on_request=True,
    max_replication_lag_ms=60_000,
    election_timeout_ms=2000,
    fetch_timeout_ms=4000,
)
SEGMENT = 16 * 1024
VALUE = b"v" * 1000


def retained(
    retention: RetentionConfig, state_machine: bool = False, quorum: QuorumConfig = QUORUM
) -> dict[str, Any]:
    """The shared cluster's arguments for this module's nodes: small segments, ``retention``,
    no listener, and a DictStateMachine each if ``state_machine``."""
    return {
        "cluster_id": CLUSTER_ID,
        "quorum": quorum,
        "log": LogConfig(segment_bytes=SEGMENT),
        "retention": retention,
        "listener": None,
        "state_machine": (lambda _: DictStateMachine()) if state_machine else None,
        "stop_timeout_s": 0.3,
    }


async def fill(leader: RaftNode, batches: int) -> None:
    for i in range(batches):
        await leader.append([(b"k%d" % i, VALUE)] * 4, wait=True)


async def followers_follow_once_writes_go_on(leader: RaftNode, nodes, limit: int) -> None:  # type: ignore[no-untyped-def]
    """With a state machine the leader's log shrinks to retention; a follower moves its log
    start only to a snapshot of its own at or below the leader's log start, and takes that
    snapshot where it has applied to, past the leader's log start (raftcore.raft.snapshots,
    maybe_advance_as_follower). So it follows the leader's log start of now once the leader's
    moves past that snapshot: once writes go on. (Until then, with writes stopped, its log
    reaches back to where it last moved, which may be far more than retention.bytes.)"""
    await wait_for(lambda: leader.log.size_in_bytes <= limit, 20, "the leader's log to shrink")
    start = leader.log.log_start_offset
    deadline = time.monotonic() + 30
    written = 0
    while not all(n.log.log_start_offset >= start for n in nodes):
        assert time.monotonic() < deadline, [
            (n.node_id, n.log.log_start_offset, n.log.end_offset, n.log.size_in_bytes)
            for n in nodes
        ]
        await leader.append([(b"more%d" % written, VALUE)] * 4, wait=True)
        written += 1
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("state_machine", [False, True], ids=["log-only", "state-machine"])
def test_retention_bytes_lets_whole_segments_go_on_every_replica(tmp_path, state_machine):
    retention = RetentionConfig(retention_bytes=4 * SEGMENT, check_interval_ms=100)

    async def main() -> None:
        async with cluster(tmp_path, **retained(retention, state_machine)) as nodes:
            leader = await leader_of(nodes)
            await fill(leader, 60)  # ~240 KB: about 15 segments of 16 KiB, 4 to keep
            limit = retention.retention_bytes + 2 * SEGMENT  # kept, the active one, one spare
            if not state_machine:
                await wait_for(
                    lambda: all(n.log.size_in_bytes <= limit for n in nodes),
                    20,
                    "the logs to shrink",
                )
            else:
                await followers_follow_once_writes_go_on(leader, nodes, limit)
            for n in nodes:
                assert n.log.log_start_offset > 0
                if not state_machine:
                    # an empty snapshot lands exactly on the segment boundary retention chose
                    assert n.log.size_in_bytes >= retention.retention_bytes
            start = leader.log.log_start_offset
            if not state_machine:
                assert leader.log.segment_base_offsets()[0] == start
            # (a state machine snapshots where it has applied to, at or past that boundary:
            # the log may keep less, the records below are in the snapshot's state)
            assert leader.retention.requests >= 1
            async with Consumer([str(leader.config.listen)], start="earliest") as consumer:
                earliest = await consumer.list_offset(-2)  # EARLIEST: the log start
                assert earliest >= start, [  # who answered: each node's role and log start
                    (n.node_id, n.leader_and_epoch, n.log.log_start_offset) for n in nodes
                ]
                if not state_machine:  # (a state machine's snapshot may have taken it all)
                    first: list = []
                    for _ in range(50):
                        first = first or await consumer.poll()
                    assert first and first[0].offset >= start

    asyncio.run(asyncio.wait_for(main(), 80))


@pytest.mark.slow
def test_retention_ms_with_segment_ms_lets_old_records_go(tmp_path):
    """segment.ms seals the active segment once its first record is that old, so that
    retention.ms can reach it; only whole, committed segments go. Time is the records' own
    (wall clock), told to the check here instead of waited for."""
    retention = RetentionConfig(retention_ms=60_000, segment_ms=30_000, check_interval_ms=3_600_000)

    async def main() -> None:
        async with cluster(tmp_path, **retained(retention)) as nodes:
            leader = await leader_of(nodes)
            await leader.append([(b"old", VALUE)], wait=True)
            end = leader.log.end_offset
            now = int(time.time() * 1000)
            assert leader.retention is not None
            leader.retention.check(now_ms=now + 10_000)
            assert leader.retention.rolled == 0 and leader.log.log_start_offset == 0
            leader.retention.check(now_ms=now + 40_000)  # rolled, not yet expired
            assert leader.retention.rolled == 1
            assert leader.log.segment_base_offsets()[-1] == end
            await leader.append([(b"new", VALUE)], wait=True)
            # 70 s on, both records are past retention.ms: the active segment rolls too, and
            # both sealed segments go, as Kafka's would
            leader.retention.check(now_ms=now + 70_000)
            assert leader.retention.rolled == 2
            whole = leader.log.end_offset
            assert leader.log.segment_base_offsets() == [0, end, whole]
            await wait_for(
                lambda: all(n.log.log_start_offset == whole for n in nodes), 10, "the log start"
            )
            assert leader.log.segment_base_offsets() == [whole]

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.slow
def test_a_replica_down_while_retention_moved_the_log_start_catches_up_by_the_empty_snapshot(
    tmp_path,
):
    """KIP-630 on a node that only replicates: the leader moves its log start past a stopped
    follower once the snapshot is max_replication_lag_ms old; the follower, started again,
    fetches the (empty) snapshot, starts its log there and replicates the rest."""
    retention = RetentionConfig(retention_bytes=2 * SEGMENT, check_interval_ms=100)
    quorum = dataclasses.replace(QUORUM, max_replication_lag_ms=500)

    async def main() -> None:
        async with cluster(tmp_path, **retained(retention, quorum=quorum)) as nodes:
            leader = await leader_of(nodes)
            down = next(n for n in nodes if n is not leader)
            await down.stop(timeout_s=0.3)
            await fill(leader, 40)
            await wait_for(lambda: leader.log.log_start_offset > 0, 20, "the leader's log start")
            start = leader.log.log_start_offset
            again = RaftNode(down.config)
            nodes[nodes.index(down)] = again
            await again.start()
            await wait_for(
                lambda: (
                    again.log.end_offset >= leader.log.end_offset
                    and again.log.log_start_offset >= start
                ),
                20,
                "the restarted follower to catch up from the snapshot",
            )
            assert again.core.snapshots.installed >= 1
            assert again.log.segment_base_offsets()[0] >= start

    asyncio.run(asyncio.wait_for(main(), 80))
