"""Two of three data directories wiped never reset the cluster, on real node processes.

A node never formats itself: a wiped node started with its usual command exits non-zero with
one line saying how to format it. Formatted with ``--no-initial-voters`` it is a new replica,
an observer that neither stands nor votes. So two wiped voters are never a majority of an
empty log, and the survivor never truncates to follow them: its log is intact throughout.

- Both wiped (one while a writer writes, then the other): a majority of the voters lost their
  disks, and every node is restarted with its usual command. No leader is elected (the
  cluster waits for the operator rather than losing what it acknowledged) and every record
  acknowledged before is in the survivor's log at its offset.
- Wiped one after another while a writer writes: each wiped node refuses, is formatted, comes
  back as an observer and replaces its old replica by the runbook of docs/operations.md
  (remove-voter, add-voter); every node is restarted with its usual command; no acknowledged
  record is lost.

Every process is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import shutil
import time

import pytest
from cluster_helpers import (
    FAST,
    LEADER_CHANGE,
    Writer,
    check_acknowledged,
    consume_all,
    data_keys,
    key,
    run,
    voters_in_the_log,
    wait_for,
)
from test_membership_processes import (  # the same cluster and the same CLI helpers
    cli,
    observing,
    quorum_cli,
    voters,
    wait_quorum,
)
from test_wiped_voter_processes import leader_of_running

from raftcore.log import SegmentedLog
from raftcore.node.data_dir import read_directory_id
from raftcore.node.local_cluster import LocalCluster
from raftcore.raft.voters import directory_id_text

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.cluster(3, node_args=FAST, ready=voters_in_the_log),
]


def log_records(directory) -> dict[int, bytes]:  # type: ignore[no-untyped-def]
    """offset -> key of the data records in a stopped node's log."""
    found: dict[int, bytes] = {}
    with SegmentedLog.open(directory / "log") as log:
        for b in log.batches():
            if not b.is_control:
                for r in b.records():
                    found[r.offset] = r.key  # type: ignore[assignment]
    return found


def refused_unformatted(c: LocalCluster, node_id: int) -> str:
    """Start ``node_id`` with its usual command; it must exit non-zero with one line saying
    how to format its directory. That line."""
    size = c.log_file(node_id).stat().st_size if c.log_file(node_id).exists() else 0
    proc = c.start_node(node_id, wait=False)
    assert proc.wait(30) != 0
    with open(c.log_file(node_id), "rb") as f:
        f.seek(size)
        said = f.read().decode(errors="replace").strip().splitlines()
    assert len(said) == 1, said
    assert "is not formatted" in said[0] and "--no-initial-voters" in said[0], said
    assert not (c.data_dir(node_id) / "meta.properties").exists()  # nothing written
    return said[0]


def format_to_join(c: LocalCluster, node_id: int) -> bytes:
    """``raftcore format --no-initial-voters``, as the refusal said: the new directory id."""
    done = cli(
        "format",
        "--data-dir",
        str(c.data_dir(node_id)),
        f"--cluster-id={c.cluster_id}",
        "--id",
        str(node_id),
        "--no-initial-voters",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    directory = read_directory_id(c.data_dir(node_id))
    assert directory is not None
    return directory


def wipe(c: LocalCluster, node_id: int) -> None:
    assert c.stop(node_id) == 0
    shutil.rmtree(c.data_dir(node_id))


def test_two_voters_wiped_at_once_never_reset_the_cluster_and_the_survivors_log_is_intact(
    cluster,
):
    writer = Writer(cluster.bootstrap)
    writer.start()
    try:
        wait_for(lambda: writer.count >= 300, 30, "300 records acknowledged")
        old = voters(with_leader(cluster))
        wipe(cluster, 3)  # writes go on with two voters of three
        written = writer.count
        wait_for(lambda: writer.count >= written + 300, 30, "300 more records acknowledged")
    finally:
        writer.stop()  # (before the majority is gone: a send in flight then waits 120 s)
    assert not writer.failures, writer.failures
    acked = list(writer.acked)
    wipe(cluster, 2)
    assert cluster.stop(1) == 0
    before = log_records(cluster.data_dir(1))

    # Every node restarted with its usual command: the survivor runs, the wiped ones refuse.
    cluster.start_node(1)
    for node_id in (2, 3):
        refused_unformatted(cluster, node_id)
    new = {node_id: format_to_join(cluster, node_id) for node_id in (2, 3)}
    for node_id in (2, 3):
        cluster.start_node(node_id)
        assert new[node_id] != old[node_id]  # a new replica, not the voter it was

    # Twelve election timeouts of the test's settings: the two new replicas are observers,
    # the survivor alone is no majority: no leader, no empty log taking writes.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert leader_of_running(cluster) is None, "a leader elected by wiped replicas"
        assert all(cluster.alive(i) for i in (1, 2, 3))
        time.sleep(0.3)
    cluster.stop_all()
    after = log_records(cluster.data_dir(1))
    assert after == before  # the survivor's log intact: nothing truncated, nothing new
    for first, lo, hi in acked:  # every acknowledged record there, at its offset
        assert [after.get(o) for o in range(lo, hi + 1)] == [
            key(first + i) for i in range(hi - lo + 1)
        ]
    for node_id in (2, 3):  # the observers hold nothing of another history
        assert data_keys(cluster.data_dir(node_id)) == []


def test_two_wiped_voters_replaced_one_after_another_by_the_runbook_lose_no_acknowledged_record(
    cluster,
):
    writer = Writer(cluster.bootstrap)
    writer.start()
    try:
        wait_for(lambda: writer.count >= 500, 30, "500 records acknowledged")
        for node_id in (3, 2):
            old = voters(with_leader(cluster))[node_id]
            wipe(cluster, node_id)
            refused_unformatted(cluster, node_id)
            new = format_to_join(cluster, node_id)
            cluster.start_node(node_id)  # its usual command: --voters
            wait_quorum(cluster, observing(node_id, new), f"node {node_id} as an observer")
            assert voters(with_leader(cluster))[node_id] == old  # not a voter yet
            written = writer.count
            # The runbook: the old replica out, the new one in.
            done = quorum_cli(
                cluster, "remove-voter", "--id", str(node_id),
                f"--directory-id={directory_id_text(old)}",
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            done = quorum_cli(
                cluster, "add-voter", "--id", str(node_id),
                f"--directory-id={directory_id_text(new)}",
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            wait_quorum(cluster, lambda q, n=node_id, d=new: voters(q).get(n) == d, "new voter")
            wait_for(lambda w=written: writer.count > w + 100, 30, "writes go on")
        # The survivor restarted with its usual command too.
        assert cluster.stop(1) == 0
        cluster.start_node(1)
        written = writer.count
        wait_for(lambda: writer.count > written + 100, 30, "writes after the restart")
    finally:
        writer.stop()
    assert not writer.failures, writer.failures
    assert set(writer.errors) <= LEADER_CHANGE, writer.errors
    keys = run(consume_all(cluster.bootstrap, writer.count, timeout_s=60), 90)
    check_acknowledged(writer, keys)
    cluster.stop_all()
    assert data_keys(cluster.data_dir(1)) == keys  # the survivor: every record, in order


def with_leader(c: LocalCluster):  # type: ignore[no-untyped-def]
    return wait_quorum(c, lambda q: q.leader_id >= 0, "a leader")
