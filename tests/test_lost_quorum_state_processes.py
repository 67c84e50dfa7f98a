"""Never vote twice, on real node processes: a voter whose quorum-state file is deleted (or
damaged) while its data directory holds a log restarts as a new replica -- a new directory id
in ``meta.properties``, an observer -- and never as the voter that may have voted in an epoch
it no longer remembers. The operator replaces it (remove the old voter, add the new one) and
writes go on throughout. Every process is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import pytest
from cluster_helpers import FAST, consume_all, produce, run, voters_in_the_log
from test_membership_processes import (  # the same cluster and the same CLI helpers
    observing,
    quorum_cli,
    voters,
    wait_quorum,
)

from raftcore.node.data_dir import read_directory_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.cluster(3, node_args=FAST, ready=voters_in_the_log),
]


@pytest.mark.parametrize("damage", ["deleted", "damaged"])
def test_a_voter_that_lost_its_quorum_state_comes_back_as_a_new_replica_never_the_old_voter(
    cluster,
    damage,
):
    run(produce(cluster.bootstrap, 0, 200))
    old = read_directory_id(cluster.data_dir(3))
    assert voters(wait_quorum(cluster, lambda q: 3 in voters(q), "voter 3"))[3] == old
    cluster.stop(3)
    state = cluster.data_dir(3) / "quorum-state"
    if damage == "deleted":
        state.unlink()
    else:
        state.write_text('{"leaderEpoch": "x"')
    cluster.start_node(3)
    new = read_directory_id(cluster.data_dir(3))
    assert new is not None and new != old  # a new replica
    info = wait_quorum(cluster, observing(3, new), "node 3 to fetch as an observer")
    assert voters(info)[3] == old  # the voter set still names the old replica ...
    assert "quorum-state is" in cluster.log_tail(3, 200)  # ... and the node said why
    run(produce(cluster.bootstrap, 200, 100))  # writes go on with two voters of three
    # The operator's replacement: the old voter out, the new replica in.
    removed = quorum_cli(cluster, "remove-voter", "--id", "3", f"--directory-id={text(old)}")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    added = quorum_cli(cluster, "add-voter", "--id", "3", f"--directory-id={text(new)}")
    assert added.returncode == 0, added.stdout + added.stderr
    assert voters(wait_quorum(cluster, lambda q: voters(q).get(3) == new, "new voter 3"))[3] == new
    run(produce(cluster.bootstrap, 300, 100))
    assert len(run(consume_all(cluster.bootstrap, 400))) == 400


def text(directory: bytes | None) -> str:
    from raftcore.raft.voters import directory_id_text

    return directory_id_text(directory)
