"""Retention (retention.ms, retention.bytes): what one check costs the node. Each check reads
every segment's batch headers for its timestamps once (``raftcore.log.segment_times``), then
only what was appended since; the decision itself is a walk over the segment list.

Side by side: the first check over a log of 1 GiB in 64 segments of 16 MiB (every header read:
what a node pays once after it starts), a steady check (nothing new: the cached walk), a check
after one more 126 KB batch, and the decision alone (``retention_target``). No peer: Kafka keeps
a time index per segment instead; the ratio that matters is first check against steady ones.
"""

import pytest
from bench_helpers import RECORDS_100B as RECORDS
from bench_helpers import filled_log

from raftcore.log.segment_times import SegmentTimes
from raftcore.raft.retention import RetentionConfig, SegmentInfo, retention_target
from raftcore.records import encode_batch

GROUP = "a retention check over a log of 64 segments"


@pytest.fixture(scope="module")
def written(request):
    """1 GiB (16 MiB in smoke mode) in 64 segments."""
    total = (16 if request.config.getoption("benchmark_disable") else 1024) << 20
    with filled_log("retention", total, segments=64) as log:
        # keep half: the size rule lets the older half go, the time rule nothing
        yield log, RetentionConfig(retention_ms=7 * 86_400_000, retention_bytes=total // 2)


def _check(times: SegmentTimes, written) -> tuple[int, str] | None:  # type: ignore[no-untyped-def]
    log, config = written
    segments = [SegmentInfo(*s) for s in times.segments(log)]
    now = segments[-1].max_timestamp + 1
    return retention_target(segments, config, now, log.end_offset)


@pytest.mark.benchmark(group=GROUP)
def test_first_check_reads_every_header(benchmark, written):
    result = benchmark.pedantic(lambda: _check(SegmentTimes(), written), rounds=5, iterations=1)
    assert result is not None and result[1] == "retention.bytes"


@pytest.mark.benchmark(group=GROUP)
def test_steady_check(benchmark, written):
    times = SegmentTimes()
    _check(times, written)
    assert benchmark(_check, times, written) is not None


@pytest.mark.benchmark(group=GROUP)
def test_check_after_one_more_batch(benchmark, written):
    times = SegmentTimes()
    _check(times, written)

    def append_then_check():
        log = written[0]
        log.append_as_follower(encode_batch(RECORDS, base_offset=log.end_offset, leader_epoch=1))
        return _check(times, written)

    assert benchmark.pedantic(append_then_check, rounds=50, iterations=1) is not None


@pytest.mark.benchmark(group=GROUP)
def test_decision_alone(benchmark, written):
    log, config = written
    segments = [SegmentInfo(*s) for s in SegmentTimes().segments(log)]
    now = segments[-1].max_timestamp + 1
    assert benchmark(retention_target, segments, config, now, log.end_offset) is not None
