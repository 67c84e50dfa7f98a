"""Snapshots (KIP-630) end to end, with in-process nodes on loopback: nodes take snapshots of
their LMDB state machines off the event loop, the leader moves its log start past them, and a
replica that comes later (or falls behind the log start) downloads the leader's snapshot in
chunks, installs it only whole and verified, loads it, fetches the rest, and ends with the
same state."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
from typing import ClassVar

import pytest
from statemachine_helpers import CLUSTER_ID, FAST, leader_of, node_configs, run
from waits import until as wait_until

from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError
from raftcore.log import SegmentedLog
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import free_ports
from raftcore.node.node import RaftNode
from raftcore.raft.messages import FetchSnapshotResponse
from raftcore.security.certs import make_certs
from raftcore.statemachine import DictStateMachine, LmdbStateMachine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# Timeouts roomier than FAST: six nodes' threads share one process (and a busy machine), and
# an election in the middle of a download rightly drops it.
SNAPSHOTS = dataclasses.replace(
    FAST,
    election_timeout_ms=1000,
    fetch_timeout_ms=3000,
    request_timeout_ms=1000,
    snapshot_min_records=20_000,
    max_replication_lag_ms=2_000,
)


def lmdb_at(cfg: NodeConfig) -> LmdbStateMachine:
    return LmdbStateMachine(cfg.data_dir / "state", map_size=256 << 20, sync=False)


def voter_configs(tmp_path, quorum=SNAPSHOTS) -> list[NodeConfig]:  # type: ignore[no-untyped-def]
    return [dataclasses.replace(c, quorum=quorum) for c in node_configs(tmp_path)]


def observer_config(tmp_path, voters: NodeConfig, node_id: int = 4, **quorum) -> NodeConfig:  # type: ignore[no-untyped-def]
    (port,) = free_ports(1)
    return NodeConfig(
        node_id=node_id,
        voters=voters.voters,
        listen=Endpoint("127.0.0.1", port),
        data_dir=tmp_path / f"observer-{node_id}",
        cluster_id=CLUSTER_ID,
        quorum=dataclasses.replace(SNAPSHOTS, **quorum),
    )


async def write_ops(leader: RaftNode, count: int, per_batch: int = 1000) -> int:
    """``count`` records in batches of ``per_batch``: puts of k<i % 50,000> (so later batches
    overwrite earlier keys), every 7th a delete of an earlier key. Returns the end offset."""
    appended = None
    for start in range(0, count, per_batch):
        recs: list[tuple[bytes, bytes | None]] = []
        for i in range(start, min(count, start + per_batch)):
            if i % 7 == 6:
                recs.append((b"k%05d" % ((i * 13) % 50_000), None))
            else:
                recs.append((b"k%05d" % (i % 50_000), b"v%d" % i))
        last = start + per_batch >= count
        appended = await leader.append(recs, wait=last or start % 20_000 == 0)
    assert appended is not None
    return appended.last_offset + 1


def same_state(a: LmdbStateMachine, b: LmdbStateMachine) -> None:
    assert a.applied_offset == b.applied_offset
    left, right = a.items(), b.items()
    assert len(left) == len(right)
    assert left == right


async def stop_all(nodes: list[RaftNode]) -> None:
    for n in nodes:
        await n.stop(timeout_s=0.5)


async def cluster_with_snapshots(tmp_path, records: int):  # type: ignore[no-untyped-def]
    """Three voters with LMDB state machines and snapshots on; ``records`` written, applied
    everywhere, and the leader's log start past 0. Returns (nodes, machines, leader, end)."""
    cfgs = voter_configs(tmp_path)
    machines = [lmdb_at(c) for c in cfgs]
    nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
    for n in nodes:
        await n.start()
    leader = await leader_of(nodes)
    end = await write_ops(leader, records)
    for n in nodes:
        await n.wait_applied(end, timeout_s=60)
    assert leader.log is not None
    await wait_until(lambda: leader.log.log_start_offset > 0, 30, "the leader's log start > 0")
    return nodes, machines, leader, end


def test_a_node_takes_snapshots_of_its_state_machine_off_the_loop(tmp_path):
    """Output.snapshot_due: the state machine writes on a worker thread (its start hops to
    the loop for the core's writer); the core gets snapshot_frozen; the log keeps it."""

    class Watching(DictStateMachine):
        threads: ClassVar[set[int]] = set()

        def snapshot(self, writer):  # type: ignore[no-untyped-def]
            self.threads.add(threading.get_ident())
            return super().snapshot(writer)

    async def main():
        (cfg,) = node_configs(tmp_path, count=1)
        cfg = dataclasses.replace(
            cfg, quorum=dataclasses.replace(cfg.quorum, snapshot_min_records=100)
        )
        sm = Watching()
        node = RaftNode(cfg, state_machine=sm)
        await node.start()
        try:
            await leader_of([node])
            for i in range(0, 1000, 50):
                await node.append([(b"k%d" % j, b"v") for j in range(i, i + 50)], wait=True)
            assert node.log is not None and node.snapshotter is not None
            await wait_until(lambda: node.snapshotter.taken >= 2, 20, "two snapshots")
            latest = node.log.latest_snapshot_id()
            assert latest is not None and latest.offset > 0
            assert threading.get_ident() not in sm.threads  # never on the loop
            assert node.snapshotter.failed == 0
        finally:
            await node.stop()

    run(main())


def single_node(tmp_path, **quorum) -> NodeConfig:  # type: ignore[no-untyped-def]
    (cfg,) = node_configs(tmp_path, count=1)
    return dataclasses.replace(cfg, quorum=dataclasses.replace(cfg.quorum, **quorum))


async def write_batches(node: RaftNode, batches: int, per_batch: int = 50) -> None:
    for _ in range(batches):
        await node.append([(b"k%d" % j, b"v") for j in range(per_batch)], wait=True)


def test_a_failed_snapshot_is_aborted_abandoned_and_retried(tmp_path, caplog):
    """The state machine raises in the middle of snapshot(writer): the log's writer is
    aborted (no .part left), the core is told (snapshot_abandoned: it is free to ask again),
    the reason is logged, and the next attempt succeeds."""

    class FailFirst(DictStateMachine):
        calls = 0

        def snapshot(self, writer):  # type: ignore[no-untyped-def]
            FailFirst.calls += 1
            if FailFirst.calls == 1:
                writer.start(self.applied_offset)
                writer.append([(b"a", b"1")])
                raise OSError("disk on fire")
            return super().snapshot(writer)

    async def main():
        cfg = single_node(tmp_path, snapshot_min_records=100)
        node = RaftNode(cfg, state_machine=FailFirst())
        await node.start()
        try:
            await leader_of([node])
            await write_batches(node, 4)
            snapshotter = node.snapshotter
            assert snapshotter is not None and node.core is not None and node.log is not None
            await wait_until(lambda: snapshotter.failed == 1, 20, "the failed snapshot")
            assert node.core.snapshots.writer is None  # abandoned
            assert list((cfg.data_dir / "log").glob("*.part")) == []  # aborted
            await write_batches(node, 1)
            await wait_until(lambda: snapshotter.taken == 1, 20, "the retried snapshot")
            assert node.log.latest_snapshot_id() is not None
        finally:
            await node.stop()
        assert "disk on fire" in caplog.text

    run(main())


def test_a_node_stopped_while_a_snapshot_is_written_gives_it_up(tmp_path):
    """stop() during snapshot(writer): the next append raises, the writer is aborted (no
    .part), nothing is frozen, and stop returns."""
    started = threading.Event()
    release = threading.Event()

    class Slow(DictStateMachine):
        def snapshot(self, writer):  # type: ignore[no-untyped-def]
            writer.start(self.applied_offset)
            started.set()
            release.wait(10)
            writer.append([(b"a", b"1")])
            return self.applied_offset

    async def main():
        cfg = single_node(tmp_path, snapshot_min_records=100)
        node = RaftNode(cfg, state_machine=Slow())
        await node.start()
        await leader_of([node])
        await write_batches(node, 3)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        assert list((cfg.data_dir / "log").glob("*.part"))  # being written
        stopping = asyncio.ensure_future(node.stop())
        await asyncio.sleep(0.1)
        release.set()
        await asyncio.wait_for(stopping, 10)
        assert node.snapshotter is not None and node.snapshotter.taken == 0
        assert list((cfg.data_dir / "log").glob("*.part")) == []
        with SegmentedLog.open(cfg.data_dir / "log") as log:
            assert log.latest_snapshot_id() is None

    run(main())


def test_a_listener_with_snapshot_writer_is_snapshotted_like_a_state_machine(tmp_path):
    """A node with a listener (no state machine) whose listener has snapshot(writer): the
    node takes its snapshots the same way (on the worker thread, the offset checked by the
    core)."""

    class SnapshottingListener:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.state: dict[bytes, bytes] = {}
            self.end = 0

        def handle_commit(self, batches) -> None:  # type: ignore[no-untyped-def]
            with self.lock:
                for b in batches:
                    self.state.update((r.key, r.value) for r in b.records)
                    self.end = b.last_offset + 1

        def handle_leader_change(self, leader) -> None:  # type: ignore[no-untyped-def]
            pass

        def handle_load_snapshot(self, reader) -> None:  # type: ignore[no-untyped-def]
            raise AssertionError("nothing to load in this test")

        def snapshot(self, writer) -> int:  # type: ignore[no-untyped-def]
            with self.lock:
                end, items = self.end, sorted(self.state.items())
            writer.start(end)
            writer.append(items)
            return end

    async def main():
        cfg = single_node(tmp_path, snapshot_min_records=100)
        node = RaftNode(cfg, listener=SnapshottingListener())
        await node.start()
        try:
            await leader_of([node])
            await write_batches(node, 4)
            assert node.snapshotter is not None and node.log is not None
            await wait_until(lambda: node.snapshotter.taken >= 1, 20, "a snapshot")
            assert node.snapshotter.failed == 0
            latest = node.log.latest_snapshot_id()
            assert latest is not None and latest.offset > 100
        finally:
            await node.stop()

    run(main())


def test_snapshots_on_with_nothing_to_snapshot_is_an_error_at_once(tmp_path):
    (cfg,) = node_configs(tmp_path, count=1)
    cfg = dataclasses.replace(cfg, quorum=dataclasses.replace(cfg.quorum, snapshot_interval_ms=10))
    with pytest.raises(RaftcoreError, match="nothing to snapshot"):
        RaftNode(cfg)
    with pytest.raises(RaftcoreError, match="nothing to snapshot"):
        RaftNode(cfg, listener=object())


def test_a_fresh_observer_catches_up_by_snapshot_and_log_to_the_same_state(tmp_path):
    async def main():
        nodes, machines, leader, end = await cluster_with_snapshots(tmp_path, 200_000)
        observer = None
        try:
            assert leader.log is not None
            start = leader.log.log_start_offset
            assert 0 < start <= end  # the latest snapshot may cover everything written
            end = await write_ops(leader, 3000)  # some records after the snapshot, too
            ocfg = observer_config(tmp_path, leader.config)
            osm = lmdb_at(ocfg)
            observer = RaftNode(ocfg, state_machine=osm)
            await observer.start()
            await observer.wait_applied(end, timeout_s=90)
            assert observer.core is not None and observer.log is not None
            assert observer.core.snapshots.installed >= 1  # it downloaded a snapshot ...
            assert observer.log.log_start_offset >= start > 0  # ... and its log starts there
            assert observer.log.latest_snapshot_id() is not None
            for n in nodes:
                await n.wait_applied(end, timeout_s=30)
            same_state(osm, machines[nodes.index(leader)])
            for m in machines:
                same_state(m, machines[0])
        finally:
            if observer is not None:
                await observer.stop()
                observer.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=220)


def test_a_node_joining_with_bootstrap_only_learns_the_voters_from_a_snapshot_and_is_added(
    tmp_path,
):
    """KIP-853: a node that knows one address of the cluster, and no voter, finds the leader
    through it, downloads the snapshot its log start requires -- whose header carries the
    voter set -- then the log, and is added as a voter."""
    from raftcore.client.voters import add_voter

    async def main():
        nodes, machines, leader, end = await cluster_with_snapshots(tmp_path, 60_000)
        joiner = None
        try:
            await wait_until(
                lambda: leader.core.kraft_version == 1,
                30,
                "the voter set in the log",  # type: ignore[union-attr]
            )
            end = await write_ops(leader, 2000)
            cfg = dataclasses.replace(
                observer_config(tmp_path, leader.config),
                voters={},
                bootstrap=(nodes[0].config.listen,),
            )
            joiner = RaftNode(cfg, state_machine=lmdb_at(cfg))
            await joiner.start()
            await joiner.wait_applied(end, timeout_s=90)
            core = joiner.core
            assert core is not None and core.snapshots.installed >= 1
            assert core.voter_set == leader.core.voter_set  # type: ignore[union-attr]
            assert not core.quorum.is_voter
            result = await add_voter([str(n.config.listen) for n in nodes], 4, timeout_s=20)
            assert result.ok, result.line
            await wait_until(lambda: core.quorum.is_voter, 30, "node 4 to be a voter")
        finally:
            if joiner is not None:
                await joiner.stop()
                joiner.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=220)


def test_a_node_with_neither_state_machine_nor_listener_installs_a_snapshot_and_replicates(
    tmp_path,
):
    """A node that only replicates the log (no state machine, no listener) below the leader's
    log start installs the snapshot (nothing to load it into) and fetches on from its end."""

    async def main():
        nodes, machines, leader, end = await cluster_with_snapshots(tmp_path, 40_000)
        ocfg = observer_config(tmp_path, leader.config)
        ocfg = dataclasses.replace(ocfg, quorum=dataclasses.replace(FAST, fetch_timeout_ms=3000))
        observer = RaftNode(ocfg)
        try:
            await observer.start()
            assert observer.log is not None and observer.core is not None
            await wait_until(lambda: observer.log.end_offset >= end, 60, "the observer's log")
            assert observer.core.snapshots.installed >= 1
            assert observer.log.log_start_offset > 0
            assert observer.high_watermark is not None and observer.high_watermark >= end
        finally:
            await observer.stop()
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=120)


def test_a_follower_killed_mid_download_resumes_and_installs_only_a_whole_verified_snapshot(
    tmp_path,
):
    """An observer downloading in small chunks (fetch_max_bytes 4 KiB) dies part-way: the
    ``.part`` it leaves (as a crash would: copied before the stop, which cleans up, and put
    back) is removed at the next start, never installed; the download starts over and
    installs a whole snapshot. A chunk corrupted in transit fails verification of the whole
    snapshot: nothing is installed, and the download starts over. Same state in the end."""

    async def main():
        nodes, machines, leader, end = await cluster_with_snapshots(tmp_path, 60_000)
        ocfg = observer_config(tmp_path, leader.config, fetch_max_bytes=4096)
        observer = RaftNode(ocfg, state_machine=lmdb_at(ocfg))
        try:
            await observer.start()
            core = observer.core
            assert core is not None

            def downloading() -> int:
                writer = getattr(core.state, "fetching_snapshot", None)
                return 0 if writer is None else writer.size

            # Held from the core's hook, not seen by a poll: a fast download ends between two
            # polls. Past 40 KB every further chunk is kept from the core (as a dead node
            # would never get it), so the .part stays part-way until the stop.
            held = asyncio.Event()
            receive = core.handle

            def holding(source, correlation_id, message, now):  # type: ignore[no-untyped-def]
                if isinstance(message, FetchSnapshotResponse) and held.is_set():
                    return core.poll(now)
                out = receive(source, correlation_id, message, now)
                if downloading() > 40_000:
                    held.set()
                return out

            core.handle = holding  # type: ignore[method-assign]
            await asyncio.wait_for(held.wait(), 60)
            log_dir = ocfg.data_dir / "log"
            (part,) = log_dir.glob("*.checkpoint.part")
            kept = tmp_path / "left-by-the-crash"
            shutil.copyfile(part, kept)
            assert core.snapshots.installed == 0
            await observer.stop()
            observer.state_machine.close()  # type: ignore[union-attr]
            shutil.copyfile(kept, part)  # what a SIGKILL leaves behind

            sm = lmdb_at(ocfg)
            assert sm.applied_offset == 0
            observer = RaftNode(ocfg, state_machine=sm)
            # Flip one byte of the first chunk past the header, in transit.
            flipped = []
            await observer.start()
            core = observer.core
            assert core is not None
            assert not part.exists()  # removed at start, never installed
            assert observer.log is not None and observer.log.latest_snapshot_id() is None
            handle = core.handle

            def corrupting(source, correlation_id, message, now):  # type: ignore[no-untyped-def]
                if (
                    isinstance(message, FetchSnapshotResponse)
                    and not flipped
                    and message.position > 0
                    and len(message.data) > 100
                ):
                    data = bytearray(message.data)
                    data[50] ^= 0x40
                    flipped.append(message.position)
                    message = dataclasses.replace(message, data=bytes(data))
                return handle(source, correlation_id, message, now)

            core.handle = corrupting  # type: ignore[method-assign]
            await observer.wait_applied(end, timeout_s=120)
            assert flipped, "no chunk went through the corrupting hook"
            assert core.snapshots.refused >= 1  # the corrupt download was never installed
            assert core.snapshots.installed >= 1  # a whole, verified one was
            assert observer.log.log_start_offset > 0
            same_state(sm, machines[nodes.index(leader)])
        finally:
            await observer.stop()
            observer.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=220)


def test_a_download_resumes_from_its_position_after_a_lost_connection(tmp_path):
    """The download lives on the follower's state, not on the connection: a connection lost
    mid-download (the request in flight with it) is retried from the bytes held, and the
    snapshot is fetched once, start to end."""

    async def main():
        nodes, machines, leader, end = await cluster_with_snapshots(tmp_path, 60_000)
        ocfg = observer_config(tmp_path, leader.config, fetch_max_bytes=4096, fetch_timeout_ms=5000)
        observer = RaftNode(ocfg, state_machine=lmdb_at(ocfg))
        try:
            await observer.start()
            core = observer.core
            assert core is not None
            chunks: list[tuple[object, int]] = []
            handle = core.handle
            at_break = 10
            broken = asyncio.Event()

            def break_connection() -> None:
                peer = observer.peers.connections[leader.node_id].connection  # type: ignore[union-attr]
                assert peer._writer is not None
                peer._writer.close()  # the connection goes, with the next request in flight
                broken.set()

            def recording(source, correlation_id, message, now):  # type: ignore[no-untyped-def]
                if isinstance(message, FetchSnapshotResponse) and message.error_code == 0:
                    epoch = message.current_leader.epoch
                    chunks.append((epoch, message.snapshot_id, message.position))
                    if len(chunks) == at_break:
                        # broken from the hook, not from a poll: a fast download would end
                        # between two polls (it did: 84 chunks before the poll saw 10)
                        asyncio.get_running_loop().call_soon(break_connection)
                return handle(source, correlation_id, message, now)

            core.handle = recording  # type: ignore[method-assign]
            await asyncio.wait_for(broken.wait(), 60)
            await observer.wait_applied(end, timeout_s=120)
            assert len(chunks) > at_break + 1
            epoch, sid, last = chunks[at_break - 1]
            same = [p for e, s, p in chunks if (e, s) == (epoch, sid)]
            assert epoch == leader.leader_and_epoch.epoch, "an election: the download was dropped"
            # one snapshot, each chunk once and in order, from 0 to its end: resumed, not redone
            assert same == sorted(set(same)) and same[0] == 0 and same[-1] > last
            assert len(same) == len(chunks)
            assert core.snapshots.installed == 1 and core.snapshots.refused == 0
            same_state(observer.state_machine, machines[nodes.index(leader)])  # type: ignore[arg-type]
        finally:
            await observer.stop()
            observer.state_machine.close()  # type: ignore[union-attr]
            await stop_all(nodes)
            for m in machines:
                m.close()

    run(main(), timeout_s=220)


@pytest.mark.parametrize("transport", ["plaintext", "mutual-tls"])
def test_node_processes_with_lmdb_snapshots_bring_a_follower_down_past_the_log_start_back(
    tmp_path, transport
):
    """The command line end to end (``raftcore node --state-machine lmdb --snapshot-...``,
    through LocalCluster's node_args): a follower SIGKILLed while writes go on falls behind
    the leader's log start (max replication lag 1 s); restarted, it catches up by snapshot and
    log, and its LMDB state equals the leader's. Again with mutual TLS between the nodes, so
    FetchSnapshot crosses an authenticated TLS connection. Every process is ended by its
    pid."""
    from cluster_helpers import FAST as FAST_ARGS
    from cluster_helpers import produce, quorum, wait_caught_up, wait_for

    from raftcore.node.local_cluster import LocalCluster

    args = [
        *FAST_ARGS,
        "--state-machine=lmdb",
        "--state-map-size=268435456",
        "--snapshot-min-records=3000",
        "--max-replication-lag-ms=1000",
    ]
    tls_dir = None
    if transport == "mutual-tls":
        tls_dir = tmp_path / "certs"
        make_certs(tls_dir, [1, 2, 3], clients=["test"])
    with LocalCluster(tmp_path / "cluster", node_args=args, tls_dir=tls_dir) as cluster:
        cluster.start()
        security = cluster.client_security(None if tls_dir is None else "test")
        leader = run(quorum(cluster)).leader_id
        follower = next(i for i in cluster.node_ids if i != leader)
        run(produce(cluster.bootstrap, 0, 5000, batch=500, security=security))
        cluster.kill(follower)
        end = max(run(produce(cluster.bootstrap, 5000, 15_000, batch=500, security=security))) + 1
        leader_log = cluster.data_dir(leader) / "log"

        def leader_start() -> int:
            offsets = [int(p.name.split("-")[0]) for p in leader_log.glob("*.checkpoint")]
            return min(offsets, default=0)

        # past everything the follower holds (5,000 records and a control record or two):
        # the lag rule moves it although the dead follower never fetched that far
        wait_for(lambda: leader_start() > 6000, 30, "the leader's log start past 6,000")
        cluster.start_node(follower)
        hw = run(wait_caught_up(cluster, cluster.node_ids, timeout_s=60))
        assert hw >= 20_000
        assert "installed snapshot" in cluster.log_file(follower).read_text()

        def applied(node_id: int) -> int:
            with LmdbStateMachine(cluster.data_dir(node_id) / "state", map_size=256 << 20) as sm:
                return sm.applied_offset

        wait_for(lambda: all(applied(i) >= end for i in cluster.node_ids), 30, "every node applied")
        cluster.stop_all()
    states = []
    for i in cluster.node_ids:
        with LmdbStateMachine(cluster.data_dir(i) / "state", map_size=256 << 20) as sm:
            states.append((sm.applied_offset, sm.items()))
    assert states[0] == states[1] == states[2]
    assert len(states[0][1]) == 20_000
