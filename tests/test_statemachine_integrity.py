"""Damage to a replica's state on disk never spreads, with in-process nodes on loopback: a byte
flipped in a follower's LMDB file, in the leader's snapshot and in a follower's snapshot. No
damaged value is ever served or copied into a snapshot, and every replica ends with the
leader's state (raftcore.statemachine.checksums, raftcore.node.rebuild,
raftcore.log.snapshots' checks, raftcore.raft.fetch_snapshot's backoff)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from statemachine_helpers import leader_of, run
from test_snapshot_cluster import (
    SNAPSHOTS,
    lmdb_at,
    observer_config,
    same_state,
    stop_all,
    voter_configs,
    wait_until,
)

from raftcore.node.node import RaftNode
from raftcore.statemachine import LmdbStateMachine
from raftcore.statemachine.checksums import DamagedValueError

pytestmark = pytest.mark.timeout(180)

# A snapshot every 2,000 records: a few thousand writes give every replica one.
INTEGRITY = dataclasses.replace(SNAPSHOTS, snapshot_min_records=2_000)
KEYS = 500


def value_of(i: int) -> bytes:
    return b"val-%08d-end" % i


async def write(
    leader: RaftNode, first: int, count: int, per_batch: int = 250, prefix: bytes = b"k"
) -> int:
    """Puts of key ``<prefix><i % KEYS>`` = ``val-<i>-end`` for i in [first, first + count):
    every value is unique, so its bytes can be found in a file. Returns the end offset."""
    appended = None
    for start in range(first, first + count, per_batch):
        recs = [
            (prefix + b"%05d" % (i % KEYS), value_of(i)) for i in range(start, start + per_batch)
        ]
        appended = await leader.append(recs, wait=True)
    assert appended is not None
    return appended.last_offset + 1


def flip_every_copy(path: Path, needle: bytes, at: int) -> bytes:
    """Flip a bit of byte ``at`` of every copy of ``needle`` in ``path``; the damaged bytes."""
    data = path.read_bytes()
    assert needle in data, f"{needle!r} not in {path}"
    damaged = bytearray(needle)
    damaged[at] ^= 0x02
    with open(path, "r+b") as f:
        start = 0
        while (found := data.find(needle, start)) >= 0:
            f.seek(found + at)
            f.write(damaged[at : at + 1])
            start = found + 1
    return bytes(damaged)


def flip_snapshot_byte(path: Path) -> None:
    """Flip one byte in the middle of a snapshot file (a data batch: its CRC fails)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.chmod(0o644)  # frozen snapshots are read-only
    path.write_bytes(bytes(data))


def latest_snapshot_file(node_dir: Path) -> Path:
    return sorted((node_dir / "log").glob("*.checkpoint"))[-1]


def snapshot_files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("*/log/*.checkpoint"))


@pytest.mark.slow
def test_damaged_lmdb_values_and_snapshots_never_spread_every_replica_ends_with_the_leaders(
    tmp_path,
):
    async def main():
        cfgs = voter_configs(tmp_path, quorum=INTEGRITY)
        machines = [lmdb_at(c) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        observer = None
        try:
            for n in nodes:
                await n.start()
            leader = await leader_of(nodes)
            written = 0
            end = await write(leader, written, 5_000)
            written += 5_000
            for n in nodes:
                await n.wait_applied(end, timeout_s=30)
            await wait_until(
                lambda: all(n.log.latest_snapshot_id() is not None for n in nodes),  # type: ignore[union-attr]
                30,
                "a snapshot on every node",
            )
            followers = [n for n in nodes if n is not leader]

            # 1. A follower's LMDB file: the live value of k00042 (and any stale copy) flipped.
            victim = followers[0]
            vsm = machines[nodes.index(victim)]
            live = value_of(written - KEYS + 42)
            assert vsm.get(b"k00042") == live
            damaged = flip_every_copy(victim.config.data_dir / "state" / "data.mdb", live, 5)
            # the next writes (to other keys) make a snapshot due on the victim: it finds the
            # damage before anything else reads it
            end = await write(leader, written, 2_500, prefix=b"j")
            written += 2_500
            await wait_until(
                lambda: victim.rebuild is not None and victim.rebuild.rebuilds >= 1,
                30,
                "the victim to rebuild its state machine",
            )
            for n in nodes:
                await n.wait_applied(end, timeout_s=30)
            await wait_until(lambda: vsm.damaged is None, 30, "the rebuilt state")
            assert vsm.get(b"k00042") == machines[nodes.index(leader)].get(b"k00042")
            assert victim.failure is None

            # 2. The leader's latest snapshot: a replica that needs it (a new observer: the
            # leader's log starts past 0) is never served it; the leader takes a new one.
            await wait_until(
                lambda: leader.log.log_start_offset > 0,  # type: ignore[union-attr]
                30,
                "the leader's log start past 0",
            )
            leader_snapshot = latest_snapshot_file(leader.config.data_dir)
            flip_snapshot_byte(leader_snapshot)
            ocfg = observer_config(tmp_path, leader.config, snapshot_min_records=2_000)
            osm = lmdb_at(ocfg)
            observer = RaftNode(ocfg, state_machine=osm)
            await observer.start()
            await wait_until(
                lambda: leader_snapshot.with_name(leader_snapshot.name + ".damaged").exists(),
                30,
                "the leader to set its damaged snapshot aside",
            )
            end = await write(leader, written, 2_500)
            written += 2_500
            await observer.wait_applied(end, timeout_s=60)
            assert observer.core is not None and observer.core.snapshots.installed >= 1
            assert leader.failure is None and observer.failure is None

            # 3. A follower's latest snapshot, found at its next start: set aside, the node
            # runs on, and its next snapshot stands in its place.
            other = followers[1]
            index = nodes.index(other)
            await other.stop()
            machines[index].close()
            other_snapshot = latest_snapshot_file(other.config.data_dir)
            flip_snapshot_byte(other_snapshot)
            machines[index] = lmdb_at(cfgs[index])
            nodes[index] = other = RaftNode(cfgs[index], state_machine=machines[index])
            await other.start()
            assert other_snapshot.with_name(other_snapshot.name + ".damaged").exists()
            leader = await leader_of(nodes, timeout_s=20)
            end = await write(leader, written, 2_500)
            written += 2_500
            for n in [*nodes, observer]:
                await n.wait_applied(end, timeout_s=60)
            await wait_until(
                lambda: other.core.snapshots.taken >= 1,  # type: ignore[union-attr]
                30,
                "a new snapshot on the restarted follower",
            )

            # Never served, never copied; every replica has the leader's state.
            for path in snapshot_files(tmp_path):
                assert damaged not in path.read_bytes(), f"{path} holds the damaged value"
            reference = machines[nodes.index(leader)]
            for m in [*machines, osm]:
                same_state(m, reference)
                assert m.damaged is None
        finally:
            if observer is not None:
                await observer.stop()
                observer.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=170)


@pytest.mark.slow
def test_a_damaged_value_read_on_a_replica_is_refused_then_served_again_once_rebuilt(tmp_path):
    """A local read that meets a damaged value raises DamagedValueError (never the value);
    the replica rebuilds from its snapshot and log, and the same read then answers the
    leader's value."""

    async def main():
        cfgs = voter_configs(tmp_path, quorum=INTEGRITY)
        machines: list[LmdbStateMachine] = [lmdb_at(c) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        try:
            for n in nodes:
                await n.start()
            leader = await leader_of(nodes)
            end = await write(leader, 0, 3_000)
            for n in nodes:
                await n.wait_applied(end, timeout_s=30)
            follower = next(n for n in nodes if n is not leader)
            fsm = machines[nodes.index(follower)]
            live = value_of(3_000 - KEYS + 7)
            flip_every_copy(follower.config.data_dir / "state" / "data.mdb", live, 9)
            with pytest.raises(DamagedValueError, match="k00007"):
                fsm.get(b"k00007")
            await wait_until(lambda: fsm.damaged is None, 30, "the rebuilt state")
            await follower.wait_applied(end, timeout_s=30)
            assert fsm.get(b"k00007") == live
            same_state(fsm, machines[nodes.index(leader)])
            # one rebuild, also when a snapshot meets the same damage (its report is the
            # first, or refused as damaged already, or stale after the rebuild's restore)
            assert follower.rebuild is not None and follower.rebuild.rebuilds == 1
        finally:
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=120)


@pytest.mark.slow
def test_a_replica_that_must_load_its_damaged_snapshot_downloads_the_leaders_copy(tmp_path):
    """An observer whose state machine is gone (behind its log start) and whose only
    snapshot is damaged: at start the snapshot is set aside, its listener waits, and it
    downloads the leader's copy of the same snapshot with FetchSnapshot, loads it, and ends
    with the leader's state -- instead of stopping with no advice."""

    async def main():
        cfgs = voter_configs(tmp_path, quorum=INTEGRITY)
        machines = [lmdb_at(c) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        observer = None
        try:
            for n in nodes:
                await n.start()
            leader = await leader_of(nodes)
            end = await write(leader, 0, 5_000)
            await wait_until(
                lambda: leader.log.log_start_offset > 0,  # type: ignore[union-attr]
                30,
                "the leader's log start past 0",
            )
            # an observer that takes no snapshot of its own: its only one is the leader's
            ocfg = observer_config(tmp_path, leader.config, snapshot_min_records=0)
            observer = RaftNode(ocfg, state_machine=lmdb_at(ocfg))
            await observer.start()
            await observer.wait_applied(end, timeout_s=60)
            assert observer.log is not None and leader.log is not None
            installed = observer.log.latest_snapshot_id()
            assert installed is not None and installed == leader.log.latest_snapshot_id()
            await observer.stop()
            observer.state_machine.close()  # type: ignore[union-attr]
            observer = None

            # the state machine lost, the snapshot damaged
            for f in (ocfg.data_dir / "state").iterdir():
                f.unlink()
            damaged = latest_snapshot_file(ocfg.data_dir)
            flip_snapshot_byte(damaged)
            osm = lmdb_at(ocfg)
            assert osm.applied_offset == 0
            observer = RaftNode(ocfg, state_machine=osm)
            await observer.start()
            assert damaged.with_name(damaged.name + ".damaged").exists()
            await observer.wait_applied(end, timeout_s=60)
            assert observer.failure is None
            assert observer.log.latest_snapshot_id() == installed  # type: ignore[union-attr]
            assert not observer.log.snapshot_damaged(installed)  # type: ignore[union-attr]
            same_state(osm, machines[nodes.index(leader)])
        finally:
            if observer is not None:
                await observer.stop()
                observer.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=120)
