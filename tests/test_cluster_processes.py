"""Node processes on loopback (KIP-595 in real processes): election, replication, SIGKILL of the
leader, divergence after a failover (KIP-279), cluster-id fencing. Each test bounds its time;
every process it starts is ended by its pid (LocalCluster.close)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest
from cluster_helpers import (
    FAST,
    consume_all,
    data_keys,
    formatted,
    key,
    produce,
    quorum,
    run,
    wait_caught_up,
    wait_for,
)

from raftcore.client import Producer
from raftcore.node.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.cluster(3, node_args=FAST)]


def test_three_processes_elect_one_leader_and_commit_what_is_produced(cluster):
    async def scenario():
        offsets = await produce(cluster.bootstrap, 0, 500)
        info = await quorum(cluster)
        keys = await consume_all(cluster.bootstrap, 500)
        return offsets, info, keys

    offsets, info, keys = run(scenario())
    assert len(offsets) == len(set(offsets)) == 500
    assert info.leader_id in (1, 2, 3) and info.leader_epoch >= 1
    assert info.high_watermark > max(offsets)
    assert keys == [key(n) for n in range(500)]


def test_sigkill_of_the_leader_elects_another_and_keeps_every_acknowledged_record(cluster):
    async def before():
        await produce(cluster.bootstrap, 0, 300)
        return await quorum(cluster)

    info = run(before())
    old_leader, old_epoch = info.leader_id, info.leader_epoch
    cluster.kill(old_leader, signal.SIGKILL)

    async def after():
        await produce(cluster.bootstrap, 300, 300)
        info = await quorum(cluster)
        keys = await consume_all(cluster.bootstrap, 600)
        return info, keys

    info, keys = run(after())
    assert info.leader_id != old_leader
    assert info.leader_epoch > old_epoch
    assert keys == [key(n) for n in range(600)]

    cluster.start_node(old_leader)  # the old leader comes back as a follower and catches up
    run(wait_caught_up(cluster, [1, 2, 3]))
    cluster.stop_all()
    for node_id in cluster.node_ids:
        assert data_keys(cluster.data_dir(node_id)) == [key(n) for n in range(600)]


def test_restarted_leader_with_a_diverged_log_truncates_it_and_catches_up(cluster):
    """The leader appends records no follower gets (its followers are paused), dies, and
    comes back after a new leader wrote other records at the same offsets: it must truncate
    its uncommitted suffix (KIP-279) and end with the new leader's log."""
    info = run(quorum(cluster))
    old = info.leader_id
    followers = [i for i in cluster.node_ids if i != old]
    run(produce(cluster.bootstrap, 0, 100))
    for f in followers:
        os.kill(cluster.pid(f), signal.SIGSTOP)
    # A fetch parked on the leader would carry the next records into the paused follower's
    # socket buffer (and so into its log once it runs again). Let the parked fetches time out
    # (fetch max wait 500 ms) before the leader gets the records no follower may see.
    time.sleep(1.0)
    try:

        async def unreplicated():
            async with Producer([cluster.endpoint(old)], acks=1, idempotent=False) as producer:
                return await producer.send([(b"lost-%d" % n, b"x") for n in range(50)])

        first, last = run(unreplicated(), 20)
        assert last - first == 49
    finally:
        cluster.kill(old, signal.SIGKILL)
        for f in followers:
            os.kill(cluster.pid(f), signal.SIGCONT)
    keys_on_old = data_keys(cluster.data_dir(old))
    assert keys_on_old[-50:] == [b"lost-%d" % n for n in range(50)]  # the suffix to lose

    run(produce(cluster.bootstrap, 100, 200))  # the new leader writes over those offsets
    cluster.start_node(old)
    run(wait_caught_up(cluster, [1, 2, 3]))
    cluster.stop_all()
    expected = [key(n) for n in range(300)]
    for node_id in cluster.node_ids:
        assert data_keys(cluster.data_dir(node_id)) == expected


def test_a_node_of_another_cluster_is_refused(cluster, tmp_path):
    info = run(quorum(cluster))
    victim = next(i for i in cluster.node_ids if i != info.leader_id)
    cluster.stop(victim)

    # Its own data directory belongs to the first cluster: the node refuses to start.
    proc = subprocess.run(
        cluster.command(victim, cluster_id="another-cluster"),
        cwd=cluster.directory,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0
    assert b"belongs to cluster" in proc.stderr

    # With a new data directory formatted for the other cluster it starts, but the voters
    # answer INCONSISTENT_CLUSTER_ID: it never joins (the quorum's view of it does not move)
    # and says why in its log.
    formatted(tmp_path / "fresh", victim, "another-cluster", cluster.node_ids)
    cmd = cluster.command(victim, cluster_id="another-cluster")
    cmd[cmd.index("--data-dir") + 1] = str(tmp_path / "fresh")
    run(produce(cluster.bootstrap, 0, 50))
    with open(tmp_path / "fresh.log", "wb") as log:
        stranger = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cluster.directory
        )
    try:
        wait_for(
            lambda: b"INCONSISTENT_CLUSTER_ID" in (tmp_path / "fresh.log").read_bytes(),
            20,
            "the refusal in the stranger's log",
        )
        info = run(quorum(cluster))
        ends = {v.replica_id: v.log_end_offset for v in info.voters}
        assert ends[victim] < info.high_watermark
    finally:
        stranger.kill()
        stranger.wait(10)


def test_graceful_stop_of_the_leader_hands_over_quickly(cluster):
    """SIGTERM makes the leader resign with EndQuorumEpoch: a successor is elected without
    waiting for the fetch timeout."""
    info = run(quorum(cluster))
    leader = info.leader_id
    cluster.stop(leader)

    async def new_leader():
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            info = await quorum(cluster)
            if info.leader_id != leader and info.leader_epoch > 0:
                return info, loop.time() - started
            await asyncio.sleep(0.05)

    info2, _ = run(new_leader(), 30)
    assert info2.leader_epoch > info.leader_epoch


def test_a_cluster_id_starting_with_a_dash_reaches_the_node_intact():

    cmd = LocalCluster("/nonexistent", cluster_id="-abc").command(1)
    assert "--cluster-id=-abc" in cmd


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        input=stdin,
        cwd="/",  # never the source checkout (its raftcore is not built)
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_produce_consume_and_describe_quorum_against_a_cluster(cluster):
    boot = ",".join(cluster.bootstrap)
    produced = _cli("produce", "--bootstrap", boot, "--key-separator", ":", stdin="a:1\nb:2\nc:3\n")
    assert produced.returncode == 0, produced.stderr
    generated = _cli("produce", "--bootstrap", boot, "--generate", "50", "--compression", "zstd")
    assert generated.returncode == 0, generated.stderr
    consumed = _cli("consume", "--bootstrap", boot, "--max", "3", "--print-offsets")
    assert consumed.returncode == 0, consumed.stderr
    lines = consumed.stdout.splitlines()
    assert len(lines) == 3
    assert [line.split()[1:] for line in lines] == [["a", "1"], ["b", "2"], ["c", "3"]]
    described = _cli("describe-quorum", "--bootstrap", boot)
    assert described.returncode == 0, described.stderr
    assert "LeaderId" in described.stdout or "leader" in described.stdout.lower()
    for node_id in (1, 2, 3):
        assert str(node_id) in described.stdout


def test_cli_produce_refuses_a_compression_kafka_does_not_have(cluster):
    result = _cli("produce", "--bootstrap", cluster.bootstrap[0], "--compression", "brotli", "x")
    assert result.returncode != 0
    assert "brotli" in result.stderr and "Traceback" not in result.stderr
