"""Backup and restore as docs/operations.md ("Backup and restore") tells an operator, on real node
processes: a follower of a running 3-node cluster is stopped, its data directory archived with
tar and the node started again; later another node's disk is lost for good, and a replacement
node is restored from that archive into a directory formatted to join (the archive's quorum-
state and meta.properties left out, so that it comes back as a new replica and never as a voter
with a vote from the past), joins with --bootstrap, and replaces the lost voter (remove-voter,
add-voter). Then the leader is killed, so that nothing commits without the restored node's
vote. No acknowledged record is lost, none is duplicated or reordered.

The format and tar command lines are the page's (the test checks they are written there). Every
process is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from cluster_helpers import FAST, consume_all, data_keys, key, produce, run, voters_in_the_log
from test_membership_processes import (  # the same cluster and the same CLI helpers
    cli,
    observing,
    quorum_cli,
    voters,
    wait_quorum,
)

from raftcore.node.data_dir import read_directory_id
from raftcore.raft.voters import directory_id_text

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.cluster(3, node_args=FAST, ready=voters_in_the_log),
]

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
# docs/operations.md, with /var/lib/raftcore and the archive's name as they are there
BACKUP = "tar -C {data} -czf {archive} ."
FORMAT = "raftcore format --data-dir {data} --cluster-id={cluster} --id {node} --no-initial-voters"
RESTORE = (
    "tar -C {data} -xzf {archive} --exclude=quorum-state --exclude=meta.properties"
    " --exclude=./__consumer_offsets*"
)


def sh(template: str, data: Path, archive: Path) -> None:
    subprocess.run(
        template.format(data=data, archive=archive).split(), check=True, capture_output=True
    )


def test_the_documented_commands_are_the_tested_ones():
    text = OPERATIONS.read_text()
    for template in (BACKUP, FORMAT, RESTORE):
        line = template.format(
            data="/var/lib/raftcore",
            archive="/backup/raftcore.tar.gz",
            cluster="MkU3OEVBNTcwNTJENDM2Qk",
            node="3",
        )
        assert line in text, line


def test_a_lost_node_restored_from_a_followers_backup_replaces_it_and_no_acknowledged_record_is_lost(  # noqa: E501
    cluster,
    tmp_path,
):
    acked = run(produce(cluster.bootstrap, 0, 300))
    info = wait_quorum(cluster, lambda q: all(r.lag == 0 for r in q.voters), "voters caught up")
    source, lost = [v for v in sorted(voters(info)) if v != info.leader_id]

    # Backup: stop a caught-up follower (SIGTERM, exit 0), archive its directory, start it.
    assert cluster.stop(source) == 0
    archive = tmp_path / "raftcore.tar.gz"
    sh(BACKUP, cluster.data_dir(source), archive)
    cluster.start_node(source)
    acked += run(produce(cluster.bootstrap, 300, 300))

    # Another node's disk is gone for good: the cluster goes on with two voters of three.
    old = voters(wait_quorum(cluster, lambda q: lost in voters(q), "the voters"))[lost]
    cluster.kill(lost, signal.SIGKILL)
    shutil.rmtree(cluster.data_dir(lost))
    acked += run(produce(cluster.bootstrap, 600, 300))

    # Restore: a new directory formatted to join, then the archive into it without its
    # quorum-state and meta.properties; the node joins through the running nodes and comes
    # back as a new replica, an observer.
    replacement = tmp_path / "replacement"
    format_line = FORMAT.format(data=replacement, cluster=cluster.cluster_id, node=lost)
    formatting = cli(*format_line.split()[1:])
    assert formatting.returncode == 0, formatting.stdout + formatting.stderr
    new = read_directory_id(replacement)
    sh(RESTORE, replacement, archive)
    assert read_directory_id(replacement) == new  # the archive's identity left out
    assert (replacement / "log").is_dir()
    cluster.join_node(lost, data_dir=replacement)
    assert new is not None and new not in (old, read_directory_id(cluster.data_dir(source)))
    wait_quorum(cluster, observing(lost, new), f"node {lost} to catch up as an observer")

    removed = quorum_cli(
        cluster, "remove-voter", "--id", str(lost), f"--directory-id={directory_id_text(old)}"
    )
    assert removed.returncode == 0, removed.stdout + removed.stderr
    added = quorum_cli(
        cluster, "add-voter", "--id", str(lost), f"--directory-id={directory_id_text(new)}"
    )
    assert added.returncode == 0, added.stdout + added.stderr
    wait_quorum(cluster, lambda q: voters(q).get(lost) == new, f"node {lost} a voter again")

    # Another voter gone (the leader, unless the restored node leads): nothing commits now
    # without the restored voter's vote.
    leader = wait_quorum(cluster, lambda q: q.leader_id in voters(q), "a leader").leader_id
    cluster.kill(leader if leader != lost else source, signal.SIGKILL)
    acked += run(produce(cluster.bootstrap, 900, 100), 60)

    assert len(acked) == len(set(acked)) == 1000
    keys = run(consume_all(cluster.bootstrap, 1000))
    assert keys == [key(n) for n in range(1000)]  # every acknowledged record, once, in order
    cluster.stop_all()
    assert data_keys(replacement) == [key(n) for n in range(1000)]
