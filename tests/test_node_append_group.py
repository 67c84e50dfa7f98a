"""Group append (raftcore.node.append_group): the embedding API's append calls of one loop
iteration are written as one batch, and each caller still gets its own consecutive offsets and
its own verdict (committed in its epoch, or NotLeaderError naming its own offsets); one
caller's bad records fail that caller only."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest
from statemachine_helpers import leader_of, node_configs, run

from raftcore.node.node import RaftNode
from raftcore.node.verdicts import AppendVerdicts
from raftcore.raft import Appended, AppendOutcome, LeaderAndEpoch, NotLeaderError
from raftcore.records import encode_batch, iter_batches

pytestmark = pytest.mark.timeout(90)


async def started(tmp_path, count: int = 3) -> list[RaftNode]:  # type: ignore[no-untyped-def]
    nodes = [RaftNode(c) for c in node_configs(tmp_path, count)]
    for n in nodes:
        await n.start()
    return nodes


async def stop_all(nodes: list[RaftNode]) -> None:
    for n in nodes:
        await n.stop(timeout_s=0.5)


@contextlib.asynccontextmanager
async def a_leader(tmp_path):  # type: ignore[no-untyped-def]
    """(the leader, every node) of a started 3-node cluster, stopped at the end."""
    nodes = await started(tmp_path)
    try:
        yield await leader_of(nodes), nodes
    finally:
        await stop_all(nodes)


def batches_in(node: RaftNode, start: int, end: int) -> list[tuple[int, int, list[bytes]]]:
    """(base offset, last offset, values) of the data batches in [start, end)."""
    assert node.log is not None
    out = []
    for batch in iter_batches(bytes(node.log.read(start, 1 << 20))):
        if batch.base_offset >= end:
            break
        if not batch.is_control:
            values = [r.value for r in batch.records()]
            out.append((batch.base_offset, batch.last_offset, values))
    return out


def test_appends_of_one_loop_iteration_are_one_batch_with_each_callers_own_offsets(tmp_path):
    async def main() -> None:
        async with a_leader(tmp_path) as (leader, _nodes):
            sizes = [1 + i % 3 for i in range(40)]
            calls = [
                leader.append([(b"k", b"c%d-%d" % (i, j)) for j in range(n)], wait=True)
                for i, n in enumerate(sizes)
            ]
            results = await asyncio.gather(*calls)
            # each caller's records, in its own consecutive offsets, none shared
            for (first, last), n in zip(results, sizes, strict=True):
                assert last - first + 1 == n
            ordered = sorted(results, key=lambda a: a.first_offset)
            for a, b in itertools.pairwise(ordered):
                assert b.first_offset == a.last_offset + 1
            # ... in one batch of the log, each record where its caller was told it is
            start, end = ordered[0].first_offset, ordered[-1].last_offset + 1
            written = batches_in(leader, start, end)
            assert [(base, last) for base, last, _ in written] == [(start, end - 1)]
            values = written[0][2]
            for i, a in enumerate(results):
                assert values[a.first_offset - start : a.last_offset - start + 1] == [
                    b"c%d-%d" % (i, j) for j in range(sizes[i])
                ]
            assert leader.high_watermark >= end

    run(main())


def test_one_callers_bad_records_fail_that_caller_only(tmp_path):
    async def main() -> None:
        async with a_leader(tmp_path) as (leader, _nodes):
            calls = [
                leader.append([(b"k", b"good-1")], wait=True),
                leader.append([object()], wait=True),  # cannot be encoded
                leader.append([(b"k", b"good-2")], wait=True),
            ]
            good1, bad, good2 = await asyncio.gather(*calls, return_exceptions=True)
            assert isinstance(bad, Exception) and not isinstance(bad, NotLeaderError)
            assert isinstance(good1, Appended) and isinstance(good2, Appended)
            assert good2.first_offset > good1.last_offset

    run(main())


def test_appends_on_a_follower_each_raise_not_leader_naming_the_leader(tmp_path):
    async def main() -> None:
        async with a_leader(tmp_path) as (leader, nodes):
            follower = next(n for n in nodes if n is not leader)
            calls = [follower.append([(b"k", b"x")], wait=True) for _ in range(5)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            for r in results:
                assert isinstance(r, NotLeaderError)
                assert r.leader.leader_id == leader.node_id

    run(main())


def test_an_empty_append_is_refused():
    node = RaftNode.__new__(RaftNode)
    with pytest.raises(ValueError, match="at least one record"):
        asyncio.run(node.append([]))


# ---- the verdict on a group, cut into its callers' parts ----------------------------------------


def test_the_verdict_on_a_groups_batch_is_each_parts_own():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        verdicts = AppendVerdicts("[test]")
        whole = Appended(10, 15, 3, token=7)
        parts = verdicts.track_parts(whole, [(2, True), (1, False), (3, True)], loop)
        assert [(p.first_offset, p.last_offset) for p in parts] == [(10, 11), (12, 12), (13, 15)]
        assert parts[1].token is None  # nobody waits for it: no future kept
        leader = LeaderAndEpoch(2, 4)
        waits = [asyncio.ensure_future(verdicts.wait(p, 5)) for p in (parts[0], parts[2])]
        await asyncio.sleep(0)
        verdicts.deliver([AppendOutcome(whole, 6, leader)])  # NOT_LEADER_OR_FOLLOWER
        for w, p in zip(waits, (parts[0], parts[2]), strict=True):
            with pytest.raises(NotLeaderError, match=f"offsets {p.first_offset}..{p.last_offset} "):
                await w

    asyncio.run(main())


def test_one_parts_timeout_leaves_the_others_waiting_for_the_verdict():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        verdicts = AppendVerdicts("[test]")
        whole = Appended(0, 1, 1, token=1)
        a, b = verdicts.track_parts(whole, [(1, True), (1, True)], loop)
        with pytest.raises(TimeoutError):
            await verdicts.wait(a, 0.01)
        later = asyncio.ensure_future(verdicts.wait(b, 5))
        await asyncio.sleep(0)
        verdicts.deliver([AppendOutcome(whole, 0, LeaderAndEpoch(1, 1))])
        await later  # committed

    asyncio.run(main())


def test_produced_batches_of_one_loop_iteration_share_the_cores_polls(tmp_path):
    """The first append_batches of an iteration polls the core at once; the others of that
    iteration share one poll after it, however many there are."""

    async def main() -> None:
        async with a_leader(tmp_path) as (leader, _nodes):
            core = leader.core
            assert core is not None
            polls = []
            real_poll = core.poll

            def counted(now):  # type: ignore[no-untyped-def]
                polls.append(now)
                return real_poll(now)

            core.poll = counted  # type: ignore[method-assign]
            await asyncio.sleep(0)  # a fresh iteration
            appended = [
                leader.append_batches(
                    encode_batch([(b"k", b"p%d" % i)], base_offset=0, leader_epoch=0)
                )
                for i in range(20)
            ]
            assert len(polls) == 1  # the first, at once
            await asyncio.sleep(0.01)
            core.poll = real_poll  # type: ignore[method-assign]
            # the other 19 shared one (a few more are the followers' fetches and timers)
            assert 2 <= len(polls) < 10, len(polls)
            await asyncio.gather(*(leader.wait_committed(a, 5) for a in appended))

    run(main())
