"""CRC-32C over 64 MiB: raftcore vs the `crc32c` package (both hardware-accelerated)."""

import crc32c as crc32c_package
import numpy as np
import pytest

import raftcore


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(1).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()


@pytest.mark.benchmark(group="crc32c 64 MiB")
def test_crc32c_raftcore(benchmark, data):
    assert benchmark(raftcore.crc32c, data) == crc32c_package.crc32c(data)


@pytest.mark.benchmark(group="crc32c 64 MiB")
def test_crc32c_package(benchmark, data):
    assert benchmark(crc32c_package.crc32c, data) == raftcore.crc32c(data)
