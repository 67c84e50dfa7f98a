"""1,000,000 epoch-cache lookups from Python over 1,000 epochs ("where does epoch E end?").

raftcore's native EpochCache.end_offset_for vs the same query written with `bisect` on Python
lists, and with one `numpy.searchsorted` call per lookup."""

import bisect
import random

import numpy as np
import pytest

from raftcore.epoch_cache import EpochCache

EPOCHS = list(range(0, 3000, 3))  # 1,000 epochs with gaps
STARTS = [i * 1000 for i in range(len(EPOCHS))]
LEO = STARTS[-1] + 500
QUERIES = [random.Random(9).randrange(0, 3003) for _ in range(1_000_000)]


def _cache():
    c = EpochCache()
    for e, s in zip(EPOCHS, STARTS, strict=True):
        c.assign(e, s)
    return c


def bisect_end_offset_for(epochs, starts, epoch, leo):
    if epochs[-1] == epoch:
        return epoch, leo
    hi = bisect.bisect_right(epochs, epoch)
    if hi == len(epochs):
        return -1, -1
    if hi == 0:
        return epoch, starts[0]
    return epochs[hi - 1], starts[hi]


def numpy_end_offset_for(epochs, starts, epoch, leo):
    if epochs[-1] == epoch:
        return epoch, leo
    hi = int(np.searchsorted(epochs, epoch, side="right"))
    if hi == len(epochs):
        return -1, -1
    if hi == 0:
        return epoch, int(starts[0])
    return int(epochs[hi - 1]), int(starts[hi])


def _queries(scale):
    return QUERIES[: max(1, int(len(QUERIES) * scale))]


def test_all_three_give_the_same_answers():
    c = _cache()
    ea, sa = np.array(EPOCHS), np.array(STARTS)
    for q in QUERIES[:5000]:
        expected = tuple(c.end_offset_for(q, LEO))
        assert bisect_end_offset_for(EPOCHS, STARTS, q, LEO) == expected
        assert numpy_end_offset_for(ea, sa, q, LEO) == expected


@pytest.mark.benchmark(group="1M epoch lookups")
def test_lookups_raftcore(benchmark, scale):
    lookup = _cache().end_offset_for
    queries = _queries(scale)

    def run():
        for q in queries:
            lookup(q, LEO)

    benchmark.pedantic(run, rounds=5, iterations=1)


@pytest.mark.benchmark(group="1M epoch lookups")
def test_lookups_bisect(benchmark, scale):
    queries = _queries(scale)

    def run():
        for q in queries:
            bisect_end_offset_for(EPOCHS, STARTS, q, LEO)

    benchmark.pedantic(run, rounds=5, iterations=1)


@pytest.mark.benchmark(group="1M epoch lookups")
def test_lookups_numpy_searchsorted(benchmark, scale):
    ea, sa = np.array(EPOCHS), np.array(STARTS)
    queries = _queries(scale)

    def run():
        for q in queries:
            numpy_end_offset_for(ea, sa, q, LEO)

    benchmark.pedantic(run, rounds=3, iterations=1)
