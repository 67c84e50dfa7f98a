"""Record batch v2: encode 1,000 records (16-byte key, 100-byte value) into one batch, and read
+ CRC-validate + iterate the same batch (touching every key and value).

Peers: aiokafka's builder/reader with its C extension, kafka-python's (pure Python)."""

import aiokafka.record.default_records as aiokafka_records
import kafka.record.default_records as kafka_records
import pytest

from raftcore.records import encode_batch, encode_batch_kv, iter_batches

N = 1000
KEYS = [b"key-%012d" % i for i in range(N)]
VALUES = [bytes([i % 251]) * 100 for i in range(N)]
RECORDS = list(zip(KEYS, VALUES, strict=True))
TS = 1_700_000_000_000
BATCH = encode_batch(RECORDS, timestamp_ms=TS)


def test_aiokafka_uses_its_c_extension():
    assert "_crecords" in aiokafka_records.DefaultRecordBatchBuilder.__module__


@pytest.mark.benchmark(group="encode 1000 records")
def test_encode_raftcore(benchmark):
    out = benchmark(encode_batch, RECORDS, timestamp_ms=TS)
    assert out == BATCH


@pytest.mark.benchmark(group="encode 1000 records")
def test_encode_raftcore_kv_lists(benchmark):
    out = benchmark(encode_batch_kv, KEYS, VALUES, timestamp_ms=TS)
    assert out == BATCH


def _encode_with(module):
    b = module.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(N):
        b.append(i, timestamp=TS, key=KEYS[i], value=VALUES[i], headers=[])
    return bytes(b.build())


@pytest.mark.benchmark(group="encode 1000 records")
def test_encode_aiokafka(benchmark):
    out = benchmark(_encode_with, aiokafka_records)
    assert out[16:] == BATCH[16:]  # same bytes but for the partition leader epoch


@pytest.mark.benchmark(group="encode 1000 records")
def test_encode_kafka_python(benchmark):
    out = benchmark(_encode_with, kafka_records)
    assert out[16:] == BATCH[16:]


def _decode_raftcore():
    n = 0
    for batch in iter_batches(BATCH):
        batch.validate()
        for r in batch.records():
            r.key  # noqa: B018
            r.value  # noqa: B018
            n += 1
    return n


def _decode_with(module):
    batch = module.DefaultRecordBatch(BATCH)
    assert batch.validate_crc()
    n = 0
    for r in batch:
        r.key  # noqa: B018
        r.value  # noqa: B018
        n += 1
    return n


@pytest.mark.benchmark(group="read+validate+iterate 1000 records")
def test_decode_raftcore(benchmark):
    assert benchmark(_decode_raftcore) == N


@pytest.mark.benchmark(group="read+validate+iterate 1000 records")
def test_decode_aiokafka(benchmark):
    assert benchmark(_decode_with, aiokafka_records) == N


@pytest.mark.benchmark(group="read+validate+iterate 1000 records")
def test_decode_kafka_python(benchmark):
    assert benchmark(_decode_with, kafka_records) == N
