"""A wiped voter and a cut-back voter never elect a leader that lacks acknowledged records, on
real node processes (the reproduction of the storage-faults issue: a voter restarted on an
empty disk under its old id voted with a voter whose log an operator had cut back, and their
leader lacked 219,840 acknowledged records; the node holding them was truncated to match).

The wiped voter, formatted with --no-initial-voters, comes back as a new replica (a new
directory id: an observer), so the cut-back voter finds no second vote: no leader until the
voter holding the records returns, and then every acknowledged record is there. Every process
is ended by its pid."""

from __future__ import annotations

import shutil
import time

import pytest
from cluster_helpers import FAST, consume_all, formatted, produce, run, voters_in_the_log
from test_membership_processes import (  # the same cluster and the same CLI helpers
    describe,
    voters,
    wait_quorum,
)

from raftcore.node.data_dir import read_directory_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.cluster(3, node_args=FAST, ready=voters_in_the_log),
]


def leader_of_running(running) -> int | None:  # type: ignore[no-untyped-def]
    try:
        info = describe(running)
    except Exception:  # no leader to answer: the tool's one-line error
        return None
    return info.leader_id if info.leader_id >= 0 else None


def test_a_wiped_voter_and_a_cut_back_voter_elect_no_leader_that_lacks_acknowledged_records(
    cluster,
):
    acked = run(produce(cluster.bootstrap, 0, 600))
    assert len(acked) == 600
    info = wait_quorum(cluster, lambda q: all(v.lag == 0 for v in q.voters), "voters caught up")
    leader = info.leader_id
    wiped, cut = [i for i in (1, 2, 3) if i != leader]
    old = voters(info)[wiped]
    for node in (wiped, cut):
        cluster.stop(node)
    # The wiped voter: its whole data directory gone, a new disk formatted to join (a node
    # never formats itself).
    shutil.rmtree(cluster.data_dir(wiped))
    formatted(cluster.data_dir(wiped), wiped, cluster.cluster_id, voters=None)
    # The cut-back voter: its log cut back by hand to a fifth (the only way out of a damaged
    # segment there was), its quorum-state (its vote) and identity kept.
    segments = sorted(cluster.data_dir(cut).rglob("*.log"))
    assert segments, list(cluster.data_dir(cut).rglob("*"))
    for segment in segments[1:]:
        segment.unlink()
    with open(segments[0], "r+b") as f:
        f.truncate(segments[0].stat().st_size // 5)
    for index in cluster.data_dir(cut).rglob("*.index"):
        index.unlink()
    cluster.stop(leader)
    cluster.start_node(wiped)
    cluster.start_node(cut)
    assert read_directory_id(cluster.data_dir(wiped)) != old  # a new replica
    # Ten election timeouts of the test's settings: the two must not elect a leader.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert leader_of_running(cluster) is None, "a leader without the acknowledged records"
        time.sleep(0.3)
    cluster.start_node(leader)
    info = wait_quorum(cluster, lambda q: q.leader_id >= 0, "a leader once the holder is back")
    assert voters(info)[wiped] == old  # the wiped replica is not the voter it replaced
    assert len(run(consume_all(cluster.bootstrap, 600))) == 600
