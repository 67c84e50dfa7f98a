"""Benchmarks compare raftcore with a named peer in the same run (pytest-benchmark groups).

Smoke mode (`pytest bench --benchmark-disable`) runs every benchmark once on a reduced input so
CI checks that they work; real figures come from `pytest bench` (see docs/benchmarks.md).
"""

import pytest

import raftcore._native  # noqa: F401  (a missing native build is an error, never a skip)


@pytest.fixture
def scale(benchmark):
    """1.0 for a real run; a small fraction in smoke mode."""
    return 0.01 if benchmark.disabled else 1.0
