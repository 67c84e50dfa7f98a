"""Produce validation (issue 9): what the leader spends checking every record of a produced
batch of 1,000 records (16-byte key, 100-byte value) before appending it.

Side by side in one group: the native walk (``validate_produced``, no Python object per
record), the decode path it replaced (CRC check, then every record decoded into a Record by
``raftcore.records``), and aiokafka (C extension) reading and CRC-checking the same batch, the
nearest thing a Python peer does. The ratio is in docs/benchmarks.md.

The issue's budget: validation costs under 10% of the cluster's throughput. The cluster
benchmark commits about 600k records/s, about 1.7 us of CPU per record for the whole path;
validating 1,000 records must stay well under 170 us.
"""

import aiokafka.record.default_records as aiokafka_records
import pytest

from raftcore.kafka.produce_validation import validate_produced
from raftcore.records import encode_batch, iter_batches

N = 1000
RECORDS = [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(N)]
BATCH = encode_batch(RECORDS, timestamp_ms=1_700_000_000_000)
ZSTD_BATCH = encode_batch(RECORDS, timestamp_ms=1_700_000_000_000, compression="zstd")
GROUP = "validate a produced batch of 1000 records"


@pytest.mark.benchmark(group=GROUP)
def test_validate_raftcore_native(benchmark):
    assert benchmark(validate_produced, BATCH) is None


def _decode_raftcore(data: bytes) -> int:
    n = 0
    for batch in iter_batches(data):
        for _ in batch.records():  # checks the CRC first
            n += 1
    return n


@pytest.mark.benchmark(group=GROUP)
def test_decode_raftcore_records(benchmark):
    assert benchmark(_decode_raftcore, BATCH) == N


def _aiokafka_read(data: bytes) -> int:
    batch = aiokafka_records.DefaultRecordBatch(data)
    assert batch.validate_crc()
    return sum(1 for _ in batch)


@pytest.mark.benchmark(group=GROUP)
def test_read_aiokafka(benchmark):
    assert benchmark(_aiokafka_read, BATCH) == N


ZSTD_GROUP = "validate a produced zstd batch of 1000 records"


@pytest.mark.benchmark(group=ZSTD_GROUP)
def test_validate_raftcore_native_zstd(benchmark):
    assert benchmark(validate_produced, ZSTD_BATCH) is None


@pytest.mark.benchmark(group=ZSTD_GROUP)
def test_decode_raftcore_records_zstd(benchmark):
    assert benchmark(_decode_raftcore, ZSTD_BATCH) == N
