"""The idempotence window survives leader changes and restarts: every replica keeps the
producer state as its log grows, and the nodes persist it, so a retry of any of a producer's
last sixteen batches (REMEMBERED_BATCHES) is answered as a duplicate with its original
offsets -- by a new leader, and after every node restarts -- without a scan of the whole log."""

from __future__ import annotations

import asyncio

import pytest
from test_node import Collector, _produce_body, configs, leader_of, raw_request, run

from raftcore.error_codes import Errors
from raftcore.kafka.producer_state import REMEMBERED_BATCHES
from raftcore.node.node import RaftNode
from raftcore.protocol.api import ApiKey
from raftcore.records import encode_batch

pytestmark = pytest.mark.timeout(90)

PID = 4242


def batch(seq: int) -> bytes:
    records = [(b"k", b"a%d" % seq), (b"k", b"b%d" % seq)]
    return encode_batch(records, producer_id=PID, producer_epoch=0, base_sequence=seq)


async def produce(node: RaftNode, seq: int) -> tuple[int, int]:
    resp = await raw_request(node, ApiKey.PRODUCE, 10, _produce_body(batch(seq)))
    part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    return part.error_code, part.base_offset


async def caught_up(nodes: list[RaftNode], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len({n.log.end_offset for n in nodes}) != 1:  # type: ignore[union-attr]
        assert loop.time() < deadline, "followers did not catch up"
        await asyncio.sleep(0.02)


async def start(cfgs) -> list[RaftNode]:  # type: ignore[no-untyped-def]
    nodes = [RaftNode(cfg, listener=Collector()) for cfg in cfgs]
    for n in nodes:
        await n.start()
    return nodes


def test_a_retry_of_any_remembered_batch_is_a_duplicate_after_leader_change_and_restart(
    tmp_path,
):
    async def main():
        cfgs = configs(tmp_path)
        nodes = await start(cfgs)
        try:
            leader = await leader_of(nodes)
            placed = {}
            # One batch more than remembered: the first falls out of the window.
            seq_end = 2 * (REMEMBERED_BATCHES + 1)
            for seq in range(0, seq_end, 2):
                error, base = await produce(leader, seq)
                assert error == Errors.NONE
                placed[seq] = base
            await caught_up(nodes)
            # Followers recorded the batches as they copied them.
            for n in nodes:
                assert n.producers.entries() == leader.producers.entries()

            async def retries_answered(at: RaftNode) -> None:
                for seq in range(2, seq_end, 2):
                    assert await produce(at, seq) == (Errors.NONE, placed[seq])
                error, _ = await produce(at, 0)
                assert error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER

            await leader.stop(timeout_s=1.0)
            rest = [n for n in nodes if n is not leader]
            await retries_answered(await leader_of(rest))
            # Every node stops cleanly, then restarts from its producer-state file.
            for n in rest:
                await n.stop(timeout_s=1.0)
            ends = [n.log.end_offset for n in nodes]  # type: ignore[union-attr]
            nodes = await start(cfgs)
            for n, end in zip(nodes, ends, strict=True):
                assert n.producer_tracker.loaded_from == end
                assert n.producer_tracker.replayed_batches == 0
            await retries_answered(await leader_of(nodes))
            written = [b for b in nodes[0].log.batches() if b.producer_id == PID]  # type: ignore[union-attr]
            assert len(written) == REMEMBERED_BATCHES + 1  # the retries appended nothing
        finally:
            for n in nodes:
                await n.stop(timeout_s=0.5)

    run(main())
