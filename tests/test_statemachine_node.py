"""RaftNode driving a state machine (raftcore.node.applier), in one process on loopback: every
committed record applied once and in order on every replica, off the event loop, only once the
local log has it on disk; a restart resumes from the applied offset; a failed apply stops the
node without skipping anything; the backlog is bounded; linearizable reads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from cluster_helpers import formatted
from statemachine_helpers import Recording, leader_of, node_configs, run

from raftcore.log import SegmentedLog
from raftcore.node.node import RaftNode
from raftcore.node.reads import NotLeaderForReadError
from raftcore.raft.listener import LISTENER_READ_BYTES
from raftcore.statemachine import DictStateMachine, LmdbStateMachine, StateMachineError

pytestmark = pytest.mark.timeout(90)


def lmdb_at(cfg) -> LmdbStateMachine:  # type: ignore[no-untyped-def]
    return LmdbStateMachine(cfg.data_dir / "state", map_size=64 << 20, sync=False)


async def start_all(nodes: list[RaftNode]) -> None:
    for n in nodes:
        await n.start()


async def stop_all(nodes: list[RaftNode]) -> None:
    for n in nodes:
        await n.stop(timeout_s=0.5)


async def write(leader: RaftNode, first: int, count: int, per_batch: int) -> int:
    """Records k<first>..k<first+count-1>, ``per_batch`` a batch, the last waited for; returns
    the end offset."""
    appended = None
    for start in range(first, first + count, per_batch):
        recs = [
            (b"k%d" % i, b"v%d" % i) for i in range(start, min(first + count, start + per_batch))
        ]
        appended = await leader.append(recs, wait=start + per_batch >= first + count)
    assert appended is not None
    return appended.last_offset + 1


def data_offsets(node: RaftNode, start: int, end: int) -> list[int]:
    """The offsets of data records in [start, end) of the node's log."""
    from raftcore.records import iter_batches

    assert node.log is not None
    out = []
    offset = start
    while offset < end:
        for batch in iter_batches(bytes(node.log.read(offset, 1 << 20))):
            if batch.base_offset >= end:
                break
            if not batch.is_control:
                out.extend(o for o in range(batch.base_offset, batch.last_offset + 1) if o >= start)
            offset = batch.last_offset + 1
    return out


def test_every_committed_record_is_applied_once_in_order(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        machines = [Recording(DictStateMachine()) for _ in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            end = await write(leader, 0, 3000, 37)
            for n in nodes:
                await n.wait_applied(end, timeout_s=20)
            want = data_offsets(leader, 0, end)
            assert len(want) == 3000
            for m in machines:
                assert m.offsets == want  # each once, in order
                assert m.inner.data == machines[0].inner.data
                assert m.inner.data[b"k2999"] == b"v2999"
        finally:
            await stop_all(nodes)

    run(main())


def test_a_restarted_node_resumes_from_the_applied_offset_not_zero(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        first = [Recording(lmdb_at(c)) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, first, strict=True)]
        await start_all(nodes)
        leader = await leader_of(nodes)
        end = await write(leader, 0, 500, 50)
        for n in nodes:
            await n.wait_applied(end, timeout_s=20)
        await stop_all(nodes)
        applied = [m.applied_offset for m in first]
        assert all(a >= end for a in applied)
        for m in first:
            m.inner.close()

        second = [Recording(lmdb_at(c)) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, second, strict=True)]
        await start_all(nodes)
        try:
            assert [n.applied_offset for n in nodes] == applied  # ready at once, nothing replayed
            leader = await leader_of(nodes)
            end2 = await write(leader, 500, 100, 10)
            for n in nodes:
                await n.wait_applied(end2, timeout_s=20)
            for m, before in zip(second, applied, strict=True):
                assert m.offsets, "nothing applied after the restart"
                assert m.offsets[0] >= before  # never from 0, never a record twice
                assert m.offsets == data_offsets(leader, before, end2)
                assert len(m.inner) == 600
        finally:
            await stop_all(nodes)
            for m in second:
                m.inner.close()

    run(main())


def test_a_follower_restarted_while_writes_go_on_applies_each_record_once(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        machines = [Recording(lmdb_at(c)) for c in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            i = nodes.index(follower)
            await write(leader, 0, 300, 30)
            await follower.stop()
            machines[i].inner.close()
            await write(leader, 300, 300, 30)  # committed by the other two
            machines[i] = Recording(lmdb_at(cfgs[i]))
            resumed_at = machines[i].applied_offset
            nodes[i] = RaftNode(cfgs[i], state_machine=machines[i])
            await nodes[i].start()
            end = await write(leader, 600, 100, 25)
            await nodes[i].wait_applied(end, timeout_s=20)
            assert machines[i].offsets == data_offsets(leader, resumed_at, end)
            assert dict(machines[i].inner.items()) == dict(
                machines[nodes.index(leader)].inner.items()
            )
        finally:
            await stop_all(nodes)
            for m in machines:
                m.inner.close()

    run(main())


def test_a_state_machine_ahead_of_the_log_refuses_to_start(tmp_path):
    from statemachine_helpers import committed

    async def main():
        (cfg,) = node_configs(tmp_path, count=1)
        sm = DictStateMachine()
        sm.apply([committed([(b"k", b"v")], 1000)])
        node = RaftNode(cfg, state_machine=sm)
        with pytest.raises(StateMachineError, match=r"offset 1001, beyond the log's end 0"):
            await node.start()

    run(main())


def test_a_state_machine_below_the_log_start_without_a_snapshot_refuses_to_start(tmp_path):
    async def main():
        (cfg,) = node_configs(tmp_path, count=1)
        formatted(cfg.data_dir, cfg.node_id, cfg.cluster_id, cfg.voters)
        with SegmentedLog.open(cfg.data_dir / "log") as log:
            log.truncate_fully_and_start_at(500)
        node = RaftNode(cfg, state_machine=DictStateMachine())
        with pytest.raises(StateMachineError, match=r"log starts at 500.*restore a snapshot"):
            await node.start()

    run(main())


class FailOnce:
    """A state machine that raises on the first apply reaching ``offset``."""

    def __init__(self, inner, offset: int) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.offset = offset
        self.failed_batches = None

    @property
    def applied_offset(self) -> int:
        return self.inner.applied_offset

    def apply(self, batches) -> None:  # type: ignore[no-untyped-def]
        if self.failed_batches is None and batches[-1].last_offset >= self.offset:
            self.failed_batches = (batches[0].first_offset, batches[-1].last_offset)
            raise RuntimeError("disk on fire")
        self.inner.apply(batches)

    def snapshot(self, writer) -> int:  # type: ignore[no-untyped-def]
        return self.inner.snapshot(writer)

    def restore(self, reader) -> None:  # type: ignore[no-untyped-def]
        self.inner.restore(reader)


def test_a_failed_apply_stops_the_node_and_a_restart_resumes_at_the_failed_batch(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        sms = [lmdb_at(c) for c in cfgs]
        nodes = [RaftNode(c, state_machine=s) for c, s in zip(cfgs, sms, strict=True)]
        await start_all(nodes)
        leader = await leader_of(nodes)
        i = next(k for k, n in enumerate(nodes) if n is not leader)
        await write(leader, 0, 100, 10)
        await nodes[i].wait_applied(leader.high_watermark, timeout_s=20)
        await nodes[i].stop()
        failing = FailOnce(sms[i], offset=sms[i].applied_offset + 50)
        nodes[i] = RaftNode(cfgs[i], state_machine=failing)
        await nodes[i].start()
        end = await write(leader, 100, 200, 10)
        with pytest.raises(StateMachineError, match="disk on fire"):
            await nodes[i].wait_applied(end, timeout_s=20)
        await nodes[i].stop()  # it is stopping already: this waits for it
        assert not nodes[i]._started
        first, _ = failing.failed_batches
        assert sms[i].applied_offset == first  # nothing of the failed call, nothing skipped
        assert nodes[i].applied_offset == first  # the node claims no more either

        again = Recording(sms[i])
        nodes[i] = RaftNode(cfgs[i], state_machine=again)
        await nodes[i].start()
        try:
            await nodes[i].wait_applied(end, timeout_s=20)
            assert again.offsets[0] == first
            assert again.offsets == data_offsets(leader, first, end)
            assert dict(sms[i].items()) == dict(sms[nodes.index(leader)].items())
        finally:
            await stop_all(nodes)
            for s in sms:
                s.close()

    run(main())


class Slow:
    """A state machine whose applies take ``delay_s`` each; it checks, on every apply, that
    the local log has fsynced what it is given."""

    def __init__(self, inner, delay_s: float) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.delay_s = delay_s
        self.node: RaftNode | None = None
        self.not_durable: list[tuple[int, int]] = []
        self.threads: set[int] = set()
        self.offsets: list[int] = []

    @property
    def applied_offset(self) -> int:
        return self.inner.applied_offset

    def apply(self, batches) -> None:  # type: ignore[no-untyped-def]
        self.threads.add(threading.get_ident())
        assert self.node is not None and self.node.log is not None
        flushed = self.node.log.flushed_offset
        if batches[-1].last_offset >= flushed:
            self.not_durable.append((batches[-1].last_offset, flushed))
        time.sleep(self.delay_s)
        self.inner.apply(batches)
        for b in batches:
            self.offsets.extend(range(b.first_offset, b.last_offset + 1))

    def snapshot(self, writer) -> int:  # type: ignore[no-untyped-def]
        return self.inner.snapshot(writer)

    def restore(self, reader) -> None:  # type: ignore[no-untyped-def]
        self.inner.restore(reader)


def test_applies_run_off_the_event_loop_so_a_slow_apply_stalls_nothing(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        machines = [Slow(DictStateMachine(), delay_s=0.4) for _ in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        for n, m in zip(nodes, machines, strict=True):
            m.node = n
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            loop_thread = threading.get_ident()
            t0 = time.monotonic()
            for i in range(8):  # committed at replication speed, not at apply speed
                await leader.append([(b"k%d" % i, b"v")], wait=True)
            commit_time = time.monotonic() - t0
            lags = []
            for _ in range(20):  # the loop stays responsive while applies sleep
                t = time.monotonic()
                await asyncio.sleep(0.01)
                lags.append(time.monotonic() - t)
            for n in nodes:
                await n.wait_applied(leader.high_watermark, timeout_s=30)
            assert commit_time < 8 * 0.4
            assert max(lags) < 0.3, lags
            assert all(loop_thread not in m.threads for m in machines)
            assert all(len(m.threads) == 1 for m in machines)
            assert all(m.inner.data[b"k7"] == b"v" for m in machines)
        finally:
            await stop_all(nodes)

    run(main())


def test_a_batch_is_applied_only_once_the_local_log_has_fsynced_it(tmp_path):
    """Even with flush="interval" (a minute here): the applier asks for the fsync."""

    async def main():
        cfgs = node_configs(tmp_path, flush="interval", flush_interval_ms=60_000)
        machines = [Slow(DictStateMachine(), delay_s=0) for _ in cfgs]
        nodes = [RaftNode(c, state_machine=m) for c, m in zip(cfgs, machines, strict=True)]
        for n, m in zip(nodes, machines, strict=True):
            m.node = n
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            end = await write(leader, 0, 400, 20)
            for n in nodes:
                await n.wait_applied(end, timeout_s=20)
            assert [m.not_durable for m in machines] == [[], [], []]
        finally:
            await stop_all(nodes)

    run(main())


@pytest.mark.slow
def test_a_full_backlog_pauses_delivery_and_it_resumes_where_it_stopped(tmp_path):
    async def main():
        (cfg,) = node_configs(tmp_path, count=1)
        sm = Slow(DictStateMachine(), delay_s=0.05)
        node = RaftNode(cfg, state_machine=sm)
        sm.node = node
        await node.start()
        try:
            assert node.applier is not None and node.core is not None
            node.applier.max_backlog_bytes = 20_000
            node.applier.max_apply_bytes = 4_000
            await leader_of([node])
            paused_seen = False
            appended = None
            for i in range(40):
                appended = await node.append([(b"k%d-%d" % (i, j), b"x" * 200) for j in range(20)])
                paused_seen |= node.core.feed.paused
                await asyncio.sleep(0)
            assert appended is not None
            while node.applied_offset < appended.last_offset + 1:
                paused_seen |= node.core.feed.paused
                # the limit, plus at most the one read of the core that crossed it
                assert node.applier._queued_bytes <= 20_000 + LISTENER_READ_BYTES
                await asyncio.sleep(0.005)
            assert paused_seen
            assert not node.core.feed.paused
            assert sm.offsets == data_offsets(node, 0, appended.last_offset + 1)
            assert len(sm.inner.data) == 800
        finally:
            await node.stop()

    run(main())


def test_a_linearizable_read_index_comes_from_the_leader_and_followers_name_it(tmp_path):
    async def main():
        cfgs = node_configs(tmp_path)
        nodes = [RaftNode(c, state_machine=DictStateMachine()) for c in cfgs]
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            appended = await leader.append([(b"k", b"v")], wait=True)
            index = await leader.read_index()
            assert index >= appended.last_offset + 1
            await leader.wait_applied(index, timeout_s=10)
            assert leader.state_machine.get(b"k") == b"v"
            follower = next(n for n in nodes if n is not leader)
            with pytest.raises(NotLeaderForReadError) as info:
                await follower.read_index()
            assert info.value.leader.leader_id == leader.node_id
            assert info.value.endpoint == leader.config.listen
            assert f"node {leader.node_id} at {leader.config.listen}" in str(info.value)
        finally:
            await stop_all(nodes)

    run(main())


def test_a_leader_cut_off_from_the_quorum_confirms_no_linearizable_read(tmp_path):
    """The read index needs a majority answering after the read arrived: a leader whose
    voters are gone (a partition, or a successor elected) must not answer from its own high
    watermark. Before the core's quorum round, it answered at once."""

    async def main():
        cfgs = node_configs(tmp_path)
        nodes = [RaftNode(c, state_machine=DictStateMachine()) for c in cfgs]
        await start_all(nodes)
        try:
            leader = await leader_of(nodes)
            await leader.append([(b"k", b"v")], wait=True)
            assert await leader.read_index(timeout_s=5) > 0
            for n in nodes:
                if n is not leader:
                    await n.stop(timeout_s=0.2)
            with pytest.raises((TimeoutError, NotLeaderForReadError)):
                await leader.read_index(timeout_s=0.3)
        finally:
            await stop_all(nodes)

    run(main())


def test_a_node_takes_a_listener_or_a_state_machine_not_both(tmp_path):
    (cfg,) = node_configs(tmp_path, count=1)
    with pytest.raises(ValueError, match="listener= or state_machine="):
        RaftNode(cfg, listener=object(), state_machine=DictStateMachine())


def test_a_state_machine_behind_a_snapshot_loads_it_then_applies_the_rest(tmp_path):
    """KIP-630 through a real node: the log starts at a snapshot past the state machine's
    applied offset; the core's feed loads the snapshot, the applier restores it on its thread,
    and applying goes on from the snapshot's end -- each record once, nothing below it."""
    from raftcore.raft import OffsetAndEpoch
    from raftcore.records import iter_batches

    async def main():
        (cfg,) = node_configs(tmp_path, count=1)
        node = RaftNode(cfg, state_machine=DictStateMachine())
        await node.start()
        await leader_of([node])
        end = await write(node, 0, 300, 30)
        await node.stop()

        # a snapshot at a batch boundary in the middle, with the state as of there, then the
        # log start moved to it (what the leader does once its followers are past it)
        with SegmentedLog.open(cfg.data_dir / "log") as log:
            cut = next(
                b.last_offset + 1
                for b in iter_batches(bytes(log.read(0, 1 << 20)))
                if not b.is_control and b.last_offset + 1 >= 150
            )
            state: dict[bytes, bytes] = {}
            for b in iter_batches(bytes(log.read(0, 1 << 20))):
                if b.base_offset >= cut:
                    break
                if not b.is_control:
                    state.update((r.key, r.value) for r in b.records())
            snapshot_id = OffsetAndEpoch(cut, log.epoch_for_offset(cut - 1))
            writer = log.create_new_snapshot(snapshot_id)
            writer.append(sorted(state.items()))
            writer.freeze()
            assert log.delete_before_snapshot(snapshot_id)
            assert log.log_start_offset == cut

        sm = Recording(DictStateMachine())
        node = RaftNode(cfg, state_machine=sm)
        await node.start()  # applied offset 0 is below the log start, but a snapshot covers it
        try:
            await leader_of([node])
            end2 = await write(node, 300, 50, 10)
            await node.wait_applied(end2, timeout_s=20)
            assert sm.offsets == data_offsets(node, cut, end2)  # nothing below the snapshot
            assert len(sm.inner.data) == 350
            assert sm.inner.data[b"k0"] == b"v0" and sm.inner.data[b"k349"] == b"v349"
            assert end <= cut or sm.inner.data[b"k299"] == b"v299"
        finally:
            await node.stop()

    run(main())


def test_the_applier_restores_a_snapshot_in_order_and_drops_the_batches_it_covers():
    from statemachine_helpers import committed

    from raftcore.node.applier import Applier
    from raftcore.statemachine import MemorySnapshotReader

    class Closing(MemorySnapshotReader):
        closed = False

        def close(self) -> None:
            self.closed = True

    async def main():
        sm = Recording(DictStateMachine())
        pauses: list[bool] = []
        applier = Applier(
            sm,
            durable_end=lambda: 1 << 62,
            request_flush=lambda: None,
            set_paused=pauses.append,
            on_failure=lambda exc: None,
            max_backlog_bytes=1,  # the first batches pause the core's delivery
        )
        applier.start()
        try:
            applier.handle_commit([committed([(b"old", b"x")], 0), committed([(b"a", b"1")], 1)])
            reader = Closing.from_pairs([(b"a", b"snap"), (b"b", b"snap")], end_offset=100)
            applier.handle_load_snapshot(reader)  # before the loop took the batches
            assert applier.applied_offset == 0
            applier.handle_commit([committed([(b"c", b"2")], 100), committed([(b"a", None)], 101)])
            await applier.wait_applied(102, timeout_s=10)
            assert sm.inner.data == {b"b": b"snap", b"c": b"2"}
            assert sm.offsets == [100, 101]  # the covered batches were never applied
            assert reader.closed
            assert pauses == [True, False]  # paused by the backlog, resumed once drained
        finally:
            await applier.close()

    run(main())
