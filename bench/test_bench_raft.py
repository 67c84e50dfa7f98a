"""Core overhead: one Fetch handled by the leader -- validation (cluster id, epoch, divergence
against the epoch cache), the replica's progress and the high watermark, and the read of one
batch -- through ``RaftCore.handle``, on the in-memory log and on the native segmented log.
Target: under 50 microseconds."""

import random

import pytest

from raftcore.log import SegmentedLog
from raftcore.raft import ElectionState, FetchRequest, QuorumConfig, RaftCore, VoteResponse
from raftcore.records import encode_batch
from raftcore.testing import InMemoryLog, MemoryQuorumStateStore

RECORDS = [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(10)]


def leader(log):
    for epoch in (1, 2):
        for _ in range(500):
            log.append_as_follower(
                encode_batch(RECORDS, base_offset=log.end_offset, leader_epoch=epoch)
            )
    log.flush()
    config = QuorumConfig(voters=frozenset({1, 2, 3}), cluster_id="bench")
    store = MemoryQuorumStateStore()  # the replica's quorum-state, as its log has epoch 2
    store.write(ElectionState(epoch=2, voters=config.voters))
    core = RaftCore(1, config, log, store, rng=random.Random(1))
    now = 0
    out = core.start(now)
    now += 2500
    out = core.poll(now)
    sent = list(out.messages)
    for _ in range(4):  # the pre-vote (KIP-996), then the vote
        if core.is_leader():
            break
        requests, sent = sent, []
        for o in requests:
            if type(o.message).__name__ == "VoteRequest":
                reply = VoteResponse(0, -1, core.epoch, True)
                sent += core.handle(o.destination, o.correlation_id, reply, now).messages
        sent += core.poll(now).messages
    assert core.is_leader()
    log.flush()
    core.poll(now)
    return core, now


def bench_fetch(benchmark, log):
    core, now = leader(log)
    # a follower halfway through epoch 2's records: valid, one batch back
    request = FetchRequest(
        "bench", 2, 7000, 2, core.epoch, max_wait_ms=0, max_bytes=1, is_follower=True
    )

    def handle():
        return core.handle(2, 1, request, now)

    out = benchmark(handle)
    [response] = [o.message for o in out.messages]
    assert response.error_code == 0 and len(response.records) > 1000


@pytest.mark.benchmark(group="leader handles one fetch")
def test_fetch_on_leader_in_memory_log(benchmark):
    bench_fetch(benchmark, InMemoryLog())


@pytest.mark.benchmark(group="leader handles one fetch")
def test_fetch_on_leader_segmented_log(benchmark, tmp_path):
    log = SegmentedLog.open(tmp_path, segment_bytes=1 << 20)
    try:
        bench_fetch(benchmark, log)
    finally:
        log.close()
