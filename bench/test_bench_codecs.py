"""Compressed produce batches, codec by codec: what the leader spends validating a produced
batch of 1,000 records (16-byte key, 100-byte value; the same batch as
``test_bench_validation.py``) when a producer compresses it with gzip, snappy, lz4 or zstd
(decompression included, within the decompression limit), beside aiokafka (C extension)
reading and CRC-checking the same batch. snappy and lz4 are what many Java and librdkafka
producers send; the zstd path is the one they are measured against (docs/benchmarks.md).
"""

import aiokafka.record.default_records as aiokafka_records
import pytest

from raftcore.kafka.produce_validation import validate_produced
from raftcore.records import encode_batch

N = 1000
RECORDS = [(b"key-%012d" % i, bytes([i % 251]) * 100) for i in range(N)]
CODECS = ("gzip", "snappy", "lz4", "zstd")
BATCHES = {c: encode_batch(RECORDS, timestamp_ms=1_700_000_000_000, compression=c) for c in CODECS}
GROUP = "validate a produced compressed batch of 1000 records"


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("codec", CODECS)
def test_validate_raftcore(benchmark, codec):
    benchmark.extra_info["compressed_bytes"] = len(BATCHES[codec])
    assert benchmark(validate_produced, BATCHES[codec]) is None


def _aiokafka_read(data: bytes) -> int:
    batch = aiokafka_records.DefaultRecordBatch(data)
    assert batch.validate_crc()
    return sum(1 for _ in batch)


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("codec", CODECS)
def test_read_aiokafka(benchmark, codec):
    assert benchmark(_aiokafka_read, BATCHES[codec]) == N
